//! Both arbiters against the lease rules through the record interface, with several clients:
//! every binding is to a node the op's client holds (its lease view says so) and that is large
//! enough for it, and every ready op that fits the device is bound once earlier bindings complete
//! (no op is kept ready for ever). In-process, also: no two clients ever hold overlapping units,
//! and the lease view says exactly what the pool says. The daemon runs in this process and each
//! client is a real session with it (socket, sealed memfd, rings). Size constraints stay within a quarter of the device (or above the whole device):
//! with several clients, Throughput-Oriented may keep an op that needs most of the device
//! waiting behind the others' leases, a policy choice this check leaves out. Lookahead hints are
//! left out too: a hint reserves for an op the client announces, which this model never sends.

use std::collections::HashSet;

use proptest::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::Backend;

use proptest::test_runner::TestCaseError;
use vitamin_runtime::arbiter::{
    name_hash, Arbiter, Binding, Class, ClientId, Completion, InProcess, LaunchKey, OpFlags, ReadyRecord,
};
use vitamin_runtime::daemon::arbiter::DaemonArbiter;
use vitamin_runtime::daemon::client::ConnectOptions;
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::policy::{AnyPolicy, ClientClass, Policy, PolicyKind};
use vitamin_runtime::pool::{HolderId, NodeState, Pool};
use vitamin_runtime::profile::Profiles;

#[derive(Debug, Clone)]
struct Op {
    client: u32,
    grid: u32,
    min_units: u32,
    graph: bool,
    lookahead: u32,
}

fn op(clients: u32) -> impl Strategy<Value = Op> {
    (
        0..clients,
        1u32..2048,
        prop_oneof![4 => Just(0u32), 1 => 1u32..=32, 1 => Just(133)],
        any::<bool>(),
        prop_oneof![3 => Just(0u32), 1 => 8u32..64],
    )
        .prop_map(|(client, grid, min_units, graph, lookahead)| Op { client, grid, min_units, graph, lookahead })
}

fn record(i: usize, o: &Op) -> ReadyRecord {
    ReadyRecord {
        client: ClientId(o.client),
        op: i as u64,
        key: LaunchKey {
            name_hash: name_hash(if i.is_multiple_of(2) { "gemm" } else { "softmax" }),
            grid: [o.grid, 1, 1],
            block: [256, 1, 1],
            shared_mem_bytes: 0,
            resident_per_unit: 0,
        },
        flags: OpFlags { cooperative: false, cluster: false, graph: o.graph },
        min_units: o.min_units,
        ready_since_ns: i as u64,
        class: Class::default(),
        lookahead_units: o.lookahead,
    }
}

/// Checks what every arbiter owes the executor for the bindings of a round: each is for a
/// registered client, once, on a node its lease view shows as its own (open, or draining once
/// the daemon closed the gate since), at least the op's floor.
fn check_bindings<A: Arbiter>(arbiter: &A, hierarchy: &Pool, bound: &[Binding], ops: &[Op], draining_ok: bool) {
    for b in bound {
        let o = &ops[b.op as usize];
        assert_eq!(b.client.0, o.client, "op {} bound for another client", b.op);
        // A daemon's view may be mid-rewrite for a while on a loaded machine: read it again.
        let view = (0..200)
            .find_map(|_| {
                arbiter.lease_view(b.client).ok().or_else(|| {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    None
                })
            })
            .expect("a lease view within 200 reads");
        assert!(
            view.held.contains(b.node) || (draining_ok && view.draining.contains(b.node)),
            "op {} bound to node {} that its client does not hold",
            b.op,
            b.node
        );
        assert!(hierarchy.node(b.node).size() >= o.min_units as usize, "node too small for op {}", b.op);
    }
}

/// The in-process arbiter's pool after a round: the lease view is exactly the pool's, and no two
/// clients hold overlapping units. (Across processes the same is checked from the clients' own
/// timestamps: `daemon_processes.rs`.)
fn check_pool(arbiter: &InProcess<AnyPolicy>, clients: u32) {
    let pool = arbiter.pool();
    let mut held = Vec::new();
    for c in 0..clients {
        let view = arbiter.lease_view(ClientId(c)).expect("in-process view");
        for (i, n) in pool.nodes().iter().enumerate() {
            let id = n.id;
            let state = pool.state(id);
            let leased = matches!(state, NodeState::Leased { holder, .. } if *holder == HolderId(c));
            let draining = matches!(state, NodeState::Draining { holder, .. } if *holder == HolderId(c));
            assert_eq!(view.held.contains(id), leased, "lease view of client {c}, node {i}");
            assert_eq!(view.draining.contains(id), draining, "draining view of client {c}, node {i}");
            if leased || draining {
                held.push((c, n.units));
            }
        }
    }
    for (i, (a, ua)) in held.iter().enumerate() {
        for (b, ub) in &held[i + 1..] {
            assert!(a == b || !ua.intersects(ub), "clients {a} and {b} hold overlapping units");
        }
    }
}

/// Drives `arbiter` with `clients` clients through `ops` (arriving `arrivals` at a time, the
/// oldest half of what runs completing each round) until every op that fits the device is
/// bound, checking each round's bindings and then `after`. `rounds`: the most rounds.
fn drive<A: Arbiter>(
    arbiter: &mut A,
    clients: u32,
    ops: &[Op],
    arrivals: Vec<usize>,
    draining_ok: bool,
    rounds: usize,
    mut after: impl FnMut(&A),
) -> Result<(), TestCaseError> {
    let hierarchy = Pool::build(SimBackend::preset("h200").unwrap().topology());
    let largest = hierarchy.node(hierarchy.root()).size() as u32;
    for c in 0..clients {
        prop_assert_eq!(arbiter.register(Class::default()).expect("registered"), ClientId(c));
    }
    let placeable = ops.iter().filter(|o| o.min_units <= largest).count();
    let mut next = 0;
    let mut arrivals = arrivals.into_iter().cycle();
    let mut in_flight: Vec<Binding> = Vec::new();
    let mut bound_ops: HashSet<u64> = HashSet::new();
    let mut now = 0u64;
    for _ in 0..rounds {
        if bound_ops.len() == placeable && next == ops.len() {
            break;
        }
        now += 1000;
        // Some ops become ready.
        let n = arrivals.next().unwrap_or(1);
        let records: Vec<ReadyRecord> = (next..(next + n).min(ops.len())).map(|i| record(i, &ops[i])).collect();
        next += records.len();
        arbiter.ready(&records).expect("records taken");
        let mut out = Vec::new();
        arbiter.bindings(now, &mut out).expect("bindings");
        check_bindings(arbiter, &hierarchy, &out, ops, draining_ok);
        after(arbiter);
        for b in &out {
            prop_assert!(bound_ops.insert(b.op), "op {} bound twice", b.op);
        }
        in_flight.extend(out);
        // The oldest half of what runs completes (all of it once everything arrived).
        let finish = if next == ops.len() { in_flight.len() } else { in_flight.len() / 2 };
        let done: Vec<Completion> = in_flight
            .drain(..finish)
            .map(|b| Completion {
                client: b.client,
                op: b.op,
                node: b.node,
                submitted_ns: now - 500,
                completed_ns: now,
            })
            .collect();
        arbiter.completed(&done).expect("completions taken");
    }
    prop_assert_eq!(bound_ops.len(), placeable, "ops stayed ready: {} of {} bound", bound_ops.len(), placeable);
    for (i, o) in ops.iter().enumerate() {
        prop_assert!(bound_ops.contains(&(i as u64)) != (o.min_units > largest), "op {} (floor {})", i, o.min_units);
    }
    Ok(())
}

fn policies() -> impl Strategy<Value = PolicyKind> {
    // TPOT-First is left out: its standing reservation for a latency-critical client may keep
    // another client's wide op waiting as long as the reservation stands (the policy's choice,
    // which this liveness check would flag).
    prop_oneof![Just(PolicyKind::Throughput), Just(PolicyKind::Chaos), Just(PolicyKind::Exclusive)]
}

fn fit(ops: Vec<Op>, clients: u32) -> Vec<Op> {
    ops.into_iter()
        .map(|mut o| {
            o.client %= clients;
            o
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn bindings_keep_the_lease_rules_and_every_op_is_bound(
        clients in 1u32..4,
        policy in policies(),
        ops in proptest::collection::vec(op(3), 1..40),
        arrivals in proptest::collection::vec(1usize..6, 1..20),
        seed in any::<u64>(),
    ) {
        let ops = fit(ops, clients);
        let backend = SimBackend::preset("h200").unwrap();
        let mut arbiter = InProcess::new(backend.topology(), policy.build(seed), Profiles::new("test"), 4);
        arbiter.intern("gemm");
        drive(&mut arbiter, clients, &ops, arrivals, false, 2000, |a| check_pool(a, clients))?;
    }
}

static DAEMONS: AtomicU32 = AtomicU32::new(0);

proptest! {
    // Each case starts a daemon and opens a session per client: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// The same check against the daemon, through its record-level [`Arbiter`]: one real session
    /// (socket, sealed memfd, rings) per client with a daemon running in this process.
    #[test]
    fn the_daemon_keeps_the_same_rules_through_the_record_interface(
        clients in 1u32..4,
        policy in policies(),
        ops in proptest::collection::vec(op(3), 1..40),
        arrivals in proptest::collection::vec(1usize..6, 1..20),
    ) {
        let ops = fit(ops, clients);
        let n = DAEMONS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("vitamin-arb-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cfg = DaemonConfig::new(dir.join("daemon.sock"));
        cfg.decide.policy = policy;
        let daemon = Daemon::start(cfg).expect("daemon starts");
        let backend = SimBackend::preset("h200").unwrap();
        let template = ConnectOptions {
            socket: daemon.socket().to_path_buf(),
            name: "arbiter test".into(),
            device: 0,
            topology: backend.topology().clone(),
            class: ClientClass::BestEffort,
            lanes: 4,
            timeout: Duration::from_secs(5),
        };
        let mut arbiter = DaemonArbiter::new(template, Duration::from_millis(10));
        // Rounds that wait in vain cost the wait each: 3000 of them bound the case at 30 s.
        drive(&mut arbiter, clients, &ops, arrivals, true, 3000, |_| {})?;
        drop(arbiter);
        daemon.shutdown();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// One client keeps a lease busy for ever (a new op of it is ready before its last completes,
/// as lane continuation does under a daemon; each runs two rounds); another's op needs the whole
/// device (a cooperative kernel, or a graph launch). Throughput, Static and TPOT-First reclaim a
/// node large enough for the wide op within a
/// bounded number of rounds, and the busy client is bound again afterwards. (Before, the wide op
/// stayed ready for as long as the other client's work went on: a ResNet-50 job next to a GPT job
/// under the daemon made 2 steps in 8 s, docs/results/daemon-pair.md.)
#[test]
fn a_wide_op_is_bound_while_another_client_keeps_its_lease_busy() {
    let backend = SimBackend::preset("h200").unwrap();
    let top = backend.topology();
    let whole = top.unit_count() as u32;
    let cases = [PolicyKind::Throughput, PolicyKind::Static, PolicyKind::Tpot]
        .into_iter()
        .flat_map(|p| [(p, false), (p, true)]);
    for (policy, graph) in cases {
        let mut arbiter = InProcess::new(top, policy.build(7), Profiles::new("test"), 4);
        arbiter.intern("gemm");
        let (busy, wide) = (arbiter.register(Class::default()).unwrap(), arbiter.register(Class::default()).unwrap());
        let rec = |op: u64, client: ClientId, min_units: u32| ReadyRecord {
            client,
            op,
            key: LaunchKey {
                name_hash: name_hash("gemm"),
                grid: [64, 1, 1],
                block: [256, 1, 1],
                shared_mem_bytes: 0,
                resident_per_unit: 0,
            },
            flags: OpFlags { cooperative: min_units > 0 && !graph, cluster: false, graph: min_units > 0 && graph },
            min_units,
            ready_since_ns: 0,
            class: Class::default(),
            lookahead_units: 0,
        };
        let (mut now, mut next_busy, mut busy_ready) = (0u64, 0u64, 0usize);
        let mut flight: Vec<(Binding, usize)> = Vec::new();
        let (mut wide_ready_at, mut wide_bound_at, mut busy_bound_after_wide) = (None, None, 0);
        for round in 0..400 {
            now += 1000;
            if busy_ready + flight.iter().filter(|(b, _)| b.client == busy).count() < 2 {
                arbiter.ready(&[rec(next_busy, busy, 0)]).unwrap();
                next_busy += 1;
                busy_ready += 1;
            }
            // The wide op becomes ready once the busy client holds a lease.
            if round == 3 {
                assert!(
                    arbiter.pool().leases().any(|l| l.holder == HolderId(busy.0)),
                    "{policy:?} (graph {graph}): no lease yet"
                );
                arbiter.ready(&[rec(1_000_000, wide, whole)]).unwrap();
                wide_ready_at = Some(round);
            }
            let mut out = Vec::new();
            arbiter.bindings(now, &mut out).unwrap();
            for b in out {
                assert!(
                    matches!(arbiter.pool().state(b.node), NodeState::Leased { holder, .. } if *holder == HolderId(b.client.0)),
                    "{policy:?} (graph {graph}): op {} bound to a node its client does not hold",
                    b.op
                );
                if b.client == wide {
                    assert!(
                        arbiter.pool().node(b.node).size() >= whole as usize,
                        "{policy:?} (graph {graph}): wide op on a small node"
                    );
                    wide_bound_at = Some(round);
                } else {
                    busy_ready -= 1;
                    if wide_bound_at.is_some() {
                        busy_bound_after_wide += 1;
                    }
                }
                flight.push((b, round));
            }
            // Every op runs two rounds.
            let done: Vec<Completion> = flight
                .iter()
                .filter(|(_, at)| round >= at + 2)
                .map(|(b, _)| Completion {
                    client: b.client,
                    op: b.op,
                    node: b.node,
                    submitted_ns: now - 500,
                    completed_ns: now,
                })
                .collect();
            flight.retain(|(_, at)| round < at + 2);
            arbiter.completed(&done).unwrap();
            if busy_bound_after_wide >= 3 {
                break;
            }
        }
        let at = wide_bound_at
            .unwrap_or_else(|| panic!("{policy:?} (graph {graph}): the wide op stayed ready for 400 rounds"));
        let waited = at - wide_ready_at.expect("made ready");
        assert!(waited < 50, "{policy:?} (graph {graph}): the wide op waited {waited} rounds");
        assert!(
            busy_bound_after_wide >= 3,
            "{policy:?} (graph {graph}): the busy client was not bound again after the wide op"
        );
    }
}

/// An in-process TPOT-First arbiter on the simulated H200 with one latency-critical client of a
/// 1 ms TPOT target.
fn tpot_with_a_latency_client() -> (InProcess<AnyPolicy>, ClientId) {
    let backend = SimBackend::preset("h200").unwrap();
    let mut arbiter = InProcess::new(backend.topology(), PolicyKind::Tpot.build(0), Profiles::new("test"), 4);
    arbiter.intern("gemm");
    let c = arbiter.register(Class { tpot_target_ns: 1_000_000, deadline_ns: 0 }).unwrap();
    (arbiter, c)
}

/// The size of the widest node `holder` holds (reserved for it or leased by it), 0 if none.
fn widest_held<P: Policy>(a: &InProcess<P>, holder: HolderId) -> usize {
    let pool = a.pool();
    pool.nodes_by_size()
        .iter()
        .filter(|&&n| match pool.state(n) {
            NodeState::Reserved { purpose } => purpose.holder == holder,
            NodeState::Leased { holder: h, .. } => *h == holder,
            _ => false,
        })
        .map(|&n| pool.node(n).size())
        .max()
        .unwrap_or(0)
}

/// Under TPOT-First a latency-critical client's standing reservation follows its steps: `ops`
/// ops per step, bound one after another, each completed `op_us` microseconds later against a 1 ms
/// target, the client idle after each step. Returns the standing node's size before each step
/// and after the last.
fn standing_sizes_over_steps(ops: usize, op_us: u64, graph: bool) -> Vec<usize> {
    let (mut arbiter, c) = tpot_with_a_latency_client();
    let standing = |a: &InProcess<_>| widest_held(a, HolderId(c.0));
    arbiter.bindings(0, &mut Vec::new()).unwrap();
    let (mut now, mut seen, mut id) = (1_000_000u64, vec![standing(&arbiter)], 0usize);
    let bind_one = |arbiter: &mut InProcess<_>, id: usize, now: u64| {
        let o = Op { client: c.0, grid: 8, min_units: 0, graph, lookahead: 0 };
        arbiter.ready(&[record(id, &o)]).unwrap();
        let mut out = Vec::new();
        arbiter.bindings(now, &mut out).unwrap();
        assert_eq!(out.len(), 1, "op {id} is bound");
        out[0]
    };
    for _ in 0..6 {
        // The next op of the step is recorded before the one before it completes, so the client
        // is idle only after the step's last op.
        let mut bound = bind_one(&mut arbiter, id, now);
        id += 1;
        for k in 0..ops {
            now += op_us * 1_000;
            let done = Completion {
                client: c,
                op: bound.op,
                node: bound.node,
                submitted_ns: now - op_us * 1_000,
                completed_ns: now,
            };
            let next = (k + 1 < ops).then(|| {
                let o = Op { client: c.0, grid: 8, min_units: 0, graph, lookahead: 0 };
                arbiter.ready(&[record(id, &o)]).unwrap();
                id += 1;
            });
            arbiter.completed(&[done]).unwrap();
            if next.is_some() {
                let mut out = Vec::new();
                arbiter.bindings(now, &mut out).unwrap();
                assert_eq!(out.len(), 1, "op {} is bound", id - 1);
                bound = out[0];
            }
        }
        arbiter.bindings(now, &mut Vec::new()).unwrap();
        seen.push(standing(&arbiter));
        now += 1_000;
    }
    seen
}

/// Under TPOT-First a latency-critical client's first step is one slow op (2 ms against a 1 ms
/// target), then 200 quick ops (10 us each, the client idle after each: an eager prefill's small
/// kernels). Returns the standing node's size after the first step and after the quick ops.
fn standing_after_slow_step_then_quick_ops(graph_step: bool) -> (usize, usize) {
    let (mut arbiter, c) = tpot_with_a_latency_client();
    let standing = |a: &InProcess<_>| widest_held(a, HolderId(c.0));
    arbiter.bindings(0, &mut Vec::new()).unwrap();
    let mut now = 1_000_000u64;
    let mut step = |arbiter: &mut InProcess<_>, id: usize, graph: bool, took_ns: u64| {
        let o = Op { client: c.0, grid: 8, min_units: 0, graph, lookahead: 0 };
        arbiter.ready(&[record(id, &o)]).unwrap();
        let mut out = Vec::new();
        arbiter.bindings(now, &mut out).unwrap();
        assert_eq!(out.len(), 1, "op {id} is bound");
        let b = out[0];
        now += took_ns;
        let done =
            Completion { client: b.client, op: b.op, node: b.node, submitted_ns: now - took_ns, completed_ns: now };
        arbiter.completed(&[done]).unwrap();
        arbiter.bindings(now, &mut Vec::new()).unwrap();
        now += 1_000;
    };
    step(&mut arbiter, 0, graph_step, 2_000_000);
    let after_step = standing(&arbiter);
    for id in 1..=200 {
        step(&mut arbiter, id, false, 10_000);
    }
    (after_step, standing(&arbiter))
}

/// The quick ops between a graph decoder's steps leave its standing node where its graph launch
/// put it; after a kernel step the same quick ops step it down (they are the client's steps).
#[test]
fn quick_ops_between_graph_steps_leave_the_standing_node_alone() {
    let (after, end) = standing_after_slow_step_then_quick_ops(true);
    assert!(after > 8, "the slow graph launch widened the node: {after}");
    assert_eq!(end, after, "the quick ops left it");
    let (after, end) = standing_after_slow_step_then_quick_ops(false);
    assert!(after > 8, "the slow busy period widened the node: {after}");
    assert!(end < after, "the quick busy periods stepped it down: {after} -> {end}");
}

/// A step of four ops, each within the headroom (0.5 ms of 0.8) but 2 ms together: each busy
/// period that ends widens the standing reservation one size (the in-process arbiter reports it).
#[test]
fn a_latency_clients_slow_steps_widen_its_standing_reservation() {
    let seen = standing_sizes_over_steps(4, 500, false);
    assert_eq!(seen[0], 8, "before a step, the smallest node: {seen:?}");
    assert!(seen.windows(2).all(|w| w[1] > w[0]), "each slow step widened it one size: {seen:?}");
    assert_eq!(seen, [8, 12, 16, 20, 32, 36, 64]);
}

/// A step that is one graph launch taking 2.5x the headroom (a decode step replayed as one CUDA
/// graph): the reservation doubles at the first step; the same time on the wider node is no
/// evidence that widening helps, so the next step leaves it, and one more on that node doubles it
/// again (the busy periods of a client whose steps are graph launches do not count); a kernel of
/// the same time widens it one size per step.
#[test]
fn a_latency_clients_slow_graph_launch_doubles_its_standing_reservation_while_it_helps() {
    assert_eq!(standing_sizes_over_steps(1, 2_000, true), [8, 16, 16, 32, 32, 64, 64]);
    assert_eq!(standing_sizes_over_steps(1, 2_000, false), [8, 12, 16, 20, 32, 36, 64]);
}
