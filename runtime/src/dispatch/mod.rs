//! The dispatcher: binds ready ops of one or more virtual contexts to pool nodes.
//!
//! It is the executor of DESIGN.md's split: it owns the backend, the realized partitions, the
//! lanes, what is in flight and every descriptor; the decisions are its [`ArbiterState`]'s (lease
//! state, policy, the steps of a round: `crate::arbiter::state`), the same type the daemon runs per
//! device. In-process the executor hands the policy the ops' own descriptors and reads the lease
//! state directly; under a daemon ([`Remote`]) the decisions come from the daemon's state instead.
//!
//! One [`Dispatcher::pump`] round:
//! 1. **Intake**: ready ops from every client's vCtx. Markers (event record/wait) complete at once;
//!    unit-free ops (copies, fills, host functions) go to the client's lane of a service partition
//!    (the whole device: they occupy no units, so they take no lease), and so do kernels that spin
//!    on peers (NCCL's collectives: see `spins_on_peers`); other kernels and graph launches join
//!    the ready queue.
//! 2. **Lane continuation** (unless strict readiness is configured): an op whose only unsatisfied
//!    predecessors are already submitted to one lane of a node leased by the same client, with its
//!    gate open, is submitted on that lane at once (FIFO on one backend stream preserves H), if
//!    the policy agrees. Other such ops become lookahead hints for [`Policy::prepare`].
//! 3. **Preparation**: [`Policy::maintain`] and [`Policy::prepare`] proposals are validated and
//!    applied to the pool (reserve, reclaim, unreserve); an invalid one is counted and logged.
//! 4. **Binding**: the policy picks ready kernels and selects nodes; each proposal is validated
//!    (node still eligible for the client, descriptor executable unchanged there); the lease is
//!    opened or reused, the **unchanged** `Arc<OpDesc>` is submitted on the node's least-loaded lane,
//!    and the op is marked submitted. A rejected proposal or failed submission leaves the op ready.
//!    Then every ready graph launch is offered to [`Policy::select_graph`], among the nodes whose
//!    partition can run it, and bound the same way (`dispatch/graph.rs`): one graph, one node (on
//!    the H200 the whole device, since a graph's kernels use every SM).
//! 5. **Completion** (first in the round): fences are polled in batches on nodes with outstanding
//!    work, at most every [`DispatchConfig::min_poll_interval_ns`] while work keeps being submitted
//!    unless progress waits on completions ([`Dispatcher::needs_completions`]); tokens are
//!    satisfied in one vCtx call per client, outstanding counts decremented, draining nodes finish,
//!    idle leases are released.
//!
//! [`Dispatcher::pump_submit`] is the submitting half of a round (intake and binding) for a thread
//! that just recorded work.
//! [`Dispatcher::submit_fresh`] binds one fresh op (no live predecessor, nothing else ready) for
//! the thread recording it, inside
//! [`VirtualContext::record_op_eager`](crate::VirtualContext::record_op_eager) (eager binding).
//!
//! The dispatcher only ever holds `Arc<OpDesc>`: it has no way to alter a descriptor.
//!
//! Nothing is lost or kept for ever: a kernel that not even the whole device can run unchanged
//! (invalid launch, unknown function, cooperative grid larger than the GPU) fails at intake; an op
//! whose submission the backend refuses [`MAX_SUBMIT_ATTEMPTS`] times fails; both failures surface
//! through the vCtx at the application's next sync or query. [`Dispatcher::run_until_idle`]
//! reports a policy that never binds ready ops as [`DispatchError::Stalled`].

mod graph;
#[cfg(not(loom))]
mod remote;
#[cfg(loom)]
#[path = "remote_loom.rs"]
mod remote;
mod timeline;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use smallvec::SmallVec;
use thiserror::Error;
use vitamin_hal::{Backend, Fence, HalError, LaneId, LaneProgress, OpDesc, PhysicalPartition, UnitSet};

pub use remote::{Remote, DEFAULT_FALLBACK_AFTER, RECONNECT_EVERY};
pub use timeline::{Span, Timeline, SERVICE_NODE};

use crate::arbiter::state::{Applied, ArbiterState, Proposal, Refusal};
use crate::policy::{ClientClass, ClientInfo, Completion, Hint, Policy, ReadyOpView};
use crate::pool::{
    Conflicts, CreationReport, Creations, Factory, Hierarchy, HolderId, NodeId, NodeKind, NodePartition, Pool,
    PoolError, PoolLayout, Realized,
};
use crate::profile::{ProfileRecorder, Profiles};
use crate::vctx::{ContinuableOp, OpId, VirtualContext};

/// Dispatcher errors (backend failures while building or polling).
#[derive(Debug, Error)]
pub enum DispatchError {
    /// Creating the pool's partitions failed.
    #[error("could not realize pool node {node} ({units}): {source}")]
    Realize {
        /// Node id.
        node: NodeId,
        /// Its units.
        units: String,
        /// Cause.
        source: HalError,
    },
    /// The backend failed outside any op.
    #[error(transparent)]
    Backend(#[from] HalError),
    /// Realizing the pool failed.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A daemon session does not fit this pool.
    #[error("daemon session: {0}")]
    Remote(String),
    /// Profiling failed.
    #[error(transparent)]
    Profile(#[from] crate::profile::ProfileError),
    /// Ready ops that the policy never binds while nothing runs.
    #[error("{ready} ready ops were never bound by the {policy} policy while nothing ran: the policy refuses every eligible node for them")]
    Stalled {
        /// Ready ops left.
        ready: usize,
        /// Policy name.
        policy: &'static str,
    },
}

/// Rounds with ready ops, nothing in flight and no binding before [`Dispatcher::run_until_idle`]
/// reports [`DispatchError::Stalled`].
pub const STALL_ROUNDS: u32 = 10_000;

/// Failed submissions of one op before it fails (its error surfaces at the next sync or query).
pub const MAX_SUBMIT_ATTEMPTS: u32 = 8;

/// Lane-continuation passes per round (each takes the ops the previous pass made continuable).
const MAX_CONTINUATION_PASSES: usize = 256;

/// Dispatcher settings.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Lanes per pool node.
    pub lanes_per_node: usize,
    /// Lanes of the service partition used by unit-free ops (one per client, modulo this).
    pub service_lanes: usize,
    /// Lane continuation on (default) or strict readiness.
    pub lane_continuation: bool,
    /// Record a binding timeline.
    pub record_timeline: bool,
    /// Record the execution times of kernel launches per node size ([`Dispatcher::recorded_profiles`],
    /// the `profile_out` key): only launches submitted to an idle lane, from submission to the
    /// completion observed.
    pub record_profile: bool,
    /// Most ops a lane may hold (running + queued, as last observed) for lane continuation to add
    /// one more: bounds how far binding runs ahead of execution, so later ops can still be
    /// rebound elsewhere.
    pub max_continuation_depth: u32,
    /// Most predicted backlog (backend ns until the lane drains, from the profiles) a lane may
    /// hold for lane continuation to add one more. `u64::MAX`: no time bound.
    pub max_continuation_ns: u64,
    /// Accumulate wall time per dispatcher phase into [`DispatchStats::phases`] (costs a clock
    /// read per phase and per backend call).
    pub profile_phases: bool,
    /// Minimum backend-clock ns between two completion polls while the previous round submitted
    /// work (a poll queries events: about 1.3 us per busy lane on the H200). 0 polls every round.
    /// A round that submitted nothing always polls.
    pub min_poll_interval_ns: u64,
    /// Threads waiting in synchronize calls poll completions themselves
    /// ([`Dispatcher::poll_completions`] through a wait assist): a waiting thread is then no
    /// reason for [`Dispatcher::needs_completions`].
    pub waiters_poll: bool,
    /// How the pool is laid out and when its partitions are created (the `pool` key).
    pub pool: PoolLayout,
    /// Whether a hierarchical or flat pool creates its remainder nodes (the device minus one
    /// tree node) at start-up too (the `remainders` key, `start-up`); by default each is created
    /// at its first use, like every node of an on-demand pool. Each green context costs about
    /// 1.7 MiB of host RSS and 5 MiB of device memory (docs/results/pool-cost.md): the 28
    /// remainders of the H200's 59 nodes are half of the pool's footprint, and only complement
    /// leases (another holder keeps the rest of the device) use them.
    pub remainders_at_start: bool,
    /// Longest time (ns) a best-effort client under a daemon holds back a launch it would share
    /// on the whole device while a latency-critical client is busy
    /// ([`Policy::guards_latency_clients`]); it then goes beside the busy client. Bounds how
    /// long a latency client that never idles can stop a training job: each such launch waits
    /// at most this long.
    pub guard_hold_max_ns: u64,
}

impl DispatchConfig {
    /// Whether some nodes' partitions are created at their first use (an on-demand pool, or
    /// another pool's remainders).
    pub fn has_lazy_nodes(&self) -> bool {
        self.pool == PoolLayout::OnDemand || !self.remainders_at_start
    }
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            lanes_per_node: 4,
            service_lanes: 8,
            lane_continuation: true,
            record_timeline: false,
            record_profile: false,
            max_continuation_depth: 2,
            max_continuation_ns: u64::MAX,
            profile_phases: false,
            min_poll_interval_ns: 0,
            waiters_poll: false,
            pool: PoolLayout::Hierarchical,
            remainders_at_start: false,
            guard_hold_max_ns: 50_000_000,
        }
    }
}

/// The pool as realized ([`Dispatcher::pool_report`]), for the census.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PoolReport {
    /// The `pool` key's value.
    pub layout: PoolLayout,
    /// Pool nodes.
    pub nodes: usize,
    /// Nodes whose partition exists now (all of them unless the pool is on demand).
    pub created: usize,
    /// Partitions created on the dispatch path (an on-demand pool's nodes, another pool's
    /// remainders unless `remainders = "start-up"`).
    pub on_demand: CreationReport,
    /// Whether the remainder nodes were created at start-up.
    pub remainders_at_start: bool,
}

/// Counters, stable JSON shape.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DispatchStats {
    /// Kernels bound through Pick/Select and graph launches bound through `select_graph`.
    pub bound: u64,
    /// Of `bound`, graph launches.
    pub graphs: u64,
    /// Ops bound by lane continuation.
    pub continued: u64,
    /// Unit-free ops placed on the service partition.
    pub unit_free: u64,
    /// Kernels that spin on peers (collectives) placed on the service partition.
    pub collectives: u64,
    /// Under a Throughput daemon, launches only the whole device runs unchanged, placed on the
    /// service partition beside the other clients' leases ([`Policy::shares_whole_device`]).
    pub shared_whole_device: u64,
    /// Of `shared_whole_device`, launches of a best-effort client held back while a
    /// latency-critical client was busy ([`Policy::guards_latency_clients`]).
    pub shared_held: u64,
    /// Of `shared_held`, launches that went at [`DispatchConfig::guard_hold_max_ns`] with the
    /// latency client still busy.
    pub shared_held_expired: u64,
    /// Total time (CLOCK_MONOTONIC ns) the held launches waited.
    pub shared_held_ns: u64,
    /// Markers completed without device work.
    pub markers: u64,
    /// Policy proposals rejected by validation.
    pub rejected: u64,
    /// Submissions the backend refused (op stayed ready).
    pub submit_failures: u64,
    /// Preparations applied / rejected.
    pub preparations: u64,
    /// Preparations rejected by the pool.
    pub preparations_rejected: u64,
    /// Ops completed.
    pub completed: u64,
    /// Ops failed asynchronously.
    pub failed: u64,
    /// Kernels per node id (binding census).
    pub per_node: Vec<u64>,
    /// Pump rounds.
    pub rounds: u64,
    /// [`Dispatcher::pump_submit`] calls that submitted something.
    pub inline_rounds: u64,
    /// Fresh ops bound and submitted by the thread that recorded them
    /// ([`Dispatcher::submit_fresh`]; part of `bound`).
    pub eager: u64,
    /// Fresh ops launched by the thread that recorded them before their descriptor was copied
    /// ([`Dispatcher::launch_fresh_native`]; part of `eager`).
    pub launched_first: u64,
    /// Ops continued on their predecessors' lane by the thread that recorded them
    /// ([`Dispatcher::submit_continued`]; part of `continued`).
    pub eager_continued: u64,
    /// Completion polls (each polls every partition with work in flight).
    pub polls: u64,
    /// Why [`Dispatcher::launch_fresh_native`] declined launches (each then took the usual path).
    pub launch_first_declined: LaunchFirstDeclined,
    /// Wall time per phase, if [`DispatchConfig::profile_phases`] is on.
    pub phases: Option<PhaseTimes>,
}

/// Why launch-first launches were declined ([`DispatchStats::launch_first_declined`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LaunchFirstDeclined {
    /// Ready, deferred or retried ops were waiting, or the op cannot be bound this way.
    pub ineligible: u64,
    /// The policy had no direct answer (`Policy::solo_node`: e.g. the pool was not quiescent).
    pub no_plan: u64,
    /// The node could not be leased or submitted to by the client now.
    pub lease: u64,
    /// The backend could not issue now (earlier hand-offs were not issued yet).
    pub busy: u64,
}

/// Wall-clock ns spent per dispatcher phase (see [`DispatchConfig::profile_phases`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseTimes {
    /// Completion polling, including the backend's fence queries and the completion bookkeeping.
    pub poll_ns: u64,
    /// Intake of ready ops (markers, unit-free ops, the ready queue).
    pub intake_ns: u64,
    /// Lane continuation.
    pub continuation_ns: u64,
    /// Releasing idle leases, `maintain` and its preparations.
    pub maintain_ns: u64,
    /// Pick/Select binding.
    pub bind_ns: u64,
    /// Inside the backend's `submit` calls (part of continuation, bind and intake).
    pub backend_submit_ns: u64,
    /// Backend `submit` calls.
    pub backend_submits: u64,
}

struct Client {
    vctx: Arc<VirtualContext>,
    info: ClientInfo,
    /// Ops in flight on a partition.
    inflight: usize,
    /// Since when the client has had an op in flight without a break ([`Policy::on_idle`] when it
    /// ends with nothing of it ready).
    busy_since: Option<u64>,
}

struct ReadyEntry {
    client: usize,
    op: OpId,
    desc: Arc<OpDesc>,
    ready_since: u64,
    seq: u64,
}

struct Inflight {
    client: usize,
    op: OpId,
    desc: Arc<OpDesc>,
    /// `None` = service partition.
    node: Option<NodeId>,
    submitted: u64,
    continued: bool,
    /// Placed under a daemon's binding or lease: its completion goes up ([`remote`]).
    remote: bool,
    /// Counted in the local pool (`begin_submit`): its completion is counted there too.
    pooled: bool,
    /// Submitted to a lane with nothing else on it: from submission to completion it ran alone
    /// there ([`DispatchConfig::record_profile`] times only such launches).
    alone: bool,
}

/// How a poll tracks completions on the partitions it polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fencing {
    /// Records the lane fences due ([`PhysicalPartition::poll`]).
    Record,
    /// Records them for a thread waiting in a synchronize call ([`PhysicalPartition::poll_for_waiter`]).
    ForWaiter,
    /// Records none ([`PhysicalPartition::poll_observing`]).
    Observe,
}

/// Where a submitted, unsatisfied op sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    node: Option<NodeId>,
    lane: LaneId,
}

/// The dispatcher. Generic over the backend (static dispatch) and the policy.
pub struct Dispatcher<B: Backend, P: Policy> {
    backend: B,
    config: DispatchConfig,
    /// The decision half: lease state, policy, clients, predicted lane drain times.
    arbiter: ArbiterState<P>,
    /// One per pool node, by node id: created at start-up, or at first use in an on-demand pool.
    partitions: Vec<NodePartition<B::Partition>>,
    /// Copies and host functions (always created at start-up).
    service: NodePartition<B::Partition>,
    /// Partitions an on-demand pool created on the dispatch path.
    creations: Arc<Creations>,
    lane_load: Vec<Vec<u32>>,
    lane_last_done: Vec<Vec<u64>>,
    inflight: HashMap<(Option<NodeId>, Fence), Inflight>,
    /// Where each submitted, unsatisfied op sits, with its fence's sequence number on the lane.
    places: HashMap<(usize, OpId), (Place, u64)>,
    clients: Vec<Client>,
    ready: Vec<ReadyEntry>,
    /// Ops in `ready` (ready, not yet submitted).
    in_ready: HashSet<(usize, OpId)>,
    /// Unit-free ops whose submission failed, retried at the next intake.
    retry_unit_free: Vec<(usize, OpId, Arc<OpDesc>)>,
    /// Launches shared on the whole device that wait while a latency-critical client of the
    /// daemon is busy, with when they were first held (CLOCK_MONOTONIC ns), tried at every intake.
    held_shared: Vec<(usize, OpId, Arc<OpDesc>, u64)>,
    /// Failed submissions per op; at [`MAX_SUBMIT_ATTEMPTS`] the op fails.
    submit_attempts: HashMap<(usize, OpId), u32>,
    /// Continuable ops not continued yet (lane too deep or policy said wait): retried each round
    /// until they are submitted or become ready.
    deferred: Vec<(usize, ContinuableOp)>,
    stats: DispatchStats,
    timeline: Option<Timeline>,
    /// Execution times by launch configuration and node size ([`DispatchConfig::record_profile`]).
    profile_rec: Option<ProfileRecorder>,
    seq: u64,
    /// Backend time of the last completion poll.
    last_poll_ns: u64,
    /// Whether the last round submitted anything.
    submitted_last_round: bool,
    polling: Vec<NodeId>,
    scratch_fences: Vec<Fence>,
    /// Ops the last poll found complete and satisfied, awaiting their bookkeeping
    /// (`finish_completed`).
    finishing: Vec<(Inflight, Fence, u64)>,
    /// Backend time at the start of the current round (one clock read per round).
    now: u64,
    /// Completed ops per client, satisfied in one vCtx call at the end of a poll.
    satisfied: Vec<Vec<OpId>>,
    /// Failed ops (client, op, message), reported to their vCtx with `satisfied`, before it: a
    /// catch-up polls with a recording thread's vCtx lock held and must not call into the vCtx.
    failed: Vec<(usize, OpId, Option<i32>, String)>,
    /// Set when lane continuation met an op whose predecessors sit on different lanes (it
    /// becomes ready only once they are observed complete); cleared by the next poll.
    awaiting_completion: bool,
    /// Cleared while [`submit_fresh`](Self::submit_fresh) binds: the recording thread holds the
    /// op's vCtx lock and marks the op submitted itself.
    mark_in_vctx: bool,
    /// The daemon session that decides bindings, if any ([`remote`]).
    remote: Option<Remote>,
}

impl<B: Backend, P: Policy> std::fmt::Debug for Dispatcher<B, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("policy", &self.arbiter.policy.name())
            .field("nodes", &self.partitions.len())
            .field("clients", &self.clients.len())
            .field("ready", &self.ready.len())
            .field("inflight", &self.inflight.len())
            .finish()
    }
}

impl<B: Backend + Clone + 'static, P: Policy> Dispatcher<B, P> {
    /// Builds the pool for the backend's topology and realizes its nodes as
    /// [`DispatchConfig::pool`] and [`DispatchConfig::remainders_at_start`] say: a node now
    /// (start-up cost), or at its first use.
    pub fn new(backend: B, policy: P, profiles: Profiles, config: DispatchConfig) -> Result<Self, DispatchError> {
        let kind = backend.topology().unit_name().to_owned();
        let lanes = config.lanes_per_node;
        let hierarchy = Arc::new(Hierarchy::build(backend.topology()));
        let creations = Arc::new(Creations::default());
        let maker = backend.clone();
        let factory: Arc<Factory<B::Partition>> = Arc::new(move |u, l| maker.create_partition(u, l));
        // A node is created now unless the pool is on demand, or it is a remainder and
        // `remainders` is not `start-up`: then at its first use.
        let later = |kind: NodeKind| {
            config.pool == PoolLayout::OnDemand || (kind == NodeKind::Remainder && !config.remainders_at_start)
        };
        let partitions = hierarchy
            .nodes()
            .iter()
            .map(|n| {
                if later(n.kind) {
                    Ok(NodePartition::on_demand(n.units, lanes, factory.clone(), creations.clone()))
                } else {
                    Realized::realize_node(&backend, n, lanes).map(NodePartition::ready)
                }
            })
            .collect::<Result<Vec<_>, PoolError>>()?;
        let conflicts = match config.pool {
            PoolLayout::Flat => Conflicts::Pairwise,
            _ => Conflicts::Unions,
        };
        let pool = Pool::with_conflicts(hierarchy, conflicts);
        let all = backend.topology().all_units();
        let service = backend.create_partition(&all, config.service_lanes.max(1)).map_err(|source| {
            DispatchError::Realize { node: pool.root(), units: all.display(&kind).to_string(), source }
        })?;
        let service = NodePartition::ready(service);
        let n = partitions.len();
        let timeline = config.record_timeline.then(|| Timeline {
            spans: Vec::new(),
            node_labels: pool
                .nodes()
                .iter()
                .map(|x| format!("node {}: {}", x.id, x.units.display(&kind)))
                .chain(std::iter::once("service (copies, host functions)".to_owned()))
                .collect(),
        });
        let profile_rec = config.record_profile.then(ProfileRecorder::default);
        Ok(Dispatcher {
            lane_load: vec![vec![0; config.lanes_per_node]; n],
            // One row per node, then the service partition's row (it has `service_lanes` lanes).
            lane_last_done: (0..=n)
                .map(|i| vec![0; if i == n { config.service_lanes.max(1) } else { config.lanes_per_node }])
                .collect(),
            arbiter: ArbiterState::new(pool, policy, profiles, config.lanes_per_node),
            backend,
            config,
            partitions,
            service,
            creations,
            inflight: HashMap::default(),
            places: HashMap::default(),
            clients: Vec::new(),
            ready: Vec::new(),
            in_ready: HashSet::default(),
            retry_unit_free: Vec::new(),
            held_shared: Vec::new(),
            submit_attempts: HashMap::default(),
            deferred: Vec::new(),
            stats: DispatchStats { per_node: vec![0; n], ..Default::default() },
            timeline,
            profile_rec,
            seq: 0,
            last_poll_ns: 0,
            submitted_last_round: false,
            polling: Vec::new(),
            scratch_fences: Vec::new(),
            finishing: Vec::new(),
            now: 0,
            satisfied: Vec::new(),
            failed: Vec::new(),
            awaiting_completion: false,
            mark_in_vctx: true,
            remote: None,
        })
    }
}

impl<B: Backend, P: Policy> Dispatcher<B, P> {
    /// Registers a client (one vCtx) and returns its lease-holder id.
    pub fn register(&mut self, vctx: Arc<VirtualContext>, name: impl Into<String>, class: ClientClass) -> HolderId {
        let holder = HolderId(self.clients.len() as u32);
        let info = ClientInfo { holder, name: name.into(), class, deadline_ns: None };
        self.arbiter.add_client(info.clone());
        self.clients.push(Client { vctx, info, inflight: 0, busy_since: None });
        self.satisfied.push(Vec::new());
        holder
    }

    /// Advisory API: the deadline of the client's next step (absolute backend ns), or `None`.
    pub fn advise_deadline(&mut self, holder: HolderId, deadline_ns: Option<u64>) {
        if let Some(c) = self.clients.get_mut(holder.0 as usize) {
            c.info.deadline_ns = deadline_ns;
            self.arbiter.clients[holder.0 as usize].deadline_ns = deadline_ns;
        }
    }

    /// Advisory API: an op of `holder` expected at `ready_at_ns` wanting `demand_units`.
    pub fn advise(&mut self, hint: Hint) {
        let applied = self.arbiter.prepare(&[hint], self.backend.now_ns());
        self.count_preparations(applied);
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }
    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.arbiter.pool
    }
    /// The settings.
    pub fn config(&self) -> &DispatchConfig {
        &self.config
    }
    /// Replaces the policy: a client under a daemon takes the daemon's, so that what it still
    /// decides itself (lane continuation, launch-first, whole-device launches) follows the same
    /// rules. Its leases and rounds carry no state of the old policy's.
    pub fn replace_policy(&mut self, policy: P) {
        self.arbiter.replace_policy(policy);
    }

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.arbiter.policy
    }
    /// Counters.
    pub fn stats(&self) -> &DispatchStats {
        &self.stats
    }
    /// The recorded timeline, if enabled.
    pub fn timeline(&self) -> Option<&Timeline> {
        self.timeline.as_ref()
    }
    /// With [`DispatchConfig::record_profile`]: the profiles this dispatcher started with, with
    /// the median of the latest recorded times per launch configuration and node size, and how
    /// many times were recorded. `None` when not recording.
    pub fn recorded_profiles(&self) -> Option<(Profiles, u64)> {
        let r = self.profile_rec.as_ref()?;
        Some((r.to_profiles(&self.arbiter.profiles), r.samples()))
    }
    /// Where client `client`'s op `op` was submitted, while it is in flight: (node, lane), node
    /// `None` for the service partition.
    pub fn placement(&self, client: usize, op: OpId) -> Option<(Option<NodeId>, LaneId)> {
        self.places.get(&(client, op)).map(|(p, _)| (p.node, p.lane))
    }

    /// A lock-free view of the progress of the lane that `op` of `client` was submitted on, and
    /// the op's sequence number there, where the backend offers one
    /// ([`PhysicalPartition::lane_progress`]): a thread waiting for the op may spin on it
    /// instead of polling. `None`: not submitted, already observed complete, or no such view.
    pub fn lane_progress(&self, client: usize, op: OpId) -> Option<(LaneProgress, u64)> {
        let &(at, seq) = self.places.get(&(client, op))?;
        let progress = self.partition(at.node)?.lane_progress(at.lane, seq)?;
        Some((progress, seq))
    }

    /// The physical partition of `node` (`None`: the service partition), created now if the
    /// pool is on demand and nothing has used it yet; `None` if its creation fails.
    pub fn partition(&self, node: Option<NodeId>) -> Option<&B::Partition> {
        match node {
            Some(n) => self.partitions.get(n.0 as usize)?.get().ok(),
            None => self.service.get().ok(),
        }
    }

    /// How the pool was laid out and, for an on-demand pool, what its creations cost.
    pub fn pool_report(&self) -> PoolReport {
        PoolReport {
            layout: self.config.pool,
            nodes: self.partitions.len(),
            created: self.partitions.iter().filter(|p| p.is_created()).count(),
            on_demand: self.creations.report(),
            remainders_at_start: self.config.pool != PoolLayout::OnDemand && self.config.remainders_at_start,
        }
    }

    /// Whether nothing is ready or in flight (and no completion awaits its bookkeeping).
    pub fn is_idle(&self) -> bool {
        self.ready.is_empty()
            && self.held_shared.is_empty()
            && self.inflight.is_empty()
            && self.finishing.is_empty()
            && self.satisfied.iter().all(Vec::is_empty)
            && self.failed.is_empty()
    }
    /// Ops submitted and not yet completed.
    pub fn inflight(&self) -> usize {
        self.inflight.len()
    }

    /// One scheduling round (see the module docs). Returns how many ops were submitted or
    /// completed.
    pub fn pump(&mut self) -> Result<usize, DispatchError> {
        // Completions first, so leases and predictions are current when the policy decides
        // (rate-limited while work keeps being submitted, if configured, unless a host thread
        // waits in a synchronize call: then completion latency is what it sees).
        crate::trace::mark(crate::trace::Tag::RoundBegin, 0);
        let now = self.backend.now_ns();
        self.now = now;
        self.stats.rounds += 1;
        let mut progress = 0;
        let mut clock = self.config.profile_phases.then(std::time::Instant::now);
        self.finish_completed();
        // Completions and failures a catch-up observed under a recording thread's vCtx lock.
        self.flush_satisfied();
        if self.inflight.is_empty() {
            // Nothing can complete: a poll would only delay the new work's submission.
            self.awaiting_completion = false;
        } else if !self.submitted_last_round
            || now.saturating_sub(self.last_poll_ns) >= self.config.min_poll_interval_ns
            || self.needs_completions()
        {
            progress += self.poll(false, self.own_fencing())?;
            self.last_poll_ns = now;
            self.lap(&mut clock, |p| &mut p.poll_ns);
        }
        let before = self.stats.bound + self.stats.continued + self.stats.unit_free;
        progress += self.intake()?;
        self.lap(&mut clock, |p| &mut p.intake_ns);
        crate::trace::mark(crate::trace::Tag::IntakeEnd, self.ready.len() as u64);
        if self.config.lane_continuation {
            progress += self.continuation()?;
            self.lap(&mut clock, |p| &mut p.continuation_ns);
        }
        if self.remote.is_some() {
            // The daemon decides: ready records up, bindings down.
            progress += self.remote_round()?;
            self.lap(&mut clock, |p| &mut p.bind_ns);
        } else {
            self.arbiter.release_idle(|_| true);
            let applied = self.arbiter.maintain(self.now);
            self.count_preparations(applied);
            self.lap(&mut clock, |p| &mut p.maintain_ns);
            progress += self.bind()?;
            self.lap(&mut clock, |p| &mut p.bind_ns);
        }
        self.submitted_last_round = self.stats.bound + self.stats.continued + self.stats.unit_free > before;
        Ok(progress)
    }

    /// Polls completions now (for a thread waiting on one: see
    /// [`VirtualContext::set_wait_assist`](crate::VirtualContext::set_wait_assist)). Returns how
    /// many ops completed.
    pub fn poll_completions(&mut self) -> Result<usize, DispatchError> {
        self.poll_now(Fencing::ForWaiter)
    }

    /// [`poll_completions`](Self::poll_completions) for the pumping thread itself while host
    /// threads wait: like its rounds' polls, it leaves lane fences to the waiting threads' polls
    /// when those poll for themselves ([`DispatchConfig::waiters_poll`] and
    /// [`VirtualContext::has_assisting_waiters`]).
    pub fn poll_completions_for_waiters(&mut self) -> Result<usize, DispatchError> {
        self.poll_now(self.own_fencing())
    }

    /// A poll outside a round (bookkeeping deferred).
    fn poll_now(&mut self, fencing: Fencing) -> Result<usize, DispatchError> {
        let n = self.poll(true, fencing)?;
        self.last_poll_ns = self.now;
        Ok(n)
    }

    /// How the pumping thread's own polls fence: they only observe completions (record no lane
    /// fences) while host threads spin in a synchronize call polling for themselves
    /// ([`DispatchConfig::waiters_poll`], [`VirtualContext::has_assisting_waiters`]; a parked
    /// waiter polls nothing), whose polls record the fences. A launch on a stream whose previous
    /// driver call another thread made costs more (measured on the H200 host: 5.7 vs 4.0 us,
    /// application thread, docs/results/shim-bind-overhead.md), and the waiting thread usually launches next on the lane
    /// it waited for.
    fn own_fencing(&self) -> Fencing {
        if self.config.waiters_poll && self.clients.iter().any(|c| c.vctx.has_assisting_waiters()) {
            Fencing::Observe
        } else {
            Fencing::Record
        }
    }

    /// The bookkeeping of completions the last poll satisfied (pool, lanes, policy, timeline):
    /// deferred from the poll so that a thread polling for its own completion returns as soon as
    /// the tokens are satisfied. Until then the ops still count on their lanes and leases, which
    /// only makes continuation and lease release more conservative.
    fn finish_completed(&mut self) {
        if self.finishing.is_empty() {
            return;
        }
        let mut done = std::mem::take(&mut self.finishing);
        // Graph launches with a later one on their lane completed in the same poll.
        let is_graph = |inf: &Inflight| matches!(&*inf.desc, OpDesc::Graph(_));
        let behind: Vec<bool> = done
            .iter()
            .map(|(inf, f, _)| {
                is_graph(inf)
                    && done
                        .iter()
                        .any(|(o, g, _)| o.node == inf.node && g.lane == f.lane && g.seq > f.seq && is_graph(o))
            })
            .collect();
        for ((inf, f, at), behind) in done.drain(..).zip(behind) {
            self.finish(inf, f, None, at, behind);
        }
        self.finishing = done;
        self.polling.retain(|&nd| self.lane_load[nd.0 as usize].iter().any(|&l| l > 0));
    }

    /// Whether progress now waits on observing completions (so a rate-limited poll should not
    /// wait for its interval): a host thread blocks in a synchronize call, ready ops wait for a
    /// node, continuations wait for their lane, or an op waits for predecessors on other lanes.
    /// (Ignoring waiters while rounds still submit was measured worse on the H200: a streamed
    /// chain then stalled on its continuation depth between rate-limited polls.)
    pub fn needs_completions(&self) -> bool {
        self.awaiting_completion
            // Under strict readiness every dependent op waits for its predecessor's completion.
            || (!self.config.lane_continuation && !self.inflight.is_empty())
            || !self.ready.is_empty()
            || !self.deferred.is_empty()
            || (!self.config.waiters_poll && self.clients.iter().any(|c| c.vctx.has_waiters()))
    }

    /// Whether the only progress possible is observing completions that host threads wait for:
    /// work in flight, a thread in a synchronize call, nothing ready, deferred or waiting for
    /// other lanes. A pumping thread may then poll in a tight loop
    /// ([`poll_completions`](Self::poll_completions)) instead of running whole rounds, until a
    /// poll completes something or new work arrives (which a round must take in).
    pub fn waits_only_on_completions(&self) -> bool {
        !self.inflight.is_empty()
            && self.ready.is_empty()
            && self.deferred.is_empty()
            && self.retry_unit_free.is_empty()
            && self.held_shared.is_empty()
            && !self.awaiting_completion
            && self.clients.iter().any(|c| c.vctx.has_waiters())
    }

    /// The submitting half of a round, for a thread that just recorded work (inline submission):
    /// intake and binding of ready ops, without lane continuation, polling completions,
    /// releasing leases or `maintain` (the next [`pump`](Self::pump) does those). Ready ops are
    /// the latency-critical ones (the first op after the application waited); continuations are
    /// left to the pumping thread, which launches them while the application records more.
    /// Returns how many ops it submitted.
    pub fn pump_submit(&mut self) -> Result<usize, DispatchError> {
        self.now = self.backend.now_ns();
        let before = self.stats.bound + self.stats.continued + self.stats.unit_free;
        let mut clock = self.config.profile_phases.then(std::time::Instant::now);
        let mut progress = self.intake()?;
        self.lap(&mut clock, |p| &mut p.intake_ns);
        progress += if self.remote.is_some() { self.remote_round()? } else { self.bind()? };
        self.lap(&mut clock, |p| &mut p.bind_ns);
        if self.stats.bound + self.stats.continued + self.stats.unit_free > before {
            self.submitted_last_round = true;
            self.stats.inline_rounds += 1;
        }
        Ok(progress)
    }

    /// Eager binding of a fresh op by the thread recording it (see
    /// [`VirtualContext::record_op_eager`](crate::VirtualContext::record_op_eager), which calls
    /// this with the op's vCtx lock held): binds `op` of client `client` through the policy's
    /// Pick/Select as a round would and submits it at once, so the first launch after the
    /// application waited reaches the driver without a hand-off to the dispatcher thread.
    ///
    /// Only a kernel or graph launch, only when no other op waits for a node or for its lane
    /// (nothing ready, nothing deferred: the policy would otherwise weigh them in the same
    /// round), and only under lane continuation (strict readiness keeps every binding with
    /// the dispatcher's rounds). Returns whether the op was submitted; if not, nothing changed
    /// and the op takes the usual path. Must not be called for an op the dispatcher has taken.
    pub fn submit_fresh(&mut self, client: usize, op: OpId, desc: &Arc<OpDesc>) -> bool {
        if !self.fresh_eligible(client, desc) {
            return false;
        }
        crate::trace::mark(crate::trace::Tag::EagerBegin, op.0);
        // A policy that already knows the lone op's node (Throughput's memoized plan on a
        // quiescent pool) is asked directly; otherwise a round's Pick/Select binds it.
        let solo = self.fresh_solo_node(client, op, desc);
        crate::trace::step(11);
        self.ready.push(ReadyEntry { client, op, desc: desc.clone(), ready_since: self.now, seq: self.seq });
        self.in_ready.insert((client, op));
        self.mark_in_vctx = false;
        let bound = match solo {
            Some(node) => self.bind_at(self.ready.len() - 1, node).map(|done| {
                if done {
                    self.ready.pop();
                    self.in_ready.remove(&(client, op));
                }
                usize::from(done)
            }),
            None => self.bind(),
        };
        self.mark_in_vctx = true;
        let submitted = matches!(bound, Ok(1)) && !self.in_ready.contains(&(client, op));
        if !submitted {
            // Refused (or failed): leave no trace; the dispatcher takes the op from the vCtx.
            self.ready.retain(|e| !(e.client == client && e.op == op));
            self.in_ready.remove(&(client, op));
            self.submit_attempts.remove(&(client, op));
            if let Err(e) = bound {
                tracing::debug!(error = %e, "eager binding failed; the dispatcher binds the op");
            }
            return false;
        }
        self.stats.eager += 1;
        self.submitted_last_round = true;
        submitted
    }

    /// Whether a fresh op of client `client` may be bound by its recording thread: only a kernel
    /// or graph launch, under lane continuation, with nothing ready, deferred or retried (the
    /// policy would otherwise weigh them in the same round), and runnable on the whole device.
    fn fresh_eligible(&self, client: usize, desc: &Arc<OpDesc>) -> bool {
        self.config.lane_continuation
            && self.remote.is_none()
            && client < self.clients.len()
            && self.ready.is_empty()
            && self.deferred.is_empty()
            && self.retry_unit_free.is_empty()
            && desc.uses_units()
            && !spins_on_peers(desc)
            && matches!(**desc, OpDesc::Kernel(_) | OpDesc::Graph(_))
            && self.partitions[self.arbiter.pool.root().0 as usize].can_execute(desc).is_ok()
    }

    /// Brings completions and leases up to date, then asks the policy for a lone fresh op's
    /// node without a round ([`Policy::solo_node`]); `None`: the policy has no direct answer.
    fn fresh_solo_node(&mut self, client: usize, op: OpId, desc: &Arc<OpDesc>) -> Option<NodeId> {
        if !self.arbiter.pool.is_quiescent() {
            self.catch_up();
        }
        self.finish_completed();
        self.arbiter.release_idle(|_| true);
        crate::trace::step(10);
        self.now = self.backend.now_ns();
        self.seq += 1;
        let view = ReadyOpView {
            client: self.clients[client].info.holder,
            op,
            kernel: desc.as_kernel()?,
            ready_since_ns: self.now,
            seq: self.seq,
            deadline_ns: self.clients[client].info.deadline_ns,
            min_units: 0,
        };
        self.arbiter.solo_node(&view, self.now)
    }

    /// Launch-first eager binding (the shim's `VITAMIN_LAUNCH_FIRST`, on by default): binds a
    /// fresh kernel launch of client `client` that is not recorded yet, described by `probe`
    /// (its function, grid, block and shared memory; the arguments may be left out), and has the
    /// backend's [`submit_native`](PhysicalPartition::submit_native) run `issue`, which makes the
    /// launch itself on the chosen lane's native stream with the application's own argument
    /// pointers. Only when the policy answers directly (`Policy::solo_node`: Throughput's memoized
    /// plan on a quiescent pool) and the same conditions as [`submit_fresh`](Self::submit_fresh)
    /// hold. Returns `None` (nothing done: the caller takes the usual path) when not applicable
    /// or when the backend cannot issue now, `Some(Err)` when `issue` failed (nothing submitted),
    /// and `Some(Ok)` when launched: the caller must then record the op and hand it to
    /// [`commit_native`](Self::commit_native) while it still holds this dispatcher (the pool
    /// counts the launch until then).
    pub fn launch_fresh_native(
        &mut self,
        client: usize,
        probe: &Arc<OpDesc>,
        issue: &mut dyn FnMut(u64) -> Result<(), HalError>,
    ) -> Option<Result<NativeLaunch, HalError>> {
        if !self.fresh_eligible(client, probe) || probe.as_kernel().is_none() {
            self.stats.launch_first_declined.ineligible += 1;
            return None;
        }
        crate::trace::mark(crate::trace::Tag::EagerBegin, 0);
        // The op is not recorded yet: the policy sees a placeholder id (solo answers depend on
        // the launch's shape and the pool only).
        let Some(node) = self.fresh_solo_node(client, OpId(u64::MAX), probe) else {
            self.stats.launch_first_declined.no_plan += 1;
            return None;
        };
        let holder = self.clients[client].info.holder;
        let runs = self.partitions.get(node.index()).is_some_and(|p| p.can_execute(probe).is_ok());
        if !runs || self.arbiter.admit(node, holder, 0).is_err() {
            self.stats.launch_first_declined.lease += 1;
            return None;
        }
        let lane = least_loaded(&self.lane_load[node.0 as usize]);
        crate::trace::step(12);
        crate::trace::mark(crate::trace::Tag::SubmitBegin, 0);
        let submitted = self.partitions[node.0 as usize].submit_native(lane, issue);
        crate::trace::mark(crate::trace::Tag::SubmitEnd, 0);
        match submitted {
            Ok(fence) => Some(Ok(NativeLaunch { client, node, lane, fence })),
            Err(e) => {
                let _ = self.arbiter.complete(node);
                match e {
                    HalError::Busy(_) => {
                        self.stats.launch_first_declined.busy += 1;
                        None
                    }
                    e => Some(Err(e)),
                }
            }
        }
    }

    /// Completes a [`launch_fresh_native`](Self::launch_fresh_native): `op` is the launch's
    /// record in the client's vCtx (which the recording thread marks submitted itself) and
    /// `desc` its descriptor, copied after the launch.
    pub fn commit_native(&mut self, launch: NativeLaunch, op: OpId, desc: Arc<OpDesc>) {
        let NativeLaunch { client, node, lane, fence } = launch;
        self.mark_in_vctx = false;
        self.note_submitted((client, op), desc, Place { node: Some(node), lane }, fence, false);
        self.mark_in_vctx = true;
        self.stats.bound += 1;
        self.stats.eager += 1;
        self.stats.launched_first += 1;
        self.submitted_last_round = true;
    }

    /// Eager continuation by the thread recording `op` of client `client` (see
    /// [`VirtualContext::record_op_eager`](crate::VirtualContext::record_op_eager), which calls
    /// this with the op's vCtx lock held when every live predecessor in `preds` is submitted):
    /// lane continuation as a round would do it (`continuation_target`),
    /// submitted at once onto the predecessors' lane, so the recording thread launches a
    /// dependent op itself, on the lane it launched the previous one on, as a native program
    /// launches on its stream. Only a kernel or graph launch whose predecessors are all placed on
    /// one node lane; anything else (or a lane the policy or the depth bound refuses now)
    /// returns `false` without a trace, and the op takes the usual path.
    pub fn submit_continued(&mut self, client: usize, op: OpId, desc: &Arc<OpDesc>, preds: &[OpId]) -> bool {
        if !self.config.lane_continuation
            || client >= self.clients.len()
            || preds.is_empty()
            || !matches!(**desc, OpDesc::Kernel(_) | OpDesc::Graph(_))
        {
            return false;
        }
        let place = common_place(preds.iter().map(|p| self.places.get(&(client, *p)).map(|(at, _)| *at)));
        self.now = self.backend.now_ns();
        let Continuation::Lane(Some(node), lane) = self.continuation_target(client, op, desc, place) else {
            return false;
        };
        if !self.begin_continued(client, op, node, lane, matches!(**desc, OpDesc::Graph(_))) {
            return false;
        }
        self.mark_in_vctx = false;
        let submitted = self.submit_at(client, op, desc.clone(), Some(node), lane, true);
        self.mark_in_vctx = true;
        match submitted {
            Ok(true) => {
                self.stats.continued += 1;
                self.stats.eager_continued += 1;
                self.submitted_last_round = true;
                true
            }
            Ok(false) => {
                // Refused (its pool accounting undone): leave no trace; the dispatcher takes it.
                self.submit_attempts.remove(&(client, op));
                false
            }
            Err(e) => {
                tracing::debug!(error = %e, "eager continuation failed; the dispatcher continues the op");
                false
            }
        }
    }

    /// Adds the time since `clock` to one phase counter and restarts the clock (profiling only).
    fn lap(&mut self, clock: &mut Option<std::time::Instant>, field: impl FnOnce(&mut PhaseTimes) -> &mut u64) {
        if let Some(t) = clock {
            let now = std::time::Instant::now();
            *field(self.stats.phases.get_or_insert_with(PhaseTimes::default)) += (now - *t).as_nanos() as u64;
            *t = now;
        }
    }

    /// Pumps and waits on the backend until every registered client's work completed.
    ///
    /// Returns [`DispatchError::Stalled`] if ready ops stay unbound for [`STALL_ROUNDS`] rounds
    /// with nothing in flight (the policy refuses every eligible node for them).
    pub fn run_until_idle(&mut self) -> Result<(), DispatchError> {
        let mut stalled = 0u32;
        loop {
            let progress = self.pump()?;
            let outstanding: usize = self.clients.iter().map(|c| c.vctx.outstanding()).sum();
            if outstanding == 0 && self.is_idle() {
                return Ok(());
            }
            if progress == 0 && !self.backend.wait_for_progress(Duration::from_micros(20))? {
                if self.is_idle() {
                    // Nothing runs, nothing is ready, yet work is outstanding: it waits on the host.
                    return Ok(());
                }
                if self.inflight.is_empty() && self.remote.is_some() {
                    // Waiting for the daemon's bindings (its own loop bounds the wait; safe mode
                    // falls back in-process after `Remote::fallback_after`).
                    std::thread::sleep(Duration::from_micros(20));
                    continue;
                }
                if self.inflight.is_empty() {
                    stalled += 1;
                    if stalled >= STALL_ROUNDS {
                        return Err(DispatchError::Stalled {
                            ready: self.ready.len(),
                            policy: self.arbiter.policy.name(),
                        });
                    }
                    continue;
                }
            }
            stalled = 0;
        }
    }

    fn intake(&mut self) -> Result<usize, DispatchError> {
        let mut n = 0;
        for (ci, op, desc) in std::mem::take(&mut self.retry_unit_free) {
            let lane = (ci % self.config.service_lanes.max(1)) as LaneId;
            if self.submit_at(ci, op, desc, None, lane, false)? {
                n += 1;
            }
        }
        n += self.release_held_shared()?;
        let mut buf = Vec::new();
        let root = self.arbiter.pool.root();
        loop {
            let mut markers = 0;
            for ci in 0..self.clients.len() {
                self.clients[ci].vctx.take_ready(&mut buf);
                for r in buf.drain(..) {
                    match &*r.desc {
                        OpDesc::Marker(_) => {
                            self.clients[ci].vctx.satisfy(r.op);
                            self.stats.markers += 1;
                            markers += 1;
                        }
                        d if !d.uses_units() => {
                            let lane = (ci % self.config.service_lanes.max(1)) as LaneId;
                            self.submit_at(ci, r.op, r.desc, None, lane, false)?;
                            self.stats.unit_free += 1;
                            n += 1;
                        }
                        d if self.partitions[root.0 as usize].can_execute(d).is_err() => {
                            // No node can run it unchanged (the whole device cannot, so nothing
                            // smaller can): fail it now rather than keep it ready for ever.
                            let why = self.partitions[root.0 as usize].can_execute(d).err().map(|e| e.to_string());
                            self.clients[ci].vctx.fail(r.op, why.unwrap_or_default());
                            self.stats.failed += 1;
                        }
                        d if spins_on_peers(d) => {
                            let lane = (ci % self.config.service_lanes.max(1)) as LaneId;
                            self.submit_at(ci, r.op, r.desc, None, lane, false)?;
                            self.stats.collectives += 1;
                            n += 1;
                        }
                        d if self.remote_shares_whole_device(d) => {
                            if self.remote_guarded() {
                                self.held_shared.push((ci, r.op, r.desc, crate::daemon::now_ns()));
                                self.stats.shared_held += 1;
                                continue;
                            }
                            let lane = (ci % self.config.service_lanes.max(1)) as LaneId;
                            self.submit_at(ci, r.op, r.desc, None, lane, false)?;
                            self.stats.shared_whole_device += 1;
                            n += 1;
                        }
                        _ => {
                            self.seq += 1;
                            self.in_ready.insert((ci, r.op));
                            let now = self.backend.now_ns();
                            self.ready.push(ReadyEntry {
                                client: ci,
                                op: r.op,
                                desc: r.desc,
                                ready_since: now,
                                seq: self.seq,
                            });
                        }
                    }
                }
            }
            if markers == 0 {
                return Ok(n);
            }
        }
    }

    /// Submits the held shared launches ([`Dispatcher::remote_guarded`]) once no latency-critical
    /// client is busy, or those held for [`DispatchConfig::guard_hold_max_ns`]. In the order they
    /// were held; each is ready, so holding one reorders nothing its successors wait for.
    fn release_held_shared(&mut self) -> Result<usize, DispatchError> {
        if self.held_shared.is_empty() {
            return Ok(0);
        }
        let guarded = self.remote_guarded();
        let now = crate::daemon::now_ns();
        let mut n = 0;
        for (ci, op, desc, since) in std::mem::take(&mut self.held_shared) {
            let waited = now.saturating_sub(since);
            if guarded && waited < self.config.guard_hold_max_ns {
                self.held_shared.push((ci, op, desc, since));
                continue;
            }
            let lane = (ci % self.config.service_lanes.max(1)) as LaneId;
            self.submit_at(ci, op, desc, None, lane, false)?;
            self.stats.shared_whole_device += 1;
            self.stats.shared_held_ns += waited;
            self.stats.shared_held_expired += u64::from(guarded);
            n += 1;
        }
        Ok(n)
    }

    fn continuation(&mut self) -> Result<usize, DispatchError> {
        let mut n = 0;
        let mut hints = Vec::new();
        let mut work: Vec<(usize, ContinuableOp, bool)> =
            std::mem::take(&mut self.deferred).into_iter().map(|(ci, c)| (ci, c, false)).collect();
        let mut buf = Vec::new();
        // Submitting an op makes its successors continuable at once: take them again within the
        // round, so a dependent chain is bound op after op without a whole round per op (the lane
        // bounds how far this runs ahead).
        for _ in 0..MAX_CONTINUATION_PASSES {
            for ci in 0..self.clients.len() {
                self.clients[ci].vctx.take_continuable(&mut buf);
                work.extend(buf.drain(..).map(|c| (ci, c, true)));
            }
            if work.is_empty() {
                break;
            }
            let submitted = self.continue_ops(&mut work, &mut hints)?;
            n += submitted;
            if submitted == 0 {
                break;
            }
        }
        if !hints.is_empty() && self.remote.is_some() {
            // Under a daemon the lookahead goes up with the ready records (its policy prepares).
            self.remote_hints(&hints);
        } else if !hints.is_empty() {
            let applied = self.arbiter.prepare(&hints, self.now);
            self.count_preparations(applied);
        }
        Ok(n)
    }

    /// One pass of lane continuation over `work` (drained); returns how many ops it submitted.
    fn continue_ops(
        &mut self,
        work: &mut Vec<(usize, ContinuableOp, bool)>,
        hints: &mut Vec<Hint>,
    ) -> Result<usize, DispatchError> {
        let mut n = 0;
        for (ci, c, fresh) in work.drain(..) {
            if self.in_ready.contains(&(ci, c.op)) || self.places.contains_key(&(ci, c.op)) {
                continue; // became ready (the policy binds it) or already submitted
            }
            // A pending predecessor that is no longer placed has completed (this thread satisfied
            // it): only the placed ones constrain where the op may follow.
            let place = common_place(
                c.pending_preds.iter().filter_map(|p| self.places.get(&(ci, *p)).map(|(at, _)| *at)).map(Some),
            );
            let holder = self.clients[ci].info.holder;
            let target = match self.continuation_target(ci, c.op, &c.desc, place) {
                Continuation::Lane(node, lane) => Some((node, lane)),
                Continuation::NotNow => {
                    // Retry next round: the lane may get shallower or the policy may agree.
                    self.deferred.push((ci, c.clone()));
                    None
                }
                Continuation::No => None,
            };
            // Not continued: it becomes ready only once its predecessors are observed complete.
            self.awaiting_completion |= target.is_none();
            match target {
                Some((node, lane)) => {
                    if let Some(nd) = node {
                        if !self.begin_continued(ci, c.op, nd, lane, matches!(*c.desc, OpDesc::Graph(_))) {
                            if self.remote.is_some() {
                                // The up ring is full: retried next round.
                                self.deferred.push((ci, c.clone()));
                            }
                            continue;
                        }
                    }
                    if self.submit_at(ci, c.op, c.desc, node, lane, true)? {
                        self.stats.continued += 1;
                        n += 1;
                    }
                }
                None if fresh && c.desc.uses_units() => hints.push(Hint {
                    client: holder,
                    op: Some(c.desc),
                    demand_units: None,
                    ready_at_ns: None,
                    deadline_ns: self.clients[ci].info.deadline_ns,
                }),
                None => {}
            }
        }
        Ok(n)
    }

    /// Whether op `op` (descriptor `desc`) of client `ci`, whose placed pending predecessors all
    /// sit at `place` (`None`: none placed, or on different lanes), may follow them there now:
    /// on a node lane, only under the client's lease, within the continuation depth and
    /// backlog bounds, when the node runs the op unchanged and the policy agrees; unit-free
    /// ops behind unit-free predecessors follow them on their service lane.
    fn continuation_target(&mut self, ci: usize, op: OpId, desc: &Arc<OpDesc>, place: Option<Place>) -> Continuation {
        match place {
            // A collective runs on the service partition: behind a service-lane predecessor it
            // continues there; behind a node's, it waits for intake.
            _ if spins_on_peers(desc) => match place {
                Some(Place { node: None, lane }) => Continuation::Lane(None, lane),
                _ => Continuation::No,
            },
            Some(Place { node: Some(node), lane }) => {
                let holder = self.clients[ci].info.holder;
                let leased = if self.remote.is_some() {
                    self.remote_may_continue(node, lane)
                } else {
                    self.arbiter.holds(node, holder)
                };
                if !leased {
                    return Continuation::No;
                }
                let (nd, ln) = (node.0 as usize, lane as usize);
                let allowed = self.lane_load[nd][ln] < self.config.max_continuation_depth
                    && self.arbiter.lane_busy_until[nd][ln].saturating_sub(self.now) < self.config.max_continuation_ns
                    && self.partitions[nd].can_execute(desc).is_ok()
                    && match desc.as_kernel() {
                        // Under a daemon the policy reads a mirror of the lease view.
                        Some(k) if self.remote.is_some() => self.remote_policy_continues(ci, op, k, node),
                        Some(k) => {
                            let view = ReadyOpView {
                                client: holder,
                                op,
                                kernel: k,
                                ready_since_ns: self.now,
                                seq: self.seq,
                                deadline_ns: self.clients[ci].info.deadline_ns,
                                min_units: 0,
                            };
                            self.arbiter.continue_on_lane(&view, node, self.now)
                        }
                        None if matches!(**desc, OpDesc::Graph(_)) => {
                            if self.remote.is_some() {
                                self.remote_policy_continues_graph(node)
                            } else {
                                self.arbiter.continue_graph(holder, node, self.now)
                            }
                        }
                        None => true,
                    };
                if allowed {
                    Continuation::Lane(Some(node), lane)
                } else {
                    Continuation::NotNow
                }
            }
            Some(Place { node: None, lane }) if !desc.uses_units() => Continuation::Lane(None, lane),
            _ => Continuation::No,
        }
    }

    /// The lease accounting of a continued op about to be submitted on (node, lane): the local
    /// pool's, or a `Continued` record to the daemon. `false`: not now.
    fn begin_continued(&mut self, ci: usize, op: OpId, node: NodeId, lane: LaneId, graph: bool) -> bool {
        if self.remote.is_some() {
            self.remote_continued(ci, op, node, lane, graph)
        } else {
            self.arbiter.begin_submit(node, self.clients[ci].info.holder).is_ok()
        }
    }

    fn count_preparations(&mut self, applied: Applied) {
        self.stats.preparations += applied.applied;
        self.stats.preparations_rejected += applied.rejected;
    }

    fn bind(&mut self) -> Result<usize, DispatchError> {
        if self.ready.is_empty() {
            return Ok(0);
        }
        crate::trace::mark(crate::trace::Tag::BindBegin, self.ready.len() as u64);
        let mut tried = vec![false; self.ready.len()];
        let mut submitted: Vec<usize> = Vec::new();
        let mut eligible = Vec::new();
        let now = self.backend.now_ns();
        {
            let views = views(&self.ready, &self.clients, &tried);
            self.arbiter.begin_round(&views.iter().map(|v| v.1).collect::<Vec<_>>(), now);
        }
        loop {
            let proposal = {
                let (ready, partitions) = (&self.ready, &self.partitions);
                // Cooperative and cluster launches run unchanged only where they fit: offer only
                // those nodes (other launches fit every node, and checking costs a backend call).
                // A pool with nodes created on demand checks only the partitions it has: asking one
                // it has not would create it (a bf16 matmul loop's cuBLAS cluster launches created
                // all 59 on the H200: docs/results/eval.md, Overhead and footprint); a node not
                // created yet stays a candidate, and `bind_at` checks it if it is chosen.
                let on_demand = self.config.has_lazy_nodes();
                let smallest = smallest_node(&self.arbiter.pool);
                let filter = |idx: usize, nodes: &mut Vec<NodeId>| {
                    // A node of an on-demand pool whose creation failed takes no work.
                    if on_demand {
                        nodes.retain(|n| !partitions[n.index()].failed());
                    }
                    let desc = &ready[idx].desc;
                    if desc
                        .as_kernel()
                        .is_some_and(|k| k.attributes().needs_coresidency() || k.attributes().cluster().is_some())
                        || smallest_refuses(smallest, partitions, desc)
                    {
                        nodes.retain(|n| partitions[n.index()].may_execute(desc));
                    }
                };
                self.arbiter.propose(&views(ready, &self.clients, &tried), now, filter, &mut eligible)
            };
            let (idx, node) = match proposal {
                Proposal::Done => break,
                Proposal::Invalid => {
                    self.stats.rejected += 1;
                    break;
                }
                Proposal::Skip(idx) => {
                    tried[idx] = true;
                    continue;
                }
                Proposal::Bind(idx, node) => (idx, node),
            };
            tried[idx] = true;
            if self.bind_at(idx, node)? {
                submitted.push(idx);
            }
        }
        self.bind_graphs(now, &mut submitted)?;
        submitted.sort_unstable();
        let n = submitted.len();
        for idx in submitted.into_iter().rev() {
            let e = self.ready.swap_remove(idx);
            self.in_ready.remove(&(e.client, e.op));
        }
        // swap_remove reorders; keep the queue in arrival order for policies.
        self.ready.sort_by_key(|e| e.seq);
        Ok(n)
    }

    /// Binds ready entry `idx` to the policy's proposal `node`: validates it (eligible for the
    /// client, descriptor executable unchanged there), opens or reuses the lease and submits the
    /// **unchanged** descriptor on the node's least-loaded lane. A rejected proposal or a refused
    /// submission leaves the op ready. Returns whether it was submitted (the caller removes it
    /// from `ready`).
    fn bind_at(&mut self, idx: usize, node: NodeId) -> Result<bool, DispatchError> {
        let entry = &self.ready[idx];
        let holder = self.clients[entry.client].info.holder;
        // Validate the proposal: executable unchanged there (the executor's check), then eligible
        // for this client with its gate open (the arbiter's).
        let runs = self.partitions.get(node.index()).is_some_and(|p| p.can_execute(&entry.desc).is_ok());
        let admitted = if runs { self.arbiter.admit(node, holder, 0) } else { Err(Refusal::Ineligible) };
        if let Err(why) = admitted {
            self.stats.rejected += 1;
            tracing::debug!(%node, op = ?entry.op, ?why, "policy proposal rejected");
            return Ok(false);
        }
        let lane = least_loaded(&self.lane_load[node.0 as usize]);
        crate::trace::step(12);
        let (client, op, desc) = (entry.client, entry.op, entry.desc.clone());
        let submitted = self.submit_at(client, op, desc, Some(node), lane, false)?;
        if submitted {
            self.stats.bound += 1;
        }
        Ok(submitted)
    }

    /// Submits on (node or service, lane). On failure undoes the pool accounting and leaves the
    /// op where it was (ready). Returns whether it was submitted.
    fn submit_at(
        &mut self,
        client: usize,
        op: OpId,
        desc: Arc<OpDesc>,
        node: Option<NodeId>,
        lane: LaneId,
        continued: bool,
    ) -> Result<bool, DispatchError> {
        let part = match node {
            Some(n) => &self.partitions[n.0 as usize],
            None => &self.service,
        };
        let clock = self.config.profile_phases.then(std::time::Instant::now);
        crate::trace::mark(crate::trace::Tag::SubmitBegin, op.0);
        let submitted = part.submit(lane, &desc);
        crate::trace::mark(crate::trace::Tag::SubmitEnd, op.0);
        if let Some(t) = clock {
            let p = self.stats.phases.get_or_insert_with(PhaseTimes::default);
            p.backend_submit_ns += t.elapsed().as_nanos() as u64;
            p.backend_submits += 1;
        }
        match submitted {
            Ok(fence) => {
                self.note_submitted((client, op), desc, Place { node, lane }, fence, continued);
                Ok(true)
            }
            Err(e) => {
                self.stats.submit_failures += 1;
                tracing::warn!(error = %e, "submission failed; the op stays ready");
                match node {
                    // A continued op was reported up before its submission: take it back.
                    Some(_) if self.remote.is_some() && continued => self.remote_completed(client, op),
                    Some(_) if self.remote.is_some() => {}
                    Some(n) => {
                        let _ = self.arbiter.pool.complete(n);
                    }
                    None => {}
                }
                let attempts = self.submit_attempts.entry((client, op)).or_insert(0);
                *attempts += 1;
                if *attempts >= MAX_SUBMIT_ATTEMPTS {
                    // Persistent refusal (e.g. an invalid copy): fail the op so the application sees it.
                    self.submit_attempts.remove(&(client, op));
                    log_failure(client, op, &desc, node, e.native_code(), &e.to_string());
                    self.clients[client].vctx.fail_with_code(
                        op,
                        e.native_code(),
                        format!("submission refused {MAX_SUBMIT_ATTEMPTS} times: {e}"),
                    );
                    self.stats.failed += 1;
                    if self.in_ready.remove(&(client, op)) {
                        self.ready.retain(|r| !(r.client == client && r.op == op));
                    }
                } else if !continued && node.is_none() {
                    // A unit-free op that could not be submitted is retried at the next intake.
                    self.retry_unit_free.push((client, op, desc));
                }
                Ok(false)
            }
        }
    }

    /// The bookkeeping of an op the backend took on (node or service, lane) with `fence`: lane
    /// load and predicted backlog, placement, the op in flight (and, unless the recording thread
    /// does it, its submission in the vCtx).
    fn note_submitted(
        &mut self,
        (client, op): (usize, OpId),
        desc: Arc<OpDesc>,
        at: Place,
        fence: Fence,
        continued: bool,
    ) {
        let Place { node, lane } = at;
        let now = self.backend.now_ns();
        let alone = node.is_some_and(|n| self.lane_load[n.0 as usize][lane as usize] == 0);
        if let Some(n) = node {
            self.arbiter.note_submitted(n, lane as usize, desc.as_kernel(), now);
            self.lane_load[n.0 as usize][lane as usize] += 1;
            if desc.uses_units() {
                self.stats.per_node[n.0 as usize] += 1;
            }
            if !self.polling.contains(&n) {
                self.polling.push(n);
            }
        }
        if !self.submit_attempts.is_empty() {
            self.submit_attempts.remove(&(client, op));
        }
        if self.mark_in_vctx {
            self.clients[client].vctx.mark_submitted(op);
        }
        self.places.insert((client, op), (Place { node, lane }, fence.seq));
        let c = &mut self.clients[client];
        c.inflight += 1;
        c.busy_since.get_or_insert(now);
        let remote = node.is_some() && self.remote.is_some();
        let pooled = node.is_some() && !remote;
        self.inflight.insert(
            (node, fence),
            Inflight { client, op, desc, node, submitted: now, continued, remote, pooled, alone },
        );
    }

    /// Polls every partition with work in flight, satisfies what completed, then does its
    /// bookkeeping now or, with `defer_finish` (a thread polling for its own completion), at the
    /// next round or poll. Without `fence` the partitions only observe (no lane fences recorded:
    /// [`PhysicalPartition::poll_observing`]).
    fn poll(&mut self, defer_finish: bool, fence: Fencing) -> Result<usize, DispatchError> {
        self.poll_satisfying(defer_finish, fence, true)
    }

    /// Catches up with completions for a fresh op's binding, with the recording thread's vCtx
    /// lock held (so the completions' tokens are satisfied, and failures reported, by the next
    /// round or poll, not here): where a
    /// thread waiting in a synchronize call saw its ops complete on its own and satisfied them
    /// in its vCtx (a waiter spinning on [`lane_progress`](Self::lane_progress)), the pool still
    /// counts them until a poll observes their fences, and a policy answering only for a
    /// quiescent pool would refuse the launch that follows the wait.
    fn catch_up(&mut self) {
        if self.inflight.is_empty() {
            return;
        }
        crate::trace::step(29);
        if let Err(e) = self.poll_satisfying(false, Fencing::Observe, false) {
            tracing::debug!(error = %e, "catching up with completions failed; the next round polls");
        }
        self.last_poll_ns = self.now;
    }

    /// [`poll`](Self::poll); `satisfy`: also satisfy the completions' tokens and report the
    /// failures now (else they wait in `satisfied` and `failed` for the next round or poll).
    fn poll_satisfying(&mut self, defer_finish: bool, fence: Fencing, satisfy: bool) -> Result<usize, DispatchError> {
        crate::trace::mark(crate::trace::Tag::PollBegin, 0);
        self.finish_completed();
        let mut n = 0;
        self.stats.polls += 1;
        self.now = self.backend.now_ns();
        self.awaiting_completion = false;
        let mut fences = std::mem::take(&mut self.scratch_fences);
        let mut done = std::mem::take(&mut self.finishing);
        // Service partition first, then nodes with outstanding work.
        let targets: SmallVec<[Option<NodeId>; 16]> =
            std::iter::once(None).chain(self.polling.iter().copied().map(Some)).collect();
        for target in targets {
            fences.clear();
            let part = match target {
                Some(nd) => &self.partitions[nd.0 as usize],
                None => &self.service,
            };
            let polled = match fence {
                Fencing::Record => part.poll(&mut fences),
                Fencing::ForWaiter => part.poll_for_waiter(&mut fences),
                Fencing::Observe => part.poll_observing(&mut fences),
            };
            if let Err(e) = polled {
                // Asynchronous failure: attribute it to the ops in flight on that partition.
                self.fail_partition(target, &e);
                continue;
            }
            for &f in &fences {
                if let Some(inf) = self.inflight.remove(&(target, f)) {
                    self.satisfied[inf.client].push(inf.op);
                    done.push((inf, f, self.now));
                }
            }
        }
        crate::trace::step(20);
        // Tokens first: a thread waiting in a synchronize call sees its completion at once; the
        // pool, policy and prediction bookkeeping of the batch follows (`finish_completed`).
        if satisfy {
            self.flush_satisfied();
        }
        n += done.len();
        self.finishing = done;
        self.scratch_fences = fences;
        if !defer_finish {
            self.finish_completed();
        }
        crate::trace::mark(crate::trace::Tag::PollEnd, n as u64);
        Ok(n)
    }

    /// Reports the failures [`finish`](Self::finish) collected, then satisfies the completions
    /// the polls collected, one vCtx call per client.
    fn flush_satisfied(&mut self) {
        for (client, op, code, error) in self.failed.drain(..) {
            self.clients[client].vctx.fail_with_code(op, code, error);
        }
        for (c, ops) in self.clients.iter().zip(self.satisfied.iter_mut()) {
            if !ops.is_empty() {
                c.vctx.satisfy_all(ops);
                crate::trace::mark(crate::trace::Tag::Satisfied, ops.len() as u64);
                ops.clear();
            }
        }
    }

    fn fail_partition(&mut self, target: Option<NodeId>, e: &vitamin_hal::HalError) {
        let msg = e.to_string();
        let keys: Vec<(Option<NodeId>, Fence)> = self.inflight.keys().filter(|k| k.0 == target).copied().collect();
        for k in keys {
            if let Some(inf) = self.inflight.remove(&k) {
                log_failure(inf.client, inf.op, &inf.desc, inf.node, e.native_code(), &msg);
                self.failed.push((inf.client, inf.op, e.native_code(), msg.clone()));
                self.stats.failed += 1;
                self.finish(inf, k.1, None, self.now, false);
            }
        }
    }

    /// Completion bookkeeping of one op observed complete at `now`. A success must already be
    /// satisfied by the caller; a failure is queued here for its vCtx (`flush_satisfied`).
    /// `behind`: a later graph launch on its lane completed with it (its time is no step's).
    fn finish(&mut self, inf: Inflight, fence: Fence, error: Option<&str>, now: u64, behind: bool) {
        if let Some(e) = error {
            log_failure(inf.client, inf.op, &inf.desc, inf.node, None, e);
            self.failed.push((inf.client, inf.op, None, e.to_owned()));
            self.stats.failed += 1;
        }
        self.places.remove(&(inf.client, inf.op));
        self.stats.completed += 1;
        let c = &mut self.clients[inf.client];
        c.inflight = c.inflight.saturating_sub(1);
        if c.inflight == 0 && !self.ready.iter().any(|e| e.client == inf.client) {
            if let Some(since) = c.busy_since.take() {
                let holder = c.info.holder;
                self.arbiter.on_idle(holder, since, now);
            }
        }
        let slot = inf.node.map_or(self.partitions.len(), |n| n.0 as usize);
        let lane_done = &mut self.lane_last_done[slot][fence.lane as usize];
        let start = inf.submitted.max(*lane_done);
        *lane_done = now;
        if let (true, Some(nd), OpDesc::Graph(_)) = (inf.pooled, inf.node, &*inf.desc) {
            // A graph with a later one queued behind it on its lane (a burst of replays) is no
            // measure of one step: left out.
            let queued = behind
                || self.inflight.iter().any(|((n, f), o)| {
                    *n == inf.node && f.lane == fence.lane && f.seq > fence.seq && matches!(&*o.desc, OpDesc::Graph(_))
                });
            if !queued {
                self.arbiter.on_graph_time(self.clients[inf.client].info.holder, nd, start, now, now);
            }
        }
        if let (Some(rec), Some(nd), true, None, Some(k)) =
            (self.profile_rec.as_mut(), inf.node, inf.alone, error, inf.desc.as_kernel())
        {
            rec.record(k, self.arbiter.pool.node(nd).size(), now.saturating_sub(inf.submitted));
        }
        if let Some(nd) = inf.node {
            self.lane_load[nd.0 as usize][fence.lane as usize] -= 1;
            if self.lane_load[nd.0 as usize][fence.lane as usize] == 0 {
                self.arbiter.note_lane_drained(nd, fence.lane as usize, now);
            }
            if inf.remote {
                self.remote_completed(inf.client, inf.op);
            }
            if !inf.pooled {
                // Placed by a daemon: its lease accounting is the daemon's, not the local pool's.
            } else if let Err(e) = self.arbiter.complete(nd) {
                tracing::warn!(node = %nd, error = %e, "pool completion accounting failed");
            }
            if let (true, Some(k)) = (inf.pooled, inf.desc.as_kernel()) {
                let c = Completion {
                    client: self.clients[inf.client].info.holder,
                    kernel: k,
                    node: nd,
                    submitted_ns: inf.submitted,
                    completed_ns: now,
                };
                self.arbiter.on_complete(&c, now);
            }
        }
        if let Some(t) = &mut self.timeline {
            t.spans.push(Span {
                name: inf.desc.label().to_owned(),
                client: self.clients[inf.client].info.name.clone(),
                holder: self.clients[inf.client].info.holder.0,
                op: inf.op.0,
                node: inf.node.map_or(SERVICE_NODE, |n| n.0),
                lane: fence.lane,
                submitted_ns: inf.submitted,
                start_ns: start,
                end_ns: now,
                continued: inf.continued,
            });
        }
    }

    /// Units currently leased, draining or reserved.
    pub fn active_units(&self) -> UnitSet {
        self.arbiter.pool.active_units()
    }
}

fn views<'a>(ready: &'a [ReadyEntry], clients: &[Client], tried: &[bool]) -> Vec<(usize, ReadyOpView<'a>)> {
    ready
        .iter()
        .enumerate()
        .filter(|(i, _)| !tried[*i])
        .filter_map(|(i, e)| {
            let k = e.desc.as_kernel()?;
            let c = &clients[e.client].info;
            Some((
                i,
                ReadyOpView {
                    client: c.holder,
                    op: e.op,
                    kernel: k,
                    ready_since_ns: e.ready_since,
                    seq: e.seq,
                    deadline_ns: c.deadline_ns,
                    min_units: 0,
                },
            ))
        })
        .collect()
}

/// The one place all pending predecessors share, if they are all placed and all in one place.
/// A fresh launch made by [`Dispatcher::launch_fresh_native`], to be committed with
/// [`Dispatcher::commit_native`] once recorded.
#[derive(Debug)]
#[must_use = "a native launch counts in the pool until it is committed"]
pub struct NativeLaunch {
    client: usize,
    node: NodeId,
    lane: LaneId,
    fence: Fence,
}

/// Where an op may be continued ([`Dispatcher::continuation_target`]).
enum Continuation {
    /// On this (node or service) lane, now.
    Lane(Option<NodeId>, LaneId),
    /// Under the client's lease, but not now (lane too deep, policy disagrees): retry later.
    NotNow,
    /// Not at all: it waits for its predecessors' completion.
    No,
}

/// Whether `desc` is a kernel that spins on peers ([`vitamin_hal::LaunchAttributes::coresident`],
/// not cooperative): NCCL's collectives. They run on the service partition (the whole device,
/// no lease), like unit-free ops, never on a leased node: a collective of one job spinning on a
/// lease-held node while its peer on another device waits for a lease held by another job's
/// spinning collective would wait for ever (the gang problem of spatial partitioning); without a
/// lease both are submitted at once, as under MPS. The whole device holds their grid at once
/// (checked at capture; wider ones run natively).
fn spins_on_peers(desc: &OpDesc) -> bool {
    desc.as_kernel().is_some_and(|k| k.attributes().coresident() && !k.attributes().cooperative())
}

fn common_place(places: impl Iterator<Item = Option<Place>>) -> Option<Place> {
    let mut common: Option<Place> = None;
    for p in places {
        let p = p?;
        match common {
            None => common = Some(p),
            Some(c) if c == p => {}
            Some(_) => return None,
        }
    }
    common
}

/// The pool's smallest node, if it is smaller than the whole device. A launch with no shape
/// requirement of its own that this node refuses runs only on larger nodes, because the backend
/// keeps it in the application's own context (a function whose raised limit a green context could
/// not raise): it is offered only the nodes that run it, in process, and sent to a daemon with a
/// floor ([`smallest_refuses`]), rather than bound to a small node and refused there.
fn smallest_node(pool: &Pool) -> Option<NodeId> {
    let &n = pool.nodes_by_size().first()?;
    (pool.node(n).size() < pool.node(pool.root()).size()).then_some(n)
}

/// Whether node `smallest` ([`smallest_node`]) refuses `d`, asked without creating it. One
/// backend check per launch.
fn smallest_refuses<P: PhysicalPartition>(
    smallest: Option<NodeId>,
    partitions: &[NodePartition<P>],
    d: &OpDesc,
) -> bool {
    smallest.is_some_and(|n| !partitions[n.index()].may_execute(d))
}

fn least_loaded(loads: &[u32]) -> LaneId {
    loads.iter().enumerate().min_by_key(|(_, &l)| l).map_or(0, |(i, _)| i as LaneId)
}

/// Logs a failed op once, where it fails: what it was (kernel or host-function name), its vCtx op,
/// the pool node it ran on and the backend's error. The vCtx then reports the failure at the
/// application's next synchronization or query of the op's stream.
fn log_failure(client: usize, op: OpId, desc: &OpDesc, node: Option<NodeId>, code: Option<i32>, error: &str) {
    let node = node.map_or_else(|| "service".to_string(), |n| n.to_string());
    tracing::error!(client, %op, what = desc.kind_name(), name = desc.label(), %node, ?code, error, "op failed");
}
