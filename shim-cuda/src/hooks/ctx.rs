//! Context family: `cuCtxSynchronize` (CUDA 2.0 ABI, no argument) and `cuCtxSynchronize_v2`
//! (CUDA 13.0 ABI, explicit context). Counted in observe mode.

use crate::bind::calls;
use crate::ffi::CUcontext;
use crate::hooks::driver_hooks;

driver_hooks! {
    fn [cuCtxSynchronize] () | calls::ctx_synchronize;
    fn [cuCtxSynchronize_v2] (ctx: CUcontext) | calls::ctx_synchronize_v2;
}
