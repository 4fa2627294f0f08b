//! Event family: create, record (with and without flags), query, synchronize, elapsed time,
//! destroy. Observe mode counts every call; nothing is answered by the shim.

use std::ffi::c_uint;

use crate::bind::calls;
use crate::ffi::{CUevent, CUstream};
use crate::hooks::driver_hooks;

driver_hooks! {
    fn [cuEventCreate] (event_out: *mut CUevent, flags: c_uint) | calls::event_create;
    fn [cuEventRecord cuEventRecord_ptsz] (event: CUevent, stream: CUstream) | calls::event_record;
    fn [cuEventRecordWithFlags cuEventRecordWithFlags_ptsz] (event: CUevent, stream: CUstream, flags: c_uint)
        | calls::event_record_with_flags;
    fn [cuEventQuery] (event: CUevent) | calls::event_query;
    fn [cuEventSynchronize] (event: CUevent) | calls::event_synchronize;
    fn [cuEventElapsedTime cuEventElapsedTime_v2] (milliseconds: *mut f32, start: CUevent, end: CUevent);
    fn [cuEventDestroy cuEventDestroy_v2] (event: CUevent) | calls::event_destroy;
}
