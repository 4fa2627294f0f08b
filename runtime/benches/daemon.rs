//! Ready record -> binding round trip through the daemon, with 1, 2, 4 and 8 client processes,
//! and the daemon's CPU time per op. Results: docs/results/daemon-bench.md.
//!
//! `cargo bench -p vitamin-runtime --bench daemon` (`VITAMIN_DAEMON_BENCH_OPS`, default 20000
//! round trips per client). The daemon runs in this process (Throughput-Oriented, simulated H200
//! topology); each client is this binary re-executed, doing one op at a time: stamp, push a ready
//! record, flush, wait for its binding, stamp, push the completion. So every round trip includes
//! both sleeps and both futex wake-ups (client -> daemon, daemon -> client) whenever a side was
//! idle. Pooled percentiles over all clients' samples.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::Backend;
use vitamin_runtime::daemon::client::{ConnectOptions, DaemonClient};
use vitamin_runtime::daemon::now_ns;
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::daemon::wire::{kernel_hash, ReadyRecord};
use vitamin_runtime::policy::{ClientClass, PolicyKind};

const CHILD: &str = "VITAMIN_DAEMON_BENCH_CHILD";

fn child() {
    let socket = PathBuf::from(std::env::var("VITAMIN_DAEMON_BENCH_SOCKET").unwrap());
    let out = PathBuf::from(std::env::var("VITAMIN_DAEMON_BENCH_OUT").unwrap());
    let ops: u64 = std::env::var("VITAMIN_DAEMON_BENCH_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    let mut c = DaemonClient::connect(ConnectOptions {
        socket,
        name: "bench".into(),
        device: 0,
        topology: SimBackend::preset("h200").unwrap().topology().clone(),
        class: ClientClass::BestEffort,
        lanes: 1,
        timeout: Duration::from_secs(5),
    })
    .expect("connect");
    let mut lat = Vec::with_capacity(ops as usize);
    let mut got = Vec::new();
    for op in 1..=ops {
        let t0 = now_ns();
        let r = ReadyRecord {
            op,
            flags: 0,
            min_units: 0,
            kernel: kernel_hash("bench_kernel"),
            grid: [132, 1, 1],
            block: [256, 1, 1],
            smem: 0,
            resident_per_unit: 0,
            ready_since_ns: t0,
            deadline_ns: None,
        };
        assert!(c.ready(r).unwrap());
        c.flush();
        got.clear();
        while got.is_empty() {
            c.bindings(&mut got, Duration::from_secs(5)).expect("binding");
        }
        lat.push(now_ns() - t0);
        assert!(c.complete(op, now_ns()).unwrap());
        c.flush();
    }
    let bytes: Vec<u8> = lat.iter().flat_map(|l| l.to_le_bytes()).collect();
    std::fs::write(out, bytes).unwrap();
    c.goodbye().ok();
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize] as f64 / 1e3
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let ops: u64 = std::env::var("VITAMIN_DAEMON_BENCH_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(20_000);
    println!("daemon round trip (ready record -> binding), {ops} sequential ops per client");
    println!(
        "{:>7} {:>9} {:>9} {:>9} {:>9} {:>14} {:>10}",
        "clients", "p50 us", "p99 us", "mean us", "max us", "daemon cpu/op", "wake-ups"
    );
    for n in [1usize, 2, 4, 8] {
        let dir = std::env::temp_dir().join(format!("vitamin-bench-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
        cfg.decide.policy = PolicyKind::Throughput;
        let d = Daemon::start(cfg).expect("daemon");
        let cpu0 = {
            std::thread::sleep(Duration::from_millis(150));
            d.status().counters.cpu_ns
        };
        let kids: Vec<_> = (0..n)
            .map(|i| {
                Command::new(std::env::current_exe().unwrap())
                    .env(CHILD, "1")
                    .env("VITAMIN_DAEMON_BENCH_SOCKET", d.socket())
                    .env("VITAMIN_DAEMON_BENCH_OUT", dir.join(format!("lat{i}")))
                    .env("VITAMIN_DAEMON_BENCH_OPS", ops.to_string())
                    .stdout(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut k in kids {
            assert!(k.wait().unwrap().success(), "a bench client failed");
        }
        std::thread::sleep(Duration::from_millis(250));
        let st = d.status();
        let mut lat = Vec::new();
        for i in 0..n {
            let mut b = Vec::new();
            std::fs::File::open(dir.join(format!("lat{i}"))).unwrap().read_to_end(&mut b).unwrap();
            lat.extend(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())));
        }
        lat.sort_unstable();
        let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64 / 1e3;
        let per_op = (st.counters.cpu_ns - cpu0) as f64 / st.counters.bound.max(1) as f64 / 1e3;
        println!(
            "{n:>7} {:>9.1} {:>9.1} {mean:>9.1} {:>9.1} {:>11.2} us {:>10}",
            pct(&lat, 0.5),
            pct(&lat, 0.99),
            *lat.last().unwrap() as f64 / 1e3,
            per_op,
            st.counters.wakeups_sent
        );
        d.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
