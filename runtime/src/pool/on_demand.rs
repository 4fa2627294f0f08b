//! [`NodePartition`]: one pool node's backend partition, created at start-up (the default) or
//! at its first use (`pool = "on-demand"`, the contrast of the paper's overhead experiment).
//!
//! The dispatcher holds one per node and drives it through [`PhysicalPartition`]. An on-demand
//! node creates its partition the first time anything needs it (a submission, a compatibility
//! check, a raw lane), on whichever thread asks, and keeps it: destroying a green context does
//! not return its device memory (FACTS.md), so a pool that created and destroyed partitions per
//! lease would leak about 4 MiB each time. Polls, synchronizes and progress views of a node that
//! was never created answer "nothing there" without creating it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use serde::Serialize;
use vitamin_hal::{Fence, HalError, Incompatibility, LaneId, LaneProgress, OpDesc, PhysicalPartition, UnitSet};

/// Creates one node's partition: `(units, lanes)` -> partition (a backend's `create_partition`).
pub type Factory<P> = dyn Fn(&UnitSet, usize) -> Result<P, HalError> + Send + Sync;

/// Partitions created on demand, shared by every node of one pool.
#[derive(Debug, Default)]
pub struct Creations {
    created: AtomicU64,
    failed: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
}

/// What [`Creations`] counted, for the census.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CreationReport {
    /// Partitions created on the dispatch path.
    pub created: u64,
    /// Creations that failed (the node then refuses work).
    pub failed: u64,
    /// Wall time of all creations together, ms.
    pub total_ms: f64,
    /// The longest single creation, ms.
    pub max_ms: f64,
}

impl Creations {
    /// The counters now.
    pub fn report(&self) -> CreationReport {
        let ms = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e6;
        CreationReport {
            created: self.created.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            total_ms: ms(&self.total_ns),
            max_ms: ms(&self.max_ns),
        }
    }

    fn record(&self, ns: u64, ok: bool) {
        if ok { &self.created } else { &self.failed }.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }
}

/// How an on-demand node makes its partition.
struct Maker<P> {
    factory: Arc<Factory<P>>,
    creations: Arc<Creations>,
    /// Serializes creation, so that two threads never create the same node twice.
    lock: Mutex<()>,
    /// Why the creation failed, once it has: the node is never tried again (a failed creation
    /// costs as much as one that succeeds, and it would fail again).
    failure: OnceLock<HalError>,
}

/// One pool node's partition: present from the start, or created at first use.
pub struct NodePartition<P> {
    units: UnitSet,
    lanes: usize,
    slot: OnceLock<P>,
    maker: Option<Maker<P>>,
}

impl<P: fmt::Debug> fmt::Debug for NodePartition<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodePartition")
            .field("units", &self.units)
            .field("lanes", &self.lanes)
            .field("partition", &self.slot.get())
            .field("on_demand", &self.maker.is_some())
            .finish()
    }
}

impl<P: PhysicalPartition> NodePartition<P> {
    /// A node whose partition was created at start-up.
    pub fn ready(partition: P) -> Self {
        let (units, lanes) = (*partition.units(), partition.lanes());
        NodePartition { units, lanes, slot: OnceLock::from(partition), maker: None }
    }

    /// A node whose partition `factory` creates at its first use, counted in `creations`.
    pub fn on_demand(units: UnitSet, lanes: usize, factory: Arc<Factory<P>>, creations: Arc<Creations>) -> Self {
        NodePartition {
            units,
            lanes,
            slot: OnceLock::new(),
            maker: Some(Maker { factory, creations, lock: Mutex::new(()), failure: OnceLock::new() }),
        }
    }

    /// Whether the partition exists now.
    pub fn is_created(&self) -> bool {
        self.slot.get().is_some()
    }

    /// Whether creating the partition was tried and failed: the node takes no work.
    pub fn failed(&self) -> bool {
        self.maker.as_ref().is_some_and(|m| m.failure.get().is_some())
    }

    /// The partition, if it exists, without creating it.
    pub fn created(&self) -> Option<&P> {
        self.slot.get()
    }

    /// Whether `op` may run unchanged here, asked without creating the partition: a partition of an
    /// on-demand pool that does not exist yet may (it is checked, and created, when a policy
    /// chooses it); one that exists answers [`PhysicalPartition::can_execute`].
    pub fn may_execute(&self, op: &OpDesc) -> bool {
        self.slot.get().is_none_or(|p| p.can_execute(op).is_ok())
    }

    /// The partition, created now if it does not exist yet.
    pub fn get(&self) -> Result<&P, HalError> {
        if let Some(p) = self.slot.get() {
            return Ok(p);
        }
        let Some(maker) = &self.maker else { unreachable!("a node created at start-up always holds its partition") };
        if let Some(e) = maker.failure.get() {
            return Err(e.clone());
        }
        let _guard = maker.lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = self.slot.get() {
            return Ok(p);
        }
        if let Some(e) = maker.failure.get() {
            return Err(e.clone());
        }
        let t0 = Instant::now();
        let made = (maker.factory)(&self.units, self.lanes).and_then(|p| {
            if *p.units() == self.units {
                Ok(p)
            } else {
                Err(HalError::InvalidPartition(format!(
                    "asked for units {}, the backend created {}",
                    self.units,
                    p.units()
                )))
            }
        });
        maker.creations.record(t0.elapsed().as_nanos() as u64, made.is_ok());
        match made {
            Ok(p) => Ok(self.slot.get_or_init(|| p)),
            Err(e) => Err(maker.failure.get_or_init(|| e).clone()),
        }
    }
}

impl<P: PhysicalPartition> PhysicalPartition for NodePartition<P> {
    fn units(&self) -> &UnitSet {
        &self.units
    }

    fn lanes(&self) -> usize {
        self.lanes
    }

    fn can_execute(&self, op: &OpDesc) -> Result<(), Incompatibility> {
        match self.get() {
            Ok(p) => p.can_execute(op),
            Err(e) => Err(Incompatibility::NotRealized(e.to_string())),
        }
    }

    fn submit(&self, lane: LaneId, op: &Arc<OpDesc>) -> Result<Fence, HalError> {
        self.get()?.submit(lane, op)
    }

    fn submit_native(
        &self,
        lane: LaneId,
        issue: &mut dyn FnMut(u64) -> Result<(), HalError>,
    ) -> Result<Fence, HalError> {
        self.get()?.submit_native(lane, issue)
    }

    fn poll(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.slot.get().map_or(Ok(0), |p| p.poll(completed))
    }

    fn poll_observing(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.slot.get().map_or(Ok(0), |p| p.poll_observing(completed))
    }

    fn poll_for_waiter(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.slot.get().map_or(Ok(0), |p| p.poll_for_waiter(completed))
    }

    fn lane_progress(&self, lane: LaneId, seq: u64) -> Option<LaneProgress> {
        self.slot.get()?.lane_progress(lane, seq)
    }

    fn synchronize(&self) -> Result<(), HalError> {
        self.slot.get().map_or(Ok(()), PhysicalPartition::synchronize)
    }
}
