//! Throughput-Oriented (the default): MinBind, then greedy positive-gain widening.
//!
//! Each round: (1) **MinBind** gives a minimum-size, non-overlapping node to as many ready ops as
//! possible, visiting clients in age-aware round-robin (clients ordered by their oldest ready op,
//! then one op per client per pass); (2) while some feasible widening has positive gain, apply the
//! one with the largest `G = (P(m') - P(m)) / (m' - m)`, where `P(m) = T(m_min) / T(m)` comes from
//! the launch's profile (or the fallback model). Feasible = the wider node is eligible for the op's
//! client and disjoint from every other assignment of the round. Pick returns planned ops in plan
//! order; Select returns the planned node.
//!
//! Fairness (beyond the paper): a client whose ready op found no eligible node in a round is
//! *waiting*. While a client waits, other clients' ops are not lane-continued (so their leases can
//! drain), and [`Policy::maintain`] reclaims the smallest blocked leaf for the waiting client,
//! closing the gates of the leases that overlap it. Stale reservations are dropped.
//!
//! A graph launch has no profile: it is bound to the widest eligible node, and continues on its
//! lease unless that lease is a sliver (under a quarter of the device) while other clients hold
//! more than half of it as leases; such a graph is not bound to a sliver either while a fair half
//! can be reclaimed: its client waits for one ([`Policy::continue_graph`]).
//!
//! An op with a size floor ([`ReadyOpView::min_units`]: a cooperative or cluster launch that only
//! some nodes hold) is planned only on nodes at least that large, and its client waits for such a
//! node: the reclaimed node is then at least the floor, even beyond a fair share and over the
//! client's own smaller leases. Without this, a floor above every free node left the op ready for
//! as long as other clients kept their leases busy (a ResNet-50 job next to a GPT job under the
//! daemon made 2 steps in 8 s: docs/results/daemon-pair.md).
//!
//! Under a daemon (each client asks over a mirror of the daemon's lease view): continuation and
//! launch-first follow [`Policy::continue_on_lease`], which leaves a lease only for a clearly
//! better node, and launches only the whole device runs unchanged share it beside the other
//! clients' leases ([`Policy::shares_whole_device`]).

use rustc_hash::FxHashMap as HashMap;

use vitamin_hal::{KernelLaunch, UnitSet};

use super::{Curves, Policy, Preparation, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, NodeState, Reservation};
use crate::vctx::OpId;

/// Reservation tag used for fairness reclaims.
pub const TAG_FAIRNESS: u64 = 1;
/// Lane continuation is refused when rebinding would make progress this much faster.
pub const CONTINUE_GAIN: f64 = 1.05;
/// Lane continuation is refused on a node this much wider than the op can use.
pub const OVERSIZE: f64 = 1.5;
/// An op waits for a wider node when that is predicted to finish this much earlier.
pub const WAIT_GAIN: f64 = 1.5;
/// Under a daemon, a continuation is refused only for a node predicted this much faster.
pub const REMOTE_GAIN: f64 = 1.5;
/// How long past the predicted time an op keeps waiting for a wider node, ns.
pub const WAIT_SLACK_NS: u64 = 50_000;

/// The Throughput-Oriented policy. See the module docs.
#[derive(Debug, Default)]
pub struct ThroughputOriented {
    plan: HashMap<(HolderId, OpId), NodeId>,
    order: Vec<(HolderId, OpId)>,
    cursor: usize,
    curves: Curves,
    waiting: Vec<HolderId>,
    /// Per waiting client, the largest size floor among its ops that found no node (0: none).
    waiting_floor: HashMap<HolderId, usize>,
    /// Waiting clients with a graph [`confined`] to a sliver: their own leases may drain for
    /// the node reclaimed for them (the graph has left them).
    waiting_confined: Vec<HolderId>,
    deferred: HashMap<(HolderId, OpId), u64>,
    // Reused buffers of `plan_round` (it runs every dispatcher round).
    scratch_rr: Vec<usize>,
    scratch_rank: Vec<usize>,
    scratch_clients: Vec<(HolderId, u32)>,
    scratch_keys: Vec<(u32, u32, usize)>,
    scratch_fresh: Vec<(usize, NodeId)>,
    scratch_reused: Vec<(usize, NodeId)>,
    /// `continue_on_lane` answers while the client is alone on the device (nothing else active
    /// or pending): then they depend only on the launch shape and the node, and a dependent chain
    /// asks the same question for every op.
    continue_memo: HashMap<(ShapeKey, NodeId), bool>,
    /// The round's plan for a single ready op on a quiescent pool (nothing leased, reserved or
    /// pending), by launch shape: then MinBind + widening depend only on the op's curve, which
    /// never changes once computed, so the answer is exact. A launch-sync loop (one op ready at a
    /// time) asks it every round; widening a large kernel scans the pool for each wider size.
    solo_memo: HashMap<ShapeKey, NodeId>,
}

/// A launch shape: function handle, grid, block, dynamic shared memory.
type ShapeKey = (u64, [u32; 3], [u32; 3], u32);

fn shape_key(k: &KernelLaunch) -> ShapeKey {
    let (g, b) = (k.grid(), k.block());
    (k.function().handle(), [g.x, g.y, g.z], [b.x, b.y, b.z], k.shared_mem_bytes())
}

/// Most memoized answers kept per memo (`continue_on_lane`, solo plans; cleared beyond).
const CONTINUE_MEMO_MAX: usize = 4096;

impl ThroughputOriented {
    fn time(&mut self, k: &KernelLaunch, m: usize, state: &SchedState<'_>) -> f64 {
        self.curves.time(k, m, state.pool, state.profiles)
    }

    /// The best predicted completion of `op` if, instead of running on `m` units from `start`,
    /// it waited for a wider node: over nodes wider than `m` whose blockers are leases (of any
    /// client, predicted to drain at their `busy_until`) or its own reservations, the earliest
    /// `max(start, drain) + T(size)`.
    fn wait_alternative(
        &mut self,
        op: &ReadyOpView<'_>,
        m: usize,
        start: u64,
        require_running: bool,
        state: &SchedState<'_>,
    ) -> Option<f64> {
        let pool = state.pool;
        let curve = self.curves.curve(op.kernel, pool, state.profiles);
        let mi = self.curves.index(m)?;
        // Quick exit: no wider size is fast enough to make waiting worthwhile.
        let fastest_wider = curve[mi + 1..].iter().copied().fold(f64::INFINITY, f64::min);
        if fastest_wider * WAIT_GAIN >= curve[mi] {
            return None;
        }
        // Units of leased or draining nodes: only candidates overlapping them have something to wait for.
        let running = pool.active_nodes().iter().fold(UnitSet::EMPTY, |acc, &a| match pool.state(a) {
            NodeState::Leased { .. } | NodeState::Draining { .. } => acc | pool.node(a).units,
            _ => acc,
        });
        let t_here = curve[mi];
        let mut best: Option<f64> = None;
        for &n in pool.nodes_by_size() {
            let node = pool.node(n);
            if node.size() <= m || (require_running && node.units.is_disjoint(&running)) {
                continue;
            }
            // Waiting can only win if the wider node alone is clearly faster (callers require
            // `(alt - start) * WAIT_GAIN < T(m)`, and `alt - start >= T(wider)`).
            let t_wide = self.curves.index(node.size()).map_or(f64::INFINITY, |i| curve[i]);
            if t_wide * WAIT_GAIN >= t_here {
                continue;
            }
            if pool.pending().iter().any(|(t, r)| r.holder != op.client && pool.node(*t).units.intersects(&node.units))
            {
                continue;
            }
            let mut free_at = start;
            let mut ok = true;
            for &a in pool.active_nodes() {
                if !pool.node(a).units.intersects(&node.units) {
                    continue;
                }
                match pool.state(a) {
                    NodeState::Leased { .. } | NodeState::Draining { .. } => free_at = free_at.max(state.busy_until(a)),
                    NodeState::Reserved { purpose } if purpose.holder == op.client => {}
                    _ => ok = false,
                }
            }
            // When deciding to defer a ready op, only running work is worth waiting for (it will
            // drain); a node that is free now but was not offered is not coming.
            if ok && (free_at > start || !require_running) {
                let t = free_at as f64 + t_wide;
                if best.is_none_or(|b| t < b) {
                    best = Some(t);
                }
            }
        }
        best
    }

    /// The node [`Policy::maintain`] reclaims for waiting client `h` (size floor `floor`, 0: none):
    /// a fair share, the smallest node of at least units / (clients with work) and `floor`, among
    /// those overlapping only other clients' leases (fewest first) and no reservation or pending
    /// reclaim. `None`: nothing can be reclaimed for it now.
    fn fairness_target(&self, state: &SchedState<'_>, h: HolderId, floor: usize) -> Option<NodeId> {
        let pool = state.pool;
        let root_size = pool.node(pool.root()).size();
        let busy_clients = state
            .clients
            .iter()
            .filter(|c| {
                c.holder == h
                    || self.waiting.contains(&c.holder)
                    || pool.active_nodes().iter().any(|&n| {
                        matches!(pool.state(n), NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } if *holder == c.holder)
                    })
            })
            .count()
            .max(1);
        let share = root_size / busy_clients;
        // A floor above the fair share is reclaimed as it is, own smaller leases included
        // (they drain like the others'): the op runs nowhere smaller. So is a share for a
        // confined graph, which left its sliver.
        let own_ok = floor > share || self.waiting_confined.contains(&h);
        let mut overlapping = Vec::new();
        pool.nodes_by_size()
            .iter()
            .copied()
            .filter(|&n| pool.node(n).size() >= share.max(floor).min(root_size))
            .filter(|&n| pool.pending().iter().all(|(t, _)| pool.node(*t).units.is_disjoint(&pool.node(n).units)))
            .filter(|&n| {
                !pool.active_nodes().iter().any(|&a| {
                    matches!(pool.state(a), NodeState::Reserved { .. })
                        && pool.node(a).units.intersects(&pool.node(n).units)
                })
            })
            .filter_map(|n| {
                pool.overlapping_leased(n, &mut overlapping);
                let foreign_only = own_ok
                    || overlapping
                        .iter()
                        .all(|&o| !matches!(pool.state(o), NodeState::Leased { holder, .. } if *holder == h));
                (foreign_only && !overlapping.is_empty()).then_some((pool.node(n).size(), overlapping.len(), n))
            })
            .min()
            .map(|(_, _, n)| n)
    }

    /// Whether a node of at least `size` units is on its way to `h`: reserved for it, or a
    /// pending reclaim for it.
    fn has_coming(&self, state: &SchedState<'_>, h: HolderId, size: usize) -> bool {
        let pool = state.pool;
        pool.pending().iter().any(|(t, r)| r.holder == h && pool.node(*t).size() >= size)
            || pool.active_nodes().iter().any(|&n| {
                matches!(pool.state(n), NodeState::Reserved { purpose } if purpose.holder == h)
                    && pool.node(n).size() >= size
            })
    }

    /// Clients currently waiting for any node.
    pub fn waiting(&self) -> &[HolderId] {
        &self.waiting
    }

    /// Marks `h` as waiting for a node of at least `floor` units (0: any).
    fn note_waiting(&mut self, h: HolderId, floor: usize) {
        if !self.waiting.contains(&h) {
            self.waiting.push(h);
        }
        let f = self.waiting_floor.entry(h).or_insert(0);
        *f = (*f).max(floor);
    }

    /// Computes the round's plan (MinBind + widening) for `queue`.
    pub fn plan_round(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) {
        self.plan.clear();
        self.order.clear();
        self.cursor = 0;
        self.waiting.clear();
        self.waiting_floor.clear();
        self.waiting_confined.clear();
        if queue.is_empty() {
            return;
        }
        let pool = state.pool;
        let solo =
            (queue.len() == 1 && queue[0].min_units == 0 && pool.is_quiescent()).then(|| shape_key(queue[0].kernel));
        if let Some(n) = solo.and_then(|k| self.solo_memo.get(&k).copied()) {
            let key = (queue[0].client, queue[0].op);
            self.plan.insert(key, n);
            self.order.push(key);
            return;
        }
        // Age-aware round-robin: clients by their oldest op, then one op per client per pass:
        // order ops by (rank within their client, client's order of first appearance).
        let mut rr = std::mem::take(&mut self.scratch_rr);
        rr.clear();
        rr.extend(0..queue.len());
        rr.sort_by_key(|&i| queue[i].seq);
        let mut clients = std::mem::take(&mut self.scratch_clients);
        clients.clear();
        let mut keyed = std::mem::take(&mut self.scratch_keys);
        keyed.clear();
        for &i in &rr {
            let c = match clients.iter().position(|&(h, _)| h == queue[i].client) {
                Some(c) => c,
                None => {
                    clients.push((queue[i].client, 0u32));
                    clients.len() - 1
                }
            };
            keyed.push((clients[c].1, c as u32, i));
            clients[c].1 += 1;
        }
        keyed.sort_unstable();
        rr.clear();
        rr.extend(keyed.iter().map(|&(_, _, i)| i));
        self.scratch_clients = clients;
        self.scratch_keys = keyed;
        // MinBind.
        let mut planned = UnitSet::EMPTY;
        let mut fresh = std::mem::take(&mut self.scratch_fresh);
        fresh.clear();
        let mut reused = std::mem::take(&mut self.scratch_reused);
        reused.clear();
        for &i in &rr {
            let (h, floor) = (queue[i].client, queue[i].min_units);
            let big_enough = |n: NodeId| pool.node(n).size() >= floor;
            let free = pool
                .nodes_by_size()
                .iter()
                .copied()
                .find(|&n| big_enough(n) && is_fresh(state, n, h) && pool.node(n).units.is_disjoint(&planned));
            if let Some(n) = free {
                planned |= pool.node(n).units;
                fresh.push((i, n));
            } else if let Some(n) =
                pool.nodes_by_size().iter().copied().find(|&n| {
                    big_enough(n) && matches!(pool.state(n), NodeState::Leased { holder, .. } if *holder == h)
                })
            {
                reused.push((i, n));
            } else {
                self.note_waiting(h, floor);
            }
        }
        // Greedy widening, on each op's curve (looked up once).
        let curves: Vec<_> =
            fresh.iter().map(|&(i, _)| self.curves.curve(queue[i].kernel, pool, state.profiles)).collect();
        let index = self.curves.node_index(pool);
        let p_of = |c: &[f64], n: NodeId| c[0] / c[index[n.0 as usize]].max(1e-9);
        loop {
            let mut best: Option<(usize, NodeId, f64)> = None;
            for (slot, &(i, p)) in fresh.iter().enumerate() {
                let op = &queue[i];
                let c = &curves[slot];
                let m = pool.node(p).size();
                let pm = p_of(c, p);
                // No wider size can help a launch whose curve is flat from here on.
                let fastest_wider = c[index[p.0 as usize] + 1..].iter().copied().fold(f64::INFINITY, f64::min);
                if c[0] / fastest_wider.max(1e-9) <= pm + 1e-12 {
                    continue;
                }
                let others = planned.difference(&pool.node(p).units);
                for &n in pool.nodes_by_size() {
                    let node = pool.node(n);
                    let m2 = node.size();
                    if m2 <= m || !node.units.is_disjoint(&others) || !is_fresh(state, n, op.client) {
                        continue;
                    }
                    let g = (p_of(c, n) - pm) / (m2 - m) as f64;
                    if g > 1e-12 && best.is_none_or(|(_, _, bg)| g > bg) {
                        best = Some((slot, n, g));
                    }
                }
            }
            let Some((slot, n, _)) = best else { break };
            let old = fresh[slot].1;
            planned = planned.difference(&pool.node(old).units) | pool.node(n).units;
            fresh[slot].1 = n;
        }
        // Plan order = round-robin order.
        let mut rank = std::mem::take(&mut self.scratch_rank);
        rank.clear();
        rank.resize(queue.len(), 0);
        for (r, &i) in rr.iter().enumerate() {
            rank[i] = r;
        }
        if let (Some(k), [(_, n)]) = (solo, fresh.as_slice()) {
            if self.solo_memo.len() >= CONTINUE_MEMO_MAX {
                self.solo_memo.clear();
            }
            self.solo_memo.insert(k, *n);
        }
        fresh.append(&mut reused);
        fresh.sort_unstable_by_key(|&(i, _)| rank[i]);
        for &(i, n) in &fresh {
            let key = (queue[i].client, queue[i].op);
            self.plan.insert(key, n);
            self.order.push(key);
        }
        self.scratch_rank = rank;
        self.scratch_rr = rr;
        self.scratch_fresh = fresh;
        self.scratch_reused = reused;
    }
}

/// For a whole-step launch (a graph) of `client` on a node of `m` units: the size of a fair half
/// (the widest pool node of at most half the device) when `m` is under a quarter of the device
/// while other clients hold more than half of it as leases; `None` otherwise.
pub(super) fn confined(state: &SchedState<'_>, client: HolderId, m: usize) -> Option<usize> {
    let pool = state.pool;
    let root = pool.node(pool.root()).size();
    if m * 4 >= root {
        return None;
    }
    let foreign = pool.active_nodes().iter().fold(UnitSet::EMPTY, |acc, &a| match pool.state(a) {
        NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } if *holder != client => {
            acc | pool.node(a).units
        }
        _ => acc,
    });
    if foreign.len() * 2 <= root {
        return None;
    }
    let half = pool.nodes_by_size().iter().rev().map(|&n| pool.node(n).size()).find(|&s| s * 2 <= root)?;
    (half > m).then_some(half)
}

/// Whether `n` could be newly leased by `h` (idle and conflict-free, or reserved for `h`).
fn is_fresh(state: &SchedState<'_>, n: NodeId, h: HolderId) -> bool {
    match state.pool.state(n) {
        NodeState::Idle => state.pool.is_eligible(n, h),
        NodeState::Reserved { purpose } => purpose.holder == h,
        _ => false,
    }
}

impl Policy for ThroughputOriented {
    fn name(&self) -> &'static str {
        "throughput"
    }

    fn maintain(&mut self, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        let pool = state.pool;
        // Drop fairness reservations of clients no longer waiting.
        for &n in pool.active_nodes() {
            if let NodeState::Reserved { purpose } = pool.state(n) {
                if purpose.tag == TAG_FAIRNESS && !self.waiting.contains(&purpose.holder) {
                    plan.push(Preparation::Unreserve(n));
                }
            }
        }
        // Reclaim a leaf for each waiting client that has nothing reserved yet (nothing at least
        // its floor, for a client waiting with one).
        let root_size = pool.node(pool.root()).size();
        for &h in &self.waiting {
            let floor = self.waiting_floor.get(&h).copied().unwrap_or(0).min(root_size);
            let has = pool.active_nodes().iter().any(|&n| {
                let mine = matches!(pool.state(n), NodeState::Reserved { purpose } if purpose.holder == h)
                    || matches!(pool.state(n), NodeState::Leased { holder, .. } if *holder == h);
                mine && pool.node(n).size() >= floor
            });
            if has {
                continue;
            }
            let target = self.fairness_target(state, h, floor);
            if let Some(t) = target {
                plan.push(Preparation::Reclaim(t, Reservation { holder: h, tag: TAG_FAIRNESS }));
            }
        }
    }

    fn begin_round(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) {
        self.plan_round(queue, state);
    }

    fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
        while let Some(&(h, op)) = self.order.get(self.cursor) {
            self.cursor += 1;
            if let Some(i) = queue.iter().position(|o| o.client == h && o.op == op) {
                return Some(i);
            }
        }
        None
    }

    fn select(&mut self, op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        let chosen = match self.plan.get(&(op.client, op.op)) {
            Some(n) if eligible.contains(n) => Some(*n),
            _ => super::smallest(eligible, state.pool),
        };
        let Some(chosen) = chosen else {
            // Nothing at least its floor is free: it waits, and `maintain` reclaims such a node for
            // it. (An op without a floor that finds nothing eligible was planned on a node a
            // preparation took meanwhile, e.g. a latency client's reservation: it is planned
            // again next round, without reclaiming.)
            if op.min_units > 0 {
                self.note_waiting(op.client, op.min_units);
            }
            return None;
        };
        // Waiting to rebind wider (beyond the paper): if a wider node is predicted to free up
        // soon enough that waiting for it finishes clearly earlier than running narrow now,
        // defer -- but only until that predicted time has passed (no starvation).
        let key = (op.client, op.op);
        let m = state.pool.node(chosen).size();
        let now_finish = state.now_ns as f64 + self.time(op.kernel, m, state);
        if let Some(&limit) = self.deferred.get(&key) {
            if state.now_ns > limit {
                self.deferred.remove(&key);
                return Some(chosen);
            }
        }
        match self.wait_alternative(op, m, state.now_ns, true, state) {
            Some(alt) if (alt - state.now_ns as f64) * WAIT_GAIN < now_finish - state.now_ns as f64 => {
                let limit = (alt - self.time(op.kernel, m, state).min(alt)) as u64 + WAIT_SLACK_NS;
                self.deferred.entry(key).or_insert(limit.max(state.now_ns + WAIT_SLACK_NS));
                None
            }
            _ => {
                self.deferred.remove(&key);
                Some(chosen)
            }
        }
    }

    fn select_graph(&mut self, op: &ReadyGraphView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        // No profile sizes a graph: the widest eligible node (the trait's default). A client whose
        // graph finds nothing eligible waits, like one whose kernel does, so `maintain` reclaims a
        // leaf for it.
        let Some(chosen) = super::widest(eligible, state.pool) else {
            self.note_waiting(op.client, op.min_units);
            return None;
        };
        // Confined to a sliver beside a client that holds most of the device: wait for a fair
        // half instead (`maintain` reclaims it), as long as one can be had.
        if let Some(half) = confined(state, op.client, state.pool.node(chosen).size()) {
            if !self.waiting_confined.contains(&op.client) {
                self.waiting_confined.push(op.client);
            }
            if self.has_coming(state, op.client, half) || self.fairness_target(state, op.client, half).is_some() {
                self.note_waiting(op.client, half);
                return None;
            }
            self.waiting_confined.retain(|&h| h != op.client);
        }
        Some(chosen)
    }

    /// A graph continues on its lease unless [`confined`] there: then it goes to the arbiter,
    /// whose [`select_graph`](Policy::select_graph) waits for a fair half. A graph replays a whole
    /// step (a decode step) and, with nothing to size it by, is bound to the widest node free at
    /// the time; a client that never goes idle would otherwise keep it on that node for as long
    /// as it stays busy (a CUDA-graph decoder ran 39-45 ms tokens on an 8-SM lease for 12 s
    /// beside ResNet-50 on 124 SMs, its alone time 8.6-10 ms: docs/results/eval.md, mixed-graph
    /// runs 5-6).
    fn continue_graph(&mut self, client: HolderId, node: NodeId, state: &SchedState<'_>) -> bool {
        confined(state, client, state.pool.node(node).size()).is_none()
    }

    /// The memoized plan of a lone op on a quiescent pool (see `solo_memo`): a round would plan
    /// the same node (MinBind + widening depend only on the op's curve there), select keeps it (it
    /// is eligible, and with nothing running there is no wider node to wait for).
    fn solo_node(&mut self, op: &ReadyOpView<'_>, state: &SchedState<'_>) -> Option<NodeId> {
        if !state.pool.is_quiescent() || !self.waiting.is_empty() || !self.deferred.is_empty() {
            return None;
        }
        self.solo_memo.get(&shape_key(op.kernel)).copied()
    }

    fn continues_from_leases(&self) -> bool {
        true
    }

    /// Best effort for aggregate throughput: a launch only the whole device holds (cuDNN's wgrad
    /// kernels with 16-block clusters, which no green-context node of the H200 pool places:
    /// docs/results/daemon-pair.md, run 3) would otherwise drain every other client each time.
    fn shares_whole_device(&self) -> bool {
        true
    }

    /// Under a daemon a refused continuation costs a drain and a round trip, so the lease is
    /// left only for a clearly better node ([`REMOTE_GAIN`]): one wider that is free now (or
    /// overlaps only this client's own leases, which then drain), or a fair half of the device
    /// when this client holds less than a quarter of it and other clients hold more than half
    /// (its op then waits at the daemon, whose fairness reclaim takes a share back for it). Never
    /// for being oversized: the daemon takes units back for a client that waits. Per-op
    /// refusals as in-process (an oversized lease, any faster wider node) made a GPT and a
    /// ResNet-50 job go up for nearly every op and hold 44 of 132 units between them
    /// (docs/results/daemon-pair.md, run 3).
    fn continue_on_lease(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        let pool = state.pool;
        let m = pool.node(node).size();
        let root = pool.node(pool.root()).size();
        let mut foreign = UnitSet::EMPTY;
        for &a in pool.active_nodes() {
            let mine = match pool.state(a) {
                NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } => *holder == op.client,
                NodeState::Reserved { purpose } => purpose.holder == op.client,
                NodeState::Idle => true,
            };
            if !mine {
                foreign |= pool.node(a).units;
            }
        }
        if m >= root.saturating_sub(foreign.len()) {
            return true; // nothing wider can be had
        }
        let curve = self.curves.curve(op.kernel, pool, state.profiles);
        let index = self.curves.node_index(pool);
        let p = |n: NodeId| curve[0] / curve[index[n.0 as usize]].max(1e-9);
        let p_here = p(node);
        let wider_free = pool.nodes_by_size().iter().copied().any(|n| {
            let cand = pool.node(n);
            cand.size() > m
                && cand.units.is_disjoint(&foreign)
                && pool.pending().iter().all(|(t, _)| pool.node(*t).units.is_disjoint(&cand.units))
                && p(n) >= p_here * REMOTE_GAIN
        });
        if wider_free {
            return false;
        }
        let half = root / 2;
        if foreign.len() > half && m * 4 < root {
            let share = pool.nodes_by_size().iter().copied().rev().find(|&n| pool.node(n).size() <= half);
            if share.is_some_and(|n| p(n) >= p_here * REMOTE_GAIN) {
                return false;
            }
        }
        true
    }

    fn continue_on_lane(&mut self, op: &ReadyOpView<'_>, node: NodeId, state: &SchedState<'_>) -> bool {
        if !self.waiting.iter().all(|&h| h == op.client) {
            return false;
        }
        let pool = state.pool;
        let others_active = pool.active_units().difference(&pool.node(node).units);
        let alone = others_active.is_empty() && pool.pending().is_empty();
        let key = (shape_key(op.kernel), node);
        if alone {
            if let Some(&answer) = self.continue_memo.get(&key) {
                return answer;
            }
        }
        // Continue only on a right-sized node: not much wider than the op can use (else rebind
        // narrower and free units), and no available wider node would be clearly faster.
        let answer = self.decide_continue(op, node, state, &others_active);
        if alone {
            if self.continue_memo.len() >= CONTINUE_MEMO_MAX {
                self.continue_memo.clear();
            }
            self.continue_memo.insert(key, answer);
        }
        answer
    }
}

impl ThroughputOriented {
    /// The `continue_on_lane` decision itself (see there).
    fn decide_continue(
        &mut self,
        op: &ReadyOpView<'_>,
        node: NodeId,
        state: &SchedState<'_>,
        others_active: &UnitSet,
    ) -> bool {
        let pool = state.pool;
        let current = pool.node(node);
        let m = current.size();
        let curve = self.curves.curve(op.kernel, pool, state.profiles);
        let sizes: Vec<usize> = self.curves.sizes(pool).to_vec();
        let index = |sz: usize| sizes.binary_search(&sz).unwrap_or(0);
        let p = |sz: usize| curve[0] / curve[index(sz)].max(1e-9);
        let p_here = p(m);
        let (mut best_size, mut p_best) = (m, p_here);
        if others_active.is_empty() && pool.pending().is_empty() {
            // Fast path: nothing else is active, so every size is reachable once this lane drains.
            for &sz in &sizes {
                let p = p(sz);
                if p > p_best {
                    (p_best, best_size) = (p, sz);
                }
            }
        } else {
            for &n in pool.nodes_by_size() {
                let cand = pool.node(n);
                let reachable = n == node
                    || (cand.units.is_disjoint(others_active)
                        && matches!(pool.state(n), NodeState::Idle | NodeState::Leased { .. })
                        && pool.pending().iter().all(|(t, _)| pool.node(*t).units.is_disjoint(&cand.units)));
                if reachable {
                    let p = p(cand.size());
                    if p > p_best {
                        (p_best, best_size) = (p, cand.size());
                    }
                }
            }
        }
        if p_best > p_here * CONTINUE_GAIN && best_size > m {
            return false; // a clearly wider binding is available once this lane drains
        }
        if !others_active.is_empty() {
            let ready_at = state.busy_until(node);
            let continue_finish = ready_at as f64 + self.time(op.kernel, m, state);
            let base = ready_at as f64;
            if self
                .wait_alternative(op, m, ready_at, true, state)
                .is_some_and(|alt| (alt - base) * WAIT_GAIN < continue_finish - base)
            {
                return false; // a wider node frees up soon enough to be worth waiting for
            }
        }
        // Smallest size that achieves (almost) what this node gives.
        let enough = sizes.iter().copied().find(|&sz| p(sz) * CONTINUE_GAIN >= p_here).unwrap_or(m);
        // Holding more than needed only matters when another client has work placed or waiting.
        let others_busy = pool.active_nodes().iter().any(|&a| match pool.state(a) {
            NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } => *holder != op.client,
            NodeState::Reserved { purpose } => purpose.holder != op.client,
            NodeState::Idle => false,
        });
        !others_busy || m as f64 <= enough as f64 * OVERSIZE
    }
}

#[cfg(test)]
mod tests {
    use vitamin_hal::sim::SimBackend;
    use vitamin_hal::{Backend, Dim3, FunctionKind, FunctionRef, KernelArgs, LaunchAttributes};

    use super::*;
    use crate::pool::Pool;
    use crate::profile::Profiles;

    /// The node a lone op of `k` is planned on, on an idle simulated H200 pool.
    fn planned_units(k: &KernelLaunch) -> usize {
        let top = SimBackend::default_device().topology().clone();
        let pool = Pool::build(&top);
        let profiles = Profiles::new("test");
        let lanes = vec![Vec::new(); pool.nodes().len()];
        let state = SchedState {
            pool: &pool,
            now_ns: 0,
            profiles: &profiles,
            clients: &[],
            lane_busy_until: &lanes,
            cluster_refused: &crate::policy::NO_CLUSTER_REFUSALS,
        };
        let op = ReadyOpView {
            client: HolderId(1),
            op: OpId(1),
            kernel: k,
            ready_since_ns: 0,
            seq: 1,
            deadline_ns: None,
            min_units: 0,
        };
        let mut policy = ThroughputOriented::default();
        policy.begin_round(std::slice::from_ref(&op), &state);
        let eligible: Vec<NodeId> = pool.nodes_by_size().to_vec();
        let n = policy.select(&op, &eligible, &state).expect("an idle pool has a node for it");
        pool.node(n).size()
    }

    /// A kernel of one block per SM sized for two waves of the whole device is widened to the
    /// whole device once its occupancy is known; with the conservative guess (4 blocks per SM)
    /// the model sees no gain past 66 SMs and stops on a smaller node.
    #[test]
    fn the_launch_s_occupancy_decides_how_wide_a_lone_kernel_is_planned() {
        let k = KernelLaunch::new(
            FunctionRef::new(1, FunctionKind::Function, "persistent_gemm"),
            Dim3::x(264),
            Dim3::x(256),
            0,
            KernelArgs::empty(),
            LaunchAttributes::none(),
        );
        let guessed = planned_units(&k);
        let known = planned_units(&k.clone().with_resident_per_unit(1));
        assert_eq!(known, 132, "two full waves need every SM");
        assert!(guessed < 132, "the guess saturates early: planned on {guessed} units");
    }

    /// The node of `size` units whose first unit is `first`, on the fixture's simulated H200.
    fn node_at(pool: &Pool, size: usize, first: usize) -> NodeId {
        pool.nodes_by_size()
            .iter()
            .copied()
            .find(|&n| pool.node(n).size() == size && pool.node(n).units.iter().next() == Some(first))
            .unwrap_or_else(|| panic!("no node of {size} units at unit {first}"))
    }

    fn graph_view(g: &vitamin_hal::GraphLaunch, client: HolderId) -> ReadyGraphView<'_> {
        ReadyGraphView { client, op: OpId(7), graph: g, ready_since_ns: 0, seq: 7, deadline_ns: None, min_units: 0 }
    }

    /// A graph on a sliver beside a client that holds most of the device (the CUDA-graph decoder
    /// on 8 SMs beside ResNet-50 on 124, mixed-graph runs 5-6) neither continues there nor is
    /// bound there again: its client waits, `maintain` reclaims a fair half for it, and the graph
    /// takes that half once it is reserved. The wide client's graphs continue.
    #[test]
    fn a_graph_confined_to_a_sliver_waits_for_a_reclaimed_half() {
        use super::super::testkit::Fixture;
        use super::super::ClientClass;
        let mut f = Fixture::new(&[ClientClass::BestEffort, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let (narrow, wide) = (node_at(&f.pool, 8, 0), node_at(&f.pool, 124, 8));
        f.lease_busy(narrow, a, 1);
        f.lease_busy(wide, b, 3);
        let mut policy = ThroughputOriented::default();
        assert!(!policy.continue_graph(a, narrow, &f.at(0)), "the sliver's graph goes up");
        assert!(policy.continue_graph(b, wide, &f.at(0)), "the wide lease's graph continues");
        // Its predecessors done, the graph is ready with only the sliver eligible: it waits.
        f.complete(narrow, 1);
        let g = vitamin_hal::GraphLaunch::new(1, "decode_step");
        policy.begin_round(&[], &f.at(0));
        assert_eq!(policy.select_graph(&graph_view(&g, a), &[narrow], &f.at(0)), None);
        assert_eq!(policy.waiting(), [a]);
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        let [Preparation::Reclaim(t, r)] = plan.as_slice() else { panic!("one reclaim expected: {plan:?}") };
        let (t, r) = (*t, *r);
        // The smallest node of a fair share (132 / 2 units): SM 64-131.
        assert_eq!((f.pool.node(t).size(), r.holder), (68, a), "a fair half for the waiting client");
        assert!(f.pool.node(t).units.is_disjoint(&f.pool.node(narrow).units), "over b's lease only");
        // Pending (b's lease drains): still waiting, no second reclaim.
        f.pool.reclaim_for(t, r).unwrap();
        policy.begin_round(&[], &f.at(1));
        assert_eq!(policy.select_graph(&graph_view(&g, a), &[narrow], &f.at(1)), None);
        plan.clear();
        policy.maintain(&f.at(1), &mut plan);
        assert!(!plan.iter().any(|p| matches!(p, Preparation::Reclaim(..))), "{plan:?}");
        // b's lease drained: the half is reserved for a and the graph takes it.
        f.complete(wide, 3);
        assert!(matches!(f.pool.state(t), NodeState::Reserved { purpose } if purpose.holder == a));
        policy.begin_round(&[], &f.at(2));
        assert_eq!(policy.select_graph(&graph_view(&g, a), &[narrow, t], &f.at(2)), Some(t));
        assert!(policy.continue_graph(a, t, &f.at(2)), "a half is no sliver");
    }

    /// The sliver is kept when no half can be had (the rest of the device reserved or being
    /// reclaimed for another client), and where the other clients hold half the device or less:
    /// a graph never waits for a node that is not coming.
    #[test]
    fn a_graph_keeps_its_sliver_when_no_half_can_be_had() {
        use super::super::testkit::Fixture;
        use super::super::ClientClass;
        let classes = [ClientClass::BestEffort, ClientClass::BestEffort, ClientClass::BestEffort];
        let mut f = Fixture::new(&classes);
        let (a, b, c) = (HolderId(0), HolderId(1), HolderId(2));
        let (narrow, wide) = (node_at(&f.pool, 8, 0), node_at(&f.pool, 124, 8));
        f.lease_busy(narrow, a, 1);
        f.lease_busy(wide, b, 1);
        // c is reclaiming SM 64-131, which every node of a fair share (66 units or more) overlaps.
        let other_half = node_at(&f.pool, 68, 64);
        f.pool.reclaim_for(other_half, Reservation { holder: c, tag: TAG_FAIRNESS }).unwrap();
        let g = vitamin_hal::GraphLaunch::new(1, "decode_step");
        let mut policy = ThroughputOriented::default();
        policy.begin_round(&[], &f.at(0));
        assert_eq!(policy.select_graph(&graph_view(&g, a), &[narrow], &f.at(0)), Some(narrow));
        assert!(policy.waiting().is_empty());
        // Others on half the device or less: no confinement, whatever the lease's size.
        let mut f = Fixture::new(&classes);
        let (half, narrow) = (node_at(&f.pool, 64, 0), node_at(&f.pool, 8, 64));
        f.lease_busy(narrow, a, 1);
        f.lease_busy(half, b, 1);
        assert!(policy.continue_graph(a, narrow, &f.at(0)));
        assert_eq!(confined(&f.at(0), a, 8), None);
        assert_eq!(confined(&f.at(0), b, 8), None, "a's 8 units are no majority");
    }
}
