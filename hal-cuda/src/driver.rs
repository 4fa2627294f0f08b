//! The thin `Result` layer over cudarc's `driver::sys` (the only module with driver FFI).
//!
//! cudarc resolves each symbol on first call and **panics** when the library or the symbol is
//! missing. This module therefore checks, once, before any call ([`load`]): that `libcuda` can be
//! opened, that every symbol this crate calls ([`REQUIRED_SYMBOLS`]) is exported, that `cuInit`
//! succeeds and that the driver is new enough for green contexts. Any failure is
//! `HalError::Unsupported` with the reason; after a successful [`load`] no call here can panic.
//!
//! Functions are 1:1 with driver calls, grouped by topic, and return `Result<_, HalError>`. They
//! stay `unsafe` where a handle argument must be live (the caller's RAII types guarantee that).

use std::cell::Cell;
use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use cudarc::driver::sys;
use vitamin_hal::HalError;

pub(crate) use sys::{
    CUcontext, CUdevResource, CUdevice, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUgreenCtx, CUkernel,
    CUlibrary, CUresult, CUstream,
};

/// Backend name in errors.
pub(crate) const BACKEND: &str = "cuda";

/// Oldest driver with the green-context API (`cuGreenCtxCreate` and friends): CUDA 12.4.
pub const MIN_DRIVER_VERSION: i32 = 12040;

/// Every driver symbol this crate calls, checked before the first call. A unit test keeps this
/// list in sync with the `sys::cu*` calls in the source.
pub const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDeviceTotalMem_v2",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuMemGetInfo_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoD_v2",
    "cuMemcpyDtoH_v2",
    "cuMemcpyAsync",
    "cuMemsetD8Async",
    "cuMemsetD16Async",
    "cuMemsetD32Async",
    "cuStreamSynchronize",
    "cuStreamQuery",
    "cuStreamWriteValue64_v2",
    "cuStreamDestroy_v2",
    "cuMemHostAlloc",
    "cuMemHostGetDevicePointer_v2",
    "cuMemFreeHost",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventDestroy_v2",
    "cuLibraryLoadData",
    "cuLibraryUnload",
    "cuLibraryGetKernel",
    "cuKernelGetFunction",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cuLaunchHostFunc",
    "cuGraphLaunch",
    "cuStreamCreate",
    "cuStreamWaitEvent",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    "cuOccupancyMaxActiveClusters",
    "cuDeviceGetDevResource",
    "cuDevSmResourceSplitByCount",
    "cuDevResourceGenerateDesc",
    "cuGreenCtxCreate",
    "cuGreenCtxDestroy",
    "cuGreenCtxGetDevResource",
    "cuGreenCtxStreamCreate",
    "cuCtxFromGreenCtx",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuFuncSetAttribute",
    "cuGraphClone",
    "cuGraphGetNodes",
    "cuGraphNodeGetType",
    "cuGraphKernelNodeGetParams_v2",
    "cuGraphKernelNodeSetParams_v2",
    "cuGraphKernelNodeGetAttribute",
];

/// Symbols that only a green-context-capable driver exports (for a precise error message).
const GREEN_CONTEXT_SYMBOLS: &[&str] = &[
    "cuDeviceGetDevResource",
    "cuDevSmResourceSplitByCount",
    "cuDevResourceGenerateDesc",
    "cuGreenCtxCreate",
    "cuGreenCtxDestroy",
    "cuGreenCtxGetDevResource",
    "cuGreenCtxStreamCreate",
];

/// What [`load`] found.
#[derive(Debug, Clone, Copy)]
pub struct DriverInfo {
    /// `cuDriverGetVersion` (e.g. 13000).
    pub version: i32,
    /// `cuDeviceGetCount`.
    pub device_count: i32,
}

pub(crate) fn unsupported(reason: impl Into<String>) -> HalError {
    HalError::Unsupported { backend: BACKEND, reason: reason.into() }
}

/// Loads and initializes the driver once; every later call returns the same outcome.
pub fn load() -> Result<DriverInfo, HalError> {
    static LOADED: OnceLock<Result<DriverInfo, HalError>> = OnceLock::new();
    LOADED.get_or_init(load_uncached).clone()
}

fn load_uncached() -> Result<DriverInfo, HalError> {
    // SAFETY: only tries to dlopen the library names cudarc knows; no symbol is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(unsupported(
            "libcuda.so (the NVIDIA driver library) was not found: install the NVIDIA driver or add its folder to \
             LD_LIBRARY_PATH",
        ));
    }
    // SAFETY: `is_culib_present` just opened the library, so `culib` finds it and cannot panic.
    let lib = unsafe { sys::culib() };
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        // SAFETY: looks a symbol up without calling it; the pointer type is irrelevant.
        .filter(|name| unsafe { lib.get::<*const c_void>(name.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        let green = missing.iter().any(|m| GREEN_CONTEXT_SYMBOLS.contains(m));
        return Err(unsupported(format!(
            "the driver library lacks {}{}",
            missing.join(", "),
            if green {
                ": green contexts need a CUDA 12.4+ driver (R550 or newer); update the NVIDIA driver"
            } else {
                ""
            }
        )));
    }
    let mut version = 0;
    // SAFETY: the symbol exists (checked above); the out-pointer is a live local.
    check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) })
        .map_err(|e| unsupported(e.to_string()))?;
    if version < MIN_DRIVER_VERSION {
        return Err(unsupported(format!(
            "driver supports CUDA {}.{}, green contexts need 12.4 or newer: update the NVIDIA driver",
            version / 1000,
            version % 1000 / 10
        )));
    }
    // SAFETY: the symbol exists; flags must be 0.
    check("cuInit", unsafe { sys::cuInit(0) })
        .map_err(|e| unsupported(format!("{e}: no usable CUDA device (is the GPU visible to this process?)")))?;
    let mut device_count = 0;
    // SAFETY: initialized; the out-pointer is a live local.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut device_count) })
        .map_err(|e| unsupported(e.to_string()))?;
    if device_count == 0 {
        return Err(unsupported("the driver reports no CUDA device"));
    }
    Ok(DriverInfo { version, device_count })
}

/// The driver's name for an error code (`CUDA_ERROR_OUT_OF_MEMORY`).
pub(crate) fn error_name(r: CUresult) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: only reached after `load` checked the symbol; the out-pointer is a live local.
    let ok = unsafe { sys::cuGetErrorName(r, &mut p) } == CUresult::CUDA_SUCCESS;
    if ok && !p.is_null() {
        // SAFETY: the driver returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        format!("CUresult {}", r as i32)
    }
}

/// The driver's description of an error code.
pub(crate) fn error_string(r: CUresult) -> String {
    let mut p: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: as in `error_name`.
    let ok = unsafe { sys::cuGetErrorString(r, &mut p) } == CUresult::CUDA_SUCCESS;
    if ok && !p.is_null() {
        // SAFETY: the driver returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    } else {
        String::new()
    }
}

/// Maps a driver status to `Ok` or the matching [`HalError`].
pub(crate) fn check(call: &'static str, r: CUresult) -> Result<(), HalError> {
    match r {
        CUresult::CUDA_SUCCESS => Ok(()),
        CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
            Err(HalError::OutOfMemory(format!("{call}: {} ({})", error_name(r), error_string(r))))
        }
        _ => Err(HalError::Driver { call, code: r as i32, name: error_name(r) }),
    }
}

/// Device queries.
pub(crate) mod device {
    use super::*;

    pub(crate) fn get(ordinal: i32) -> Result<CUdevice, HalError> {
        let mut d = 0;
        // SAFETY: loaded; out-pointer is a live local.
        check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut d, ordinal) })?;
        Ok(d)
    }

    pub(crate) fn name(dev: CUdevice) -> Result<String, HalError> {
        let mut buf = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer is 256 bytes and we pass its length.
        check("cuDeviceGetName", unsafe { sys::cuDeviceGetName(buf.as_mut_ptr(), buf.len() as i32, dev) })?;
        // SAFETY: the driver NUL-terminates within the given length.
        Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }

    pub(crate) fn attribute(dev: CUdevice, attr: sys::CUdevice_attribute) -> Result<i32, HalError> {
        let mut v = 0;
        // SAFETY: out-pointer is a live local; `attr` is a valid enum value.
        check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, attr, dev) })?;
        Ok(v)
    }

    pub(crate) fn total_mem(dev: CUdevice) -> Result<usize, HalError> {
        let mut v = 0;
        // SAFETY: out-pointer is a live local.
        check("cuDeviceTotalMem_v2", unsafe { sys::cuDeviceTotalMem_v2(&mut v, dev) })?;
        Ok(v)
    }

    /// The device's whole SM resource.
    pub(crate) fn sm_resource(dev: CUdevice) -> Result<CUdevResource, HalError> {
        // SAFETY: CUdevResource is plain old data; all-zero is a valid (empty) value.
        let mut r: CUdevResource = unsafe { std::mem::zeroed() };
        // SAFETY: out-pointer is a live local of the right type.
        check("cuDeviceGetDevResource", unsafe {
            sys::cuDeviceGetDevResource(dev, &mut r, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)
        })?;
        Ok(r)
    }
}

/// Contexts: the primary context holds all memory and modules; green contexts confine launches.
pub(crate) mod ctx {
    use super::*;

    pub(crate) fn retain_primary(dev: CUdevice) -> Result<CUcontext, HalError> {
        let mut c = std::ptr::null_mut();
        // SAFETY: out-pointer is a live local.
        check("cuDevicePrimaryCtxRetain", unsafe { sys::cuDevicePrimaryCtxRetain(&mut c, dev) })?;
        Ok(c)
    }

    /// # Safety
    /// Pairs with one successful [`retain_primary`]; nothing may use the context afterwards
    /// unless another retain holds it.
    pub(crate) unsafe fn release_primary(dev: CUdevice) -> Result<(), HalError> {
        // SAFETY: the caller pairs it with a retain.
        check("cuDevicePrimaryCtxRelease_v2", unsafe { sys::cuDevicePrimaryCtxRelease_v2(dev) })
    }

    thread_local! {
        static CURRENT: Cell<usize> = const { Cell::new(0) };
    }

    /// Makes `ctx` current on the calling thread (a cheap thread-local check when it already is).
    ///
    /// # Safety
    /// `ctx` must be a live context.
    pub(crate) unsafe fn ensure_current(ctx: CUcontext) -> Result<(), HalError> {
        if CURRENT.with(Cell::get) == ctx as usize {
            return Ok(());
        }
        // SAFETY: the caller guarantees `ctx` is live.
        check("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })?;
        CURRENT.with(|c| c.set(ctx as usize));
        Ok(())
    }

    /// Free and total device memory as the current context sees it.
    pub(crate) fn mem_info() -> Result<(usize, usize), HalError> {
        let (mut free, mut total) = (0, 0);
        // SAFETY: out-pointers are live locals.
        check("cuMemGetInfo_v2", unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
        Ok((free, total))
    }
}

/// SM resources and their one-time split.
pub(crate) mod resource {
    use super::*;

    /// SM count of an SM resource.
    pub(crate) fn sm_count(r: &CUdevResource) -> u32 {
        // SAFETY: SM resources (the only kind this crate creates) store `sm` in the union.
        unsafe { r.__bindgen_anon_1.sm.smCount }
    }

    /// `(minSmPartitionSize, smCoscheduledAlignment)` of an SM resource (0 on 12.x drivers).
    pub(crate) fn sm_granularity(r: &CUdevResource) -> (u32, u32) {
        // SAFETY: as in `sm_count`.
        let sm = unsafe { r.__bindgen_anon_1.sm };
        (sm.minSmPartitionSize, sm.smCoscheduledAlignment)
    }

    /// One split of `input` into groups of at least `min_count` SMs: `(groups, remainder)`.
    pub(crate) fn split_by_count(
        input: &CUdevResource,
        min_count: u32,
    ) -> Result<(Vec<CUdevResource>, CUdevResource), HalError> {
        let cap = sm_count(input).max(1);
        // SAFETY: plain old data; zeroed entries are overwritten by the driver.
        let mut groups: Vec<CUdevResource> = vec![unsafe { std::mem::zeroed() }; cap as usize];
        // SAFETY: as above.
        let mut rem: CUdevResource = unsafe { std::mem::zeroed() };
        let mut n = cap;
        // SAFETY: `groups` has room for `n` results; the other pointers are live locals.
        check("cuDevSmResourceSplitByCount", unsafe {
            sys::cuDevSmResourceSplitByCount(groups.as_mut_ptr(), &mut n, input, &mut rem, 0, min_count)
        })?;
        groups.truncate(n as usize);
        Ok((groups, rem))
    }

    /// A descriptor for the union of `resources` (all from one split).
    pub(crate) fn generate_desc(resources: &[CUdevResource]) -> Result<sys::CUdevResourceDesc, HalError> {
        let mut copy = resources.to_vec();
        let mut desc = std::ptr::null_mut();
        // SAFETY: `copy` holds `len` valid resources; the driver only reads them.
        check("cuDevResourceGenerateDesc", unsafe {
            sys::cuDevResourceGenerateDesc(&mut desc, copy.as_mut_ptr(), copy.len() as u32)
        })?;
        Ok(desc)
    }
}

/// Green contexts and their streams.
pub(crate) mod green {
    use super::*;

    pub(crate) fn create(desc: sys::CUdevResourceDesc, dev: CUdevice) -> Result<CUgreenCtx, HalError> {
        let mut g = std::ptr::null_mut();
        // SAFETY: `desc` came from `cuDevResourceGenerateDesc`; DEFAULT_STREAM is required by the API.
        check("cuGreenCtxCreate", unsafe {
            sys::cuGreenCtxCreate(&mut g, desc, dev, sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32)
        })?;
        Ok(g)
    }

    /// # Safety
    /// `g` must be live; its streams must have been destroyed (after draining) first.
    pub(crate) unsafe fn destroy(g: CUgreenCtx) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `g` is live and drained.
        check("cuGreenCtxDestroy", unsafe { sys::cuGreenCtxDestroy(g) })
    }

    /// # Safety
    /// `g` must be live.
    pub(crate) unsafe fn sm_resource(g: CUgreenCtx) -> Result<CUdevResource, HalError> {
        // SAFETY: plain old data.
        let mut r: CUdevResource = unsafe { std::mem::zeroed() };
        // SAFETY: `g` is live; the out-pointer is a live local.
        check("cuGreenCtxGetDevResource", unsafe {
            sys::cuGreenCtxGetDevResource(g, &mut r, sys::CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM)
        })?;
        Ok(r)
    }

    /// A non-blocking stream of `g` (a lane).
    ///
    /// # Safety
    /// `g` must be live.
    pub(crate) unsafe fn stream_create(g: CUgreenCtx, priority: i32) -> Result<CUstream, HalError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: `g` is live; NON_BLOCKING is the flag green-context streams require.
        check("cuGreenCtxStreamCreate", unsafe {
            sys::cuGreenCtxStreamCreate(&mut s, g, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32, priority)
        })?;
        Ok(s)
    }
}

/// Streams.
pub(crate) mod stream {
    use super::*;

    /// A non-blocking stream of the current context (the primary context's lanes of the
    /// whole-device node; the graph census's capture streams).
    pub(crate) fn create() -> Result<CUstream, HalError> {
        let mut s = std::ptr::null_mut();
        // SAFETY: out-pointer is a live local; NON_BLOCKING is a valid flag.
        check("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(s)
    }

    /// # Safety
    /// `s` must be live.
    pub(crate) unsafe fn synchronize(s: CUstream) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `s` is live.
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(s) })
    }

    /// `Ok(true)` when everything submitted to `s` completed, `Ok(false)` while work runs;
    /// errors are asynchronous failures of its work (the context's sticky error).
    ///
    /// # Safety
    /// `s` must be live.
    pub(crate) unsafe fn query(s: CUstream) -> Result<bool, HalError> {
        // SAFETY: the caller guarantees `s` is live.
        match unsafe { sys::cuStreamQuery(s) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(HalError::AsyncDriver {
                code: r as i32,
                message: format!("work on a lane failed: {} ({})", error_name(r), error_string(r)),
            }),
        }
    }

    /// Enqueues a write of `value` to `addr` (device-visible memory) after the work already on
    /// `s`, with the default memory barrier: once the value is visible, that work completed and
    /// its memory effects are visible too.
    ///
    /// # Safety
    /// `s` must be live and `addr..addr+8` device-visible memory that outlives the write.
    pub(crate) unsafe fn write_value64(s: CUstream, addr: CUdeviceptr, value: u64) -> Result<(), HalError> {
        // SAFETY: the caller guarantees the stream and the address.
        check("cuStreamWriteValue64_v2", unsafe {
            sys::cuStreamWriteValue64_v2(
                s,
                addr,
                value,
                sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        })
    }

    /// # Safety
    /// `s` must be live and unused afterwards.
    pub(crate) unsafe fn destroy(s: CUstream) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `s` is live and not used again.
        check("cuStreamDestroy_v2", unsafe { sys::cuStreamDestroy_v2(s) })
    }
}

/// Events (fences).
pub(crate) mod event {
    use super::*;

    /// A timing-free event in the current context.
    pub(crate) fn create() -> Result<CUevent, HalError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: out-pointer is a live local.
        check("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(e)
    }

    /// # Safety
    /// `e` and `s` must be live.
    pub(crate) unsafe fn record(e: CUevent, s: CUstream) -> Result<(), HalError> {
        // SAFETY: the caller guarantees both handles are live.
        check("cuEventRecord", unsafe { sys::cuEventRecord(e, s) })
    }

    /// `Ok(true)` when complete, `Ok(false)` when not yet; errors are asynchronous failures of
    /// the work before the event.
    ///
    /// # Safety
    /// `e` must be live.
    pub(crate) unsafe fn query(e: CUevent) -> Result<bool, HalError> {
        // SAFETY: the caller guarantees `e` is live.
        match unsafe { sys::cuEventQuery(e) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(HalError::AsyncDriver {
                code: r as i32,
                message: format!("work before a fence failed: {} ({})", error_name(r), error_string(r)),
            }),
        }
    }

    /// # Safety
    /// `e` must be live and unused afterwards.
    pub(crate) unsafe fn destroy(e: CUevent) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `e` is live and not used again.
        check("cuEventDestroy_v2", unsafe { sys::cuEventDestroy_v2(e) })
    }
}

/// Device memory (allocated in the primary context, which must be current).
pub(crate) mod mem {
    use super::*;

    pub(crate) fn alloc(bytes: usize) -> Result<CUdeviceptr, HalError> {
        let mut p = 0;
        // SAFETY: out-pointer is a live local; the caller made the primary context current.
        check("cuMemAlloc_v2", unsafe { sys::cuMemAlloc_v2(&mut p, bytes.max(1)) })?;
        Ok(p)
    }

    /// # Safety
    /// `p` must come from [`alloc`] and not be freed twice or used afterwards.
    pub(crate) unsafe fn free(p: CUdeviceptr) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `p` is a live allocation.
        check("cuMemFree_v2", unsafe { sys::cuMemFree_v2(p) })
    }

    /// Pinned host memory mapped into the device's address space (`cuMemHostAlloc` with
    /// `DEVICEMAP | PORTABLE`), zeroed: its host address and its device address.
    pub(crate) fn host_alloc_mapped(bytes: usize) -> Result<(*mut u8, CUdeviceptr), HalError> {
        let mut p: *mut c_void = std::ptr::null_mut();
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: out-pointer is a live local; the caller made the primary context current.
        check("cuMemHostAlloc", unsafe { sys::cuMemHostAlloc(&mut p, bytes.max(1), flags) })?;
        let mut d = 0;
        // SAFETY: `p` was just allocated with DEVICEMAP; the out-pointer is a live local.
        let mapped = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut d, p, 0) };
        if let Err(e) = check("cuMemHostGetDevicePointer_v2", mapped) {
            // SAFETY: `p` is freed once, here, and not returned.
            let _ = unsafe { free_host(p.cast()) };
            return Err(e);
        }
        // SAFETY: `p` addresses `bytes` writable bytes nobody else uses yet.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, bytes) };
        Ok((p.cast(), d))
    }

    /// # Safety
    /// `p` must come from [`host_alloc_mapped`], no pending work may write it, and it must not be
    /// used afterwards.
    pub(crate) unsafe fn free_host(p: *mut u8) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `p` is a live pinned allocation.
        check("cuMemFreeHost", unsafe { sys::cuMemFreeHost(p.cast()) })
    }

    /// Synchronous host-to-device copy.
    ///
    /// # Safety
    /// `dst..dst+src.len()` must be device memory.
    pub(crate) unsafe fn write(dst: CUdeviceptr, src: &[u8]) -> Result<(), HalError> {
        // SAFETY: `src` is a live slice of `len` bytes; the caller vouches for `dst`.
        check("cuMemcpyHtoD_v2", unsafe { sys::cuMemcpyHtoD_v2(dst, src.as_ptr().cast(), src.len()) })
    }

    /// Synchronous device-to-host copy.
    ///
    /// # Safety
    /// `src..src+dst.len()` must be device memory.
    pub(crate) unsafe fn read(dst: &mut [u8], src: CUdeviceptr) -> Result<(), HalError> {
        // SAFETY: `dst` is a live mutable slice of `len` bytes; the caller vouches for `src`.
        check("cuMemcpyDtoH_v2", unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len()) })
    }

    /// Stream-ordered copy between any two unified addresses.
    ///
    /// # Safety
    /// Both ranges must stay valid until the copy completes on `s`.
    pub(crate) unsafe fn copy_async(dst: u64, src: u64, bytes: usize, s: CUstream) -> Result<(), HalError> {
        // SAFETY: the caller guarantees both ranges and `s`.
        check("cuMemcpyAsync", unsafe { sys::cuMemcpyAsync(dst, src, bytes, s) })
    }

    /// Stream-ordered fill of `count` elements of `element_size` bytes.
    ///
    /// # Safety
    /// The destination range must be device memory that stays valid until the fill completes.
    pub(crate) unsafe fn fill_async(
        dst: CUdeviceptr,
        value: u32,
        element_size: u8,
        count: usize,
        s: CUstream,
    ) -> Result<(), HalError> {
        match element_size {
            // SAFETY: the caller guarantees the range and `s`.
            1 => check("cuMemsetD8Async", unsafe { sys::cuMemsetD8Async(dst, value as u8, count, s) }),
            // SAFETY: as above.
            2 => check("cuMemsetD16Async", unsafe { sys::cuMemsetD16Async(dst, value as u16, count, s) }),
            // SAFETY: as above.
            _ => check("cuMemsetD32Async", unsafe { sys::cuMemsetD32Async(dst, value, count, s) }),
        }
    }
}

/// Context-independent code loading (`CUlibrary` / `CUkernel`).
pub(crate) mod library {
    use super::*;

    /// Loads a cubin or PTX image (NUL-terminated when PTX).
    pub(crate) fn load_data(image: &[u8]) -> Result<CUlibrary, HalError> {
        let mut lib = std::ptr::null_mut();
        // SAFETY: `image` is live for the call; no JIT or library options are passed.
        check("cuLibraryLoadData", unsafe {
            sys::cuLibraryLoadData(
                &mut lib,
                image.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        })?;
        Ok(lib)
    }

    /// # Safety
    /// `lib` must be live and none of its kernels used afterwards.
    pub(crate) unsafe fn unload(lib: CUlibrary) -> Result<(), HalError> {
        // SAFETY: the caller guarantees it.
        check("cuLibraryUnload", unsafe { sys::cuLibraryUnload(lib) })
    }

    /// # Safety
    /// `lib` must be live.
    pub(crate) unsafe fn kernel(lib: CUlibrary, name: &CStr) -> Result<CUkernel, HalError> {
        let mut k = std::ptr::null_mut();
        // SAFETY: `lib` is live; `name` is NUL-terminated.
        check("cuLibraryGetKernel", unsafe { sys::cuLibraryGetKernel(&mut k, lib, name.as_ptr()) })?;
        Ok(k)
    }

    /// The kernel's function in the current context (for occupancy queries).
    ///
    /// # Safety
    /// `k` must be live; a context must be current.
    pub(crate) unsafe fn function_of(k: CUkernel) -> Result<CUfunction, HalError> {
        let mut f = std::ptr::null_mut();
        // SAFETY: the caller guarantees `k` and the current context.
        check("cuKernelGetFunction", unsafe { sys::cuKernelGetFunction(&mut f, k) })?;
        Ok(f)
    }
}

/// Occupancy queries (for `can_execute`).
pub(crate) mod occupancy {
    use super::*;

    /// Blocks of `f` one SM holds at once.
    ///
    /// # Safety
    /// `f` must be a live function.
    pub(crate) unsafe fn blocks_per_sm(f: CUfunction, threads: u32, smem: u32) -> Result<u32, HalError> {
        let mut n = 0;
        // SAFETY: `f` is live; out-pointer is a live local.
        check("cuOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut n, f, threads as i32, smem as usize)
        })?;
        Ok(n.max(0) as u32)
    }

    /// Clusters of `config`'s shape that can be co-resident on `config.hStream`'s resources.
    ///
    /// # Safety
    /// `f` and the config's stream must be live; `config.attrs` must point to `numAttrs` attributes.
    pub(crate) unsafe fn max_active_clusters(f: CUfunction, config: &sys::CUlaunchConfig) -> Result<u32, HalError> {
        let mut n = 0;
        // SAFETY: the caller guarantees the handles and the attribute array.
        check("cuOccupancyMaxActiveClusters", unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f, config) })?;
        Ok(n.max(0) as u32)
    }
}

/// Function attributes in a given context.
pub(crate) mod func {
    use super::*;

    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
    const MAX_DYNAMIC_SHARED_SIZE_BYTES: sys::CUfunction_attribute =
        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;

    /// Raises the dynamic shared memory limit of `handle` (a `CUfunction`, or a `CUkernel` when
    /// `is_kernel`) to `bytes` as seen by green context `g`: with `g`'s context current, the
    /// kernel's function there (`cuKernelGetFunction`) or the function itself gets
    /// `cuFuncSetAttribute`. The calling thread's current context is restored.
    ///
    /// # Safety
    /// `g` and `handle` must be live.
    pub(crate) unsafe fn raise_dynamic_shared_in(
        g: CUgreenCtx,
        handle: u64,
        is_kernel: bool,
        bytes: u32,
    ) -> Result<(), HalError> {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: `g` is live (caller); the out-pointer is a live local.
        check("cuCtxFromGreenCtx", unsafe { sys::cuCtxFromGreenCtx(&mut ctx, g) })?;
        // SAFETY: `ctx` is the green context's live context.
        check("cuCtxPushCurrent_v2", unsafe { sys::cuCtxPushCurrent_v2(ctx) })?;
        let r = (|| {
            let f = if is_kernel {
                // SAFETY: `handle` is a live CUkernel (caller); `ctx` is current.
                unsafe { library::function_of(handle as CUkernel) }?
            } else {
                handle as CUfunction
            };
            // SAFETY: `f` is a live function; the attribute takes an int.
            check("cuFuncSetAttribute", unsafe {
                sys::cuFuncSetAttribute(f, MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes as i32)
            })
        })();
        let mut popped = std::ptr::null_mut();
        // SAFETY: pops the context pushed above; the out-pointer is a live local.
        let p = check("cuCtxPopCurrent_v2", unsafe { sys::cuCtxPopCurrent_v2(&mut popped) });
        r.and(p)
    }
}

/// Launches.
pub(crate) mod launch {
    use super::*;

    /// The layout of `CUlaunchAttribute` with a plain `u32` id, so that attribute ids vitamin does
    /// not know (passed through from applications) never become invalid Rust enum values.
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub(crate) struct RawLaunchAttribute {
        pub(crate) id: u32,
        pub(crate) pad: [u8; 4],
        pub(crate) value: [u64; 8],
    }

    const _: () = assert!(std::mem::size_of::<RawLaunchAttribute>() == std::mem::size_of::<sys::CUlaunchAttribute>());
    const _: () = assert!(std::mem::align_of::<RawLaunchAttribute>() == std::mem::align_of::<sys::CUlaunchAttribute>());

    impl RawLaunchAttribute {
        pub(crate) fn new(id: u32, value: &[u8]) -> Self {
            let mut v = [0u64; 8];
            for (i, chunk) in value.chunks(8).take(8).enumerate() {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                v[i] = u64::from_le_bytes(w);
            }
            RawLaunchAttribute { id, pad: [0; 4], value: v }
        }
    }

    /// A launch configuration for `cuLaunchKernelEx` / occupancy queries.
    pub(crate) fn config(
        grid: [u32; 3],
        block: [u32; 3],
        smem: u32,
        stream: CUstream,
        attrs: &mut [RawLaunchAttribute],
    ) -> sys::CUlaunchConfig {
        sys::CUlaunchConfig {
            gridDimX: grid[0],
            gridDimY: grid[1],
            gridDimZ: grid[2],
            blockDimX: block[0],
            blockDimY: block[1],
            blockDimZ: block[2],
            sharedMemBytes: smem,
            hStream: stream,
            attrs: if attrs.is_empty() { std::ptr::null_mut() } else { attrs.as_mut_ptr().cast() },
            numAttrs: attrs.len() as u32,
        }
    }

    /// `cuLaunchKernelEx(config, f, params, NULL)`.
    ///
    /// # Safety
    /// `f` (a `CUfunction`, or a `CUkernel` cast to one) and the config's stream must be live;
    /// `params` must hold one pointer per kernel parameter, each to that parameter's bytes.
    pub(crate) unsafe fn kernel_ex(
        config: &sys::CUlaunchConfig,
        f: CUfunction,
        params: *mut *mut c_void,
    ) -> Result<(), HalError> {
        // SAFETY: the caller guarantees the handles and the parameter array.
        check("cuLaunchKernelEx", unsafe { sys::cuLaunchKernelEx(config, f, params, std::ptr::null_mut()) })
    }

    /// `cuLaunchKernel(f, grid, block, smem, s, params, NULL)`: the same launch as
    /// [`kernel_ex`] without attributes (and about 0.1-0.3 us cheaper on the host).
    ///
    /// # Safety
    /// As for [`kernel_ex`]: `f` a live function or kernel handle, `s` a live stream, `params`
    /// one pointer per parameter (or null for none).
    pub(crate) unsafe fn kernel(
        f: CUfunction,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        s: CUstream,
        params: *mut *mut c_void,
    ) -> Result<(), HalError> {
        // SAFETY: the caller guarantees the handles and the parameter array.
        check("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                f,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                s,
                params,
                std::ptr::null_mut(),
            )
        })
    }

    /// `cuLaunchHostFunc(s, f, user)`.
    ///
    /// # Safety
    /// `s` must be live; `f` must accept `user` exactly once.
    pub(crate) unsafe fn host_func(
        s: CUstream,
        f: unsafe extern "C" fn(*mut c_void),
        user: *mut c_void,
    ) -> Result<(), HalError> {
        // SAFETY: the caller guarantees it.
        check("cuLaunchHostFunc", unsafe { sys::cuLaunchHostFunc(s, Some(f), user) })
    }

    /// `cuGraphLaunch(exec, s)`.
    ///
    /// # Safety
    /// `exec` must be a live executable graph and `s` a live stream.
    pub(crate) unsafe fn graph(exec: u64, s: CUstream) -> Result<(), HalError> {
        // SAFETY: the caller guarantees it.
        check("cuGraphLaunch", unsafe { sys::cuGraphLaunch(exec as sys::CUgraphExec, s) })
    }
}

/// Stream capture and executable graphs in the primary context (the graph census builds graphs
/// the way applications do).
pub(crate) mod capture {
    use super::*;

    /// A non-blocking stream of the current context.
    pub(crate) fn stream_create() -> Result<CUstream, HalError> {
        super::stream::create()
    }

    /// Makes `s` wait for the work before event `e` (joins a capture's branches).
    ///
    /// # Safety
    /// `s` and `e` must be live.
    pub(crate) unsafe fn wait_event(s: CUstream, e: CUevent) -> Result<(), HalError> {
        // SAFETY: the caller guarantees both handles.
        check("cuStreamWaitEvent", unsafe { sys::cuStreamWaitEvent(s, e, 0) })
    }

    /// Starts capturing `s` (thread-local mode: other threads' calls are unaffected).
    ///
    /// # Safety
    /// `s` must be live and not capturing.
    pub(crate) unsafe fn begin(s: CUstream) -> Result<(), HalError> {
        // SAFETY: the caller guarantees `s`.
        check("cuStreamBeginCapture_v2", unsafe {
            sys::cuStreamBeginCapture_v2(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        })
    }

    /// Ends the capture of `s` and returns the captured graph.
    ///
    /// # Safety
    /// `s` must be live and capturing.
    pub(crate) unsafe fn end(s: CUstream) -> Result<CUgraph, HalError> {
        let mut g = std::ptr::null_mut();
        // SAFETY: the caller guarantees `s`; the out-pointer is a live local.
        check("cuStreamEndCapture", unsafe { sys::cuStreamEndCapture(s, &mut g) })?;
        Ok(g)
    }

    /// Instantiates `g` into an executable graph.
    ///
    /// # Safety
    /// `g` must be live.
    pub(crate) unsafe fn instantiate(g: CUgraph) -> Result<CUgraphExec, HalError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: the caller guarantees `g`; the out-pointer is a live local.
        check("cuGraphInstantiateWithFlags", unsafe { sys::cuGraphInstantiateWithFlags(&mut e, g, 0) })?;
        Ok(e)
    }

    /// # Safety
    /// `e` must be live and not used afterwards (launches in flight finish).
    pub(crate) unsafe fn destroy_exec(e: CUgraphExec) -> Result<(), HalError> {
        // SAFETY: the caller guarantees it.
        check("cuGraphExecDestroy", unsafe { sys::cuGraphExecDestroy(e) })
    }

    /// # Safety
    /// `g` must be live and not used afterwards.
    pub(crate) unsafe fn destroy_graph(g: CUgraph) -> Result<(), HalError> {
        // SAFETY: the caller guarantees it.
        check("cuGraphDestroy", unsafe { sys::cuGraphDestroy(g) })
    }
}

/// Reading and rewriting a graph's nodes: the per-partition copies of an application's
/// executable graph ([`crate::copies`]).
pub(crate) mod graphs {
    use super::*;

    /// Node kinds a copy may hold (`CUgraphNodeType`): kernel, copy, fill, host function, empty,
    /// event wait and event record. Every other kind (child graphs, memory allocation and free,
    /// external semaphores, batched memory operations, conditional nodes) keeps the graph on the
    /// whole device.
    pub(crate) const KERNEL: u32 = 0;
    pub(crate) const COPYABLE: &[u32] = &[0, 1, 2, 3, 5, 6, 7];

    /// A kernel node's parameters (`CUDA_KERNEL_NODE_PARAMS_v2`: `func`, `kern`, `ctx`, ...).
    pub(crate) type KernelParams = sys::CUDA_KERNEL_NODE_PARAMS;
    pub(crate) use sys::CUgraphNode;

    /// `cuGraphClone`.
    ///
    /// # Safety
    /// `g` must be a live graph.
    pub(crate) unsafe fn clone(g: CUgraph) -> Result<CUgraph, HalError> {
        let mut out = std::ptr::null_mut();
        // SAFETY: the caller guarantees `g`; the out-pointer is a live local.
        check("cuGraphClone", unsafe { sys::cuGraphClone(&mut out, g) })?;
        Ok(out)
    }

    /// Every node of `g` (`cuGraphGetNodes`, asked for the count first).
    ///
    /// # Safety
    /// `g` must be a live graph.
    pub(crate) unsafe fn nodes(g: CUgraph) -> Result<Vec<CUgraphNode>, HalError> {
        let mut n = 0usize;
        // SAFETY: a null array asks for the count only.
        check("cuGraphGetNodes", unsafe { sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut n) })?;
        let mut nodes = vec![std::ptr::null_mut(); n];
        // SAFETY: `nodes` holds `n` entries; the driver writes at most `n` and updates `n`.
        check("cuGraphGetNodes", unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut n) })?;
        nodes.truncate(n);
        Ok(nodes)
    }

    /// `cuGraphNodeGetType` as the raw enumerator (kinds newer than the bindings stay numbers).
    ///
    /// # Safety
    /// `node` must be a live node.
    pub(crate) unsafe fn node_type(node: CUgraphNode) -> Result<u32, HalError> {
        let mut t: u32 = u32::MAX;
        // SAFETY: the driver writes one 32-bit enumerator into `t`, which is never read as the
        // bindings' enum (a kind they lack would not be a valid value of it).
        check("cuGraphNodeGetType", unsafe {
            sys::cuGraphNodeGetType(node, (&mut t as *mut u32).cast::<sys::CUgraphNodeType>())
        })?;
        Ok(t)
    }

    /// `cuGraphKernelNodeGetParams_v2`.
    ///
    /// # Safety
    /// `node` must be a live kernel node.
    pub(crate) unsafe fn kernel_params(node: CUgraphNode) -> Result<KernelParams, HalError> {
        // SAFETY: plain C struct; all-zero is a valid value (null handles and pointers).
        let mut p: KernelParams = unsafe { std::mem::zeroed() };
        // SAFETY: the caller guarantees `node`; `p` is a live local.
        check("cuGraphKernelNodeGetParams_v2", unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) })?;
        Ok(p)
    }

    /// `cuGraphKernelNodeSetParams_v2`.
    ///
    /// # Safety
    /// `node` must be a live kernel node of a graph not being instantiated concurrently; the
    /// pointers in `p` valid for the call (the driver copies the argument values).
    pub(crate) unsafe fn set_kernel_params(node: CUgraphNode, p: &KernelParams) -> Result<(), HalError> {
        // SAFETY: the caller guarantees it.
        check("cuGraphKernelNodeSetParams_v2", unsafe { sys::cuGraphKernelNodeSetParams_v2(node, p) })
    }

    /// Whether kernel node `node` is a cooperative launch, and its thread-block cluster shape if it
    /// runs in clusters of more than one block (either may not fit a partition unchanged). An
    /// attribute the driver does not report counts as unset.
    ///
    /// # Safety
    /// `node` must be a live kernel node.
    pub(crate) unsafe fn kernel_coresidency(node: CUgraphNode) -> (bool, Option<[u32; 3]>) {
        use sys::CUlaunchAttributeID::{CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, CU_LAUNCH_ATTRIBUTE_COOPERATIVE};
        // SAFETY: plain C union; all-zero is a valid value.
        let mut v: sys::CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
        // SAFETY: the caller guarantees `node`; `v` is a live local.
        let coop = unsafe { sys::cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &mut v) };
        // SAFETY: the driver wrote the `cooperative` member (or nothing: still zero).
        let cooperative = coop == CUresult::CUDA_SUCCESS && unsafe { v.cooperative } != 0;
        // SAFETY: as above.
        let mut v: sys::CUkernelNodeAttrValue = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let cl = unsafe { sys::cuGraphKernelNodeGetAttribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &mut v) };
        // SAFETY: the driver wrote the `clusterDim` member (or nothing: still zero).
        let d = unsafe { v.clusterDim };
        let cluster = (cl == CUresult::CUDA_SUCCESS && (d.x > 1 || d.y > 1 || d.z > 1))
            .then(|| [d.x.max(1), d.y.max(1), d.z.max(1)]);
        (cooperative, cluster)
    }

    /// `cuGraphInstantiateWithFlags(g, flags)`.
    ///
    /// # Safety
    /// `g` must be live.
    pub(crate) unsafe fn instantiate(g: CUgraph, flags: u64) -> Result<CUgraphExec, HalError> {
        let mut e = std::ptr::null_mut();
        // SAFETY: the caller guarantees `g`; the out-pointer is a live local.
        check("cuGraphInstantiateWithFlags", unsafe { sys::cuGraphInstantiateWithFlags(&mut e, g, flags) })?;
        Ok(e)
    }

    /// The `CUcontext` view of green context `g`.
    ///
    /// # Safety
    /// `g` must be live.
    pub(crate) unsafe fn green_context(g: CUgreenCtx) -> Result<CUcontext, HalError> {
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the caller guarantees `g`; the out-pointer is a live local.
        check("cuCtxFromGreenCtx", unsafe { sys::cuCtxFromGreenCtx(&mut ctx, g) })?;
        Ok(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `sys::cu*` function called anywhere in this crate is in `REQUIRED_SYMBOLS`, so `load`
    /// really does rule out cudarc's missing-symbol panic.
    #[test]
    fn required_symbols_cover_every_call() {
        let sources = [include_str!("driver.rs"), include_str!("nvrtc.rs")];
        let mut called = std::collections::BTreeSet::new();
        for src in sources {
            for (i, _) in src.match_indices("sys::cu") {
                let name: String =
                    src[i + 5..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                let is_driver_fn = name[2..].starts_with(|c: char| c.is_ascii_uppercase());
                if is_driver_fn && src[i + 5 + name.len()..].starts_with('(') {
                    called.insert(name);
                }
            }
        }
        assert!(called.len() > 30, "parsed too few calls: {called:?}");
        for name in &called {
            assert!(REQUIRED_SYMBOLS.contains(&name.as_str()), "{name} is called but not checked by load()");
        }
    }

    #[test]
    fn raw_attributes_pack_little_endian() {
        let a = launch::RawLaunchAttribute::new(4, &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(a.id, 4);
        assert_eq!(a.value[0], 1 | (2 << 32));
        assert_eq!(a.value[1], 3);
    }
}
