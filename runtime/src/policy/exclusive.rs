//! Exclusive: every kernel and graph launch runs on the whole device (time-sharing baseline). Clients alternate as
//! leases drain: the oldest ready op goes first.

use super::{Policy, ReadyGraphView, ReadyOpView, SchedState};
use crate::pool::NodeId;

/// The Exclusive baseline policy.
#[derive(Debug, Default, Clone, Copy)]
pub struct Exclusive;

impl Policy for Exclusive {
    fn name(&self) -> &'static str {
        "exclusive"
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
