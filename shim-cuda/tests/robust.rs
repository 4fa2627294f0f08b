//! Bind mode never waits forever, keeps its memory bounded, and reports driver failures natively:
//! tests/fake/robust_app.c (one scenario per run) against the asynchronous fake libcuda, natively
//! and under the shim. Every run has the harness's watchdog (60 s).
//!
//! - A dispatcher thread that dies (injected panic) or stops making progress (injected hang):
//!   stream, event and context synchronize, and a launch held at the outstanding-op bound, return
//!   `CUDA_ERROR_UNKNOWN` (999) / `CUDA_ERROR_LAUNCH_TIMEOUT` (702) instead of hanging, and the log
//!   says why once.
//! - A pool that takes longer than `start_timeout_ms` to realize: observe mode, one message.
//! - At most `max_outstanding_ops` recorded ops: a program that never synchronizes is held, and
//!   its results are unchanged; staged pageable bytes are bounded by `max_staged_bytes`.
//! - Faults: an asynchronous kernel fault seen by `cuEventQuery` (700); copies and host functions
//!   the driver refuses at submission surface at the next sync with the driver's code; event
//!   records and waits the driver refuses return its code at the call, as natively.

use std::sync::OnceLock;

mod support;
use support::{run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-robust", "robust_app"))
}

/// Runs scenario `what` (with `count`) natively (`bind` = None) or under bind mode with `bind`'s
/// variables, plus `extra` for the fake driver.
fn run(name: &str, what: &str, count: u64, bind: Option<&[(&str, &str)]>, extra: &[(&str, &str)]) -> AppRun {
    let f = fixture();
    let count = count.to_string();
    let mut env: Vec<(&str, &str)> = vec![("ROBUST_SCENARIO", what), ("ROBUST_COUNT", &count)];
    env.extend_from_slice(extra);
    run_async_app(&f.app, &f.dir, name, bind, &env)
}

/// The value the program printed for `key` (`key=value`).
fn printed(r: &AppRun, key: &str) -> String {
    let prefix = format!("{key}=");
    r.stdout()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_string))
        .unwrap_or_else(|| panic!("no {key} in the output:\n{}", r.stdout()))
}

fn stderr(r: &AppRun) -> String {
    String::from_utf8_lossy(&r.out.stderr).into_owned()
}

fn bind_ops(r: &AppRun) -> serde_json::Value {
    r.census.as_ref().expect("a census")["bind"]["ops"].clone()
}

#[test]
fn a_dispatcher_thread_that_dies_fails_every_waiting_call_with_a_native_code() {
    let vars = [
        ("VITAMIN_POLICY", "chaos"),
        ("VITAMIN_LOG", "error"),
        ("fault_dispatch", "panic:3"),
        ("VITAMIN_UNBOUND_TIMEOUT_MS", "30000"),
    ];
    let r = run("panic", "chain", 200, Some(&vars), &[("FAKE_CUDA_DELAY_US", "1000")]);
    assert!(r.out.status.success(), "{}\n{}", r.stdout(), stderr(&r));
    for call in ["stream_sync", "event_sync", "ctx_sync"] {
        assert_eq!(printed(&r, call), "999", "{call}: CUDA_ERROR_UNKNOWN, at once (not after the 30 s bound)");
    }
    let err = stderr(&r);
    assert_eq!(err.matches("a waiting call gives up").count(), 1, "logged once:\n{err}");
    assert!(err.contains("dispatcher thread panicked"), "{err}");
}

#[test]
fn a_recording_call_held_at_the_outstanding_bound_fails_too_when_the_dispatcher_is_gone() {
    let vars = [
        ("VITAMIN_POLICY", "chaos"),
        ("VITAMIN_LOG", "error"),
        ("fault_dispatch", "panic:3"),
        ("VITAMIN_MAX_OUTSTANDING_OPS", "8"),
    ];
    let r = run("panic-held", "flood", 200, Some(&vars), &[("FAKE_CUDA_DELAY_US", "1000")]);
    assert!(!r.out.status.success(), "the program must see the failed launch:\n{}", r.stdout());
    assert!(r.stdout().contains("FAILED step(") && r.stdout().contains("= 999"), "{}", r.stdout());
    let ops = bind_ops(&r);
    assert!(ops["held_records"].as_u64().unwrap_or_default() > 0, "{ops:#}");
}

#[test]
fn a_dispatcher_that_makes_no_progress_times_waiting_calls_out_after_the_bound() {
    let vars = [
        ("VITAMIN_POLICY", "throughput"),
        ("VITAMIN_LOG", "error"),
        ("fault_dispatch", "hang:3"),
        ("VITAMIN_UNBOUND_TIMEOUT_MS", "500"),
    ];
    let start = std::time::Instant::now();
    let r = run("hang", "chain", 200, Some(&vars), &[("FAKE_CUDA_DELAY_US", "1000")]);
    assert!(r.out.status.success(), "{}\n{}", r.stdout(), stderr(&r));
    for call in ["stream_sync", "event_sync", "ctx_sync"] {
        assert_eq!(printed(&r, call), "702", "{call}: CUDA_ERROR_LAUNCH_TIMEOUT");
    }
    let err = stderr(&r);
    assert_eq!(err.matches("a waiting call gives up").count(), 1, "logged once:\n{err}");
    assert!(err.contains("made no progress for over 500 ms"), "{err}");
    // Three waits of the bound each (plus the exit's), never the harness's minute.
    assert!(start.elapsed() < std::time::Duration::from_secs(30), "took {:?}", start.elapsed());
}

#[test]
fn a_pool_slower_than_the_start_timeout_leaves_the_program_in_observe_mode_with_one_message() {
    let native = run("slow-native", "chain", 16, None, &[]);
    let vars = [("VITAMIN_LOG", "warn"), ("start_timeout_ms", "150")];
    let r = run("slow-pool", "chain", 16, Some(&vars), &[("FAKE_CUDA_GREEN_DELAY_MS", "100")]);
    assert!(r.out.status.success(), "{}\n{}", r.stdout(), stderr(&r));
    assert_eq!(r.stdout(), native.stdout(), "the native results");
    let err = stderr(&r);
    assert_eq!(err.matches("running in observe mode").count(), 1, "{err}");
    let b = &r.census.as_ref().expect("a census")["bind"];
    assert_eq!(b["active"], false, "{b:#}");
    assert!(b["reason"].as_str().unwrap_or_default().contains("did not realize the pool within 150 ms"), "{b:#}");
}

#[test]
fn a_program_that_never_synchronizes_is_held_at_the_outstanding_bound_with_unchanged_results() {
    let fake = [("FAKE_CUDA_DELAY_US", "100")];
    let native = run("flood-native", "flood", 400, None, &fake);
    assert_eq!(printed(&native, "x0"), "400.0");
    for (name, policy) in [("flood-chaos", "chaos"), ("flood-throughput", "throughput")] {
        let vars = [("VITAMIN_POLICY", policy), ("VITAMIN_MAX_OUTSTANDING_OPS", "16")];
        let r = run(name, "flood", 400, Some(&vars), &fake);
        assert!(r.out.status.success(), "{name}: {}\n{}", r.stdout(), stderr(&r));
        assert_eq!(printed(&r, "stream_sync"), "0");
        assert_eq!(printed(&r, "x0"), "400.0", "{name}: every launch ran once, in order");
        let ops = bind_ops(&r);
        assert_eq!(ops["kernels"], 400, "{name}: {ops:#}");
        assert!(ops["held_records"].as_u64().unwrap_or_default() > 0, "{name}: never held: {ops:#}");
    }
}

#[test]
fn staged_pageable_bytes_in_flight_are_bounded_and_copies_past_it_run_synchronously() {
    let native = run("pageable-native", "pageable", 24, None, &[]);
    // Four 64 KiB staged copies at most; the copies queue behind a 300 ms kernel.
    let vars = [("VITAMIN_POLICY", "chaos"), ("max_staged_bytes", "262144")];
    let r = run("pageable-bounded", "pageable", 24, Some(&vars), &[]);
    assert!(r.out.status.success(), "{}\n{}", r.stdout(), stderr(&r));
    assert_eq!(r.stdout(), native.stdout(), "every copy carried the bytes of its call");
    let ops = bind_ops(&r);
    let staged = ops["staged_copies"].as_u64().unwrap_or_default();
    let full = ops["staging_full"].as_u64().unwrap_or_default();
    assert!((1..24).contains(&staged) && full > 0 && staged + full == 24, "{ops:#}");
}

#[test]
fn an_asynchronous_kernel_fault_is_seen_at_an_event_query_with_the_driver_s_code() {
    let fault = [("FAKE_CUDA_FAULT_KERNEL", "k5")];
    let native = run("evquery-native", "evquery", 0, None, &fault);
    assert_eq!(printed(&native, "event_query"), "700", "natively: CUDA_ERROR_ILLEGAL_ADDRESS");
    for (name, policy) in [("evquery-chaos", "chaos"), ("evquery-throughput", "throughput")] {
        let r = run(name, "evquery", 0, Some(&[("VITAMIN_POLICY", policy)]), &fault);
        assert_eq!(printed(&r, "event_query"), "700", "{name}: {}", stderr(&r));
    }
}

#[test]
fn copies_and_host_functions_refused_at_submission_surface_at_the_next_sync_with_the_driver_s_code() {
    for (what, call) in [("copy", "cuMemcpy"), ("host", "cuLaunchHostFunc")] {
        // Natively the refusal is the call's own result; the sync then has nothing to report.
        let native = run(&format!("{what}-refused-native"), what, 0, None, &[("FAKE_CUDA_FAIL_CALL", call)]);
        let call_key = if what == "copy" { "copy" } else { "host_func" };
        assert_eq!(printed(&native, call_key), "1", "{}", native.stdout());
        assert_eq!(printed(&native, "stream_sync"), "0");
        // Under bind mode the call is recorded and returns at once; the driver refuses the
        // submission on vitamin's lane, and the next sync reports the driver's code (as an
        // asynchronous error would be), logged with the op.
        let fail = [("FAKE_CUDA_FAIL_CALL", call), ("FAKE_CUDA_FAIL_ON", "pool")];
        // The whole-device node on a green context too, so that every lane is one the fake tells
        // from the application's streams.
        let vars = [("VITAMIN_POLICY", "chaos"), ("VITAMIN_LOG", "error"), ("VITAMIN_ROOT_CONTEXT", "green")];
        let r = run(&format!("{what}-refused-bind"), what, 0, Some(&vars), &fail);
        assert_eq!(printed(&r, call_key), "0", "{what}: {}", r.stdout());
        assert_eq!(printed(&r, "stream_sync"), "1", "{what}: CUDA_ERROR_INVALID_VALUE at the sync");
        if what == "host" {
            assert_eq!(printed(&r, "host_ran"), "0", "a refused host function never runs");
        }
        let err = stderr(&r);
        assert!(err.lines().any(|l| l.contains("op failed") && l.contains("code=Some(1)")), "{what}: {err}");
    }
}

#[test]
fn event_records_and_waits_the_driver_refuses_return_its_code_at_the_call_as_natively() {
    for call in ["cuEventRecord", "cuStreamWaitEvent"] {
        let fail = [("FAKE_CUDA_FAIL_CALL", call), ("FAKE_CUDA_FAIL_ON", "app")];
        let native = run(&format!("{call}-native"), "timing", 0, None, &fail);
        assert!(native.stdout().contains("=1\n"), "{call}: the driver refused it natively:\n{}", native.stdout());
        let r = run(&format!("{call}-bind"), "timing", 0, Some(&[("VITAMIN_POLICY", "chaos")]), &fail);
        assert_eq!(r.stdout(), native.stdout(), "{call}: the same codes as natively");
    }
}
