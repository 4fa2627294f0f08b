//! A client under the daemon leaves a small lease for a wider free node when its work widens
//! (Throughput asked over a mirror of the lease view). The daemon runs in this test process; the
//! client is a real dispatcher on the simulated H200 over the real socket and shared memory.
//! Without the rule every later launch continued on the client's first, smallest lease (measured on
//! the H200: a GPT job alone held 36 of 132 units, docs/results/daemon-pair.md, run 3).

use std::sync::Arc;
use std::time::Duration;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::daemon::client::{ConnectOptions, DaemonClient};
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher, Remote};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

/// The simulator's compute-only `busy` kernel: `grid` blocks of 2 us each.
fn busy(d: &SimBackend, grid: u32) -> Arc<OpDesc> {
    let f = d.kernel("busy").expect("sim reference kernel");
    let args = KernelArgs::pack(&[&2_000u32.to_le_bytes()]);
    Arc::new(OpDesc::Kernel(KernelLaunch::new(f, Dim3::x(grid), Dim3::x(256), 0, args, LaunchAttributes::none())))
}

/// Records on `s` a small launch, a cooperative launch that only the whole device holds (500
/// blocks, 4 resident per unit: the widest node below the root holds fewer), and a small one.
fn record_busy_coop_busy(d: &SimBackend, v: &VirtualContext, s: vitamin_runtime::vctx::StreamId) {
    let f = d.kernel("busy").expect("sim reference kernel");
    let coop = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        f,
        Dim3::x(500),
        Dim3::x(256),
        0,
        KernelArgs::pack(&[&2_000u32.to_le_bytes()]),
        LaunchAttributes::new(true, None, None, Vec::new()),
    )));
    v.record_op(s, busy(d, 8)).unwrap();
    v.record_op(s, coop).unwrap();
    v.record_op(s, busy(d, 8)).unwrap();
}

fn start(tag: &str, policy: PolicyKind) -> Daemon {
    start_with(tag, policy, |_| {})
}

fn start_with(tag: &str, policy: PolicyKind, set: impl FnOnce(&mut DaemonConfig)) -> Daemon {
    let dir = std::env::temp_dir().join(format!("vitamin-dc-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
    cfg.decide.policy = policy;
    set(&mut cfg);
    Daemon::start(cfg).expect("daemon starts")
}

/// A dispatcher on a fresh simulated H200 with one client, attached to `daemon`, its policy `policy`.
fn client(
    daemon: &Daemon,
    policy: PolicyKind,
) -> (SimBackend, Dispatcher<SimBackend, vitamin_runtime::policy::AnyPolicy>, Arc<VirtualContext>) {
    client_as(daemon, policy, ClientClass::BestEffort)
}

/// [`client`] of class `class`.
fn client_as(
    daemon: &Daemon,
    policy: PolicyKind,
    class: ClientClass,
) -> (SimBackend, Dispatcher<SimBackend, vitamin_runtime::policy::AnyPolicy>, Arc<VirtualContext>) {
    client_with(daemon, policy, class, DispatchConfig::default())
}

/// [`client_as`] with dispatcher configuration `config`.
fn client_with(
    daemon: &Daemon,
    policy: PolicyKind,
    class: ClientClass,
    config: DispatchConfig,
) -> (SimBackend, Dispatcher<SimBackend, vitamin_runtime::policy::AnyPolicy>, Arc<VirtualContext>) {
    let d = SimBackend::preset("h200").unwrap();
    let lanes = config.lanes_per_node as u16;
    let mut disp = Dispatcher::new(d.clone(), policy.build(1), Profiles::new("test"), config).expect("pool realized");
    let v = Arc::new(VirtualContext::new(VctxId(1)));
    disp.register(v.clone(), "client", class);
    let session = DaemonClient::connect(ConnectOptions {
        socket: daemon.socket().to_path_buf(),
        name: "client".into(),
        device: 0,
        topology: d.topology().clone(),
        class,
        lanes,
        timeout: Duration::from_secs(5),
    })
    .expect("registered");
    disp.attach_remote(Remote::new(session)).expect("same pool");
    (d, disp, v)
}

/// A cooperative launch that only the whole device holds (500 blocks, 4 resident per unit: the
/// widest node below the root holds fewer) goes to the service partition under Throughput, beside
/// other clients' leases, and is bound to the whole device under Exclusive (isolation first).
/// Static shares such launches too, but a lone client's share is the whole device, which holds it.
#[test]
fn a_whole_device_launch_is_shared_under_throughput_and_bound_under_exclusive() {
    use vitamin_runtime::policy::Policy;
    assert!(PolicyKind::Static.build(0).shares_whole_device());
    assert!(PolicyKind::Tpot.build(0).shares_whole_device());
    assert!(!PolicyKind::Exclusive.build(0).shares_whole_device());
    for (policy, shared) in [(PolicyKind::Throughput, 1), (PolicyKind::Exclusive, 0)] {
        let daemon = start(policy.name(), policy);
        let (d, mut disp, v) = client(&daemon, policy);
        let widest_below_root =
            disp.pool().nodes().iter().filter(|n| n.id != disp.pool().root()).map(|n| n.size()).max().unwrap();
        assert!(widest_below_root * 4 < 500, "the launch must fit only the root");
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        record_busy_coop_busy(&d, &v, s);
        disp.run_until_idle().expect("dispatch");
        v.device_synchronize().expect("no asynchronous failure");
        assert_eq!(v.outstanding(), 0, "{}: every op completed", policy.name());
        assert_eq!(disp.stats().shared_whole_device, shared, "{}", policy.name());
    }
}

#[test]
fn a_client_leaves_its_first_small_lease_when_its_launches_widen() {
    // TPOT-First decides a best-effort client's continuations by Throughput's rule.
    for policy in [PolicyKind::Throughput, PolicyKind::Tpot] {
        leaves_its_first_small_lease(policy);
    }
}

fn leaves_its_first_small_lease(policy: PolicyKind) {
    let daemon = start(&format!("widen-{policy}"), policy);
    let (d, mut disp, v) = client(&daemon, policy);

    let s = v.create_stream(StreamKind::NonBlocking, 0);
    // One block first (the daemon binds it to a smallest node), then a chain of wide launches
    // recorded behind it, each continuable on its predecessor's lane.
    v.record_op(s, busy(&d, 1)).unwrap();
    for _ in 0..24 {
        v.record_op(s, busy(&d, 132 * 64)).unwrap();
    }
    disp.run_until_idle().expect("dispatch");
    v.device_synchronize().expect("no asynchronous failure");

    let pool = disp.pool();
    let smallest = pool.node(*pool.nodes_by_size().first().unwrap()).size();
    let widest_used = disp
        .stats()
        .per_node
        .iter()
        .enumerate()
        .filter(|&(_, &k)| k > 0)
        .map(|(i, _)| pool.nodes()[i].size())
        .max()
        .expect("some node ran ops");
    assert!(
        widest_used >= pool.node(pool.root()).size() / 2,
        "{policy}: the wide launches stayed on narrow nodes (widest used {widest_used}, smallest {smallest}): {:?}",
        disp.stats().per_node
    );
    assert_eq!(v.outstanding(), 0, "every op completed");
}

/// Runs 30 wide launches on one stream under a Throughput daemon that records its timeline with
/// room for `spans`, and returns the written trace's span events and labelled processes.
fn timeline_of(tag: &str, spans: usize) -> (Vec<serde_json::Value>, usize, usize) {
    let file = std::env::temp_dir().join(format!("vitamin-dc-{}-{tag}.json", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let daemon = start_with(tag, PolicyKind::Throughput, |c| {
        c.timeline = Some(file.clone());
        c.decide.timeline_spans = spans;
    });
    let (d, mut disp, v) = client(&daemon, PolicyKind::Throughput);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    for _ in 0..30 {
        v.record_op(s, busy(&d, 132 * 8)).unwrap();
    }
    disp.run_until_idle().expect("dispatch");
    v.device_synchronize().expect("no asynchronous failure");
    let nodes = disp.pool().nodes().len();
    // The last completions go up with the client's next round: keep rounding until the daemon
    // has counted all 30.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while daemon.status().counters.completions < 30 && std::time::Instant::now() < deadline {
        disp.run_until_idle().expect("dispatch");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(daemon.status().counters.completions, 30, "every completion reached the daemon");
    drop(disp);
    daemon.shutdown();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).expect("timeline written")).unwrap();
    let _ = std::fs::remove_file(&file);
    let events = doc["traceEvents"].as_array().expect("trace events").clone();
    // Labels as scripts/plot_timeline.py reads them: `device 0 node #N: SM a-b,...`.
    for e in events.iter().filter(|e| e["ph"] == "M") {
        let l = e["args"]["name"].as_str().unwrap();
        assert!(l.starts_with("device 0 node #") && l.contains(": SM "), "{l}");
    }
    let labels = events.iter().filter(|e| e["ph"] == "M").count();
    (events.into_iter().filter(|e| e["ph"] == "X").collect(), labels, nodes)
}

/// `vitamin daemon --timeline FILE`: when the daemon stops it writes every client's ops as
/// Chrome trace spans (Perfetto), one process per pool node, one thread per lane; bound and
/// continued ops both appear; with less room, the latest spans are kept.
#[test]
fn the_daemon_writes_the_binding_timeline_when_it_stops() {
    let (ops, labels, nodes) = timeline_of("timeline", 1000);
    assert_eq!(labels, nodes, "one labelled process per pool node");
    assert_eq!(ops.len(), 30, "every op is a span");
    assert!(ops.iter().any(|e| e["args"]["continued"] == true), "continued ops appear");
    assert!(ops.iter().any(|e| e["args"]["continued"] == false), "bound ops appear");
    for e in &ops {
        assert!(e["pid"].as_u64().unwrap() < nodes as u64 && e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        assert!(e["cat"].as_str().unwrap().contains("client"), "{e}");
    }
    let all: Vec<u64> = ops.iter().map(|e| e["args"]["op"].as_u64().unwrap()).collect();
    let (latest, _, _) = timeline_of("timeline-short", 20);
    let mut kept: Vec<u64> = latest.iter().map(|e| e["args"]["op"].as_u64().unwrap()).collect();
    kept.sort_unstable();
    let mut want = all.clone();
    want.sort_unstable();
    assert_eq!(kept, want[10..].to_vec(), "with room for 20, the 20 latest ops are kept");
}

/// Launch-first: after each synchronize the client's drained lease lingers at the daemon, so the
/// next launch goes out at once on it (reported `Launched`) instead of waiting for a binding.
#[test]
fn the_first_launch_after_a_synchronize_goes_out_on_the_lingering_lease() {
    // Under TPOT-First a latency-critical client does so too (its decode after a synchronize).
    for (policy, class) in [
        (PolicyKind::Throughput, ClientClass::BestEffort),
        (PolicyKind::Tpot, ClientClass::LatencyCritical { tpot_target_ns: 5_000_000 }),
    ] {
        launches_first_after_a_synchronize(policy, class);
    }
}

fn launches_first_after_a_synchronize(policy: PolicyKind, class: ClientClass) {
    let daemon = start(&format!("launch-first-{policy}"), policy);
    let (d, mut disp, v) = client_as(&daemon, policy, class);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    let reps = 20;
    for _ in 0..reps {
        v.record_op(s, busy(&d, 132 * 8)).unwrap();
        disp.run_until_idle().expect("dispatch");
        v.stream_synchronize(s).expect("no asynchronous failure");
    }
    assert_eq!(v.outstanding(), 0);
    let launched = disp.remote().expect("under the daemon").launched;
    let bound = disp.stats().bound;
    assert_eq!(launched + bound, reps, "every op placed once (launched {launched}, bound {bound})");
    // All but the first (which binds the lease). Without the linger about half went out at once
    // (9 of 20 when checked), the daemon having released the drained lease in between.
    assert!(launched >= reps - 3, "{policy}: launches after a synchronize went out at once: {launched} of {reps}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while daemon.status().counters.launched < launched && std::time::Instant::now() < deadline {
        disp.run_until_idle().expect("dispatch");
        std::thread::sleep(Duration::from_millis(5));
    }
    let k = daemon.status().counters;
    assert_eq!((k.launched, k.bound), (launched, bound), "the daemon counted them: {k:?}");
}

/// Polls `done` every 5 ms for up to 5 s (the assertions after it say what was awaited).
fn wait_until(mut done: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !done() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A record-level session (no dispatcher) of class `class` with `daemon`, on the simulated H200's
/// topology with 2 lanes per node.
fn session(daemon: &Daemon, name: &str, class: ClientClass) -> DaemonClient {
    DaemonClient::connect(ConnectOptions {
        socket: daemon.socket().to_path_buf(),
        name: name.into(),
        device: 0,
        topology: SimBackend::preset("h200").unwrap().topology().clone(),
        class,
        lanes: 2,
        timeout: Duration::from_secs(5),
    })
    .expect("registered")
}

/// The ready record of kernel launch `op` (kernel "k", `grid` blocks of 256 threads), ready now.
fn kernel_record(op: u64, grid: u32) -> vitamin_runtime::daemon::wire::ReadyRecord {
    vitamin_runtime::daemon::wire::ReadyRecord {
        op,
        flags: 0,
        min_units: 0,
        kernel: vitamin_runtime::daemon::wire::kernel_hash("k"),
        grid: [grid, 1, 1],
        block: [256, 1, 1],
        smem: 0,
        resident_per_unit: 0,
        ready_since_ns: vitamin_runtime::daemon::now_ns(),
        deadline_ns: None,
    }
}

/// A Throughput daemon with two best-effort clients, `a` with one op bound (on the node returned),
/// `b` with nothing.
fn bound_beside_another(tag: &str) -> (Daemon, DaemonClient, DaemonClient, u16) {
    let daemon = start(tag, PolicyKind::Throughput);
    let (mut a, b) = (session(&daemon, "a", ClientClass::BestEffort), session(&daemon, "b", ClientClass::BestEffort));
    assert!(a.ready(kernel_record(1, 4096)).unwrap());
    a.flush();
    let mut got = Vec::new();
    let t = std::time::Instant::now();
    while got.is_empty() && t.elapsed() < Duration::from_secs(5) {
        a.bindings(&mut got, Duration::from_millis(20)).unwrap();
    }
    let node = got.first().expect("a is bound").node;
    (daemon, a, b, node)
}

/// A `Launched` record naming a node another client holds (the view was stale) is accepted as a
/// stray: no disconnect, the holder's lease untouched, its completion accepted.
#[test]
fn a_launch_on_a_node_another_client_holds_is_a_stray_not_a_fault() {
    use vitamin_runtime::daemon::now_ns;

    let (daemon, _a, mut b, node) = bound_beside_another("stray");
    assert!(b.launched(7, node, 0, now_ns(), false).unwrap());
    b.flush();
    assert!(b.complete(7, now_ns()).unwrap());
    b.flush();
    wait_until(|| daemon.status().counters.launched_stray > 0);
    std::thread::sleep(Duration::from_millis(50));
    let st = daemon.status();
    assert_eq!(st.counters.launched_stray, 1, "{:?}", st.counters);
    assert_eq!(st.counters.clients_disconnected, 0, "nobody was cut off");
    let a_st = st.clients.iter().find(|c| c.name == "a").expect("a");
    assert_eq!(a_st.outstanding, 1, "a's op still outstanding on its lease");
    assert!(st.clients.iter().any(|c| c.name == "b"), "b still connected");
}

/// The status report says how long a client's oldest ready op has waited and the largest size floor
/// among its ready ops: `b`'s op needs more units than any node beside `a`'s busy lease holds, so it
/// waits (in the H100 runs, ResNet-50's cluster launches beside a decoder's 120-unit standing node
/// waited for seconds: docs/results/eval.md, mixed-graph run 16).
#[test]
fn the_status_shows_a_waiting_ops_age_and_floor() {
    let (daemon, _a, mut b, node) = bound_beside_another("waiting");
    let d = SimBackend::preset("h200").unwrap();
    let pool = vitamin_runtime::pool::Pool::build(d.topology());
    let (root, held) = (d.topology().all_units().len(), pool.node(vitamin_runtime::pool::NodeId(node)).size());
    // More than any node disjoint from a's lease holds, less than the whole device (which would be
    // shared beside a's lease).
    let floor = root - held + 1;
    assert!(floor < root, "a holds {held} of {root} units");
    let mut r = kernel_record(2, 64);
    r.min_units = floor as u16;
    assert!(b.ready(r).unwrap());
    b.flush();
    wait_until(|| daemon.status().clients.iter().any(|c| c.name == "b" && c.ready == 1));
    std::thread::sleep(Duration::from_millis(50));
    let st = daemon.status();
    let b_st = st.clients.iter().find(|c| c.name == "b").expect("b");
    assert_eq!((b_st.ready, b_st.ready_floor), (1, floor), "{b_st:?}");
    assert!(b_st.oldest_ready_ms >= 50.0, "{b_st:?}");
    let a_st = st.clients.iter().find(|c| c.name == "a").expect("a");
    assert_eq!((a_st.ready, a_st.ready_floor, a_st.oldest_ready_ms), (0, 0, 0.0), "{a_st:?}");
}

/// An op continued on the lane of a stray launch (the client saw the node open when it launched;
/// the daemon had given it to another client) is a stray too: no disconnect, the holder's lease
/// untouched. A continuation on a lane where the client has nothing outstanding stays a fault.
/// Before, the continuation disconnected its client (measured on the H200: 4 of 9 daemon runs of
/// the serving and mixed groups, docs/results/eval.md, serving run 3).
#[test]
fn a_continuation_behind_a_stray_launch_is_a_stray_not_a_fault() {
    use vitamin_runtime::daemon::now_ns;

    let (daemon, _a, mut b, node) = bound_beside_another("stray-cont");
    // b launches on a's node (a stale view) and continues behind it on the same lane.
    assert!(b.launched(7, node, 0, now_ns(), false).unwrap());
    assert!(b.continued(8, node, 0, now_ns(), false).unwrap());
    b.flush();
    wait_until(|| daemon.status().counters.continued_stray > 0);
    let st = daemon.status();
    assert_eq!((st.counters.launched_stray, st.counters.continued_stray), (1, 1), "{:?}", st.counters);
    assert_eq!(st.counters.clients_disconnected, 0, "nobody was cut off");
    let a_st = st.clients.iter().find(|c| c.name == "a").expect("a");
    assert_eq!(a_st.outstanding, 1, "a's op still outstanding on its lease");
    let b_st = st.clients.iter().find(|c| c.name == "b").expect("b still connected");
    assert_eq!(b_st.outstanding, 2, "both strays outstanding");
    // Both complete; a's lease still counts only a's op.
    assert!(b.complete(7, now_ns()).unwrap());
    assert!(b.complete(8, now_ns()).unwrap());
    b.flush();
    wait_until(|| !daemon.status().clients.iter().any(|c| c.name == "b" && c.outstanding > 0));
    let st = daemon.status();
    assert_eq!(st.counters.clients_disconnected, 0, "{:?}", st.counters);
    assert_eq!(st.clients.iter().find(|c| c.name == "a").expect("a").outstanding, 1);
}

/// A launch-first op of a latency-critical client on the node that went back to its own standing
/// reservation (its lease drained after the client read its view) is leased to it again, not
/// taken for a stray: a stray stays outside every lease's count and lets the node be given away
/// under it.
#[test]
fn a_launch_on_the_clients_own_standing_reservation_is_leased_to_it() {
    use vitamin_runtime::daemon::now_ns;

    let daemon = start("own-reservation", PolicyKind::Tpot);
    let mut c = session(&daemon, "latency", ClientClass::LatencyCritical { tpot_target_ns: 20_000_000 });
    let reserved = |daemon: &Daemon| {
        daemon.status().clients.first().and_then(|c| c.leases.iter().find(|l| l.ends_with("reserved")).cloned())
    };
    wait_until(|| reserved(&daemon).is_some());
    let lease = reserved(&daemon).expect("TPOT-First reserves a standing node for a latency client");
    let node: u16 = lease.trim_start_matches('#').split(' ').next().unwrap().parse().unwrap();
    assert!(c.launched(1, node, 0, now_ns(), false).unwrap());
    c.flush();
    wait_until(|| daemon.status().counters.launched > 0);
    let st = daemon.status();
    assert_eq!((st.counters.launched, st.counters.launched_stray), (1, 0), "{:?}", st.counters);
    let me = st.clients.first().expect("still connected");
    assert_eq!(me.outstanding, 1);
    assert!(me.leases.iter().any(|l| l.starts_with(&format!("#{node} ")) && l.ends_with("leased")), "{:?}", me.leases);
    assert!(c.complete(1, now_ns()).unwrap());
    c.flush();
    wait_until(|| daemon.status().clients.first().is_none_or(|c| c.outstanding == 0));
    let st = daemon.status();
    assert_eq!(st.counters.clients_disconnected, 0, "{:?}", st.counters);
    assert_eq!(st.clients.first().map(|c| c.outstanding), Some(0));
}

/// A lone client's drained lease lingers at the daemon (for launch-first), but when the client's
/// next op goes up anyway (its policy wants a wider node), the linger ends before the round is
/// planned: the op gets the whole device, not the widest node beside the client's own idle
/// lease. Without this, a lone client's 8-kernel operator that followed small launches was bound
/// to the two halves in turn, each beside its own lingering lease on the other (measured on the
/// H200: kernels 106 us instead of 49.6 us, docs/results/daemon-overhead-h200.md, run 3).
#[test]
fn a_lone_clients_wide_op_is_not_kept_beside_its_own_lingering_lease() {
    // A linger far longer than the test: every drained lease would linger throughout.
    let daemon = start_with("own-linger", PolicyKind::Throughput, |c| c.decide.lease_linger_ns = 60_000_000_000);
    let (d, mut disp, v) = client(&daemon, PolicyKind::Throughput);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    // Small launches first, each followed by a synchronize: the daemon binds a smallest node and
    // its lease lingers once drained.
    for _ in 0..3 {
        v.record_op(s, busy(&d, 1)).unwrap();
        disp.run_until_idle().expect("dispatch");
        v.stream_synchronize(s).expect("no asynchronous failure");
    }
    let before = disp.stats().per_node.clone();
    // Then wide launches, each followed by a synchronize (the operator's pattern).
    let reps = 12;
    for _ in 0..reps {
        for _ in 0..4 {
            v.record_op(s, busy(&d, 132 * 64)).unwrap();
        }
        disp.run_until_idle().expect("dispatch");
        v.stream_synchronize(s).expect("no asynchronous failure");
    }
    assert_eq!(v.outstanding(), 0, "every op completed");
    let pool = disp.pool();
    let root = pool.root();
    let wide: Vec<(usize, u64)> = disp
        .stats()
        .per_node
        .iter()
        .zip(&before)
        .enumerate()
        .filter(|&(_, (&after, &b))| after > b)
        .map(|(i, (&after, &b))| (pool.nodes()[i].size(), after - b))
        .collect();
    let on_root = disp.stats().per_node[root.index()] - before[root.index()];
    assert_eq!(
        on_root,
        reps * 4,
        "every wide op ran on the whole device ({} units); (node size, ops) used: {wide:?}",
        pool.node(root).size()
    );
}

/// A training client that holds the whole device and keeps it busy by continuing there does not
/// starve a client arriving next to it. The second client's short steps (2 small kernels and a
/// synchronize, 10 times) must all finish while the first still has work. Under Exclusive this
/// failed before its turn-taking (the steps waited for the whole of the training work; measured on
/// the H200 beside ResNet-50: decoder p50 0.9-7 s, docs/results/eval.md, mixed-resnet50 run 1).
/// Under TPOT-First a latency-critical client arriving fresh is served (its first standing node
/// is reclaimed); the re-reservation path that starved the decoder on the H200 is the unit test
/// `a_standing_node_under_another_clients_busy_lease_is_reclaimed` (runtime/src/policy/tpot.rs).
#[test]
fn a_client_continuing_on_the_whole_device_does_not_starve_the_next() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    // The training client keeps 2048-4096 ops outstanding until told to stop, or for at most this
    // long: a starved second client would finish only after it gave up.
    const TRAIN_FOR: Duration = Duration::from_secs(20);
    for (policy, class) in [
        (PolicyKind::Exclusive, ClientClass::BestEffort),
        (PolicyKind::Tpot, ClientClass::LatencyCritical { tpot_target_ns: 1_000_000 }),
    ] {
        let daemon = start(&format!("starve-{policy}"), policy);
        let stop = Arc::new(AtomicBool::new(false));
        let train = {
            let (d, mut disp, v) = client(&daemon, policy);
            let stop = stop.clone();
            std::thread::spawn(move || {
                let streams: Vec<_> = (0..4).map(|_| v.create_stream(StreamKind::NonBlocking, 0)).collect();
                let (t, mut i) = (Instant::now(), 0usize);
                let mut busy_when_stopped = None;
                while t.elapsed() < TRAIN_FOR {
                    if stop.load(Ordering::Acquire) {
                        busy_when_stopped = Some(v.outstanding() > 0);
                        break;
                    }
                    if v.outstanding() < 2048 {
                        while v.outstanding() < 4096 {
                            v.record_op(streams[i % 4], busy(&d, 132 * 64)).unwrap();
                            i += 1;
                        }
                    }
                    if disp.pump().expect("dispatch") == 0 {
                        d.wait_for_progress(Duration::from_micros(20)).expect("simulator");
                    }
                }
                while v.outstanding() > 0 {
                    disp.run_until_idle().expect("dispatch");
                    assert!(t.elapsed() < TRAIN_FOR * 3, "training work did not finish");
                }
                v.device_synchronize().expect("no asynchronous failure");
                busy_when_stopped
            })
        };
        let t0 = Instant::now();
        let root_units = SimBackend::preset("h200").unwrap().topology().all_units().len();
        while !daemon.status().clients.iter().any(|c| c.units == root_units && c.outstanding > 0) {
            assert!(
                t0.elapsed() < Duration::from_secs(10) && !train.is_finished(),
                "{policy}: the training client never held the whole device"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let (d, mut disp, v) = client_as(&daemon, policy, class);
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        let t1 = Instant::now();
        for _ in 0..10 {
            v.record_op(s, busy(&d, 4)).unwrap();
            v.record_op(s, busy(&d, 4)).unwrap();
            disp.run_until_idle().expect("dispatch");
            v.stream_synchronize(s).expect("no asynchronous failure");
        }
        let steps = t1.elapsed();
        stop.store(true, Ordering::Release);
        let busy_when_stopped = train.join().expect("training thread");
        eprintln!("{policy}: 10 steps in {steps:?} beside the training client");
        assert_eq!(
            busy_when_stopped,
            Some(true),
            "{policy}: the second client's steps ({steps:?}) finished only after the training client stopped \
             by itself ({TRAIN_FOR:?})"
        );
        daemon.shutdown();
    }
}

/// Under TPOT-First a launch that only the whole device runs (500 cooperative blocks) of a
/// best-effort client completes while a latency-critical client idles beside it with its standing
/// reservation: it goes to the service partition, as under Throughput. Bound to the whole device it
/// waited for the reservation for ever (on the H200 a ResNet-50 job beside an idle serving loop
/// never finished its warm-up, docs/results/eval.md, serving run 1).
#[test]
fn a_whole_device_launch_does_not_wait_for_an_idle_latency_clients_reservation() {
    let daemon = start("tpot-coop", PolicyKind::Tpot);
    let (ld, mut ldisp, lv) =
        client_as(&daemon, PolicyKind::Tpot, ClientClass::LatencyCritical { tpot_target_ns: 5_000_000 });
    let ls = lv.create_stream(StreamKind::NonBlocking, 0);
    lv.record_op(ls, busy(&ld, 4)).unwrap();
    ldisp.run_until_idle().expect("dispatch");
    lv.stream_synchronize(ls).expect("no asynchronous failure");
    // The latency client now idles; its standing node is reserved (or re-reserved) at the daemon.
    let t0 = std::time::Instant::now();
    while !daemon.status().devices[0].active.iter().any(|a| a.contains("reserved")) {
        assert!(t0.elapsed() < Duration::from_secs(5), "no standing reservation: {:?}", daemon.status().devices);
        std::thread::sleep(Duration::from_millis(2));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (d, mut disp, v) = client(&daemon, PolicyKind::Tpot);
    std::thread::spawn(move || {
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        record_busy_coop_busy(&d, &v, s);
        while v.outstanding() > 0 {
            disp.run_until_idle().expect("dispatch");
        }
        let _ = tx.send(disp.stats().shared_whole_device);
    });
    let shared = rx.recv_timeout(Duration::from_secs(20)).expect("the whole-device launch completed");
    assert_eq!(shared, 1, "it ran on the service partition");
    drop(ldisp);
    daemon.shutdown();
}

/// Under TPOT-First a latency-critical client whose steps (ops, then a synchronize) take longer
/// than 80% of its target on its standing node gets a wider one: the daemon reports each busy
/// period that ends with nothing of the client outstanding, continued and launched ops included.
/// Sized by one kernel's profile alone, the standing node stayed the smallest (8 units) in every
/// H200 run (docs/results/eval.md, serving run 2).
#[test]
fn a_latency_clients_slow_steps_widen_its_standing_node_under_a_daemon() {
    let daemon = start("tpot-steps", PolicyKind::Tpot);
    // A 100 us target: one simulated kernel (about 2 us on 8 units) fits its 80% on the smallest
    // node, a step of four with the round trips to the daemon (hundreds of us) does not.
    let class = ClientClass::LatencyCritical { tpot_target_ns: 100_000 };
    let (d, mut disp, v) = client_as(&daemon, PolicyKind::Tpot, class);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    let units = |daemon: &Daemon| daemon.status().clients.first().map_or(0, |c| c.units);
    let mut seen = Vec::new();
    for _ in 0..12 {
        for _ in 0..4 {
            v.record_op(s, busy(&d, 8)).unwrap();
        }
        disp.run_until_idle().expect("dispatch");
        v.stream_synchronize(s).expect("no asynchronous failure");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while daemon.status().clients.first().is_some_and(|c| c.outstanding > 0) && std::time::Instant::now() < deadline
        {
            disp.run_until_idle().expect("dispatch");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(20));
        seen.push(units(&daemon));
    }
    assert_eq!(v.outstanding(), 0);
    let (first, last) = (seen[0], *seen.last().unwrap());
    assert!(last > first, "the standing node widened step by step: units after each step {seen:?}");
}

/// A raw session of a latency-critical client named "decoder" with a 10 ms TPOT target (8 ms
/// of headroom), 4 lanes.
fn decoder_session(daemon: &Daemon, d: &SimBackend) -> DaemonClient {
    DaemonClient::connect(ConnectOptions {
        socket: daemon.socket().to_path_buf(),
        name: "decoder".into(),
        device: 0,
        topology: d.topology().clone(),
        class: ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 },
        lanes: 4,
        timeout: Duration::from_secs(5),
    })
    .expect("registered")
}

/// The ready record of graph launch `op`, ready now.
fn graph_record(op: u64) -> vitamin_runtime::daemon::wire::ReadyRecord {
    vitamin_runtime::daemon::wire::ReadyRecord {
        op,
        flags: vitamin_runtime::daemon::wire::FLAG_GRAPH,
        min_units: 0,
        kernel: 0x5157,
        grid: [0; 3],
        block: [0; 3],
        smem: 0,
        resident_per_unit: 0,
        ready_since_ns: vitamin_runtime::daemon::now_ns(),
        deadline_ns: None,
    }
}

/// Under TPOT-First and a daemon, a graph launch of a latency-critical client (a decode step
/// replayed as one CUDA graph) that runs longer than 80% of its target widens its standing node
/// at once to what perfect scaling predicts, at most twofold, while the launches run faster on
/// wider nodes: the daemon times each completed graph launch from its submission or its lane's
/// previous completion. Busy periods alone widened it one size per step, and under a daemon they
/// did not follow a graph decoder's tokens (docs/results/eval.md, mixed-graph run 3). A raw
/// session, so that each launch runs a known time; each is bound to the client's standing node,
/// so their sizes show the standing node's.
#[test]
fn a_latency_clients_slow_graph_launch_widens_its_standing_node_under_a_daemon() {
    use vitamin_runtime::pool::{NodeId, Pool};
    let daemon = start("tpot-graphs", PolicyKind::Tpot);
    let d = SimBackend::preset("h200").unwrap();
    let pool = Pool::build(d.topology());
    // A 10 ms target: 8 ms of headroom.
    let mut c = decoder_session(&daemon, &d);
    let mut seen = Vec::new();
    // On 8 units 20 ms (want 20 units, capped at 16); on 16 14 ms (28 -> 32); on 32 10 ms
    // (40 -> 64, and faster than on 16 by a margin that scheduling noise on a loaded machine
    // does not close); on 64 6 ms (within the headroom).
    for (op, ms) in [(1u64, 20u64), (2, 14), (3, 10), (4, 6)] {
        c.ready(graph_record(op)).unwrap();
        c.flush();
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5), "launch {op} was not bound");
            c.bindings(&mut got, Duration::from_millis(50)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(ms));
        assert!(c.complete(op, vitamin_runtime::daemon::now_ns()).unwrap());
        c.flush();
        std::thread::sleep(Duration::from_millis(20));
        seen.push(pool.node(NodeId(got[0].node)).size());
    }
    // One size per step: 8, 12, 16, 20.
    assert_eq!(seen, [8, 16, 32, 64], "each launch ran on the standing node, widened after each slow one");
    // The status report names the standing node and the floor the slow launches raised.
    let st = daemon.status();
    let me = st.clients.iter().find(|c| c.name == "decoder").expect("the decoder is listed");
    assert_eq!(me.floor_units, 64, "{me:?}");
    assert!(me.standing.as_deref().is_some_and(|s| s.contains("(64 units)")), "{me:?}");
}

/// A burst of graph launches queued on one lane, their completions seen together (a decoder's
/// warm-up replays: docs/results/eval.md, mixed-graph run 5), measures no step: the first waited
/// for the others' completions to be seen, the later ones ran back to back. The floor stays.
#[test]
fn a_burst_of_graph_launches_completed_together_leaves_the_floor_alone() {
    let daemon = start("tpot-burst", PolicyKind::Tpot);
    let d = SimBackend::preset("h200").unwrap();
    let mut c = decoder_session(&daemon, &d);
    let now = vitamin_runtime::daemon::now_ns;
    c.ready(graph_record(1)).unwrap();
    c.flush();
    let mut got = Vec::new();
    let t = std::time::Instant::now();
    while got.is_empty() {
        assert!(t.elapsed() < Duration::from_secs(5), "the first launch was not bound");
        c.bindings(&mut got, Duration::from_millis(50)).unwrap();
    }
    let (node, lane) = (got[0].node, got[0].lane);
    // Three more replays behind it on its lane, then 30 ms (beyond the 8 ms headroom) before
    // any completion is seen, and then all four at once.
    for op in 2..=4u64 {
        assert!(c.continued(op, node, lane, now(), true).unwrap());
    }
    c.flush();
    std::thread::sleep(Duration::from_millis(30));
    let done = now();
    for op in 1..=4u64 {
        assert!(c.complete(op, done).unwrap());
    }
    c.flush();
    let t = std::time::Instant::now();
    while daemon.status().counters.completions < 4 {
        assert!(t.elapsed() < Duration::from_secs(5), "the completions did not reach the daemon");
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = daemon.status();
    let me = st.clients.iter().find(|c| c.name == "decoder").expect("the decoder is listed");
    // The busy period (30 ms, beyond 80% of the target) widens one size (8 -> 12 units); the
    // first launch timed from its submission would have asked for 30 units, capped at 16.
    assert!(me.floor_units <= 12, "no launch of the burst raised the floor: {me:?}");
}

/// A client on an on-demand pool under a daemon asks only the partitions it has and the first node
/// of each size whether they run its cooperative and cluster launches (asking creates the
/// partition), so such launches do not create the whole pool; none is lost either way.
#[test]
fn an_on_demand_client_under_a_daemon_creates_few_partitions_for_constrained_launches() {
    use vitamin_runtime::pool::PoolLayout;
    for policy in [PolicyKind::Throughput, PolicyKind::Exclusive] {
        let daemon = start(&format!("od-{}", policy.name()), policy);
        let config = DispatchConfig { pool: PoolLayout::OnDemand, ..DispatchConfig::default() };
        let (d, mut disp, v) = client_with(&daemon, policy, ClientClass::BestEffort, config);
        let sizes: std::collections::BTreeSet<usize> = disp.pool().nodes().iter().map(|n| n.size()).collect();
        let f = d.kernel("busy").expect("sim reference kernel");
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        for i in 0..30u32 {
            let cluster = LaunchAttributes::new(false, Some(Dim3::x(8)), None, Vec::new());
            let args = KernelArgs::pack(&[&2_000u32.to_le_bytes()]);
            v.record_op(
                s,
                Arc::new(OpDesc::Kernel(KernelLaunch::new(
                    f.clone(),
                    Dim3::x(8 * (2 + i % 4)),
                    Dim3::x(256),
                    0,
                    args,
                    cluster,
                ))),
            )
            .unwrap();
            record_busy_coop_busy(&d, &v, s);
        }
        disp.run_until_idle().expect("dispatch");
        v.device_synchronize().expect("no asynchronous failure");
        assert_eq!(v.outstanding(), 0, "{}: every op completed", policy.name());
        assert_eq!(disp.stats().failed, 0, "{}", policy.name());
        let report = disp.pool_report();
        let used = disp.stats().per_node.iter().filter(|&&k| k > 0).count();
        assert!(
            report.created <= sizes.len() + used,
            "{}: {} partitions created for {} node sizes and {used} nodes used",
            policy.name(),
            report.created,
            sizes.len()
        );
        assert!(report.created < report.nodes, "{}: {report:?}", policy.name());
    }
}

/// Under a Throughput daemon a graph launch whose only eligible node is a sliver beside a client
/// that holds most of the device is not bound there: its client waits, the daemon reclaims a fair
/// half from the other's lease (its gate closes), and binds the graph there once that lease
/// drained. A CUDA-graph decoder bound beside ResNet-50 to 8 SMs ran its tokens 4x slower for
/// 12 s (docs/results/eval.md, mixed-graph runs 5-6). Raw sessions, so the leases are known.
#[test]
fn a_graph_is_not_bound_to_a_sliver_beside_a_wide_lease_under_a_daemon() {
    use vitamin_runtime::daemon::now_ns;
    use vitamin_runtime::pool::{NodeId, Pool};

    let daemon = start("graph-sliver", PolicyKind::Throughput);
    let pool = Pool::build(SimBackend::preset("h200").unwrap().topology());
    let size = |n: u16| pool.node(NodeId(n)).size();
    let (mut a, mut b) =
        (session(&daemon, "decoder", ClientClass::BestEffort), session(&daemon, "trainer", ClientClass::BestEffort));
    let bound = |c: &mut DaemonClient, within: Duration| {
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.is_empty() && t.elapsed() < within {
            c.bindings(&mut got, Duration::from_millis(20)).unwrap();
        }
        got.first().map(|g| g.node)
    };
    // The decoder's first kernel (8 blocks) on a leaf, the trainer's (4096 blocks) on most of the rest.
    assert!(a.ready(kernel_record(1, 8)).unwrap());
    a.flush();
    let leaf = bound(&mut a, Duration::from_secs(5)).expect("the decoder's kernel is bound");
    assert_eq!(size(leaf), 8);
    assert!(b.ready(kernel_record(1, 4096)).unwrap());
    b.flush();
    let wide = bound(&mut b, Duration::from_secs(5)).expect("the trainer's kernel is bound");
    assert!(size(wide) > 66, "the trainer holds most of the device: {} units", size(wide));
    // The decoder's kernel completes; its graph is ready, and only its lingering leaf is free.
    assert!(a.complete(1, now_ns()).unwrap());
    a.ready(graph_record(2)).unwrap();
    a.flush();
    assert_eq!(bound(&mut a, Duration::from_millis(300)), None, "not bound to the sliver");
    // The trainer's op completes (its gate closed, it continues nothing more): the half is the decoder's.
    assert!(b.complete(1, now_ns()).unwrap());
    b.flush();
    let half = bound(&mut a, Duration::from_secs(5)).expect("the graph is bound once the trainer drained");
    assert!(size(half) >= 64, "a fair half or more: {} units", size(half));
    assert!(a.complete(2, now_ns()).unwrap());
}

/// Under TPOT-First a best-effort client holds back a launch it shares on the whole device while a
/// latency-critical client has work outstanding (the guard word of its region), and submits it
/// once that client's work completed; under Throughput it goes at once. Such a launch runs on every
/// unit, the latency client's node included: beside a CUDA-graph decoder, ResNet-50 put thousands
/// of them there per run under TPOT-First (docs/results/eval.md, mixed-graph runs 10-11).
#[test]
fn a_shared_launch_waits_while_a_latency_client_is_busy_under_tpot_first() {
    use vitamin_runtime::daemon::now_ns;
    for policy in [PolicyKind::Tpot, PolicyKind::Throughput] {
        let daemon = start(&format!("guard-{policy}"), policy);
        let mut decoder = session(&daemon, "decoder", ClientClass::LatencyCritical { tpot_target_ns: 20_000_000 });
        // The decoder's step is ready and bound, and not completed: it is busy.
        assert!(decoder.ready(kernel_record(1, 8)).unwrap());
        decoder.flush();
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.is_empty() && t.elapsed() < Duration::from_secs(5) {
            decoder.bindings(&mut got, Duration::from_millis(20)).unwrap();
        }
        assert!(!got.is_empty(), "{policy}: the decoder's step is bound");
        let config = DispatchConfig { guard_hold_max_ns: 60_000_000_000, ..DispatchConfig::default() };
        let (d, mut disp, v) = client_with(&daemon, policy, ClientClass::BestEffort, config);
        let guarded = disp.remote().and_then(|r| r.client().guard_since()).is_some();
        assert_eq!(guarded, policy == PolicyKind::Tpot, "{policy}: the guard word while the decoder is busy");
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        record_busy_coop_busy(&d, &v, s);
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(300) && v.outstanding() > 0 {
            disp.pump().expect("dispatch");
            d.wait_for_progress(Duration::from_micros(20)).expect("simulated device");
            std::thread::sleep(Duration::from_millis(1));
        }
        let stats = disp.stats();
        if policy == PolicyKind::Throughput {
            assert_eq!(v.outstanding(), 0, "{policy}: nothing held");
            assert_eq!((stats.shared_whole_device, stats.shared_held), (1, 0), "{policy}");
            continue;
        }
        assert_eq!(stats.shared_held, 1, "{policy}: the cooperative launch is held");
        assert_eq!(stats.shared_whole_device, 0, "{policy}: and not submitted while the decoder is busy");
        assert_eq!(v.outstanding(), 2, "{policy}: the launch and the one behind it wait; the first ran");
        // The decoder's step completes: the guard drops and the held launch goes.
        assert!(decoder.complete(1, now_ns()).unwrap());
        decoder.flush();
        let t = std::time::Instant::now();
        while v.outstanding() > 0 {
            assert!(t.elapsed() < Duration::from_secs(5), "{policy}: the held launch ran once the decoder idled");
            disp.pump().expect("dispatch");
            d.wait_for_progress(Duration::from_micros(20)).expect("simulated device");
            std::thread::sleep(Duration::from_millis(1));
        }
        let stats = disp.stats();
        assert_eq!((stats.shared_whole_device, stats.shared_held_expired), (1, 0), "{policy}");
        assert!(stats.shared_held_ns >= 200_000_000, "{policy}: held while the decoder was busy");
        v.device_synchronize().expect("no asynchronous failure");
    }
}

/// The hold is bounded: with the latency-critical client busy for good, a held shared launch goes
/// after `guard_hold_max_ns`, so a decoder that never idles cannot stop a training job.
#[test]
fn a_held_shared_launch_goes_after_the_hold_bound_beside_a_client_that_stays_busy() {
    let daemon = start("guard-bound", PolicyKind::Tpot);
    let mut decoder = session(&daemon, "decoder", ClientClass::LatencyCritical { tpot_target_ns: 20_000_000 });
    assert!(decoder.ready(kernel_record(1, 8)).unwrap());
    decoder.flush();
    let config = DispatchConfig { guard_hold_max_ns: 30_000_000, ..DispatchConfig::default() };
    let (d, mut disp, v) = client_with(&daemon, PolicyKind::Tpot, ClientClass::BestEffort, config);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    record_busy_coop_busy(&d, &v, s);
    let t = std::time::Instant::now();
    while v.outstanding() > 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "the held launch went after the bound");
        disp.pump().expect("dispatch");
        d.wait_for_progress(Duration::from_micros(20)).expect("simulated device");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(disp.remote().and_then(|r| r.client().guard_since()).is_some(), "the decoder is still busy");
    let stats = disp.stats();
    assert_eq!((stats.shared_held, stats.shared_held_expired, stats.shared_whole_device), (1, 1, 1));
    assert!(stats.shared_held_ns >= 30_000_000, "held for the bound: {} ns", stats.shared_held_ns);
    v.device_synchronize().expect("no asynchronous failure");
    // A latency client that goes away ends its busy period: the guard drops.
    drop(decoder);
    let t = std::time::Instant::now();
    while disp.remote().and_then(|r| r.client().guard_since()).is_some() {
        assert!(t.elapsed() < Duration::from_secs(5), "the guard outlived the latency client");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A cluster launch a node refused (returned `NOT_RUN`) is never bound again to that node or one
/// within it, for that client: node shape decides where a cluster shape runs, and a size floor
/// raised past the refusing node's size ruled out the smaller nodes that ran it (ResNet-50's cluster
/// launches on the H100 ran on SM 0-7, were refused on SM 120-131, and waited for seconds beside a
/// decoder's 120-unit standing node: docs/results/eval.md, mixed-graph run 16). A refusal of the
/// whole device excludes nothing (what it refuses, nothing runs); the refusals are counted in the
/// daemon's status. Under Chaos (a random eligible node per op) the bindings cover many nodes.
#[test]
fn a_node_that_refused_a_cluster_launch_is_not_proposed_for_the_clients_cluster_launches_again() {
    use vitamin_runtime::daemon::now_ns;
    use vitamin_runtime::daemon::wire::FLAG_CLUSTER;

    let daemon = start("cluster-refused", PolicyKind::Chaos);
    let mut b = session(&daemon, "b", ClientClass::BestEffort);
    let pool = vitamin_runtime::pool::Pool::build(SimBackend::preset("h200").unwrap().topology());
    let units = |n: u16| pool.node(vitamin_runtime::pool::NodeId(n)).units;
    let root = pool.root().0;
    let bind = |b: &mut DaemonClient, r: vitamin_runtime::daemon::wire::ReadyRecord| {
        assert!(b.ready(r).unwrap());
        b.flush();
        let mut got = Vec::new();
        let t = std::time::Instant::now();
        while got.is_empty() && t.elapsed() < Duration::from_secs(5) {
            b.bindings(&mut got, Duration::from_millis(20)).unwrap();
        }
        got.first().expect("bound").node
    };
    let mut cluster = kernel_record(10, 64);
    cluster.flags = FLAG_CLUSTER;
    let (mut refused, mut returned) = (Vec::new(), 0);
    while refused.len() < 6 {
        let node = bind(&mut b, cluster);
        for &r in &refused {
            assert!(!units(node).is_subset(&units(r)), "#{node} lies within #{r}, which refused b's cluster launch");
        }
        assert!(b.return_not_run(cluster.op, now_ns()).unwrap());
        returned += 1;
        if node != root {
            refused.push(node);
        }
    }
    b.flush();
    wait_until(|| daemon.status().counters.not_run == returned);
    assert_eq!(daemon.status().counters.not_run, returned, "{:?}", daemon.status().counters);
    let shown = daemon.status().clients[0].cluster_refused.clone();
    let maximal = refused.iter().filter(|&&r| !refused.iter().any(|&o| o != r && units(r).is_subset(&units(o))));
    let mut want: Vec<String> = maximal.map(|&r| units(r).to_string()).collect();
    let mut got = shown.clone();
    want.sort();
    got.sort();
    assert_eq!(got, want, "the status lists the maximal refusing sets");
    // b's plain launches still go anywhere: one lands within a refusing node within a few tries.
    let within = (100..164).any(|op| {
        let node = bind(&mut b, kernel_record(op, 64));
        assert!(b.complete(op, now_ns()).unwrap());
        refused.iter().any(|&r| units(node).is_subset(&units(r)))
    });
    assert!(within, "a plain launch of b was bound within a refusing node");
}

/// End to end with a dispatcher on a simulated device whose last 12 units (the remainder of the
/// 120-unit node) place no thread-block cluster, as SM 120-131 of the H100 did for ResNet-50
/// (docs/results/eval.md, mixed-graph run 16): under Chaos (a random eligible node per op) the
/// daemon binds some cluster launches there; the process returns each `NOT_RUN` with its floor
/// unchanged, the daemon records the node's units and proposes none within them again, and every
/// launch runs elsewhere: the clusterless units (one 12-unit leaf of the simulated H200's pool)
/// refuse one binding, never a second.
#[test]
fn cluster_launches_refused_by_a_node_run_elsewhere_and_that_node_is_learned() {
    let daemon = start("cluster-e2e", PolicyKind::Chaos);
    let (d, mut disp, v) = client(&daemon, PolicyKind::Chaos);
    let (device, clusterless) = {
        let pool = disp.pool();
        let device = pool.node(pool.root()).units;
        let n120 = pool.nodes().iter().find(|n| n.size() == 120).expect("a 120-unit node");
        (device, device.difference(&n120.units))
    };
    assert_eq!(clusterless.len(), 12);
    d.set_clusterless_units(clusterless);
    let f = d.kernel("busy").expect("sim reference kernel");
    let cluster = LaunchAttributes::new(false, Some(Dim3::new(1, 1, 1)), None, Vec::new());
    // One launch per stream and round: each is bound by the daemon, none continues a predecessor.
    for _ in 0..400 {
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        let args = KernelArgs::pack(&[&2_000u32.to_le_bytes()]);
        let k = KernelLaunch::new(f.clone(), Dim3::x(8), Dim3::x(256), 0, args, cluster.clone());
        v.record_op(s, Arc::new(OpDesc::Kernel(k))).unwrap();
        disp.run_until_idle().expect("dispatch");
    }
    v.device_synchronize().expect("no asynchronous failure");
    assert_eq!(v.outstanding(), 0, "every launch ran");
    let refused = disp.stats().rejected;
    // The clusterless units are one leaf of the simulated H200's pool: refused once, never again.
    let inside: Vec<_> = disp.pool().nodes().iter().filter(|n| n.units.is_subset(&clusterless)).map(|n| n.id).collect();
    assert_eq!(inside.len(), 1, "{inside:?}");
    assert_eq!(refused, 1, "{:?}", disp.stats());
    assert_eq!(disp.stats().per_node[inside[0].index()], 0, "nothing ran on the clusterless units");
    wait_until(|| daemon.status().counters.not_run == refused);
    let st = daemon.status();
    assert_eq!(st.counters.not_run, refused, "each refusal reached the daemon flagged not run");
    let sets = &st.clients[0].cluster_refused;
    assert!(!sets.is_empty(), "{:?}", st.clients[0]);
    let shown = |u: &vitamin_hal::UnitSet| sets.contains(&u.to_string());
    let within = disp.pool().nodes().iter().filter(|n| n.units.is_subset(&clusterless) && shown(&n.units)).count();
    assert_eq!(within, sets.len(), "every refusing set is a node within the clusterless units: {sets:?}");
    assert!(!sets.contains(&device.to_string()));
}

/// A process whose backend runs its launches only on the whole device (smaller partitions refuse
/// them, as a green context refuses a function whose raised limit it could not raise), attached to
/// a daemon under Chaos (a random eligible node per op): each plain launch is sent with the whole
/// device as its floor, so the daemon never binds one to a smaller node, none is refused, and all
/// of them run on the whole-device node.
#[test]
fn launches_kept_on_the_whole_device_are_sent_with_its_floor_and_never_refused() {
    let daemon = start("whole-e2e", PolicyKind::Chaos);
    let (d, mut disp, v) = client(&daemon, PolicyKind::Chaos);
    let f = d.kernel("busy").expect("sim reference kernel");
    let launch = |s| {
        let args = KernelArgs::pack(&[&2_000u32.to_le_bytes()]);
        let k = KernelLaunch::new(f.clone(), Dim3::x(8), Dim3::x(256), 0, args, LaunchAttributes::none());
        v.record_op(s, Arc::new(OpDesc::Kernel(k))).unwrap();
    };
    // Before: Chaos spreads plain launches over the pool.
    for _ in 0..40 {
        launch(v.create_stream(StreamKind::NonBlocking, 0));
        disp.run_until_idle().expect("dispatch");
    }
    let root = disp.pool().root().index();
    let before = disp.stats().per_node.clone();
    assert!(before.iter().enumerate().any(|(i, &n)| i != root && n > 0), "Chaos used smaller nodes: {before:?}");
    d.keep_on_whole_device("test: launches valid only in the application's context");
    for _ in 0..200 {
        launch(v.create_stream(StreamKind::NonBlocking, 0));
        disp.run_until_idle().expect("dispatch");
    }
    v.device_synchronize().expect("no asynchronous failure");
    assert_eq!(v.outstanding(), 0, "every launch ran");
    let after = &disp.stats().per_node;
    assert_eq!(after[root] - before[root], 200, "every later launch ran on the whole device: {after:?}");
    assert_eq!(disp.stats().rejected, 0, "no binding was refused: {:?}", disp.stats());
}
