//! Scenario tests of the lease state machine on the H200 tree: each illegal move is refused with
//! the right error and changes nothing; reservation and lookahead reclamation end to end.

mod pool_support;

use pool_support::h200;
use vitamin_hal::UnitSet;
use vitamin_runtime::pool::{HolderId, NodeId, NodeKind, NodeState, Pool, PoolError, Reservation};

const A: HolderId = HolderId(1);
const B: HolderId = HolderId(2);

fn pool() -> Pool {
    Pool::build(&h200())
}

fn node(p: &Pool, lo: usize, hi: usize) -> NodeId {
    p.hierarchy().find(&UnitSet::range(lo, hi)).unwrap_or_else(|| panic!("no node over {lo}..{hi}"))
}

/// Snapshot of everything a refused transition must leave unchanged.
fn snapshot(p: &Pool) -> (Vec<NodeState>, UnitSet, UnitSet, Vec<(NodeId, Reservation)>) {
    (p.states().to_vec(), p.active_units(), p.claimed_units(), p.pending().to_vec())
}

#[test]
fn conflicting_lease_is_refused_and_changes_nothing() {
    let mut p = pool();
    let leaf0 = p.leaves()[0];
    p.lease(leaf0, A).unwrap();
    let before = snapshot(&p);
    let root = p.root();
    match p.lease(root, B) {
        Err(PoolError::Conflict { node, blocker, blocker_state }) => {
            assert_eq!((node, blocker, blocker_state), (root, leaf0, "leased"));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Even the same holder cannot lease two overlapping nodes.
    assert!(matches!(p.lease(root, A), Err(PoolError::Conflict { .. })));
    assert_eq!(snapshot(&p), before);
    // The leaf's remainder (124 SMs) is disjoint from it: another holder may lease it.
    let rem = p.node(leaf0).remainder.unwrap();
    assert_eq!(p.node(rem).size(), 124);
    p.lease(rem, B).unwrap();
    assert_eq!(p.active_units(), UnitSet::first_n(132));
    // Now nothing else is free.
    let mut out = Vec::new();
    p.eligible(HolderId(3), 0, &mut out);
    assert!(out.is_empty());
    p.eligible(A, 0, &mut out);
    assert_eq!(out, vec![leaf0]);
}

#[test]
fn leasing_excludes_exactly_ancestors_and_descendants_in_the_tree() {
    // The paper's hierarchy conflict rule, for every tree node.
    let tree: Vec<NodeId> = pool().hierarchy().tree_preorder().map(|n| n.id).collect();
    for &x in &tree {
        let mut p = pool();
        p.lease(x, A).unwrap();
        let ancestors: Vec<NodeId> = std::iter::successors(p.node(x).parent, |&a| p.node(a).parent).collect();
        for &y in &tree {
            if y == x {
                continue;
            }
            let descendant = std::iter::successors(p.node(y).parent, |&a| p.node(a).parent).any(|a| a == x);
            let related = ancestors.contains(&y) || descendant;
            assert_eq!(!p.is_eligible(y, B), related, "leasing {x}: eligibility of {y}");
        }
        // Leasing its remainder excludes the node's ancestors and everything outside the node.
        if let Some(r) = p.node(x).remainder {
            let mut q = pool();
            q.lease(r, A).unwrap();
            for &y in &tree {
                let inside = q.node(y).units.is_subset(&q.node(x).units);
                assert_eq!(q.is_eligible(y, B), inside, "leasing remainder of {x}: eligibility of {y}");
            }
        }
    }
}

#[test]
fn closed_gate_admits_nothing_and_drains_to_idle() {
    let mut p = pool();
    let n = node(&p, 0, 16);
    p.lease(n, A).unwrap();
    p.begin_submit(n, A).unwrap();
    p.begin_submit(n, A).unwrap();
    assert_eq!(*p.state(n), NodeState::Leased { holder: A, outstanding: 2 });
    assert_eq!(p.close_gate(n).unwrap(), None);
    assert_eq!(*p.state(n), NodeState::Draining { holder: A, outstanding: 2 });
    let before = snapshot(&p);
    assert_eq!(p.begin_submit(n, A), Err(PoolError::GateClosed { node: n }));
    assert_eq!(p.lease(n, A), Err(PoolError::GateClosed { node: n }));
    assert_eq!(p.lease(n, B), Err(PoolError::GateClosed { node: n }));
    assert_eq!(p.release(n, A), Err(PoolError::GateClosed { node: n }));
    assert_eq!(p.close_gate(n), Err(PoolError::GateClosed { node: n }));
    assert!(!p.is_eligible(n, A));
    assert_eq!(snapshot(&p), before);
    assert_eq!(p.complete(n).unwrap(), None);
    let t = p.complete(n).unwrap().expect("last op of a draining node");
    assert_eq!((t.drained, t.holder, t.reserved.len()), (n, A, 0));
    assert_eq!(*p.state(n), NodeState::Idle);
    assert!(p.is_quiescent());
    assert_eq!(p.complete(n), Err(PoolError::NotLeased { node: n, state: "idle" }));
}

#[test]
fn close_gate_with_nothing_outstanding_goes_idle_at_once() {
    let mut p = pool();
    let n = p.leaves()[3];
    p.lease(n, A).unwrap();
    let t = p.close_gate(n).unwrap().expect("idle at once");
    assert_eq!(t.drained, n);
    assert!(p.is_quiescent());
}

#[test]
fn release_rules() {
    let mut p = pool();
    let n = p.leaves()[15];
    assert_eq!(p.release(n, A), Err(PoolError::NotLeased { node: n, state: "idle" }));
    p.lease(n, A).unwrap();
    p.lease(n, A).unwrap(); // re-leasing one's own open lease is a no-op
    p.begin_submit(n, A).unwrap();
    assert_eq!(p.release(n, A), Err(PoolError::WorkOutstanding { node: n, outstanding: 1 }));
    assert_eq!(p.release(n, B), Err(PoolError::HeldByOther { node: n, holder: B, owner: A }));
    assert_eq!(p.begin_submit(n, B), Err(PoolError::HeldByOther { node: n, holder: B, owner: A }));
    assert_eq!(p.lease(n, B), Err(PoolError::HeldByOther { node: n, holder: B, owner: A }));
    assert_eq!(p.complete(n).unwrap(), None);
    assert_eq!(p.complete(n), Err(PoolError::NothingOutstanding { node: n }));
    p.release(n, A).unwrap();
    assert!(p.is_quiescent());
}

#[test]
fn reservation_excludes_other_holders() {
    let mut p = pool();
    let target = node(&p, 64, 132); // the 68-SM half
    let r = Reservation { holder: B, tag: 42 };
    p.reserve(target, r).unwrap();
    assert_eq!(p.reserve(target, r), Err(PoolError::AlreadyReserved { node: target, reservation: r }));
    assert_eq!(p.lease(target, A), Err(PoolError::ReservedForOther { node: target, holder: A, reservation: r }));
    let inside = p.leaves()[15];
    assert_eq!(
        p.lease(inside, A),
        Err(PoolError::Conflict { node: inside, blocker: target, blocker_state: "reserved" })
    );
    // ... also for the reservation's own holder: it leases the reserved node itself.
    assert!(matches!(p.lease(inside, B), Err(PoolError::Conflict { .. })));
    let mut out = Vec::new();
    p.eligible(A, 0, &mut out);
    assert!(out.iter().all(|&n| p.node(n).units.is_subset(&UnitSet::range(0, 64))));
    p.eligible(B, 60, &mut out);
    assert_eq!(out, vec![node(&p, 0, 64), target]);
    p.lease(target, B).unwrap();
    assert_eq!(*p.state(target), NodeState::Leased { holder: B, outstanding: 0 });
    p.release(target, B).unwrap();
    // unreserve: a reserved node goes idle; nothing to unreserve otherwise.
    p.reserve(target, r).unwrap();
    p.unreserve(target).unwrap();
    assert_eq!(p.unreserve(target), Err(PoolError::NotReserved { node: target, state: "idle" }));
    assert!(p.is_quiescent());
}

#[test]
fn lookahead_reclamation_drains_overlapping_leases_then_reserves() {
    let mut p = pool();
    // Best-effort holder A runs on the 64-SM half and on the 12-SM leaf; decode holder B on
    // SMs 64..80.
    let half = node(&p, 0, 64);
    let leaf15 = p.leaves()[15];
    let b_node = node(&p, 64, 80);
    for (n, h) in [(half, A), (leaf15, A), (b_node, B)] {
        p.lease(n, h).unwrap();
    }
    p.begin_submit(half, A).unwrap();
    p.begin_submit(half, A).unwrap();
    p.begin_submit(b_node, B).unwrap();
    // B anticipates a decode needing 96 SMs: the remainder of SMs 96..132.
    let target = p.node(node(&p, 96, 132)).remainder.unwrap();
    assert_eq!(p.node(target).units, UnitSet::range(0, 96));
    assert_eq!(p.node(target).kind, NodeKind::Remainder);
    let mut overlapping = Vec::new();
    p.overlapping_leased(target, &mut overlapping);
    assert_eq!(overlapping, {
        let mut v = vec![half, b_node];
        v.sort();
        v
    });
    let r = Reservation { holder: B, tag: 7 };
    let closed = p.reclaim_for(target, r).unwrap();
    assert_eq!(closed, overlapping); // B's own lease inside the target drains too
    assert_eq!(*p.state(half), NodeState::Draining { holder: A, outstanding: 2 });
    assert_eq!(*p.state(b_node), NodeState::Draining { holder: B, outstanding: 1 });
    assert_eq!(*p.state(leaf15), NodeState::Leased { holder: A, outstanding: 0 }); // untouched
    assert_eq!(p.pending(), &[(target, r)]);
    assert_eq!(p.claimed_units(), UnitSet::range(0, 96));
    // While pending, nobody may take any of the target's units.
    let leaf0 = p.leaves()[0];
    for h in [A, B] {
        assert!(!p.is_eligible(leaf0, h));
    }
    // A leaf in the claim but not under any active node reports the claim.
    let leaf10 = p.leaves()[10]; // SMs 80..88: no active node covers it, only the target
    assert_eq!(p.lease(leaf10, A), Err(PoolError::Claimed { node: leaf10, target }));
    assert_eq!(p.reclaim_for(target, r), Err(PoolError::AlreadyPending { node: target, reservation: r }));
    // The best-effort half drains first: the target stays pending (B's node still drains).
    assert_eq!(p.complete(half).unwrap(), None);
    let t = p.complete(half).unwrap().unwrap();
    assert_eq!((t.drained, t.reserved.len()), (half, 0));
    assert_eq!(p.pending().len(), 1);
    // B's last op completes: its node drains and the target becomes reserved in the same step.
    let t = p.complete(b_node).unwrap().unwrap();
    assert_eq!(t.drained, b_node);
    assert_eq!(t.reserved.as_slice(), &[(target, r)]);
    assert_eq!(*p.state(target), NodeState::Reserved { purpose: r });
    assert!(p.pending().is_empty() && p.claimed_units().is_empty());
    assert!(p.is_eligible(target, B) && !p.is_eligible(target, A));
    p.lease(target, B).unwrap();
    p.release(target, B).unwrap();
    p.release(leaf15, A).unwrap();
    assert!(p.is_quiescent());
}

#[test]
fn reclaim_with_nothing_outstanding_reserves_at_once() {
    let mut p = pool();
    let leaf0 = p.leaves()[0];
    p.lease(leaf0, A).unwrap();
    let target = node(&p, 0, 32);
    let r = Reservation { holder: B, tag: 1 };
    assert_eq!(p.reclaim_for(target, r).unwrap(), vec![leaf0]);
    assert_eq!(*p.state(leaf0), NodeState::Idle);
    assert_eq!(*p.state(target), NodeState::Reserved { purpose: r });
    assert!(p.pending().is_empty());
    // Reclaiming a reserved target, or over a reserved node, is refused.
    assert_eq!(p.reclaim_for(target, r), Err(PoolError::AlreadyReserved { node: target, reservation: r }));
    let root = p.root();
    assert_eq!(
        p.reclaim_for(root, r),
        Err(PoolError::Conflict { node: root, blocker: target, blocker_state: "reserved" })
    );
}

#[test]
fn unreserve_cancels_a_pending_reservation() {
    let mut p = pool();
    let leaf0 = p.leaves()[0];
    p.lease(leaf0, A).unwrap();
    p.begin_submit(leaf0, A).unwrap();
    let target = node(&p, 0, 16);
    let r = Reservation { holder: B, tag: 3 };
    assert_eq!(p.reclaim_for(target, r).unwrap(), vec![leaf0]);
    // A second, overlapping reclamation is refused while the first is pending.
    let wider = node(&p, 0, 32);
    assert_eq!(p.reclaim_for(wider, r), Err(PoolError::Claimed { node: wider, target }));
    p.unreserve(target).unwrap();
    assert!(p.pending().is_empty() && p.claimed_units().is_empty());
    // The closed gate stays closed; the node drains to idle, and nothing becomes reserved.
    let t = p.complete(leaf0).unwrap().unwrap();
    assert!(t.reserved.is_empty());
    assert!(p.is_quiescent());
}

#[test]
fn unknown_nodes_are_refused_with_a_clear_message() {
    let mut p = pool();
    let bad = NodeId(59);
    let e = p.lease(bad, A).unwrap_err();
    assert_eq!(e, PoolError::UnknownNode { node: bad, count: 59 });
    assert_eq!(e.to_string(), "node #59 does not exist: this pool has 59 nodes (#0..#58)");
    for r in [
        p.begin_submit(bad, A),
        p.release(bad, A),
        p.reserve(bad, Reservation { holder: A, tag: 0 }),
        p.unreserve(bad),
        p.complete(bad).map(|_| ()),
        p.close_gate(bad).map(|_| ()),
        p.reclaim_for(bad, Reservation { holder: A, tag: 0 }).map(|_| ()),
    ] {
        assert!(matches!(r, Err(PoolError::UnknownNode { .. })));
    }
}

#[test]
fn error_messages_say_what_to_do() {
    let mut p = pool();
    let n = p.leaves()[0];
    p.lease(n, A).unwrap();
    p.begin_submit(n, A).unwrap();
    let msg = p.release(n, A).unwrap_err().to_string();
    assert!(msg.contains("#") && msg.contains("1 outstanding") && msg.contains("close its gate"), "{msg}");
    let msg = p.lease(p.root(), B).unwrap_err().to_string();
    assert!(msg.contains("overlaps") && msg.contains("reclaim_for"), "{msg}");
    p.close_gate(n).unwrap();
    let msg = p.begin_submit(n, A).unwrap_err().to_string();
    assert!(msg.contains("draining") && msg.contains("submit elsewhere"), "{msg}");
}

#[test]
fn eligible_respects_min_units_and_size_order() {
    let p = pool();
    let mut out = Vec::new();
    p.eligible(A, 0, &mut out);
    assert_eq!(out.len(), 59);
    assert_eq!(out, p.nodes_by_size());
    p.eligible(A, 100, &mut out);
    let sizes: Vec<usize> = out.iter().map(|&n| p.node(n).size()).collect();
    // Remainders of the three 32-SM quads (100), of the 20-SM pair (112), of the seven 16-SM
    // pairs (116), of the 12-SM leaf (120), of the fifteen 8-SM leaves (124); the root.
    assert_eq!(sizes, [vec![100; 3], vec![112], vec![116; 7], vec![120], vec![124; 15], vec![132]].concat());
    p.eligible(A, 133, &mut out);
    assert!(out.is_empty());
}
