//! Bind mode under the coordination daemon, without a GPU: two processes of
//! tests/fake/bind_app.c (dependent launches on several streams with events, copies, a host
//! function, invalid launches) run at the same time against the fake libcuda under the shim, with
//! `VITAMIN_DAEMON` naming a daemon this test runs (its threads, a real socket and shared memory).
//! Each must print exactly what it prints natively, its census must show that the daemon bound
//! its launches, and the daemon must have registered both and bound what they sent. A socket
//! where no daemon listens leaves the process deciding alone, with a warning.

use std::sync::OnceLock;
use std::time::Duration;

use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::policy::PolicyKind;

mod support;
use support::{run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-daemon", "bind_app"))
}

fn run(name: &str, bind: Option<&[(&str, &str)]>) -> AppRun {
    let f = fixture();
    run_async_app(&f.app, &f.dir, name, bind, &[])
}

fn daemon(policy: PolicyKind) -> Daemon {
    let dir = std::env::temp_dir().join(format!("vitamin-bd-{}-{policy}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
    cfg.decide.policy = policy;
    Daemon::start(cfg).expect("daemon starts")
}

/// The first object anywhere in `v` that holds key `key`.
fn holder<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) if m.contains_key(key) => Some(v),
        serde_json::Value::Object(m) => m.values().find_map(|x| holder(x, key)),
        serde_json::Value::Array(a) => a.iter().find_map(|x| holder(x, key)),
        _ => None,
    }
}

/// The first value under key `key`, anywhere in `v`.
fn find<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    match v {
        serde_json::Value::Object(m) => m.get(key).or_else(|| m.values().find_map(|x| find(x, key))),
        serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

#[test]
fn two_processes_share_the_device_through_the_daemon() {
    let native = run("native", None);
    assert!(native.out.status.success(), "native run failed:\n{}", native.stdout());
    for policy in [PolicyKind::Chaos, PolicyKind::Throughput] {
        let d = daemon(policy);
        let socket = d.socket().to_string_lossy().into_owned();
        let runs: Vec<AppRun> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..2)
                .map(|i| {
                    let socket = socket.clone();
                    s.spawn(move || {
                        let name = format!("{policy}-{i}");
                        // The local configuration names another policy: the daemon's wins.
                        let env = [
                            ("VITAMIN_DAEMON", socket.as_str()),
                            ("VITAMIN_LOG", "info"),
                            ("VITAMIN_POLICY", "exclusive"),
                        ];
                        run(&name, Some(&env))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().expect("runner")).collect()
        });
        let mut sent = 0;
        for (i, r) in runs.iter().enumerate() {
            let err = String::from_utf8_lossy(&r.out.stderr);
            assert!(r.out.status.success(), "{policy} run {i} failed:\n{}\n{err}", r.stdout());
            assert_eq!(r.stdout(), native.stdout(), "{policy} run {i}: output differs from native\n{err}");
            assert!(err.contains("bindings come from the vitamin daemon"), "{policy} run {i}:\n{err}");
            let census = r.census.as_ref().expect("census written");
            let dd = find(census, "daemon").unwrap_or_else(|| panic!("{policy} run {i}: no daemon section: {census}"));
            assert!(dd["sent"].as_u64().unwrap_or(0) > 0, "{policy} run {i}: nothing sent to the daemon: {census}");
            assert_eq!(dd["safe_mode"], serde_json::Value::Null, "{policy} run {i}: {census}");
            let dispatcher = holder(census, "daemon").expect("the object holding the daemon section");
            assert_eq!(
                dispatcher["policy"].as_str(),
                Some(policy.name()),
                "{policy} run {i}: the client's own decisions follow the daemon's policy: {census}"
            );
            sent += dd["sent"].as_u64().unwrap_or(0);
        }
        // The status is a snapshot the loop refreshes when something changes: wait for the one
        // taken after both clients left.
        assert!(
            (0..500).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                d.status().clients.is_empty()
            }),
            "{policy}: both clients removed after they exited"
        );
        let st = d.status();
        assert_eq!(st.counters.clients_registered, 2, "{policy}: {:?}", st.counters);
        assert!(
            st.counters.bound > 0 && st.counters.bound <= sent,
            "{policy}: bound {} of {sent} sent",
            st.counters.bound
        );
        assert!(
            (0..500).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                d.status().devices.iter().all(|dv| dv.active.is_empty())
            }),
            "{policy}: every lease freed after both exited"
        );
        println!(
            "{policy}: 2 processes identical to native; daemon bound {} of {sent} ready ops sent",
            st.counters.bound
        );
        d.shutdown();
    }
}

#[test]
fn no_daemon_at_the_socket_means_in_process_with_a_warning() {
    let native = run("native-nd", None);
    let r = run("no-daemon", Some(&[("VITAMIN_DAEMON", "/nonexistent/vitamin/daemon.sock"), ("VITAMIN_LOG", "warn")]));
    let err = String::from_utf8_lossy(&r.out.stderr);
    assert!(r.out.status.success(), "{}\n{err}", r.stdout());
    assert_eq!(r.stdout(), native.stdout());
    assert!(err.contains("no vitamin daemon at /nonexistent/vitamin/daemon.sock"), "{err}");
    assert!(err.contains("decides its bindings alone"), "{err}");
}

fn graph_fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-daemon-graph", "graph_app"))
}

/// Under TPOT-First, a latency-critical process launching CUDA graphs (tests/fake/graph_app.c)
/// beside a batch process. A graph that no partition copy holds runs unchanged only on the whole
/// device, which the latency-critical client's own standing reservation kept from it for ever
/// (the daemon never bound the launch: both jobs of a mixed run hung on the H100,
/// docs/results/eval.md, mixed-graph run 1); such a launch now goes to the service partition, as
/// a cluster kernel does. A graph whose kernel nodes carry a `CUkernel` (`FAKE_CUDA_GRAPH_KERNELS`)
/// runs partition copies on the nodes the daemon binds. Both processes must finish with their
/// native output.
#[test]
fn a_latency_critical_graph_client_under_tpot_first_is_not_starved_by_its_own_reservation() {
    let g = graph_fixture();
    let native_batch = run("tg-native-batch", None);
    for (case, extra) in [("whole-device", &[][..]), ("copies", &[("FAKE_CUDA_GRAPH_KERNELS", "1")][..])] {
        let native = run_async_app(&g.app, &g.dir, &format!("tg-native-{case}"), None, extra);
        assert!(native.out.status.success(), "{case}: native run failed:\n{}", native.stdout());
        let d = daemon(PolicyKind::Tpot);
        let socket = d.socket().to_string_lossy().into_owned();
        let (lc, batch) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                let env = [("VITAMIN_DAEMON", socket.as_str()), ("VITAMIN_CLASS", "latency:15")];
                run_async_app(&g.app, &g.dir, &format!("tg-lc-{case}"), Some(&env), extra)
            });
            let b = s.spawn(|| run(&format!("tg-batch-{case}"), Some(&[("VITAMIN_DAEMON", socket.as_str())])));
            (a.join().expect("latency-critical runner"), b.join().expect("batch runner"))
        });
        for (who, r, want) in [("latency-critical", &lc, &native), ("batch", &batch, &native_batch)] {
            let err = String::from_utf8_lossy(&r.out.stderr);
            assert!(r.out.status.success(), "{case}: {who} run failed:\n{}\n{err}", r.stdout());
            assert_eq!(r.stdout(), want.stdout(), "{case}: {who} output differs from native\n{err}");
        }
        let census = lc.census.as_ref().expect("census written");
        let dispatcher = &census["bind"]["dispatcher"];
        assert_eq!(dispatcher["policy"], "tpot", "{case}: {dispatcher}");
        assert!(dispatcher["daemon"]["sent"].as_u64().unwrap_or(0) > 0, "{case}: {dispatcher}");
        let shared = dispatcher["shared_whole_device"].as_u64().unwrap_or(0);
        let counts = &census["bind"]["graph_copies"];
        if case == "whole-device" {
            // Six launches reach bind mode (the seventh is captured): every one shared.
            assert_eq!(shared, 6, "{case}: graph launches on the service partition: {dispatcher}");
            assert_eq!(counts["confinable"], 0, "{case}: {counts}");
        } else {
            // Launches 5 and 6 follow a kernel-node parameter change no copy matches.
            assert_eq!(shared, 2, "{case}: {dispatcher}");
            assert!(counts["copies"].as_u64().unwrap_or(0) >= 1, "{case}: no copy ran: {counts}");
        }
        assert_eq!(d.status().counters.clients_registered, 2, "{case}");
        d.shutdown();
    }
}
