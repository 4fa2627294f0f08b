//! What is vendor-specific reaches the client runtime through two small traits.
//!
//! - [`PoolBackend`]: the backend that realizes the pool, beyond [`Backend`]: its submission
//!   thread, fence-query pacing, the raw stream of a lane. Implemented by each hal backend.
//! - [`NativeApi`]: what only the interposer can answer, because it goes through its table of the
//!   driver's real functions and its re-entry guard: which backend to create, whether the calling
//!   thread's current context is the pool's, a native wait on a raw stream, and the guard every
//!   runtime thread holds so that its own driver calls are forwarded untouched.
//!
//! The application's native launch (its own argument pointers, made before the descriptor is
//! copied) is a closure the interposer passes with each launch-first call
//! ([`super::Client::launch_first`]): it is one call with that launch's arguments.

use std::time::Duration;

use vitamin_hal::{Backend, HalError, LaneId};

/// Counts of a backend's submission thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubmitCounts {
    /// Submissions handed to the thread.
    pub handed_off: u64,
    /// Submissions the caller issued itself.
    pub direct: u64,
    /// Times the thread was woken from parking.
    pub wakes: u64,
}

/// The pool's backend as the client runtime drives it.
pub trait PoolBackend: Backend + Clone + std::fmt::Debug + 'static {
    /// Starts a thread that issues bursts of submissions (submissions less than `burst` after
    /// the previous one), spinning `spin` (`None`: the backend's default) before it parks; it
    /// runs `init` first and keeps its result for its life. `Ok(false)`: already started.
    fn start_submit_thread<G: 'static>(
        &self,
        burst: Duration,
        spin: Option<Duration>,
        init: impl FnOnce() -> G + Send + 'static,
    ) -> Result<bool, HalError>;
    /// Least time between fence queries of a lane the submission thread still feeds.
    fn set_busy_query(&self, every: Duration);
    /// The submission thread's counts, if it was started.
    fn submission_counts(&self) -> Option<SubmitCounts>;
    /// Waits until the submission thread issued everything handed to it.
    fn flush_submissions(&self);
    /// How lanes are fenced (census: `memory`, `event`, `hybrid`, ...).
    fn fence_mode(&self) -> &'static str;
    /// The backend's raw stream handle of `lane` of `partition`.
    fn raw_stream(partition: &Self::Partition, lane: LaneId) -> Option<u64>;
}

/// What the client runtime asks the interposer.
pub trait NativeApi: Send + Sync + 'static {
    /// The pool's backend.
    type Backend: PoolBackend;
    /// The re-entry guard a runtime thread holds for its life.
    type Guard;
    /// Creates the backend of device `ordinal` (called on the dispatcher thread).
    fn create_backend(&self, ordinal: i32) -> Result<Self::Backend, String>;
    /// Enters the interposer's re-entry guard on a runtime thread: its driver calls are then
    /// forwarded untouched instead of being taken for application calls.
    fn enter_runtime_thread() -> Self::Guard;
    /// Whether the calling thread's current context is the one the pool was built in (a backend
    /// call from another context would switch the application's current context).
    fn in_pool_context(&self) -> bool;
    /// Waits natively for everything queued on the raw lane stream `stream`; `true` when it
    /// drained without error.
    fn synchronize_raw_stream(&self, stream: u64) -> bool;
}

/// How the application asked host threads to wait for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostWait {
    /// Spin (the default, or unknown).
    Spin,
    /// Spin, yielding the CPU between checks.
    Yield,
    /// Block.
    BlockingSync,
}

/// What an interposer does in bind mode with a driver call it forwards instead of modelling (the
/// class of each row of shim-cuda's `data/native_entry_points.txt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NativeClass {
    /// Enqueues work: drain the logical stream, call, wait for the native stream so that later
    /// logical ops follow it.
    Enqueue,
    /// Makes the stream wait for a condition outside it (a memory value, an external semaphore):
    /// drain, call, and hand the logical stream to the driver from then on
    /// ([`super::Client::hand_to_driver`]); a host wait could wait for work not issued yet.
    Wait,
    /// Changes how later work on the stream runs (attributes): drain, call.
    Order,
    /// No stream order (properties, ids, capture bookkeeping): forwarded.
    Query,
    /// Ends a context, module or library: logical device synchronization and the cached function
    /// layouts dropped ([`super::functions::Functions::invalidate`]), then the call.
    Lifetime,
}
