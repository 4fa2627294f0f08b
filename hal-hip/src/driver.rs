//! The thin `Result` layer over `libamdhip64` (the only module with HIP runtime FFI).
//!
//! The library is opened at run time with `libloading`, once per path: the path given to
//! `HipBackend::with_library`, else `VITAMIN_HIP_LIBRARY` (a path) if set, else `libamdhip64.so`,
//! `.so.7`, `.so.6`, `.so.5`. Every symbol in [`REQUIRED_SYMBOLS`]
//! is resolved before the first call, into one table (`Api`) of plain function pointers; a
//! missing library or symbol is `HalError::Unsupported` with the reason, never a panic. Symbols
//! only newer runtimes export ([`OPTIONAL_SYMBOLS`]) are `Option`s: the capability probe records
//! which exist, and callers choose a path once.
//!
//! Types and constants follow Debian's HIP 5.2.3 headers (`/usr/include/hip`); the test
//! `abi_matches_the_real_headers` compiles a C program against those headers and compares every
//! constant and the `hipDeviceProp_t` offsets used here.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use libloading::Library;
use vitamin_hal::HalError;

/// Backend name in errors.
pub(crate) const BACKEND: &str = "hip";

/// Environment variable naming the HIP runtime library to load (a path), instead of the default
/// names: the one environment variable of this backend (counted in docs/config.md, "Outside the
/// file"), because the interposer must forward to the same library per process and the tests
/// point it at the test double.
pub const LIBRARY_ENV: &str = "VITAMIN_HIP_LIBRARY";

/// Library names tried in order when [`LIBRARY_ENV`] is unset.
pub const DEFAULT_LIBRARIES: &[&str] = &["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];

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
pub type HipStreamCallback = unsafe extern "C" fn(HipStream, HipError, *mut c_void);
/// `hipHostFn_t`.
pub type HipHostFn = unsafe extern "C" fn(*mut c_void);

/// `dim3`, passed by value (`hipLaunchKernel`).
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

/// `hipExecutionCtx_t` (an execution context: a green context or a device's primary one).
pub type HipExecutionCtx = *mut c_void;
/// `hipDevResourceDesc_t` (a descriptor bundling device resources).
pub type HipDevResourceDesc = *mut c_void;

// HIP green contexts (ROCm 7.14+). Debian's 5.2 headers have none of these; the types follow
// ROCm's header: ROCm/rocm-systems, projects/hip/include/hip/hip_runtime_api.h at commit
// 0ff4546a8c145316e90118fcc08eb3a0cc057806 ("API-visible structures"), and the layout tests below
// check the sizes and offsets that header gives on x86-64.

/// `HIP_RESOURCE_ABI_BYTES`: the size of `hipDevResource`'s payload union.
pub const RESOURCE_ABI_BYTES: usize = 40;
/// `hipDevResourceTypeInvalid`.
pub const DEV_RESOURCE_TYPE_INVALID: c_int = 0;
/// `hipDevResourceTypeSm` (on AMD a "SM" is a compute unit).
pub const DEV_RESOURCE_TYPE_SM: c_int = 1;
/// `hipStreamDefault`.
pub const STREAM_DEFAULT: c_uint = 0;

/// `hipDevSmResource`: a set of compute units.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevSmResource {
    /// `smCount`: CUs in the resource.
    pub sm_count: c_uint,
    /// `minSmPartitionSize`: the smallest count it splits into.
    pub min_sm_partition_size: c_uint,
    /// `smCoscheduledAlignment`: the split granule (2 in WGP mode, else 1).
    pub sm_coscheduled_alignment: c_uint,
    /// `flags` (`hipDevSmResourceGroup_flags`).
    pub flags: c_uint,
}

/// `hipDevWorkqueueConfigResource` (not used here; part of the payload union).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevWorkqueueConfigResource {
    /// `device`.
    pub device: c_int,
    /// `wqConcurrencyLimit`.
    pub wq_concurrency_limit: c_uint,
    /// `sharingScope` (`hipDevWorkqueueConfigScope`, an enum).
    pub sharing_scope: c_int,
}

/// The anonymous union of `hipDevResource`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union DevResourcePayload {
    /// `sm`.
    pub sm: DevSmResource,
    /// `wqConfig`.
    pub wq_config: DevWorkqueueConfigResource,
    /// `_oversize` (also the size of `hipDevWorkqueueResource`).
    pub oversize: [u8; RESOURCE_ABI_BYTES],
}

impl std::fmt::Debug for DevResourcePayload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DevResourcePayload { .. }")
    }
}

/// `hipDevResource` (`struct hipDevResource_st`). The runtime keeps its own bookkeeping in
/// `_internal_padding` (clr: a resource id and the device), so a resource is copied whole, never
/// built field by field, and passed back as the runtime filled it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DevResource {
    /// `type` (`hipDevResourceType`, an enum).
    pub resource_type: c_int,
    /// `_internal_padding[92]`.
    pub internal_padding: [u8; 92],
    /// The union.
    pub payload: DevResourcePayload,
    /// `nextResource`.
    pub next_resource: *mut DevResource,
}

impl DevResource {
    /// An all-zero resource (`hipDevResourceTypeInvalid`), as the HIP documentation asks callers to
    /// start from.
    pub fn zeroed() -> DevResource {
        DevResource {
            resource_type: DEV_RESOURCE_TYPE_INVALID,
            internal_padding: [0; 92],
            payload: DevResourcePayload { oversize: [0; RESOURCE_ABI_BYTES] },
            next_resource: std::ptr::null_mut(),
        }
    }

    /// The CU payload when the resource is a CU resource.
    pub fn sm(&self) -> Option<DevSmResource> {
        // SAFETY: every bit pattern is a valid `DevSmResource` (four `c_uint`s), and the union is
        // always fully initialized (`zeroed` writes all 40 bytes; the runtime writes it whole).
        let sm = unsafe { self.payload.sm };
        (self.resource_type == DEV_RESOURCE_TYPE_SM).then_some(sm)
    }
}

impl std::fmt::Debug for DevResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevResource").field("type", &self.resource_type).field("sm", &self.sm()).finish()
    }
}

/// `hipDevSmResourceGroupParams` (`struct hipDevSmResourceGroupParams_st`): one group of
/// `hipDevSmResourceSplit`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevSmResourceGroupParams {
    /// `smCount`: CUs of the group (0: as many as fit).
    pub sm_count: c_uint,
    /// `coscheduledSmCount` (0: the input's alignment).
    pub coscheduled_sm_count: c_uint,
    /// `preferredCoscheduledSmCount` (0: the required one).
    pub preferred_coscheduled_sm_count: c_uint,
    /// `flags` (`hipDevSmResourceGroup_flags`).
    pub flags: c_uint,
    /// `reserved[12]`.
    pub reserved: [c_uint; 12],
}

/// `hipSuccess`.
pub const SUCCESS: HipError = 0;
/// `hipErrorInvalidValue`.
pub const ERROR_INVALID_VALUE: HipError = 1;
/// `hipErrorOutOfMemory`.
pub const ERROR_OUT_OF_MEMORY: HipError = 2;
/// `hipErrorNoDevice`.
pub const ERROR_NO_DEVICE: HipError = 100;
/// `hipErrorInvalidDevice`.
pub const ERROR_INVALID_DEVICE: HipError = 101;
/// `hipErrorNotReady`.
pub const ERROR_NOT_READY: HipError = 600;
/// `hipErrorLaunchFailure`.
pub const ERROR_LAUNCH_FAILURE: HipError = 719;

/// `hipDeviceAttributeCooperativeLaunch`.
pub const ATTR_COOPERATIVE_LAUNCH: c_int = 10;
/// `hipDeviceAttributeComputeCapabilityMajor`.
pub const ATTR_COMPUTE_CAPABILITY_MAJOR: c_int = 23;
/// `hipDeviceAttributeMaxThreadsPerBlock`.
pub const ATTR_MAX_THREADS_PER_BLOCK: c_int = 56;
/// `hipDeviceAttributeMultiprocessorCount`.
pub const ATTR_MULTIPROCESSOR_COUNT: c_int = 63;

/// `hipMemcpyDefault`.
pub const MEMCPY_DEFAULT: c_int = 4;
/// `hipEventDisableTiming`.
pub const EVENT_DISABLE_TIMING: c_uint = 2;
/// `hipHostMallocMapped`.
pub const HOST_MALLOC_MAPPED: c_uint = 2;
/// `hipHostMallocPortable`.
pub const HOST_MALLOC_PORTABLE: c_uint = 1;

/// `sizeof(hipDeviceProp_t)` in HIP 5.2 (the layout behind the unversioned
/// `hipGetDeviceProperties` symbol, which ROCm 6 keeps next to `hipGetDevicePropertiesR0600`).
pub const DEVICE_PROP_SIZE: usize = 792;
/// `offsetof(hipDeviceProp_t, gcnArchName)` (a `char[256]`) in that layout.
pub const DEVICE_PROP_GCN_ARCH_NAME: usize = 396;
/// `offsetof(hipDeviceProp_t, name)` (a `char[256]`).
pub const DEVICE_PROP_NAME: usize = 0;

macro_rules! hip_api {
    (
        required { $( $name:ident : fn($($arg:ty),*) $(-> $ret:ty)? ; )* }
        optional { $( $oname:ident : fn($($oarg:ty),*) $(-> $oret:ty)? ; )* }
        presence { $( $pname:ident ; )* }
    ) => {
        /// The resolved function table. Fields are named after the HIP functions.
        #[allow(non_snake_case)]
        pub(crate) struct Api {
            /// Which file was loaded.
            pub(crate) path: String,
            $( pub(crate) $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
            $( pub(crate) $oname: Option<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>, )*
            /// Presence-only symbols that were found.
            pub(crate) present: Vec<&'static str>,
            _lib: Library,
        }

        /// Every symbol the loader requires.
        pub const REQUIRED_SYMBOLS: &[&str] = &[$(stringify!($name)),*];
        /// Symbols used when present (newer runtimes).
        pub const OPTIONAL_SYMBOLS: &[&str] = &[$(stringify!($oname)),*];
        /// Symbols only probed for, never called.
        pub const PRESENCE_SYMBOLS: &[&str] = &[$(stringify!($pname)),*];

        impl Api {
            #[allow(non_snake_case)]
            fn resolve(lib: Library, path: String) -> Result<Api, Vec<&'static str>> {
                let mut missing = Vec::new();
                $(
                    // SAFETY: the type is the function's prototype in the HIP headers; the
                    // pointer is copied out and used only while `_lib` (kept in the table) lives.
                    let $name = match unsafe { lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(concat!(stringify!($name), "\0").as_bytes()) } {
                        Ok(s) => Some(*s),
                        Err(_) => { missing.push(stringify!($name)); None }
                    };
                )*
                $(
                    // SAFETY: as above.
                    let $oname = unsafe { lib.get::<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>(concat!(stringify!($oname), "\0").as_bytes()) }.ok().map(|s| *s);
                )*
                let mut present = Vec::new();
                $(
                    // SAFETY: a look-up only; the symbol is never called.
                    if unsafe { lib.get::<*const c_void>(concat!(stringify!($pname), "\0").as_bytes()) }.is_ok() {
                        present.push(stringify!($pname));
                    }
                )*
                if !missing.is_empty() {
                    return Err(missing);
                }
                Ok(Api {
                    path,
                    $( $name: $name.expect("checked above: no symbol is missing"), )*
                    $( $oname, )*
                    present,
                    _lib: lib,
                })
            }
        }
    };
}

hip_api! {
    required {
        hipGetErrorName: fn(HipError) -> *const c_char;
        hipGetErrorString: fn(HipError) -> *const c_char;
        hipRuntimeGetVersion: fn(*mut c_int) -> HipError;
        hipGetDeviceCount: fn(*mut c_int) -> HipError;
        hipSetDevice: fn(c_int) -> HipError;
        hipDeviceGetAttribute: fn(*mut c_int, c_int, c_int) -> HipError;
        hipGetDeviceProperties: fn(*mut c_void, c_int) -> HipError;
        hipDeviceGetName: fn(*mut c_char, c_int, c_int) -> HipError;
        hipDeviceTotalMem: fn(*mut usize, c_int) -> HipError;
        hipMemGetInfo: fn(*mut usize, *mut usize) -> HipError;
        hipMalloc: fn(*mut *mut c_void, usize) -> HipError;
        hipFree: fn(*mut c_void) -> HipError;
        hipMemcpy: fn(*mut c_void, *const c_void, usize, c_int) -> HipError;
        hipMemcpyAsync: fn(*mut c_void, *const c_void, usize, c_int, HipStream) -> HipError;
        hipMemsetD8Async: fn(*mut c_void, u8, usize, HipStream) -> HipError;
        hipMemsetD16Async: fn(*mut c_void, u16, usize, HipStream) -> HipError;
        hipMemsetD32Async: fn(*mut c_void, c_int, usize, HipStream) -> HipError;
        hipExtStreamCreateWithCUMask: fn(*mut HipStream, u32, *const u32) -> HipError;
        hipExtStreamGetCUMask: fn(HipStream, u32, *mut u32) -> HipError;
        hipStreamDestroy: fn(HipStream) -> HipError;
        hipStreamSynchronize: fn(HipStream) -> HipError;
        hipStreamQuery: fn(HipStream) -> HipError;
        hipStreamAddCallback: fn(HipStream, HipStreamCallback, *mut c_void, c_uint) -> HipError;
        hipEventCreateWithFlags: fn(*mut HipEvent, c_uint) -> HipError;
        hipEventRecord: fn(HipEvent, HipStream) -> HipError;
        hipEventQuery: fn(HipEvent) -> HipError;
        hipEventDestroy: fn(HipEvent) -> HipError;
        hipModuleLoadData: fn(*mut HipModule, *const c_void) -> HipError;
        hipModuleUnload: fn(HipModule) -> HipError;
        hipModuleGetFunction: fn(*mut HipFunction, HipModule, *const c_char) -> HipError;
        hipModuleLaunchKernel: fn(HipFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, HipStream, *mut *mut c_void, *mut *mut c_void) -> HipError;
        hipModuleOccupancyMaxActiveBlocksPerMultiprocessor: fn(*mut c_int, HipFunction, c_int, usize) -> HipError;
        hipGraphLaunch: fn(*mut c_void, HipStream) -> HipError;
    }
    optional {
        hipLaunchHostFunc: fn(HipStream, HipHostFn, *mut c_void) -> HipError;
        hipModuleLaunchCooperativeKernel: fn(HipFunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, HipStream, *mut *mut c_void) -> HipError;
        hipStreamWriteValue64: fn(HipStream, *mut c_void, u64, c_uint) -> HipError;
        hipHostMalloc: fn(*mut *mut c_void, usize, c_uint) -> HipError;
        hipHostFree: fn(*mut c_void) -> HipError;
        hipHostGetDevicePointer: fn(*mut *mut c_void, *mut c_void, c_uint) -> HipError;
        hipLaunchKernel: fn(*const c_void, Dim3, Dim3, *mut *mut c_void, usize, HipStream) -> HipError;
        hipDeviceGetDevResource: fn(c_int, *mut DevResource, c_int) -> HipError;
        hipDevSmResourceSplit: fn(*mut DevResource, c_uint, *const DevResource, *mut DevResource, c_uint, *mut DevSmResourceGroupParams) -> HipError;
        hipDevResourceGenerateDesc: fn(*mut HipDevResourceDesc, *mut DevResource, c_uint) -> HipError;
        hipGreenCtxCreate: fn(*mut HipExecutionCtx, HipDevResourceDesc, c_int, c_uint) -> HipError;
        hipExecutionCtxStreamCreate: fn(*mut HipStream, HipExecutionCtx, c_uint, c_int) -> HipError;
        hipExecutionCtxDestroy: fn(HipExecutionCtx) -> HipError;
    }
    presence {
        hipDevSmResourceSplitByCount;
    }
}

impl Api {
    /// The runtime's name for an error code (`hipErrorOutOfMemory`).
    pub(crate) fn error_name(&self, e: HipError) -> String {
        // SAFETY: the function returns a static NUL-terminated string (or null) for any code.
        let p = unsafe { (self.hipGetErrorName)(e) };
        if p.is_null() {
            return format!("hipError_t {e}");
        }
        // SAFETY: non-null, static and NUL-terminated (the function's contract).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// The runtime's description of an error code.
    pub(crate) fn error_string(&self, e: HipError) -> String {
        // SAFETY: as in `error_name`.
        let p = unsafe { (self.hipGetErrorString)(e) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: as in `error_name`.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    /// Maps a status to `Ok` or the matching [`HalError`] (out of memory is its own variant).
    pub(crate) fn check(&self, call: &'static str, e: HipError) -> Result<(), HalError> {
        match e {
            SUCCESS => Ok(()),
            ERROR_OUT_OF_MEMORY => {
                Err(HalError::OutOfMemory(format!("{call}: {} ({e}): {}", self.error_name(e), self.error_string(e))))
            }
            _ => Err(HalError::Driver { call, code: e, name: self.error_name(e) }),
        }
    }

    /// An asynchronous failure as the runtime reported it, with its native code.
    pub(crate) fn async_error(&self, what: &str, e: HipError) -> HalError {
        HalError::AsyncDriver {
            code: e,
            message: format!("{what}: {} ({e}): {}", self.error_name(e), self.error_string(e)),
        }
    }

    /// Whether the symbols of HIP green contexts were found ([`GREEN_CONTEXT_SYMBOLS`]).
    pub(crate) fn has_green_contexts(&self) -> bool {
        self.green().is_some()
    }

    /// The green-context entry points, when the runtime has all of them.
    pub(crate) fn green(&self) -> Option<GreenApi> {
        Some(GreenApi {
            get_resource: self.hipDeviceGetDevResource?,
            split: self.hipDevSmResourceSplit?,
            generate_desc: self.hipDevResourceGenerateDesc?,
            create: self.hipGreenCtxCreate?,
            stream_create: self.hipExecutionCtxStreamCreate?,
            destroy: self.hipExecutionCtxDestroy?,
        })
        .filter(|_| self.present.contains(&"hipDevSmResourceSplitByCount"))
    }
}

/// Symbols of HIP green contexts (ROCm 7.14+); the probe reports them present when all are.
/// `hipDevSmResourceSplitByCount` is only probed for (the realization splits with
/// `hipDevSmResourceSplit`, which takes a count per group), the others are called.
pub const GREEN_CONTEXT_SYMBOLS: &[&str] = &[
    "hipDeviceGetDevResource",
    "hipDevSmResourceSplit",
    "hipDevSmResourceSplitByCount",
    "hipDevResourceGenerateDesc",
    "hipGreenCtxCreate",
    "hipExecutionCtxStreamCreate",
    "hipExecutionCtxDestroy",
];

/// The green-context functions, resolved (see [`Api::green`]).
#[derive(Clone, Copy)]
pub(crate) struct GreenApi {
    pub(crate) get_resource: unsafe extern "C" fn(c_int, *mut DevResource, c_int) -> HipError,
    pub(crate) split: unsafe extern "C" fn(
        *mut DevResource,
        c_uint,
        *const DevResource,
        *mut DevResource,
        c_uint,
        *mut DevSmResourceGroupParams,
    ) -> HipError,
    pub(crate) generate_desc: unsafe extern "C" fn(*mut HipDevResourceDesc, *mut DevResource, c_uint) -> HipError,
    pub(crate) create: unsafe extern "C" fn(*mut HipExecutionCtx, HipDevResourceDesc, c_int, c_uint) -> HipError,
    pub(crate) stream_create: unsafe extern "C" fn(*mut HipStream, HipExecutionCtx, c_uint, c_int) -> HipError,
    pub(crate) destroy: unsafe extern "C" fn(HipExecutionCtx) -> HipError,
}

pub(crate) fn unsupported(reason: impl Into<String>) -> HalError {
    HalError::Unsupported { backend: BACKEND, reason: reason.into() }
}

/// The library names [`open`] tries: `explicit`, else [`LIBRARY_ENV`], else [`DEFAULT_LIBRARIES`].
pub(crate) fn candidates(explicit: Option<&str>) -> Vec<String> {
    if let Some(p) = explicit {
        return vec![p.to_owned()];
    }
    match library_from_env() {
        Some(p) => vec![p],
        None => DEFAULT_LIBRARIES.iter().map(|s| s.to_string()).collect(),
    }
}

/// The path [`LIBRARY_ENV`] names, if set and not blank.
pub(crate) fn library_from_env() -> Option<String> {
    std::env::var(LIBRARY_ENV).ok().map(|p| p.trim().to_owned()).filter(|p| !p.is_empty())
}

/// Opens the runtime library and resolves the table (not cached: [`load_from`] caches).
fn open(explicit: Option<&str>) -> Result<Api, HalError> {
    let mut errors = Vec::new();
    for path in candidates(explicit) {
        // SAFETY: loading runs the library's initializers; libamdhip64's register its runtime and
        // start no device work (checked with Debian's 5.2.3 on a machine without a GPU).
        match unsafe { Library::new(&path) } {
            Ok(lib) => {
                return Api::resolve(lib, path.clone()).map_err(|missing| {
                    unsupported(format!(
                        "{path} lacks {}: vitamin needs a HIP runtime of ROCm 5.2 or newer",
                        missing.join(", ")
                    ))
                });
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(unsupported(format!(
        "the HIP runtime library (libamdhip64) was not found ({}): install ROCm's HIP runtime (Debian: apt-get install \
         libamdhip64-5) or set {LIBRARY_ENV} to its path",
        errors.join("; ")
    )))
}

type Loaded = Result<Arc<Api>, HalError>;

/// The loaded table for `explicit` (a path) or the default search, once per process and key
/// (every later call returns the same outcome).
pub(crate) fn load_from(explicit: Option<&str>) -> Loaded {
    static LOADED: OnceLock<Mutex<HashMap<Option<String>, Loaded>>> = OnceLock::new();
    let mut map = LOADED.get_or_init(|| Mutex::new(HashMap::new())).lock();
    map.entry(explicit.map(str::to_owned)).or_insert_with(|| open(explicit).map(Arc::new)).clone()
}

/// Reads a NUL-terminated string out of a fixed-size C buffer.
pub(crate) fn c_string(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `api.hip*` call in this crate goes through a symbol in the table (so `load`
    /// rules out a missing-symbol failure), and every required symbol is used somewhere.
    #[test]
    fn every_call_is_in_the_table() {
        let sources = [include_str!("device.rs"), include_str!("partition.rs"), include_str!("probe.rs")];
        let mut called = std::collections::BTreeSet::new();
        for src in sources {
            for (i, _) in src.match_indices(".hip") {
                let name: String =
                    src[i + 1..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if name.len() > 3 && name[3..].starts_with(|c: char| c.is_ascii_uppercase()) {
                    called.insert(name);
                }
            }
        }
        assert!(called.len() > 20, "parsed too few calls: {called:?}");
        for name in &called {
            assert!(
                REQUIRED_SYMBOLS.contains(&name.as_str()) || OPTIONAL_SYMBOLS.contains(&name.as_str()),
                "{name} is called but not in the table"
            );
        }
        let this = include_str!("driver.rs");
        for name in REQUIRED_SYMBOLS {
            let used = sources.iter().chain([&this]).any(|s| s.contains(&format!("(api.{name})")))
                || sources.iter().any(|s| s.contains(&format!(".{name})")));
            assert!(used || this.contains(&format!("(self.{name})")), "{name} is required but never called");
        }
    }

    /// The green-context structures have the layout of ROCm's header (ROCm/rocm-systems,
    /// projects/hip/include/hip/hip_runtime_api.h at 0ff4546a): `hipDevResource` is an enum (4),
    /// `unsigned char[92]`, a 4-aligned union of 40 bytes (`HIP_RESOURCE_ABI_BYTES`) at 96, and an
    /// 8-aligned pointer at 136: 144 bytes. No header of that version exists on this machine to
    /// compile against (Debian ships HIP 5.2), so the numbers are derived from its declarations by
    /// the C layout rules; the test double's C copy asserts the same with `_Static_assert`.
    #[test]
    fn green_context_structures_match_rocm_s_header() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!((size_of::<DevSmResource>(), align_of::<DevSmResource>()), (16, 4));
        assert_eq!(offset_of!(DevSmResource, sm_count), 0);
        assert_eq!(offset_of!(DevSmResource, min_sm_partition_size), 4);
        assert_eq!(offset_of!(DevSmResource, sm_coscheduled_alignment), 8);
        assert_eq!(offset_of!(DevSmResource, flags), 12);
        assert_eq!((size_of::<DevWorkqueueConfigResource>(), align_of::<DevWorkqueueConfigResource>()), (12, 4));
        assert_eq!((size_of::<DevResourcePayload>(), align_of::<DevResourcePayload>()), (RESOURCE_ABI_BYTES, 4));
        assert_eq!((size_of::<DevResource>(), align_of::<DevResource>()), (144, 8));
        assert_eq!(offset_of!(DevResource, resource_type), 0);
        assert_eq!(offset_of!(DevResource, internal_padding), 4);
        assert_eq!(offset_of!(DevResource, payload), 96);
        assert_eq!(offset_of!(DevResource, next_resource), 136);
        assert_eq!((size_of::<DevSmResourceGroupParams>(), align_of::<DevSmResourceGroupParams>()), (64, 4));
        assert_eq!(offset_of!(DevSmResourceGroupParams, coscheduled_sm_count), 4);
        assert_eq!(offset_of!(DevSmResourceGroupParams, preferred_coscheduled_sm_count), 8);
        assert_eq!(offset_of!(DevSmResourceGroupParams, flags), 12);
        assert_eq!(offset_of!(DevSmResourceGroupParams, reserved), 16);
        let r = DevResource::zeroed();
        assert_eq!(r.sm(), None, "a zeroed resource is hipDevResourceTypeInvalid");
    }

    #[test]
    fn c_strings_stop_at_nul() {
        assert_eq!(c_string(b"gfx942:sramecc+\0junk"), "gfx942:sramecc+");
        assert_eq!(c_string(b"no-nul"), "no-nul");
    }
}
