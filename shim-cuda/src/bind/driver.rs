//! The driver functions bind mode calls itself (FFI), each resolved once.
//!
//! Functions the shim hooks are called at the driver's exported symbol ([`real::canonical`]), so
//! they never re-enter vitamin; the others are looked up in libcuda ([`real::driver_symbol`]). A
//! missing function is `CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND` (302), never a panic. Every
//! function here is called with the re-entry guard held (inside a hook or on the dispatcher
//! thread).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ffi::{CUcontext, CUevent, CUlaunchConfig, CUresult, CUstream, CUstreamCaptureStatus, CUDA_SUCCESS};
use crate::real;
use crate::table::HookId;
use vitamin_runtime::client::native::HostWait;

/// `CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND`.
const MISSING: CUresult = crate::ffi::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND;
/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
pub const FUNC_MAX_THREADS_PER_BLOCK: c_int = 0;
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
pub const FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES: c_int = 8;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`.
const POINTER_MEMORY_TYPE: c_int = 2;
/// `CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH` (then `_HEIGHT` = 12, `_DEPTH` = 13).
pub const FUNC_REQUIRED_CLUSTER_WIDTH: c_int = 11;
/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
const DEVICE_MULTIPROCESSOR_COUNT: c_int = 16;
/// `CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`.
const DEVICE_COOPERATIVE_LAUNCH: c_int = 95;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: u32 = 4;

/// One lazily resolved driver function.
struct Sym {
    name: &'static str,
    hook: Option<HookId>,
    addr: AtomicUsize,
}

impl Sym {
    const fn unhooked(name: &'static str) -> Sym {
        Sym { name, hook: None, addr: AtomicUsize::new(0) }
    }
    const fn hooked(id: HookId) -> Sym {
        Sym { name: "", hook: Some(id), addr: AtomicUsize::new(0) }
    }
    fn get(&self) -> Option<usize> {
        let a = self.addr.load(Ordering::Acquire);
        if a != 0 {
            return Some(a);
        }
        let a = match self.hook {
            Some(id) => real::canonical(id)?,
            None => real::driver_symbol(self.name)?,
        };
        self.addr.store(a, Ordering::Release);
        Some(a)
    }
}

macro_rules! driver_fns {
    ($($(#[$doc:meta])* fn $name:ident = $sym:expr; ($($arg:ident: $ty:ty),*);)*) => {
        $(
            $(#[$doc])*
            ///
            /// # Safety
            /// The driver function's contract (cuda.h); pointer arguments must be valid for it.
            #[allow(non_snake_case)]
            pub unsafe fn $name($($arg: $ty),*) -> CUresult {
                static SYM: Sym = $sym;
                let Some(p) = SYM.get() else { return MISSING };
                type F = unsafe extern "C" fn($($ty),*) -> CUresult;
                // SAFETY: `p` is the driver's function of this name, whose C signature is `F`.
                let f = unsafe { std::mem::transmute::<usize, F>(p) };
                // SAFETY: forwarded contract.
                unsafe { f($($arg),*) }
            }
        )*
    };
}

driver_fns! {
    /// `cuCtxGetCurrent`.
    fn ctx_get_current = Sym::unhooked("cuCtxGetCurrent"); (ctx: *mut CUcontext);
    /// `cuCtxGetDevice`.
    fn ctx_get_device = Sym::unhooked("cuCtxGetDevice"); (dev: *mut c_int);
    /// `cuDevicePrimaryCtxRetain`.
    fn primary_ctx_retain = Sym::unhooked("cuDevicePrimaryCtxRetain"); (ctx: *mut CUcontext, dev: c_int);
    /// `cuDevicePrimaryCtxGetState`.
    fn primary_ctx_get_state = Sym::unhooked("cuDevicePrimaryCtxGetState");
        (dev: c_int, flags: *mut u32, active: *mut c_int);
    /// `cuDevicePrimaryCtxRelease_v2`.
    fn primary_ctx_release = Sym::unhooked("cuDevicePrimaryCtxRelease_v2"); (dev: c_int);
    /// `cuFuncGetParamInfo`.
    fn func_get_param_info = Sym::unhooked("cuFuncGetParamInfo");
        (f: *mut c_void, index: usize, offset: *mut usize, size: *mut usize);
    /// `cuKernelGetParamInfo`.
    fn kernel_get_param_info = Sym::unhooked("cuKernelGetParamInfo");
        (k: *mut c_void, index: usize, offset: *mut usize, size: *mut usize);
    /// `cuFuncGetAttribute`.
    fn func_get_attribute = Sym::unhooked("cuFuncGetAttribute"); (v: *mut c_int, attr: c_int, f: *mut c_void);
    /// `cuKernelGetAttribute`.
    fn kernel_get_attribute = Sym::unhooked("cuKernelGetAttribute");
        (v: *mut c_int, attr: c_int, k: *mut c_void, dev: c_int);
    /// `cuDeviceGetAttribute`.
    fn device_get_attribute = Sym::unhooked("cuDeviceGetAttribute"); (v: *mut c_int, attr: c_int, dev: c_int);
    /// `cuOccupancyMaxActiveBlocksPerMultiprocessor`.
    fn occupancy_blocks_per_sm = Sym::unhooked("cuOccupancyMaxActiveBlocksPerMultiprocessor");
        (n: *mut c_int, f: *mut c_void, threads: c_int, smem: usize);
    /// `cuOccupancyMaxActiveClusters`.
    fn occupancy_max_active_clusters = Sym::unhooked("cuOccupancyMaxActiveClusters");
        (n: *mut c_int, f: *mut c_void, config: *const CUlaunchConfig);
    /// `cuPointerGetAttribute`.
    fn pointer_get_attribute = Sym::unhooked("cuPointerGetAttribute"); (data: *mut c_void, attr: c_int, ptr: u64);
    /// `cuStreamGetFlags`.
    fn stream_get_flags = Sym::hooked(HookId::cuStreamGetFlags); (s: CUstream, flags: *mut u32);
    /// `cuStreamGetPriority`.
    fn stream_get_priority = Sym::hooked(HookId::cuStreamGetPriority); (s: CUstream, p: *mut c_int);
    /// `cuStreamIsCapturing`.
    fn stream_is_capturing = Sym::hooked(HookId::cuStreamIsCapturing); (s: CUstream, st: *mut CUstreamCaptureStatus);
    /// `cuStreamIsCapturing_ptsz`.
    fn stream_is_capturing_ptsz = Sym::hooked(HookId::cuStreamIsCapturing_ptsz);
        (s: CUstream, st: *mut CUstreamCaptureStatus);
    /// `cuStreamSynchronize`.
    fn stream_synchronize = Sym::hooked(HookId::cuStreamSynchronize); (s: CUstream);
    /// `cuStreamSynchronize_ptsz`.
    fn stream_synchronize_ptsz = Sym::hooked(HookId::cuStreamSynchronize_ptsz); (s: CUstream);
    /// `cuEventSynchronize`.
    fn event_synchronize = Sym::hooked(HookId::cuEventSynchronize); (e: CUevent);
}

/// The calling thread's current context (null if none), or the driver's error.
pub fn current_context() -> Result<usize, CUresult> {
    let mut c: CUcontext = std::ptr::null_mut();
    // SAFETY: a valid out pointer.
    match unsafe { ctx_get_current(&mut c) } {
        CUDA_SUCCESS => Ok(c as usize),
        e => Err(e),
    }
}

/// The device of the current context.
pub fn current_device() -> Result<c_int, CUresult> {
    let mut d = 0;
    // SAFETY: a valid out pointer.
    match unsafe { ctx_get_device(&mut d) } {
        CUDA_SUCCESS => Ok(d),
        e => Err(e),
    }
}

/// `CU_CTX_SCHED_BLOCKING_SYNC`.
const CTX_SCHED_BLOCKING_SYNC: u32 = 0x04;
/// `CU_CTX_SCHED_MASK`.
const CTX_SCHED_MASK: u32 = 0x07;

/// `CU_CTX_SCHED_YIELD`.
const CTX_SCHED_YIELD: u32 = 0x02;

/// How the application asked host threads to wait for the device: the scheduling part of `dev`'s
/// primary context's flags (`cudaSetDeviceFlags`; spin when the driver cannot tell).
pub fn sched_mode(dev: c_int) -> HostWait {
    let (mut flags, mut active) = (0u32, 0 as c_int);
    // SAFETY: valid out pointers and a device the driver named.
    let r = unsafe { primary_ctx_get_state(dev, &mut flags, &mut active) };
    match flags & CTX_SCHED_MASK {
        _ if r != CUDA_SUCCESS => HostWait::Spin,
        CTX_SCHED_BLOCKING_SYNC => HostWait::BlockingSync,
        CTX_SCHED_YIELD => HostWait::Yield,
        _ => HostWait::Spin,
    }
}

/// The primary context of `dev` (retained and released again: the application holds its own), or
/// 0 when it is inactive (then it is nobody's current context).
pub fn primary_context(dev: c_int) -> Result<usize, CUresult> {
    let (mut flags, mut active) = (0u32, 0 as c_int);
    // SAFETY: valid out pointers. An inactive primary context is not current anywhere, and
    // retaining it would create it: answer "none" (0) instead.
    if unsafe { primary_ctx_get_state(dev, &mut flags, &mut active) } == CUDA_SUCCESS && active == 0 {
        return Ok(0);
    }
    let mut c: CUcontext = std::ptr::null_mut();
    // SAFETY: a valid out pointer and a device the driver just named.
    let r = unsafe { primary_ctx_retain(&mut c, dev) };
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    // SAFETY: pairs with the retain above.
    unsafe { primary_ctx_release(dev) };
    Ok(c as usize)
}

/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` of `ptr`, `None` if the driver does not know the address.
pub fn memory_type(ptr: u64) -> Option<u32> {
    let mut t: u32 = 0;
    // SAFETY: the attribute is an unsigned int written to a valid out pointer; any address may be
    // asked about.
    let r = unsafe { pointer_get_attribute((&mut t as *mut u32).cast(), POINTER_MEMORY_TYPE, ptr) };
    (r == CUDA_SUCCESS).then_some(t)
}

/// Whether `stream` is being captured (legacy or per-thread meaning of `NULL`).
pub fn is_capturing(stream: CUstream, per_thread: bool) -> bool {
    let mut status = crate::ffi::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: an application stream handle (as the application passed it) and a valid out pointer.
    let r = unsafe {
        if per_thread {
            stream_is_capturing_ptsz(stream, &mut status)
        } else {
            stream_is_capturing(stream, &mut status)
        }
    };
    r == CUDA_SUCCESS && status != crate::ffi::CU_STREAM_CAPTURE_STATUS_NONE
}

/// Waits for the application's native stream (where vitamin's pass-throughs ran).
pub fn native_stream_synchronize(stream: CUstream, per_thread: bool) -> CUresult {
    // SAFETY: an application stream handle, as the application passed it.
    unsafe {
        if per_thread {
            stream_synchronize_ptsz(stream)
        } else {
            stream_synchronize(stream)
        }
    }
}

/// Flags and priority of a stream the driver knows.
pub fn stream_flags_priority(stream: CUstream) -> Result<(u32, i32), CUresult> {
    let (mut f, mut p) = (0u32, 0 as c_int);
    // SAFETY: an application stream handle and valid out pointers.
    let r = unsafe { stream_get_flags(stream, &mut f) };
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    // SAFETY: as above.
    let r = unsafe { stream_get_priority(stream, &mut p) };
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    Ok((f, p))
}

pub use vitamin_runtime::client::capture::DeviceLimits;

/// The limits of device `dev`.
pub fn device_limits(dev: c_int) -> Result<DeviceLimits, CUresult> {
    let attribute = |attr: c_int| {
        let mut v: c_int = 0;
        // SAFETY: a valid out pointer and a device the driver named.
        match unsafe { device_get_attribute(&mut v, attr, dev) } {
            CUDA_SUCCESS => Ok(v),
            e => Err(e),
        }
    };
    Ok(DeviceLimits {
        units: attribute(DEVICE_MULTIPROCESSOR_COUNT)?.max(0) as u32,
        cooperative_launch: attribute(DEVICE_COOPERATIVE_LAUNCH)? != 0,
    })
}

/// Blocks of function (or kernel) handle `f` with this shape that one SM holds at once, in the
/// current context.
pub fn blocks_per_sm(f: usize, threads: u32, smem: u32) -> Result<u32, CUresult> {
    let mut n: c_int = 0;
    // SAFETY: a handle the application launched with (a `CUkernel` may be passed cast to a
    // `CUfunction`, cuda.h) and a valid out pointer.
    match unsafe { occupancy_blocks_per_sm(&mut n, f as *mut c_void, threads as c_int, smem as usize) } {
        CUDA_SUCCESS => Ok(n.max(0) as u32),
        e => Err(e),
    }
}

/// Clusters of shape `cluster` of handle `f` launched as `grid` x `block` with `smem` bytes that
/// the whole device (the current context) holds at once.
pub fn max_active_clusters(
    f: usize,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    cluster: [u32; 3],
) -> Result<u32, CUresult> {
    // One CUlaunchAttribute: a 4-byte id, 4 bytes of padding, a 64-byte value (8-byte aligned).
    let mut attr = [0u64; 9];
    attr[0] = u64::from(LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
    attr[1] = u64::from(cluster[0]) | (u64::from(cluster[1]) << 32);
    attr[2] = u64::from(cluster[2]);
    let config = CUlaunchConfig {
        grid_dim_x: grid[0],
        grid_dim_y: grid[1],
        grid_dim_z: grid[2],
        block_dim_x: block[0],
        block_dim_y: block[1],
        block_dim_z: block[2],
        shared_mem_bytes: smem,
        h_stream: std::ptr::null_mut(),
        attrs: attr.as_mut_ptr().cast(),
        num_attrs: 1,
    };
    let mut n: c_int = 0;
    // SAFETY: a handle the application launched with, a valid config whose one attribute lives
    // for the call, and a valid out pointer; the null stream means the current (primary) context.
    match unsafe { occupancy_max_active_clusters(&mut n, f as *mut c_void, &config) } {
        CUDA_SUCCESS => Ok(n.max(0) as u32),
        e => Err(e),
    }
}
