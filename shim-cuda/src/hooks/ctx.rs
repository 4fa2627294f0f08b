//! Context family: `cuCtxSynchronize` (CUDA 2.0 ABI, no argument) and `cuCtxSynchronize_v2`
//! (CUDA 13.0 ABI, explicit context). Counted in observe mode.

use crate::ffi::CUcontext;
use crate::hooks::driver_hooks;

driver_hooks! {
    fn [cuCtxSynchronize] ();
    fn [cuCtxSynchronize_v2] (ctx: CUcontext);
}
