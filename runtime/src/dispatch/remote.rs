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
//! The local pool's lease state is not used for remotely bound work (the daemon owns it); the
//! local policy only serves the fallback. Launch-first and eager binding of fresh ops, which
//! need a local decision, are off under a daemon (eager continuation stays).
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
use vitamin_hal::{Backend, OpDesc, PhysicalPartition};

use super::{DispatchError, Dispatcher};
use crate::daemon::client::{Binding, DaemonClient};
use crate::daemon::wire::{self, ReadyRecord};
use crate::daemon::DaemonError;
use crate::policy::Policy;
use crate::pool::NodeId;
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
    /// Completions the up ring had no room for (wire id, completed at), sent first next round.
    unsent: Vec<(u64, u64)>,
    /// Floors (units) for ops a bound node could not run unchanged.
    floors: HashMap<u64, u16>,
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
            bindings: Vec::new(),
            gone_since: None,
            last_attempt: Instant::now(),
            fallback_after: DEFAULT_FALLBACK_AFTER,
            refused: 0,
            sent_total: 0,
            reconnects: 0,
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

/// The wire id of op `op` of local client `ci` (48 bits of op id, 16 of client).
fn wire_id(ci: usize, op: OpId) -> u64 {
    ((ci as u64) << 48) | (op.0 & ((1 << 48) - 1))
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

    /// Reports a continued op before it is submitted. `false`: the up ring is full or the
    /// session refused it: do not continue now.
    pub(super) fn remote_continued(&mut self, ci: usize, op: OpId, node: NodeId, lane: vitamin_hal::LaneId) -> bool {
        let now = crate::daemon::now_ns();
        let Some(r) = self.remote.as_mut() else { return false };
        // The daemon disconnects a client past its limits: stay below them (not now, later).
        if r.client.outstanding() + r.client.pending() >= r.client.welcome().max_outstanding as usize {
            return false;
        }
        match r.client.continued(wire_id(ci, op), node.0, lane16(lane), now) {
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
        let id = wire_id(ci, op);
        match r.client.complete(id, now) {
            Ok(true) => {}
            Ok(false) => r.unsent.push((id, now)),
            Err(DaemonError::Wire(wire::WireError::UnknownOp(_))) => {}
            Err(e) => tracing::debug!(error = %e, "completion not reported to the daemon"),
        }
    }

    /// Lookahead hints (ops that will want units once their predecessors complete) up to the
    /// daemon, which hands them to its policy's `prepare` (TPOT-First reserves for them).
    pub(super) fn remote_hints(&mut self, hints: &[crate::policy::Hint]) {
        // The daemon refuses a demand beyond the device (it disconnects the client).
        let units = self.pool.node(self.pool.root()).size();
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
        for (id, at) in std::mem::take(&mut r.unsent) {
            if let Ok(false) = r.client.complete(id, at) {
                kept.push((id, at));
            }
        }
        r.unsent = kept;
        let root_units = self.pool.node(self.pool.root()).size() as u16;
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
                OpDesc::Graph(_) => (
                    wire::FLAG_GRAPH,
                    crate::arbiter::LaunchKey { name_hash: 0, grid: [0; 3], block: [0; 3], shared_mem_bytes: 0 },
                ),
                _ => continue,
            };
            // Cooperative, cluster and graph launches run unchanged only on some nodes: ask for
            // the smallest that does (checked here, where the partitions are).
            let floor = r.floors.get(&id).copied().unwrap_or_else(|| {
                if flags == 0 {
                    return 0;
                }
                let mut best = root_units;
                for n in self.pool.nodes() {
                    let size = n.size() as u16;
                    if size < best && self.partitions[n.id.0 as usize].can_execute(&e.desc).is_ok() {
                        best = size;
                    }
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
        Ok(n)
    }

    /// Submits the op a binding names on its node and lane, or returns the binding.
    fn apply_binding(&mut self, b: Binding) -> Result<bool, DispatchError> {
        let Some(idx) = self.ready.iter().position(|e| wire_id(e.client, e.op) == b.op) else {
            // The op failed or left meanwhile: give the lease accounting back.
            if let Some(r) = self.remote.as_mut() {
                let _ = r.client.complete(b.op, crate::daemon::now_ns());
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
            && self.partitions[node.0 as usize].can_execute(&desc).is_ok();
        if !runs {
            // Returned as completed; sent again with a higher floor: the smallest size above this
            // node's among the nodes that run it (node shape, not size alone, decides for cluster
            // launches, so a larger node may refuse what a smaller one runs).
            let size = self.pool.nodes().get(node.0 as usize).map_or(0, |n| n.size() as u16);
            let root = self.pool.node(self.pool.root()).size() as u16;
            let next = self
                .pool
                .nodes()
                .iter()
                .map(|n| (n.size() as u16, n.id))
                .filter(|&(s, id)| s > size && self.partitions[id.0 as usize].can_execute(&desc).is_ok())
                .map(|(s, _)| s)
                .min()
                .unwrap_or(root);
            if let Some(r) = self.remote.as_mut() {
                r.refused += 1;
                r.sent.remove(&b.op);
                r.floors.insert(b.op, next);
                let _ = r.client.complete(b.op, crate::daemon::now_ns());
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
                let _ = r.client.complete(b.op, crate::daemon::now_ns());
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
