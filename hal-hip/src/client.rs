//! The client runtime's view of this backend ([`vitamin_runtime::client::native::PoolBackend`]),
//! as the HIP interposer's coordinator drives it: fence-query pacing, the fence mode and a lane's
//! raw stream.
//!
//! The HIP backend has no submission thread: each runtime call is issued by the thread that
//! submits (the dispatcher thread, or an application thread binding eagerly), so
//! [`PoolBackend::start_submit_thread`] declines with the reason and the coordinator issues every
//! launch itself; there is nothing to flush and no counts to report. Whether a second thread
//! would pay off on AMD hardware is not measured (no AMD GPU here).

use std::time::Duration;

use vitamin_hal::{HalError, LaneId};
use vitamin_runtime::client::native::{PoolBackend, SubmitCounts};

use crate::{FenceMode, HipBackend, HipPartition};

impl PoolBackend for HipBackend {
    fn start_submit_thread<G: 'static>(
        &self,
        _burst: Duration,
        _spin: Option<Duration>,
        _init: impl FnOnce() -> G + Send + 'static,
    ) -> Result<bool, HalError> {
        Err(crate::driver::unsupported("the HIP backend issues submissions on the submitting thread"))
    }

    fn set_busy_query(&self, _every: Duration) {
        // Fences are polled only by the dispatcher's batched rounds: no lane is fed by a second
        // thread, so there is no query to pace.
    }

    fn submission_counts(&self) -> Option<SubmitCounts> {
        None
    }

    fn flush_submissions(&self) {
        // Every submission is in its lane stream when `submit` returns.
    }

    fn fence_mode(&self) -> &'static str {
        match HipBackend::fence_mode(self) {
            FenceMode::Event => "event",
            FenceMode::Memory => "memory",
        }
    }

    fn raw_stream(partition: &HipPartition, lane: LaneId) -> Option<u64> {
        partition.stream(lane)
    }
}
