//! Bind mode on the driver surface beyond launches, copies and events, without a GPU:
//! tests/fake/surface_app.c runs against the asynchronous fake libcuda natively and under the shim.
//!
//! Checked: the program prints what it prints natively; the execution log keeps every order the
//! program expressed: stream-taking calls bind mode forwards (stream-ordered allocation and free,
//! prefetch, attach, an external semaphore signal, a batched copy, a stream memory write) run after
//! the logical work of their stream and before what follows; a stream memory wait hands its stream
//! to the driver (what follows it runs after the wait, natively); stream and event destroy with
//! work pending return at once and the work completes; a module unload waits for the work
//! launched before it; a graph's event-wait node on a logically recorded event waits for its
//! record; per-thread default streams of exited threads are released; launches on a
//! `cuCtxCreate` context are forwarded natively, after the logical work they wait on; launches on
//! another device (`FAKE_CUDA_DEVICES=2`) are bound to that device's own pool, after the work of
//! the other device they wait on (an event); a forked child runs in observe mode with one warning.

use std::sync::OnceLock;

mod support;
use support::{check_exec_order, device_of, run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-surface", "surface_app"))
}

fn run(name: &str, bind: Option<&[(&str, &str)]>, extra_env: &[(&str, &str)]) -> AppRun {
    let f = fixture();
    let r = run_async_app(&f.app, &f.dir, name, bind, extra_env);
    assert!(r.out.status.success(), "{name} failed:\n{}\n{}", r.stdout(), String::from_utf8_lossy(&r.out.stderr));
    assert!(r.stdout().ends_with("done\n"), "{name}:\n{}", r.stdout());
    r
}

const CHAOS: &[(&str, &str)] = &[("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "7")];

/// The program's orders (`a` ended, or was marked, before `b` began).
const EDGES: &[(&str, &str)] = &[
    ("end k1", "begin allocasync"),
    ("end allocasync", "begin k2"),
    ("end k2", "begin prefetch loc=1.0"),
    ("end prefetch loc=1.0", "begin k3"),
    ("end k3", "begin attach"),
    ("end attach", "begin k4"),
    ("end k4", "begin extsignal"),
    ("end k4", "begin batchcopy"),
    ("end batchcopy", "begin k5"),
    ("end k5", "begin k6"),
    ("end k6", "begin write32"),
    ("end write32", "end wait32"),
    ("end wait32", "begin k7"),
    ("end k7", "begin k8"),
    ("end k8", "mark after sync s2"),
    ("end k6", "begin freeasync"),
    ("end k91", "begin graph2.1 v0 launches=1"),
    ("end k91", "begin graph2.2 v0 launches=1"),
    ("end k90", "mark after ctx sync"),
    ("end k21", "mark after created context"),
    ("mark after created context", "begin k22"),
    ("end k23", "mark cuModuleUnload"),
    ("mark cuModuleUnload", "begin k24"),
];

/// The fake driver's stream index the operation `label` ran on (execution log).
fn stream_of(exec: &str, label: &str) -> u32 {
    let line = exec
        .lines()
        .find(|l| l.starts_with(&format!("begin {label} ")))
        .unwrap_or_else(|| panic!("{label} missing from the execution log:\n{exec}"));
    line.split_whitespace().find_map(|w| w.strip_prefix("stream=")).expect("stream=").parse().unwrap()
}

/// The index of the stream created next after the last call log line starting with `after` (the
/// fake driver numbers streams in creation order).
fn created_after(calls: &str, after: &str) -> u32 {
    let lines: Vec<&str> = calls.lines().collect();
    let last = lines.iter().rposition(|l| l.starts_with(after)).unwrap_or_else(|| panic!("no {after}"));
    let mut lines = lines.into_iter().skip(last);
    let line = lines.find(|l| l.starts_with("cuStreamCreate")).unwrap_or_else(|| panic!("no stream after {after}"));
    line.rsplit("stream=").next().unwrap().parse().unwrap()
}

/// Checks that the kernels `bound` ran on pool lanes (not on the application's stream `app`) and
/// `native` on stream `on` (forwarded).
fn check_streams(name: &str, exec: &str, app: u32, bound: &[&str], native: &[&str], on: u32) {
    for k in bound {
        assert_ne!(stream_of(exec, k), app, "{name}: {k} was not bound:\n{exec}");
    }
    for k in native {
        assert_eq!(stream_of(exec, k), on, "{name}: {k} was not forwarded natively:\n{exec}");
    }
}

#[test]
fn stream_taking_calls_lifetimes_and_other_contexts_keep_native_order() {
    let native = run("native", None, &[]);
    for (name, extra) in [("chaos", CHAOS), ("throughput", &[][..])] {
        let r = run(name, Some(extra), &[]);
        assert_eq!(r.stdout(), native.stdout(), "{name}: output differs from native");
        check_exec_order(name, &r.exec, EDGES);
        check_exec_order(&format!("{name} (destroy returns at once)"), &r.exec, &[("mark after destroy", "end k90")]);
        // Logical work ran on the pool; what follows the stream wait ran on its stream (s2),
        // natively; so did the launch on the created context's stream.
        let (s1, s2) = (stream_of(&r.exec, "allocasync"), stream_of(&r.exec, "wait32"));
        check_streams(name, &r.exec, s1, &["k1", "k5", "k6", "k22", "k24", "k30", "k31", "k32"], &["k7", "k8"], s2);
        check_streams(name, &r.exec, s1, &[], &["k21"], created_after(&r.calls, "cuCtxCreate_v2"));
        let census = r.census.as_ref().expect("census");
        let bind = &census["bind"];
        assert_eq!(bind["active"], true, "{census}");
        assert_eq!(bind["per_thread_streams"], 0, "per-thread default streams of exited threads: {bind}");
        assert_eq!(bind["streams_handed_to_driver"], 1, "{bind}");
        assert_eq!(bind["streams_mapped"], 3, "s1, s2 and t2; the destroyed s3 forgotten: {bind}");
    }
}

#[test]
fn each_device_binds_to_its_own_pool_and_cross_device_waits_are_ordered() {
    let two = [("FAKE_CUDA_DEVICES", "2")];
    let native = run("native-2dev", None, &two);
    assert!(native.stdout().contains("devices=2"), "{}", native.stdout());
    for (name, extra) in [("chaos-2dev", CHAOS), ("throughput-2dev", &[][..])] {
        let r = run(name, Some(extra), &two);
        assert_eq!(r.stdout(), native.stdout(), "{name}");
        check_exec_order(name, &r.exec, EDGES);
        // k20 runs on device 1 after k19 of device 0 (a stream of device 1 waits on an event of
        // device 0), and before the program's mark after device 1's stream synchronize.
        check_exec_order(name, &r.exec, &[("end k19", "begin k20"), ("end k20", "mark after device 1")]);
        assert_eq!(device_of(&r.exec, &r.calls, "k19"), Some(0), "{name}: k19 on device 0's pool");
        assert_eq!(device_of(&r.exec, &r.calls, "k20"), Some(1), "{name}: k20 on device 1's pool");
        let census = r.census.as_ref().expect("census");
        let devices = census["bind"]["devices"].as_array().unwrap_or_else(|| panic!("{name}: {census}"));
        assert_eq!(devices.len(), 2, "{name}: both devices report");
        assert_eq!((devices[0]["ordinal"].as_u64(), devices[1]["ordinal"].as_u64()), (Some(0), Some(1)));
        assert_eq!(devices[1]["ops"]["kernels"], 1, "{name}: device 1 ran k20: {}", devices[1]);
        assert_eq!(devices[1]["ops"]["cross_device_waits"], 1, "{name}: {}", devices[1]);
        assert_eq!(devices[0]["ops"]["cross_device_waits"], 0);
    }
}

#[test]
fn a_forked_child_runs_in_observe_mode_with_one_warning() {
    let f = fixture();
    let args_run = |name: &str, bind: Option<&[(&str, &str)]>| {
        // The harness runs the program without arguments: a wrapper script passes `fork`.
        let script = f.dir.join("surface_fork.sh");
        std::fs::write(&script, format!("#!/bin/sh\nexec {} fork\n", f.app.display())).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        run_async_app(&script, &f.dir, name, bind, &[])
    };
    let native = args_run("native-fork", None);
    assert!(native.stdout().contains("child exited 0"), "{}", native.stdout());
    let r = args_run("chaos-fork", Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_LOG", "warn")]));
    assert_eq!(r.stdout(), native.stdout());
    let stderr = String::from_utf8_lossy(&r.out.stderr);
    let warnings = stderr.lines().filter(|l| l.contains("forked child")).count();
    assert_eq!(warnings, 1, "one warning in the child:\n{stderr}");
    let child_stream = created_after(&r.calls, "cuModuleUnload");
    check_streams("chaos-fork", &r.exec, 0, &[], &["k40", "k41"], child_stream);
    check_exec_order("chaos-fork", &r.exec, &[("end k40", "begin k41")]);
}
