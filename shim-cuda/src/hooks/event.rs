//! Event family: create, record (with and without flags), query, synchronize, elapsed time,
//! destroy. Observe mode counts every call; nothing is answered by the shim.

use std::ffi::c_uint;

use crate::ffi::{CUevent, CUstream};
use crate::hooks::driver_hooks;

driver_hooks! {
    fn [cuEventCreate] (event_out: *mut CUevent, flags: c_uint);
    fn [cuEventRecord cuEventRecord_ptsz] (event: CUevent, stream: CUstream);
    fn [cuEventRecordWithFlags cuEventRecordWithFlags_ptsz] (event: CUevent, stream: CUstream, flags: c_uint);
    fn [cuEventQuery] (event: CUevent);
    fn [cuEventSynchronize] (event: CUevent);
    fn [cuEventElapsedTime cuEventElapsedTime_v2] (milliseconds: *mut f32, start: CUevent, end: CUevent);
    fn [cuEventDestroy cuEventDestroy_v2] (event: CUevent);
}
