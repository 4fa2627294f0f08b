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

/// `hipErrorNotSupported`.
pub const HIP_ERROR_NOT_SUPPORTED: HipError = 801;

/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`: in an `extra` array, the next entry is the packed
/// argument buffer.
pub const HIP_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
/// `HIP_LAUNCH_PARAM_BUFFER_SIZE`: the next entry points at the buffer's size (`size_t`).
pub const HIP_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;
/// `HIP_LAUNCH_PARAM_END`: the end of an `extra` array.
pub const HIP_LAUNCH_PARAM_END: usize = 0x03;

/// `hipExtAnyOrderLaunch` (`hipExtModuleLaunchKernel`'s flags, hip_ext.h).
pub const HIP_EXT_ANY_ORDER_LAUNCH: u32 = 0x1;

/// The C++ name HIP 5.2's `hip_ext.h` gives `hipExtModuleLaunchKernel` (declared without
/// `extern "C"`; Debian's libamdhip64.so.5 exports only this name, in `hip_4.2`). Later ROCm
/// headers declare it `extern "C"` and the library exports both names, the C one in `hip_4.2` too
/// (ROCm/clr `hipamd/src/hip_hcc.map.in`).
pub const EXT_MODULE_LAUNCH_KERNEL_CXX: &str =
    "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j";

// ---- the extensible launches of ROCm 6 (`hipLaunchKernelExC`, `hipDrvLaunchKernelEx`)
//
// Absent from HIP 5.2's headers, so declared here from ROCm 6's `hip_runtime_api.h` (and its
// `driver_types.h`): `hipLaunchAttribute` is 72 bytes (a 4-byte `hipLaunchAttributeID`, 4 bytes of
// padding, a 64-byte value union), `hipLaunchConfig_t` and `HIP_LAUNCH_CONFIG` are 56 bytes with the
// stream at offset 32, the attribute array at 40 and its length at 48 (`tests/abi.rs` checks the
// sizes and offsets below).

/// `hipLaunchAttributeAccessPolicyWindow`.
pub const HIP_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: u32 = 1;
/// `hipLaunchAttributeCooperative`: `val.cooperative` (an `int`) non-zero makes the launch
/// cooperative.
pub const HIP_LAUNCH_ATTRIBUTE_COOPERATIVE: u32 = 2;
/// `hipLaunchAttributeSynchronizationPolicy`.
pub const HIP_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY: u32 = 3;
/// `hipLaunchAttributePriority`.
pub const HIP_LAUNCH_ATTRIBUTE_PRIORITY: u32 = 8;

/// `hipLaunchAttribute` (`hipLaunchAttribute_st`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LaunchAttribute {
    /// `hipLaunchAttributeID`.
    pub id: u32,
    /// Padding to 8 bytes.
    pub pad: [u8; 4],
    /// `hipLaunchAttributeValue`: a 64-byte union; the `int` members (`cooperative`,
    /// `priority`) are its first 4 bytes.
    pub val: [u8; 64],
}

impl LaunchAttribute {
    /// The value read as the union's `int` member.
    pub fn int_value(&self) -> i32 {
        i32::from_ne_bytes([self.val[0], self.val[1], self.val[2], self.val[3]])
    }
}

impl std::fmt::Debug for LaunchAttribute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LaunchAttribute").field("id", &self.id).field("int_value", &self.int_value()).finish()
    }
}

/// `hipLaunchConfig_t` (`hipLaunchKernelExC`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct LaunchConfig {
    /// Grid, in blocks.
    pub grid: Dim3,
    /// Block, in threads.
    pub block: Dim3,
    /// Dynamic shared memory, bytes.
    pub dynamic_smem_bytes: usize,
    /// The stream.
    pub stream: HipStream,
    /// `numAttrs` attributes.
    pub attrs: *mut LaunchAttribute,
    /// How many.
    pub num_attrs: u32,
}

/// `HIP_LAUNCH_CONFIG` (`hipDrvLaunchKernelEx`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct DrvLaunchConfig {
    /// Grid, in blocks.
    pub grid_x: u32,
    /// Grid y.
    pub grid_y: u32,
    /// Grid z.
    pub grid_z: u32,
    /// Block, in threads.
    pub block_x: u32,
    /// Block y.
    pub block_y: u32,
    /// Block z.
    pub block_z: u32,
    /// Dynamic shared memory, bytes.
    pub shared_mem_bytes: u32,
    /// The stream.
    pub stream: HipStream,
    /// `numAttrs` attributes.
    pub attrs: *mut LaunchAttribute,
    /// How many.
    pub num_attrs: u32,
}
