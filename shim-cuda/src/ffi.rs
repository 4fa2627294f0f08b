//! The few CUDA driver types the interposer needs, declared by hand from `cuda.h` (CUDA 13.0).
//!
//! The shim forwards arguments it does not inspect as the opaque pointers or integers the C ABI
//! passes anyway, so only the layouts it reads are spelled out: [`CUlaunchConfig`] (grid and
//! block of `cuLaunchKernelEx`) and the result codes it produces itself. Everything here is plain
//! data; no function is called through these declarations except by the forwarding hooks.

use std::ffi::{c_int, c_uint, c_void};

/// `CUresult`: a C enum, passed as `int`.
pub type CUresult = c_int;
/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_NOT_READY`: an asynchronous operation has not completed (queries).
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
/// `CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND`: returned when the real driver function is missing.
pub const CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: CUresult = 302;
/// `CUDA_ERROR_UNKNOWN`: returned if the shim itself fails (a caught panic) before forwarding.
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `CU_GET_PROC_ADDRESS_LEGACY_STREAM`.
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1;
/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 2;

/// `CUstreamCaptureStatus`: `CU_STREAM_CAPTURE_STATUS_NONE` = 0, `ACTIVE` = 1, `INVALIDATED` = 2.
pub type CUstreamCaptureStatus = c_int;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
pub const CU_STREAM_CAPTURE_STATUS_NONE: CUstreamCaptureStatus = 0;
/// `CUstreamCaptureMode` (a C enum).
pub type CUstreamCaptureMode = c_int;

/// Opaque handles (pointers to driver-private structs).
pub type CUfunction = *mut c_void;
/// `CUkernel`: a context-independent kernel handle; may be passed where a `CUfunction` is expected.
pub type CUkernel = *mut c_void;
/// `CUstream`; null is the legacy default stream, `0x1`/`0x2` the legacy/per-thread handles.
pub type CUstream = *mut c_void;
/// `CUevent`.
pub type CUevent = *mut c_void;
/// `CUcontext`.
pub type CUcontext = *mut c_void;
/// `CUgraph`.
pub type CUgraph = *mut c_void;
/// `CUgraphExec`.
pub type CUgraphExec = *mut c_void;
/// `CUgraphNode`.
pub type CUgraphNode = *mut c_void;
/// `CUarray`.
pub type CUarray = *mut c_void;
/// `CUdeviceptr` (`CUdeviceptr_v2`, 64-bit).
pub type CUdeviceptr = u64;
/// `CUmemLocation` (passed by value: a location type and an id).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MemLocation {
    /// `CUmemLocationType`.
    pub kind: c_int,
    /// Device ordinal, NUMA node, ...
    pub id: c_int,
}
/// `CUhostFn`.
pub type CUhostFn = Option<unsafe extern "C" fn(*mut c_void)>;
/// `CUstreamCallback`.
pub type CUstreamCallback = Option<unsafe extern "C" fn(CUstream, CUresult, *mut c_void)>;
/// `cuuint64_t`.
pub type Cuuint64 = u64;
/// `CUdriverProcAddressQueryResult` (a C enum).
pub type CUdriverProcAddressQueryResult = c_int;

/// `CUlaunchConfig` (cuda.h, `CUlaunchConfig_st`), read by the `cuLaunchKernelEx` census.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUlaunchConfig {
    /// Grid width in blocks.
    pub grid_dim_x: c_uint,
    /// Grid height in blocks.
    pub grid_dim_y: c_uint,
    /// Grid depth in blocks.
    pub grid_dim_z: c_uint,
    /// Block width in threads.
    pub block_dim_x: c_uint,
    /// Block height in threads.
    pub block_dim_y: c_uint,
    /// Block depth in threads.
    pub block_dim_z: c_uint,
    /// Dynamic shared memory per block in bytes.
    pub shared_mem_bytes: c_uint,
    /// Stream.
    pub h_stream: CUstream,
    /// `CUlaunchAttribute*` (not inspected).
    pub attrs: *mut c_void,
    /// Number of attributes.
    pub num_attrs: c_uint,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_config_layout_matches_cuda_h() {
        // 7 x u32 = 28 bytes, padded to 32 for the stream pointer, then attrs at 40, numAttrs at 48.
        assert_eq!(std::mem::offset_of!(CUlaunchConfig, h_stream), 32);
        assert_eq!(std::mem::offset_of!(CUlaunchConfig, attrs), 40);
        assert_eq!(std::mem::offset_of!(CUlaunchConfig, num_attrs), 48);
        assert_eq!(std::mem::size_of::<CUlaunchConfig>(), 56);
    }
}
