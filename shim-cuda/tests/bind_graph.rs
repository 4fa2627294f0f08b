//! Graph launches in bind mode, without a GPU: tests/fake/graph_app.c (graph launches between
//! kernels, a launch on a second stream while the previous launch of the same executable graph is
//! held back, an update and a parameter change after held launches, destroy right after a launch, an upload, a launch into a capturing stream) runs against
//! the fake libcuda in its asynchronous mode, natively and under the shim in bind mode.
//!
//! Checked for every policy (and strict readiness): the program prints what it prints natively;
//! each `cuGraphLaunch` is recorded as one op and reaches the driver on a green-context stream (a
//! pool node's lane), except the launch into a capturing stream, which is forwarded natively and
//! captured; the execution log respects stream order with the kernels before and after each launch
//! and the driver's ordering of launches of one executable graph across streams; every launch ran
//! with the version of the executable graph current when the application launched it (an update
//! or parameter change never overtakes a held launch); destroying the executable graph right after
//! launching it does not lose the launch; the executable-graph calls reach the driver in the same
//! order relative to the launches as natively.

use std::sync::OnceLock;

use serde_json::Value;

mod support;
use support::{check_exec_order, run_async_app, AppRun, FakeApp};

fn fixture() -> &'static FakeApp {
    static F: OnceLock<FakeApp> = OnceLock::new();
    F.get_or_init(|| FakeApp::build("shim-bind-graph", "graph_app"))
}

fn run(name: &str, bind: Option<&[(&str, &str)]>) -> AppRun {
    let f = fixture();
    // The whole-device node (where graphs go) on a green context, as every other node: the
    // checks below tell a bound graph launch from the captured one by its context. Its default,
    // the primary context, is checked by tests/bind.rs.
    run_async_app(&f.app, &f.dir, name, bind, &[("VITAMIN_ROOT_CONTEXT", "green")])
}

fn native() -> &'static AppRun {
    static N: OnceLock<AppRun> = OnceLock::new();
    N.get_or_init(|| {
        let r = run("native", None);
        assert!(r.out.status.success(), "native run failed:\n{}", r.stdout());
        assert!(r.stdout().ends_with("done\n"), "{}", r.stdout());
        r
    })
}

/// Happens-before of the program (execution-log keys: the text before ` ctx=`). A graph launch's
/// key carries the version it ran with: `begin graph2.2 v0` means the second launch of executable
/// graph 2 ran with version 0, i.e. the update issued after it did not overtake it.
const EDGES: &[(&str, &str)] = &[
    ("mark start", "begin k1"),
    ("end k1", "begin graph2.1 v0 launches=1"),
    ("end graph2.1", "begin k2"),
    ("end k2", "begin k91"),
    ("end k91", "begin graph2.2 v0 launches=1"),
    ("end graph2.2", "begin graph2.3 v0 launches=1"), // launches of one executable graph, across streams
    ("end graph2.3", "begin graph2.4 v1 launches=1"),
    ("end graph2.4", "begin graph2.5 v2 launches=1"),
    ("end graph2.5", "begin k3"),
    ("end k3", "mark after sync s2"),
    ("mark after sync s2", "begin k92"),
    ("end k92", "begin graph2.6 v2 launches=1"),
    ("end graph2.6", "begin k4"),
    ("end k4", "mark after ctx sync"),
];

/// The call-log lines of the executable-graph calls (instantiate, upload, update, parameter
/// change, destroy) and of the graph launches, in order, without stream and context words (stream
/// indices differ under the shim, which creates the pool's streams).
fn graph_calls(calls: &str) -> Vec<String> {
    calls
        .lines()
        .filter(|l| l.starts_with("cuGraph") || l.starts_with("cuStreamEndCapture"))
        .map(|l| {
            l.split_whitespace()
                .filter(|w| !w.starts_with("stream=") && !w.starts_with("ctx="))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn launch_contexts(calls: &str) -> Vec<(String, String)> {
    calls
        .lines()
        .filter(|l| l.starts_with("cuGraphLaunch "))
        .map(|l| {
            let graph = l.split_whitespace().find_map(|w| w.strip_prefix("graph=")).unwrap().to_string();
            let ctx = l.split_whitespace().find_map(|w| w.strip_prefix("ctx=")).unwrap().to_string();
            (graph, ctx)
        })
        .collect()
}

fn check_bind_run(name: &str, r: &AppRun) -> Value {
    let n = native();
    assert!(r.out.status.success(), "{name} failed:\n{}\n{}", r.stdout(), String::from_utf8_lossy(&r.out.stderr));
    assert_eq!(r.stdout(), n.stdout(), "{name}: the program's output differs from the native run");
    assert!(!r.calls.contains("DESTROYED"), "{name}: a launch reached the driver after its graph was destroyed");
    check_exec_order(name, &r.exec, EDGES);
    assert!(!r.exec.contains("begin k50"), "{name}: the captured kernel must not run");
    // Same executable-graph calls, launches in between, same launch counts at each call.
    assert_eq!(graph_calls(&r.calls), graph_calls(&n.calls), "{name}: graph calls differ from the native order");
    // Native: every launch on the application's streams. Bind: the six launches on pool nodes'
    // green-context streams, the launch into the capture natively (captured).
    let native_ctx = launch_contexts(&n.calls);
    assert!(native_ctx.iter().all(|(_, c)| c == "p"), "{native_ctx:?}");
    let ctx = launch_contexts(&r.calls);
    assert_eq!(ctx.len(), 7, "{name}: {ctx:?}");
    for (g, c) in &ctx {
        assert_eq!(c.starts_with('g'), g.starts_with("2."), "{name}: graph launch {g} went to {c}: {ctx:?}");
    }
    assert!(r.calls.lines().any(|l| l.starts_with("cuGraphLaunch graph=3 ") && l.contains(" captured ")));
    // Every kernel ran on a green context.
    for line in r.exec.lines().filter(|l| l.starts_with("begin k")) {
        assert!(line.contains(" ctx=g"), "{name}: {line}");
    }
    let c = r.census.as_ref().expect("bind-mode census");
    assert_eq!(c["mode"], "bind");
    let b = c["bind"].clone();
    assert_eq!(b["active"], true, "{b:#}");
    assert_eq!(b["ops"]["graph_launches"], 6, "{name}: {b:#}");
    assert_eq!(b["ops"]["kernels"], 6, "{name}: {b:#}");
    let per_node: u64 = b["dispatcher"]["per_node"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum();
    assert_eq!(per_node, 12, "{name}: six kernels and six graph launches ran on pool nodes: {b:#}");
    assert_eq!(b["graph_execs_mapped"], 0, "{name}: the launched executable graph was destroyed: {b:#}");
    // The fake's kernel nodes name module functions: no copy, both executable graphs whole-device.
    let copies = &b["graph_copies"];
    assert_eq!((copies["confinable"].as_u64(), copies["module_function"].as_u64()), (Some(0), Some(2)), "{copies}");
    b
}

#[test]
fn the_native_run_respects_the_program_order() {
    check_exec_order("native", &native().exec, EDGES);
    assert!(!native().calls.contains("DESTROYED"));
}

#[test]
fn graph_launches_are_bound_ops_under_every_policy() {
    for (name, vars) in [
        ("chaos", vec![("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "3")]),
        ("throughput", vec![("VITAMIN_POLICY", "throughput")]),
        ("tpot", vec![("VITAMIN_POLICY", "tpot")]),
        ("static", vec![("VITAMIN_POLICY", "static")]),
        ("exclusive", vec![("VITAMIN_POLICY", "exclusive")]),
    ] {
        let r = run(name, Some(&vars));
        let b = check_bind_run(name, &r);
        let d = &b["dispatcher"];
        let graphs_bound = d["graphs"].as_u64().unwrap();
        assert!(graphs_bound <= 6, "{name}: {d}");
    }
}

/// Under strict readiness nothing is bound before its predecessors completed, so the launches held
/// behind the 300 ms kernels are not submitted when the application updates and destroys the
/// executable graph: both calls must wait for them (and they did, or the versions and the destroy
/// check above would fail). Every launch is then bound through `select_graph`.
#[test]
fn strict_readiness_makes_graph_calls_wait_for_held_launches() {
    let r = run("chaos-strict", Some(&[("VITAMIN_POLICY", "chaos"), ("VITAMIN_LANE_CONTINUATION", "0")]));
    let b = check_bind_run("chaos-strict", &r);
    assert!(b["ops"]["graph_exec_waits"].as_u64().unwrap() >= 2, "update and destroy waited: {b:#}");
    assert_eq!(b["dispatcher"]["graphs"], 6, "{b:#}");
    assert_eq!(b["dispatcher"]["continued"], 0, "{b:#}");
}

/// One graph launch in the execution log: executable graph, version, the stream's context and the
/// context its kernel nodes ran in.
#[derive(Debug)]
struct GraphRun {
    exec: u32,
    version: u32,
    ctx: String,
    nodes: String,
}

/// The graph launches of an execution log in the order they began, and the log with each launch
/// renamed `G<n>` (n from 1, in that order), so that edges can name "the n-th launch" whichever
/// executable graph (the application's or a partition's copy) ran it.
fn graph_runs(exec: &str) -> (Vec<GraphRun>, String) {
    let mut runs = Vec::new();
    let mut names = std::collections::HashMap::new();
    let mut renamed = String::new();
    for line in exec.lines() {
        let mut w = line.split_whitespace();
        let (what, id) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
        let Some(launch) = id.strip_prefix("graph") else {
            renamed.push_str(line);
            renamed.push('\n');
            continue;
        };
        if what == "begin" {
            let field = |k: &str| line.split_whitespace().find_map(|x| x.strip_prefix(k)).unwrap().to_string();
            let version = line.split_whitespace().nth(2).unwrap().trim_start_matches('v').parse().unwrap();
            runs.push(GraphRun {
                exec: launch.split('.').next().unwrap().parse().unwrap(),
                version,
                ctx: field("ctx="),
                nodes: field("nodes="),
            });
            names.insert(launch.to_string(), runs.len());
            renamed.push_str(&format!("begin G{} ctx={}\n", runs.len(), runs.last().unwrap().ctx));
        } else {
            renamed.push_str(&format!("{what} G{}\n", names[launch]));
        }
    }
    (runs, renamed)
}

/// [`EDGES`] with the n-th graph launch as `G<n>`.
const COPY_EDGES: &[(&str, &str)] = &[
    ("mark start", "begin k1"),
    ("end k1", "begin G1"),
    ("end G1", "begin k2"),
    ("end k2", "begin k91"),
    ("end k91", "begin G2"),
    ("end G2", "begin G3"), // launches of one executable graph, across streams and copies
    ("end G3", "begin G4"),
    ("end G4", "begin G5"),
    ("end G5", "begin k3"),
    ("end k3", "mark after sync s2"),
    ("mark after sync s2", "begin k92"),
    ("end k92", "begin G6"),
    ("end G6", "begin k4"),
    ("end k4", "mark after ctx sync"),
];

/// When the graph's kernel nodes carry a `CUkernel` (the fake's `FAKE_CUDA_GRAPH_KERNELS`), a
/// graph launch bound to a node short of the whole device runs that node's own copy of the graph,
/// whose kernel nodes name the node's green context (`nodes=` equal to the stream's `ctx=`); the
/// whole-device node runs the application's graph. The launches keep the program's order (each
/// behind the previous launch of the executable graph, whichever copies ran them) and its output.
/// The update re-snapshots the new graph (launch 4 may still run a copy); after the kernel-node
/// parameter change no copy matches the executable graph, so launches 5 and 6 run the
/// application's graph with that change (version 2) on the whole device.
#[test]
fn graph_launches_bound_to_partitions_run_copies_confined_there() {
    let f = fixture();
    let env = [("VITAMIN_ROOT_CONTEXT", "green"), ("FAKE_CUDA_GRAPH_KERNELS", "1")];
    let native = run_async_app(&f.app, &f.dir, "copies-native", None, &env);
    assert!(native.out.status.success(), "{}", native.stdout());
    let mut copies_ran = 0;
    for seed in ["1", "3", "7", "11"] {
        let name = format!("copies-chaos-{seed}");
        let vars = [("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", seed)];
        let r = run_async_app(&f.app, &f.dir, &name, Some(&vars), &env);
        assert!(r.out.status.success(), "{name}:\n{}\n{}", r.stdout(), String::from_utf8_lossy(&r.out.stderr));
        assert_eq!(r.stdout(), native.stdout(), "{name}: the program's output differs from the native run");
        assert!(!r.calls.contains("DESTROYED"), "{name}: a launch reached the driver after its graph was destroyed");
        let (runs, renamed) = graph_runs(&r.exec);
        assert_eq!(runs.len(), 6, "{name}: {runs:?}");
        check_exec_order(&name, &renamed, COPY_EDGES);
        for (n, run) in runs.iter().enumerate() {
            if run.exec == 2 {
                assert_eq!(run.nodes, "p", "{name}: launch {} of the application's graph: {run:?}", n + 1);
            } else {
                assert!(n < 4, "{name}: launch {} after the parameter change ran a copy: {runs:?}", n + 1);
                assert!(run.ctx.starts_with('g'), "{name}: {run:?}");
                assert_eq!(run.nodes, run.ctx, "{name}: launch {}'s kernels ran outside its node: {run:?}", n + 1);
                copies_ran += 1;
            }
        }
        for run in &runs[4..] {
            assert_eq!((run.exec, run.version), (2, 2), "{name}: {runs:?}");
        }
        let c = r.census.as_ref().expect("bind-mode census");
        let counts = &c["bind"]["graph_copies"];
        // e, then e after its update, then e3: every one confinable.
        assert_eq!(counts["confinable"], 3, "{name}: {counts}");
        assert_eq!(counts["whole_device"], 0, "{name}: {counts}");
        assert_eq!(counts["failed"], 0, "{name}: {counts}");
        let distinct: std::collections::BTreeSet<u32> = runs.iter().map(|r| r.exec).filter(|&e| e != 2).collect();
        assert!(counts["copies"].as_u64().unwrap() >= distinct.len() as u64, "{name}: {counts} {runs:?}");
    }
    assert!(copies_ran > 0, "no launch ran a copy under any seed");
}

/// A graph with a cooperative kernel node is not copied: every launch runs the application's graph
/// on the whole-device node, as before copies existed.
#[test]
fn a_graph_with_a_cooperative_kernel_node_stays_on_the_whole_device() {
    let f = fixture();
    let env =
        [("VITAMIN_ROOT_CONTEXT", "green"), ("FAKE_CUDA_GRAPH_KERNELS", "1"), ("FAKE_CUDA_GRAPH_COOPERATIVE", "1")];
    let vars = [("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", "3")];
    let r = run_async_app(&f.app, &f.dir, "copies-cooperative", Some(&vars), &env);
    assert!(r.out.status.success(), "{}", r.stdout());
    assert_eq!(r.stdout(), native().stdout());
    let (runs, renamed) = graph_runs(&r.exec);
    check_exec_order("copies-cooperative", &renamed, COPY_EDGES);
    assert!(runs.iter().all(|run| run.exec == 2 && run.nodes == "p"), "{runs:?}");
    let counts = &r.census.as_ref().expect("census")["bind"]["graph_copies"];
    assert_eq!((counts["confinable"].as_u64(), counts["copies"].as_u64()), (Some(0), Some(0)), "{counts}");
    assert_eq!(counts["whole_device"], 2, "{counts}");
    assert_eq!(counts["cooperative"], 2, "{counts}");
    assert_eq!(counts["reasons"], serde_json::json!(["a kernel node is a cooperative launch"]), "{counts}");
}

/// A graph whose kernel nodes run in clusters of 16 blocks is copied, but a copy runs only on
/// partitions that place a 16-block cluster (the fake places one per 16 SMs; its smallest nodes have
/// 8): a launch Chaos binds elsewhere would fail in the fake (`CLUSTER_TOO_LARGE`) and fall back to
/// the application's graph. None may: the partitions too small refuse the graph, so Chaos picks
/// among the others.
#[test]
fn a_graph_with_cluster_kernel_nodes_runs_copies_only_where_its_clusters_fit() {
    let f = fixture();
    let env = [("VITAMIN_ROOT_CONTEXT", "green"), ("FAKE_CUDA_GRAPH_KERNELS", "1"), ("FAKE_CUDA_GRAPH_CLUSTER", "16")];
    let native = run_async_app(&f.app, &f.dir, "cluster-native", None, &env);
    assert!(native.out.status.success(), "{}", native.stdout());
    let mut copies_ran = 0;
    for seed in ["1", "3", "7", "11"] {
        let name = format!("cluster-chaos-{seed}");
        let vars = [("VITAMIN_POLICY", "chaos"), ("VITAMIN_SEED", seed)];
        let r = run_async_app(&f.app, &f.dir, &name, Some(&vars), &env);
        assert!(r.out.status.success(), "{name}:\n{}\n{}", r.stdout(), String::from_utf8_lossy(&r.out.stderr));
        assert_eq!(r.stdout(), native.stdout(), "{name}: the program's output differs from the native run");
        assert!(!r.calls.contains("CLUSTER_TOO_LARGE"), "{name}: a copy ran where its clusters do not fit");
        let (runs, renamed) = graph_runs(&r.exec);
        assert_eq!(runs.len(), 6, "{name}: {runs:?}");
        check_exec_order(&name, &renamed, COPY_EDGES);
        copies_ran += runs.iter().filter(|run| run.exec != 2 && run.nodes == run.ctx).count();
        let counts = &r.census.as_ref().expect("bind-mode census")["bind"]["graph_copies"];
        assert_eq!(
            (counts["confinable"].as_u64(), counts["clustered"].as_u64()),
            (Some(3), Some(3)),
            "{name}: {counts}"
        );
        assert_eq!((counts["failed"].as_u64(), counts["fallbacks"].as_u64()), (Some(0), Some(0)), "{name}: {counts}");
    }
    assert!(copies_ran > 0, "no launch ran a copy under any seed");
}
