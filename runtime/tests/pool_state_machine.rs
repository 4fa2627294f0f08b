//! The lease state machine against a simple model: a list of unit sets with states, where every
//! question is answered by pairwise scans. Random lease / submit / complete / close-gate /
//! release / reserve / unreserve / reclaim sequences on the H200 and MI300X presets and on random
//! topologies. After every step: the pool's states, pending reservations and the step's outcome
//! equal the model's, and the invariants of `runtime::pool` hold (checked on the pool directly).
//! At the end every node must return to idle once all work completes.

mod pool_support;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use pool_support::{arb_topology, h200, mi300x, reference_nodes};
use proptest::prelude::*;
use proptest::strategy::Union;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use vitamin_hal::{Topology, UnitSet};
use vitamin_runtime::pool::{
    Conflicts, Hierarchy, HolderId, NodeId, NodeState, Pool, PoolError, Reservation, Transition,
};

const HOLDERS: u32 = 3;
const TAGS: u64 = 3;

// ---- the model -------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MState {
    Idle,
    Leased { h: u32, out: u32 },
    Draining { h: u32, out: u32 },
    Reserved { h: u32, tag: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum ErrKind {
    Conflict,
    Claimed,
    HeldByOther,
    ReservedForOther,
    GateClosed,
    NotLeased,
    WorkOutstanding,
    NothingOutstanding,
    AlreadyReserved,
    AlreadyPending,
    NotReserved,
}

/// What one step returned (node indices are model indices).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// A node finished draining; these pending targets became reserved.
    Drained {
        node: usize,
        holder: u32,
        reserved: BTreeSet<(usize, u32, u64)>,
    },
    /// reclaim_for closed these gates.
    Closed(Vec<usize>),
    Err(ErrKind),
}

#[derive(Debug, Clone)]
enum Op {
    Lease { n: usize, h: u32 },
    Submit { n: usize, h: u32 },
    Complete { n: usize },
    CloseGate { n: usize },
    Release { n: usize, h: u32 },
    Reserve { n: usize, h: u32, tag: u64 },
    Unreserve { n: usize },
    Reclaim { n: usize, h: u32, tag: u64 },
}

impl Op {
    fn node(&self) -> usize {
        match *self {
            Op::Lease { n, .. }
            | Op::Submit { n, .. }
            | Op::Complete { n }
            | Op::CloseGate { n }
            | Op::Release { n, .. }
            | Op::Reserve { n, .. }
            | Op::Unreserve { n }
            | Op::Reclaim { n, .. } => n,
        }
    }
}

#[derive(Debug, Clone)]
struct Model {
    top: Topology,
    units: Vec<UnitSet>,
    states: Vec<MState>,
    /// (target, holder, tag) in request order.
    pending: Vec<(usize, u32, u64)>,
    last: Option<Outcome>,
}

impl Model {
    fn new(top: Topology) -> Model {
        let units: Vec<UnitSet> = reference_nodes(&top).into_iter().map(|(u, _)| u).collect();
        let n = units.len();
        Model { top, units, states: vec![MState::Idle; n], pending: Vec::new(), last: None }
    }

    fn overlaps(&self, a: usize, b: usize) -> bool {
        self.units[a].intersects(&self.units[b])
    }

    fn overlaps_active(&self, n: usize) -> bool {
        (0..self.units.len()).any(|j| self.states[j] != MState::Idle && self.overlaps(n, j))
    }

    fn overlaps_pending(&self, n: usize) -> bool {
        self.pending.iter().any(|&(t, _, _)| self.overlaps(n, t))
    }

    fn pending_on(&self, n: usize) -> Option<usize> {
        self.pending.iter().position(|&(t, _, _)| t == n)
    }

    fn eligible(&self, n: usize, h: u32) -> bool {
        match self.states[n] {
            MState::Idle => !self.overlaps_active(n) && !self.overlaps_pending(n),
            MState::Leased { h: o, .. } => o == h,
            MState::Reserved { h: o, .. } => o == h,
            MState::Draining { .. } => false,
        }
    }

    fn settle(&mut self) -> BTreeSet<(usize, u32, u64)> {
        let mut done = BTreeSet::new();
        let mut k = 0;
        while k < self.pending.len() {
            let (t, h, tag) = self.pending[k];
            if self.overlaps_active(t) {
                k += 1;
            } else {
                self.pending.remove(k);
                self.states[t] = MState::Reserved { h, tag };
                done.insert((t, h, tag));
            }
        }
        done
    }

    fn drained(&mut self, n: usize, h: u32) -> Outcome {
        self.states[n] = MState::Idle;
        let reserved = self.settle();
        Outcome::Drained { node: n, holder: h, reserved }
    }

    fn step(&mut self, op: &Op) -> Outcome {
        use ErrKind::*;
        use MState::*;
        let err = Outcome::Err;
        match *op {
            Op::Lease { n, h } => match self.states[n] {
                Leased { h: o, .. } if o == h => Outcome::Ok,
                Leased { .. } => err(HeldByOther),
                Draining { .. } => err(GateClosed),
                Reserved { h: o, .. } if o == h => {
                    self.states[n] = Leased { h, out: 0 };
                    Outcome::Ok
                }
                Reserved { .. } => err(ReservedForOther),
                Idle if self.overlaps_active(n) => err(Conflict),
                Idle if self.overlaps_pending(n) => err(Claimed),
                Idle => {
                    self.states[n] = Leased { h, out: 0 };
                    Outcome::Ok
                }
            },
            Op::Submit { n, h } => match self.states[n] {
                Leased { h: o, out } if o == h => {
                    self.states[n] = Leased { h, out: out + 1 };
                    Outcome::Ok
                }
                Leased { .. } => err(HeldByOther),
                Draining { .. } => err(GateClosed),
                Idle | Reserved { .. } => err(NotLeased),
            },
            Op::Complete { n } => match self.states[n] {
                Leased { out: 0, .. } | Draining { out: 0, .. } => err(NothingOutstanding),
                Leased { h, out } => {
                    self.states[n] = Leased { h, out: out - 1 };
                    Outcome::Ok
                }
                Draining { h, out: 1 } => self.drained(n, h),
                Draining { h, out } => {
                    self.states[n] = Draining { h, out: out - 1 };
                    Outcome::Ok
                }
                Idle | Reserved { .. } => err(NotLeased),
            },
            Op::CloseGate { n } => match self.states[n] {
                Leased { h, out: 0 } => self.drained(n, h),
                Leased { h, out } => {
                    self.states[n] = Draining { h, out };
                    Outcome::Ok
                }
                Draining { .. } => err(GateClosed),
                Idle | Reserved { .. } => err(NotLeased),
            },
            Op::Release { n, h } => match self.states[n] {
                Leased { h: o, out: 0 } if o == h => {
                    self.states[n] = Idle;
                    Outcome::Ok
                }
                Leased { h: o, .. } if o == h => err(WorkOutstanding),
                Leased { .. } => err(HeldByOther),
                Draining { .. } => err(GateClosed),
                Idle | Reserved { .. } => err(NotLeased),
            },
            Op::Reserve { n, h, tag } => match self.states[n] {
                Reserved { .. } => err(AlreadyReserved),
                _ if self.overlaps_active(n) => err(Conflict),
                _ if self.overlaps_pending(n) => err(Claimed),
                _ => {
                    self.states[n] = Reserved { h, tag };
                    Outcome::Ok
                }
            },
            Op::Unreserve { n } => {
                if let Reserved { .. } = self.states[n] {
                    self.states[n] = Idle;
                    Outcome::Ok
                } else if let Some(p) = self.pending_on(n) {
                    self.pending.remove(p);
                    Outcome::Ok
                } else {
                    err(NotReserved)
                }
            }
            Op::Reclaim { n, h, tag } => {
                if let Reserved { .. } = self.states[n] {
                    return err(AlreadyReserved);
                }
                if self.pending_on(n).is_some() {
                    return err(AlreadyPending);
                }
                if self.overlaps_pending(n) {
                    return err(Claimed);
                }
                let len = self.units.len();
                if (0..len).any(|j| matches!(self.states[j], Reserved { .. }) && self.overlaps(n, j)) {
                    return err(Conflict);
                }
                let closed: Vec<usize> =
                    (0..len).filter(|&j| matches!(self.states[j], Leased { .. }) && self.overlaps(n, j)).collect();
                for &j in &closed {
                    if let Leased { h, out } = self.states[j] {
                        self.states[j] = if out == 0 { Idle } else { Draining { h, out } };
                    }
                }
                self.pending.push((n, h, tag));
                self.settle();
                Outcome::Closed(closed)
            }
        }
    }
}

struct PoolModel;

fn holder() -> impl Strategy<Value = u32> {
    0..HOLDERS
}

impl ReferenceStateMachine for PoolModel {
    type State = Model;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Model> {
        prop_oneof![Just(h200()), Just(mi300x()), arb_topology(12)].prop_map(Model::new).boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<Op> {
        let n = m.units.len();
        let with = |f: fn(&MState) -> bool| -> Vec<(usize, u32)> {
            m.states
                .iter()
                .enumerate()
                .filter(|(_, s)| f(s))
                .map(|(i, s)| match *s {
                    MState::Leased { h, .. } | MState::Draining { h, .. } | MState::Reserved { h, .. } => (i, h),
                    MState::Idle => (i, 0),
                })
                .collect()
        };
        let leased = with(|s| matches!(s, MState::Leased { .. }));
        let busy = with(|s| matches!(s, MState::Leased { out: 1.., .. } | MState::Draining { .. }));
        let draining = with(|s| matches!(s, MState::Draining { .. }));
        let reserved = with(|s| matches!(s, MState::Reserved { .. }));
        let pending: Vec<usize> = m.pending.iter().map(|p| p.0).collect();

        // Arbitrary ops on arbitrary nodes (many are illegal: they must be refused identically).
        let mut choices: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (6, (0..n, holder()).prop_map(|(n, h)| Op::Lease { n, h }).boxed()),
            (1, (0..n, holder()).prop_map(|(n, h)| Op::Submit { n, h }).boxed()),
            (1, (0..n).prop_map(|n| Op::Complete { n }).boxed()),
            (1, (0..n).prop_map(|n| Op::CloseGate { n }).boxed()),
            (1, (0..n, holder()).prop_map(|(n, h)| Op::Release { n, h }).boxed()),
            (2, (0..n, holder(), 0..TAGS).prop_map(|(n, h, tag)| Op::Reserve { n, h, tag }).boxed()),
            (1, (0..n).prop_map(|n| Op::Unreserve { n }).boxed()),
            (2, (0..n, holder(), 0..TAGS).prop_map(|(n, h, tag)| Op::Reclaim { n, h, tag }).boxed()),
        ];
        // Ops biased towards legal moves so that sequences get deep.
        if !leased.is_empty() {
            let l = leased.clone();
            choices.push((6, prop::sample::select(l).prop_map(|(n, h)| Op::Submit { n, h }).boxed()));
            let l = leased.clone();
            choices.push((2, prop::sample::select(l).prop_map(|(n, h)| Op::Release { n, h }).boxed()));
            choices.push((2, prop::sample::select(leased).prop_map(|(n, _)| Op::CloseGate { n }).boxed()));
        }
        if !busy.is_empty() {
            choices.push((7, prop::sample::select(busy).prop_map(|(n, _)| Op::Complete { n }).boxed()));
        }
        if !draining.is_empty() {
            // A draining node must admit nothing, not even from its former holder.
            let d = draining.clone();
            choices.push((1, prop::sample::select(d).prop_map(|(n, h)| Op::Submit { n, h }).boxed()));
            choices.push((1, prop::sample::select(draining).prop_map(|(n, h)| Op::Lease { n, h }).boxed()));
        }
        if !reserved.is_empty() {
            let r = reserved.clone();
            choices.push((2, prop::sample::select(r).prop_map(|(n, h)| Op::Lease { n, h }).boxed()));
            choices.push((1, prop::sample::select(reserved).prop_map(|(n, _)| Op::Unreserve { n }).boxed()));
        }
        if !pending.is_empty() {
            choices.push((1, prop::sample::select(pending).prop_map(|n| Op::Unreserve { n }).boxed()));
        }
        Union::new_weighted(choices).boxed()
    }

    fn preconditions(m: &Model, op: &Op) -> bool {
        op.node() < m.units.len() // shrinking may pick a smaller topology
    }

    fn apply(mut m: Model, op: &Op) -> Model {
        let outcome = m.step(op);
        m.last = Some(outcome);
        m
    }
}

// ---- the system under test -------------------------------------------------------------------

struct Sut {
    pool: Pool,
    /// Model index -> pool node id (matched by unit set).
    ids: Vec<NodeId>,
    /// Pool node index -> model index.
    back: HashMap<NodeId, usize>,
    last: Option<Outcome>,
}

fn err_kind(e: &PoolError) -> ErrKind {
    match e {
        PoolError::Conflict { .. } => ErrKind::Conflict,
        PoolError::Claimed { .. } => ErrKind::Claimed,
        PoolError::HeldByOther { .. } => ErrKind::HeldByOther,
        PoolError::ReservedForOther { .. } => ErrKind::ReservedForOther,
        PoolError::GateClosed { .. } => ErrKind::GateClosed,
        PoolError::NotLeased { .. } => ErrKind::NotLeased,
        PoolError::WorkOutstanding { .. } => ErrKind::WorkOutstanding,
        PoolError::NothingOutstanding { .. } => ErrKind::NothingOutstanding,
        PoolError::AlreadyReserved { .. } => ErrKind::AlreadyReserved,
        PoolError::AlreadyPending { .. } => ErrKind::AlreadyPending,
        PoolError::NotReserved { .. } => ErrKind::NotReserved,
        other => panic!("unexpected error from a pool transition: {other}"),
    }
}

impl Sut {
    fn model_state(&self, s: &NodeState) -> MState {
        match *s {
            NodeState::Idle => MState::Idle,
            NodeState::Leased { holder, outstanding } => MState::Leased { h: holder.0, out: outstanding },
            NodeState::Draining { holder, outstanding } => MState::Draining { h: holder.0, out: outstanding },
            NodeState::Reserved { purpose } => MState::Reserved { h: purpose.holder.0, tag: purpose.tag },
        }
    }

    fn drained(&self, t: Transition) -> Outcome {
        Outcome::Drained {
            node: self.back[&t.drained],
            holder: t.holder.0,
            reserved: t.reserved.iter().map(|(id, r)| (self.back[id], r.holder.0, r.tag)).collect(),
        }
    }

    fn step(&mut self, op: &Op) -> Outcome {
        let id = self.ids[op.node()];
        let unit = |r: Result<(), PoolError>| match r {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::Err(err_kind(&e)),
        };
        let trans = |s: &Sut, r: Result<Option<Transition>, PoolError>| match r {
            Ok(None) => Outcome::Ok,
            Ok(Some(t)) => s.drained(t),
            Err(e) => Outcome::Err(err_kind(&e)),
        };
        match *op {
            Op::Lease { h, .. } => unit(self.pool.lease(id, HolderId(h))),
            Op::Submit { h, .. } => unit(self.pool.begin_submit(id, HolderId(h))),
            Op::Complete { .. } => {
                let r = self.pool.complete(id);
                trans(self, r)
            }
            Op::CloseGate { .. } => {
                let r = self.pool.close_gate(id);
                trans(self, r)
            }
            Op::Release { h, .. } => unit(self.pool.release(id, HolderId(h))),
            Op::Reserve { h, tag, .. } => unit(self.pool.reserve(id, Reservation { holder: HolderId(h), tag })),
            Op::Unreserve { .. } => unit(self.pool.unreserve(id)),
            Op::Reclaim { h, tag, .. } => match self.pool.reclaim_for(id, Reservation { holder: HolderId(h), tag }) {
                Ok(closed) => {
                    let mut c: Vec<usize> = closed.iter().map(|id| self.back[id]).collect();
                    c.sort_unstable();
                    Outcome::Closed(c)
                }
                Err(e) => Outcome::Err(err_kind(&e)),
            },
        }
    }
}

/// The invariants of `runtime::pool`, checked on the pool alone (pairwise, the slow obvious way).
fn check_pool_invariants(pool: &Pool) {
    let nodes = pool.nodes();
    let active: Vec<_> = nodes.iter().filter(|n| pool.state(n.id).is_active()).collect();
    // 1. Active nodes are pairwise disjoint, and active_units is their union.
    for (i, a) in active.iter().enumerate() {
        for b in &active[i + 1..] {
            assert!(
                a.units.is_disjoint(&b.units),
                "active nodes {} ({}) and {} ({}) intersect",
                a.id,
                pool.state(a.id).name(),
                b.id,
                pool.state(b.id).name()
            );
        }
    }
    assert_eq!(pool.active_units(), active.iter().fold(UnitSet::EMPTY, |acc, n| acc | n.units));
    let listed: BTreeSet<_> = pool.active_nodes().iter().copied().collect();
    assert_eq!(listed, active.iter().map(|n| n.id).collect::<BTreeSet<_>>());
    // 2. A reserved node's units are never leased to another holder.
    for r in &active {
        if let NodeState::Reserved { purpose } = pool.state(r.id) {
            for n in nodes {
                if let NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } = pool.state(n.id) {
                    assert!(
                        *holder == purpose.holder || n.units.is_disjoint(&r.units),
                        "{} reserved for {} shares units with {} leased by {}",
                        r.id,
                        purpose.holder,
                        n.id,
                        holder
                    );
                }
            }
        }
    }
    // 3. A draining node has outstanding work and admits nothing.
    for n in nodes {
        if let NodeState::Draining { outstanding, .. } = pool.state(n.id) {
            assert!(*outstanding > 0, "{} is draining with nothing outstanding", n.id);
            for h in 0..HOLDERS {
                assert!(!pool.is_eligible(n.id, HolderId(h)), "draining {} is eligible", n.id);
            }
        }
    }
    // 4. Pending targets: disjoint, claimed = their union, blocked only by draining nodes, and
    //    none is satisfiable (it would have become reserved).
    let pending = pool.pending();
    let mut claimed = UnitSet::EMPTY;
    for (k, (t, _)) in pending.iter().enumerate() {
        let tu = pool.node(*t).units;
        assert!(tu.is_disjoint(&claimed), "pending targets overlap");
        claimed |= tu;
        assert!(!matches!(pool.state(*t), NodeState::Reserved { .. }));
        let blockers: Vec<_> = active.iter().filter(|a| a.units.intersects(&tu)).collect();
        assert!(!blockers.is_empty(), "pending target {} (#{k}) is free but not reserved", t);
        for b in blockers {
            assert!(
                matches!(pool.state(b.id), NodeState::Draining { .. }),
                "pending target {} overlaps {} which is {}",
                t,
                b.id,
                pool.state(b.id).name()
            );
        }
    }
    assert_eq!(pool.claimed_units(), claimed);
}

impl<const PAIRWISE: bool> StateMachineTest for PoolSm<PAIRWISE> {
    type SystemUnderTest = Sut;
    type Reference = PoolModel;

    fn init_test(m: &Model) -> Sut {
        let conflicts = if PAIRWISE { Conflicts::Pairwise } else { Conflicts::Unions };
        let pool = Pool::with_conflicts(Arc::new(Hierarchy::build(&m.top)), conflicts);
        assert_eq!(pool.conflicts(), conflicts);
        assert_eq!(pool.nodes().len(), m.units.len());
        let ids: Vec<NodeId> = m
            .units
            .iter()
            .map(|u| pool.hierarchy().find(u).unwrap_or_else(|| panic!("no pool node over {u}")))
            .collect();
        let back: HashMap<NodeId, usize> = ids.iter().enumerate().map(|(i, id)| (*id, i)).collect();
        assert_eq!(back.len(), ids.len(), "model and pool nodes are not in bijection");
        Sut { pool, ids, back, last: None }
    }

    fn apply(mut sut: Sut, _m: &Model, op: Op) -> Sut {
        sut.last = Some(sut.step(&op));
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        let pool = &sut.pool;
        assert_eq!(sut.last, m.last, "outcome of the last step differs from the model");
        for (i, id) in sut.ids.iter().enumerate() {
            assert_eq!(sut.model_state(pool.state(*id)), m.states[i], "state of {id} differs from the model");
        }
        let pending: Vec<_> = pool.pending().iter().map(|(t, r)| (sut.back[t], r.holder.0, r.tag)).collect();
        assert_eq!(pending, m.pending, "pending reservations differ from the model");
        check_pool_invariants(pool);

        // Eligibility (bitset-based or pairwise) equals the model's pairwise answer, in ascending size.
        let mut out = Vec::new();
        let min_sizes = [0, pool.node(pool.leaves()[0]).size() + 1, pool.node(pool.root()).size() / 2];
        for h in 0..HOLDERS {
            for &min in &min_sizes {
                pool.eligible(HolderId(h), min, &mut out);
                let got: BTreeSet<usize> = out.iter().map(|id| sut.back[id]).collect();
                let want: BTreeSet<usize> =
                    (0..m.units.len()).filter(|&i| m.units[i].len() >= min && m.eligible(i, h)).collect();
                assert_eq!(got, want, "eligible(holder {h}, min {min})");
                assert_eq!(got.len(), out.len(), "duplicates in eligible()");
                assert!(out.windows(2).all(|w| pool.node(w[0]).size() <= pool.node(w[1]).size()));
                for (i, id) in sut.ids.iter().enumerate() {
                    assert_eq!(pool.is_eligible(*id, HolderId(h)), m.eligible(i, h), "is_eligible({id}, {h})");
                }
            }
        }
        // overlapping_leased equals the pairwise answer for every target.
        for (t, tid) in sut.ids.iter().enumerate() {
            pool.overlapping_leased(*tid, &mut out);
            let got: BTreeSet<usize> = out.iter().map(|id| sut.back[id]).collect();
            let want: BTreeSet<usize> = (0..m.units.len())
                .filter(|&j| matches!(m.states[j], MState::Leased { .. }) && m.overlaps(t, j))
                .collect();
            assert_eq!(got, want, "overlapping_leased({tid})");
        }
    }

    /// Every node returns to idle when all work completes: close every open gate, complete all
    /// outstanding work, then give back the reservations that were fulfilled meanwhile.
    fn teardown(mut sut: Sut) {
        let pool = &mut sut.pool;
        let ids: Vec<NodeId> = pool.nodes().iter().map(|n| n.id).collect();
        for &id in &ids {
            if let NodeState::Leased { .. } = pool.state(id) {
                pool.close_gate(id).expect("closing an open gate");
            }
        }
        for &id in &ids {
            while let NodeState::Draining { .. } = pool.state(id) {
                pool.complete(id).expect("completing outstanding work");
                check_pool_invariants(pool);
            }
        }
        assert!(pool.pending().is_empty(), "pending reservations left after all work completed");
        for &id in &ids {
            if let NodeState::Reserved { .. } = pool.state(id) {
                pool.unreserve(id).expect("unreserving");
            }
        }
        assert!(pool.is_quiescent());
        assert!(pool.states().iter().all(|s| *s == NodeState::Idle));
        assert!(pool.active_units().is_empty() && pool.claimed_units().is_empty());
    }
}

/// The pool under test; `PAIRWISE`: the flat variant ([`Conflicts::Pairwise`]), which must answer
/// every step exactly as the model (and so as the default) does.
struct PoolSm<const PAIRWISE: bool>;

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 200, max_shrink_iters: 4096, ..ProptestConfig::default() })]
    #[test]
    fn pool_matches_model(sequential 1..80 => PoolSm<false>);

    #[test]
    fn flat_pool_matches_model(sequential 1..80 => PoolSm<true>);
}
