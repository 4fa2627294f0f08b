//! Static: a fixed partition per client, like MIG, static green contexts or MPS percentages.
//!
//! By default the device is cut into `n` disjoint tree nodes covering it (start from the root,
//! repeatedly split the widest node into its two children) and the `k`-th registered client gets
//! the `k`-th of them (widest first); an explicit assignment overrides it. A launch that cannot run
//! unchanged on its client's node (a cooperative or cluster launch larger than it) runs on the
//! smallest node that can, rather than never: when other clients' leases cover that node,
//! [`Policy::maintain`] reclaims the smallest node holding the client's share and the launch's
//! size floor for it (their gates close, their work drains, the launch runs, the lease is
//! released when idle). Without the reclaim such a launch waited for as long as the other
//! clients kept their shares busy (docs/results/daemon-pair.md). Likewise a client whose share is
//! covered by another client's lease (such a wider node, kept busy by lane continuation under a
//! daemon) gets its share back by a reclaim.
//!
//! Under a daemon a launch that only the whole device runs unchanged goes to the service partition
//! beside the other clients' shares ([`Policy::shares_whole_device`]), as under MPS: no static
//! partition holds such a launch at all (a green-context share the driver cannot place a cluster
//! on fails it), and taking the whole device from every other client for each one starved the
//! job that needs them (ResNet-50's 16-block-cluster cuDNN kernels: 0.147 of its alone throughput
//! next to a GPT job, docs/results/daemon-pair.md, run 4). Launches wider than the share but
//! narrower than the device still take the reclaim above.

use std::collections::HashMap;

use super::{Policy, Preparation, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, NodeState, Reservation};

/// Reservation tag of a node reclaimed for a client: its share back, or a node holding its share
/// and a launch wider than it.
pub const TAG_STATIC_RECLAIM: u64 = 3;

/// The Static baseline policy.
#[derive(Debug, Default, Clone)]
pub struct Static {
    assignment: HashMap<HolderId, NodeId>,
    /// Clients that waited in the last round for a node another client's lease covers, with the
    /// size they need (0: their share; more: a launch wider than the share).
    wants: HashMap<HolderId, usize>,
}

impl Static {
    /// A Static policy with an explicit client -> node assignment.
    pub fn with_assignment(assignment: HashMap<HolderId, NodeId>) -> Self {
        Static { assignment, wants: HashMap::new() }
    }

    /// The node of a client under the default rule.
    pub fn default_node(state: &SchedState<'_>, h: HolderId) -> Option<NodeId> {
        let n = state.clients.len().max(1);
        let k = state.clients.iter().position(|c| c.holder == h)?;
        Self::default_cut(state.pool, n).get(k).copied()
    }

    /// `n` disjoint tree nodes covering the device (fewer if the tree has fewer leaves), widest
    /// first.
    pub fn default_cut(pool: &crate::pool::Pool, n: usize) -> Vec<NodeId> {
        let mut cut = vec![pool.root()];
        while cut.len() < n {
            let Some((i, _)) = cut
                .iter()
                .enumerate()
                .filter(|(_, &c)| !pool.node(c).children.is_empty())
                .max_by_key(|(_, &c)| (pool.node(c).size(), std::cmp::Reverse(c)))
            else {
                break;
            };
            let wide = cut.remove(i);
            cut.extend(pool.node(wide).children.iter().copied());
        }
        cut.sort_by_key(|&c| (std::cmp::Reverse(pool.node(c).size()), c));
        cut
    }
}

impl Static {
    /// A launch of `client` needing `min_units`, more than its share `node` holds: the smallest
    /// eligible node holding the share and the floor, else `None` and `maintain` reclaims one.
    fn wider_than_share(
        &mut self,
        client: HolderId,
        min_units: usize,
        node: NodeId,
        eligible: &[NodeId],
        state: &SchedState<'_>,
    ) -> Option<NodeId> {
        let pool = state.pool;
        let cut = pool.node(node).units;
        let wide = eligible
            .iter()
            .copied()
            .filter(|&n| cut.is_subset(&pool.node(n).units) && pool.node(n).size() >= min_units)
            .min_by_key(|&n| pool.node(n).size());
        if wide.is_none() {
            let f = self.wants.entry(client).or_insert(0);
            *f = (*f).max(min_units);
        }
        wide
    }

    /// The client's node (explicit assignment, else the default rule, remembered).
    fn node_of(&mut self, client: HolderId, state: &SchedState<'_>) -> Option<NodeId> {
        match self.assignment.get(&client) {
            Some(&n) => Some(n),
            None => {
                let n = Self::default_node(state, client)?;
                self.assignment.insert(client, n);
                Some(n)
            }
        }
    }
}

impl Policy for Static {
    fn shares_whole_device(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "static"
    }
    fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
        super::oldest(queue)
    }
    fn maintain(&mut self, state: &SchedState<'_>, plan: &mut Vec<Preparation>) {
        let pool = state.pool;
        let wants = std::mem::take(&mut self.wants);
        for &n in pool.active_nodes() {
            if let NodeState::Reserved { purpose } = pool.state(n) {
                if purpose.tag == TAG_STATIC_RECLAIM && !wants.contains_key(&purpose.holder) {
                    plan.push(Preparation::Unreserve(n));
                }
            }
        }
        for (&h, &floor) in &wants {
            let Some(&share) = self.assignment.get(&h) else { continue };
            let reserved_for_h =
                |n: NodeId| matches!(pool.state(n), NodeState::Reserved { purpose } if purpose.holder == h);
            if pool.active_nodes().iter().any(|&n| reserved_for_h(n))
                || pool.pending().iter().any(|(_, r)| r.holder == h)
            {
                continue;
            }
            let cut = pool.node(share).units;
            let target = pool.nodes_by_size().iter().copied().find(|&n| {
                let u = pool.node(n).units;
                pool.node(n).size() >= floor
                    && cut.is_subset(&u)
                    && pool.pending().iter().all(|(t, _)| pool.node(*t).units.is_disjoint(&u))
                    && !pool.active_nodes().iter().any(|&a| {
                        matches!(pool.state(a), NodeState::Reserved { .. }) && pool.node(a).units.intersects(&u)
                    })
            });
            if let Some(t) = target {
                plan.push(Preparation::Reclaim(t, Reservation { holder: h, tag: TAG_STATIC_RECLAIM }));
            }
        }
    }
    fn select(&mut self, op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        let node = self.node_of(op.client, state)?;
        if eligible.contains(&node) {
            return Some(node);
        }
        if op.min_units > state.pool.node(node).size() {
            return self.wider_than_share(op.client, op.min_units, node, eligible, state);
        }
        // Not offered although nobody else holds it: the launch cannot run unchanged there (a
        // cooperative or cluster launch larger than the partition). Run it on the smallest node that
        // can (as MPS would) instead of never; MIG would fail such a launch.
        let pool = state.pool;
        let free_for_client = match pool.state(node) {
            NodeState::Idle => {
                pool.is_eligible(node, op.client) || !pool.active_units().intersects(&pool.node(node).units)
            }
            NodeState::Leased { holder, .. } => *holder == op.client,
            _ => false,
        };
        if free_for_client {
            return super::smallest(eligible, pool);
        }
        // Another client's lease covers the share (a node reclaimed for its wide launch): take
        // the share back.
        let units = pool.node(node).units;
        let foreign = pool.active_nodes().iter().any(|&a| match pool.state(a) {
            NodeState::Leased { holder, .. } | NodeState::Draining { holder, .. } => {
                *holder != op.client && pool.node(a).units.intersects(&units)
            }
            _ => false,
        });
        if foreign {
            self.wants.entry(op.client).or_insert(0);
        }
        None
    }
    fn select_graph(&mut self, op: &ReadyGraphView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        // A graph that its client's slice runs waits for that slice like the client's kernels do;
        // one that needs more (on CUDA a graph runs only on the whole device) is placed like a
        // launch wider than the share.
        let node = self.node_of(op.client, state)?;
        if eligible.contains(&node) {
            return Some(node);
        }
        if op.min_units > state.pool.node(node).size() {
            return self.wider_than_share(op.client, op.min_units, node, eligible, state);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use vitamin_hal::sim::SimBackend;
    use vitamin_hal::Backend;

    use super::*;
    use crate::pool::Pool;

    /// A client whose share another client's wide lease covers (kept busy, as lane continuation
    /// does under a daemon) gets its share back: `maintain` reclaims it, the wide lease drains, and
    /// the share is then offered to its client.
    #[test]
    fn a_share_covered_by_another_clients_busy_lease_is_reclaimed() {
        use crate::policy::testkit::{kernel, op, Fixture};
        use crate::policy::ClientClass;

        let mut f = Fixture::new(&[ClientClass::BestEffort, ClientClass::BestEffort]);
        let (a, b) = (HolderId(0), HolderId(1));
        let root = f.pool.root();
        // b holds the whole device with work outstanding (its wide launch, then more continued there).
        f.lease_busy(root, b, 3);
        let k = kernel("k", 64);
        let view = op(&k, a, 1);
        let mut policy = Static::default();
        let mut eligible = Vec::new();
        f.pool.eligible(a, 0, &mut eligible);
        assert_eq!(policy.select(&view, &eligible, &f.at(0)), None, "a's share is covered by b's lease");
        let share = Static::default_node(&f.at(0), a).unwrap();
        let mut plan = Vec::new();
        policy.maintain(&f.at(0), &mut plan);
        let reclaim = plan.iter().find_map(|p| match p {
            Preparation::Reclaim(n, r) if r.holder == a => Some(*n),
            _ => None,
        });
        assert_eq!(reclaim, Some(share), "maintain reclaims a's share: {plan:?}");
        f.pool.reclaim_for(share, Reservation { holder: a, tag: TAG_STATIC_RECLAIM }).unwrap();
        assert!(matches!(f.pool.state(root), NodeState::Draining { .. }), "b's gate closes");
        f.complete(root, 3);
        f.pool.eligible(a, 0, &mut eligible);
        assert_eq!(policy.select(&view, &eligible, &f.at(0)), Some(share), "the share is offered to a");
    }

    #[test]
    fn default_cut_covers_the_device_with_disjoint_nodes() {
        for backend in vitamin_hal::sim::SimPreset::all().iter().map(|p| p.backend()) {
            let pool = Pool::build(backend.topology());
            for n in 1..=6 {
                let cut = Static::default_cut(&pool, n);
                assert_eq!(cut.len(), n);
                let mut covered = vitamin_hal::UnitSet::EMPTY;
                for &c in &cut {
                    assert!(pool.node(c).units.is_disjoint(&covered), "cut nodes overlap");
                    covered |= pool.node(c).units;
                }
                assert_eq!(covered, backend.topology().all_units(), "the cut covers every unit (n={n})");
            }
        }
        // The default preset: 132 units in 15 leaves of 8 and one of 12.
        let pool = Pool::build(SimBackend::default_device().topology());
        let sizes: Vec<usize> = Static::default_cut(&pool, 3).iter().map(|&c| pool.node(c).size()).collect();
        assert_eq!(sizes, vec![64, 36, 32]);
    }
}
