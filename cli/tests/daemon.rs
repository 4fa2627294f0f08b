//! `vitamin daemon` as a user runs it: options from the configuration file's `[daemon]` section,
//! a clean stop on SIGTERM, and the MPS watch (against a fake `nvidia-cuda-mps-control` on PATH:
//! a server that turns `FAULT`, then a control daemon that goes away) reaching a connected
//! client as a notice and `vitamin daemon status` as a sentence. Every wait has a deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use vitamin_hal::sim::SimBackend;
use vitamin_hal::Backend;
use vitamin_runtime::daemon::client::{ConnectOptions, DaemonClient};
use vitamin_runtime::daemon::{NOTICE_CONCURRENCY_FAULT, NOTICE_CONCURRENCY_GONE};
use vitamin_runtime::policy::ClientClass;

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vitamin-cli-daemon-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn vitamin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vitamin"));
    for (k, _) in std::env::vars() {
        if k.starts_with("VITAMIN_") || k.starts_with("CUDA_MPS") {
            c.env_remove(k);
        }
    }
    c
}

fn until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn status(socket: &Path) -> Option<String> {
    let o = vitamin().args(["daemon", "status", "--socket"]).arg(socket).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// Stops the child with SIGTERM and waits (killing it past the deadline).
fn terminate(mut child: Child) -> bool {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let t = Instant::now();
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st.success();
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_file_configures_the_daemon_and_sigterm_stops_it_cleanly() {
    let d = dir("file");
    let socket = d.join("d.sock");
    let cfg = d.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[daemon]\nsocket = {:?}\npolicy = \"static\"\nmps = \"off\"\nmax_clients = 3\ntimeline = {:?}\n",
            socket,
            d.join("file-timeline.json")
        ),
    )
    .unwrap();
    let child = vitamin().env("VITAMIN_CONFIG", &cfg).arg("daemon").stderr(Stdio::null()).spawn().unwrap();
    assert!(until(Duration::from_secs(10), || status(&socket).is_some()), "the daemon answers at the file's socket");
    let st = status(&socket).unwrap();
    assert!(st.contains("policy static"), "{st}");
    assert!(st.contains("not checked (--mps off)"), "{st}");
    // A flag overrides the file.
    let flagged = d.join("f.sock");
    let c2 = vitamin()
        .env("VITAMIN_CONFIG", &cfg)
        .args(["daemon", "--policy", "chaos", "--timeline"])
        .arg(d.join("flag-timeline.json"))
        .arg("--socket")
        .arg(&flagged)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(until(Duration::from_secs(10), || status(&flagged).is_some()));
    assert!(status(&flagged).unwrap().contains("policy chaos"));
    assert!(terminate(c2), "SIGTERM: exit status 0");
    assert!(terminate(child), "SIGTERM: exit status 0");
    assert!(!socket.exists() && !flagged.exists(), "a clean stop removes the socket files");
    // Both timelines (the file's key, the flag) are written at the stop: no client came, so empty.
    for t in ["file-timeline.json", "flag-timeline.json"] {
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(t)).unwrap_or_else(|e| panic!("{t}: {e}"))).unwrap();
        assert_eq!(doc["traceEvents"].as_array().map(Vec::len), Some(0), "{t}: {doc}");
    }
    // A misspelt key is an error naming the file.
    std::fs::write(&cfg, "[daemon]\npolcy = \"static\"\n").unwrap();
    let o = vitamin().env("VITAMIN_CONFIG", &cfg).args(["daemon", "status"]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("polcy") && err.contains("config.toml"), "{err}");
}

#[test]
fn an_mps_fault_reaches_clients_and_status() {
    let d = dir("mps");
    let (bin, pipe) = (d.join("bin"), d.join("pipe"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&pipe).unwrap();
    std::fs::write(pipe.join("control"), b"").unwrap();
    let state = d.join("server-state");
    std::fs::write(&state, "ACTIVE\n").unwrap();
    let fake = bin.join("nvidia-cuda-mps-control");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nread cmd arg\ncase \"$cmd\" in\n  get_server_list) echo 4242 ;;\n  get_server_status) cat {:?} ;;\nesac\n",
            state
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let socket = d.join("d.sock");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let child = vitamin()
        .env("PATH", path)
        .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
        .env("VITAMIN_CONFIG", "none")
        .args(["daemon", "--mps", "check", "--socket"])
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(until(Duration::from_secs(10), || status(&socket).is_some()));
    assert!(status(&socket).unwrap().contains("MPS control daemon found"));
    let mut client = DaemonClient::connect(ConnectOptions {
        socket: socket.clone(),
        name: "probe".into(),
        device: 0,
        topology: SimBackend::preset("h200").unwrap().topology().clone(),
        class: ClientClass::BestEffort,
        lanes: 2,
        timeout: Duration::from_secs(5),
    })
    .expect("registered");
    assert!(client.check_daemon());
    assert_eq!(client.notice(), 0);
    std::fs::write(&state, "FAULT\n").unwrap();
    assert!(
        until(Duration::from_secs(10), || client.check_daemon() && client.notice() == NOTICE_CONCURRENCY_FAULT),
        "the client sees the fault notice"
    );
    assert!(until(Duration::from_secs(5), || status(&socket).is_some_and(|s| s.contains("MPS server FAULT"))));
    std::fs::remove_file(pipe.join("control")).unwrap();
    assert!(
        until(Duration::from_secs(10), || client.check_daemon() && client.notice() == NOTICE_CONCURRENCY_GONE),
        "the client sees that MPS is gone"
    );
    assert!(status(&socket).unwrap().contains("MPS control daemon gone"));
    client.goodbye().unwrap();
    assert!(terminate(child));
}

/// `--profiles` (or `[daemon] profiles`): a profile file the daemon's policy sizes launches by; one
/// that cannot be read stops the daemon at start with the reason, before it listens.
#[test]
fn the_daemon_loads_a_profile_file_and_refuses_a_bad_one() {
    let d = dir("profiles");
    let good = d.join("good.json");
    let sim = SimBackend::preset("h200").unwrap();
    vitamin_runtime::profile::Profiles::new(sim.topology().device_name()).save(&good).unwrap();
    let socket = d.join("p.sock");
    let cfg = d.join("config.toml");
    std::fs::write(&cfg, format!("[daemon]\nmps = \"off\"\nprofiles = {good:?}\n")).unwrap();
    let child = vitamin()
        .env("VITAMIN_CONFIG", &cfg)
        .arg("daemon")
        .arg("--socket")
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(until(Duration::from_secs(10), || status(&socket).is_some()), "the daemon runs with the file's profiles");
    assert!(terminate(child), "SIGTERM: exit status 0");
    let bad = d.join("bad.json");
    std::fs::write(&bad, "{\"version\": 99}").unwrap();
    let flagged = d.join("bad.sock");
    let o = vitamin()
        .env("VITAMIN_CONFIG", &cfg)
        .args(["daemon", "--mps", "off", "--profiles"])
        .arg(&bad)
        .arg("--socket")
        .arg(&flagged)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--profiles") && err.contains("version 99"), "{err}");
    assert!(!flagged.exists(), "no socket: it never listened");
}
