//! Memory family: asynchronous and synchronous copies, fills, and frees (only the 64-bit ABIs,
//! CUDA 3.2 and later; the CUDA 2.x 32-bit variants are listed in `table::KNOWN_UNHOOKED` and
//! passed through). Observe mode counts every call. Copy descriptors (`CUDA_MEMCPY2D` etc.) are
//! forwarded as opaque pointers, never read.

use std::ffi::{c_uchar, c_uint, c_ushort, c_void};

use crate::ffi::{CUarray, CUcontext, CUdeviceptr, CUstream};
use crate::hooks::driver_hooks;

driver_hooks! {
    // ---- asynchronous copies
    fn [cuMemcpyAsync cuMemcpyAsync_ptsz] (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream);
    fn [cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz] (
        dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream,
    );
    fn [cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync_v2_ptsz] (
        dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream,
    );
    fn [cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz] (
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream,
    );
    fn [cuMemcpy2DAsync_v2 cuMemcpy2DAsync_v2_ptsz] (copy: *const c_void, stream: CUstream);
    fn [cuMemcpy3DAsync_v2 cuMemcpy3DAsync_v2_ptsz] (copy: *const c_void, stream: CUstream);
    fn [cuMemcpyPeerAsync cuMemcpyPeerAsync_ptsz] (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize, stream: CUstream,
    );
    fn [cuMemcpy3DPeerAsync cuMemcpy3DPeerAsync_ptsz] (copy: *const c_void, stream: CUstream);
    fn [cuMemcpyHtoAAsync_v2 cuMemcpyHtoAAsync_v2_ptsz] (
        dst: CUarray, dst_offset: usize, src: *const c_void, bytes: usize, stream: CUstream,
    );
    fn [cuMemcpyAtoHAsync_v2 cuMemcpyAtoHAsync_v2_ptsz] (
        dst: *mut c_void, src: CUarray, src_offset: usize, bytes: usize, stream: CUstream,
    );
    // ---- synchronous copies
    fn [cuMemcpy cuMemcpy_ptds] (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize);
    fn [cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds] (dst: CUdeviceptr, src: *const c_void, bytes: usize);
    fn [cuMemcpyDtoH_v2 cuMemcpyDtoH_v2_ptds] (dst: *mut c_void, src: CUdeviceptr, bytes: usize);
    fn [cuMemcpyDtoD_v2 cuMemcpyDtoD_v2_ptds] (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize);
    fn [cuMemcpy2D_v2 cuMemcpy2D_v2_ptds] (copy: *const c_void);
    fn [cuMemcpy2DUnaligned_v2 cuMemcpy2DUnaligned_v2_ptds] (copy: *const c_void);
    fn [cuMemcpy3D_v2 cuMemcpy3D_v2_ptds] (copy: *const c_void);
    fn [cuMemcpyPeer cuMemcpyPeer_ptds] (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize,
    );
    fn [cuMemcpy3DPeer cuMemcpy3DPeer_ptds] (copy: *const c_void);
    fn [cuMemcpyHtoA_v2 cuMemcpyHtoA_v2_ptds] (dst: CUarray, dst_offset: usize, src: *const c_void, bytes: usize);
    fn [cuMemcpyAtoH_v2 cuMemcpyAtoH_v2_ptds] (dst: *mut c_void, src: CUarray, src_offset: usize, bytes: usize);
    fn [cuMemcpyAtoD_v2 cuMemcpyAtoD_v2_ptds] (dst: CUdeviceptr, src: CUarray, src_offset: usize, bytes: usize);
    fn [cuMemcpyDtoA_v2 cuMemcpyDtoA_v2_ptds] (dst: CUarray, dst_offset: usize, src: CUdeviceptr, bytes: usize);
    fn [cuMemcpyAtoA_v2 cuMemcpyAtoA_v2_ptds] (
        dst: CUarray, dst_offset: usize, src: CUarray, src_offset: usize, bytes: usize,
    );
    // ---- fills
    fn [cuMemsetD8_v2 cuMemsetD8_v2_ptds] (dst: CUdeviceptr, value: c_uchar, count: usize);
    fn [cuMemsetD16_v2 cuMemsetD16_v2_ptds] (dst: CUdeviceptr, value: c_ushort, count: usize);
    fn [cuMemsetD32_v2 cuMemsetD32_v2_ptds] (dst: CUdeviceptr, value: c_uint, count: usize);
    fn [cuMemsetD2D8_v2 cuMemsetD2D8_v2_ptds] (
        dst: CUdeviceptr, pitch: usize, value: c_uchar, width: usize, height: usize,
    );
    fn [cuMemsetD2D16_v2 cuMemsetD2D16_v2_ptds] (
        dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize,
    );
    fn [cuMemsetD2D32_v2 cuMemsetD2D32_v2_ptds] (
        dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize,
    );
    fn [cuMemsetD8Async cuMemsetD8Async_ptsz] (dst: CUdeviceptr, value: c_uchar, count: usize, stream: CUstream);
    fn [cuMemsetD16Async cuMemsetD16Async_ptsz] (dst: CUdeviceptr, value: c_ushort, count: usize, stream: CUstream);
    fn [cuMemsetD32Async cuMemsetD32Async_ptsz] (dst: CUdeviceptr, value: c_uint, count: usize, stream: CUstream);
    fn [cuMemsetD2D8Async cuMemsetD2D8Async_ptsz] (
        dst: CUdeviceptr, pitch: usize, value: c_uchar, width: usize, height: usize, stream: CUstream,
    );
    fn [cuMemsetD2D16Async cuMemsetD2D16Async_ptsz] (
        dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: CUstream,
    );
    fn [cuMemsetD2D32Async cuMemsetD2D32Async_ptsz] (
        dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize, stream: CUstream,
    );
    // ---- frees
    fn [cuMemFree_v2] (ptr: CUdeviceptr);
    fn [cuMemFreeHost] (ptr: *mut c_void);
    fn [cuMemFreeAsync cuMemFreeAsync_ptsz] (ptr: CUdeviceptr, stream: CUstream);
}
