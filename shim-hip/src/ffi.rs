//! HIP's C types and constants as the hooks see them (`hip_runtime_api.h`, HIP 5.2.3; `tests/abi.rs`
//! checks the values against Debian's headers). Device attribute ids are hal-hip's
//! ([`vitamin_hal_hip::driver`]).

use std::ffi::{c_int, c_void};

/// `hipError_t`.
pub type HipError = c_int;
/// `hipStream_t`.
pub type HipStream = *mut c_void;
/// `hipEvent_t`.
pub type HipEvent = *mut c_void;
/// `hipModule_t`.
pub type HipModule = *mut c_void;
/// `hipFunction_t`.
pub type HipFunction = *mut c_void;
/// `hipStreamCallback_t`.
pub type HipStreamCallback = Option<unsafe extern "C" fn(HipStream, HipError, *mut c_void)>;
/// `hipHostFn_t`.
pub type HipHostFn = Option<unsafe extern "C" fn(*mut c_void)>;

/// `dim3`, passed by value.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dim3 {
    /// x.
    pub x: u32,
    /// y.
    pub y: u32,
    /// z.
    pub z: u32,
}

impl Dim3 {
    /// As the runtime's dimension.
    pub fn hal(self) -> vitamin_hal::Dim3 {
        vitamin_hal::Dim3::new(self.x, self.y, self.z)
    }
    /// As an array.
    pub fn array(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

/// `hipPitchedPtr`, passed by value (`hipMemset3DAsync`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PitchedPtr {
    /// Base address.
    pub ptr: *mut c_void,
    /// Row pitch, bytes.
    pub pitch: usize,
    /// Row width, bytes.
    pub xsize: usize,
    /// Rows.
    pub ysize: usize,
}

/// `hipExtent`, passed by value (`hipMemset3DAsync`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Width.
    pub width: usize,
    /// Height.
    pub height: usize,
    /// Depth.
    pub depth: usize,
}

/// `hipSuccess`.
pub const HIP_SUCCESS: HipError = 0;
/// `hipErrorInvalidValue`.
pub const HIP_ERROR_INVALID_VALUE: HipError = 1;
/// `hipErrorSharedObjectSymbolNotFound`: the real function is missing.
pub const HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND: HipError = 302;
/// `hipErrorInvalidHandle` (= `hipErrorInvalidResourceHandle`).
pub const HIP_ERROR_INVALID_HANDLE: HipError = 400;
/// `hipErrorNotReady`.
pub const HIP_ERROR_NOT_READY: HipError = 600;
/// `hipErrorLaunchFailure`.
pub const HIP_ERROR_LAUNCH_FAILURE: HipError = 719;
/// `hipErrorLaunchTimeOut`.
pub const HIP_ERROR_LAUNCH_TIMEOUT: HipError = 702;
/// `hipErrorUnknown`: a panic inside the interposer.
pub const HIP_ERROR_UNKNOWN: HipError = 999;

/// `hipStreamPerThread`.
pub const HIP_STREAM_PER_THREAD: usize = 2;
/// `hipStreamNonBlocking`.
pub const HIP_STREAM_NON_BLOCKING: u32 = 0x1;
/// `hipEventDisableTiming`.
pub const HIP_EVENT_DISABLE_TIMING: u32 = 0x2;
/// `hipEventInterprocess`.
pub const HIP_EVENT_INTERPROCESS: u32 = 0x4;
/// `hipMemoryTypeHost`.
pub const HIP_MEMORY_TYPE_HOST: c_int = 0;
/// `hipPointerAttribute_t` (HIP 5.2 layout).
#[repr(C)]
#[derive(Debug)]
pub struct HipPointerAttribute {
    /// `enum hipMemoryType`.
    pub memory_type: c_int,
    /// Device ordinal.
    pub device: c_int,
    /// Device address.
    pub device_pointer: *mut c_void,
    /// Host address.
    pub host_pointer: *mut c_void,
    /// Managed memory.
    pub is_managed: c_int,
    /// Allocation flags.
    pub allocation_flags: u32,
}
