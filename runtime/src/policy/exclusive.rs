//! Exclusive: every kernel and graph launch runs on the whole device (time-sharing baseline). Clients alternate as
//! leases drain: the oldest ready op goes first. A client that keeps its lease busy (continuing on
//! it, as a client under a daemon does locally) would never let it drain; so while another
//! client's op waits, the whole device is reclaimed for the oldest waiter: its holder's gate
//! closes, its outstanding work completes, and the waiter's client gets the device next.

use super::{Policy, Preparation, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, NodeState, Reservation};

/// Reservation tag of the whole device reclaimed for the oldest waiting client.
pub const TAG_EXCLUSIVE_TURN: u64 = 4;

/// The Exclusive baseline policy.
#[derive(Debug, Default, Clone)]
pub struct Exclusive {
    /// The client of the oldest ready op of the last round among clients that neither hold the
    /// whole device nor have it reserved.
    waiter: Option<HolderId>,
    /// Clients with a ready op in the last round.
    waiting: Vec<HolderId>,
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
            NodeState::Leased { holder, .. } if pool.pending().is_empty() => {
                if let Some(w) = self.waiter.filter(|w| w != holder) {
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
    /// next waiting client have it: the device is reclaimed for the waiter, handed to it once the
    /// holder's work drained, and then reclaimed back for the first client when its op waits.
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
        f.pool.lease(root, b).unwrap();
        for _ in 0..3 {
            f.pool.begin_submit(root, b).unwrap();
        }
        for (holder, waiter) in [(b, a), (a, b)] {
            let queue = [op(&k, waiter, 10)];
            policy.begin_round(&queue, &f.at(0));
            f.pool.eligible(waiter, 0, &mut eligible);
            assert_eq!(policy.select(&queue[0], &eligible, &f.at(0)), None);
            plan.clear();
            policy.maintain(&f.at(0), &mut plan);
            assert!(
                matches!(plan.as_slice(), [Preparation::Reclaim(n, r)] if *n == root && r.holder == waiter),
                "the whole device is reclaimed for the waiter: {plan:?}"
            );
            f.pool.reclaim_for(root, Reservation { holder: waiter, tag: TAG_EXCLUSIVE_TURN }).unwrap();
            assert!(matches!(f.pool.state(root), NodeState::Draining { holder: h, .. } if *h == holder));
            // Reclaiming again while it drains asks for nothing.
            policy.begin_round(&queue, &f.at(0));
            plan.clear();
            policy.maintain(&f.at(0), &mut plan);
            assert!(plan.is_empty(), "{plan:?}");
            for _ in 0..3 {
                f.pool.complete(root).unwrap();
            }
            // The holder's next op, older or not, does not take the turn back before the waiter ran.
            let queue = [op(&k, holder, 5), op(&k, waiter, 10)];
            policy.begin_round(&queue, &f.at(0));
            plan.clear();
            policy.maintain(&f.at(0), &mut plan);
            assert!(plan.is_empty(), "the waiter's turn stands: {plan:?}");
            f.pool.eligible(holder, 0, &mut eligible);
            assert_eq!(policy.select(&queue[0], &eligible, &f.at(0)), None);
            f.pool.eligible(waiter, 0, &mut eligible);
            assert_eq!(policy.select(&queue[1], &eligible, &f.at(0)), Some(root));
            f.pool.lease(root, waiter).unwrap();
            for _ in 0..3 {
                f.pool.begin_submit(root, waiter).unwrap();
            }
        }
        // A turn reserved for a client that stopped waiting is given back.
        for _ in 0..3 {
            f.pool.complete(root).unwrap();
        }
        f.pool.release(root, b).unwrap();
        f.pool.reserve(root, Reservation { holder: a, tag: TAG_EXCLUSIVE_TURN }).unwrap();
        policy.begin_round(&[op(&k, b, 20)], &f.at(0));
        plan.clear();
        policy.maintain(&f.at(0), &mut plan);
        assert!(matches!(plan.as_slice(), [Preparation::Unreserve(n)] if *n == root), "{plan:?}");
    }
}
