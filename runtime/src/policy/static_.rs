//! Static: a fixed partition per client, like MIG, static green contexts or MPS percentages.
//!
//! By default the `k`-th registered client (in registration order among `n`) gets the `k`-th node
//! of the shallowest tree level that has at least `n` nodes; an explicit assignment overrides it.

use std::collections::HashMap;

use super::{Policy, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, NodeKind};

/// The Static baseline policy.
#[derive(Debug, Default, Clone)]
pub struct Static {
    assignment: HashMap<HolderId, NodeId>,
}

impl Static {
    /// A Static policy with an explicit client -> node assignment.
    pub fn with_assignment(assignment: HashMap<HolderId, NodeId>) -> Self {
        Static { assignment }
    }

    /// The node of a client under the default rule.
    pub fn default_node(state: &SchedState<'_>, h: HolderId) -> Option<NodeId> {
        let n = state.clients.len().max(1);
        let k = state.clients.iter().position(|c| c.holder == h)?;
        let pool = state.pool;
        let max_depth = pool.nodes().iter().map(|x| x.depth).max().unwrap_or(0);
        (0..=max_depth).find_map(|d| {
            let level: Vec<NodeId> =
                pool.nodes().iter().filter(|x| x.depth == d && x.kind != NodeKind::Remainder).map(|x| x.id).collect();
            (level.len() >= n).then(|| level[k])
        })
    }
}

impl Policy for Static {
    fn name(&self) -> &'static str {
        "static"
    }
    fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
        super::oldest(queue)
    }
    fn select(&mut self, op: &ReadyOpView<'_>, eligible: &[NodeId], state: &SchedState<'_>) -> Option<NodeId> {
        let node = match self.assignment.get(&op.client) {
            Some(&n) => n,
            None => {
                let n = Self::default_node(state, op.client)?;
                self.assignment.insert(op.client, n);
                n
            }
        };
        eligible.contains(&node).then_some(node)
    }
}
