//! The executor under a daemon: bindings come from another process.
//!
//! With a [`Remote`] attached ([`Dispatcher::attach_remote`]) the dispatcher keeps everything
//! that touches a native handle — intake, lane continuation, submission of the unchanged
//! descriptor, completion polling, tokens — and hands the decisions to the daemon
//! (DESIGN.md, "Decide vs. submit"; docs/daemon.md):
//! - every ready kernel or graph launch goes up as a ready record (kernel name hash, grid,
//!   block, shared memory, the fewest units a node must have to run it unchanged, deadline);
//! - a binding (node, lane) that arrives is validated (the node runs the descriptor unchanged)
//!   and submitted there; a refused one is returned at once as completed and the op is sent
//!   again, with the smallest node that does run it as its floor;
//! - each completion goes up, so the daemon frees the lease when the client's work on it drains;
//! - lane continuation stays local, only on a lane where an op of this client is outstanding and
//!   only while the lease view says the client holds that node open (no round trip); each
//!   continued op is reported (`Continued`), so the daemon counts it on the lease.
//!
//! - launch-first: a fresh kernel launch goes out at once on a node the lease view shows as this
//!   client's and open, when the policy agrees ([`Dispatcher::remote_launch_first`]), reported
//!   as `Launched`; the daemon lets drained leases linger so that the first launch after a
//!   synchronize finds one.
//!
//! The local pool's lease state is not used for remotely bound work (the daemon owns it); the
//! local policy decides continuations and launch-first over a mirror of the lease view and
//! serves the fallback. Eager binding of fresh ops from the recording thread, which needs a local
//! decision, is off under a daemon (eager continuation stays).
//!
//! **Safe mode.** When the daemon goes away ([`DaemonClient::check_daemon`]), bound and
//! continued work goes on (held leases only, no widening) and ready ops wait while the client
//! tries to re-register every [`RECONNECT_EVERY`]; ops that were waiting are sent again to the
//! new daemon. After [`Remote::fallback_after`] without one, the dispatcher drops the daemon
//! and binds in-process with its local policy, with one warning: no call waits forever on a
//! daemon that does not come back. A client the daemon itself disconnected (a refused record, a
//! flood, a stall) binds in-process at once: registering again would only repeat it.

use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use vitamin_hal::{Backend, KernelLaunch, OpDesc, PhysicalPartition};

use super::{smallest_node, smallest_refuses, DispatchError, Dispatcher};
use crate::arbiter::state::sched;
use crate::daemon::client::{Binding, DaemonClient};
use crate::daemon::wire::{self, LeaseState, ReadyRecord};
use crate::daemon::DaemonError;
use crate::policy::{Policy, ReadyOpView};
use crate::pool::{HolderId, NodeId, NodePartition, Pool, Reservation};
use crate::vctx::OpId;

/// How often a client in safe mode tries to re-register.
pub const RECONNECT_EVERY: Duration = Duration::from_millis(200);

/// Default time in safe mode before the dispatcher binds in-process: half the default bound on
/// unbound work (`unbound_timeout_ms`, 10 s), so that a call waiting on ops the daemon never
/// bound sees them bound in-process rather than timing out.
pub const DEFAULT_FALLBACK_AFTER: Duration = Duration::from_secs(5);

/// A daemon session as the dispatcher uses it.
#[derive(Debug)]
pub struct Remote {
    client: DaemonClient,
    /// Wire ids of ready ops sent and not bound yet.
    sent: HashSet<u64>,
    /// Completions the up ring had no room for (wire id, completed at, not run), sent first
    /// next round.
    unsent: Vec<(u64, u64, bool)>,
    /// Floors (units) for ops a bound node could not run unchanged.
    floors: HashMap<u64, u16>,
    /// Kernels (name hashes) whose floor was logged.
    logged_floors: HashSet<u64>,
    /// The daemon's lease view as a pool (this process's leases and the other clients' active
    /// nodes), at the view epoch it was built from: what the local policy reads to decide a
    /// continuation ([`Policy::continues_from_leases`]).
    mirror: Option<(u32, Pool)>,
    view_buf: Vec<u32>,
    /// Whether the local policy is the daemon's and decides continuations from leases alone.
    policy_continues: bool,
    /// Whether the local policy is the daemon's and shares whole-device launches.
    shares_whole_device: bool,
    /// Whether the local policy is the daemon's and guards latency-critical clients.
    guards: bool,
    /// This process as the one client of the mirror (holder `MIRROR_SELF`, its registered class):
    /// the clients a policy sees when it decides over the mirror.
    mirror_clients: Vec<crate::policy::ClientInfo>,
    bindings: Vec<Binding>,
    gone_since: Option<Instant>,
    last_attempt: Instant,
    /// Time in safe mode before binding in-process.
    pub fallback_after: Duration,
    /// Bindings the executor refused (node cannot run the op unchanged, or submission failed).
    pub refused: u64,
    /// Ops sent up.
    pub sent_total: u64,
    /// Re-registrations.
    pub reconnects: u64,
    /// Fresh ops launched first on a lease the view showed open (no round trip).
    pub launched: u64,
    /// Lookahead hints sent up.
    pub hints_sent: u64,
}

impl Remote {
    /// Wraps a connected session.
    pub fn new(client: DaemonClient) -> Remote {
        Remote {
            client,
            sent: HashSet::default(),
            unsent: Vec::new(),
            floors: HashMap::default(),
            logged_floors: HashSet::default(),
            mirror: None,
            view_buf: Vec::new(),
            policy_continues: false,
            shares_whole_device: false,
            guards: false,
            mirror_clients: Vec::new(),
            bindings: Vec::new(),
            gone_since: None,
            last_attempt: Instant::now(),
            fallback_after: DEFAULT_FALLBACK_AFTER,
            refused: 0,
            sent_total: 0,
            reconnects: 0,
            launched: 0,
            hints_sent: 0,
        }
    }

    /// The session.
    pub fn client(&self) -> &DaemonClient {
        &self.client
    }

    /// Whether the daemon is gone (safe mode), and why.
    pub fn safe_mode(&self) -> Option<&str> {
        self.client.safe_mode()
    }
}

impl Remote {
    /// Reports a bound op done (`not_run`: its node refused it), keeping it for the next round
    /// where the up ring is full: a completion lost would leave the op outstanding in the
    /// daemon, and the same op sent again would be a duplicate there.
    fn report_done(&mut self, id: u64, at: u64, not_run: bool) {
        match self.send_done(id, at, not_run) {
            Ok(true) => {}
            Ok(false) => self.unsent.push((id, at, not_run)),
            Err(DaemonError::Wire(wire::WireError::UnknownOp(_))) => {}
            Err(e) => tracing::debug!(error = %e, "completion not reported to the daemon"),
        }
    }

    fn send_done(&mut self, id: u64, at: u64, not_run: bool) -> Result<bool, DaemonError> {
        if not_run {
            self.client.return_not_run(id, at)
        } else {
            self.client.complete(id, at)
        }
    }

    /// The mirror of the lease view at `epoch` (read into `view_buf`), rebuilt when stale.
    fn mirror_at(&mut self, epoch: u32, hierarchy: &std::sync::Arc<crate::pool::Hierarchy>) -> &Pool {
        if self.mirror.as_ref().is_none_or(|(e, _)| *e != epoch) {
            self.mirror = Some((epoch, mirror_pool(hierarchy, &self.view_buf)));
        }
        &self.mirror.as_ref().expect("set above").1
    }
}

/// The holders a lease mirror gives this process's leases and the other clients' active nodes.
const MIRROR_SELF: HolderId = HolderId(u32::MAX - 1);
const MIRROR_FOREIGN: HolderId = HolderId(u32::MAX);

/// A pool over `hierarchy` in the states of a lease view (`view[i]`: node i's [`LeaseState`]).
/// The daemon's active nodes are disjoint, so every transition applies; an entry that does not
/// (a view torn by a bug) is left idle.
fn mirror_pool(hierarchy: &std::sync::Arc<crate::pool::Hierarchy>, view: &[u32]) -> Pool {
    let mut pool = Pool::new(hierarchy.clone());
    for (i, &v) in view.iter().enumerate().take(pool.nodes().len()) {
        let n = NodeId(i as u16);
        let _ = match LeaseState::from_u32(v) {
            Ok(LeaseState::Open) => pool.lease(n, MIRROR_SELF),
            Ok(LeaseState::Draining) => pool
                .lease(n, MIRROR_SELF)
                .and_then(|()| pool.begin_submit(n, MIRROR_SELF))
                .and_then(|()| pool.close_gate(n).map(|_| ())),
            Ok(LeaseState::Reserved) => pool.reserve(n, Reservation { holder: MIRROR_SELF, tag: 0 }),
            Ok(LeaseState::Foreign) => pool.lease(n, MIRROR_FOREIGN),
            Ok(LeaseState::None) | Err(_) => Ok(()),
        };
    }
    pool
}

/// The wire id of op `op` of local client `ci` (48 bits of op id, 16 of client).
fn wire_id(ci: usize, op: OpId) -> u64 {
    ((ci as u64) << 48) | (op.0 & ((1 << 48) - 1))
}

fn kernel_name(d: &OpDesc) -> &str {
    match d {
        OpDesc::Kernel(k) => k.function().name(),
        OpDesc::Graph(_) => "a graph launch",
        _ => "an op",
    }
}

fn lane16(lane: vitamin_hal::LaneId) -> u16 {
    u16::try_from(lane).unwrap_or(u16::MAX)
}

impl<B: Backend, P: Policy> Dispatcher<B, P> {
    /// Hands binding decisions to a daemon session (see the module docs). The session must
    /// describe this pool: the same node count and lanes per node.
    pub fn attach_remote(&mut self, remote: Remote) -> Result<(), DispatchError> {
        let w = remote.client.welcome();
        if usize::from(w.nodes) != self.partitions.len() || usize::from(w.lanes) != self.config.lanes_per_node {
            return Err(DispatchError::Remote(format!(
                "the daemon's pool has {} nodes x {} lanes, this process's {} x {}",
                w.nodes,
                w.lanes,
                self.partitions.len(),
                self.config.lanes_per_node
            )));
        }
        let same = self.arbiter.policy.name() == w.policy;
        let (continues, shares) =
            (same && self.arbiter.policy.continues_from_leases(), same && self.arbiter.policy.shares_whole_device());
        let mut remote = remote;
        remote.policy_continues = continues;
        remote.shares_whole_device = shares;
        remote.guards = same && self.arbiter.policy.guards_latency_clients();
        remote.mirror_clients = vec![crate::policy::ClientInfo {
            holder: MIRROR_SELF,
            name: String::new(),
            class: remote.client.class(),
            deadline_ns: None,
        }];
        self.remote = Some(remote);
        Ok(())
    }

    /// The daemon session, when one decides.
    pub fn remote(&self) -> Option<&Remote> {
        self.remote.as_ref()
    }

    /// Whether a continued op of this client may follow on (node, lane) under the daemon: an op
    /// of ours is outstanding there and the lease view says the node is ours and open (in safe
    /// mode: held leases only).
    pub(super) fn remote_may_continue(&self, node: NodeId, lane: vitamin_hal::LaneId) -> bool {
        self.remote.as_ref().is_some_and(|r| r.client.may_continue(node.0, lane16(lane)))
    }

    /// Whether the local policy lets kernel `k` (op `op` of client `ci`) continue on `node`, asked
    /// over a mirror of the daemon's lease view ([`Remote::mirror`]): as in-process, a client
    /// stops continuing on a lease when a clearly wider free node would serve the op better, so
    /// its next op goes up and the daemon binds it wider. Without this a client kept its first
    /// lease while its work went on (alone on the device, a GPT job held 36 of 132 units and ran
    /// at half its speed: docs/results/daemon-pair.md, run 3). Policies that do not decide from
    /// leases alone, a local policy other than the daemon's, safe mode, or a view being
    /// rewritten: continue.
    pub(super) fn remote_policy_continues(&mut self, ci: usize, op: OpId, k: &KernelLaunch, node: NodeId) -> bool {
        let (now, seq, deadline_ns) = (self.now, self.seq, self.clients[ci].info.deadline_ns);
        self.ask_mirror(|policy, state| {
            let view =
                ReadyOpView { client: MIRROR_SELF, op, kernel: k, ready_since_ns: now, seq, deadline_ns, min_units: 0 };
            policy.continue_on_lease(&view, node, state)
        })
    }

    /// [`remote_policy_continues`](Self::remote_policy_continues) for a graph launch
    /// ([`Policy::continue_graph`] over the mirror of the lease view).
    pub(super) fn remote_policy_continues_graph(&mut self, node: NodeId) -> bool {
        self.ask_mirror(|policy, state| policy.continue_graph(MIRROR_SELF, node, state))
    }

    /// Asks the local policy a continuation question over the mirror of the daemon's lease view,
    /// in which this process is the one client (`MIRROR_SELF`, with the class it registered, so a
    /// policy that asks a client's class finds it). Yes without a question where the policy does
    /// not decide from leases, in safe mode, or when the view cannot be read.
    fn ask_mirror(&mut self, ask: impl FnOnce(&mut P, &crate::policy::SchedState<'_>) -> bool) -> bool {
        let Some(r) = self.remote.as_mut() else { return true };
        if !r.policy_continues || r.client.safe_mode().is_some() {
            return true;
        }
        let Ok(epoch) = r.client.lease_view_raw(&mut r.view_buf) else { return true };
        r.mirror_at(epoch, self.arbiter.pool.hierarchy());
        let Some((_, pool)) = r.mirror.as_ref() else { return true };
        let state = crate::policy::SchedState { clients: &r.mirror_clients, ..sched!(self.arbiter, self.now, pool) };
        ask(&mut self.arbiter.policy, &state)
    }

    /// Launch-first under the daemon: each fresh kernel launch not sent up yet (nor refused by a
    /// node) goes out at once on a node the lease view shows as this client's and open, when the
    /// node runs it unchanged (cooperative and cluster launches included) and the policy would
    /// continue there
    /// ([`Policy::continue_on_lease`], widest such node first), reported as `Launched`. With the
    /// daemon's lingering leases this takes the round trip off the first launch after a
    /// synchronize. Only where the local policy is the daemon's and decides from leases, not in
    /// safe mode. Returns how many ops went out.
    pub(super) fn remote_launch_first(&mut self) -> Result<usize, DispatchError> {
        let Some(r) = self.remote.as_mut() else { return Ok(0) };
        if !r.policy_continues || r.client.safe_mode().is_some() || self.ready.is_empty() {
            return Ok(0);
        }
        let Ok(epoch) = r.client.lease_view_raw(&mut r.view_buf) else { return Ok(0) };
        let mut open: Vec<NodeId> = r
            .view_buf
            .iter()
            .enumerate()
            .filter(|&(_, &v)| v == LeaseState::Open as u32)
            .map(|(i, _)| NodeId(i as u16))
            .filter(|n| n.index() < self.partitions.len())
            .collect();
        if open.is_empty() {
            return Ok(0);
        }
        open.sort_by_key(|&n| std::cmp::Reverse(self.arbiter.pool.node(n).size()));
        r.mirror_at(epoch, self.arbiter.pool.hierarchy());
        let mut n = 0;
        let mut i = 0;
        while i < self.ready.len() {
            let (ci, op, desc) = {
                let e = &self.ready[i];
                (e.client, e.op, e.desc.clone())
            };
            let id = wire_id(ci, op);
            let fresh = self.remote.as_ref().is_some_and(|r| !r.sent.contains(&id) && !r.floors.contains_key(&id));
            // Kernels only (a graph waits for the daemon's whole-device decision); a cooperative or
            // cluster launch too, where the node holds it unchanged (`can_execute` below).
            let kernel = matches!(&*desc, OpDesc::Kernel(_));
            if !fresh || !kernel {
                i += 1;
                continue;
            }
            let OpDesc::Kernel(k) = &*desc else { unreachable!("checked above") };
            let Some(r) = self.remote.as_ref() else { return Ok(n) };
            let Some((_, pool)) = r.mirror.as_ref() else { return Ok(n) };
            let state =
                crate::policy::SchedState { clients: &r.mirror_clients, ..sched!(self.arbiter, self.now, pool) };
            let view = ReadyOpView {
                client: MIRROR_SELF,
                op,
                kernel: k,
                ready_since_ns: self.now,
                seq: self.seq,
                deadline_ns: self.clients[ci].info.deadline_ns,
                min_units: 0,
            };
            let partitions = &self.partitions;
            let policy = &mut self.arbiter.policy;
            let chosen = open.iter().copied().find(|&node| {
                partitions[node.0 as usize].can_execute(&desc).is_ok() && policy.continue_on_lease(&view, node, &state)
            });
            let Some(node) = chosen else {
                i += 1;
                continue;
            };
            let lane = super::least_loaded(&self.lane_load[node.0 as usize]);
            let Some(r) = self.remote.as_mut() else { return Ok(n) };
            match r.client.launched(id, node.0, lane16(lane), crate::daemon::now_ns(), false) {
                Ok(true) => {}
                Ok(false) => break, // the up ring is full: the rest go up next round
                Err(e) => {
                    tracing::debug!(error = %e, "launch-first not reported to the daemon; sent up instead");
                    break;
                }
            }
            // Reported as continued: a refused submission takes the report back.
            if !self.submit_at(ci, op, desc, Some(node), lane, true)? {
                i += 1;
                continue;
            }
            let e = self.ready.swap_remove(i);
            self.in_ready.remove(&(e.client, e.op));
            if let Some(r) = self.remote.as_mut() {
                r.launched += 1;
            }
            // Counted with the continued ops, as the daemon counts it: placed on a held lease.
            self.stats.continued += 1;
            n += 1;
        }
        if n > 0 {
            self.ready.sort_by_key(|e| e.seq);
        }
        Ok(n)
    }

    /// Whether ready op `d` goes to the service partition under the daemon: the policy (the
    /// daemon's) shares whole-device launches ([`Policy::shares_whole_device`]), and `d` is a
    /// cooperative or cluster launch, or a graph launch, that the whole device runs unchanged and
    /// no smaller node does (a graph without per-partition copies: its kernels use every SM
    /// wherever it is launched). Not in safe mode. Bound to the whole device instead, such an op
    /// of a latency-critical client would wait under TPOT-First behind the client's own standing
    /// reservation for ever.
    pub(super) fn remote_shares_whole_device(&self, d: &OpDesc) -> bool {
        let Some(r) = self.remote.as_ref() else { return false };
        if !r.shares_whole_device || r.client.safe_mode().is_some() {
            return false;
        }
        let coresident = match d {
            OpDesc::Kernel(k) => {
                k.attributes().needs_coresidency()
                    || k.attributes().cluster().is_some()
                    || smallest_refuses(smallest_node(&self.arbiter.pool), &self.partitions, d)
            }
            OpDesc::Graph(_) => true,
            _ => false,
        };
        if !coresident {
            return false;
        }
        let root = self.arbiter.pool.root();
        let probe = probe_mask(self.config.has_lazy_nodes(), &self.arbiter.pool, &self.partitions);
        let asked = |n: NodeId| probe.as_ref().is_none_or(|m| m[n.index()]);
        self.partitions[root.0 as usize].can_execute(d).is_ok()
            && self
                .arbiter
                .pool
                .nodes()
                .iter()
                .all(|n| n.id == root || !asked(n.id) || self.partitions[n.id.0 as usize].can_execute(d).is_err())
    }

    /// Whether this client holds back the launches it shares on the whole device
    /// ([`Dispatcher::remote_shares_whole_device`]) now: it is best-effort, the daemon's policy
    /// (its own too) guards latency-critical clients ([`Policy::guards_latency_clients`]) and the
    /// region's guard word says one of them is busy. Not in safe mode: the word is the daemon's.
    pub(super) fn remote_guarded(&self) -> bool {
        let Some(r) = self.remote.as_ref() else { return false };
        r.shares_whole_device
            && r.guards
            && r.client.safe_mode().is_none()
            && matches!(r.client.class(), crate::policy::ClientClass::BestEffort)
            && r.client.guard_since().is_some()
    }

    /// Reports a continued op before it is submitted. `false`: the up ring is full or the
    /// session refused it: do not continue now.
    pub(super) fn remote_continued(
        &mut self,
        ci: usize,
        op: OpId,
        node: NodeId,
        lane: vitamin_hal::LaneId,
        graph: bool,
    ) -> bool {
        let now = crate::daemon::now_ns();
        let Some(r) = self.remote.as_mut() else { return false };
        // The daemon disconnects a client past its limits: stay below them (not now, later).
        if r.client.outstanding() + r.client.pending() >= r.client.welcome().max_outstanding as usize {
            return false;
        }
        match r.client.continued(wire_id(ci, op), node.0, lane16(lane), now, graph) {
            Ok(ok) => ok,
            Err(e) => {
                tracing::debug!(error = %e, "continuation not reported to the daemon; not continued");
                false
            }
        }
    }

    /// A remotely placed op finished (or its submission was refused): report it up.
    pub(super) fn remote_completed(&mut self, ci: usize, op: OpId) {
        let now = crate::daemon::now_ns();
        let Some(r) = self.remote.as_mut() else { return };
        r.report_done(wire_id(ci, op), now, false);
    }

    /// Lookahead hints (ops that will want units once their predecessors complete) up to the
    /// daemon, which hands them to its policy's `prepare` (TPOT-First reserves for them).
    pub(super) fn remote_hints(&mut self, hints: &[crate::policy::Hint]) {
        // The daemon refuses a demand beyond the device (it disconnects the client).
        let units = self.arbiter.pool.node(self.arbiter.pool.root()).size();
        let Some(r) = self.remote.as_mut() else { return };
        for h in hints {
            let (kernel, grid, block) = match h.op.as_deref() {
                Some(OpDesc::Kernel(k)) => {
                    let key = crate::arbiter::LaunchKey::of(k);
                    (key.name_hash, key.grid, key.block)
                }
                _ => (0, [0; 3], [0; 3]),
            };
            let rec = wire::HintRecord {
                op: 0,
                kernel,
                grid,
                block,
                demand_units: h.demand_units.map_or(0, |u| u16::try_from(u.min(units)).unwrap_or(u16::MAX)),
                ready_at_ns: h.ready_at_ns.unwrap_or(0),
                deadline_ns: h.deadline_ns,
            };
            match r.client.hint(rec) {
                Ok(true) => r.hints_sent += 1,
                Ok(false) => break, // ring full: a hint is advice, dropped
                Err(e) => {
                    tracing::debug!(error = %e, "hint not sent");
                    break;
                }
            }
        }
    }

    /// The deciding half of a round under a daemon: safe mode and reconnection, ready records
    /// up, bindings down and their submission. Returns how many ops it submitted.
    pub(super) fn remote_round(&mut self) -> Result<usize, DispatchError> {
        if !self.remote_session_usable() {
            return Ok(0);
        }
        let Some(r) = self.remote.as_mut() else { return Ok(0) };
        // Completions the ring had no room for, then the ready ops not sent yet.
        let mut kept = Vec::new();
        for (id, at, not_run) in std::mem::take(&mut r.unsent) {
            if let Ok(false) = r.send_done(id, at, not_run) {
                kept.push((id, at, not_run));
            }
        }
        r.unsent = kept;
        let mut launched = self.remote_launch_first()?;
        let Some(r) = self.remote.as_mut() else { return Ok(launched) };
        let root_units = self.arbiter.pool.node(self.arbiter.pool.root()).size() as u16;
        let (max_ready, max_out) = (r.client.welcome().max_ready as usize, r.client.welcome().max_outstanding as usize);
        for e in &self.ready {
            let id = wire_id(e.client, e.op);
            if r.sent.contains(&id) {
                continue;
            }
            // Within the daemon's limits (it disconnects a client past them): the rest next round.
            if r.client.pending() >= max_ready || r.client.pending() + r.client.outstanding() >= max_out {
                break;
            }
            let (flags, key) = match &*e.desc {
                OpDesc::Kernel(k) => {
                    let a = k.attributes();
                    let mut f = 0;
                    if a.needs_coresidency() {
                        f |= wire::FLAG_COOPERATIVE;
                    }
                    if a.cluster().is_some() {
                        f |= wire::FLAG_CLUSTER;
                    }
                    (f, crate::arbiter::LaunchKey::of(k))
                }
                OpDesc::Graph(_) => (wire::FLAG_GRAPH, crate::arbiter::LaunchKey::graph()),
                _ => continue,
            };
            // Cooperative, cluster and graph launches run unchanged only on some nodes: ask for
            // the smallest that does (checked here, where the partitions are).
            let floor = r.floors.get(&id).copied().unwrap_or_else(|| {
                if flags == 0 && !smallest_refuses(smallest_node(&self.arbiter.pool), &self.partitions, &e.desc) {
                    return 0;
                }
                let mut best = root_units;
                let mut why = None;
                let probe = probe_mask(self.config.has_lazy_nodes(), &self.arbiter.pool, &self.partitions);
                for n in self.arbiter.pool.nodes() {
                    if probe.as_ref().is_some_and(|m| !m[n.id.index()]) {
                        continue;
                    }
                    let size = n.size() as u16;
                    match self.partitions[n.id.0 as usize].can_execute(&e.desc) {
                        Ok(()) if size < best => best = size,
                        Err(err) if why.is_none() => why = Some(err),
                        _ => {}
                    }
                }
                if let Some(err) = why.filter(|_| r.logged_floors.insert(key.name_hash)) {
                    // Once per kernel: why this client cannot run it on small nodes (a floor
                    // of the whole device serializes it against every other client).
                    tracing::info!(
                        kernel = %kernel_name(&e.desc),
                        floor = best,
                        device = root_units,
                        reason = %err,
                        "launch runs unchanged only on nodes this large"
                    );
                }
                best
            });
            let rec = ReadyRecord {
                op: id,
                flags,
                min_units: floor,
                kernel: key.name_hash,
                grid: key.grid,
                block: key.block,
                smem: key.shared_mem_bytes,
                resident_per_unit: u16::try_from(key.resident_per_unit).unwrap_or(u16::MAX),
                ready_since_ns: crate::daemon::now_ns(),
                deadline_ns: self.clients[e.client].info.deadline_ns,
            };
            match r.client.ready(rec) {
                Ok(true) => {
                    r.sent.insert(id);
                    r.sent_total += 1;
                }
                Ok(false) => break, // ring full: the rest next round
                Err(e) => {
                    tracing::debug!(error = %e, "ready record not sent");
                    break;
                }
            }
        }
        r.client.flush();
        let mut got = std::mem::take(&mut r.bindings);
        got.clear();
        if let Err(e) = r.client.bindings(&mut got, Duration::ZERO) {
            tracing::debug!(error = %e, "no bindings this round");
        }
        let mut n = 0;
        for b in got.drain(..) {
            if self.apply_binding(b)? {
                n += 1;
            }
        }
        if let Some(r) = self.remote.as_mut() {
            r.bindings = got;
        }
        if n > 0 {
            // Keep the ready queue in arrival order for the next round's records.
            self.ready.sort_by_key(|e| e.seq);
            self.stats.bound += n as u64;
        }
        launched += n;
        Ok(launched)
    }

    /// Submits the op a binding names on its node and lane, or returns the binding.
    fn apply_binding(&mut self, b: Binding) -> Result<bool, DispatchError> {
        let Some(idx) = self.ready.iter().position(|e| wire_id(e.client, e.op) == b.op) else {
            // The op failed or left meanwhile: give the lease accounting back.
            if let Some(r) = self.remote.as_mut() {
                r.report_done(b.op, crate::daemon::now_ns(), false);
            }
            return Ok(false);
        };
        let (ci, op, desc) = {
            let e = &self.ready[idx];
            (e.client, e.op, e.desc.clone())
        };
        let node = NodeId(b.node);
        let lane = vitamin_hal::LaneId::from(b.lane);
        let runs = (node.0 as usize) < self.partitions.len()
            && (lane as usize) < self.config.lanes_per_node
            && match self.partitions[node.0 as usize].can_execute(&desc) {
                Ok(()) => true,
                Err(err) => {
                    tracing::debug!(kernel = %kernel_name(&desc), node = node.0, reason = %err, "binding refused");
                    false
                }
            };
        if !runs {
            // Returned not run and sent again. A cluster launch keeps its floor: node shape, not
            // size, decides where it runs (a larger node may refuse what a smaller one runs), and
            // the daemon, told by the NOT_RUN flag, proposes no node within the refusing one for
            // this client's cluster launches again; a floor raised past the refusing node's size
            // would also rule out the smaller nodes that run it (ResNet-50's cluster launches,
            // refused on SM 120-131 of the H100, ran on SM 0-7: docs/results/eval.md, mixed-graph
            // run 16). Any other launch is sent with a higher floor: the smallest size above this
            // node's among the nodes that run it.
            let size = self.arbiter.pool.nodes().get(node.0 as usize).map_or(0, |n| n.size() as u16);
            let root = self.arbiter.pool.node(self.arbiter.pool.root()).size() as u16;
            let cluster = matches!(&*desc, OpDesc::Kernel(k) if k.attributes().cluster().is_some());
            let keeps_floor = cluster && (node.0 as usize) < self.partitions.len() && size < root;
            let next = (!keeps_floor).then(|| {
                let probe = probe_mask(self.config.has_lazy_nodes(), &self.arbiter.pool, &self.partitions);
                self.arbiter
                    .pool
                    .nodes()
                    .iter()
                    .map(|n| (n.size() as u16, n.id))
                    .filter(|&(_, id)| probe.as_ref().is_none_or(|m| m[id.index()]))
                    .filter(|&(s, id)| s > size && self.partitions[id.0 as usize].can_execute(&desc).is_ok())
                    .map(|(s, _)| s)
                    .min()
                    .unwrap_or(root)
            });
            if let Some(r) = self.remote.as_mut() {
                r.refused += 1;
                r.sent.remove(&b.op);
                if let Some(next) = next {
                    r.floors.insert(b.op, next);
                }
                r.report_done(b.op, crate::daemon::now_ns(), true);
            }
            self.stats.rejected += 1;
            return Ok(false);
        }
        let submitted = self.submit_at(ci, op, desc, Some(node), lane, false)?;
        if let Some(r) = self.remote.as_mut() {
            r.sent.remove(&b.op);
            if submitted {
                r.floors.remove(&b.op);
            } else {
                r.refused += 1;
                r.report_done(b.op, crate::daemon::now_ns(), false);
            }
        }
        if submitted {
            let e = self.ready.swap_remove(idx);
            self.in_ready.remove(&(e.client, e.op));
        }
        Ok(submitted)
    }

    /// Checks the session; in safe mode tries to re-register, and past the fallback time drops
    /// the daemon (in-process binding from now on). Returns whether bindings can come now.
    fn remote_session_usable(&mut self) -> bool {
        let Some(r) = self.remote.as_mut() else { return false };
        if r.client.check_daemon() {
            r.gone_since = None;
            return true;
        }
        let since = *r.gone_since.get_or_insert_with(Instant::now);
        if r.client.safe_mode().is_some_and(|w| w.starts_with("disconnected")) {
            // The daemon cut this client off (a record it refused, a flood, a stall): registering
            // again would repeat it. This process decides alone from now on.
            let why = r.client.safe_mode().unwrap_or_default().to_owned();
            tracing::warn!(reason = %why, "the vitamin daemon disconnected this process: binding in-process from now on");
            self.drop_remote();
            return false;
        }
        if r.last_attempt.elapsed() >= RECONNECT_EVERY {
            r.last_attempt = Instant::now();
            match r.client.reconnect() {
                Ok(_waiting) => {
                    // Every op that waited for a binding is sent again to the new daemon.
                    r.sent.clear();
                    r.gone_since = None;
                    r.reconnects += 1;
                    tracing::warn!("re-registered with the vitamin daemon");
                    return true;
                }
                Err(e) => tracing::debug!(error = %e, "the vitamin daemon is not back yet"),
            }
        }
        if since.elapsed() >= r.fallback_after {
            let why = r.client.safe_mode().unwrap_or("gone").to_owned();
            tracing::warn!(
                reason = %why,
                after_s = r.fallback_after.as_secs_f64(),
                "the vitamin daemon did not come back: binding in-process from now on (this process alone decides)"
            );
            self.drop_remote();
        }
        false
    }

    /// Leaves the daemon: ops placed under it stay in flight (their completions no longer go
    /// up), later ops are bound by the local policy.
    fn drop_remote(&mut self) {
        self.remote = None;
        // Their nodes were never leased in the local pool (`Inflight::pooled` stays false).
        for inf in self.inflight.values_mut() {
            inf.remote = false;
        }
    }
}

/// Which nodes a client under a daemon asks whether they run a constrained (cooperative, cluster or
/// graph) launch: `None`, every node; in a pool with nodes created on demand (`lazy`: an on-demand
/// pool, or remainders created at first use) the nodes whose partition exists and the first node
/// of each size, because asking a node creates its partition (a cuBLAS job's cluster
/// launches would create all 59 at the first one: docs/results/eval.md, Overhead and footprint). A
/// node left out counts as unable, so the floor sent to the daemon can be higher than the smallest
/// node that would run the launch, never lower.
fn probe_mask<P: PhysicalPartition>(lazy: bool, pool: &Pool, partitions: &[NodePartition<P>]) -> Option<Vec<bool>> {
    if !lazy {
        return None;
    }
    let mut mask: Vec<bool> = partitions.iter().map(NodePartition::is_created).collect();
    let mut last = None;
    for &n in pool.nodes_by_size() {
        let size = pool.node(n).size();
        if last != Some(size) {
            mask[n.index()] = true;
            last = Some(size);
        }
    }
    Some(mask)
}

#[cfg(test)]
mod tests {
    use vitamin_hal::sim::SimBackend;
    use vitamin_hal::{Dim3, FunctionKind, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes};

    use super::*;
    use crate::policy::{SchedState, ThroughputOriented};
    use crate::pool::NodeState;
    use crate::profile::Profiles;

    /// The Throughput policy, asked over a mirror of a lease view, refuses to continue a wide
    /// kernel on a small lease while the device is otherwise free, and continues it once other
    /// clients hold the rest of the device.
    #[test]
    fn a_small_lease_is_left_for_a_wider_free_node_and_kept_when_the_rest_is_held() {
        let top = SimBackend::default_device().topology().clone();
        let pool = Pool::build(&top);
        let small = *pool.nodes_by_size().first().expect("nodes");
        let k = KernelLaunch::new(
            FunctionRef::new(1, FunctionKind::Kernel, "wide"),
            Dim3::new(132 * 16, 1, 1),
            Dim3::new(256, 1, 1),
            0,
            KernelArgs::from_layout(Vec::new(), Vec::new()).unwrap(),
            LaunchAttributes::none(),
        );
        let profiles = Profiles::new("test");
        let lanes = vec![Vec::new(); pool.nodes().len()];
        let ask = |view: &[u32]| {
            let mirror = mirror_pool(pool.hierarchy(), view);
            let state = SchedState {
                pool: &mirror,
                now_ns: 0,
                profiles: &profiles,
                clients: &[],
                lane_busy_until: &lanes,
                cluster_refused: &crate::policy::NO_CLUSTER_REFUSALS,
            };
            let op = ReadyOpView {
                client: MIRROR_SELF,
                op: OpId(7),
                kernel: &k,
                ready_since_ns: 0,
                seq: 1,
                deadline_ns: None,
                min_units: 0,
            };
            (ThroughputOriented::default().continue_on_lease(&op, small, &state), mirror)
        };
        let mut view = vec![LeaseState::None as u32; pool.nodes().len()];
        view[small.index()] = LeaseState::Open as u32;
        let (alone, mirror) = ask(&view);
        assert!(matches!(mirror.state(small), NodeState::Leased { holder: MIRROR_SELF, .. }));
        assert!(!alone, "a wide kernel alone on the device must not stay on an 8-unit lease");
        // Every other leaf held by other clients: nothing wider is free, so it continues.
        for &l in pool.leaves() {
            if l != small {
                view[l.index()] = LeaseState::Foreign as u32;
            }
        }
        let (crowded, mirror) = ask(&view);
        assert_eq!(mirror.active_units().len(), top.unit_count());
        assert!(crowded, "with the rest of the device held, the lease is the best it can get");
    }
}
