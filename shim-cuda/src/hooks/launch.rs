//! Launch family: kernels (`cuLaunchKernel`, `cuLaunchKernelEx`, cooperative) and host functions.
//!
//! Observe mode counts every call and adds each successful kernel launch to the census with the
//! grid and block exactly as submitted (launches on a capturing stream are counted as captured).

use std::ffi::{c_uint, c_void};

use crate::bind::calls;
use crate::ffi::{CUfunction, CUhostFn, CUlaunchConfig, CUresult, CUstream, CUDA_SUCCESS};
use crate::hooks::driver_hooks;
use crate::state;
use crate::table::HookId;

driver_hooks! {
    fn [cuLaunchKernel cuLaunchKernel_ptsz] (
        f: CUfunction,
        grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: CUstream,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) => observe_launch_kernel | calls::launch_kernel;
    fn [cuLaunchKernelEx cuLaunchKernelEx_ptsz] (
        config: *const CUlaunchConfig,
        f: CUfunction,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) => observe_launch_kernel_ex | calls::launch_kernel_ex;
    fn [cuLaunchCooperativeKernel cuLaunchCooperativeKernel_ptsz] (
        f: CUfunction,
        grid_x: c_uint, grid_y: c_uint, grid_z: c_uint,
        block_x: c_uint, block_y: c_uint, block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: CUstream,
        kernel_params: *mut *mut c_void,
    ) => observe_launch_cooperative | calls::launch_cooperative_kernel;
    fn [cuLaunchHostFunc cuLaunchHostFunc_ptsz] (stream: CUstream, func: CUhostFn, user_data: *mut c_void)
        | calls::launch_host_func;
}

fn observe_launch_kernel(
    id: HookId,
    result: CUresult,
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_mem_bytes: c_uint,
    stream: CUstream,
    _kernel_params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) {
    if result == CUDA_SUCCESS {
        state::record_launch(id, f as usize, [grid_x, grid_y, grid_z], [block_x, block_y, block_z], stream);
    }
}

fn observe_launch_cooperative(
    id: HookId,
    result: CUresult,
    f: CUfunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    _shared_mem_bytes: c_uint,
    stream: CUstream,
    _kernel_params: *mut *mut c_void,
) {
    if result == CUDA_SUCCESS {
        state::record_launch(id, f as usize, [grid_x, grid_y, grid_z], [block_x, block_y, block_z], stream);
    }
}

fn observe_launch_kernel_ex(
    id: HookId,
    result: CUresult,
    config: *const CUlaunchConfig,
    f: CUfunction,
    _kernel_params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) {
    if result != CUDA_SUCCESS || config.is_null() {
        return;
    }
    // SAFETY: the driver accepted this launch, so `config` points to a valid CUlaunchConfig; it
    // is only read, after the call, and copied.
    let c = unsafe { config.read() };
    state::record_launch(
        id,
        f as usize,
        [c.grid_dim_x, c.grid_dim_y, c.grid_dim_z],
        [c.block_dim_x, c.block_dim_y, c.block_dim_z],
        c.h_stream,
    );
}
