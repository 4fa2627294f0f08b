//! [`Realized`]: a pool plus one backend partition per node, created once at start-up.

use std::sync::Arc;

use vitamin_hal::{Backend, PhysicalPartition};

use super::error::PoolError;
use super::hierarchy::{Hierarchy, Node, NodeId};
use super::state::Pool;

/// A [`Pool`] whose every node has been realized as a backend partition (a green context with
/// its streams, a set of CU-masked streams, a simulated partition). The pool stays
/// backend-neutral; this only maps node id -> partition handle.
///
/// Creating partitions is expensive (about 1.3 ms and 5 MiB per green context): do it once at
/// start-up, never on the dispatch path.
#[derive(Debug)]
pub struct Realized<P> {
    pool: Pool,
    partitions: Vec<P>,
}

impl<P: PhysicalPartition> Realized<P> {
    /// Builds the pool over `backend`'s topology and creates every node's partition with
    /// `lanes` lanes, in node id order.
    pub fn create<B: Backend<Partition = P>>(backend: &B, lanes: usize) -> Result<Self, PoolError> {
        Self::from_hierarchy(backend, Arc::new(Hierarchy::build(backend.topology())), lanes)
    }

    /// Realizes an existing hierarchy (e.g. one shared with a daemon that owns the lease
    /// state) on `backend`; the returned pool starts all idle.
    pub fn from_hierarchy<B: Backend<Partition = P>>(
        backend: &B,
        hierarchy: Arc<Hierarchy>,
        lanes: usize,
    ) -> Result<Self, PoolError> {
        let partitions =
            hierarchy.nodes().iter().map(|node| Self::realize_node(backend, node, lanes)).collect::<Result<_, _>>()?;
        Ok(Realized { pool: Pool::new(hierarchy), partitions })
    }

    /// Creates `node`'s partition with `lanes` lanes and checks that it has the node's units.
    pub fn realize_node<B: Backend<Partition = P>>(backend: &B, node: &Node, lanes: usize) -> Result<P, PoolError> {
        let p = backend
            .create_partition(&node.units, lanes)
            .map_err(|source| PoolError::Realize { node: node.id, source })?;
        if *p.units() != node.units {
            return Err(PoolError::RealizedWrongUnits {
                node: node.id,
                expected: node.units.to_string(),
                got: p.units().to_string(),
            });
        }
        Ok(p)
    }
}

impl<P> Realized<P> {
    /// The lease state.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The lease state, for transitions.
    pub fn pool_mut(&mut self) -> &mut Pool {
        &mut self.pool
    }

    /// The partition realizing node `id`.
    ///
    /// # Panics
    /// If `id` is not a node of this pool.
    pub fn partition(&self, id: NodeId) -> &P {
        &self.partitions[id.index()]
    }

    /// Every partition, indexed by [`NodeId::index`].
    pub fn partitions(&self) -> &[P] {
        &self.partitions
    }

    /// The lease state (mutable) and the partitions together, for a dispatcher that leases and
    /// submits in one step.
    pub fn split_mut(&mut self) -> (&mut Pool, &[P]) {
        (&mut self.pool, &self.partitions)
    }

    /// Takes the pool and partitions apart.
    pub fn into_parts(self) -> (Pool, Vec<P>) {
        (self.pool, self.partitions)
    }
}
