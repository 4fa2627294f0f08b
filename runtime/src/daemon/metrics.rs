//! Prometheus text exposition of a [`StatusReport`], and the one-endpoint HTTP responder.
//!
//! Hand-written over `std::net` instead of an HTTP crate: there is one GET endpoint, no
//! keep-alive, no TLS, no routing; a dependency would bring more code than this file. It listens
//! on loopback only (the server refuses other addresses): the metrics carry pids and commands.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::control::StatusReport;

fn label(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " ")
}

/// The metrics as Prometheus text format 0.0.4.
pub fn render(st: &StatusReport) -> String {
    let mut o = String::new();
    let c = &st.counters;
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = writeln!(o, "# HELP vitamin_daemon_{name} {help}\n# TYPE vitamin_daemon_{name} counter");
        let _ = writeln!(o, "vitamin_daemon_{name} {v}");
    };
    counter("ops_bound_total", "Ops bound to a pool node.", c.bound);
    counter("completions_total", "Completions processed.", c.completions);
    counter("not_run_total", "Bound ops returned not run: their node refused the launch.", c.not_run);
    counter("continued_total", "Ops continued locally on a held lease.", c.continued);
    counter("refused_records_total", "Records that failed validation.", c.refused_records);
    counter("clients_disconnected_total", "Clients disconnected for misbehaving.", c.clients_disconnected);
    counter(
        "connections_refused_total",
        "Connections refused (credentials, version, topology).",
        c.connections_refused,
    );
    counter("wakeups_total", "Futex wake-ups sent to sleeping clients.", c.wakeups_sent);
    counter("loop_sleeps_total", "Times the decision loop slept.", c.loop_sleeps);
    counter(
        "deferred_ring_full_total",
        "Bindings deferred because a client's down ring was full.",
        c.deferred_ring_full,
    );
    counter("loop_cpu_ns_total", "Decision-loop thread CPU time, ns.", c.cpu_ns);
    let _ = writeln!(o, "# HELP vitamin_daemon_clients Registered clients.\n# TYPE vitamin_daemon_clients gauge");
    let _ = writeln!(o, "vitamin_daemon_clients {}", st.clients.len());
    let gauges: [(&str, &str); 6] = [
        ("client_ops_bound_total", "Ops bound per client."),
        ("client_leases", "Nodes leased, draining or reserved per client."),
        ("client_units", "Units held per client."),
        ("client_outstanding", "Ops bound and not completed per client."),
        ("ring_depth_up", "Records waiting in a client's up ring."),
        ("ring_depth_down", "Bindings waiting in a client's down ring."),
    ];
    for (name, help) in gauges {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(o, "# HELP vitamin_daemon_{name} {help}\n# TYPE vitamin_daemon_{name} {kind}");
        for cl in &st.clients {
            let v = match name {
                "client_ops_bound_total" => cl.bound as f64,
                "client_leases" => cl.leases.len() as f64,
                "client_units" => cl.units as f64,
                "client_outstanding" => f64::from(cl.outstanding),
                "ring_depth_up" => f64::from(cl.up_depth),
                _ => f64::from(cl.down_depth),
            };
            let _ = writeln!(
                o,
                "vitamin_daemon_{name}{{client=\"{}\",pid=\"{}\",name=\"{}\",device=\"{}\"}} {v}",
                cl.id,
                cl.pid,
                label(&cl.name),
                cl.device
            );
        }
    }
    let _ = writeln!(o, "# HELP vitamin_daemon_units_in_use Units in active nodes per device.\n# TYPE vitamin_daemon_units_in_use gauge");
    for d in &st.devices {
        let _ = writeln!(o, "vitamin_daemon_units_in_use{{device=\"{}\"}} {}", d.device, d.units_in_use);
    }
    let _ = writeln!(
        o,
        "# HELP vitamin_daemon_active_nodes Active nodes per device.\n# TYPE vitamin_daemon_active_nodes gauge"
    );
    for d in &st.devices {
        let _ = writeln!(o, "vitamin_daemon_active_nodes{{device=\"{}\"}} {}", d.device, d.active.len());
    }
    o
}

/// Answers one HTTP request on `s`: `GET /metrics` (or `/`) gets the text, anything else 404.
pub fn respond(mut s: TcpStream, st: &StatusReport) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
    let mut req = [0u8; 1024];
    let n = s.read(&mut req).unwrap_or(0);
    let line = String::from_utf8_lossy(&req[..n]);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let ok = line.starts_with("GET ") && (path == "/metrics" || path == "/");
    let (status, body) = if ok { ("200 OK", render(st)) } else { ("404 Not Found", "GET /metrics\n".to_owned()) };
    let _ = write!(
        s,
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::control::ClientStatus;

    #[test]
    fn renders_counters_and_per_client_gauges() {
        let mut st = StatusReport::default();
        st.counters.bound = 7;
        st.clients.push(ClientStatus { id: 3, pid: 42, name: "a\"b".into(), units: 16, ..Default::default() });
        let t = render(&st);
        assert!(t.contains("vitamin_daemon_ops_bound_total 7\n"));
        assert!(t.contains("vitamin_daemon_client_units{client=\"3\",pid=\"42\",name=\"a\\\"b\",device=\"0\"} 16\n"));
    }
}
