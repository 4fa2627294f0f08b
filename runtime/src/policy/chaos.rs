//! Chaos: a uniformly random eligible node for every op, from a seeded generator. The
//! determinism stress test: outputs must not depend on where anything ran.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{Policy, ReadyOpView, SchedState};
use crate::pool::NodeId;

/// The Chaos policy.
#[derive(Debug, Clone)]
pub struct Chaos {
    rng: ChaCha8Rng,
}

impl Chaos {
    /// A Chaos policy with a seed.
    pub fn new(seed: u64) -> Self {
        Chaos { rng: ChaCha8Rng::seed_from_u64(seed) }
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
    fn continue_on_lane(&mut self, _op: &ReadyOpView<'_>, _node: NodeId, _state: &SchedState<'_>) -> bool {
        // Half the time refuse, so ops are re-bound to random nodes across a dependency chain.
        self.rng.gen_bool(0.5)
    }
}
