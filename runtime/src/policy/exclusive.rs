//! Exclusive: every kernel and graph launch runs on the whole device (time-sharing baseline). Clients alternate as
//! leases drain: the oldest ready op goes first. A client that keeps its lease busy (continuing on
//! it, as a client under a daemon does locally) would never let it drain; so while another
//! client's op waits, the whole device is reclaimed for the oldest waiter once the holder has had
//! it for a turn of [`TURN_NS`]: its gate closes, its outstanding work completes, and the waiter's
//! client gets the device next. Without the turn, clients alternated at every op and each op of one
//! waited for the other's queue to drain (measured on the H200: two training jobs together at 0.50
//! of one alone, a decoder's requests 1.1 s at 2 requests/s; docs/results/eval.md, run 2).

use super::{Policy, Preparation, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, NodeState, Reservation};

/// Reservation tag of the whole device reclaimed for the oldest waiting client.
pub const TAG_EXCLUSIVE_TURN: u64 = 4;

/// Least time a client holds the whole device before it is reclaimed for a waiting client: a
/// chosen value (not measured against alternatives), long enough for a decode step or several
/// training kernels, short against a request's latency.
pub const TURN_NS: u64 = 10_000_000;

/// The Exclusive baseline policy.
#[derive(Debug, Default, Clone)]
pub struct Exclusive {
    /// The client of the oldest ready op of the last round among clients that neither hold the
    /// whole device nor have it reserved.
    waiter: Option<HolderId>,
    /// Clients with a ready op in the last round.
    waiting: Vec<HolderId>,
    /// The client holding the whole device's lease, and since when (first seen holding it).
    turn: Option<(HolderId, u64)>,
}

impl Policy for Exclusive {
    fn name(&self) -> &'static str {
        "exclusive"
    }
    fn begin_round(&mut self, queue: &[ReadyOpView<'_>], state: &SchedState<'_>) {
        let pool = state.pool;
        let owner = match pool.state(pool.root()) {
            NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } => Some(*holder),
            NodeState::Reserved { purpose } => Some(purpose.holder),
            NodeState::Idle => None,
        };
        self.waiter = queue.iter().filter(|o| Some(o.client) != owner).min_by_key(|o| o.seq).map(|o| o.client);
        self.waiting.clear();
        self.waiting.extend(queue.iter().map(|o| o.client));
    }
    fn maintain(&mut self, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        let pool = state.pool;
        let root = pool.root();
        match pool.state(root) {
            // A turn reserved for a client that no longer waits is given back.
            NodeState::Reserved { purpose }
                if purpose.tag == TAG_EXCLUSIVE_TURN && !self.waiting.contains(&purpose.holder) =>
            {
                plan.push(Preparation::Unreserve(root));
            }
            NodeState::Leased { holder, .. } => {
                let since = match self.turn {
                    Some((h, t)) if h == *holder => t,
                    _ => {
                        self.turn = Some((*holder, state.now_ns));
                        state.now_ns
                    }
                };
                let over = state.now_ns.saturating_sub(since) >= TURN_NS;
                if let Some(w) = self.waiter.filter(|w| w != holder && over && pool.pending().is_empty()) {
                    plan.push(Preparation::Reclaim(root, Reservation { holder: w, tag: TAG_EXCLUSIVE_TURN }));
                }
            }
            _ => {}
        }
    }
    fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
        super::oldest(queue)
    }
    fn select(&mut self, _op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        let root = state.pool.root();
        eligible.contains(&root).then_some(root)
    }
    fn select_graph(
        &mut self,
        _op: &ReadyGraphView<'_>,
        eligible: &[NodeId],
        state: &SchedState<'_>,
    ) -> Option<NodeId> {
        let root = state.pool.root();
        eligible.contains(&root).then_some(root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testkit::{kernel, op, Fixture};
    use crate::policy::ClientClass;

    /// A client that keeps the whole device busy (continuing on its lease) is made to let the
    /// next waiting client have it after a turn: the device is reclaimed for the waiter, handed to
    /// it once the holder's work drained, and then reclaimed back for the first client when its op
    /// has waited out the waiter's turn.
    /// Without this, a decoder next to a training job under a daemon waited seconds per request
    /// (measured on the H200: p50 5.2 s, docs/results/eval.md, mixed-resnet50 run 1).
    #[test]
    fn clients_take_turns_on_the_whole_device_while_the_other_waits() {
        let mut f = Fixture::new(&[ClientClass::BestEffort, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let k = kernel("k", 64);
        let root = f.pool.root();
        let mut policy = Exclusive::default();
        let mut plan = Vec::new();
        let mut eligible = Vec::new();
        // b holds the whole device with work outstanding; a's op waits.
        f.lease_busy(root, b, 3);
        for (i, (holder, waiter)) in [(b, a), (a, b)].into_iter().enumerate() {
            let t0 = i as u64 * 10 * TURN_NS;
            let t = t0 + TURN_NS;
            let queue = [op(&k, waiter, 10)];
            // The holder keeps the device for a whole turn from when it was first seen holding it.
            for now in [t0, t - 1] {
                policy.begin_round(&queue, &f.at(now));
                plan.clear();
                policy.maintain(&f.at(now), &mut plan);
                assert!(plan.is_empty(), "within the holder's turn: {plan:?}");
            }
            policy.begin_round(&queue, &f.at(t));
            f.pool.eligible(waiter, 0, &mut eligible);
            assert_eq!(policy.select(&queue[0], &eligible, &f.at(t)), None);
            plan.clear();
            policy.maintain(&f.at(t), &mut plan);
            assert!(
                matches!(plan.as_slice(), [Preparation::Reclaim(n, r)] if *n == root && r.holder == waiter),
                "the whole device is reclaimed for the waiter: {plan:?}"
            );
            f.pool.reclaim_for(root, Reservation { holder: waiter, tag: TAG_EXCLUSIVE_TURN }).unwrap();
            assert!(matches!(f.pool.state(root), NodeState::Draining { holder: h, .. } if *h == holder));
            // Reclaiming again while it drains asks for nothing.
            policy.begin_round(&queue, &f.at(t));
            plan.clear();
            policy.maintain(&f.at(t), &mut plan);
            assert!(plan.is_empty(), "{plan:?}");
            f.complete(root, 3);
            // The holder's next op, older or not, does not take the turn back before the waiter ran.
            let queue = [op(&k, holder, 5), op(&k, waiter, 10)];
            policy.begin_round(&queue, &f.at(t));
            plan.clear();
            policy.maintain(&f.at(t), &mut plan);
            assert!(plan.is_empty(), "the waiter's turn stands: {plan:?}");
            f.pool.eligible(holder, 0, &mut eligible);
            assert_eq!(policy.select(&queue[0], &eligible, &f.at(t)), None);
            f.pool.eligible(waiter, 0, &mut eligible);
            assert_eq!(policy.select(&queue[1], &eligible, &f.at(t)), Some(root));
            f.lease_busy(root, waiter, 3);
        }
        // A turn reserved for a client that stopped waiting is given back.
        f.complete(root, 3);
        f.pool.release(root, b).unwrap();
        f.pool.reserve(root, Reservation { holder: a, tag: TAG_EXCLUSIVE_TURN }).unwrap();
        policy.begin_round(&[op(&k, b, 20)], &f.at(0));
        plan.clear();
        policy.maintain(&f.at(0), &mut plan);
        assert!(matches!(plan.as_slice(), [Preparation::Unreserve(n)] if *n == root), "{plan:?}");
    }
}
