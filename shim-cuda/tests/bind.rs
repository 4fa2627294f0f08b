//! Bind mode end to end, without a GPU: tests/fake/bind_app.c (dependent launches on several
//! streams with events, the legacy and per-thread default streams, copies, a fill, a host function,
//! invalid launches) runs against the fake libcuda in its asynchronous mode (per-stream worker
//! threads, 2 ms per kernel, native semantics), once natively and then under the shim in bind mode.
//!
//! Checked, for every run: the program prints exactly what it prints natively (so synchronization
//! returned only after the work completed, staged copies kept the bytes of the call, pageable D2H
//! was complete on return, invalid launches got the driver's error); the fake driver's call log
//! shows every valid launch submitted **unchanged** (function, grid, block, shared memory, argument
//! values, attributes) and, under bind mode, on green-context streams only; the fake driver's
//! execution log respects every happens-before edge of the program; the census reports what bind
//! mode did. Chaos must spread the launches over several partitions. Cooperative and cluster
//! launches are bound too, only to partitions that hold them (the fake driver fails them
//! elsewhere, like the real one); those that not even the whole device holds fail synchronously
//! with the driver's own error (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`, an invalid cluster).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::{json, Value};

mod support;
use support::{check_exec_order, green_sms, run_async_app, shim_path, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind", "bind_app"))
}

type Run = AppRun;

/// Runs the program with the asynchronous fake driver; `bind` adds the shim in bind mode with
/// these extra variables.
fn run(name: &str, bind: Option<&[(&str, &str)]>, extra_env: &[(&str, &str)]) -> Run {
    let f = fixture();
    run_async_app(&f.app, &f.dir, name, bind, extra_env)
}

fn stdout(r: &Run) -> String {
    r.stdout()
}

fn native() -> &'static Run {
    static N: OnceLock<Run> = OnceLock::new();
    N.get_or_init(|| {
        let r = run("native", None, &[]);
        assert!(r.out.status.success(), "native run failed:\n{}", stdout(&r));
        assert!(stdout(&r).ends_with("done\n"), "{}", stdout(&r));
        r
    })
}

/// A valid launch as the driver received it: (function, grid, block, smem, args, attrs), and the
/// context whose stream it was submitted on.
fn launches(calls: &str) -> (BTreeMap<String, usize>, Vec<String>, BTreeMap<String, usize>) {
    let mut valid = BTreeMap::new();
    let mut contexts = Vec::new();
    let mut invalid = BTreeMap::new();
    for line in calls.lines().filter(|l| l.starts_with("cuLaunch") && !l.starts_with("cuLaunchHostFunc")) {
        let mut words = line.split_whitespace();
        let _entry = words.next();
        let rest: Vec<&str> = words.collect();
        if line.contains(" -> ") {
            *invalid.entry(rest.join(" ")).or_default() += 1;
            continue;
        }
        let key: Vec<&str> =
            rest.iter().copied().filter(|w| !w.starts_with("stream=") && !w.starts_with("ctx=")).collect();
        *valid.entry(key.join(" ")).or_default() += 1;
        contexts.push(rest.iter().find_map(|w| w.strip_prefix("ctx=")).expect("ctx= in the launch log").to_string());
    }
    (valid, contexts, invalid)
}

/// The program's happens-before edges: `a` must have ended (or been marked) before `b` began.
const EDGES: &[(&str, &str)] = &[
    ("mark start", "begin copy A1+0<-staged 16384"),
    ("end copy A1+0<-staged 16384", "begin k1"),
    ("end k1", "begin k2"),
    ("end k2", "begin k3"),
    ("end fill A3+0", "begin k4"),
    ("end k3", "begin k5"),
    ("end k4", "begin k5"),
    ("end k5", "mark after sync s2"),
    ("mark after sync s2", "begin k6"),
    ("end k2", "begin k6"),
    ("end k4", "begin k6"),
    ("end k6", "begin k7"),
    ("end k7", "begin host"),
    ("end host", "begin copy host<-A1+0 16384"),
    ("end copy host<-A1+0 16384", "mark after d2h pageable"),
    ("end k6", "begin k8"),
    ("end k8", "mark after sync ptsz"),
    ("mark after sync ptsz", "begin copy A5+0<-A3+0 16384"),
    ("end copy A5+0<-A3+0 16384", "mark after event sync e2"),
    ("end copy A5+0<-A3+0 16384", "begin k99"),
    ("end k99", "begin k9"),
    ("end k9", "mark after ctx sync"),
    ("mark after event sync e2", "begin k10"),
    ("end k5", "begin k10"),
    ("end k10", "mark after ctx sync"),
    ("end k9", "begin k11"),
    ("end k10", "begin k12"),
    ("end copy host<-A1+0 16384", "begin k13"),
    ("end k11", "mark after ctx sync"),
    ("end k12", "mark after ctx sync"),
    ("end k13", "mark after ctx sync"),
];

fn check_order(name: &str, exec: &str) {
    check_exec_order(name, exec, EDGES);
}

/// Context (`p` or `g<n>`) each kernel ran on, from the execution log.
fn kernel_contexts(exec: &str) -> BTreeMap<String, String> {
    exec.lines()
        .filter(|l| l.starts_with("begin k"))
        .map(|l| {
            let label = l.split_whitespace().nth(1).unwrap().to_string();
            let ctx = l.split_whitespace().find_map(|w| w.strip_prefix("ctx=")).unwrap().to_string();
            (label, ctx)
        })
        .collect()
}

/// Everything a bind-mode run must share with the native run.
fn check_bind_run(name: &str, r: &Run) {
    let n = native();
    assert!(r.out.status.success(), "{name} failed:\n{}\n{}", stdout(r), String::from_utf8_lossy(&r.out.stderr));
    assert_eq!(stdout(r), stdout(n), "{name}: the program's output differs from the native run");
    let (native_valid, native_ctx, native_invalid) = launches(&n.calls);
    let (valid, ctx, invalid) = launches(&r.calls);
    assert_eq!(native_valid.values().sum::<usize>(), 14, "the program makes 14 valid launches");
    assert_eq!(native_invalid.values().sum::<usize>(), 6, "and 6 invalid ones: {native_invalid:?}");
    assert_eq!(valid, native_valid, "{name}: launches were not submitted unchanged");
    assert_eq!(
        invalid, native_invalid,
        "{name}: the invalid launches must reach the driver as made, and only they fail"
    );
    assert!(native_ctx.iter().all(|c| c == "p"));
    check_order(name, &r.exec);
    // Every kernel ran on a pool node, cooperative and cluster launches included: on a green
    // context, or on the primary context for the whole-device node (node 0; its lanes are
    // primary-context streams unless VITAMIN_ROOT_CONTEXT=green). A launch the shim passed through
    // natively would run on the primary context too, so the primary-context kernels must be
    // exactly those the census counts on node 0, and the census must count all 14.
    let kernels = kernel_contexts(&r.exec);
    assert_eq!(kernels.len(), 14);
    for (k, c) in &kernels {
        assert!(c.starts_with('g') || c == "p", "{name}: {k} ran on {c}: {kernels:?}");
    }
    let b = bind_census(r);
    assert_eq!(b["nodes"][0], format!("SM 0-{}", FAKE_SMS - 1), "{name}: node 0 is the whole device");
    let per_node = census_per_node(b);
    assert_eq!(per_node.iter().sum::<u64>(), 14, "{name}: every kernel ran on some pool node: {per_node:?}");
    let on_primary = kernels.values().filter(|c| *c == "p").count() as u64;
    let root_green = root_on_green_context(r);
    assert_eq!(on_primary, if root_green { 0 } else { per_node[0] }, "{name}: {kernels:?} vs {per_node:?}");
    assert_eq!(ctx.iter().filter(|c| c.starts_with('g') || *c == "p").count(), 14, "{name}: {ctx:?}");
    // Constrained launches ran only on partitions that hold them: 100 and 40 co-resident blocks at 8
    // per SM need 13 and 5 SMs; clusters of 8 blocks need 8 SMs (the fake would fail them otherwise).
    let sms = green_sms(&r.calls);
    for (k, need) in [("k11", 13), ("k12", 5), ("k13", 8)] {
        let g = &kernels[k];
        let has = if g == "p" { FAKE_SMS } else { sms[g] };
        assert!(has >= need, "{name}: {k} ran on {g} with {has} SMs, needs {need}");
    }
}

/// SMs of the fake device (tests/fake/libcuda.c).
const FAKE_SMS: u32 = 36;

/// Launches per pool node, from the bind-mode census.
fn census_per_node(b: &Value) -> Vec<u64> {
    b["dispatcher"]["per_node"].as_array().expect("dispatcher stats").iter().map(|v| v.as_u64().unwrap()).collect()
}

/// Whether run `r` put the whole-device node on a green context (`VITAMIN_ROOT_CONTEXT=green`).
fn root_on_green_context(r: &Run) -> bool {
    r.env.iter().any(|(k, v)| k == "VITAMIN_ROOT_CONTEXT" && v == "green")
}

fn bind_census(r: &Run) -> &Value {
    let c = r.census.as_ref().expect("bind-mode census");
    assert_eq!(c["mode"], "bind");
    &c["bind"]
}

#[test]
fn the_native_run_respects_the_program_order() {
    // Validates the edge list against the fake driver's own native semantics.
    check_order("native", &native().exec);
}

#[test]
fn chaos_binds_every_launch_unchanged_to_green_contexts_in_happens_before_order() {
    let r = run("chaos", Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "7")]), &[]);
    check_bind_run("chaos", &r);
    let b = bind_census(&r);
    assert_eq!(b["active"], true, "{b:#}");
    assert_eq!(b["policy"], "chaos");
    assert_eq!(b["seed"], 7);
    assert_eq!(b["device"], "Fake GPU");
    // 36 SMs split by 8: four leaves of 8 and a remainder of 4, so 4*5 - 5 = 15 nodes.
    assert_eq!(b["nodes"].as_array().unwrap().len(), 15, "{b:#}");
    let ops = &b["ops"];
    assert_eq!(ops["kernels"], 14, "{ops}");
    assert_eq!(ops["cooperative_or_cluster"], 4, "{ops}");
    assert_eq!(ops["native_cooperative_or_cluster"], 0);
    assert_eq!(ops["invalid_launches"], 6);
    assert_eq!(ops["staged_copies"], 1);
    assert_eq!(ops["staged_bytes"], 16384);
    assert_eq!(ops["copies"], 2, "staged H2D and pinned D2H; the pageable D2H took the native path");
    assert_eq!(ops["fills"], 1);
    assert_eq!(ops["host_functions"], 1);
    let per_node = census_per_node(b);
    // At least five launches are bound afresh (their predecessors are copies, fills or finished
    // work, or sit on different lanes), each to a random eligible node of up to 15; how many of the rest
    // continue on a predecessor's lane depends on timing. Two distinct nodes is what cannot fail by
    // chance (all five on one node: about 2e-5).
    let used = per_node.iter().filter(|&&n| n > 0).count();
    assert!(used >= 2, "chaos should spread 14 launches over several nodes, used {used}: {per_node:?}");
    // Distinct contexts in the execution log: one green context per node used, and the primary
    // context for the whole-device node.
    let distinct: std::collections::BTreeSet<_> = kernel_contexts(&r.exec).into_values().collect();
    assert_eq!(distinct.len(), used, "contexts in the execution log vs nodes in the census: {distinct:?}");
}

#[test]
fn every_policy_and_strict_readiness_keep_the_program_s_semantics() {
    let mut eager_continued_total = 0;
    let (mut eager_total, mut eager_runs) = (0u64, 0u32);
    let mut after_launch_first_total = 0;
    let mut fast_waits_total = 0;
    let mut launched_first_total = 0;
    for (name, vars) in [
        ("throughput", vec![("VITAMIN_POLICY", "throughput")]),
        ("tpot", vec![("VITAMIN_POLICY", "tpot")]),
        ("static", vec![("VITAMIN_POLICY", "static")]),
        ("exclusive", vec![("VITAMIN_POLICY", "exclusive")]),
        ("chaos-strict", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "99"), ("VITAMIN_LANE_CONTINUATION", "0")]),
        // The experimental inline submission (off by default), with waiter-side polling (on by
        // default) and without it (the dispatcher thread then polls for waiting threads).
        ("chaos-inline", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "5"), ("inline", "1")]),
        ("throughput-inline-assist", vec![("inline", "1"), ("wait_assist", "1")]),
        ("throughput-no-assist", vec![("wait_assist", "0")]),
        // The dispatcher thread leaving its periodic polls to waiting threads (experimental, off).
        ("chaos-defer", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "21"), ("defer_to_waiters", "1")]),
        // Launch-first eager binding is on by default: Throughput answers fresh plain launches
        // from its memoized plan, so they are launched with the application's argument pointers
        // before their descriptor is copied. Off, a fresh launch is recorded first.
        ("throughput-no-launch-first", vec![("launch_first", "0")]),
        // The dispatcher thread napping between rounds (experimental; it spins by default).
        ("chaos-nap", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "13"), ("dispatch_nap", "all")]),
        // Eager continuation on (off by default): the application thread continues ops behind
        // submitted predecessors on their lane itself.
        ("throughput-eager-continue", vec![("eager_continue", "1")]),
        ("exclusive-eager-continue", vec![("VITAMIN_POLICY", "exclusive"), ("eager_continue", "1")]),
        ("chaos-eager-continue", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "17"), ("eager_continue", "1")]),
        // The submission thread (on by default) handing off every submission that follows
        // another within 1 s (spinning, never parked); and the dispatcher thread issuing
        // everything itself.
        (
            "chaos-submit-burst",
            vec![("VITAMIN_POLICY", "chaos"), ("submit_burst_us", "1000000"), ("submit_spin_us", "10000000")],
        ),
        ("chaos-no-submit-thread", vec![("VITAMIN_POLICY", "chaos"), ("submit_thread", "0")]),
        // Eager binding by the recording thread off (on by default): the dispatcher thread
        // binds every op.
        ("chaos-no-eager", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "3"), ("eager", "0")]),
        // Lanes fenced by host-mapped memory words instead of events (the default), and the
        // fallback to events on a device without 64-bit stream memory operations.
        ("chaos-memory-fence", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "11"), ("VITAMIN_FENCE", "memory")]),
        ("throughput-memory-fence-no-memops", vec![("VITAMIN_FENCE", "memory"), ("FAKE_CUDA_NO_MEMOPS", "1")]),
        // Hybrid fences: events, except memory writes for the fences waiting threads record.
        ("chaos-hybrid-fence", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "31"), ("VITAMIN_FENCE", "hybrid")]),
        ("throughput-hybrid-fence", vec![("VITAMIN_FENCE", "hybrid")]),
        ("throughput-hybrid-fence-no-memops", vec![("VITAMIN_FENCE", "hybrid"), ("FAKE_CUDA_NO_MEMOPS", "1")]),
        ("throughput-event-fence", vec![("VITAMIN_FENCE", "event")]),
        // Waiting threads writing a fence word only when the lane's fencing rule makes one due
        // (`VITAMIN_WAITER_FENCE=due`; by default also behind an event another thread's poll
        // recorded).
        ("throughput-waiter-due", vec![("VITAMIN_WAITER_FENCE", "due")]),
        ("chaos-waiter-due", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "5"), ("VITAMIN_WAITER_FENCE", "due")]),
        // Waiting threads polling every time instead of spinning on fence words.
        ("throughput-no-fast-wait", vec![("fast_wait", "0")]),
        // A launch-first launch only trying the dispatcher lock (by default it spins for it
        // while the dispatcher thread holds it, and the dispatcher thread lets it go first).
        ("throughput-lf-try-only", vec![("lf_lock_wait_us", "0")]),
        // No continuation by the application thread after its launch-first launches.
        ("throughput-no-continue-ops", vec![("eager_continue_ops", "0")]),
        // The dispatcher thread's round following at once a poll that completed a wait (by
        // default it waits up to 20 us for the waiting thread's next launch).
        ("chaos-no-wake-grace", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "41"), ("wake_grace_us", "0")]),
        // The experimental native wait on lane streams.
        ("throughput-native-wait", vec![("native_wait", "1")]),
        // The whole-device node on a green context like every other node (the primary context
        // by default).
        (
            "chaos-root-green",
            vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "7"), ("VITAMIN_ROOT_CONTEXT", "green")],
        ),
    ] {
        let r = run(name, Some(&vars), &[]);
        check_bind_run(name, &r);
        let b = bind_census(&r);
        assert_eq!(b["active"], true, "{name}: {b:#}");
        assert_eq!(b["policy"], name.split('-').next().unwrap());
        if name == "chaos-strict" {
            assert_eq!(b["lane_continuation"], false);
            assert_eq!(b["dispatcher"]["continued"], 0, "strict readiness continues nothing: {b:#}");
        }
        // Eager binding: the program's fresh launches (ready when recorded, e.g. the first after
        // a synchronize) are bound by the application thread when the dispatcher is free.
        let eager = b["dispatcher"]["eager"].as_u64().expect("eager count in the census");
        match name {
            "chaos-no-eager" | "chaos-strict" => assert_eq!(eager, 0, "{name}: {b:#}"),
            // Inline submission takes precedence.
            n if n.contains("inline") => assert_eq!(eager, 0, "{name}: {b:#}"),
            // Whether the application thread finds the dispatcher free is a race (under a loaded
            // CPU the dispatcher thread may take every op first): counted over the runs, checked
            // below.
            _ => {
                eager_total += eager;
                eager_runs += 1;
            }
        }
        // Eager continuation: dependent launches recorded while their predecessor runs are
        // continued on its lane by the application thread (2 ms kernels: the dispatcher is free).
        // By default only the ops a thread records after its own launch-first launch
        // (VITAMIN_EAGER_CONTINUE_OPS, 8) are continued by it.
        let continued = b["dispatcher"]["eager_continued"].as_u64().expect("eager_continued in the census");
        let first = b["dispatcher"]["launched_first"].as_u64().expect("launched_first in the census");
        if name.ends_with("-eager-continue") {
            // Whether the application thread or the dispatcher thread gets to continue an op
            // is a race: counted over the runs with eager continuation on, checked below.
            eager_continued_total += continued;
        } else if first > 0 && !name.contains("no-continue-ops") {
            after_launch_first_total += continued;
        } else {
            assert_eq!(continued, 0, "{name}: no launch-first launch, or continuation after it off: {b:#}");
        }
        // Launch-first: only Throughput knows a lone fresh launch's node without a round (its
        // memoized plan), and only with eager binding on and inline submission off.
        let launched_first = b["dispatcher"]["launched_first"].as_u64().expect("launched_first in the census");
        match name {
            n if n.starts_with("throughput") && !n.contains("inline") && !n.contains("no-launch-first") => {
                launched_first_total += launched_first
            }
            _ => assert_eq!(launched_first, 0, "{name}: launch-first does not apply: {b:#}"),
        }
        // Why launch-first was declined, counted by the dispatcher and by the shim.
        let declined = &b["dispatcher"]["launch_first_declined"];
        let shim = &b["dispatcher"]["launch_first_shim"];
        for (o, k) in [(declined, "ineligible"), (declined, "no_plan"), (declined, "lease"), (declined, "busy")]
            .into_iter()
            .chain([(shim, "not_fresh"), (shim, "dispatcher_busy"), (shim, "lock_waited"), (shim, "lock_wait_ns")])
        {
            assert!(o[k].is_u64(), "{name}: launch-first counter {k} missing from the census: {b:#}");
        }
        if name == "throughput-lf-try-only" {
            assert_eq!(shim["lock_waited"], 0, "{name}: the lock was only to be tried: {b:#}");
        }
        eprintln!("{name}: launch-first {shim}");
        // Where the shared structures lie: offsets within their 4 KiB pages.
        let layout = &b["dispatcher"]["layout"];
        let offsets: Vec<u64> = ["vctx", "submits", "slot", "stop"]
            .iter()
            .map(|k| layout[k].as_u64().unwrap_or_else(|| panic!("{name}: layout.{k} missing from the census: {b:#}")))
            .collect();
        assert!(offsets.iter().all(|&o| o < 4096), "{name}: a page offset beyond the page: {layout}");
        // Hybrid fences by default; events where the device has no 64-bit stream memory
        // operations or when asked for.
        let fence = match name {
            "chaos-memory-fence" => "memory",
            "throughput-memory-fence-no-memops" | "throughput-hybrid-fence-no-memops" | "throughput-event-fence" => {
                "event"
            }
            _ => "hybrid",
        };
        assert_eq!(b["dispatcher"]["fence"], fence, "{name}: {b:#}");
        // Fast waits (on by default) need memory fences (the words of the lanes waited for) and
        // the wait assist (the waiting thread polls, and learns the lanes at its polls).
        let fast_waits = b["dispatcher"]["fast_waits"].as_u64().expect("fast_waits in the census");
        if fence == "event" || name.contains("no-fast-wait") || name.contains("no-assist") {
            assert_eq!(fast_waits, 0, "{name}: {b:#}");
        } else {
            // Whether a wait ends on the words or at a poll is a race: counted over the runs.
            fast_waits_total += fast_waits;
        }
        eprintln!("{name}: fast waits {fast_waits}");
        let submit = &b["dispatcher"]["submit_thread"];
        match name {
            "chaos-no-submit-thread" => assert!(submit.is_null(), "no submission thread: {b:#}"),
            // Every submission within 1 s of the previous one (all but the first) is handed off:
            // the thread never parks.
            "chaos-submit-burst" => {
                assert!(submit["handed_off"].as_u64().unwrap() > 0, "{b:#}");
                assert!(submit["direct"].as_u64().unwrap() <= 1, "{b:#}");
            }
            _ => assert!(submit["direct"].as_u64().unwrap() > 0, "a lone submission is issued directly: {b:#}"),
        }
    }
    // Each of these paths wins a race against the dispatcher thread (for its lock, or for an op),
    // which a loaded CPU can lose in every configuration above: when one was never taken, the
    // default configuration (or eager continuation) runs again, a few times at most, and then
    // must have taken it.
    for attempt in 0..6 {
        let missing = eager_continued_total == 0
            || eager_total == 0
            || after_launch_first_total == 0
            || fast_waits_total == 0
            || launched_first_total == 0;
        if !missing {
            break;
        }
        let name = format!("throughput-retry{attempt}");
        let vars: &[(&str, &str)] = if eager_continued_total == 0 { &[("eager_continue", "1")] } else { &[] };
        let r = run(&name, Some(vars), &[]);
        check_bind_run(&name, &r);
        let d = &bind_census(&r)["dispatcher"];
        let n = |k: &str| d[k].as_u64().unwrap_or(0);
        if eager_continued_total == 0 {
            eager_continued_total += n("eager_continued");
        } else {
            after_launch_first_total += n("eager_continued");
        }
        eager_total += n("eager");
        fast_waits_total += n("fast_waits");
        launched_first_total += n("launched_first");
        eprintln!("{name}: retried for a race lost above: {d}");
    }
    assert!(eager_continued_total > 0, "no run continued an op on the application thread");
    assert!(eager_total > 0, "none of {eager_runs} runs with eager binding on bound an op eagerly");
    assert!(after_launch_first_total > 0, "no op was continued by the thread after its launch-first launch");
    assert!(fast_waits_total > 0, "no wait ended on the fence words read by the waiting thread");
    // The other Throughput configurations launch first too, unless the dispatcher thread held
    // its lock at each fresh launch (a race): counted over them.
    assert!(launched_first_total > 0, "no other Throughput run launched an op before its record");
}

/// The interposer asks the driver's occupancy of each (function, threads, dynamic shared memory)
/// a valid launch uses, once per process: the policies' size model counts waves with it.
#[test]
fn a_node_s_lanes_beyond_the_first_get_their_stream_at_their_first_submission() {
    // The fake pool: 15 nodes, the whole-device one on primary-context streams, so 14 green
    // contexts of 4 lanes each.
    let streams = |r: &Run| -> (BTreeMap<String, usize>, usize) {
        let mut per_ctx = BTreeMap::new();
        for l in r.calls.lines().filter(|l| l.starts_with("cuGreenCtxStreamCreate ")) {
            *per_ctx.entry(l.split_whitespace().nth(1).unwrap_or_default().to_string()).or_insert(0) += 1;
        }
        let contexts = r.calls.lines().filter(|l| l.starts_with("cuGreenCtxCreate ")).count();
        (per_ctx, contexts)
    };
    let log = [("FAKE_CUDA_LOG_STREAMS", "1")];
    // Remainders at start-up too, so that both runs create all 14 contexts.
    let start_up = run(
        "lanes-start-up",
        Some(&[("VITAMIN_POLICY", "chaos"), ("lane_streams", "start-up"), ("remainders", "start-up")]),
        &log,
    );
    check_bind_run("lanes-start-up", &start_up);
    let (per_ctx, contexts) = streams(&start_up);
    assert_eq!(contexts, 14, "{}", start_up.calls);
    assert!(per_ctx.len() == 14 && per_ctx.values().all(|&n| n == 4), "start-up: {per_ctx:?}");

    let on_demand = run(
        "lanes-on-demand",
        Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "7"), ("remainders", "start-up")]),
        &log,
    );
    check_bind_run("lanes-on-demand", &on_demand);
    let (per_ctx, contexts) = streams(&on_demand);
    assert_eq!(contexts, 14, "{}", on_demand.calls);
    // Lane 0 of every context at creation; another lane only where the run submitted to it (the
    // program submits fewer ops than the 42 lanes beyond the first).
    assert!(per_ctx.len() == 14 && per_ctx.values().all(|&n| (1..=4).contains(&n)), "on-demand: {per_ctx:?}");
    let total: usize = per_ctx.values().sum();
    assert!(total < 14 * 4, "every lane got a stream: {per_ctx:?}");
}

#[test]
fn the_occupancy_of_each_function_and_shape_is_asked_once() {
    let r = run("occupancy", Some(&[("VITAMIN_POLICY", "throughput")]), &[]);
    check_bind_run("occupancy", &r);
    let shape = |line: &str, block_at: &str| -> Option<(String, u64, u64)> {
        let mut w = line.split_whitespace().skip(1);
        let name = w.next()?.to_string();
        let rest: Vec<&str> = w.collect();
        let field = |k: &str| rest.iter().find_map(|x| x.strip_prefix(k));
        let threads = match field(block_at)? {
            b if block_at == "block=" => b.split(',').map(|d| d.parse::<u64>().unwrap()).product(),
            t => t.parse().unwrap(),
        };
        Some((name, threads, field("smem=")?.parse().unwrap()))
    };
    let mut asked = BTreeMap::new();
    for l in r.calls.lines().filter(|l| l.starts_with("cuOccupancyMaxActiveBlocksPerMultiprocessor ")) {
        *asked.entry(shape(l, "threads=").expect("name, threads, smem")).or_insert(0) += 1;
    }
    let kernel_launches =
        || r.calls.lines().filter(|l| l.starts_with("cuLaunch") && !l.starts_with("cuLaunchHostFunc"));
    // (function, threads) of every launch the driver saw, the invalid ones included (their log
    // lines carry no shared memory; an invalid cooperative launch is passed to the driver after
    // its occupancy said it cannot be co-resident).
    let launched: std::collections::BTreeSet<(String, u64)> = kernel_launches()
        .filter_map(|l| {
            let mut w = l.split_whitespace().skip(1);
            let name = w.next()?.to_string();
            let block = w.find_map(|x| x.strip_prefix("block="))?;
            Some((name, block.split(',').map(|d| d.parse::<u64>().unwrap()).product()))
        })
        .collect();
    assert!(!asked.is_empty(), "no occupancy query in the call log");
    // The CUDA backend's co-residency check (a cooperative launch's node) asks the driver too, once
    // per shape in its own cache: a shape that a cooperative launch also uses is asked twice, never
    // once per launch (12 launches of step with 256 threads here).
    let cooperative: Vec<(String, u64, u64)> = r
        .calls
        .lines()
        .filter(|l| l.starts_with("cuLaunchCooperativeKernel ") || l.contains(" attrs=2:01"))
        .filter(|l| !l.contains(" -> "))
        .filter_map(|l| shape(l, "block="))
        .collect();
    for (key, n) in &asked {
        let most = if cooperative.contains(key) { 2 } else { 1 };
        assert!(*n <= most, "{key:?} asked {n} times (at most {most})");
        assert!(launched.contains(&(key.0.clone(), key.1)), "{key:?} asked but never launched: {launched:?}");
    }
    // Every shape of a valid launch was asked.
    let plain: std::collections::BTreeSet<_> =
        kernel_launches().filter(|l| !l.contains(" -> ")).filter_map(|l| shape(l, "block=")).collect();
    let asked: std::collections::BTreeSet<_> = asked.into_keys().collect();
    assert!(plain.is_subset(&asked), "launched {plain:?}, asked {asked:?}");
}

#[test]
fn without_green_contexts_bind_mode_falls_back_to_observe() {
    let r = run("no-green", Some(&[("VITAMIN_POLICY", "chaos")]), &[("FAKE_CUDA_NO_GREEN", "1")]);
    assert!(r.out.status.success(), "{}", stdout(&r));
    assert_eq!(stdout(&r), stdout(native()));
    let (valid, ctx, _) = launches(&r.calls);
    assert_eq!(valid, launches(&native().calls).0);
    assert!(ctx.iter().all(|c| c == "p"), "observe mode forwards to the application's streams");
    check_order("no-green", &r.exec);
    let b = bind_census(&r);
    assert_eq!(b["active"], false, "{b:#}");
    let reason = b["reason"].as_str().unwrap();
    assert!(reason.contains("unavailable") && reason.contains("green"), "{reason}");
    // Counting goes on as in observe mode.
    assert_eq!(r.census.as_ref().unwrap()["totals"]["kernel_launches"], 14);
}

/// Bind mode is the default: preloading the shim without `VITAMIN_MODE` binds every launch, as
/// `VITAMIN_MODE=bind` does.
#[test]
fn bind_is_the_default_mode() {
    let f = fixture();
    let census = f.dir.join("default.census.json");
    let _ = std::fs::remove_file(&census);
    let shim = shim_path();
    let r =
        run("default", None, &[("LD_PRELOAD", shim.to_str().unwrap()), ("VITAMIN_CENSUS", census.to_str().unwrap())]);
    check_bind_run("default", &r);
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&census).expect("census")).expect("JSON");
    assert_eq!(c["mode"], "bind");
    assert_eq!(c["bind"]["active"], true, "{:#}", c["bind"]);
    assert_eq!(c["bind"]["policy"], "throughput", "the default policy");
}

#[test]
fn a_launch_failing_after_binding_surfaces_at_a_sync_on_both_submission_paths() {
    // The fake driver fails the 5th and every later kernel launch on a green-context stream (an
    // error eager validation cannot foresee). Handed to the submission thread (every submission
    // within 1 s of the previous one) or issued by the dispatcher thread itself, the failure must
    // reach the application at a synchronize call as the native asynchronous error, and the
    // process must end (no op waits for ever).
    for (name, vars) in [
        ("fail-submit-thread", vec![("submit_burst_us", "1000000"), ("submit_spin_us", "10000000")]),
        ("fail-direct", vec![("submit_thread", "0")]),
    ] {
        let r = run(name, Some(&vars), &[("FAKE_CUDA_FAIL_GREEN_LAUNCH", "5")]);
        let out = stdout(&r);
        assert!(!r.out.status.success(), "{name}: the application must see the failure:\n{out}");
        let failed_line = out.lines().find(|l| l.starts_with("FAILED")).unwrap_or_default();
        assert!(failed_line.ends_with("= 719"), "{name}: CUDA_ERROR_LAUNCH_FAILED expected: {failed_line:?}\n{out}");
        assert!(!failed_line.contains("cuLaunch"), "{name}: launches themselves return at once: {failed_line}");
        let b = bind_census(&r);
        assert!(b["dispatcher"]["failed"].as_u64().unwrap() > 0, "{name}: {b:#}");
        if name == "fail-submit-thread" {
            assert!(b["dispatcher"]["submit_thread"]["handed_off"].as_u64().unwrap() > 0, "{b:#}");
        }
    }
}

#[test]
fn a_raised_shared_memory_limit_is_raised_in_each_green_context_or_the_function_stays_on_the_whole_device() {
    // The fake driver gives each green context its own instance of a function, with the default
    // 48 KiB dynamic shared memory limit (as cuDNN's kernels behaved on the H200). bind_app raises
    // k9's limit in the primary context and launches it with 64 KiB: under Chaos the launch must
    // still run unchanged and succeed, its limit raised in the green context it lands on; and when
    // the driver refuses that, on the whole-device node (primary context) instead, logged once.
    let n = native();
    for (name, fake) in [("smem-raised", vec![]), ("smem-refused", vec![("FAKE_CUDA_GREEN_SETATTR_FAILS", "1")])] {
        let r = run(name, Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "3"), ("VITAMIN_LOG", "warn")]), &fake);
        assert_eq!(stdout(&r), stdout(n), "{name}: the program's output must not change");
        assert!(!r.calls.contains("green context limit"), "{name}: a launch failed on a green context:\n{}", r.calls);
        let big: Vec<&str> = r
            .calls
            .lines()
            .filter(|l| l.starts_with("cuLaunch") && l.contains("smem=65536") && !l.contains(" -> "))
            .collect();
        assert!(!big.is_empty(), "{name}: the 64 KiB launch ran: {}", r.calls);
        let stderr = String::from_utf8_lossy(&r.out.stderr);
        if name == "smem-refused" {
            assert!(big.iter().all(|l| l.contains("ctx=p")), "{name}: kept on the primary context: {big:?}");
            assert!(stderr.contains("could not raise the dynamic shared memory limit"), "{name}: logged: {stderr}");
        }
    }
}

#[test]
fn an_asynchronous_failure_is_logged_once_with_its_op_and_reported_with_the_driver_s_code() {
    // One logging path: the dispatcher's own events reach stderr through the shim's subscriber,
    // and a failed op is named (kernel, op, pool node, driver error). The fake driver's injected
    // launch failure (the 5th green-context launch and later) returns 719 from cuLaunchKernel: the
    // application must see that code at its next synchronize, not a generic one.
    let r = run(
        "fail-logged",
        Some(&[("VITAMIN_SUBMIT_THREAD", "0"), ("VITAMIN_LOG", "warn")]),
        &[("FAKE_CUDA_FAIL_GREEN_LAUNCH", "5")],
    );
    let stderr = String::from_utf8_lossy(&r.out.stderr);
    let failed: Vec<&str> = stderr.lines().filter(|l| l.contains("op failed")).collect();
    assert!(!failed.is_empty(), "a failure line: {stderr}");
    let line = failed[0];
    for part in ["ERROR", "what=\"kernel\"", "name=", "node=", "(719)"] {
        assert!(line.contains(part), "{part:?} in {line:?}");
    }
    assert!(stderr.contains("submission failed"), "the runtime's own warning reaches stderr: {stderr}");
    let out = stdout(&r);
    let failed_line = out.lines().find(|l| l.starts_with("FAILED")).unwrap_or_default();
    assert!(failed_line.ends_with("= 719"), "the driver's code: {failed_line:?}\n{out}");
}

#[test]
fn an_asynchronous_kernel_fault_reports_the_driver_s_code_at_the_next_sync() {
    // The fake driver faults when kernel k5 finishes (a sticky CUDA_ERROR_ILLEGAL_ADDRESS, 700, as
    // a kernel's illegal access leaves the context). Natively the program's next synchronization
    // (or a launch after the fault) returns 700; under bind mode too, never a generic code.
    let fault = [("FAKE_CUDA_FAULT_KERNEL", "k5")];
    let n = run("fault-native", None, &fault);
    let native_failed = stdout(&n).lines().find(|l| l.starts_with("FAILED")).unwrap_or_default().to_string();
    assert!(native_failed.ends_with("= 700"), "natively: {native_failed:?}\n{}", stdout(&n));
    for (name, policy) in [("fault-chaos", "chaos"), ("fault-throughput", "throughput")] {
        let r = run(name, Some(&[("VITAMIN_POLICY", policy), ("VITAMIN_LOG", "error")]), &fault);
        assert!(!r.out.status.success(), "{name}: the program must see the fault");
        let out = stdout(&r);
        let failed = out.lines().find(|l| l.starts_with("FAILED")).unwrap_or_default();
        assert!(failed.ends_with("= 700"), "{name}: the driver's code: {failed:?}\n{out}");
        // Where vitamin observed the fault itself (a synchronize or query of a logical stream), it
        // logged the failed op with the driver's code; a launch made by the application's thread
        // after the fault (launch-first, Throughput) returns the driver's own result, as natively.
        if failed.contains("Synchronize") || failed.contains("Query") {
            let stderr = String::from_utf8_lossy(&r.out.stderr);
            assert!(
                stderr.contains("op failed") && stderr.contains("code=Some(700)"),
                "{name}: logged with its op: {failed} {stderr}"
            );
        }
    }
}

#[test]
fn a_pool_that_cannot_be_created_leaves_the_program_running_in_observe_mode() {
    // Out of memory at the first green context (nothing realized) and at the fifth (a tree that
    // realizes only partly; the fake pool creates its 8 tree contexts at start-up): bind mode
    // cannot start, so the program runs natively (observe mode), with its native output, and the
    // census and one warning say why.
    let n = native();
    for (name, at) in [("oom-first", "1"), ("oom-partial", "5")] {
        let r =
            run(name, Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_LOG", "warn")]), &[("FAKE_CUDA_GREEN_OOM_AT", at)]);
        assert!(r.out.status.success(), "{name}: {}", stdout(&r));
        assert_eq!(stdout(&r), stdout(n), "{name}: native output");
        let (valid, ctx, _) = launches(&r.calls);
        assert_eq!(valid, launches(&n.calls).0, "{name}: every launch forwarded unchanged");
        assert!(ctx.iter().all(|c| c == "p"), "{name}: on the application's own streams");
        let b = bind_census(&r);
        assert_eq!(b["active"], false, "{name}: {b:#}");
        let reason = b["reason"].as_str().unwrap_or_default().to_lowercase();
        assert!(reason.contains("memory") || reason.contains("out_of_memory"), "{name}: {reason}");
        let stderr = String::from_utf8_lossy(&r.out.stderr);
        let warnings = stderr.lines().filter(|l| l.contains("running in observe mode")).count();
        assert_eq!(warnings, 1, "{name}: one message that bind mode fell back: {stderr}");
    } // Out of memory from the ninth on: the tree was realized, so bind mode runs; a remainder the
      // policy picks cannot be created and takes no work, and the program's output is its own.
    let r = run(
        "oom-remainder",
        Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "3"), ("VITAMIN_LOG", "error")]),
        &[("FAKE_CUDA_GREEN_OOM_AT", "9")],
    );
    assert!(r.out.status.success(), "oom-remainder: {}", stdout(&r));
    assert_eq!(stdout(&r), stdout(n), "oom-remainder: native output");
    check_bind_run("oom-remainder", &r);
    let b = bind_census(&r);
    assert_eq!(b["active"], true, "oom-remainder: {b:#}");
    let pool = &b["dispatcher"]["pool"];
    assert_eq!((&pool["created"], &pool["on_demand"]["created"]), (&json!(9), &json!(0)), "the tree only: {pool:#}");
}

#[test]
fn memory_imported_through_cuda_ipc_is_unmapped_only_after_the_launches_recorded_before_ran() {
    // torch_ipc's importer drops a received tensor (cuIpcCloseMemHandle) right after launching
    // the kernels that read it; bound later than that, they faulted on the unmapped memory (H100,
    // docs/results/apps-suite.md runs 20-21). bind_app (BIND_APP_IPC) imports, launches k90 on
    // the imported memory and closes the handle at once: under every policy, k90 must have ended
    // before the close reaches the driver, and the output must not change.
    let n = native();
    for (name, policy) in [("ipc-chaos", "chaos"), ("ipc-throughput", "throughput"), ("ipc-exclusive", "exclusive")] {
        let r = run(name, Some(&[("VITAMIN_POLICY", policy), ("VITAMIN_SEED", "3")]), &[("BIND_APP_IPC", "1")]);
        assert!(r.out.status.success(), "{name}:\n{}", stdout(&r));
        assert_eq!(stdout(&r), stdout(n), "{name}: the program's output must not change");
        assert!(r.calls.contains("cuIpcCloseMemHandle ok"), "{name}: the close reached the driver:\n{}", r.calls);
        check_exec_order(name, &r.exec, &[("mark start", "begin k90"), ("end k90", "mark ipc close")]);
    }
}

/// `profile_out` records, at exit, the times of launches that ran alone on their lane per launch
/// configuration and node size; `profiles` loads such a file for the next run; a file that cannot
/// be read keeps bind mode from starting (observe mode, the census says why). The output is the
/// program's own every time.
#[test]
fn a_recorded_profile_is_written_at_exit_and_loaded_by_the_next_run() {
    let f = fixture();
    let n = native();
    let recorded = || {
        std::fs::read_dir(&f.dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter_map(|name| name.strip_prefix("recorded.profile")?.strip_suffix(".json")?.parse::<u32>().ok())
            .collect::<Vec<_>>()
    };
    for pid in recorded() {
        let _ = std::fs::remove_file(f.dir.join(format!("recorded.profile{pid}.json")));
    }
    let template = f.dir.join("recorded.profile%p.json");
    let r = run(
        "profile-record",
        Some(&[
            ("VITAMIN_POLICY", "chaos"),
            ("VITAMIN_LANE_CONTINUATION", "0"),
            ("profile_out", template.to_str().unwrap()),
        ]),
        &[],
    );
    check_bind_run("profile-record", &r);
    assert_eq!(stdout(&r), stdout(n), "native output");
    let [pid] = recorded()[..] else { panic!("one profile, named with the process id: {:?}", recorded()) };
    let path = f.dir.join(format!("recorded.profile{pid}.json"));
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("profile JSON");
    assert_eq!(p["version"], 1);
    let entries = p["entries"].as_object().expect("entries");
    assert!(!entries.is_empty(), "launch configurations recorded: {p:#}");
    for (key, e) in entries {
        let times = e["times"].as_array().unwrap();
        assert!(!times.is_empty(), "{key}: {e:#}");
        for t in times {
            let (units, ns) = (t[0].as_u64().unwrap(), t[1].as_f64().unwrap());
            assert!(units > 0 && ns > 0.0, "{key}: {t}");
        }
    }
    let r = run("profile-load", Some(&[("VITAMIN_POLICY", "throughput"), ("profiles", path.to_str().unwrap())]), &[]);
    check_bind_run("profile-load", &r);
    assert_eq!(stdout(&r), stdout(n), "native output with the profile loaded");
    assert_eq!(bind_census(&r)["active"], true);
    let bad = f.dir.join("bad.profile.json");
    std::fs::write(&bad, "{\"version\": 99}").unwrap();
    let r = run("profile-bad", Some(&[("profiles", bad.to_str().unwrap()), ("VITAMIN_LOG", "warn")]), &[]);
    assert!(r.out.status.success(), "{}", stdout(&r));
    assert_eq!(stdout(&r), stdout(n), "native output in observe mode");
    let b = bind_census(&r);
    assert_eq!(b["active"], false, "{b:#}");
    let reason = b["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("profiles") && reason.contains("version 99"), "{reason}");
}
