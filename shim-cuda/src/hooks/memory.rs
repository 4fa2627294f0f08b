//! Memory family: asynchronous and synchronous copies, fills, and frees (only the 64-bit ABIs,
//! CUDA 3.2 and later; the CUDA 2.x 32-bit variants are listed in `table::KNOWN_UNHOOKED` and
//! passed through), `cuIpcCloseMemHandle` (a free of imported memory) among them. Observe mode
//! counts every call. Copy descriptors (`CUDA_MEMCPY2D` etc.) are forwarded as opaque pointers,
//! never read. Bind mode: see `crate::bind` (1-D asynchronous copies and fills become ops;
//! everything else takes the native path).

use std::ffi::{c_uchar, c_uint, c_ushort, c_void};

use crate::bind::calls;
use crate::ffi::{CUarray, CUcontext, CUdeviceptr, CUstream};
use crate::hooks::driver_hooks;

driver_hooks! {
    // ---- asynchronous copies
    fn [cuMemcpyAsync cuMemcpyAsync_ptsz] (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream)
        | calls::memcpy_async;
    fn [cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz] (
        dst: CUdeviceptr, src: *const c_void, bytes: usize, stream: CUstream,
    ) | calls::memcpy_htod_async;
    fn [cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync_v2_ptsz] (
        dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream,
    ) | calls::memcpy_dtoh_async;
    fn [cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz] (
        dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream,
    ) | calls::memcpy_dtod_async;
    fn [cuMemcpy2DAsync_v2 cuMemcpy2DAsync_v2_ptsz] (copy: *const c_void, stream: CUstream)
        | calls::native_copy_desc_async;
    fn [cuMemcpy3DAsync_v2 cuMemcpy3DAsync_v2_ptsz] (copy: *const c_void, stream: CUstream)
        | calls::native_copy_desc_async;
    fn [cuMemcpyPeerAsync cuMemcpyPeerAsync_ptsz] (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize, stream: CUstream,
    ) | calls::memcpy_peer_async;
    fn [cuMemcpy3DPeerAsync cuMemcpy3DPeerAsync_ptsz] (copy: *const c_void, stream: CUstream)
        | calls::native_copy_desc_async;
    fn [cuMemcpyHtoAAsync_v2 cuMemcpyHtoAAsync_v2_ptsz] (
        dst: CUarray, dst_offset: usize, src: *const c_void, bytes: usize, stream: CUstream,
    ) | calls::memcpy_htoa_async;
    fn [cuMemcpyAtoHAsync_v2 cuMemcpyAtoHAsync_v2_ptsz] (
        dst: *mut c_void, src: CUarray, src_offset: usize, bytes: usize, stream: CUstream,
    ) | calls::memcpy_atoh_async;
    // ---- synchronous copies
    fn [cuMemcpy cuMemcpy_ptds] (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) | calls::sync_copy_dd;
    fn [cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds] (dst: CUdeviceptr, src: *const c_void, bytes: usize)
        | calls::sync_copy_hd;
    fn [cuMemcpyDtoH_v2 cuMemcpyDtoH_v2_ptds] (dst: *mut c_void, src: CUdeviceptr, bytes: usize)
        | calls::sync_copy_dh;
    fn [cuMemcpyDtoD_v2 cuMemcpyDtoD_v2_ptds] (dst: CUdeviceptr, src: CUdeviceptr, bytes: usize)
        | calls::sync_copy_dd;
    fn [cuMemcpy2D_v2 cuMemcpy2D_v2_ptds] (copy: *const c_void) | calls::sync_copy_desc;
    fn [cuMemcpy2DUnaligned_v2 cuMemcpy2DUnaligned_v2_ptds] (copy: *const c_void) | calls::sync_copy_desc;
    fn [cuMemcpy3D_v2 cuMemcpy3D_v2_ptds] (copy: *const c_void) | calls::sync_copy_desc;
    fn [cuMemcpyPeer cuMemcpyPeer_ptds] (
        dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize,
    ) | calls::sync_copy_peer;
    fn [cuMemcpy3DPeer cuMemcpy3DPeer_ptds] (copy: *const c_void) | calls::sync_copy_desc;
    fn [cuMemcpyHtoA_v2 cuMemcpyHtoA_v2_ptds] (dst: CUarray, dst_offset: usize, src: *const c_void, bytes: usize)
        | calls::sync_copy_ha;
    fn [cuMemcpyAtoH_v2 cuMemcpyAtoH_v2_ptds] (dst: *mut c_void, src: CUarray, src_offset: usize, bytes: usize)
        | calls::sync_copy_ah;
    fn [cuMemcpyAtoD_v2 cuMemcpyAtoD_v2_ptds] (dst: CUdeviceptr, src: CUarray, src_offset: usize, bytes: usize)
        | calls::sync_copy_ad;
    fn [cuMemcpyDtoA_v2 cuMemcpyDtoA_v2_ptds] (dst: CUarray, dst_offset: usize, src: CUdeviceptr, bytes: usize)
        | calls::sync_copy_da;
    fn [cuMemcpyAtoA_v2 cuMemcpyAtoA_v2_ptds] (
        dst: CUarray, dst_offset: usize, src: CUarray, src_offset: usize, bytes: usize,
    ) | calls::sync_copy_aa;
    // ---- fills
    fn [cuMemsetD8_v2 cuMemsetD8_v2_ptds] (dst: CUdeviceptr, value: c_uchar, count: usize) | calls::sync_set_d8;
    fn [cuMemsetD16_v2 cuMemsetD16_v2_ptds] (dst: CUdeviceptr, value: c_ushort, count: usize) | calls::sync_set_d16;
    fn [cuMemsetD32_v2 cuMemsetD32_v2_ptds] (dst: CUdeviceptr, value: c_uint, count: usize) | calls::sync_set_d32;
    fn [cuMemsetD2D8_v2 cuMemsetD2D8_v2_ptds] (
        dst: CUdeviceptr, pitch: usize, value: c_uchar, width: usize, height: usize,
    ) | calls::sync_set_2d8;
    fn [cuMemsetD2D16_v2 cuMemsetD2D16_v2_ptds] (
        dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize,
    ) | calls::sync_set_2d16;
    fn [cuMemsetD2D32_v2 cuMemsetD2D32_v2_ptds] (
        dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize,
    ) | calls::sync_set_2d32;
    fn [cuMemsetD8Async cuMemsetD8Async_ptsz] (dst: CUdeviceptr, value: c_uchar, count: usize, stream: CUstream)
        | calls::memset_d8_async;
    fn [cuMemsetD16Async cuMemsetD16Async_ptsz] (dst: CUdeviceptr, value: c_ushort, count: usize, stream: CUstream)
        | calls::memset_d16_async;
    fn [cuMemsetD32Async cuMemsetD32Async_ptsz] (dst: CUdeviceptr, value: c_uint, count: usize, stream: CUstream)
        | calls::memset_d32_async;
    fn [cuMemsetD2D8Async cuMemsetD2D8Async_ptsz] (
        dst: CUdeviceptr, pitch: usize, value: c_uchar, width: usize, height: usize, stream: CUstream,
    ) | calls::memset_d2d8_async;
    fn [cuMemsetD2D16Async cuMemsetD2D16Async_ptsz] (
        dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize, stream: CUstream,
    ) | calls::memset_d2d16_async;
    fn [cuMemsetD2D32Async cuMemsetD2D32Async_ptsz] (
        dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize, stream: CUstream,
    ) | calls::memset_d2d32_async;
    // ---- frees
    fn [cuMemFree_v2] (ptr: CUdeviceptr) | calls::mem_free;
    fn [cuIpcCloseMemHandle] (ptr: CUdeviceptr) | calls::ipc_close_mem_handle;
    fn [cuMemFreeHost] (ptr: *mut c_void) | calls::mem_free_host;
    fn [cuMemFreeAsync cuMemFreeAsync_ptsz] (ptr: CUdeviceptr, stream: CUstream) | calls::mem_free_async;
}
