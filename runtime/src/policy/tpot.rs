//! TPOT-First: Throughput-Oriented plus protection of decode steps of latency-critical clients.
//!
//! - **Standing reservation**: each latency-critical client keeps a reserved node of `M_TPOT`
//!   units: the smallest pool size whose predicted time for the client's latest kernel (its
//!   profile) fits in 80% of its TPOT target (a leaf until a kernel was seen), raised by what its
//!   steps took. A kernel alone under-sizes a decode step of many kernels: the node was 8 units,
//!   the smallest, for the serving loop and the decoder in every TPOT-First run on the H200, the
//!   serving loop's TPOT 32-92 ms per request against 71-89 ms targets (docs/results/eval.md,
//!   serving run 2). So each busy period of the client that ends with nothing of it outstanding
//!   ([`Policy::on_idle`]: a step of a loop that synchronizes per token) is measured: one that took
//!   more than 80% of the target raises the client's floor to the next size above its standing
//!   node; after [`SHRINK_AFTER`] periods in a row within half of that, the floor steps one size
//!   down (the standing node moves to the narrower size only where that drains no other client's
//!   lease). A graph launch that ran longer than 80% of the target ([`Policy::on_graph_time`]: a
//!   decode step replayed as one CUDA graph) raises the floor at once to what perfect scaling
//!   predicts for it, at most twice the size of the node it ran on (the widest size allowed where
//!   none reaches that), unless it ran no faster than the previous slow launch did on a narrower
//!   node; one within 80% of the target on a node wider
//!   than the floor sets the floor to the size perfect scaling predicts for it (a bound for a step
//!   whose speed-up is sublinear), so a decoder that warmed up on wide nodes meets contention on a
//!   node sized for it instead of rising from a leaf. Once a client has run a graph launch, its
//!   floor follows its graph launches alone: [`SHRINK_AFTER`] of them in a row within half of the
//!   headroom step it down, and its busy periods move it neither way: between its decode steps
//!   they are other work. (A CUDA-graph decoder's floor stepped down from 124 to 100 units in 9 s
//!   while its graph steps took 73% of the target: only busy periods holding no decode step can
//!   have been quick enough, an eager prefill's small kernels for one. 15 of its first 18 requests
//!   had tokens of 27-55 ms; whether the step-downs caused them is not established:
//!   docs/results/eval.md, mixed-graph run 14. With the change the floor held 124 units in one H100
//!   round and 120 in the other, whose decoder ran on 8-32-unit leases beside its idle standing node:
//!   mixed-graph run 15.) Beside a
//!   best-effort client neither rule
//!   raises the floor to the whole device (see `floor_sizes`). Under a daemon the busy periods did
//!   not follow such a decoder's tokens: its floor rose a few times in 16 s while its tokens took
//!   19-45 ms against a 15.8 ms target (docs/results/eval.md, mixed-graph run 3). The standing
//!   node is re-reserved whenever its lease drains; where another client's lease covers it (a
//!   busy one, kept open by continuation, never drains by itself), it is reclaimed once the
//!   client's oldest op has waited a whole TPOT target with no node eligible. Once the standing
//!   node is the client's, its leases narrower than that node close: it continues on every lease
//!   it holds (beside ResNet-50 a CUDA-graph decoder ran 44-46 ms tokens for seconds, likely on
//!   such a lease; not traced: docs/results/eval.md, mixed-graph run 4). A standing node never
//!   leaves a best-effort client only units that refused its cluster launches
//!   ([`super::ClusterRefusals`]): the node moves up to the next size that leaves it others
//!   (`placeable_size`; docs/results/eval.md, mixed-graph run 16).
//! - **Deadlines**: a decode's deadline is the client's advised deadline, else the previous
//!   decode completion + the TPOT target.
//! - **Prepare**: for a lookahead hint (a decode recorded behind a copy, or advised), if the
//!   predicted completion on the standing node misses the deadline, the policy drops the standing
//!   reservation and reclaims the smallest wider node predicted to meet it (closing the gates of
//!   overlapping best-effort leases so they drain while the predecessor still runs).
//! - **Pick**: latency-critical ops first, earliest deadline first; then Throughput-Oriented.
//! - **Under a daemon**: a launch only the whole device runs is shared on the service partition
//!   (as Throughput-Oriented), never made to wait for standing reservations; a best-effort
//!   client's such launch waits while a latency-critical client has work outstanding, at most the
//!   dispatcher's `guard_hold_max` ([`Policy::guards_latency_clients`]); over the lease
//!   mirror a latency-critical client continues on every open lease (launch-first included) and
//!   a best-effort one by Throughput-Oriented's rule.
//! - **Select**: the prepared wider node, else the standing node, else the eligible node with the
//!   best prediction. Best-effort ops follow Throughput-Oriented. Graph launches of a
//!   latency-critical client: the prepared node, else the standing node, else the widest eligible.

use std::collections::{HashMap, HashSet};

use vitamin_hal::KernelLaunch;

use super::throughput::ThroughputOriented;
use super::{ClientClass, Completion, Hint, Policy, Preparation, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, NodeState, Reservation};

/// Reservation tag of standing TPOT reservations.
pub const TAG_STANDING: u64 = 2;
/// Reservation tag of deadline-driven wider reservations.
pub const TAG_DEADLINE: u64 = 3;

/// Fraction of the TPOT target the standing node's prediction must fit in.
pub const STANDING_HEADROOM: f64 = 0.8;

/// How much faster (a fraction of its time) a slow op must have run on a wider node than the
/// client's previous slow op for a further slow op to widen the floor again.
pub const SCALING_EVIDENCE: f64 = 0.1;

/// Steps in a row within half of the headroom (busy periods, or graph launches for a client
/// whose steps are graph launches) before a client's size floor steps down.
pub const SHRINK_AFTER: u32 = 64;

/// The TPOT-First policy. See the module docs.
#[derive(Debug, Default)]
pub struct TpotFirst {
    tput: ThroughputOriented,
    standing: HashMap<HolderId, NodeId>,
    widened: HashMap<HolderId, (NodeId, u64)>,
    decode: HashMap<HolderId, KernelLaunch>,
    last_done: HashMap<HolderId, u64>,
    /// Latency-critical clients: when their latest op, timed graph launch or busy period ended.
    last_active: HashMap<HolderId, u64>,
    /// Latency-critical clients with a ready op in the last round: since when the oldest waits.
    lc_waiting: HashMap<HolderId, u64>,
    /// Latency-critical clients holding a lease narrower than their standing node's size while
    /// that node is not theirs: since when.
    narrow_since: HashMap<HolderId, u64>,
    /// Best-effort clients with a ready op in the last round: since when the oldest waits, and
    /// the largest size floor among their ready ops.
    be_waiting: HashMap<HolderId, (u64, usize)>,
    /// Per latency-critical client: the least standing size its measured steps asked for, and
    /// how many steps in a row fit within half of the headroom.
    floor: HashMap<HolderId, (usize, u32)>,
    /// Latency-critical clients whose steps are graph launches ([`Policy::on_graph_time`] was
    /// called for them): their floor follows those launches, not their busy periods.
    graph_steps: HashSet<HolderId>,
    /// Per latency-critical client: the node size and time of its last op slower than the
    /// headroom ([`Policy::on_graph_time`]).
    last_slow: HashMap<HolderId, (usize, f64)>,
}

/// One measured step of a client with a floor (`f`: its size and the run of quick steps): a quick
/// one (within half of the headroom) lengthens the run, and [`SHRINK_AFTER`] in a row step the
/// floor down one of `sizes`; any other ends the run.
fn count_step(f: &mut (usize, u32), quick: bool, sizes: &[usize]) {
    f.1 = if quick { f.1 + 1 } else { 0 };
    if f.1 >= SHRINK_AFTER {
        f.0 = sizes.iter().rev().find(|&&s| s < f.0).copied().unwrap_or(0);
        f.1 = 0;
    }
}

fn target_of(state: &SchedState<'_>, h: HolderId) -> Option<u64> {
    match state.client(h)?.class {
        ClientClass::LatencyCritical { tpot_target_ns } => Some(tpot_target_ns),
        ClientClass::BestEffort => None,
    }
}

impl TpotFirst {
    /// The node prepared for latency-critical client `h`, if eligible: the wider node reclaimed
    /// for it (used once), else its standing reservation.
    fn prepared_node(&mut self, h: HolderId, eligible: &[NodeId]) -> Option<NodeId> {
        if let Some(&(n, _)) = self.widened.get(&h) {
            if eligible.contains(&n) {
                self.widened.remove(&h);
                return Some(n);
            }
        }
        self.standing.get(&h).copied().filter(|n| eligible.contains(n))
    }

    fn deadline(&self, state: &SchedState<'_>, h: HolderId, advised: Option<u64>) -> Option<u64> {
        advised.or_else(|| Some(self.last_done.get(&h)? + target_of(state, h)?))
    }

    /// Nodes in ascending size that `h` could be given, with their size.
    fn sizes(state: &SchedState<'_>) -> Vec<usize> {
        let mut s: Vec<usize> = state.pool.nodes_by_size().iter().map(|&n| state.pool.node(n).size()).collect();
        s.dedup();
        s
    }

    /// The sizes a measured floor may rise to: every pool size, but below the whole device while
    /// a best-effort client is registered beside the latency-critical ones (on a pool of more than
    /// one size). A whole-device standing node leaves the best-effort client no node at all, so it
    /// is let go whenever its client idles and drained back at the next request (a CUDA-graph
    /// decoder beside ResNet-50: docs/results/eval.md, mixed-graph runs 7-8).
    fn floor_sizes(state: &SchedState<'_>) -> Vec<usize> {
        let mut sizes = Self::sizes(state);
        if sizes.len() > 1 && state.clients.iter().any(|c| c.class == ClientClass::BestEffort) {
            sizes.pop();
        }
        sizes
    }

    /// `h`'s measured floor, within [`Self::floor_sizes`] now: a floor measured while `h` was
    /// alone may be the whole device, and a best-effort client registering later must not find
    /// that standing node. (The serving loop's floor was the whole device at start-up, before
    /// ResNet-50 registered; a second into the window its standing node was still the whole
    /// device, which ResNet-50's lease overlapped, and it ran on a 32-unit lease:
    /// docs/results/eval.md, serving-graph run 1, the daemon status in
    /// `serving-graph-run1-daemon.tgz`.)
    fn floor_now(&self, state: &SchedState<'_>, h: HolderId) -> usize {
        let floor = self.floor.get(&h).map_or(0, |f| f.0);
        Self::floor_sizes(state).last().map_or(floor, |&top| floor.min(top))
    }

    fn standing_size(&self, state: &SchedState<'_>, h: HolderId) -> usize {
        let (Some(k), Some(target)) = (self.decode.get(&h), target_of(state, h)) else {
            return self.floor_now(state, h).max(state.min_units());
        };
        let budget = target as f64 * STANDING_HEADROOM;
        let sizes = Self::sizes(state);
        let floor = self.floor_now(state, h);
        sizes
            .iter()
            .copied()
            .find(|&m| m >= floor && state.profiles.estimate_ns(k, m) <= budget)
            .unwrap_or_else(|| sizes.last().copied().unwrap_or(1))
    }

    /// Whether a standing node `n` of `h` would leave a best-effort client nowhere for its cluster
    /// launches: the units outside `n` lie within a set that refused one of them
    /// ([`super::ClusterRefusals`]). A 120-unit standing node on SM 0-119 of the H100 left ResNet-50
    /// SM 120-131, which refused its cluster launches: its ops waited for seconds (152-187 refused
    /// bindings per round, against none beside a 124-unit node on SM 8-131: docs/results/eval.md,
    /// mixed-graph run 16).
    fn starves_clusters(state: &SchedState<'_>, h: HolderId, n: NodeId) -> bool {
        let pool = state.pool;
        let rest = pool.node(pool.root()).units.difference(&pool.node(n).units);
        !rest.is_empty()
            && state.clients.iter().any(|c| {
                c.holder != h && c.class == ClientClass::BestEffort && state.cluster_refused.refuses(c.holder, &rest)
            })
    }

    /// `want`, or where every node of that size would starve a best-effort client's cluster
    /// launches ([`Self::starves_clusters`]), the next size up (within [`Self::floor_sizes`]) with a
    /// node that would not; `want` where there is none.
    fn placeable_size(state: &SchedState<'_>, h: HolderId, want: usize) -> usize {
        let refused = state
            .clients
            .iter()
            .any(|c| c.class == ClientClass::BestEffort && !state.cluster_refused.of(c.holder).is_empty());
        if !refused {
            return want;
        }
        let pool = state.pool;
        Self::floor_sizes(state)
            .into_iter()
            .filter(|&m| m >= want)
            .find(|&m| {
                pool.nodes_by_size().iter().any(|&n| pool.node(n).size() == m && !Self::starves_clusters(state, h, n))
            })
            .unwrap_or(want)
    }

    /// Whether `n` is `h`'s: reserved for it or leased by it.
    fn holds(state: &SchedState<'_>, h: HolderId, n: NodeId) -> bool {
        match *state.pool.state(n) {
            NodeState::Reserved { purpose } => purpose.holder == h,
            NodeState::Leased { holder, .. } => holder == h,
            _ => false,
        }
    }

    /// The node of `size` units that is cheapest to obtain: one that starves no best-effort
    /// client's cluster launches ([`Self::starves_clusters`]) first, then idle and eligible, then
    /// the one overlapping the fewest leases of best-effort clients.
    fn choose_node(state: &SchedState<'_>, h: HolderId, size: usize) -> Option<NodeId> {
        let pool = state.pool;
        let candidates = pool.nodes_by_size().iter().copied().filter(|&n| pool.node(n).size() == size);
        candidates
            .filter(|&n| match pool.state(n) {
                NodeState::Idle => true,
                NodeState::Reserved { purpose } => purpose.holder == h,
                _ => false,
            })
            .min_by_key(|&n| {
                let mut o = Vec::new();
                pool.overlapping_leased(n, &mut o);
                (Self::starves_clusters(state, h, n), !pool.is_eligible(n, h), o.len(), n)
            })
    }
}

impl Policy for TpotFirst {
    fn name(&self) -> &'static str {
        "tpot"
    }

    fn maintain(&mut self, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        self.tput.maintain(state, plan);
        let pool = state.pool;
        for c in state.clients {
            let h = c.holder;
            if target_of(state, h).is_none() {
                continue;
            }
            // A wider reservation is one-shot (Select consumes it); expire it if unused for one
            // TPOT target, and leave the standing reservation alone while it is pending.
            if let Some(&(n, since)) = self.widened.get(&h) {
                if state.now_ns.saturating_sub(since) <= target_of(state, h).unwrap_or(0) {
                    continue;
                }
                if matches!(pool.state(n), NodeState::Reserved { .. }) {
                    plan.push(Preparation::Unreserve(n));
                }
                self.widened.remove(&h);
            }
            // A latency-critical client continues on every lease it holds open, so a lease
            // narrower than its standing node (taken while that node was elsewhere, or smaller)
            // would keep its steps there for as long as it stays busy. Once the standing node is
            // its own, such leases close.
            if let Some(&n) = self.standing.get(&h) {
                let own = Self::holds(state, h, n);
                let size = pool.node(n).size();
                let narrower = pool.nodes_by_size().iter().copied().take_while(|&o| pool.node(o).size() < size);
                if own {
                    plan.extend(
                        narrower
                            .filter(|&o| matches!(*pool.state(o), NodeState::Leased { holder, .. } if holder == h))
                            .map(Preparation::Close),
                    );
                }
            }
            // A standing reservation idles while its client does. A best-effort client whose
            // oldest ready op has waited a whole TPOT target with no node eligible for it gets
            // the node while the latency-critical client has nothing ready: over the whole
            // device, a decoder's reservation left a training job no node at all while the
            // decoder waited for that job at start-up (docs/results/eval.md, mixed-graph run 5).
            // The node is reserved again once idle, or reclaimed as below. Only a client idle for
            // a whole target lets it go: between the tokens of a request the gap is short. Letting
            // it go there fits what a decoder beside ResNet-50 did with a 120-unit standing node:
            // 52% of its graph launches ran on the units ResNet-50's wide leases left free, and
            // its standing node stood idle (docs/results/eval.md, mixed-graph run 15, round 2).
            // With the rule as it is here, that recurred in 1 of 6 rounds (run 16), so it is not
            // the whole cause.
            if let Some(&n) = self.standing.get(&h) {
                let idle_reserved = matches!(*pool.state(n), NodeState::Reserved { purpose } if purpose.holder == h);
                let target = target_of(state, h).unwrap_or(0);
                let long_idle = self.last_active.get(&h).is_none_or(|&t| state.now_ns.saturating_sub(t) >= target);
                let starved = || {
                    self.be_waiting.iter().any(|(&b, &(since, min))| {
                        let mut e = Vec::new();
                        pool.eligible(b, min, &mut e);
                        state.now_ns.saturating_sub(since) >= target && e.is_empty()
                    })
                };
                if idle_reserved && long_idle && !self.lc_waiting.contains_key(&h) && starved() {
                    plan.push(Preparation::Unreserve(n));
                    continue;
                }
            }
            let want = Self::placeable_size(state, h, self.standing_size(state, h));
            let current = self.standing.get(&h).copied();
            let keep = current.filter(|&n| pool.node(n).size() == want);
            match keep {
                Some(n) => {
                    // Reserved, leased by h or being reclaimed need nothing. Idle is re-reserved
                    // where nothing overlaps it. Under another client's busy lease (overlapping
                    // it, or on the node itself: a training job leased the whole device once an
                    // idle standing reservation of it was let go, and the decoder's next step
                    // waited 12 s, docs/results/eval.md, mixed-graph run 7) it cannot be
                    // reserved, and h's op waits for that lease to drain. A lease kept busy by
                    // continuation (a training job that took the whole device while h's lease
                    // drained) never drains by itself: once h's oldest op has waited a whole
                    // TPOT target with no node eligible for it, the standing node is reclaimed.
                    // (Reclaiming at once drains other clients at every short wait, which cost
                    // the simulated serving scenario most of TPOT-First's gain.)
                    //
                    // A client that continues on a narrower lease of its own never waits, and
                    // one slowed by that lease stays busy for good: beside ResNet-50 on the
                    // other 124 SMs a CUDA-graph decoder ran its steps on 8 SMs for seconds
                    // (docs/results/eval.md, mixed-graph run 6). Once it has held such a lease
                    // for a whole TPOT target, the standing node is reclaimed as well (then its
                    // narrower leases close, above).
                    let target = target_of(state, h).unwrap_or(0);
                    let size = pool.node(n).size();
                    let narrow = pool
                        .nodes_by_size()
                        .iter()
                        .take_while(|&&o| pool.node(o).size() < size)
                        .any(|&o| matches!(*pool.state(o), NodeState::Leased { holder, .. } if holder == h));
                    let own = Self::holds(state, h, n);
                    if narrow && !own {
                        self.narrow_since.entry(h).or_insert(state.now_ns);
                    } else {
                        self.narrow_since.remove(&h);
                    }
                    let stuck_narrow =
                        self.narrow_since.get(&h).is_some_and(|&since| state.now_ns.saturating_sub(since) >= target);
                    let idle = matches!(pool.state(n), NodeState::Idle);
                    let taken = matches!(*pool.state(n), NodeState::Leased { holder, .. } if holder != h);
                    if (idle || taken) && pool.pending_for(n).is_none() {
                        let r = Reservation { holder: h, tag: TAG_STANDING };
                        let starved =
                            self.lc_waiting.get(&h).is_some_and(|&since| state.now_ns.saturating_sub(since) >= target);
                        if idle && pool.is_eligible(n, h) {
                            plan.push(Preparation::Reserve(n, r));
                        } else if stuck_narrow {
                            plan.push(Preparation::Reclaim(n, r));
                            self.narrow_since.remove(&h);
                        } else if starved {
                            let mut e = Vec::new();
                            pool.eligible(h, 0, &mut e);
                            if e.is_empty() {
                                plan.push(Preparation::Reclaim(n, r));
                            }
                        }
                    }
                }
                None => {
                    let chosen = Self::choose_node(state, h, want);
                    // A narrower floor moves the standing node only where no other client's lease
                    // overlaps the new node: such a move drains that lease, and the client's step
                    // waits for the drain, to give back a few units. (Stepping down from 124 to
                    // 120 units moved the serving loop's node onto ResNet-50's 8-unit lease, which
                    // drained with 192 ops outstanding, and the floor rose again: a third of a
                    // round's requests missed their TPOT target, docs/results/eval.md,
                    // serving-graph run 3.)
                    let drains_others = |n: NodeId| {
                        let mut o = Vec::new();
                        pool.overlapping_leased(n, &mut o);
                        o.iter().any(|&l| matches!(*pool.state(l), NodeState::Leased { holder, .. } if holder != h))
                    };
                    let shrink = current.filter(|&o| pool.node(o).size() > want);
                    if let Some(o) = shrink.filter(|_| chosen.is_none_or(drains_others)) {
                        if Self::holds(state, h, o) {
                            continue;
                        }
                        if pool.is_eligible(o, h) && matches!(pool.state(o), NodeState::Idle) {
                            plan.push(Preparation::Reserve(o, Reservation { holder: h, tag: TAG_STANDING }));
                            continue;
                        }
                    }
                    if let Some(old) = current {
                        if matches!(pool.state(old), NodeState::Reserved { purpose } if purpose.holder == h) {
                            plan.push(Preparation::Unreserve(old));
                        }
                    }
                    if let Some(n) = chosen {
                        self.standing.insert(h, n);
                        let r = Reservation { holder: h, tag: TAG_STANDING };
                        plan.push(if pool.is_eligible(n, h) && matches!(pool.state(n), NodeState::Idle) {
                            Preparation::Reserve(n, r)
                        } else {
                            Preparation::Reclaim(n, r)
                        });
                    }
                }
            }
        }
    }

    fn prepare(&mut self, hint: &Hint, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        let h = hint.client;
        if target_of(state, h).is_none() || self.widened.contains_key(&h) {
            return;
        }
        let Some(k) = hint.op.as_deref().and_then(|o| o.as_kernel()) else { return };
        let Some(deadline) = self.deadline(state, h, hint.deadline_ns) else { return };
        let Some(&standing) = self.standing.get(&h) else { return };
        let pool = state.pool;
        let ready = hint.ready_at_ns.unwrap_or(state.now_ns).max(state.now_ns);
        let m_s = pool.node(standing).size();
        if ready as f64 + state.profiles.estimate_ns(k, m_s) <= deadline as f64 {
            return;
        }
        // At risk: the smallest wider node containing the standing one that meets the deadline,
        // else the widest such node.
        let containing: Vec<NodeId> = pool
            .nodes_by_size()
            .iter()
            .copied()
            .filter(|&n| pool.node(n).size() > m_s && pool.node(standing).units.is_subset(&pool.node(n).units))
            .collect();
        let target = containing
            .iter()
            .copied()
            .find(|&n| ready as f64 + state.profiles.estimate_ns(k, pool.node(n).size()) <= deadline as f64)
            .or_else(|| containing.last().copied());
        if let Some(n) = target {
            if matches!(pool.state(standing), NodeState::Reserved { purpose } if purpose.holder == h) {
                plan.push(Preparation::Unreserve(standing));
            }
            plan.push(Preparation::Reclaim(n, Reservation { holder: h, tag: TAG_DEADLINE }));
            self.widened.insert(h, (n, state.now_ns));
        }
        self.decode.insert(h, k.clone());
    }

    fn begin_round(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) {
        self.lc_waiting.clear();
        self.be_waiting.clear();
        for o in queue {
            if target_of(state, o.client).is_some() {
                let since = self.lc_waiting.entry(o.client).or_insert(o.ready_since_ns);
                *since = (*since).min(o.ready_since_ns);
            } else {
                let w = self.be_waiting.entry(o.client).or_insert((o.ready_since_ns, 0));
                *w = (w.0.min(o.ready_since_ns), w.1.max(o.min_units));
            }
        }
        let best_effort: Vec<ReadyOpView<'_>> =
            queue.iter().copied().filter(|o| target_of(state, o.client).is_none()).collect();
        self.tput.plan_round(&best_effort, state);
    }

    fn pick(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) -> Option<usize> {
        let lc = queue
            .iter()
            .enumerate()
            .filter(|(_, o)| target_of(state, o.client).is_some())
            .min_by_key(|(_, o)| (self.deadline(state, o.client, o.deadline_ns).unwrap_or(u64::MAX), o.seq));
        match lc {
            Some((i, _)) => Some(i),
            None => self.tput.pick(queue, state),
        }
    }

    fn select(&mut self, op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        let h = op.client;
        if target_of(state, h).is_none() {
            return self.tput.select(op, eligible, state);
        }
        self.decode.entry(h).or_insert_with(|| op.kernel.clone());
        if let Some(n) = self.prepared_node(h, eligible) {
            return Some(n);
        }
        let pool = state.pool;
        eligible.iter().copied().min_by(|&a, &b| {
            let ta = state.profiles.estimate_ns(op.kernel, pool.node(a).size());
            let tb = state.profiles.estimate_ns(op.kernel, pool.node(b).size());
            ta.total_cmp(&tb).then(pool.node(a).size().cmp(&pool.node(b).size()))
        })
    }

    fn select_graph(&mut self, op: &ReadyGraphView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        let h = op.client;
        if target_of(state, h).is_none() {
            return self.tput.select_graph(op, eligible, state);
        }
        // A latency-critical graph (a captured decode step): the prepared wider node, else the
        // standing reservation, else the widest eligible node (no profile to size it by).
        if let Some(n) = self.prepared_node(h, eligible) {
            return Some(n);
        }
        super::widest(eligible, state.pool)
    }

    /// As Throughput-Oriented: a launch only the whole device runs unchanged (ResNet-50's cuDNN
    /// cluster kernels) goes to the service partition beside the other clients' leases. Bound to
    /// the whole device it would wait for every standing reservation, which stands as long as a
    /// latency-critical client is registered, idle or not: on the H200 a ResNet-50 job beside an
    /// idle serving loop never finished its warm-up (docs/results/eval.md, serving run 1).
    fn shares_whole_device(&self) -> bool {
        true
    }

    /// Such a shared launch of a best-effort client waits while a latency-critical client is
    /// busy: it runs on every unit, under the standing node too. Beside a CUDA-graph decoder on
    /// a 124-unit standing node, ResNet-50 put 1,788 and 4,447 launches there in 16 s
    /// (Throughput: 46 and 362) while 3% of the tokens took more than twice the median
    /// (docs/results/eval.md, mixed-graph runs 10-11).
    fn guards_latency_clients(&self) -> bool {
        true
    }

    fn continue_on_lane(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        target_of(state, op.client).is_some() || self.tput.continue_on_lane(op, node, state)
    }

    /// A latency-critical client's graph continues on every lease it holds (its standing node
    /// and the narrow-lease reclaim of `maintain` move it); a best-effort one's by
    /// Throughput-Oriented's rule.
    fn continue_graph(&mut self, client: HolderId, node: NodeId, state: &SchedState<'_>) -> bool {
        target_of(state, client).is_some() || self.tput.continue_graph(client, node, state)
    }

    /// Under a daemon, over the mirror of its lease view: a latency-critical client continues on
    /// every lease it holds open (its next decode goes out at once, launch-first included), a
    /// best-effort client by Throughput-Oriented's rule (it leaves a small lease for a clearly
    /// better free node).
    fn continues_from_leases(&self) -> bool {
        true
    }

    fn continue_on_lease(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        target_of(state, op.client).is_some() || self.tput.continue_on_lease(op, node, state)
    }

    /// A latency-critical client's busy period (a step, for a loop that synchronizes per token)
    /// against its target on the standing node's size: see the module docs.
    fn on_idle(&mut self, client: HolderId, busy_since_ns: u64, state: &SchedState<'_>) {
        if target_of(state, client).is_some() {
            self.last_active.insert(client, state.now_ns);
        }
        let (Some(target), Some(&n)) = (target_of(state, client), self.standing.get(&client)) else { return };
        // A client whose steps are graph launches is measured by them: its busy periods between
        // them are other work (an eager prefill of many small kernels, a copy), whose quick
        // periods would step the floor down and whose long ones would raise it.
        if self.graph_steps.contains(&client) {
            return;
        }
        let m = state.pool.node(n).size();
        let took = state.now_ns.saturating_sub(busy_since_ns) as f64;
        let budget = target as f64 * STANDING_HEADROOM;
        let sizes = Self::floor_sizes(state);
        let f = self.floor.entry(client).or_insert((0, 0));
        if took > budget {
            if let Some(&up) = sizes.iter().find(|&&s| s > m) {
                f.0 = f.0.max(up);
            }
            f.1 = 0;
        } else if f.0 > 0 {
            count_step(f, took <= budget / 2.0, &sizes);
        } else {
            f.1 = 0;
        }
    }

    /// A graph launch of a latency-critical client (a decode step replayed as one CUDA graph)
    /// that ran longer than the headroom: the floor rises to what perfect scaling predicts for
    /// that op, `m * took / headroom` units on a node of `m`, capped at `2 m` (a step that
    /// scales worse rises again at its next launch), at least one size above `m`, the widest
    /// size allowed where none reaches that; unless the client's previous slow launch ran on a
    /// narrower node and this one was not at least [`SCALING_EVIDENCE`] faster: widening does not
    /// help such a step, and a wider standing node only costs the other clients.
    ///
    /// One within the headroom on a node wider than the floor sets the floor to the size perfect
    /// scaling predicts for it, `m * took / headroom`, where that is above the floor; any other
    /// within half of the headroom counts toward stepping the floor down ([`SHRINK_AFTER`] in a
    /// row), one above half or over the headroom ends that run. A step's time on
    /// fewer units is at most that prediction where its speed-up is sublinear, so that size is
    /// enough for such a step; without it, a decoder that warmed up alone (on wide nodes, within
    /// the headroom) kept the smallest standing node and met the first contention there, rising
    /// one doubling per slow token (docs/results/eval.md, mixed-graph run 12, the daemon status:
    /// 12-16 units at start-up or a second into the window, 124 at three seconds; the first
    /// request's tokens at 26-27 ms).
    fn on_graph_time(
        &mut self,
        client: HolderId,
        node: NodeId,
        started_ns: u64,
        completed_ns: u64,
        state: &SchedState<'_>,
    ) {
        let Some(target) = target_of(state, client) else { return };
        self.graph_steps.insert(client);
        self.last_active.insert(client, completed_ns);
        let took = completed_ns.saturating_sub(started_ns) as f64;
        let budget = target as f64 * STANDING_HEADROOM;
        let m = state.pool.node(node).size();
        let sizes = Self::floor_sizes(state);
        if took <= budget {
            let floor = self.floor.get(&client).map_or(0, |f| f.0);
            if m > floor {
                let want = m as f64 * took / budget;
                // the widest size allowed where none reaches the prediction (a whole-device launch
                // close to the headroom beside a best-effort client)
                let enough = sizes.iter().copied().find(|&s| s as f64 >= want).or(sizes.last().copied());
                if let Some(s) = enough.filter(|&s| s > floor && s <= m) {
                    self.floor.insert(client, (s, 0));
                    return;
                }
            }
            if let Some(f) = self.floor.get_mut(&client).filter(|f| f.0 > 0) {
                count_step(f, took <= budget / 2.0, &sizes);
            }
            return;
        }
        if let Some(f) = self.floor.get_mut(&client) {
            f.1 = 0;
        }
        let before = self.last_slow.insert(client, (m, took));
        if before.is_some_and(|(m0, t0)| m > m0 && took > t0 * (1.0 - SCALING_EVIDENCE)) {
            return;
        }
        let want = (m as f64 * took / budget).min(2.0 * m as f64);
        let up = sizes.iter().copied().find(|&s| s > m && s as f64 >= want);
        // Where no size allowed reaches the prediction, the widest allowed: one move, one drain of
        // the best-effort leases it overlaps. (Rising one size per slow launch instead, a decoder
        // whose floor was 68 units from its warm-up alone ran the first request's first 5 tokens
        // at 20-27 ms beside ResNet-50, then 10 ms on 124 units: docs/results/eval.md,
        // mixed-graph run 13.)
        if let Some(up) = up.or_else(|| sizes.last().copied().filter(|&s| s > m)) {
            let f = self.floor.entry(client).or_insert((0, 0));
            f.0 = f.0.max(up);
            f.1 = 0;
        }
    }

    fn standing(&self, client: HolderId) -> (Option<NodeId>, usize) {
        (self.standing.get(&client).copied(), self.floor.get(&client).map_or(0, |f| f.0))
    }

    fn on_complete(&mut self, c: &Completion<'_>, state: &SchedState<'_>) {
        if target_of(state, c.client).is_some() {
            self.last_done.insert(c.client, c.completed_ns);
            self.last_active.insert(c.client, c.completed_ns);
            self.decode.insert(c.client, c.kernel.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{kernel, op, Fixture};

    /// The first node of `size` units in the pool of `state`.
    fn node_of(state: &SchedState<'_>, size: usize) -> NodeId {
        state.pool.nodes_by_size().iter().copied().find(|&n| state.pool.node(n).size() == size).unwrap()
    }

    /// A graph launch of `who` on the first node of `on` units that took `took_us`; the floor of
    /// client 0 (the latency-critical one) after it.
    fn graph_launch(policy: &mut TpotFirst, state: &SchedState<'_>, who: HolderId, on: usize, took_us: u64) -> usize {
        policy.on_graph_time(who, node_of(state, on), 0, took_us * 1_000, state);
        policy.floor.get(&HolderId(0)).map_or(0, |f| f.0)
    }

    /// A latency-critical client's standing node, left idle while a best-effort client took the
    /// whole device (and keeps it busy by continuing there), is reclaimed once the client's op has
    /// waited a whole TPOT target: a reservation of a node under another client's lease fails,
    /// and the client waited forever (measured on the H200: the decoder's requests took 10 s beside
    /// ResNet-50, docs/results/eval.md, mixed-resnet50 run 1).

    #[test]
    fn a_standing_node_under_another_clients_busy_lease_is_reclaimed() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 11_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let k = kernel("decode", 4);
        let view = op(&k, a, 1);
        let mut policy = TpotFirst::default();
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        let standing = match plan.as_slice() {
            [Preparation::Reserve(n, r)] if r.holder == a && r.tag == TAG_STANDING => *n,
            other => panic!("a standing reservation for the latency client first: {other:?}"),
        };
        // Before it is applied, b takes the whole device and keeps work outstanding there.
        let root = f.pool.root();
        f.lease_busy(root, b, 3);
        // While a has no op waiting, nothing of b is drained.
        plan.clear();
        policy.begin_round(&[], &f.at(0));
        policy.maintain(&f.at(0), &mut plan);
        assert!(!plan.iter().any(|p| matches!(p, Preparation::Reclaim(..))), "{plan:?}");
        // a's op waits and no node is eligible for it: not yet a whole TPOT target (11 ms)...
        let ms = 1_000_000;
        plan.clear();
        policy.begin_round(&[view], &f.at(10 * ms));
        policy.maintain(&f.at(10 * ms), &mut plan);
        assert!(!plan.iter().any(|p| matches!(p, Preparation::Reclaim(..))), "{plan:?}");
        // ... then a whole target.
        plan.clear();
        policy.begin_round(&[view], &f.at(11 * ms));
        policy.maintain(&f.at(11 * ms), &mut plan);
        assert!(
            plan.iter().any(|p| matches!(p, Preparation::Reclaim(n, r) if *n == standing && r.holder == a)),
            "the standing node is reclaimed from under b's lease: {plan:?}"
        );
        assert!(!plan.iter().any(|p| matches!(p, Preparation::Reserve(..))), "no reservation that must fail: {plan:?}");
        f.pool.reclaim_for(standing, Reservation { holder: a, tag: TAG_STANDING }).unwrap();
        assert!(matches!(f.pool.state(root), NodeState::Draining { .. }), "b's gate closes");
        f.complete(root, 3);
        assert!(matches!(f.pool.state(standing), NodeState::Reserved { purpose } if purpose.holder == a));
        // Reserved now: maintain asks for nothing more of it.
        plan.clear();
        policy.maintain(&f.at(11 * ms), &mut plan);
        assert!(
            plan.iter()
                .all(|p| !matches!(p, Preparation::Reserve(n, _) | Preparation::Reclaim(n, _) if *n == standing)),
            "{plan:?}"
        );
        let mut eligible = Vec::new();
        f.pool.eligible(a, 0, &mut eligible);
        assert_eq!(policy.select(&view, &eligible, &f.at(11 * ms)), Some(standing));
    }

    /// A busy period (a decode step) slower than 80% of the target on the standing node raises
    /// the node one size; a run of [`SHRINK_AFTER`] quick ones lowers it again. Sized by one
    /// kernel's profile alone, the serving loop and the decoder stood on 8 units in every H200 run
    /// (docs/results/eval.md, serving run 2).
    #[test]
    fn a_step_slower_than_the_headroom_raises_the_standing_node_one_size() {
        let mut f = Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }]);
        let a = HolderId(0);
        let ms = 1_000_000;
        let standing = Reservation { holder: a, tag: TAG_STANDING };
        let mut policy = TpotFirst::default();
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        let first = match plan.as_slice() {
            [Preparation::Reserve(n, r)] if *r == standing => *n,
            other => panic!("a standing reservation first: {other:?}"),
        };
        f.pool.reserve(first, standing).unwrap();
        let sizes = TpotFirst::sizes(&f.at(0));
        assert_eq!(f.pool.node(first).size(), sizes[0]);
        // Within the headroom (8 ms of 10): nothing changes.
        policy.on_idle(a, 0, &f.at(8 * ms));
        plan.clear();
        policy.maintain(&f.at(8 * ms), &mut plan);
        assert!(plan.is_empty(), "{plan:?}");
        // Over it: the next size up replaces the standing node.
        policy.on_idle(a, 10 * ms, &f.at(18 * ms + 1));
        plan.clear();
        policy.maintain(&f.at(19 * ms), &mut plan);
        assert!(plan.iter().any(|p| matches!(p, Preparation::Unreserve(n) if *n == first)), "{plan:?}");
        let wider = plan
            .iter()
            .find_map(|p| match p {
                Preparation::Reserve(n, r) | Preparation::Reclaim(n, r) if *r == standing => Some(*n),
                _ => None,
            })
            .expect("a wider standing node");
        assert_eq!(f.pool.node(wider).size(), sizes[1]);
        f.pool.unreserve(first).unwrap();
        f.pool.reserve(wider, standing).unwrap();
        // Quick steps (within half the headroom): the floor stands for SHRINK_AFTER - 1 of them...
        let mut t = 20 * ms;
        for _ in 0..SHRINK_AFTER - 1 {
            policy.on_idle(a, t, &f.at(t + 4 * ms));
            t += 5 * ms;
        }
        plan.clear();
        policy.maintain(&f.at(t), &mut plan);
        assert!(plan.is_empty(), "{plan:?}");
        // ... and steps down after the last.
        policy.on_idle(a, t, &f.at(t + 4 * ms));
        plan.clear();
        policy.maintain(&f.at(t + 5 * ms), &mut plan);
        assert!(plan.iter().any(|p| matches!(p, Preparation::Unreserve(n) if *n == wider)), "{plan:?}");
        assert!(
            plan.iter().any(
                |p| matches!(p, Preparation::Reserve(n, r) if *r == standing && f.pool.node(*n).size() == sizes[0])
            ),
            "{plan:?}"
        );
    }

    /// A floor that steps down leaves the standing node where it is while every node of the
    /// narrower size overlaps another client's lease (moving there would drain it), and moves
    /// once one does not.
    #[test]
    fn a_narrower_floor_does_not_move_the_standing_node_onto_another_clients_lease() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let pool = &f.pool;
        let by_size = |size: usize| -> Vec<NodeId> {
            pool.nodes_by_size().iter().copied().filter(|&n| pool.node(n).size() == size).collect()
        };
        // b leases an 8-unit node; a stands on a 124-unit node beside it; a 120-unit node
        // overlaps b's node.
        let (narrow, wide) = by_size(8)
            .into_iter()
            .find_map(|n8| {
                let disjoint = by_size(124).into_iter().find(|&w| !pool.node(w).units.intersects(&pool.node(n8).units));
                let all_overlap = by_size(120).iter().all(|&m| pool.node(m).units.intersects(&pool.node(n8).units));
                disjoint.filter(|_| all_overlap).map(|w| (n8, w))
            })
            .expect("an 8-unit node that every 120-unit node overlaps, beside a 124-unit node");
        f.lease_busy(narrow, b, 5);
        f.lease_busy(wide, a, 1);
        let mut policy = TpotFirst::default();
        policy.standing.insert(a, wide);
        policy.floor.insert(a, (124, 0));
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        assert!(plan.is_empty(), "{plan:?}");
        // The floor steps down to 120 units: every such node overlaps b's lease, so a stays.
        policy.floor.insert(a, (120, 0));
        policy.maintain(&f.at(1), &mut plan);
        assert!(plan.is_empty(), "no drain of b's lease, no reservation given up: {plan:?}");
        assert_eq!(policy.standing[&a], wide);
        // a's lease drains and closes: its idle node is reserved again, still not moved.
        f.complete(wide, 1);
        f.pool.release(wide, a).unwrap();
        policy.maintain(&f.at(2), &mut plan);
        assert_eq!(plan, vec![Preparation::Reserve(wide, Reservation { holder: a, tag: TAG_STANDING })]);
        f.pool.reserve(wide, Reservation { holder: a, tag: TAG_STANDING }).unwrap();
        // b's lease ends: the standing node moves to 120 units.
        f.complete(narrow, 5);
        f.pool.release(narrow, b).unwrap();
        plan.clear();
        policy.maintain(&f.at(3), &mut plan);
        assert!(plan.contains(&Preparation::Unreserve(wide)), "{plan:?}");
        let moved = policy.standing[&a];
        assert_eq!(f.pool.node(moved).size(), 120);
        assert!(
            plan.iter().any(|p| matches!(p, Preparation::Reserve(n, _) | Preparation::Reclaim(n, _) if *n == moved)),
            "{plan:?}"
        );
    }

    /// A standing node whose remaining units refused the best-effort client's cluster launches
    /// moves up to the next size that leaves that client units it has not been refused on, and
    /// stays there while the floor asks for the narrower size (the H100's 120-unit standing node
    /// left ResNet-50 only SM 120-131, where its cluster launches were refused: docs/results/eval.md,
    /// mixed-graph run 16).
    #[test]
    fn a_standing_node_leaving_only_units_that_refused_cluster_launches_moves_up() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let device = f.pool.node(f.pool.root()).units;
        let rest = |f: &Fixture, n: NodeId| device.difference(&f.pool.node(n).units);
        let r = Reservation { holder: a, tag: TAG_STANDING };
        let mut policy = TpotFirst::default();
        policy.floor.insert(a, (120, 0));
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        let n120 = match plan.as_slice() {
            [Preparation::Reserve(n, p)] if *p == r && f.pool.node(*n).size() == 120 => *n,
            other => panic!("a 120-unit standing node first: {other:?}"),
        };
        f.pool.reserve(n120, r).unwrap();
        // A refusal on a node narrower than the remaining units leaves b some of them: a stays.
        let narrower = f.pool.nodes_by_size()[0];
        assert!(f.pool.node(narrower).size() < rest(&f, n120).len());
        assert!(f.cluster_refused.record(b, f.pool.node(narrower).units, &device));
        plan.clear();
        policy.maintain(&f.at(1), &mut plan);
        assert!(plan.is_empty(), "{plan:?}");
        // The whole remainder refused b's cluster launches: a 124-unit node that leaves b units
        // outside every refusing set replaces it.
        assert!(f.cluster_refused.record(b, rest(&f, n120), &device));
        plan.clear();
        policy.maintain(&f.at(2), &mut plan);
        assert!(plan.contains(&Preparation::Unreserve(n120)), "{plan:?}");
        let moved = policy.standing[&a];
        assert_eq!(f.pool.node(moved).size(), 124);
        assert!(!f.cluster_refused.refuses(b, &rest(&f, moved)), "{}", rest(&f, moved));
        assert!(plan
            .iter()
            .any(|p| matches!(p, Preparation::Reserve(n, _) | Preparation::Reclaim(n, _) if *n == moved)));
        f.pool.unreserve(n120).unwrap();
        f.pool.reserve(moved, r).unwrap();
        // The floor still asks for 120 units: the node stays where it is.
        plan.clear();
        policy.maintain(&f.at(3), &mut plan);
        assert!(plan.is_empty(), "{plan:?}");
        assert_eq!(policy.standing[&a], moved);
        // Refusals of a latency-critical client's own launches do not count.
        let mut g =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        g.cluster_refused.record(a, rest(&g, n120), &device);
        let mut fresh = TpotFirst::default();
        fresh.floor.insert(a, (120, 0));
        plan.clear();
        fresh.maintain(&g.at(0), &mut plan);
        assert_eq!(plan, vec![Preparation::Reserve(n120, r)]);
    }

    /// A graph launch slower than the headroom raises the floor to the size perfect scaling
    /// predicts for it, capped at twice its node's size (rounded up to a pool size), while the
    /// launches run faster on wider nodes; a slow launch on a node narrower than the floor, on
    /// the widest node, one no faster than the previous slow one on a narrower node, or of a
    /// best-effort client leaves the floor alone.
    #[test]
    fn a_slow_graph_launch_raises_the_floor_in_proportion_at_most_twofold() {
        let f = Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let us = 1_000;
        let state = f.at(0);
        let sizes = TpotFirst::sizes(&state);
        assert_eq!(sizes, [8, 12, 16, 20, 32, 36, 64, 68, 96, 100, 112, 116, 120, 124, 132], "the simulated pool");
        let mut policy = TpotFirst::default();
        let mut launch = |who: HolderId, on: usize, took_us: u64| graph_launch(&mut policy, &state, who, on, took_us);
        // The headroom is 8 ms. Within it on the smallest node: the floor is that node (what it was).
        assert_eq!(launch(a, 8, 8_000), 8);
        // 8 units, 40 ms: perfect scaling needs 40 units, capped at 16.
        assert_eq!(launch(a, 8, 40_000), 16);
        // 16 units, 20 ms (faster): 40 units, capped at 32.
        assert_eq!(launch(a, 16, 20_000), 32);
        // 32 units, 12 ms: 48 units -> 64.
        assert_eq!(launch(a, 32, 12_000), 64);
        // 64 units, 9 ms: 72 -> 96 (no size between 68 and 96).
        assert_eq!(launch(a, 64, 9_000), 96);
        // 96 units, 8.5 ms: less than 10% faster than on 64: widening stops helping.
        assert_eq!(launch(a, 96, 8_500), 96);
        // Narrower than the floor (it ran where it could), the widest node, a best-effort client.
        assert_eq!(launch(a, 8, 40_000), 96);
        assert_eq!(launch(a, 132, 30_000), 96);
        assert_eq!(launch(b, 96, 40_000), 96);
        assert!(!policy.floor.contains_key(&b));
        assert_eq!(policy.standing_size(&f.at(2_000_000 * us), a), 96);
    }

    /// A graph launch within the headroom on a node wider than the floor sets the floor to the
    /// size perfect scaling predicts for it (rounded up to a pool size), never lower than it was;
    /// one on a node no wider than the floor, or of a best-effort client, changes nothing.
    #[test]
    fn a_quick_graph_launch_on_a_wide_node_sets_the_floor_it_predicts() {
        let f = Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let state = f.at(0);
        let mut policy = TpotFirst::default();
        let mut launch = |who: HolderId, on: usize, took_us: u64| graph_launch(&mut policy, &state, who, on, took_us);
        // The headroom is 8 ms. On the whole device in 4 ms: 66 units predicted -> 68.
        assert_eq!(launch(a, 132, 4_000), 68);
        // Quicker on the whole device (2 ms: 33 units): the floor does not go down.
        assert_eq!(launch(a, 132, 2_000), 68);
        // On the floor's node or a narrower one, however quick: nothing.
        assert_eq!(launch(a, 68, 1_000), 68);
        assert_eq!(launch(a, 32, 7_900), 68);
        // On 124 units in 7 ms: 108.5 units -> 112.
        assert_eq!(launch(a, 124, 7_000), 112);
        // On the whole device at 7.9 ms: 130 units, above the widest size a best-effort client
        // leaves (124): the floor is 124.
        assert_eq!(launch(a, 132, 7_900), 124);
        // A best-effort client's launches set nothing.
        launch(b, 132, 4_000);
        assert!(!policy.floor.contains_key(&b));
        assert_eq!(policy.standing_size(&f.at(0), a), 124);
    }

    /// A floor measured while the latency-critical client was alone (the whole device) stands
    /// below the whole device once a best-effort client is registered.
    #[test]
    fn a_floor_measured_alone_stops_below_the_whole_device_beside_a_best_effort_client() {
        let lc = ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 };
        for (classes, top) in [(vec![lc], 132), (vec![lc, ClientClass::BestEffort], 124)] {
            let f = Fixture::new(&classes);
            let mut policy = TpotFirst::default();
            policy.floor.insert(HolderId(0), (132, 0));
            assert_eq!(policy.standing_size(&f.at(0), HolderId(0)), top, "{classes:?}");
            // with a decode kernel seen whose profile fits the headroom on any node
            policy.decode.insert(HolderId(0), kernel("decode", 4));
            assert_eq!(policy.standing_size(&f.at(0), HolderId(0)), top, "{classes:?}");
        }
    }

    /// A slow graph launch whose prediction no allowed size reaches raises the floor to the
    /// widest allowed size at once, not one size.
    #[test]
    fn a_slow_graph_launch_beyond_every_size_raises_the_floor_to_the_widest_allowed() {
        let f = Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let state = f.at(0);
        let mut policy = TpotFirst::default();
        // 68 units, 21 ms against 8 ms of headroom: 178 units by perfect scaling, 136 at most
        // twofold; beside the best-effort client no size above 124 is allowed.
        policy.on_graph_time(HolderId(0), node_of(&state, 68), 0, 21_000_000, &state);
        assert_eq!(policy.floor[&HolderId(0)].0, 124);
        // On the widest allowed node already: nowhere to rise.
        let mut policy = TpotFirst::default();
        policy.on_graph_time(HolderId(0), node_of(&state, 124), 0, 21_000_000, &state);
        assert!(!policy.floor.contains_key(&HolderId(0)));
    }

    /// Once a client's steps are graph launches, its busy periods move its floor neither way:
    /// between launches they are other work. (A CUDA-graph decoder's floor stepped down from 124
    /// to 100 units in 9 s while its graph steps took 73% of the target, so by busy periods that
    /// held no decode step: docs/results/eval.md, mixed-graph run 14.)
    #[test]
    fn a_graph_decoders_busy_periods_leave_its_floor_alone() {
        let f = Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let a = HolderId(0);
        let ms = 1_000_000;
        let state = f.at(0);
        let mut policy = TpotFirst::default();
        // 68 units, 14.5 ms against 8 ms of headroom: the floor rises to 124.
        assert_eq!(graph_launch(&mut policy, &state, a, 68, 14_500), 124);
        policy.standing.insert(a, node_of(&state, 124));
        // Many quick busy periods (a prefill's small kernels), then a long one: the floor stays.
        let mut t = 0;
        for _ in 0..3 * SHRINK_AFTER {
            policy.on_idle(a, t, &f.at(t + ms / 10));
            t += ms;
        }
        assert_eq!(policy.floor[&a].0, 124);
        policy.on_idle(a, t, &f.at(t + 50 * ms));
        assert_eq!(policy.floor[&a].0, 124);
        // Without a graph launch, the same quick periods step a floor down.
        let mut busy = TpotFirst::default();
        busy.standing.insert(a, node_of(&state, 124));
        busy.floor.insert(a, (124, 0));
        let mut t = 0;
        for _ in 0..SHRINK_AFTER {
            busy.on_idle(a, t, &f.at(t + ms / 10));
            t += ms;
        }
        assert_eq!(busy.floor[&a].0, 120);
    }

    /// A graph decoder's floor steps down one size after [`SHRINK_AFTER`] graph launches in a
    /// row within half of the headroom; a launch within the headroom but above half of it, or
    /// over it, starts the run again.
    #[test]
    fn quick_graph_launches_step_the_floor_down() {
        let f = Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let a = HolderId(0);
        let state = f.at(0);
        let mut policy = TpotFirst::default();
        let mut launch = |on: usize, took_us: u64| graph_launch(&mut policy, &state, a, on, took_us);
        assert_eq!(launch(68, 14_500), 124);
        // The headroom is 8 ms, half of it 4 ms.
        for _ in 0..SHRINK_AFTER - 1 {
            assert_eq!(launch(124, 4_000), 124);
        }
        assert_eq!(launch(124, 6_000), 124, "within the headroom, above half: the run starts again");
        for _ in 0..SHRINK_AFTER - 1 {
            assert_eq!(launch(124, 3_000), 124);
        }
        assert_eq!(launch(124, 9_000), 124, "over the headroom on the widest size: nothing to raise");
        for _ in 0..SHRINK_AFTER - 1 {
            assert_eq!(launch(124, 3_000), 124);
        }
        assert_eq!(launch(124, 3_000), 120);
        // On the narrower floor's node, the same.
        for _ in 0..SHRINK_AFTER - 1 {
            assert_eq!(launch(120, 3_000), 120);
        }
        assert_eq!(launch(120, 3_000), 116);
    }

    /// Beside a best-effort client a slow graph launch or busy period raises the floor at most
    /// to the widest node below the whole device; alone, to the whole device.
    #[test]
    fn a_slow_graph_launch_leaves_a_best_effort_client_a_node() {
        let lc = ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 };
        for (classes, top) in [(vec![lc, ClientClass::BestEffort], 124), (vec![lc], 132)] {
            let f = Fixture::new(&classes);
            let state = f.at(0);
            let mut policy = TpotFirst::default();
            // 68 units, 14.5 ms, then 124 units, 9 ms (more than 10% faster), against 8 ms of headroom.
            policy.on_graph_time(HolderId(0), node_of(&state, 68), 0, 14_500_000, &state);
            policy.on_graph_time(HolderId(0), node_of(&state, 124), 0, 9_000_000, &state);
            assert_eq!(policy.floor[&HolderId(0)].0, top, "{classes:?}");
            // A slow busy period on a 124-unit standing node: the same bound.
            let mut policy = TpotFirst::default();
            policy.standing.insert(HolderId(0), node_of(&state, 124));
            policy.on_idle(HolderId(0), 0, &f.at(9_000_000));
            // Alone it rises to the whole device; beside the best-effort client it has nowhere to rise.
            let expected = if top == 132 { 132 } else { 0 };
            assert_eq!(policy.floor.get(&HolderId(0)).map_or(0, |f| f.0), expected, "{classes:?}");
        }
    }

    /// A standing reservation over the whole device, its client idle, is let go once a
    /// best-effort client's op has waited a whole TPOT target with no node eligible: not
    /// sooner, not within a target of the latency-critical client's latest activity, not while
    /// it has an op ready, and not while the best-effort client has a node it may use.
    #[test]
    fn an_idle_standing_node_that_starves_a_best_effort_client_is_let_go() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let whole = *f.pool.nodes_by_size().last().unwrap();
        assert_eq!(f.pool.node(whole).size(), 132);
        f.pool.reserve(whole, Reservation { holder: a, tag: TAG_STANDING }).unwrap();
        let mut policy = TpotFirst::default();
        policy.standing.insert(a, whole);
        // A decode step that no node runs within the headroom by its profile: the whole device.
        policy.decode.insert(a, kernel("decode", 1_000_000));
        let k = kernel("train", 4);
        let ms = 1_000_000;
        let mut be = op(&k, b, 1);
        be.ready_since_ns = 100 * ms;
        let lets_go = |policy: &mut TpotFirst, queue: &[ReadyOpView<'_>], now: u64, f: &Fixture| {
            policy.begin_round(queue, &f.at(now));
            let mut plan = Vec::new();
            policy.maintain(&f.at(now), &mut plan);
            plan.iter().any(|p| matches!(p, Preparation::Unreserve(n) if *n == whole))
        };
        // Waited 9 ms: not yet. 10 ms: let go.
        assert!(!lets_go(&mut policy, &[be], 109 * ms, &f));
        assert!(lets_go(&mut policy, &[be], 110 * ms, &f));
        // Not within a target of the latency-critical client's latest graph launch (a gap
        // between tokens); once it has been idle for a whole target, let go.
        policy.on_graph_time(a, whole, 110 * ms, 111 * ms, &f.at(111 * ms));
        assert!(!lets_go(&mut policy, &[be], 120 * ms, &f));
        assert!(lets_go(&mut policy, &[be], 121 * ms, &f));
        // Not while the latency-critical client has an op ready.
        let lc = op(&k, a, 2);
        assert!(!lets_go(&mut policy, &[be, lc], 200 * ms, &f));
        // Not while a narrower node is the best-effort client's to use.
        f.pool.unreserve(whole).unwrap();
        let half = f.pool.nodes_by_size().iter().copied().find(|&n| f.pool.node(n).size() == 64).unwrap();
        f.pool.reserve(half, Reservation { holder: a, tag: TAG_STANDING }).unwrap();
        policy.standing.insert(a, half);
        policy.decode.remove(&a);
        policy.floor.insert(a, (64, 0));
        let let_go_half = |policy: &mut TpotFirst, f: &Fixture| {
            policy.begin_round(&[be], &f.at(200 * ms));
            let mut plan = Vec::new();
            policy.maintain(&f.at(200 * ms), &mut plan);
            plan.iter().any(|p| matches!(p, Preparation::Unreserve(n) if *n == half))
        };
        assert!(!let_go_half(&mut policy, &f));
    }

    /// A standing node leased by a best-effort client itself (it took the whole device after the
    /// idle reservation was let go) is reclaimed once the latency-critical client's op has waited
    /// a whole TPOT target, as one under an overlapping lease is.
    #[test]
    fn a_standing_node_leased_by_another_client_is_reclaimed_for_a_waiting_step() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let whole = *f.pool.nodes_by_size().last().unwrap();
        f.lease_busy(whole, b, 3);
        let mut policy = TpotFirst::default();
        policy.standing.insert(a, whole);
        // A decode step that no node runs within the headroom by its profile: the whole device
        // (a measured floor alone stops below it beside a best-effort client).
        policy.decode.insert(a, kernel("decode", 1_000_000));
        let k = kernel("decode", 4);
        let ms = 1_000_000;
        let mut step = op(&k, a, 1);
        step.ready_since_ns = 100 * ms;
        let reclaims = |policy: &mut TpotFirst, now: u64| {
            policy.begin_round(&[step], &f.at(now));
            let mut plan = Vec::new();
            policy.maintain(&f.at(now), &mut plan);
            plan.iter().any(|p| matches!(p, Preparation::Reclaim(n, _) if *n == whole))
        };
        assert!(!reclaims(&mut policy, 105 * ms), "within a TPOT target: the lease may drain");
        assert!(reclaims(&mut policy, 110 * ms), "a whole TPOT target: reclaimed");
        // Applied: the lease drains and the node is the latency-critical client's once it has.
        f.pool.reclaim_for(whole, Reservation { holder: a, tag: TAG_STANDING }).unwrap();
        f.complete(whole, 3);
        assert!(matches!(*f.pool.state(whole), NodeState::Reserved { purpose } if purpose.holder == a));
    }

    /// A latency-critical client that keeps continuing on a lease narrower than its standing
    /// node, the standing node under a best-effort client's lease, never waits: once it has held
    /// the narrow lease for a whole TPOT target, its standing node is reclaimed.
    #[test]
    fn a_latency_client_stuck_on_a_narrow_lease_reclaims_its_standing_node() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let by_size = |f: &Fixture, size: usize, first_unit: usize| {
            f.pool
                .nodes_by_size()
                .iter()
                .copied()
                .find(|&n| f.pool.node(n).size() == size && f.pool.node(n).units.iter().next() == Some(first_unit))
                .unwrap()
        };
        let narrow = by_size(&f, 8, 0);
        let wide = by_size(&f, 124, 8);
        let standing = by_size(&f, 64, 0);
        f.lease_busy(narrow, a, 1);
        f.lease_busy(wide, b, 1);
        let mut policy = TpotFirst::default();
        policy.standing.insert(a, standing);
        policy.floor.insert(a, (64, 0));
        let ms = 1_000_000;
        let reclaims = |policy: &mut TpotFirst, now: u64, f: &Fixture| {
            policy.begin_round(&[], &f.at(now));
            let mut plan = Vec::new();
            policy.maintain(&f.at(now), &mut plan);
            plan.iter().any(|p| matches!(p, Preparation::Reclaim(n, _) if *n == standing))
        };
        assert!(!reclaims(&mut policy, 100 * ms, &f), "not at once");
        assert!(!reclaims(&mut policy, 109 * ms, &f), "not within a TPOT target");
        assert!(reclaims(&mut policy, 110 * ms, &f), "after a whole TPOT target on the narrow lease");
        // Off the narrow lease, the clock starts again.
        f.complete(narrow, 1);
        f.pool.release(narrow, a).unwrap();
        assert!(!reclaims(&mut policy, 200 * ms, &f));
    }

    /// A latency-critical client's lease narrower than its standing node closes once the
    /// standing node is its own (reserved or leased), not before: it would otherwise keep
    /// continuing its steps there. Other clients' leases stay open.
    #[test]
    fn a_narrower_lease_of_a_latency_client_closes_once_its_standing_node_is_its_own() {
        let mut f =
            Fixture::new(&[ClientClass::LatencyCritical { tpot_target_ns: 10_000_000 }, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let of_size = |f: &Fixture, size: usize, skip: &[NodeId]| {
            let pool = &f.pool;
            pool.nodes_by_size()
                .iter()
                .copied()
                .find(|&n| {
                    pool.node(n).size() == size
                        && !skip.iter().any(|&o| pool.node(o).units.intersects(&pool.node(n).units))
                })
                .unwrap()
        };
        let standing = of_size(&f, 64, &[]);
        let narrow = of_size(&f, 8, &[standing]);
        let other = of_size(&f, 8, &[standing, narrow]);
        f.lease_busy(narrow, a, 1);
        f.lease_busy(other, b, 1);
        let mut policy = TpotFirst::default();
        policy.standing.insert(a, standing);
        policy.floor.insert(a, (64, 0));
        let closes = |plan: &[Preparation]| {
            plan.iter().filter_map(|p| if let Preparation::Close(n) = p { Some(*n) } else { None }).collect::<Vec<_>>()
        };
        // The standing node is not yet a's (idle, reserved by maintain's plan): nothing closes.
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        assert!(closes(&plan).is_empty(), "{plan:?}");
        // Reserved for a: a's narrower lease closes, b's does not.
        f.pool.reserve(standing, Reservation { holder: a, tag: TAG_STANDING }).unwrap();
        plan.clear();
        policy.maintain(&f.at(0), &mut plan);
        assert_eq!(closes(&plan), [narrow]);
        // Applied, the lease drains and goes idle with its last op.
        f.pool.close_gate(narrow).unwrap();
        assert!(matches!(f.pool.state(narrow), NodeState::Draining { .. }));
        f.complete(narrow, 1);
        assert!(matches!(f.pool.state(narrow), NodeState::Idle));
        plan.clear();
        policy.maintain(&f.at(0), &mut plan);
        assert!(closes(&plan).is_empty(), "{plan:?}");
    }
}
