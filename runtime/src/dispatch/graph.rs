//! Binding graph launches: one executable graph, one pool node.
//!
//! A graph launch (`OpDesc::Graph`) occupies units like a kernel, but vitamin cannot see inside it
//! (its kernels, shapes and internal dependencies belong to the driver), so it never reaches the
//! kernel path's Pick/Select, profiles or widening. After the round's kernels, each ready graph
//! launch, oldest first, is offered to [`Policy::select_graph`] with the nodes eligible for its
//! client, and the chosen node goes through exactly the validation, lease and submission path of a
//! kernel ([`Dispatcher::bind_at`]): the unchanged descriptor is submitted on one lane of that
//! node, after everything the graph's stream order requires. Only nodes whose partition
//! `can_execute` the graph are offered: on the simulated device any node (a graph's work stays on
//! the node's units there), on the H200 only the whole device, because a measurement there showed a
//! graph's kernels running on all SMs even when launched on a partition's stream
//! (docs/results/shim-bind-suite.md). Lane continuation applies to graphs like to any op (a graph recorded
//! behind a kernel can be bound to that kernel's lane at once, and a kernel behind a graph to the
//! graph's lane).

use vitamin_hal::{Backend, OpDesc};

use super::{DispatchError, Dispatcher};
use crate::policy::{Policy, ReadyGraphView};
use crate::pool::NodeId;

impl<B: Backend, P: Policy> Dispatcher<B, P> {
    /// Offers every ready graph launch to the policy and binds the node it chooses. Appends the
    /// `ready` indices of the ops submitted to `submitted`.
    pub(super) fn bind_graphs(&mut self, now: u64, submitted: &mut Vec<usize>) -> Result<(), DispatchError> {
        let mut eligible = Vec::new();
        // `ready` is in arrival order, so graphs are offered oldest first.
        for idx in 0..self.ready.len() {
            let node = {
                let entry = &self.ready[idx];
                let OpDesc::Graph(graph) = &*entry.desc else { continue };
                let client = &self.clients[entry.client].info;
                let view = ReadyGraphView {
                    client: client.holder,
                    op: entry.op,
                    graph,
                    ready_since_ns: entry.ready_since,
                    seq: entry.seq,
                    deadline_ns: client.deadline_ns,
                    min_units: 0,
                };
                // Offer only nodes that can run it as bound (on the H200: the whole device, because
                // a graph's kernels use every SM whatever stream launches it). An on-demand pool
                // asks only the partitions it has, as for kernels (`bind`), and `bind_at` checks a
                // node not created yet if it is chosen.
                let partitions = &self.partitions;
                let fits = |n: &NodeId| partitions[n.index()].may_execute(&entry.desc);
                self.arbiter.propose_graph(&view, now, fits, &mut eligible)
            };
            let Some(node) = node else { continue };
            if self.bind_at(idx, node)? {
                self.stats.graphs += 1;
                submitted.push(idx);
            }
        }
        Ok(())
    }
}
