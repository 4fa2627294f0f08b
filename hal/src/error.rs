//! Errors of the hardware layer: only what the caller cannot foresee, plus clear refusals.

use thiserror::Error;

/// Why a descriptor cannot run unchanged on a partition.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Incompatibility {
    /// A cooperative launch needs every block co-resident; this partition holds fewer at once.
    #[error(
        "cooperative launch of {blocks} blocks needs co-residency but the partition holds at most {capacity} at once"
    )]
    NotCoResident {
        /// Blocks in the grid.
        blocks: u64,
        /// Blocks the partition can hold at once for this kernel.
        capacity: u64,
    },
    /// A cluster launch whose cluster shape the partition cannot honour.
    #[error("cluster of {cluster_blocks} blocks cannot be placed on a partition of {units} units")]
    ClusterShape {
        /// Blocks per cluster.
        cluster_blocks: u64,
        /// Units in the partition.
        units: usize,
    },
    /// The function is unknown to this backend (e.g. a simulated kernel id never registered).
    #[error("unknown function {0}")]
    UnknownFunction(String),
    /// The launch is invalid on any partition (the native API would reject it too).
    #[error("invalid launch: {0}")]
    InvalidLaunch(String),
    /// The function's launch is valid in the application's own context but not in this
    /// partition's (a limit the application raised there, such as the dynamic shared memory
    /// size, could not be raised here), so it runs only where the application's context runs it.
    #[error("{function} launches only in the application's context: {why}")]
    ContextBound {
        /// The kernel's name.
        function: String,
        /// What the partition's context refused.
        why: String,
    },
    /// The op's work does not stay inside a partition smaller than the whole device (e.g. a graph
    /// whose kernels run on every unit whatever stream launches it, as a backend reports it), so only a partition holding
    /// every unit accounts for it truthfully.
    #[error("{what} uses the whole device; this partition has {units} of {device} units")]
    WholeDevice {
        /// What the op is.
        what: String,
        /// Units in the partition.
        units: usize,
        /// Units in the device.
        device: usize,
    },
    /// The partition does not exist: created on first use (an on-demand pool), its creation
    /// failed, so nothing runs there.
    #[error("the partition could not be created: {0}")]
    NotRealized(String),
}

/// Errors from a backend.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HalError {
    /// The backend cannot be used here: missing library, old driver, no device.
    #[error("{backend} backend unsupported: {reason}")]
    Unsupported {
        /// Backend name.
        backend: &'static str,
        /// What is missing and what to do about it.
        reason: String,
    },
    /// A topology that violates the leaf invariants.
    #[error("invalid topology: {0}")]
    InvalidTopology(String),
    /// A partition request the backend cannot realize.
    #[error("invalid partition: {0}")]
    InvalidPartition(String),
    /// A lane index out of range.
    #[error("lane {lane} out of range: partition has {lanes} lanes")]
    InvalidLane {
        /// Requested lane.
        lane: u32,
        /// Lanes available.
        lanes: usize,
    },
    /// The descriptor cannot run unchanged here.
    #[error(transparent)]
    Incompatible(#[from] Incompatibility),
    /// A driver call failed.
    #[error("{call} failed: {name} ({code})")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// The vendor's error code.
        code: i32,
        /// The vendor's error name.
        name: String,
    },
    /// Device memory exhausted.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    /// An executed op failed asynchronously (reported at the next poll/sync).
    #[error("asynchronous failure: {0}")]
    Async(String),
    /// An executed op failed asynchronously with the vendor's error code (what the native API
    /// reports at the next synchronization or query, e.g. an illegal address).
    #[error("asynchronous failure: {message}")]
    AsyncDriver {
        /// The vendor's error code.
        code: i32,
        /// What failed, with the code's name.
        message: String,
    },
    /// The backend cannot take the request now; nothing was done (take another path or retry).
    #[error("busy: {0}")]
    Busy(String),
}

impl HalError {
    /// The vendor's error code when a driver call failed (what the native API would have returned
    /// to the application for this failure), else `None`.
    pub fn native_code(&self) -> Option<i32> {
        match self {
            HalError::Driver { code, .. } | HalError::AsyncDriver { code, .. } => Some(*code),
            _ => None,
        }
    }
}
