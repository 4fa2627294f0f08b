//! The runtime calls bind mode makes itself, straight to the real runtime's functions (never
//! through the hooks): the current device, native waits, pointer attributes, device attributes,
//! stream flags, function lookups and parameter layouts, and the launch-first launch.

// `hipModuleLaunchKernel` has 11 parameters.
#![allow(clippy::too_many_arguments)]

use std::ffi::{c_int, c_uint, c_void};

use crate::ffi::*;
use crate::real::Slot;

/// One real function, by name and C signature: `name(args) -> HipError`, or `None` if the runtime
/// lacks it.
macro_rules! real_fns {
    ($($(#[$m:meta])* fn $name:ident = $sym:literal ($($arg:ident: $ty:ty),*);)*) => {$(
        $(#[$m])*
        ///
        /// # Safety
        /// The HIP function's contract.
        pub unsafe fn $name($($arg: $ty),*) -> Option<HipError> {
            static SLOT: Slot = Slot::new();
            let p = SLOT.get($sym)?;
            type Real = unsafe extern "C" fn($($ty),*) -> HipError;
            // SAFETY: the real runtime's function of this name, whose C signature is `Real`.
            let f = unsafe { std::mem::transmute::<usize, Real>(p) };
            // SAFETY: forwarded contract.
            Some(unsafe { f($($arg),*) })
        }
    )*};
}

real_fns! {
    /// `hipGetDevice`.
    fn get_device = "hipGetDevice" (d: *mut c_int);
    /// `hipDeviceGetAttribute`.
    fn device_get_attribute = "hipDeviceGetAttribute" (v: *mut c_int, attr: c_int, dev: c_int);
    /// `hipStreamSynchronize`.
    fn stream_synchronize = "hipStreamSynchronize" (s: HipStream);
    /// `hipStreamGetFlags`.
    fn stream_get_flags = "hipStreamGetFlags" (s: HipStream, flags: *mut c_uint);
    /// `hipStreamGetPriority`.
    fn stream_get_priority = "hipStreamGetPriority" (s: HipStream, priority: *mut c_int);
    /// `hipEventSynchronize`.
    fn event_synchronize = "hipEventSynchronize" (e: HipEvent);
    /// `hipPointerGetAttributes`.
    fn pointer_get_attributes = "hipPointerGetAttributes" (a: *mut HipPointerAttribute, p: *const c_void);
    /// `hipGetFuncBySymbol` (ROCm 6+).
    fn get_func_by_symbol = "hipGetFuncBySymbol" (f: *mut HipFunction, symbol: *const c_void);
    /// `hipKernelGetParamInfo` (ROCm 7+).
    fn kernel_get_param_info = "hipKernelGetParamInfo" (f: HipFunction, i: usize, offset: *mut usize, size: *mut usize);
    /// `hipLaunchKernel`.
    fn launch_kernel = "hipLaunchKernel" (
        f: *const c_void, grid: Dim3, block: Dim3, params: *mut *mut c_void, smem: usize, s: HipStream
    );
    /// `hipExtLaunchKernel`.
    fn ext_launch_kernel = "hipExtLaunchKernel" (
        f: *const c_void, grid: Dim3, block: Dim3, params: *mut *mut c_void, smem: usize, s: HipStream,
        start: HipEvent, stop: HipEvent, flags: c_int
    );
    /// `hipModuleOccupancyMaxActiveBlocksPerMultiprocessor`.
    fn module_occupancy = "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor" (
        n: *mut c_int, f: HipFunction, threads: c_int, smem: usize
    );
    /// `hipOccupancyMaxActiveBlocksPerMultiprocessor` (a host stub).
    fn stub_occupancy = "hipOccupancyMaxActiveBlocksPerMultiprocessor" (
        n: *mut c_int, f: *const c_void, threads: c_int, smem: usize
    );
    /// `hipModuleLaunchKernel`.
    fn module_launch_kernel = "hipModuleLaunchKernel" (
        f: HipFunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, smem: c_uint,
        s: HipStream, params: *mut *mut c_void, extra: *mut *mut c_void
    );
}

/// `hipExtModuleLaunchKernel` (the C name, else HIP 5.2's C++ name: [`EXT_MODULE_LAUNCH_KERNEL_CXX`]).
///
/// # Safety
/// The HIP function's contract (`hip_ext.h`).
pub unsafe fn ext_module_launch_kernel(
    f: HipFunction,
    global: [u32; 3],
    local: [u32; 3],
    smem: usize,
    s: HipStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    start: HipEvent,
    stop: HipEvent,
    flags: u32,
) -> Option<HipError> {
    static SLOT: Slot = Slot::new();
    let p = SLOT.get_any(&["hipExtModuleLaunchKernel", EXT_MODULE_LAUNCH_KERNEL_CXX])?;
    type Real = unsafe extern "C" fn(
        HipFunction,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        usize,
        HipStream,
        *mut *mut c_void,
        *mut *mut c_void,
        HipEvent,
        HipEvent,
        u32,
    ) -> HipError;
    // SAFETY: the real runtime's `hipExtModuleLaunchKernel`, whose C signature is `Real`.
    let f_real = unsafe { std::mem::transmute::<usize, Real>(p) };
    let ([gx, gy, gz], [lx, ly, lz]) = (global, local);
    // SAFETY: forwarded contract.
    Some(unsafe { f_real(f, gx, gy, gz, lx, ly, lz, smem, s, params, extra, start, stop, flags) })
}

/// The calling thread's current device.
pub fn current_device() -> Result<c_int, HipError> {
    let mut d = 0;
    // SAFETY: a valid out pointer.
    match unsafe { get_device(&mut d) } {
        Some(HIP_SUCCESS) => Ok(d),
        Some(e) => Err(e),
        None => Err(HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND),
    }
}

/// Device attribute `attr` of `dev`.
pub fn attribute(dev: c_int, attr: c_int) -> Result<c_int, HipError> {
    let mut v = 0;
    // SAFETY: a valid out pointer; the runtime checks the device and attribute.
    match unsafe { device_get_attribute(&mut v, attr, dev) } {
        Some(HIP_SUCCESS) => Ok(v),
        Some(e) => Err(e),
        None => Err(HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND),
    }
}

/// Waits natively for everything queued on stream `s` (a handle value).
pub fn native_stream_synchronize(s: usize) -> HipError {
    // SAFETY: a stream handle as the application (or the pool) passed it.
    unsafe { stream_synchronize(s as HipStream) }.unwrap_or(HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND)
}

/// Waits natively for event `e` (a handle value).
pub fn native_event_synchronize(e: usize) -> HipError {
    // SAFETY: the application's event handle.
    unsafe { event_synchronize(e as HipEvent) }.unwrap_or(HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND)
}

/// Flags and priority of a stream the runtime knows (a handle value); a blocking stream of
/// normal priority when the runtime has no `hipStreamGetFlags`.
pub fn stream_flags_priority(s: usize) -> Result<(u32, i32), HipError> {
    let s = s as HipStream;
    let (mut f, mut p) = (0u32, 0 as c_int);
    // SAFETY: an application stream handle and valid out pointers.
    match unsafe { stream_get_flags(s, &mut f) } {
        Some(HIP_SUCCESS) => {}
        Some(e) => return Err(e),
        // A runtime without the query: a blocking stream of normal priority (the default).
        None => return Ok((0, 0)),
    }
    // SAFETY: as above.
    match unsafe { stream_get_priority(s, &mut p) } {
        Some(HIP_SUCCESS) | None => Ok((f, p)),
        Some(e) => Err(e),
    }
}

/// The memory type of `p` (`hipMemoryType*`), `None` if the runtime does not know the address.
pub fn memory_type(p: u64) -> Option<c_int> {
    if p == 0 {
        return None;
    }
    let mut a = HipPointerAttribute {
        memory_type: -1,
        device: 0,
        device_pointer: std::ptr::null_mut(),
        host_pointer: std::ptr::null_mut(),
        is_managed: 0,
        allocation_flags: 0,
    };
    // SAFETY: a valid out struct of the 5.2 layout; any address may be asked about.
    match unsafe { pointer_get_attributes(&mut a, p as *const c_void) } {
        Some(HIP_SUCCESS) => Some(a.memory_type),
        _ => None,
    }
}

/// The function of host stub `stub` (`hipGetFuncBySymbol`, ROCm 6+), if the runtime answers.
pub fn function_of_stub(stub: usize) -> Option<usize> {
    let mut f: HipFunction = std::ptr::null_mut();
    // SAFETY: a host address the application launched with and a valid out pointer.
    match unsafe { get_func_by_symbol(&mut f, stub as *const c_void) } {
        Some(HIP_SUCCESS) if !f.is_null() => Some(f as usize),
        _ => None,
    }
}

/// Work-groups of `f` with `threads` threads and `smem` dynamic shared bytes one CU holds at once:
/// `hipModuleOccupancyMaxActiveBlocksPerMultiprocessor` for a runtime function,
/// `hipOccupancyMaxActiveBlocksPerMultiprocessor` for a host stub; `None` if the runtime lacks the
/// call or cannot say.
pub fn blocks_per_cu(f: usize, stub: bool, threads: u32, smem: u32) -> Option<u32> {
    let mut n: c_int = 0;
    let threads = c_int::try_from(threads).ok()?;
    // SAFETY: a handle (or host stub) the application launched with and a valid out pointer.
    let r = unsafe {
        if stub {
            stub_occupancy(&mut n, f as *const c_void, threads, smem as usize)
        } else {
            module_occupancy(&mut n, f as HipFunction, threads, smem as usize)
        }
    };
    (r == Some(HIP_SUCCESS)).then(|| n.max(0) as u32)
}

/// What `hipKernelGetParamInfo` says about one parameter index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamInfo {
    /// The parameter's offset and size in bytes.
    Param(usize, usize),
    /// Past the last parameter.
    End,
    /// The runtime cannot say (no such function, or no `hipKernelGetParamInfo`).
    Unknown,
}

/// The `i`-th parameter of function `f` (`hipKernelGetParamInfo`).
pub fn param_info(f: usize, i: usize) -> ParamInfo {
    let (mut offset, mut size) = (0usize, 0usize);
    // SAFETY: a function handle the runtime gave the application, and valid out pointers.
    match unsafe { kernel_get_param_info(f as HipFunction, i, &mut offset, &mut size) } {
        Some(HIP_SUCCESS) => ParamInfo::Param(offset, size),
        Some(HIP_ERROR_INVALID_VALUE) => ParamInfo::End,
        _ => ParamInfo::Unknown,
    }
}
