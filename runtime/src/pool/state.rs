//! [`Pool`]: per-node lease state over a [`Hierarchy`], with validated transitions.
//! The contract and invariants are in the module documentation of [`crate::pool`].

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use smallvec::SmallVec;
use vitamin_hal::{Topology, UnitSet};

use super::error::PoolError;
use super::hierarchy::{Hierarchy, Node, NodeId};

/// A client (a virtual context) that holds leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct HolderId(pub u32);

impl fmt::Display for HolderId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "holder {}", self.0)
    }
}

/// A lease: the right of one client (`holder`) to submit to one physical context (`node`).
/// While the gate is open the holder may submit; a draining lease finishes its outstanding work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The leased pool node.
    pub node: NodeId,
    /// Who holds it.
    pub holder: HolderId,
    /// Ops submitted through it and not yet completed.
    pub outstanding: u32,
    /// Whether its gate is open (leased) rather than closed (draining).
    pub open: bool,
}

/// Who a reservation is for and a purpose tag chosen by the policy (e.g. which anticipated op).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Reservation {
    /// The only holder that may lease the reserved node.
    pub holder: HolderId,
    /// The policy's purpose tag; opaque to the pool.
    pub tag: u64,
}

/// The lease state of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "state")]
pub enum NodeState {
    /// No outstanding work and no commitment.
    Idle,
    /// Leased by `holder` with its gate open: the holder may submit.
    Leased {
        /// The lease holder.
        holder: HolderId,
        /// Ops submitted and not yet completed.
        outstanding: u32,
    },
    /// Gate closed: no new work; becomes idle (or reserved) when `outstanding` reaches zero.
    /// Always has `outstanding > 0`.
    Draining {
        /// The former lease holder.
        holder: HolderId,
        /// Ops submitted and not yet completed (> 0).
        outstanding: u32,
    },
    /// Held for an anticipated op: only `purpose.holder` may lease it.
    Reserved {
        /// Who it is for and why.
        purpose: Reservation,
    },
}

impl NodeState {
    /// `idle`, `leased`, `draining` or `reserved`.
    pub fn name(&self) -> &'static str {
        match self {
            NodeState::Idle => "idle",
            NodeState::Leased { .. } => "leased",
            NodeState::Draining { .. } => "draining",
            NodeState::Reserved { .. } => "reserved",
        }
    }

    /// Whether the node holds its units (leased, draining or reserved).
    pub fn is_active(&self) -> bool {
        !matches!(self, NodeState::Idle)
    }
}

/// What happened when a node finished draining: returned by [`Pool::complete`] and
/// [`Pool::close_gate`] so the dispatcher can react (wake the reservation's holder, etc.).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The node that finished draining and is now idle (or reserved, if it is in `reserved`).
    pub drained: NodeId,
    /// Its former lease holder.
    pub holder: HolderId,
    /// Pending reservations fulfilled in the same step: these targets are now `Reserved`.
    pub reserved: SmallVec<[(NodeId, Reservation); 1]>,
}

/// How a [`Pool`] finds the active nodes and pending targets a candidate's units touch.
///
/// Both answer every query identically (the state-machine property test runs them side by
/// side); they differ only in cost. The flat variant is the contrast of the paper's overhead
/// experiment ("conflicts are identified by hierarchy traversal rather than pairwise pCtx scans").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Conflicts {
    /// Two unions (active units, claimed units) kept incrementally: a test is two bitset
    /// intersections, whatever the number of active nodes (the default).
    #[default]
    Unions,
    /// A scan of every active node and every pending target, one intersection each (a flat
    /// pool: no structure over the nodes).
    Pairwise,
}

/// The lease state of every node of one device's pool. Plain data; the dispatcher owns it.
#[derive(Debug, Clone)]
pub struct Pool {
    hierarchy: Arc<Hierarchy>,
    conflicts: Conflicts,
    states: Vec<NodeState>,
    /// Union of the units of active nodes (pairwise disjoint, so difference removes one node).
    active: UnitSet,
    /// Active nodes, in activation order (at most one per leaf, since they are disjoint).
    active_list: Vec<NodeId>,
    /// Union of the targets of pending reservations (pairwise disjoint).
    claimed: UnitSet,
    /// Pending reservations: target and reservation, in request order.
    pending: Vec<(NodeId, Reservation)>,
}

impl Pool {
    /// Builds the hierarchy over `top`'s leaves; every node starts idle.
    pub fn build(top: &Topology) -> Pool {
        Pool::new(Arc::new(Hierarchy::build(top)))
    }

    /// An all-idle pool over an existing hierarchy.
    pub fn new(hierarchy: Arc<Hierarchy>) -> Pool {
        Pool::with_conflicts(hierarchy, Conflicts::Unions)
    }

    /// An all-idle pool over an existing hierarchy that finds conflicts as `conflicts` says.
    pub fn with_conflicts(hierarchy: Arc<Hierarchy>, conflicts: Conflicts) -> Pool {
        let n = hierarchy.len();
        Pool {
            hierarchy,
            conflicts,
            states: vec![NodeState::Idle; n],
            active: UnitSet::EMPTY,
            active_list: Vec::new(),
            claimed: UnitSet::EMPTY,
            pending: Vec::new(),
        }
    }

    // ---- structure -------------------------------------------------------------------------

    /// How this pool finds conflicts.
    pub fn conflicts(&self) -> Conflicts {
        self.conflicts
    }

    /// The immutable node structure.
    pub fn hierarchy(&self) -> &Arc<Hierarchy> {
        &self.hierarchy
    }

    /// All nodes, indexed by [`NodeId::index`].
    pub fn nodes(&self) -> &[Node] {
        self.hierarchy.nodes()
    }

    /// One node.
    ///
    /// # Panics
    /// If `id` is not a node of this pool.
    pub fn node(&self, id: NodeId) -> &Node {
        self.hierarchy.node(id)
    }

    /// The root (whole device).
    pub fn root(&self) -> NodeId {
        self.hierarchy.root()
    }

    /// Leaf nodes in topology order.
    pub fn leaves(&self) -> &[NodeId] {
        self.hierarchy.leaves()
    }

    /// Every node in ascending size (ties by id).
    pub fn nodes_by_size(&self) -> &[NodeId] {
        self.hierarchy.nodes_by_size()
    }

    // ---- state queries ---------------------------------------------------------------------

    /// A node's state.
    ///
    /// # Panics
    /// If `id` is not a node of this pool.
    pub fn state(&self, id: NodeId) -> &NodeState {
        &self.states[id.index()]
    }

    /// The lease on `id`, if it is leased or draining.
    pub fn lease_of(&self, id: NodeId) -> Option<Lease> {
        match *self.states.get(id.index())? {
            NodeState::Leased { holder, outstanding } => Some(Lease { node: id, holder, outstanding, open: true }),
            NodeState::Draining { holder, outstanding } => Some(Lease { node: id, holder, outstanding, open: false }),
            NodeState::Idle | NodeState::Reserved { .. } => None,
        }
    }

    /// Every lease now (leased and draining nodes).
    pub fn leases(&self) -> impl Iterator<Item = Lease> + '_ {
        self.active_nodes().iter().filter_map(|&id| self.lease_of(id))
    }

    /// Every node's state, indexed by [`NodeId::index`].
    pub fn states(&self) -> &[NodeState] {
        &self.states
    }

    /// Union of the units of all active (leased, draining, reserved) nodes.
    pub fn active_units(&self) -> UnitSet {
        self.active
    }

    /// Active nodes, in the order they became active.
    pub fn active_nodes(&self) -> &[NodeId] {
        &self.active_list
    }

    /// Union of the targets of pending reservations: no new lease or reservation may touch them.
    pub fn claimed_units(&self) -> UnitSet {
        self.claimed
    }

    /// Pending reservations (target, reservation), in request order.
    pub fn pending(&self) -> &[(NodeId, Reservation)] {
        &self.pending
    }

    /// The pending reservation whose target is `id`, if any.
    pub fn pending_for(&self, id: NodeId) -> Option<Reservation> {
        self.pending.iter().find(|(t, _)| *t == id).map(|(_, r)| *r)
    }

    /// Whether every node is idle and nothing is pending.
    pub fn is_quiescent(&self) -> bool {
        self.active_list.is_empty() && self.pending.is_empty()
    }

    /// Whether `holder` may lease (or keep using) `id` now: the node is idle and disjoint from
    /// every active node and every pending reservation's target, or already leased by `holder`
    /// with its gate open, or reserved for `holder`. O(1) with [`Conflicts::Unions`]: two bitset
    /// tests; one test per active node and pending target with [`Conflicts::Pairwise`].
    ///
    /// # Panics
    /// If `id` is not a node of this pool.
    pub fn is_eligible(&self, id: NodeId, holder: HolderId) -> bool {
        let i = id.index();
        match self.states[i] {
            NodeState::Idle => {
                let u = &self.hierarchy.nodes()[i].units;
                !self.touches_active(u) && !self.touches_claimed(u)
            }
            NodeState::Leased { holder: h, .. } => h == holder,
            NodeState::Reserved { purpose } => purpose.holder == holder,
            NodeState::Draining { .. } => false,
        }
    }

    /// Replaces `out` with the nodes of at least `min_units` units that `holder` may lease now
    /// ([`Pool::is_eligible`]), in ascending size. One pass over the nodes with an O(1) test each
    /// ([`Conflicts::Unions`]), or a scan of the active nodes and pending targets each
    /// ([`Conflicts::Pairwise`]).
    pub fn eligible(&self, holder: HolderId, min_units: usize, out: &mut Vec<NodeId>) {
        out.clear();
        let sizes = self.hierarchy.sizes();
        let by_size = self.hierarchy.nodes_by_size();
        let start = by_size.partition_point(|id| usize::from(sizes[id.index()]) < min_units);
        let blocked = self.active | self.claimed;
        let nodes = self.hierarchy.nodes();
        let pairwise = self.conflicts == Conflicts::Pairwise;
        for &id in &by_size[start..] {
            let i = id.index();
            let ok = match self.states[i] {
                NodeState::Idle if pairwise => {
                    !self.touches_active(&nodes[i].units) && !self.touches_claimed(&nodes[i].units)
                }
                NodeState::Idle => !nodes[i].units.intersects(&blocked),
                NodeState::Leased { holder: h, .. } => h == holder,
                NodeState::Reserved { purpose } => purpose.holder == holder,
                NodeState::Draining { .. } => false,
            };
            if ok {
                out.push(id);
            }
        }
    }

    /// Replaces `out` with the leased nodes (gate open, any holder) that share units with
    /// `target`, in id order: the gates a reclamation of `target` would close.
    ///
    /// # Panics
    /// If `target` is not a node of this pool.
    pub fn overlapping_leased(&self, target: NodeId, out: &mut Vec<NodeId>) {
        out.clear();
        let u = self.hierarchy.node(target).units;
        for &id in &self.active_list {
            if matches!(self.states[id.index()], NodeState::Leased { .. }) && self.units(id).intersects(&u) {
                out.push(id);
            }
        }
        out.sort_unstable();
    }

    // ---- transitions -----------------------------------------------------------------------

    /// Idle (and free) or reserved-for-`holder` -> leased with its gate open and nothing
    /// outstanding. Leasing a node `holder` already leases (gate open) is a no-op.
    pub fn lease(&mut self, id: NodeId, holder: HolderId) -> Result<(), PoolError> {
        let i = self.index(id)?;
        match self.states[i] {
            NodeState::Leased { holder: h, .. } if h == holder => Ok(()),
            NodeState::Leased { holder: owner, .. } => Err(PoolError::HeldByOther { node: id, holder, owner }),
            NodeState::Draining { .. } => Err(PoolError::GateClosed { node: id }),
            NodeState::Reserved { purpose } if purpose.holder == holder => {
                self.states[i] = NodeState::Leased { holder, outstanding: 0 };
                Ok(())
            }
            NodeState::Reserved { purpose } => {
                Err(PoolError::ReservedForOther { node: id, holder, reservation: purpose })
            }
            NodeState::Idle => {
                self.check_free(id)?;
                self.states[i] = NodeState::Leased { holder, outstanding: 0 };
                self.activate(id);
                Ok(())
            }
        }
    }

    /// Admits one op of `holder` through `id`'s open gate: outstanding += 1.
    pub fn begin_submit(&mut self, id: NodeId, holder: HolderId) -> Result<(), PoolError> {
        let i = self.index(id)?;
        match &mut self.states[i] {
            NodeState::Leased { holder: h, outstanding } if *h == holder => {
                *outstanding = outstanding.checked_add(1).ok_or(PoolError::TooManyOutstanding { node: id })?;
                Ok(())
            }
            NodeState::Leased { holder: owner, .. } => Err(PoolError::HeldByOther { node: id, holder, owner: *owner }),
            NodeState::Draining { .. } => Err(PoolError::GateClosed { node: id }),
            s @ (NodeState::Idle | NodeState::Reserved { .. }) => {
                Err(PoolError::NotLeased { node: id, state: s.name() })
            }
        }
    }

    /// One op submitted through `id` completed: outstanding -= 1. When that was the last op of a
    /// draining node, the node becomes idle and every pending reservation that now fits becomes
    /// reserved; the returned [`Transition`] says so. `Ok(None)`: only the counter changed.
    pub fn complete(&mut self, id: NodeId) -> Result<Option<Transition>, PoolError> {
        let i = self.index(id)?;
        let (holder, left) = match &mut self.states[i] {
            NodeState::Leased { outstanding, .. } => {
                *outstanding = outstanding.checked_sub(1).ok_or(PoolError::NothingOutstanding { node: id })?;
                return Ok(None);
            }
            NodeState::Draining { holder, outstanding } => {
                *outstanding = outstanding.checked_sub(1).ok_or(PoolError::NothingOutstanding { node: id })?;
                (*holder, *outstanding)
            }
            s @ (NodeState::Idle | NodeState::Reserved { .. }) => {
                return Err(PoolError::NotLeased { node: id, state: s.name() });
            }
        };
        Ok((left == 0).then(|| self.finish_drain(id, holder)))
    }

    /// Closes a leased node's gate: leased -> draining, or straight to idle when nothing is
    /// outstanding (then the [`Transition`] is returned, as from [`Pool::complete`]).
    pub fn close_gate(&mut self, id: NodeId) -> Result<Option<Transition>, PoolError> {
        let i = self.index(id)?;
        match self.states[i] {
            NodeState::Leased { holder, outstanding: 0 } => Ok(Some(self.finish_drain(id, holder))),
            NodeState::Leased { holder, outstanding } => {
                self.states[i] = NodeState::Draining { holder, outstanding };
                Ok(None)
            }
            NodeState::Draining { .. } => Err(PoolError::GateClosed { node: id }),
            s @ (NodeState::Idle | NodeState::Reserved { .. }) => {
                Err(PoolError::NotLeased { node: id, state: s.name() })
            }
        }
    }

    /// `holder` gives back a lease with nothing outstanding: leased -> idle.
    pub fn release(&mut self, id: NodeId, holder: HolderId) -> Result<(), PoolError> {
        let i = self.index(id)?;
        match self.states[i] {
            NodeState::Leased { holder: h, outstanding: 0 } if h == holder => {
                self.states[i] = NodeState::Idle;
                self.deactivate(id);
                // Leased nodes never overlap a pending target (reclaim_for closes them and lease
                // refuses claimed units), so no pending reservation can become satisfiable here.
                debug_assert!(self.pending.iter().all(|(t, _)| self.units(*t).intersects(&self.active)));
                Ok(())
            }
            NodeState::Leased { holder: h, outstanding } if h == holder => {
                Err(PoolError::WorkOutstanding { node: id, outstanding })
            }
            NodeState::Leased { holder: owner, .. } => Err(PoolError::HeldByOther { node: id, holder, owner }),
            NodeState::Draining { .. } => Err(PoolError::GateClosed { node: id }),
            s @ (NodeState::Idle | NodeState::Reserved { .. }) => {
                Err(PoolError::NotLeased { node: id, state: s.name() })
            }
        }
    }

    /// Idle node disjoint from every active node and pending target -> reserved for `r`.
    pub fn reserve(&mut self, id: NodeId, r: Reservation) -> Result<(), PoolError> {
        let i = self.index(id)?;
        if let NodeState::Reserved { purpose } = self.states[i] {
            return Err(PoolError::AlreadyReserved { node: id, reservation: purpose });
        }
        // A leased or draining node overlaps itself: check_free reports it as the blocker.
        self.check_free(id)?;
        self.states[i] = NodeState::Reserved { purpose: r };
        self.activate(id);
        Ok(())
    }

    /// Reserved -> idle; or, if `id` is the target of a pending reservation, cancels it (the
    /// gates it closed stay closed: those nodes drain to idle).
    pub fn unreserve(&mut self, id: NodeId) -> Result<(), PoolError> {
        let i = self.index(id)?;
        if let NodeState::Reserved { .. } = self.states[i] {
            self.states[i] = NodeState::Idle;
            self.deactivate(id);
            // Pending targets never overlap reserved nodes (reclaim_for refuses), so nothing
            // pending can become satisfiable here.
            return Ok(());
        }
        match self.pending.iter().position(|(t, _)| *t == id) {
            Some(p) => {
                self.pending.remove(p);
                self.claimed = self.claimed.difference(&self.units(id));
                Ok(())
            }
            None => Err(PoolError::NotReserved { node: id, state: self.states[i].name() }),
        }
    }

    /// Lookahead reclamation: closes the gates of every leased node overlapping `target` (of any
    /// holder, `r.holder` included; see [`crate::pool`]) and records a pending reservation of
    /// `target` for `r`. Gates closed on nodes with nothing outstanding make them idle at once.
    /// `target` becomes `Reserved` as soon as no active node overlaps it: possibly before this
    /// returns (check [`Pool::state`]), otherwise in the [`Pool::complete`] that drains its last
    /// overlapping node. Meanwhile its units are claimed: no new lease or reservation may use
    /// them. Returns the nodes whose gates were closed, in id order.
    ///
    /// Refused when `target` is reserved or already pending, overlaps another pending target, or
    /// overlaps a reserved node (unreserve that first: a reservation has no work to drain).
    pub fn reclaim_for(&mut self, target: NodeId, r: Reservation) -> Result<Vec<NodeId>, PoolError> {
        let i = self.index(target)?;
        if let NodeState::Reserved { purpose } = self.states[i] {
            return Err(PoolError::AlreadyReserved { node: target, reservation: purpose });
        }
        if let Some(reservation) = self.pending_for(target) {
            return Err(PoolError::AlreadyPending { node: target, reservation });
        }
        let u = self.units(target);
        if self.touches_claimed(&u) {
            return Err(PoolError::Claimed { node: target, target: self.claim_blocker(&u) });
        }
        if let Some(&b) = self
            .active_list
            .iter()
            .find(|&&b| matches!(self.states[b.index()], NodeState::Reserved { .. }) && self.units(b).intersects(&u))
        {
            return Err(PoolError::Conflict { node: target, blocker: b, blocker_state: "reserved" });
        }
        let mut closed: Vec<NodeId> = self
            .active_list
            .iter()
            .copied()
            .filter(|&b| matches!(self.states[b.index()], NodeState::Leased { .. }) && self.units(b).intersects(&u))
            .collect();
        closed.sort_unstable();
        for &b in &closed {
            match self.states[b.index()] {
                NodeState::Leased { outstanding: 0, .. } => {
                    self.states[b.index()] = NodeState::Idle;
                    self.deactivate(b);
                }
                NodeState::Leased { holder, outstanding } => {
                    self.states[b.index()] = NodeState::Draining { holder, outstanding };
                }
                _ => unreachable!("filtered to leased nodes"),
            }
        }
        self.pending.push((target, r));
        self.claimed |= u;
        self.settle_pending();
        Ok(closed)
    }

    // ---- internals -------------------------------------------------------------------------

    fn index(&self, id: NodeId) -> Result<usize, PoolError> {
        if self.hierarchy.contains(id) {
            Ok(id.index())
        } else {
            Err(PoolError::UnknownNode { node: id, count: self.hierarchy.len() })
        }
    }

    fn units(&self, id: NodeId) -> UnitSet {
        self.hierarchy.nodes()[id.index()].units
    }

    /// Ok when `id`'s units touch no active node and no pending target.
    fn check_free(&self, id: NodeId) -> Result<(), PoolError> {
        let u = self.units(id);
        if self.touches_active(&u) {
            let blocker = *self
                .active_list
                .iter()
                .find(|&&b| self.units(b).intersects(&u))
                .expect("active units are the union of the active nodes' units");
            return Err(PoolError::Conflict { node: id, blocker, blocker_state: self.states[blocker.index()].name() });
        }
        if self.touches_claimed(&u) {
            return Err(PoolError::Claimed { node: id, target: self.claim_blocker(&u) });
        }
        Ok(())
    }

    /// Whether `u` shares a unit with an active node.
    fn touches_active(&self, u: &UnitSet) -> bool {
        match self.conflicts {
            Conflicts::Unions => u.intersects(&self.active),
            Conflicts::Pairwise => self.active_list.iter().any(|&b| self.units(b).intersects(u)),
        }
    }

    /// Whether `u` shares a unit with a pending reservation's target.
    fn touches_claimed(&self, u: &UnitSet) -> bool {
        match self.conflicts {
            Conflicts::Unions => u.intersects(&self.claimed),
            Conflicts::Pairwise => self.pending.iter().any(|(t, _)| self.units(*t).intersects(u)),
        }
    }

    fn claim_blocker(&self, u: &UnitSet) -> NodeId {
        self.pending
            .iter()
            .find(|(t, _)| self.units(*t).intersects(u))
            .expect("claimed units are the union of the pending targets")
            .0
    }

    fn activate(&mut self, id: NodeId) {
        debug_assert!(self.units(id).is_disjoint(&self.active));
        self.active |= self.units(id);
        self.active_list.push(id);
    }

    fn deactivate(&mut self, id: NodeId) {
        self.active = self.active.difference(&self.units(id));
        let p = self.active_list.iter().position(|&a| a == id).expect("deactivating an active node");
        self.active_list.remove(p);
    }

    /// A draining node's last op completed (or its gate closed with nothing outstanding).
    fn finish_drain(&mut self, id: NodeId, holder: HolderId) -> Transition {
        self.states[id.index()] = NodeState::Idle;
        self.deactivate(id);
        Transition { drained: id, holder, reserved: self.settle_pending() }
    }

    /// Turns every pending reservation whose target no longer overlaps an active node into a
    /// reservation. Targets are disjoint, so fulfilling one never blocks another.
    fn settle_pending(&mut self) -> SmallVec<[(NodeId, Reservation); 1]> {
        let mut done = SmallVec::new();
        let mut k = 0;
        while k < self.pending.len() {
            let (t, r) = self.pending[k];
            let u = self.units(t);
            if self.touches_active(&u) {
                k += 1;
                continue;
            }
            self.pending.remove(k);
            self.claimed = self.claimed.difference(&u);
            self.states[t.index()] = NodeState::Reserved { purpose: r };
            self.activate(t);
            done.push((t, r));
        }
        done
    }
}
