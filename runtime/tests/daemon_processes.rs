//! The daemon with several real client processes, real sockets and shared memory, no GPU.
//!
//! The daemon runs in this test process (its own threads); each client is this test binary
//! re-executed as a child (`child_main`, selected by `VITAMIN_DAEMON_TEST_CHILD`). A client
//! "executes" a binding by sleeping, records when it held it, and reports the completion. Every
//! wait has a deadline and every child is killed at the end of its test (watchdogs).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Topology};
use vitamin_runtime::daemon::client::{Binding, ConnectOptions, DaemonClient};
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::daemon::transport::AllowList;
use vitamin_runtime::daemon::wire::{kernel_hash, ReadyRecord, Up};
use vitamin_runtime::daemon::{client, now_ns, DaemonError};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::{NodeId, Pool};

const CHILD_ENV: &str = "VITAMIN_DAEMON_TEST_CHILD";
const CHILD_LIMIT: Duration = Duration::from_secs(60);
/// Op ids of locally continued ops start here.
const CONTINUED_BASE: u64 = 1_000_000;

fn h200() -> Topology {
    SimBackend::preset("h200").unwrap().topology().clone()
}

fn socket_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vitamin-dt-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn start(tag: &str, policy: PolicyKind, tune: impl FnOnce(&mut DaemonConfig)) -> (Daemon, PathBuf) {
    let dir = socket_dir(tag);
    let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
    cfg.decide.policy = policy;
    tune(&mut cfg);
    (Daemon::start(cfg).expect("daemon starts"), dir)
}

fn spawn(role: &str, socket: &Path, out: &Path, tune: impl FnOnce(&mut Command)) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--ignored", "--exact", "child_main", "--nocapture", "--test-threads=1", "-q"])
        .env(CHILD_ENV, role)
        .env("VITAMIN_DT_SOCKET", socket)
        .env("VITAMIN_DT_OUT", out)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    tune(&mut c);
    c.spawn().expect("spawn child")
}

/// Waits for a child with a deadline; kills it when the deadline passes. Returns (success, stdout).
fn wait(mut child: Child, limit: Duration) -> (bool, String) {
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let mut s = String::new();
            if let Some(mut o) = child.stdout.take() {
                std::io::Read::read_to_string(&mut o, &mut s).ok();
            }
            return (st.success(), s);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return (false, "watchdog: child killed".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads the child's stdout up to the first line starting with `prefix` (libtest prints its own
/// lines too).
fn read_marker(r: &mut impl std::io::BufRead, prefix: &str) -> String {
    let mut l = String::new();
    loop {
        l.clear();
        if r.read_line(&mut l).unwrap_or(0) == 0 {
            return String::new();
        }
        if l.starts_with(prefix) {
            return l.trim().to_owned();
        }
    }
}

fn poll_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

// ---- the child side ------------------------------------------------------------------------

fn opts(name: &str) -> ConnectOptions {
    ConnectOptions {
        socket: PathBuf::from(std::env::var("VITAMIN_DT_SOCKET").unwrap()),
        name: name.into(),
        device: 0,
        topology: h200(),
        class: ClientClass::BestEffort,
        lanes: 2,
        timeout: Duration::from_secs(5),
    }
}

fn rec(op: u64, grid: u32) -> ReadyRecord {
    ReadyRecord {
        op,
        flags: 0,
        min_units: 0,
        kernel: kernel_hash("vector_add"),
        grid: [grid, 1, 1],
        block: [256, 1, 1],
        smem: 0,
        resident_per_unit: 0,
        ready_since_ns: now_ns(),
        deadline_ns: None,
    }
}

/// Runs `total` ops with up to `inflight` ready-or-running, executing each for `exec_us`.
/// Writes `op node start end` lines to the output file.
fn worker(c: &mut DaemonClient, first_op: u64, total: u64, inflight: usize, exec_us: u64, log: &mut String) {
    let deadline = Instant::now() + CHILD_LIMIT;
    let (mut next, mut done) = (first_op, 0u64);
    let mut got: Vec<Binding> = Vec::new();
    while done < total {
        assert!(Instant::now() < deadline, "worker watchdog");
        while c.pending() + c.outstanding() < inflight && next < first_op + total {
            if !c.ready(rec(next, 64 + (next % 4) as u32 * 64)).unwrap() {
                break;
            }
            next += 1;
        }
        c.flush();
        got.clear();
        c.bindings(&mut got, Duration::from_secs(1)).unwrap();
        for b in &got {
            let t0 = now_ns();
            std::thread::sleep(Duration::from_micros(exec_us));
            let t1 = now_ns();
            log.push_str(&format!("{} {} {t0} {t1}\n", b.op, b.node));
            // Every 10th op: lane continuation, an extra op submitted locally behind this one on
            // its lane, reported before this op's completion.
            let cont = CONTINUED_BASE + b.op;
            let continued = b.op % 10 == 0
                && c.may_continue(b.node, b.lane)
                && c.continued(cont, b.node, b.lane, t1, false).unwrap();
            assert!(c.complete(b.op, t1).unwrap(), "up ring full");
            if continued {
                std::thread::sleep(Duration::from_micros(exec_us));
                let t2 = now_ns();
                log.push_str(&format!("{cont} {} {t1} {t2}\n", b.node));
                assert!(c.complete(cont, t2).unwrap(), "up ring full");
            }
            done += 1;
        }
        c.flush();
    }
}

fn wait_disconnected(c: &mut DaemonClient) -> String {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(20) {
        if !c.check_daemon() {
            return c.safe_mode().unwrap_or_default().to_owned();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    "still connected".into()
}

fn run_child(role: &str) {
    let out = PathBuf::from(std::env::var("VITAMIN_DT_OUT").unwrap());
    let mut log = String::new();
    let say = |s: &str| {
        println!("{s}");
        std::io::stdout().flush().ok();
    };
    match role {
        "worker" => {
            let mut c = DaemonClient::connect(opts("worker")).unwrap();
            worker(&mut c, 1, 150, 4, 200, &mut log);
            c.goodbye().unwrap();
        }
        "holder" => {
            // Takes leases and never completes: to be SIGKILLed.
            let mut c = DaemonClient::connect(opts("holder")).unwrap();
            for op in 1..=3 {
                c.ready(rec(op, 1024)).unwrap();
            }
            c.flush();
            let mut got = Vec::new();
            let t = Instant::now();
            while got.len() < 3 && t.elapsed() < CHILD_LIMIT {
                c.bindings(&mut got, Duration::from_millis(100)).unwrap();
            }
            say("HOLDING");
            std::thread::sleep(CHILD_LIMIT);
        }
        "stalled" => {
            // Sends ready ops and never reads a binding.
            let mut c = DaemonClient::connect(opts("stalled")).unwrap();
            for op in 1..=12 {
                c.ready(rec(op, 64)).unwrap();
            }
            c.flush();
            say("STALLED");
            std::thread::sleep(CHILD_LIMIT);
        }
        "torn" | "bad_node" | "unknown_op" | "bad_flags" | "flood" | "bad_index" | "bad_continue" => {
            let mut c = DaemonClient::connect(opts(role)).unwrap();
            match role {
                "torn" => {
                    let mut w = Up::Ready(rec(1, 64)).encode().to_words();
                    w[3] ^= 1 << 7; // the producer "published before finishing the write"
                    c.stage_raw(&w).unwrap();
                }
                "bad_node" => {
                    c.stage_raw(
                        &Up::Completion { op: 1, node: 4000, completed_ns: 0, not_run: false }.encode().to_words(),
                    )
                    .unwrap();
                }
                "unknown_op" => {
                    c.stage_raw(
                        &Up::Completion { op: 77, node: 0, completed_ns: 0, not_run: false }.encode().to_words(),
                    )
                    .unwrap();
                }
                "bad_continue" => {
                    // A continuation on a node it holds nothing of, behind no outstanding op.
                    let up = Up::Continued { op: 5, node: 3, lane: 0, submitted_ns: 0, graph: false };
                    c.stage_raw(&up.encode().to_words()).unwrap();
                }
                "bad_flags" => {
                    let mut r = Up::Ready(rec(1, 64)).encode();
                    r.flags = 0x80;
                    c.stage_raw(&r.to_words()).unwrap();
                }
                "flood" => {
                    for op in 1..=400 {
                        if !c.stage_raw(&Up::Ready(rec(op, 64)).encode().to_words()).unwrap() {
                            c.flush();
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                "bad_index" => {
                    let up = c.region().up();
                    let h = up.ctl().head.0.load(std::sync::atomic::Ordering::SeqCst);
                    up.ctl().tail.0.store(h.wrapping_add(up.capacity() + 5), std::sync::atomic::Ordering::SeqCst);
                }
                _ => unreachable!(),
            }
            if role != "bad_index" {
                // (A publish would overwrite the scribbled tail with the real one.)
                c.flush();
            }
            say(&format!("DISCONNECTED: {}", wait_disconnected(&mut c)));
        }
        "shrink" => {
            // Try to shrink the sealed memfd under the daemon's mapping.
            let c = DaemonClient::connect(opts("shrink")).unwrap();
            let mut result = String::from("no memfd found");
            for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
                let link = std::fs::read_link(e.path()).unwrap_or_default();
                if link.to_string_lossy().contains("memfd:vitamin-client") {
                    let f = std::fs::OpenOptions::new().read(true).write(true).open(e.path()).unwrap();
                    result = match f.set_len(0) {
                        Ok(()) => "SHRUNK".into(),
                        Err(e) => format!("REFUSED: {e}"),
                    };
                }
            }
            say(&result);
            drop(c);
        }
        "wrong_uid" => match DaemonClient::connect(opts("wrong-uid")) {
            Err(DaemonError::Refused(why)) => say(&format!("REFUSED: {why}")),
            Err(e) => say(&format!("ERROR: {e}")),
            Ok(_) => say("ACCEPTED"),
        },
        "resilient" => {
            // Holds two bound ops while the daemon restarts, then re-registers and finishes.
            let mut c = DaemonClient::connect(opts("resilient")).unwrap();
            c.ready(rec(1, 64)).unwrap();
            c.ready(rec(2, 64)).unwrap();
            c.flush();
            let mut got = Vec::new();
            let t = Instant::now();
            while got.len() < 2 && t.elapsed() < CHILD_LIMIT {
                c.bindings(&mut got, Duration::from_millis(100)).unwrap();
            }
            say("HOLDING");
            while c.check_daemon() {
                assert!(t.elapsed() < CHILD_LIMIT, "the daemon never went away");
                std::thread::sleep(Duration::from_millis(5));
            }
            let held = c.held_leases();
            assert!(got.iter().all(|b| c.may_continue(b.node, b.lane)), "safe mode keeps the held leases");
            assert!(!c.may_continue(58, 0) || held.iter().any(|h| h.node == 58), "no new nodes in safe mode");
            say(&format!("SAFE: {} held", held.len()));
            let readd = loop {
                match c.reconnect() {
                    Ok(r) => break r,
                    Err(_) if t.elapsed() < CHILD_LIMIT => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => panic!("never re-registered: {e}"),
                }
            };
            assert!(readd.is_empty());
            say(&format!("ADOPTED: {:?}", c.welcome().adopted));
            for b in &got {
                assert!(c.complete(b.op, now_ns()).unwrap());
            }
            c.flush();
            worker(&mut c, 10, 5, 2, 100, &mut log);
            c.goodbye().unwrap();
            say("DONE");
        }
        r => panic!("unknown child role {r}"),
    }
    // (A child running as another uid may not write here; only workers' logs are checked.)
    let _ = std::fs::write(out, log);
}

/// Entry point of the child processes (not a test on its own: ignored, and it returns at once
/// unless `VITAMIN_DAEMON_TEST_CHILD` names a role).
#[test]
#[ignore = "child process entry point"]
fn child_main() {
    if let Ok(role) = std::env::var(CHILD_ENV) {
        run_child(&role);
    }
}

// ---- checks --------------------------------------------------------------------------------

/// (client, op, node, start, end) from each worker's log.
fn read_logs(paths: &[(usize, PathBuf)]) -> Vec<(usize, u64, u16, u64, u64)> {
    let mut v = Vec::new();
    for (c, p) in paths {
        for line in std::fs::read_to_string(p).unwrap_or_default().lines() {
            let f: Vec<u64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
            v.push((*c, f[0], f[1] as u16, f[2], f[3]));
        }
    }
    v
}

/// Ops that were bound by the daemon (not continued locally).
fn primary(recs: &[(usize, u64, u16, u64, u64)]) -> usize {
    recs.iter().filter(|r| r.1 < CONTINUED_BASE).count()
}

/// No two clients held overlapping units at the same time.
fn assert_disjoint_in_time(recs: &[(usize, u64, u16, u64, u64)]) {
    let pool = Pool::build(&h200());
    for (i, a) in recs.iter().enumerate() {
        for b in &recs[i + 1..] {
            if a.0 == b.0 {
                continue;
            }
            let overlap_t = a.3 < b.4 && b.3 < a.4;
            let ua = pool.node(NodeId(a.2)).units;
            let ub = pool.node(NodeId(b.2)).units;
            assert!(
                !(overlap_t && ua.intersects(&ub)),
                "client {} op {} on node {} and client {} op {} on node {} overlap in units and time",
                a.0,
                a.1,
                a.2,
                b.0,
                b.1,
                b.2
            );
        }
    }
}

fn run_workers(tag: &str, policy: PolicyKind, n: usize) {
    let (d, dir) = start(tag, policy, |_| {});
    let mut kids = Vec::new();
    for i in 0..n {
        let out = dir.join(format!("w{i}.log"));
        kids.push((i, out.clone(), spawn("worker", d.socket(), &out, |_| {})));
    }
    let mut paths = Vec::new();
    for (i, out, k) in kids {
        let (ok, s) = wait(k, CHILD_LIMIT);
        assert!(ok, "worker {i} failed: {s}");
        paths.push((i, out));
    }
    let recs = read_logs(&paths);
    let continued = recs.iter().filter(|r| r.1 >= CONTINUED_BASE).count();
    assert_eq!(recs.len() - continued, 150 * n, "every op was bound and completed");
    assert_disjoint_in_time(&recs);
    let nodes: std::collections::BTreeSet<u16> = recs.iter().map(|r| r.2).collect();
    assert!(
        poll_until(Duration::from_secs(5), || d.status().clients.is_empty()),
        "clients that said goodbye are removed"
    );
    let st = d.status();
    assert!(st.devices[0].active.is_empty(), "every lease was freed: {:?}", st.devices[0].active);
    assert_eq!(st.counters.bound, 150 * n as u64);
    // A worker exits right after its goodbye; when the daemon sees the exit before it drained the
    // worker's last ring records, it discards them (an exited client's work died with it), so up
    // to the last few continued records of each worker may go uncounted.
    let registered = st.counters.continued;
    assert!(
        registered <= continued as u64 && registered + 2 * n as u64 >= continued as u64,
        "continued ops registered: {registered} of {continued} reported by {n} workers"
    );
    if policy != PolicyKind::Throughput {
        // (Throughput-Oriented's fairness reclaim may close the gates a client would continue on.)
        assert!(continued > 0, "some ops were continued on a held lease");
    }
    println!(
        "{policy}: {n} clients, {} ops ({continued} continued locally), {} distinct nodes used, {} wake-ups sent",
        recs.len(),
        nodes.len(),
        st.counters.wakeups_sent
    );
    d.shutdown();
}

#[test]
fn throughput_bindings_respect_leases_across_processes() {
    run_workers("tp", PolicyKind::Throughput, 3);
}

#[test]
fn chaos_static_exclusive_across_processes() {
    run_workers("chaos", PolicyKind::Chaos, 3);
    run_workers("static", PolicyKind::Static, 2);
    run_workers("excl", PolicyKind::Exclusive, 2);
}

#[test]
fn sigkill_frees_leases_and_the_others_continue() {
    let (d, dir) = start("kill", PolicyKind::Throughput, |_| {});
    let out = dir.join("h.log");
    let mut holder = spawn("holder", d.socket(), &out, |_| {});
    let line = read_marker(&mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()), "HOLDING");
    assert_eq!(line, "HOLDING");
    let pid = holder.id();
    assert!(poll_until(Duration::from_secs(5), || d.status().clients.iter().any(|c| c.pid == pid && c.units > 0)));
    let w_out = dir.join("w.log");
    let worker = spawn("worker", d.socket(), &w_out, |_| {});
    let t0 = Instant::now();
    holder.kill().unwrap(); // SIGKILL
    let freed = poll_until(Duration::from_secs(5), || {
        let st = d.status();
        !st.clients.iter().any(|c| c.pid == pid)
            && !st.devices[0].active.iter().any(|a| a.contains(&format!("client {}", 1)))
    });
    let observed = t0.elapsed();
    let _ = holder.wait();
    assert!(freed, "the killed client's leases were freed");
    let inside = d.status().counters.last_hangup_to_free_ns.expect("measured");
    println!(
        "SIGKILL -> leases freed: {:.2} ms observed from the test (status polling), {:.3} ms from hang-up inside the daemon",
        observed.as_secs_f64() * 1e3,
        inside as f64 / 1e6
    );
    assert!(observed < Duration::from_secs(1), "freed within a second");
    let (ok, s) = wait(worker, CHILD_LIMIT);
    assert!(ok, "the other client continued: {s}");
    assert_eq!(primary(&read_logs(&[(0, w_out)])), 150);
    d.shutdown();
}

#[test]
fn hostile_clients_are_disconnected_alone() {
    let (d, dir) = start("hostile", PolicyKind::Throughput, |c| {
        // The stalled client may hold every unit it was given until it is cut off.
        c.decide.stall_timeout_ns = 1_000_000_000;
        c.decide.max_ready = 32;
        c.decide.max_outstanding = 8;
        c.decide.down_capacity = 4;
    });
    let mut workers = Vec::new();
    for i in 0..2 {
        let out = dir.join(format!("w{i}.log"));
        workers.push((i, out.clone(), spawn("worker", d.socket(), &out, |_| {})));
    }
    let stalled = spawn("stalled", d.socket(), &dir.join("s.log"), |_| {});
    let kinds = ["torn", "bad_node", "unknown_op", "bad_flags", "flood", "bad_index", "bad_continue"];
    let mut hostile = Vec::new();
    for k in kinds {
        hostile.push((k, spawn(k, d.socket(), &dir.join(format!("{k}.log")), |_| {})));
    }
    let shrink = spawn("shrink", d.socket(), &dir.join("shrink.log"), |_| {});
    for (k, h) in hostile {
        let (ok, s) = wait(h, CHILD_LIMIT);
        assert!(ok, "{k}: {s}");
        assert!(s.contains("DISCONNECTED: disconnected"), "{k} was disconnected: {s}");
        println!("{k}: {}", s.trim());
    }
    let (ok, s) = wait(shrink, CHILD_LIMIT);
    assert!(ok && s.contains("REFUSED"), "the sealed memfd cannot be shrunk: {s}");
    println!("shrink: {}", s.trim());
    let mut paths = Vec::new();
    for (i, out, w) in workers {
        let (ok, s) = wait(w, CHILD_LIMIT);
        assert!(ok, "worker {i} kept working next to the hostile and stalled clients: {s}");
        paths.push((i, out));
    }
    assert_eq!(primary(&read_logs(&paths)), 300);
    let st = d.status();
    assert!(st.counters.clients_disconnected >= kinds.len() as u64, "{:?}", st.counters);
    let (_, _) = wait(stalled, Duration::from_millis(1)); // kills it
    assert!(poll_until(Duration::from_secs(5), || d.status().clients.is_empty()));
    assert!(d.status().devices[0].active.is_empty());
    d.shutdown();
}

#[test]
fn a_stalled_client_is_cut_off_and_the_others_get_the_device() {
    let (d, dir) = start("stall", PolicyKind::Throughput, |c| c.decide.stall_timeout_ns = 300_000_000);
    let mut stalled = spawn("stalled", d.socket(), &dir.join("s.log"), |_| {});
    let line = read_marker(&mut std::io::BufReader::new(stalled.stdout.as_mut().unwrap()), "STALLED");
    assert_eq!(line, "STALLED");
    let pid = stalled.id();
    // Alone, it is given nodes for all its ops and never takes the bindings.
    assert!(poll_until(Duration::from_secs(5), || d.status().clients.iter().any(|c| c.pid == pid && c.units > 0)));
    let w_out = dir.join("w.log");
    let worker = spawn("worker", d.socket(), &w_out, |_| {});
    let (ok, s) = wait(worker, CHILD_LIMIT);
    assert!(ok, "the worker finished once the stalled client was cut off: {s}");
    assert_eq!(primary(&read_logs(&[(0, w_out)])), 150);
    assert!(!d.status().clients.iter().any(|c| c.pid == pid), "the stalled client was disconnected");
    let _ = wait(stalled, Duration::from_millis(1));
    d.shutdown();
}

#[test]
fn a_uid_outside_the_allowed_set_is_refused() {
    // Allowed set excluding this process's uid: refused before the hello is read.
    let (d, dir) =
        start("uid", PolicyKind::Throughput, |c| c.allow = AllowList { uids: vec![4_000_000], gids: vec![] });
    let (ok, s) = wait(spawn("wrong_uid", d.socket(), &dir.join("u.log"), |_| {}), CHILD_LIMIT);
    assert!(ok && s.contains("REFUSED") && s.contains("not allowed"), "{s}");
    assert!(d.status().counters.connections_refused >= 1);
    d.shutdown();
    // As root: a child that runs as uid 65534 is refused by the default set (own uid and root).
    if rustix::process::getuid().is_root() {
        let (d, dir) = start("uid2", PolicyKind::Throughput, |_| {});
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = spawn("wrong_uid", d.socket(), &dir.join("u.log"), |c| {
            use std::os::unix::process::CommandExt;
            c.uid(65534).gid(65534);
        });
        let (ok, s) = wait(child, CHILD_LIMIT);
        if s.contains("Permission denied") || (!ok && s.is_empty()) {
            println!("SKIPPED: uid 65534 cannot run the test binary here ({s})");
        } else {
            assert!(s.contains("REFUSED") && s.contains("uid 65534"), "{s}");
            println!("uid 65534: {}", s.trim());
        }
        d.shutdown();
    } else {
        println!("SKIPPED: the setuid variant needs root (the allowed-set variant ran)");
    }
}

#[test]
fn clients_survive_a_daemon_restart_in_safe_mode() {
    let (d, dir) = start("restart", PolicyKind::Throughput, |_| {});
    let socket = d.socket().to_owned();
    let mut child = spawn("resilient", &socket, &dir.join("r.log"), |_| {});
    let mut lines = Vec::new();
    {
        let mut r = std::io::BufReader::new(child.stdout.as_mut().unwrap());
        assert_eq!(read_marker(&mut r, "HOLDING"), "HOLDING");
        d.shutdown(); // the daemon goes away mid-run
        let l = read_marker(&mut r, "SAFE");
        assert!(l.starts_with("SAFE: 1 held") || l.starts_with("SAFE: 2 held"), "{l}");
        lines.push(l.clone() + "\n");
        let mut cfg = DaemonConfig::new(socket.clone());
        cfg.decide.policy = PolicyKind::Throughput;
        let d2 = Daemon::start(cfg).unwrap();
        let l = read_marker(&mut r, "ADOPTED");
        assert!(l.starts_with("ADOPTED: ["), "{l}");
        assert!(!l.contains("[]"), "the held leases were adopted: {l}");
        lines.push(l);
        assert_eq!(read_marker(&mut r, "DONE"), "DONE", "the client finished its work");
        drop(r);
        let (ok, s) = wait(child, CHILD_LIMIT);
        assert!(ok, "{s}");
        // The 2 adopted ops and 5 new ones completed through the new daemon.
        assert!(
            poll_until(Duration::from_secs(5), || d2.status().counters.completions >= 7),
            "{:?}",
            d2.status().counters
        );
        d2.shutdown();
    }
    println!("{}", lines.concat());
}

#[test]
fn status_and_stop_over_the_socket() {
    let (d, dir) = start("status", PolicyKind::Tpot, |_| {});
    let st = client::status(d.socket(), Duration::from_secs(5)).unwrap();
    assert_eq!(st.schema, "vitamin.daemon.status.v1");
    assert_eq!(st.policy, "tpot");
    assert_eq!(st.pid, std::process::id());
    client::stop(d.socket(), Duration::from_secs(5)).unwrap();
    assert!(poll_until(Duration::from_secs(5), || d.stop_requested()));
    d.shutdown();
    assert!(client::status(&dir.join("daemon.sock"), Duration::from_secs(1)).is_err(), "gone after stop");
    let _ = BTreeMap::<u8, u8>::new();
}
