//! Two devices under the coordination daemon, without a GPU: two processes of
//! tests/fake/multi_device_app.c (a chain alternating between a stream of device 0 and one of
//! device 1 through events, syncs of the other device's handles) run at the same time against the
//! fake libcuda with two devices, under the shim, with `VITAMIN_DAEMON` naming a daemon this test
//! runs. Each process registers once per device; the daemon arbitrates each device's pool on its
//! own and reports both; each process prints what it prints natively.

use std::sync::OnceLock;
use std::time::Duration;

use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::policy::PolicyKind;

mod support;
use support::{run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-daemon-devices", "multi_device_app"))
}

fn run(name: &str, bind: Option<&[(&str, &str)]>) -> AppRun {
    let f = fixture();
    run_async_app(&f.app, &f.dir, name, bind, &[("FAKE_CUDA_DEVICES", "2")])
}

#[test]
fn the_daemon_arbitrates_each_device_of_two_processes() {
    let native = run("native", None);
    assert!(native.out.status.success(), "native run failed:\n{}", native.stdout());
    let dir = std::env::temp_dir().join(format!("vitamin-bdd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
    cfg.decide.policy = PolicyKind::Throughput;
    let d = Daemon::start(cfg).expect("daemon starts");
    let socket = d.socket().to_string_lossy().into_owned();
    // The status mid-run, while both processes are registered on both devices.
    let seen_devices = std::sync::atomic::AtomicUsize::new(0);
    let runs: Vec<AppRun> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|i| {
                let socket = socket.clone();
                s.spawn(move || run(&format!("daemon-{i}"), Some(&[("VITAMIN_DAEMON", socket.as_str())])))
            })
            .collect();
        s.spawn(|| {
            for _ in 0..1000 {
                let n = d.status().devices.len();
                seen_devices.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                if n >= 2 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        hs.into_iter().map(|h| h.join().expect("runner")).collect()
    });
    for (i, r) in runs.iter().enumerate() {
        let err = String::from_utf8_lossy(&r.out.stderr);
        assert!(r.out.status.success(), "run {i} failed:\n{}\n{err}", r.stdout());
        assert_eq!(r.stdout(), native.stdout(), "run {i}: output differs from native\n{err}");
        let census = r.census.as_ref().expect("census");
        let devices = census["bind"]["devices"].as_array().unwrap_or_else(|| panic!("run {i}: {census}"));
        assert_eq!(devices.len(), 2, "run {i}: {census}");
        for dv in devices {
            let sent = dv["dispatcher"]["daemon"]["sent"].as_u64().unwrap_or(0);
            assert!(sent > 0, "run {i}, device {}: nothing sent to the daemon: {dv}", dv["ordinal"]);
        }
    }
    assert_eq!(seen_devices.into_inner(), 2, "the daemon reported both devices' pools");
    let st = d.status();
    assert_eq!(st.counters.clients_registered, 4, "two processes x two devices: {:?}", st.counters);
    d.shutdown();
}
