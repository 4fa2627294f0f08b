//! Run-time compilation with hipRTC, loaded at run time like the runtime itself.
//!
//! Where hipRTC lives depends on the ROCm release: ROCm 5.3 and later ship `libhiprtc.so`; HIP 5.2
//! (Debian 12) exports the `hiprtc*` functions from `libamdhip64` itself. hipRTC is therefore looked
//! for, in order: the configuration key `rtc_library` (a path, [`crate::settings`]); the HIP runtime
//! the backend was given explicitly or by `VITAMIN_HIP_LIBRARY` (the test double carries its own
//! hipRTC); `libhiprtc.so`, `.so.7`, `.so.6`, `.so.5`; and the
//! default HIP runtime library. Every symbol is resolved before the first call: a missing library
//! or symbol is `HalError::Unsupported`.
//!
//! [`compile`] turns one source string into a code object for one architecture
//! (`--gpu-architecture=<gcnArchName>`), which [`crate::HipBackend::load_module`] loads. A
//! compilation error is `HalError::Driver` carrying hipRTC's log. [`driver_version`] reads
//! `hipDriverGetVersion`, for records that state compiler and driver together.
//!
//! Observed here (Debian 12, libamdhip64 5.2.3 with libamd-comgr2 5.2.3, no GPU): Debian's
//! `hiprtcCompileProgram` aborts the process inside `amd_comgr_destroy_action_info` (`free():
//! invalid pointer`), so nothing in CI calls the real compiler; the tests use the test double's.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::{Arc, OnceLock};

use libloading::Library;
use parking_lot::Mutex;
use vitamin_hal::HalError;

use crate::driver::{self, unsupported};
use crate::settings;

type Program = *mut std::ffi::c_void;
type RtcResult = c_int;

/// `HIPRTC_SUCCESS`.
const RTC_SUCCESS: RtcResult = 0;

/// Every hipRTC symbol this module calls.
pub const REQUIRED_RTC_SYMBOLS: &[&str] = &[
    "hiprtcVersion",
    "hiprtcGetErrorString",
    "hiprtcCreateProgram",
    "hiprtcCompileProgram",
    "hiprtcGetProgramLogSize",
    "hiprtcGetProgramLog",
    "hiprtcGetCodeSize",
    "hiprtcGetCode",
    "hiprtcDestroyProgram",
];

#[allow(non_snake_case)]
struct Rtc {
    path: String,
    version: (i32, i32),
    hiprtcGetErrorString: unsafe extern "C" fn(RtcResult) -> *const c_char,
    hiprtcCreateProgram: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> RtcResult,
    hiprtcCompileProgram: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> RtcResult,
    hiprtcGetProgramLogSize: unsafe extern "C" fn(Program, *mut usize) -> RtcResult,
    hiprtcGetProgramLog: unsafe extern "C" fn(Program, *mut c_char) -> RtcResult,
    hiprtcGetCodeSize: unsafe extern "C" fn(Program, *mut usize) -> RtcResult,
    hiprtcGetCode: unsafe extern "C" fn(Program, *mut c_char) -> RtcResult,
    hiprtcDestroyProgram: unsafe extern "C" fn(*mut Program) -> RtcResult,
    _lib: Library,
}

fn candidates(runtime: Option<&str>, get: &impl Fn(&str) -> Option<String>) -> Vec<String> {
    if let Some(p) = settings::value(get, settings::RTC_LIBRARY) {
        return vec![p];
    }
    let mut v: Vec<String> = runtime.map(str::to_owned).or_else(driver::library_from_env).into_iter().collect();
    v.extend(["libhiprtc.so", "libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5"].map(String::from));
    v.extend(driver::DEFAULT_LIBRARIES.iter().map(|s| s.to_string()));
    v
}

fn open(runtime: Option<&str>) -> Result<Rtc, HalError> {
    let mut tried = Vec::new();
    for path in candidates(runtime, &settings::process) {
        // SAFETY: loading runs the library's initializers (hipRTC's or the HIP runtime's, which
        // start no device work).
        let lib = match unsafe { Library::new(&path) } {
            Ok(l) => l,
            Err(e) => {
                tried.push(format!("{path}: {e}"));
                continue;
            }
        };
        let missing: Vec<&str> = REQUIRED_RTC_SYMBOLS
            .iter()
            .copied()
            // SAFETY: a look-up only.
            .filter(|n| unsafe { lib.get::<*const std::ffi::c_void>(n.as_bytes()) }.is_err())
            .collect();
        if !missing.is_empty() {
            tried.push(format!("{path} lacks {}", missing.join(", ")));
            continue;
        }
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol exists (checked above) and has hipRTC's prototype (hiprtc.h
                // of HIP 5.2); the pointer is used only while `_lib` lives in the same struct.
                unsafe { symbol(&lib, concat!($name, "\0")) }
            };
        }
        let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> RtcResult = sym!("hiprtcVersion");
        let (mut major, mut minor) = (0, 0);
        // SAFETY: out-pointers are live locals.
        let r = unsafe { version_fn(&mut major, &mut minor) };
        if r != RTC_SUCCESS {
            tried.push(format!("{path}: hiprtcVersion returned {r}"));
            continue;
        }
        return Ok(Rtc {
            path,
            version: (major, minor),
            hiprtcGetErrorString: sym!("hiprtcGetErrorString"),
            hiprtcCreateProgram: sym!("hiprtcCreateProgram"),
            hiprtcCompileProgram: sym!("hiprtcCompileProgram"),
            hiprtcGetProgramLogSize: sym!("hiprtcGetProgramLogSize"),
            hiprtcGetProgramLog: sym!("hiprtcGetProgramLog"),
            hiprtcGetCodeSize: sym!("hiprtcGetCodeSize"),
            hiprtcGetCode: sym!("hiprtcGetCode"),
            hiprtcDestroyProgram: sym!("hiprtcDestroyProgram"),
            _lib: lib,
        });
    }
    Err(unsupported(format!(
        "hipRTC (the HIP run-time compiler) was not found ({}): install ROCm's hipRTC or set the configuration key {} to its path",
        tried.join("; "),
        settings::RTC_LIBRARY
    )))
}

/// Copies a function pointer out of `lib`.
///
/// # Safety
/// `name` (NUL-terminated) must exist in `lib` with the type `T`; the pointer must not outlive `lib`.
unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> T {
    // SAFETY: the caller guarantees the symbol exists with this type.
    *unsafe { lib.get::<T>(name.as_bytes()) }.expect("the caller checked that the symbol exists")
}

/// hipRTC for a HIP runtime loaded from `runtime` (a path; tried first), or the default search.
fn load(runtime: Option<&str>) -> Result<Arc<Rtc>, HalError> {
    type Loaded = Result<Arc<Rtc>, HalError>;
    static LOADED: OnceLock<Mutex<HashMap<Option<String>, Loaded>>> = OnceLock::new();
    let mut map = LOADED.get_or_init(|| Mutex::new(HashMap::new())).lock();
    map.entry(runtime.map(str::to_owned)).or_insert_with(|| open(runtime).map(Arc::new)).clone()
}

/// hipRTC's version `(major, minor)` once the library and its symbols were found.
pub fn version() -> Result<(i32, i32), HalError> {
    version_for(None)
}

/// [`version`] for the hipRTC that goes with the HIP runtime at `runtime` (a path).
pub fn version_for(runtime: Option<&str>) -> Result<(i32, i32), HalError> {
    load(runtime).map(|r| r.version)
}

/// The file hipRTC was loaded from.
pub fn library_path() -> Result<String, HalError> {
    library_path_for(None)
}

/// [`library_path`] for the hipRTC that goes with the HIP runtime at `runtime` (a path).
pub fn library_path_for(runtime: Option<&str>) -> Result<String, HalError> {
    load(runtime).map(|r| r.path.clone())
}

impl Rtc {
    fn error_string(&self, r: RtcResult) -> String {
        // SAFETY: returns a static string (or null) for any code.
        let p = unsafe { (self.hiprtcGetErrorString)(r) };
        if p.is_null() {
            format!("hiprtcResult {r}")
        } else {
            // SAFETY: non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }

    fn fail(&self, call: &'static str, r: RtcResult, log: &str) -> HalError {
        let log = log.trim();
        let name = self.error_string(r);
        HalError::Driver { call, code: r, name: if log.is_empty() { name } else { format!("{name}: {log}") } }
    }

    fn log(&self, p: Program) -> String {
        let mut n = 0usize;
        // SAFETY: `p` is a live program; out-pointer is a live local.
        if unsafe { (self.hiprtcGetProgramLogSize)(p, &mut n) } != RTC_SUCCESS || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n + 1];
        // SAFETY: the buffer holds the `n` bytes hipRTC reported (plus one).
        if unsafe { (self.hiprtcGetProgramLog)(p, buf.as_mut_ptr().cast()) } != RTC_SUCCESS {
            return String::new();
        }
        driver::c_string(&buf)
    }
}

/// Owns a program and destroys it on drop.
struct Owned<'a>(&'a Rtc, Program);

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: the program is live and destroyed once.
        let _ = unsafe { (self.0.hiprtcDestroyProgram)(&mut self.1) };
    }
}

/// Compiles `source` (file name `name` in messages) to a code object for `arch` (a
/// `gcnArchName` such as `gfx942:sramecc+:xnack-`), with `extra_options` after the architecture.
pub fn compile(source: &str, name: &str, arch: &str, extra_options: &[&str]) -> Result<Vec<u8>, HalError> {
    compile_for(None, source, name, arch, extra_options)
}

/// [`compile`] with the hipRTC that goes with the HIP runtime at `runtime` (a path).
pub fn compile_for(
    runtime: Option<&str>,
    source: &str,
    name: &str,
    arch: &str,
    extra_options: &[&str],
) -> Result<Vec<u8>, HalError> {
    let rtc = load(runtime)?;
    let bad = |what: &str| HalError::InvalidPartition(format!("{what} contains a NUL byte"));
    let src = CString::new(source).map_err(|_| bad("the source"))?;
    let cname = CString::new(name).map_err(|_| bad("the program name"))?;
    let mut options = vec![CString::new(format!("--gpu-architecture={arch}")).map_err(|_| bad("the architecture"))?];
    for o in extra_options {
        options.push(CString::new(*o).map_err(|_| bad("an option"))?);
    }
    let ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    let mut p: Program = std::ptr::null_mut();
    // SAFETY: strings are live NUL-terminated for the call; no headers are passed.
    let r = unsafe {
        (rtc.hiprtcCreateProgram)(&mut p, src.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null())
    };
    if r != RTC_SUCCESS {
        return Err(rtc.fail("hiprtcCreateProgram", r, ""));
    }
    let prog = Owned(&rtc, p);
    // SAFETY: `prog` is live; `ptrs` holds `len` live option strings.
    let r = unsafe { (rtc.hiprtcCompileProgram)(prog.1, ptrs.len() as c_int, ptrs.as_ptr()) };
    if r != RTC_SUCCESS {
        return Err(rtc.fail("hiprtcCompileProgram", r, &rtc.log(prog.1)));
    }
    let mut n = 0usize;
    // SAFETY: `prog` is live; out-pointer is a live local.
    let r = unsafe { (rtc.hiprtcGetCodeSize)(prog.1, &mut n) };
    if r != RTC_SUCCESS || n == 0 {
        return Err(rtc.fail("hiprtcGetCodeSize", r, "no code object"));
    }
    let mut code = vec![0u8; n];
    // SAFETY: `code` holds the `n` bytes hipRTC reported.
    let r = unsafe { (rtc.hiprtcGetCode)(prog.1, code.as_mut_ptr().cast()) };
    if r != RTC_SUCCESS {
        return Err(rtc.fail("hiprtcGetCode", r, ""));
    }
    Ok(code)
}

/// `hipDriverGetVersion` of the HIP runtime library at `library` (a path or file name, as
/// [`crate::HipCapabilities::library`] holds it), for records that state the driver next to the
/// compiler. Missing library or symbol: `HalError::Unsupported`; a failing call: `HalError::Driver`.
pub fn driver_version(library: &str) -> Result<i32, HalError> {
    // SAFETY: the library is the HIP runtime the backend already loaded (its initializers ran).
    let lib = unsafe { Library::new(library) }.map_err(|e| unsupported(format!("{library}: {e}")))?;
    // SAFETY: a look-up only.
    if unsafe { lib.get::<*const std::ffi::c_void>(b"hipDriverGetVersion") }.is_err() {
        return Err(unsupported(format!("{library} lacks hipDriverGetVersion")));
    }
    // SAFETY: the symbol exists (checked above) with HIP's prototype `hipError_t (int*)`; the
    // pointer is used only while `lib` lives.
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { symbol(&lib, "hipDriverGetVersion\0") };
    let mut v = 0;
    // SAFETY: out-pointer is a live local.
    let r = unsafe { f(&mut v) };
    if r != 0 {
        return Err(HalError::Driver { call: "hipDriverGetVersion", code: r, name: format!("hipError_t {r}") });
    }
    Ok(v)
}
