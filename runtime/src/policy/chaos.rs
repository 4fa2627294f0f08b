//! Chaos: a uniformly random eligible node for every op (kernels and graph launches), from a
//! seeded generator. The
//! determinism stress test: outputs must not depend on where anything ran.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Policy, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::NodeId;

/// The Chaos policy.
#[derive(Debug, Clone)]
pub struct Chaos {
    rng: ChaCha8Rng,
    seed: u64,
}

impl Chaos {
    /// A Chaos policy with a seed.
    pub fn new(seed: u64) -> Self {
        Chaos { rng: ChaCha8Rng::seed_from_u64(seed), seed }
    }
}

impl Policy for Chaos {
    fn name(&self) -> &'static str {
        "chaos"
    }
    fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
        (!queue.is_empty()).then(|| self.rng.gen_range(0..queue.len()))
    }
    fn select(&mut self, _op: &ReadyOpView<'_>, eligible: &[NodeId], _state: &SchedState<'_>) -> Option<NodeId> {
        (!eligible.is_empty()).then(|| eligible[self.rng.gen_range(0..eligible.len())])
    }
    fn select_graph(
        &mut self,
        _op: &ReadyGraphView<'_>,
        eligible: &[NodeId],
        _state: &SchedState<'_>,
    ) -> Option<NodeId> {
        // Graph replays too land on random partitions, so determinism checks cover them.
        (!eligible.is_empty()).then(|| eligible[self.rng.gen_range(0..eligible.len())])
    }
    fn continue_on_lane(&mut self, op: &ReadyOpView<'_>, _node: NodeId, _state: &SchedState<'_>) -> bool {
        // Refuse for half of the ops, decided once per op (the dispatcher asks again every round
        // while an op waits; a fresh coin each time would accept almost every op eventually), so
        // dependency chains are re-bound to random nodes.
        let mut h = self.seed ^ u64::from(op.client.0).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ op.op.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h & 1 == 0
    }
}
