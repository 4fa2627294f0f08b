//! The client runtime's view of this backend ([`vitamin_runtime::client::native::PoolBackend`]):
//! the submission thread, fence-query pacing and a lane's raw stream, as the interposer's
//! coordinator drives them.

use std::time::Duration;

use vitamin_hal::{HalError, LaneId};
use vitamin_runtime::client::native::{PoolBackend, SubmitCounts};

use crate::{CudaBackend, CudaPartition, FenceMode};

impl PoolBackend for CudaBackend {
    fn start_submit_thread<G: 'static>(
        &self,
        burst: Duration,
        spin: Option<Duration>,
        init: impl FnOnce() -> G + Send + 'static,
    ) -> Result<bool, HalError> {
        CudaBackend::start_submit_thread(self, burst, spin.unwrap_or(crate::SUBMIT_SPIN), init)
    }

    fn set_busy_query(&self, every: Duration) {
        CudaBackend::set_busy_query(self, every);
    }

    fn submission_counts(&self) -> Option<SubmitCounts> {
        CudaBackend::submission_counts(self).map(|c| SubmitCounts {
            handed_off: c.handed_off,
            direct: c.direct,
            wakes: c.wakes,
        })
    }

    fn flush_submissions(&self) {
        CudaBackend::flush_submissions(self);
    }

    fn fence_mode(&self) -> &'static str {
        match CudaBackend::fence_mode(self) {
            FenceMode::Memory => "memory",
            FenceMode::Event => "event",
            FenceMode::Hybrid => "hybrid",
        }
    }

    fn raw_stream(partition: &CudaPartition, lane: LaneId) -> Option<u64> {
        partition.raw_stream(lane)
    }
}
