//! The two backend traits: [`Backend`] (a device) and [`PhysicalPartition`] (one pCtx).

use std::sync::Arc;
use std::time::Duration;

use crate::op::OpDesc;
use crate::topology::Topology;
use crate::unitset::UnitSet;
use crate::{HalError, Incompatibility};

/// Index of a lane (backend stream) within a partition.
pub type LaneId = u32;

/// The completion handle of one submitted op: its lane and its per-lane sequence number.
///
/// Sequence numbers start at 1 and grow by one per submission on a lane; ops on one lane complete
/// in submission order, so a lane's completions form a growing prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fence {
    /// Lane the op was submitted on.
    pub lane: LaneId,
    /// Per-lane submission sequence number (1-based).
    pub seq: u64,
}

/// One pre-created physical context: a fixed [`UnitSet`] realized by the backend, with lanes.
///
/// Holds no application-visible state. Implementations do not validate scheduling decisions
/// (leases, dependencies): the runtime does. They must never change a descriptor.
pub trait PhysicalPartition: Send + Sync {
    /// The units this partition confines work to.
    fn units(&self) -> &UnitSet;

    /// Number of lanes (backend streams).
    fn lanes(&self) -> usize;

    /// Whether `op` can run here exactly as described (e.g. a cooperative launch needs all its
    /// blocks co-resident on these units; a cluster launch needs its cluster shape honoured).
    fn can_execute(&self, op: &OpDesc) -> Result<(), Incompatibility>;

    /// Submits `op` unchanged on `lane`, after everything previously submitted on that lane.
    /// Returns the op's fence. On error nothing was submitted.
    fn submit(&self, lane: LaneId, op: &Arc<OpDesc>) -> Result<Fence, HalError>;

    /// Submits on `lane` a launch that `issue` makes itself on the lane's native stream (its
    /// handle as an integer), after everything previously submitted on that lane: for a caller
    /// that launches an application's call with the application's own argument pointers before
    /// it copies them into a descriptor (launch-first eager binding). Returns the launch's fence.
    /// Refused (nothing issued) where the lane's earlier work is not issued yet or the backend
    /// has no native streams; on error from `issue` nothing counts as submitted.
    fn submit_native(
        &self,
        lane: LaneId,
        issue: &mut dyn FnMut(u64) -> Result<(), HalError>,
    ) -> Result<Fence, HalError> {
        let _ = (lane, issue);
        Err(HalError::Busy("this backend has no native streams to launch on".into()))
    }

    /// Appends the fences that completed since the last poll (each exactly once, per lane in
    /// submission order) and returns how many were appended. One call covers all lanes.
    fn poll(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError>;

    /// [`poll`](Self::poll) that only observes: it adds no completion tracking of its own (no
    /// fence is recorded on a lane), leaving that to a later [`poll`](Self::poll), so that the
    /// thread making that poll is the one whose driver calls a lane's stream sees. By default
    /// the same as `poll`.
    fn poll_observing(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll(completed)
    }

    /// [`poll`](Self::poll) by a thread waiting in a synchronize call for the work it polls:
    /// the backend may track completions for it differently (fences recorded for waiters only). By default
    /// the same as `poll`.
    fn poll_for_waiter(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll(completed)
    }

    /// A lock-free view of `lane`'s progress that will report sequence number `seq` complete
    /// without another [`poll`](Self::poll): `Some` only where the backend has a fence covering
    /// `seq` whose completion a load can see (a memory fence: a word the device writes into
    /// host memory). A thread waiting for that op can then spin on
    /// [`LaneProgress::reached`] instead of polling; the poll still reports the fence, exactly
    /// once, as usual. `None` (the default): no such fence, poll.
    fn lane_progress(&self, lane: LaneId, seq: u64) -> Option<LaneProgress> {
        let _ = (lane, seq);
        None
    }

    /// Blocks until everything submitted so far has completed (used to drain before teardown).
    fn synchronize(&self) -> Result<(), HalError>;
}

/// A lane's completed sequence number as a lock-free read ([`PhysicalPartition::lane_progress`]):
/// it only grows, and a value of at least `seq` means the lane's op `seq` and every op before it
/// on the lane completed. Cheap to clone (one reference count); reading it is one load.
#[derive(Clone)]
pub struct LaneProgress(Arc<dyn Fn() -> u64 + Send + Sync>);

impl LaneProgress {
    /// A view reading the lane's completed sequence number with `read` (which must only grow).
    pub fn new(read: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        LaneProgress(Arc::new(read))
    }

    /// The lane's completed sequence number now.
    pub fn completed(&self) -> u64 {
        (self.0)()
    }

    /// Whether the lane's op `seq` completed.
    pub fn reached(&self, seq: u64) -> bool {
        self.completed() >= seq
    }
}

impl std::fmt::Debug for LaneProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LaneProgress").field(&self.completed()).finish()
    }
}

/// A device able to realize partitions.
pub trait Backend: Send + Sync {
    /// The partition type this backend creates.
    type Partition: PhysicalPartition;

    /// The device's topology (filled once by the probe).
    fn topology(&self) -> &Topology;

    /// Creates a partition over `units` (which must be a union of leaves) with `lanes` lanes.
    /// Expensive: call at start-up, never on the dispatch path.
    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<Self::Partition, HalError>;

    /// The backend's clock in nanoseconds: virtual time on the simulated device, a monotonic
    /// clock on hardware.
    fn now_ns(&self) -> u64;

    /// Waits until submitted work may have progressed, for at most `timeout`: on hardware this
    /// sleeps or yields briefly; on the simulated device it advances virtual time to the next
    /// completion. Returns whether any work was still outstanding before the wait.
    fn wait_for_progress(&self, timeout: Duration) -> Result<bool, HalError>;
}

/// Checks that `units` is a non-empty union of whole leaves of `topology` (the only unit sets a
/// one-split backend can realize).
pub fn check_union_of_leaves(topology: &Topology, units: &UnitSet) -> Result<(), HalError> {
    if units.is_empty() {
        return Err(HalError::InvalidPartition("empty unit set".into()));
    }
    let mut covered = UnitSet::EMPTY;
    for leaf in topology.leaves() {
        if leaf.is_subset(units) {
            covered |= *leaf;
        } else if leaf.intersects(units) {
            return Err(HalError::InvalidPartition(format!(
                "{} cuts leaf {} : partitions must be unions of whole leaves",
                units.display(topology.unit_name()),
                leaf.display(topology.unit_name())
            )));
        }
    }
    if covered != *units {
        return Err(HalError::InvalidPartition(format!(
            "{} includes units outside the device",
            units.display(topology.unit_name())
        )));
    }
    Ok(())
}
