//! The arbiter's state and its decisions, once for every arbiter.
//!
//! [`ArbiterState`] holds what a policy reads and what a decision changes: the pool's lease
//! state, the policy itself, the profiles, the registered clients (lease holders) and the
//! predicted drain time of every node lane. Its methods are the steps every arbiter takes:
//! maintenance and lookahead preparations validated against the pool, one Pick/Select proposal
//! at a time ([`ArbiterState::propose`], [`ArbiterState::propose_graph`]), a proposal admitted
//! under a lease ([`ArbiterState::admit`]), completions returned with the policy's feedback, idle
//! leases released, and a client's [`LeaseView`].
//!
//! Three drivers use it: the in-process dispatcher (the executor and the arbiter on one thread:
//! it hands the policy the ops' own descriptors and reads the lease state directly, which is the
//! lease view without a round trip), the daemon (one state per device, over every client's ready
//! records: `crate::daemon`), and [`super::InProcess`] (the record interface, [`super::Arbiter`]).
//! Each driver keeps only what it owns apart: its ready queue, its validation of a node against
//! the op (the executor can ask its partition; the daemon knows the op's size floor), its lanes.

use vitamin_hal::{KernelLaunch, UnitSet};

use super::LeaseView;
use crate::policy::{
    ClientInfo, ClusterRefusals, Completion, Curves, Hint, Policy, Preparation, ReadyGraphView, ReadyOpView,
};
use crate::pool::{HolderId, NodeId, NodeState, Pool, PoolError, Transition};
use crate::profile::Profiles;

/// The policy's read-only view of an [`ArbiterState`], borrowing its fields one by one, so that
/// the policy (another field) can be borrowed mutably beside it. With a third argument, over that
/// pool instead of the state's own (a client under a daemon: the mirror of its lease view).
macro_rules! sched {
    ($a:expr, $now:expr) => {
        $crate::arbiter::state::sched!($a, $now, &$a.pool)
    };
    ($a:expr, $now:expr, $pool:expr) => {
        $crate::policy::SchedState {
            pool: $pool,
            now_ns: $now,
            profiles: &$a.profiles,
            clients: &$a.clients,
            lane_busy_until: &$a.lane_busy_until,
            cluster_refused: &$a.cluster_refused,
        }
    };
}
pub(crate) use sched;

/// The lease state, the policy and what it reads. See the module documentation.
#[derive(Debug)]
pub struct ArbiterState<P: Policy> {
    pub(crate) pool: Pool,
    pub(crate) policy: P,
    pub(crate) profiles: Profiles,
    pub(crate) clients: Vec<ClientInfo>,
    /// Per node, per lane: predicted time its submitted work completes (profile estimates), ns.
    pub(crate) lane_busy_until: Vec<Vec<u64>>,
    /// Nodes that refused clients' cluster launches: never proposed for such a launch again.
    pub(crate) cluster_refused: ClusterRefusals,
    curves: Curves,
}

/// One Pick/Select step ([`ArbiterState::propose`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proposal {
    /// Nothing more this round: the queue is empty or the policy picked nothing.
    Done,
    /// The policy picked an index outside the queue (a policy bug: the round ends).
    Invalid,
    /// Ready entry `.0` was tried and the policy selected no node for it.
    Skip(usize),
    /// Ready entry `.0` proposed on node `.1` (not admitted yet).
    Bind(usize, NodeId),
}

/// Why a proposal was not admitted ([`ArbiterState::admit`]).
#[derive(Debug)]
pub enum Refusal {
    /// Not a node of the pool, not eligible for the client, or smaller than the op's floor.
    Ineligible,
    /// The pool refused the lease.
    Lease(PoolError),
    /// The lease's gate is closed (draining or reclaimed).
    Gate(PoolError),
}

/// Preparations applied and rejected ([`ArbiterState::apply`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// Applied to the pool.
    pub applied: u64,
    /// Refused by the pool (counted, never applied).
    pub rejected: u64,
}

impl<P: Policy> ArbiterState<P> {
    /// The state of `pool` under `policy`, `lanes_per_node` lanes per node, no clients.
    pub fn new(pool: Pool, policy: P, profiles: Profiles, lanes_per_node: usize) -> Self {
        let n = pool.nodes().len();
        ArbiterState {
            pool,
            policy,
            profiles,
            clients: Vec::new(),
            lane_busy_until: vec![vec![0; lanes_per_node.max(1)]; n],
            cluster_refused: ClusterRefusals::new(),
            curves: Curves::default(),
        }
    }

    /// The pool, read-only.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Replaces the policy (its leases and rounds carry no state of the old one's).
    pub fn replace_policy(&mut self, policy: P) {
        self.policy = policy;
    }

    /// The registered clients.
    pub fn clients(&self) -> &[ClientInfo] {
        &self.clients
    }

    /// Registers a client (one lease holder).
    pub fn add_client(&mut self, info: ClientInfo) {
        self.clients.push(info);
    }

    /// Forgets client `holder` (its leases are the caller's to free first).
    pub fn remove_client(&mut self, holder: HolderId) {
        self.clients.retain(|c| c.holder != holder);
        self.cluster_refused.remove(holder);
    }

    /// Records that `node` refused a cluster launch of `holder` (see [`ClusterRefusals`]): from
    /// now on no node within it is proposed for that client's cluster launches. Returns whether
    /// that is new.
    pub fn note_cluster_refused(&mut self, holder: HolderId, node: NodeId) -> bool {
        if !self.pool.hierarchy().contains(node) {
            return false;
        }
        let device = self.pool.node(self.pool.root()).units;
        self.cluster_refused.record(holder, self.pool.node(node).units, &device)
    }

    /// The unit sets that refused `holder`'s cluster launches.
    pub fn cluster_refused(&self, holder: HolderId) -> &[UnitSet] {
        self.cluster_refused.of(holder)
    }

    /// Client `holder`'s entry, to update its deadline.
    pub fn client_mut(&mut self, holder: HolderId) -> Option<&mut ClientInfo> {
        self.clients.iter_mut().find(|c| c.holder == holder)
    }

    /// Applies preparations that the pool accepts; the rest are counted and dropped.
    fn apply(&mut self, plan: Vec<Preparation>) -> Applied {
        let mut a = Applied::default();
        for p in plan {
            let r = match &p {
                Preparation::Reserve(n, r) => self.pool.reserve(*n, *r),
                Preparation::Reclaim(n, r) => self.pool.reclaim_for(*n, *r).map(|_| ()),
                Preparation::Unreserve(n) => self.pool.unreserve(*n),
                Preparation::Close(n) => self.pool.close_gate(*n).map(|_| ()),
            };
            match r {
                Ok(()) => a.applied += 1,
                Err(e) => {
                    a.rejected += 1;
                    tracing::debug!(?p, error = %e, "preparation rejected");
                }
            }
        }
        a
    }

    /// The policy's maintenance at `now_ns` ([`Policy::maintain`]), applied.
    pub fn maintain(&mut self, now_ns: u64) -> Applied {
        let mut plan = Vec::new();
        self.policy.maintain(&sched!(self, now_ns), &mut plan);
        self.apply(plan)
    }

    /// Lookahead hints at `now_ns` ([`Policy::prepare`]), applied.
    pub fn prepare(&mut self, hints: &[Hint], now_ns: u64) -> Applied {
        let mut plan = Vec::new();
        {
            let state = sched!(self, now_ns);
            for h in hints {
                self.policy.prepare(h, &state, &mut plan);
            }
        }
        self.apply(plan)
    }

    /// Releases every lease with nothing outstanding for which `release(node)` says so (the
    /// daemon lets a lease linger a while; in-process every idle lease goes).
    pub fn release_idle(&mut self, mut release: impl FnMut(NodeId) -> bool) {
        let idle: smallvec::SmallVec<[(NodeId, HolderId); 8]> = self
            .pool
            .active_nodes()
            .iter()
            .filter_map(|&n| match *self.pool.state(n) {
                NodeState::Leased { holder, outstanding: 0 } => Some((n, holder)),
                _ => None,
            })
            .collect();
        for (n, holder) in idle {
            if release(n) {
                if let Err(e) = self.pool.release(n, holder) {
                    tracing::warn!(node = %n, error = %e, "releasing an idle lease failed");
                }
            }
        }
    }

    /// Starts a round over `queue` ([`Policy::begin_round`]).
    pub fn begin_round(&mut self, queue: &[ReadyOpView<'_>], now_ns: u64) {
        self.policy.begin_round(queue, &sched!(self, now_ns));
    }

    /// One Pick/Select step over the ready kernels `views` (each with its index in the caller's
    /// queue): the policy picks one, and selects a node among those eligible for its client, at
    /// least its floor (`min_units`) and kept by `filter(index, nodes)` (the executor drops the
    /// nodes that do not run the op unchanged; called once per pick).
    pub fn propose(
        &mut self,
        views: &[(usize, ReadyOpView<'_>)],
        now_ns: u64,
        mut filter: impl FnMut(usize, &mut Vec<NodeId>),
        eligible: &mut Vec<NodeId>,
    ) -> Proposal {
        if views.is_empty() {
            return Proposal::Done;
        }
        let queue: Vec<ReadyOpView<'_>> = views.iter().map(|x| x.1).collect();
        let state = sched!(self, now_ns);
        let Some(pick) = self.policy.pick(&queue, &state) else { return Proposal::Done };
        let Some(&(idx, view)) = views.get(pick) else {
            tracing::warn!(pick, "policy picked outside the queue");
            return Proposal::Invalid;
        };
        self.pool.eligible(view.client, view.min_units, eligible);
        if view.kernel.attributes().cluster().is_some() && !self.cluster_refused.of(view.client).is_empty() {
            let (pool, refused) = (&self.pool, &self.cluster_refused);
            eligible.retain(|&n| !refused.refuses(view.client, &pool.node(n).units));
        }
        filter(idx, eligible);
        match self.policy.select(&view, eligible, &state) {
            Some(node) => Proposal::Bind(idx, node),
            None => Proposal::Skip(idx),
        }
    }

    /// The node the policy selects for a ready graph launch, among those eligible for its client,
    /// at least its floor and, by `fits`, running it as bound.
    pub fn propose_graph(
        &mut self,
        view: &ReadyGraphView<'_>,
        now_ns: u64,
        fits: impl FnMut(&NodeId) -> bool,
        eligible: &mut Vec<NodeId>,
    ) -> Option<NodeId> {
        self.pool.eligible(view.client, view.min_units, eligible);
        eligible.retain(fits);
        self.policy.select_graph(view, eligible, &sched!(self, now_ns))
    }

    /// The node a lone fresh op would take without a round ([`Policy::solo_node`]).
    pub fn solo_node(&mut self, view: &ReadyOpView<'_>, now_ns: u64) -> Option<NodeId> {
        self.policy.solo_node(view, &sched!(self, now_ns))
    }

    /// Whether the policy lets `view` follow its predecessors on `node` ([`Policy::continue_on_lane`]).
    pub fn continue_on_lane(&mut self, view: &ReadyOpView<'_>, node: NodeId, now_ns: u64) -> bool {
        self.policy.continue_on_lane(view, node, &sched!(self, now_ns))
    }

    /// Whether the policy lets a graph launch of `holder` follow its predecessors on `node`
    /// ([`Policy::continue_graph`]).
    pub fn continue_graph(&mut self, holder: HolderId, node: NodeId, now_ns: u64) -> bool {
        self.policy.continue_graph(holder, node, &sched!(self, now_ns))
    }

    /// Whether `holder` leases `node` (gate open or not yet closed: `Leased`).
    pub fn holds(&self, node: NodeId, holder: HolderId) -> bool {
        matches!(self.pool.state(node), NodeState::Leased { holder: h, .. } if *h == holder)
    }

    /// Admits a proposal: `node` must be a pool node eligible for `holder` with at least
    /// `min_units`; the lease is opened or reused and one op counted outstanding on it.
    pub fn admit(&mut self, node: NodeId, holder: HolderId, min_units: usize) -> Result<(), Refusal> {
        let fits = node.index() < self.pool.nodes().len()
            && self.pool.is_eligible(node, holder)
            && self.pool.node(node).size() >= min_units;
        if !fits {
            return Err(Refusal::Ineligible);
        }
        if !self.holds(node, holder) {
            self.pool.lease(node, holder).map_err(Refusal::Lease)?;
        }
        self.pool.begin_submit(node, holder).map_err(Refusal::Gate)
    }

    /// Counts one op outstanding on `holder`'s open lease of `node` (a continued op).
    pub fn begin_submit(&mut self, node: NodeId, holder: HolderId) -> Result<(), PoolError> {
        self.pool.begin_submit(node, holder)
    }

    /// Returns one op's count on `node` (completed, or its submission failed), with the
    /// lease's transition if that was its last op.
    pub fn complete(&mut self, node: NodeId) -> Result<Option<Transition>, PoolError> {
        self.pool.complete(node)
    }

    /// The policy's feedback on a completed kernel ([`Policy::on_complete`]).
    pub fn on_complete(&mut self, done: &Completion<'_>, now_ns: u64) {
        self.policy.on_complete(done, &sched!(self, now_ns));
    }

    /// The policy's feedback on a client left with nothing outstanding ([`Policy::on_idle`]).
    pub fn on_idle(&mut self, holder: HolderId, busy_since_ns: u64, now_ns: u64) {
        self.policy.on_idle(holder, busy_since_ns, &sched!(self, now_ns));
    }

    /// The policy's feedback on one completed graph launch's run time ([`Policy::on_graph_time`]).
    pub fn on_graph_time(&mut self, holder: HolderId, node: NodeId, started_ns: u64, completed_ns: u64, now_ns: u64) {
        self.policy.on_graph_time(holder, node, started_ns, completed_ns, &sched!(self, now_ns));
    }

    /// Adds the profile estimate of `kernel` (`None`: no estimate, a graph) on `node` to the
    /// predicted drain time of its `lane`, submitted at `now_ns`.
    pub fn note_submitted(&mut self, node: NodeId, lane: usize, kernel: Option<&KernelLaunch>, now_ns: u64) {
        let size = self.pool.node(node).size();
        let est = kernel.map_or(0.0, |k| self.curves.time(k, size, &self.pool, &self.profiles)) as u64;
        if let Some(busy) = self.lane_busy_until.get_mut(node.index()).and_then(|l| l.get_mut(lane)) {
            *busy = (*busy).max(now_ns) + est;
        }
    }

    /// Marks `lane` of `node` drained at `now_ns` (its last op completed).
    pub fn note_lane_drained(&mut self, node: NodeId, lane: usize, now_ns: u64) {
        if let Some(busy) = self.lane_busy_until.get_mut(node.index()).and_then(|l| l.get_mut(lane)) {
            *busy = now_ns;
        }
    }

    /// What `holder` leases: open gates (continuation stays local) and draining ones.
    pub fn lease_view(&self, holder: HolderId) -> LeaseView {
        let mut v = LeaseView::default();
        for lease in self.pool.leases().filter(|l| l.holder == holder) {
            if lease.open {
                v.held.insert(lease.node);
            } else {
                v.draining.insert(lease.node);
            }
        }
        v
    }
}
