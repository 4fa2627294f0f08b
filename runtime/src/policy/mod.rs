//! Scheduling policies: **Pick** (which ready op next, or defer), **Select** (which eligible pool
//! node for it), **Prepare** (what to reserve or drain for a lookahead hint).
//!
//! ## Writing a policy
//! Implement [`Policy`]. The dispatcher calls, every scheduling round:
//! 1. [`Policy::maintain`] and, for each lookahead [`Hint`], [`Policy::prepare`]: push
//!    [`Preparation`]s (reserve an idle node, reclaim a target by closing the gates of overlapping
//!    leases, drop a reservation). The dispatcher validates each against the pool and applies it.
//! 2. [`Policy::begin_round`] with the ready queue, then repeatedly [`Policy::pick`] (an index
//!    into the queue, or `None` to defer the rest of the round) and [`Policy::select`] (a node from
//!    the eligible list, or `None` to defer that op).
//! 3. After the kernels, [`Policy::select_graph`] for each ready **graph launch** (oldest first): a
//!    node from the eligible list, or `None` to defer it.
//! 4. [`Policy::on_complete`] for each completed kernel (measured times: feedback for deadlines),
//!    [`Policy::on_graph_time`] for every completed graph launch, [`Policy::on_idle`] when a client's work ends.
//!
//! A policy sees read-only state ([`SchedState`]: the pool with its leases and reservations,
//! profiles, the clients and the clock) and can neither mutate the pool nor touch a descriptor:
//! every proposal is validated by the dispatcher (node still eligible, descriptor executable
//! unchanged there, gate open), and a rejected proposal only leaves the op ready. Only ops that
//! occupy units reach policies: kernels through Pick/Select, graph launches through
//! [`Policy::select_graph`]; copies, fills, host functions and markers are placed by the
//! dispatcher itself.
//!
//! ## Graph launches
//! A graph launch is **one op bound as a whole to one node**: every kernel of the graph runs on
//! that node's units, in the order the graph itself defines. vitamin cannot see inside an
//! executable graph (its kernels, their shapes, their dependencies), so a graph has no profile and
//! no launch configuration; policies choose its node from the client and the pool alone. What each
//! shipped policy does, and why:
//! - **default** ([`Policy::select_graph`]'s provided body, used by Throughput-Oriented): the
//!   widest eligible node. A graph usually replays a whole step of many kernels, and with no profile
//!   to size it by, the most units available now is the choice that cannot make it slower.
//!   Throughput-Oriented binds graphs after the round's kernels, so MinBind still gives every ready
//!   kernel its minimum node first; a client whose graph finds no eligible node counts as waiting
//!   (its fairness reclaim then frees a leaf for it). Throughput-Oriented does not keep a graph
//!   on a sliver of the device (under a quarter) beside clients that hold more than half: it
//!   neither continues nor binds it there while a fair half can be reclaimed
//!   ([`Policy::continue_graph`]).
//! - **TPOT-First**: a latency-critical client's graph (a captured decode step) takes its prepared
//!   wider node, else its standing reservation, else the widest eligible node; best-effort graphs
//!   follow Throughput-Oriented.
//! - **Exclusive**: the root (whole device), as for kernels.
//! - **Static**: the client's own slice, as for kernels (graphs have no co-residency constraint, so
//!   no fallback elsewhere is needed).
//! - **Chaos**: a uniformly random eligible node, so the determinism checks bind graph replays to
//!   many different partitions.

mod chaos;
mod curves;
mod exclusive;
mod static_;
#[cfg(test)]
mod testkit;
mod throughput;
mod tpot;

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use vitamin_hal::{GraphLaunch, KernelLaunch, OpDesc, UnitSet};

pub use chaos::Chaos;
pub use curves::Curves;
pub use exclusive::Exclusive;
pub use static_::Static;
pub use throughput::ThroughputOriented;
pub use tpot::TpotFirst;

use crate::pool::{HolderId, NodeId, Pool, Reservation};
use crate::profile::Profiles;
use crate::vctx::OpId;

/// How policies treat a client's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientClass {
    /// Throughput work (training, batch jobs).
    BestEffort,
    /// Latency-critical work (inference, decode). `tpot_target_ns`: per-step deadline budget.
    LatencyCritical {
        /// Target time per output token (per decode step), ns.
        tpot_target_ns: u64,
    },
}

/// A registered client, as policies see it.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    /// Lease holder id.
    pub holder: HolderId,
    /// Display name.
    pub name: String,
    /// Class.
    pub class: ClientClass,
    /// Current step deadline (from advice or the TPOT tracker), absolute ns.
    pub deadline_ns: Option<u64>,
}

/// One ready kernel, as policies see it.
#[derive(Debug, Clone, Copy)]
pub struct ReadyOpView<'a> {
    /// Client (lease holder).
    pub client: HolderId,
    /// Op id within the client's vCtx.
    pub op: OpId,
    /// The launch (read-only).
    pub kernel: &'a KernelLaunch,
    /// When it became ready, ns (backend clock).
    pub ready_since_ns: u64,
    /// Global arrival order (smaller = older).
    pub seq: u64,
    /// Deadline of the step it belongs to, if any.
    pub deadline_ns: Option<u64>,
    /// Smallest node size (units) the launch runs on unchanged; 0: any node. Set where the caller
    /// knows it (a daemon's ready record: cooperative and cluster launches, raised after a node
    /// refused the launch); the `eligible` list handed to [`Policy::select`] already honours it.
    pub min_units: usize,
}

/// One ready graph launch, as [`Policy::select_graph`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct ReadyGraphView<'a> {
    /// Client (lease holder).
    pub client: HolderId,
    /// Op id within the client's vCtx.
    pub op: OpId,
    /// The launch (read-only): the executable graph's handle and name.
    pub graph: &'a GraphLaunch,
    /// When it became ready, ns (backend clock).
    pub ready_since_ns: u64,
    /// Global arrival order (smaller = older).
    pub seq: u64,
    /// Deadline of the step it belongs to, if any.
    pub deadline_ns: Option<u64>,
    /// Smallest node size (units) that runs the graph as bound (on CUDA the whole device); 0: any
    /// node or unknown. As [`ReadyOpView::min_units`].
    pub min_units: usize,
}

/// Read-only scheduling state handed to policies.
#[derive(Debug, Clone, Copy)]
pub struct SchedState<'a> {
    /// The pool: nodes, states, leases, reservations.
    pub pool: &'a Pool,
    /// Now, ns (backend clock).
    pub now_ns: u64,
    /// Execution-time profiles.
    pub profiles: &'a Profiles,
    /// Registered clients.
    pub clients: &'a [ClientInfo],
    /// Per node, per lane: predicted time its submitted work completes (profile estimates), ns.
    pub lane_busy_until: &'a [Vec<u64>],
    /// Unit sets that refused clients' thread-block-cluster launches.
    pub cluster_refused: &'a ClusterRefusals,
}

/// Per client, the unit sets of nodes that refused one of its thread-block-cluster launches: the
/// launch could not be placed unchanged there (the driver places no cluster of its shape on those
/// SMs). Node shape, not size, decides: on the H100 ResNet-50's cluster launches ran on SM 0-7 and
/// were refused on SM 120-131 (docs/results/eval.md, mixed-graph run 16). A set of units places no
/// more clusters than a set holding it, so a node whose units lie within a refusing set is taken
/// to refuse too; the sets kept are the maximal ones. The whole device is never recorded: what it
/// refuses, nothing runs, and that launch is the executor's to fail.
#[derive(Debug, Clone, Default)]
pub struct ClusterRefusals(Vec<(HolderId, Vec<UnitSet>)>);

/// No refusals (states built without an arbiter).
pub static NO_CLUSTER_REFUSALS: ClusterRefusals = ClusterRefusals::new();

impl ClusterRefusals {
    /// None recorded.
    pub const fn new() -> Self {
        ClusterRefusals(Vec::new())
    }

    /// Records that `units` refused a cluster launch of `client` (ignored for the whole `device`).
    /// Returns whether that is new: not within a set already recorded.
    pub fn record(&mut self, client: HolderId, units: UnitSet, device: &UnitSet) -> bool {
        if units.is_empty() || device.is_subset(&units) {
            return false;
        }
        let i = match self.0.iter().position(|(c, _)| *c == client) {
            Some(i) => i,
            None => {
                self.0.push((client, Vec::new()));
                self.0.len() - 1
            }
        };
        let sets = &mut self.0[i].1;
        if sets.iter().any(|s| units.is_subset(s)) {
            return false;
        }
        sets.retain(|s| !s.is_subset(&units));
        sets.push(units);
        true
    }

    /// Whether a node of `units` is known to refuse `client`'s cluster launches.
    pub fn refuses(&self, client: HolderId, units: &UnitSet) -> bool {
        self.of(client).iter().any(|s| units.is_subset(s))
    }

    /// The maximal refusing sets of `client`.
    pub fn of(&self, client: HolderId) -> &[UnitSet] {
        self.0.iter().find(|(c, _)| *c == client).map_or(&[], |(_, s)| s.as_slice())
    }

    /// Forgets `client` (it left).
    pub fn remove(&mut self, client: HolderId) {
        self.0.retain(|(c, _)| *c != client);
    }
}

impl SchedState<'_> {
    /// Predicted time node `n`'s submitted work completes (now if idle).
    pub fn busy_until(&self, n: NodeId) -> u64 {
        self.lane_busy_until.get(n.0 as usize).and_then(|l| l.iter().max().copied()).unwrap_or(0).max(self.now_ns)
    }

    /// The client record of a holder.
    pub fn client(&self, h: HolderId) -> Option<&ClientInfo> {
        self.clients.iter().find(|c| c.holder == h)
    }
    /// Size of the smallest pool node.
    pub fn min_units(&self) -> usize {
        self.pool.nodes_by_size().first().map_or(1, |&n| self.pool.node(n).size())
    }
}

/// A lookahead hint: an op expected to become ready soon.
#[derive(Debug, Clone)]
pub struct Hint {
    /// Client.
    pub client: HolderId,
    /// The anticipated op, if recorded already (a decode blocked behind a copy).
    pub op: Option<Arc<OpDesc>>,
    /// Units it will want, if advised.
    pub demand_units: Option<usize>,
    /// When it is expected to become ready, ns.
    pub ready_at_ns: Option<u64>,
    /// Its deadline, ns.
    pub deadline_ns: Option<u64>,
}

/// A preparation step proposed by [`Policy::prepare`] / [`Policy::maintain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preparation {
    /// Reserve an idle, non-conflicting node.
    Reserve(NodeId, Reservation),
    /// Close the gates of leases overlapping `target` and reserve it once they drain.
    Reclaim(NodeId, Reservation),
    /// Drop a reservation.
    Unreserve(NodeId),
    /// Close the gate of a lease: its holder continues nothing more there, and the node goes
    /// idle once its outstanding ops complete.
    Close(NodeId),
}

/// A completed kernel, reported to [`Policy::on_complete`].
#[derive(Debug, Clone, Copy)]
pub struct Completion<'a> {
    /// Client.
    pub client: HolderId,
    /// The launch.
    pub kernel: &'a KernelLaunch,
    /// Node it ran on.
    pub node: NodeId,
    /// Submission time, ns.
    pub submitted_ns: u64,
    /// Completion observed, ns.
    pub completed_ns: u64,
}

/// Scheduling policy: see the module documentation.
pub trait Policy: Send {
    /// Short name (`throughput`, `tpot`, ...).
    fn name(&self) -> &'static str;

    /// Standing preparations (e.g. a reservation kept for a latency-critical client).
    fn maintain(&mut self, _state: &SchedState<'_>, _plan: &mut Vec<Preparation>) {}

    /// Preparations for a lookahead hint.
    fn prepare(&mut self, _hint: &Hint, _state: &SchedState<'_>, _plan: &mut Vec<Preparation>) {}

    /// Called once per round before the first pick, with the whole ready queue.
    fn begin_round(&mut self, _queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) {}

    /// Index of the next op to dispatch from `queue` (ops not yet tried this round), or `None`
    /// to defer all of them until the next round.
    fn pick(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) -> Option<usize>;

    /// A node for `op` among `eligible` (non-conflicting for its client), or `None` to defer it.
    fn select(&mut self, op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId>;

    /// Whether `op` may be bound early to the lane its pending predecessors occupy on `node`
    /// (lane continuation), instead of waiting to be rebound (possibly wider) once ready.
    fn continue_on_lane(&mut self, _op: &ReadyOpView<'_>, _node: NodeId, _state: &SchedState<'_>) -> bool {
        true
    }

    /// Whether [`Policy::continue_on_lease`] decides from the pool's lease states alone (not from
    /// state only this policy's own rounds build), so a client under a daemon can ask it over a
    /// mirror of the daemon's lease view. Default: no (such a client then continues on every
    /// open lease).
    fn continues_from_leases(&self) -> bool {
        false
    }

    /// Whether, under a daemon with this policy, a launch that only the whole device runs
    /// unchanged (a cluster or cooperative launch no smaller node holds) is placed on the
    /// service partition beside the other clients' leases, as under MPS, instead of draining
    /// every other client for it. Default: no (isolation first).
    fn shares_whole_device(&self) -> bool {
        false
    }

    /// Whether, under a daemon with this policy, a best-effort client holds back the launches it
    /// would share on the whole device ([`Policy::shares_whole_device`]) while a latency-critical
    /// client of the same device has work outstanding: such a launch runs on every unit, the
    /// latency client's node included. The daemon publishes the latency clients' busy periods in
    /// each client's region; a held launch goes once none is busy, or after the dispatcher's
    /// `guard_hold_max` (DispatchConfig) at the latest. Default: no.
    fn guards_latency_clients(&self) -> bool {
        false
    }

    /// [`Policy::continue_on_lane`] for a client under a daemon, asked over a mirror of the
    /// daemon's lease view (this client's leases, and the nodes other clients hold as leases of
    /// another holder). A refusal there costs more than in-process: the op waits for its
    /// predecessors' completion and a daemon round trip. Default: as `continue_on_lane`.
    fn continue_on_lease(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        self.continue_on_lane(op, node, state)
    }

    /// Whether a graph launch of `client` may follow its predecessors on `node`, a lease the
    /// client holds (lane continuation, in-process or under a daemon over the mirror of its lease
    /// view, where `client` is the mirror's own holder). A refused graph becomes ready once its
    /// predecessors complete and is placed by [`Policy::select_graph`]. Default: yes.
    fn continue_graph(&mut self, _client: HolderId, _node: NodeId, _state: &SchedState<'_>) -> bool {
        true
    }

    /// A node for the ready graph launch `op` among `eligible` (non-conflicting for its client), or
    /// `None` to defer it to a later round. The whole graph runs on the chosen node (see the module
    /// docs). Default: the widest eligible node.
    fn select_graph(
        &mut self,
        _op: &ReadyGraphView<'_>,
        eligible: &[NodeId],
        state: &SchedState<'_>,
    ) -> Option<NodeId> {
        widest(eligible, state.pool)
    }

    /// Feedback: a kernel completed.
    fn on_complete(&mut self, _c: &Completion<'_>, _state: &SchedState<'_>) {}

    /// Feedback: `client` has nothing outstanding any more (`state.now_ns`); its work had been
    /// outstanding without a break since `busy_since_ns`. A client that synchronizes after each
    /// step (a decode loop) reports each step's time this way, kernels continued on its own
    /// leases included, which [`on_complete`](Self::on_complete) does not see under a daemon.
    /// Reported by the dispatcher, the daemon and [`crate::arbiter::InProcess`].
    fn on_idle(&mut self, _client: HolderId, _busy_since_ns: u64, _state: &SchedState<'_>) {}

    /// Feedback: a CUDA graph launch of `client` (bound or continued) ran on `node` from
    /// `started_ns` (its submission, or the completion of the op before it on its lane if later)
    /// to `completed_ns`. A graph replays a whole step (a decode step captured once), so its time
    /// is the step's, which busy periods ([`on_idle`](Self::on_idle)) need not show under a
    /// daemon. Reported by the dispatcher, the daemon and [`crate::arbiter::InProcess`].
    fn on_graph_time(
        &mut self,
        _client: HolderId,
        _node: NodeId,
        _started_ns: u64,
        _completed_ns: u64,
        _state: &SchedState<'_>,
    ) {
    }

    /// What the policy keeps for `client`, for status reports: its standing node, if it has one,
    /// and its size floor in units (0: none). Default: neither.
    fn standing(&self, _client: HolderId) -> (Option<NodeId>, usize) {
        (None, 0)
    }

    /// A node for a lone ready `op` that the policy already knows without a round: exactly what
    /// [`begin_round`](Self::begin_round) + [`pick`](Self::pick) + [`select`](Self::select)
    /// would return for a queue of just `op` (the fast path of
    /// [`Dispatcher::submit_fresh`](crate::dispatch::Dispatcher::submit_fresh)). Default: none.
    fn solo_node(&mut self, _op: &ReadyOpView<'_>, _state: &SchedState<'_>) -> Option<NodeId> {
        None
    }
}

/// Oldest op (smallest `seq`) in the queue.
pub fn oldest(queue: &[ReadyOpView<'_>]) -> Option<usize> {
    queue.iter().enumerate().min_by_key(|(_, o)| o.seq).map(|(i, _)| i)
}

/// The smallest eligible node (ties: lowest id).
pub fn smallest(eligible: &[NodeId], pool: &Pool) -> Option<NodeId> {
    eligible.iter().copied().min_by_key(|&n| (pool.node(n).size(), n))
}

/// The widest eligible node (ties: lowest id).
pub fn widest(eligible: &[NodeId], pool: &Pool) -> Option<NodeId> {
    eligible.iter().copied().max_by_key(|&n| (pool.node(n).size(), std::cmp::Reverse(n)))
}

/// The policies vitamin ships, selectable by name (`VITAMIN_POLICY`, `--policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyKind {
    /// [`ThroughputOriented`] (default).
    Throughput,
    /// [`TpotFirst`].
    Tpot,
    /// [`Exclusive`]: whole device, time-sharing.
    Exclusive,
    /// [`Static`]: a fixed partition per client.
    Static,
    /// [`Chaos`]: a uniformly random eligible node per op.
    Chaos,
}

impl PolicyKind {
    /// All kinds, in display order.
    pub const ALL: [PolicyKind; 5] =
        [PolicyKind::Throughput, PolicyKind::Tpot, PolicyKind::Static, PolicyKind::Exclusive, PolicyKind::Chaos];

    /// Name as accepted by [`std::str::FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Throughput => "throughput",
            PolicyKind::Tpot => "tpot",
            PolicyKind::Exclusive => "exclusive",
            PolicyKind::Static => "static",
            PolicyKind::Chaos => "chaos",
        }
    }

    /// Builds the policy (`seed` is used by Chaos).
    pub fn build(self, seed: u64) -> AnyPolicy {
        match self {
            PolicyKind::Throughput => AnyPolicy::Throughput(ThroughputOriented::default()),
            PolicyKind::Tpot => AnyPolicy::Tpot(Box::default()),
            PolicyKind::Exclusive => AnyPolicy::Exclusive(Exclusive::default()),
            PolicyKind::Static => AnyPolicy::Static(Static::default()),
            PolicyKind::Chaos => AnyPolicy::Chaos(Chaos::new(seed)),
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown policy {s:?}: expected one of throughput, tpot, static, exclusive, chaos"))
    }
}

/// One of the shipped policies (static dispatch over a closed set).
#[derive(Debug)]
pub enum AnyPolicy {
    /// Throughput-Oriented.
    Throughput(ThroughputOriented),
    /// TPOT-First.
    Tpot(Box<TpotFirst>),
    /// Exclusive.
    Exclusive(Exclusive),
    /// Static.
    Static(Static),
    /// Chaos.
    Chaos(Chaos),
}

macro_rules! each {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyPolicy::Throughput($p) => $e,
            AnyPolicy::Tpot($p) => $e,
            AnyPolicy::Exclusive($p) => $e,
            AnyPolicy::Static($p) => $e,
            AnyPolicy::Chaos($p) => $e,
        }
    };
}

impl Policy for AnyPolicy {
    fn name(&self) -> &'static str {
        each!(self, p => p.name())
    }
    fn maintain(&mut self, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        each!(self, p => p.maintain(state, plan))
    }
    fn prepare(&mut self, hint: &Hint, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        each!(self, p => p.prepare(hint, state, plan))
    }
    fn begin_round(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) {
        each!(self, p => p.begin_round(queue, state))
    }
    fn pick(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) -> Option<usize> {
        each!(self, p => p.pick(queue, state))
    }
    fn select(&mut self, op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        each!(self, p => p.select(op, eligible, state))
    }
    fn continue_on_lane(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        each!(self, p => p.continue_on_lane(op, node, state))
    }
    fn continues_from_leases(&self) -> bool {
        each!(self, p => p.continues_from_leases())
    }
    fn continue_on_lease(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        each!(self, p => p.continue_on_lease(op, node, state))
    }
    fn shares_whole_device(&self) -> bool {
        each!(self, p => p.shares_whole_device())
    }
    fn guards_latency_clients(&self) -> bool {
        each!(self, p => p.guards_latency_clients())
    }
    fn select_graph(&mut self, op: &ReadyGraphView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        each!(self, p => p.select_graph(op, eligible, state))
    }
    fn continue_graph(&mut self, client: HolderId, node: NodeId, state: &SchedState<'_>) -> bool {
        each!(self, p => p.continue_graph(client, node, state))
    }
    fn on_complete(&mut self, c: &Completion<'_>, state: &SchedState<'_>) {
        each!(self, p => p.on_complete(c, state))
    }
    fn on_idle(&mut self, client: HolderId, busy_since_ns: u64, state: &SchedState<'_>) {
        each!(self, p => p.on_idle(client, busy_since_ns, state))
    }
    fn on_graph_time(
        &mut self,
        client: HolderId,
        node: NodeId,
        started_ns: u64,
        completed_ns: u64,
        state: &SchedState<'_>,
    ) {
        each!(self, p => p.on_graph_time(client, node, started_ns, completed_ns, state))
    }
    fn solo_node(&mut self, op: &ReadyOpView<'_>, state: &SchedState<'_>) -> Option<NodeId> {
        each!(self, p => p.solo_node(op, state))
    }
    fn standing(&self, client: HolderId) -> (Option<NodeId>, usize) {
        each!(self, p => p.standing(client))
    }
}

/// Units of the nodes in `nodes`.
pub fn units_of(pool: &Pool, nodes: impl IntoIterator<Item = NodeId>) -> UnitSet {
    nodes.into_iter().fold(UnitSet::EMPTY, |acc, n| acc | pool.node(n).units)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn set(bits: u32) -> UnitSet {
        (0..32).filter(|i| bits & (1 << i) != 0).collect()
    }

    proptest! {
        /// Against the plain model (every set recorded for a client, the whole device and empty
        /// sets left out): a client is refused exactly on the sets within one it recorded, the
        /// kept sets are maximal and distinct, and `record` says whether the set was new.
        #[test]
        fn cluster_refusals_match_the_list_of_every_recorded_set(
            steps in prop::collection::vec((0u32..3, any::<u32>()), 0..40),
            probes in prop::collection::vec((0u32..3, any::<u32>()), 1..40),
        ) {
            let device = set(u32::MAX);
            let mut r = ClusterRefusals::new();
            let mut model: Vec<(u32, UnitSet)> = Vec::new();
            let covered = |m: &[(u32, UnitSet)], c: u32, u: &UnitSet| m.iter().any(|(k, s)| *k == c && u.is_subset(s));
            for &(c, bits) in &steps {
                let u = set(bits);
                let new = !u.is_empty() && u != device && !covered(&model, c, &u);
                prop_assert_eq!(r.record(HolderId(c), u, &device), new);
                if !u.is_empty() && u != device {
                    model.push((c, u));
                }
            }
            for &(c, bits) in steps.iter().chain(&probes) {
                let u = set(bits);
                prop_assert_eq!(r.refuses(HolderId(c), &u), covered(&model, c, &u), "{}", u);
            }
            for c in 0..3 {
                let kept = r.of(HolderId(c));
                for (i, a) in kept.iter().enumerate() {
                    prop_assert!(kept.iter().enumerate().all(|(j, b)| i == j || !a.is_subset(b)));
                }
            }
            r.remove(HolderId(0));
            prop_assert!(r.of(HolderId(0)).is_empty());
        }
    }
}
