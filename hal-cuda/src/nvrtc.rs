//! Run-time compilation with NVRTC (through cudarc's `nvrtc::sys`, loaded at run time).
//!
//! Like the driver layer, the library and every symbol are checked before the first call, so a
//! missing `libnvrtc` is `HalError::Unsupported` rather than cudarc's panic. Compiles straight to a
//! cubin for the device's architecture (`sm_XY`), which `cuLibraryLoadData` loads.

use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

use cudarc::nvrtc::sys as nvrtc_sys;
use nvrtc_sys::nvrtcResult;
use vitamin_hal::HalError;

use crate::driver::unsupported;

/// Every NVRTC symbol this module calls.
pub const REQUIRED_NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcGetErrorString",
    "nvrtcCreateProgram",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
    "nvrtcDestroyProgram",
];

/// NVRTC's version `(major, minor)` once the library and its symbols were found.
pub fn load() -> Result<(i32, i32), HalError> {
    static LOADED: OnceLock<Result<(i32, i32), HalError>> = OnceLock::new();
    LOADED.get_or_init(load_uncached).clone()
}

fn load_uncached() -> Result<(i32, i32), HalError> {
    // SAFETY: only tries to dlopen the library names cudarc knows.
    if !unsafe { nvrtc_sys::is_culib_present() } {
        return Err(unsupported(
            "libnvrtc.so (NVRTC, the CUDA run-time compiler) was not found: install the CUDA toolkit's NVRTC (e.g. \
             /usr/local/cuda/lib64) and add its folder to LD_LIBRARY_PATH",
        ));
    }
    // SAFETY: the library was just found, so `culib` cannot panic.
    let lib = unsafe { nvrtc_sys::culib() };
    let missing: Vec<&str> = REQUIRED_NVRTC_SYMBOLS
        .iter()
        .copied()
        // SAFETY: looks a symbol up without calling it.
        .filter(|n| unsafe { lib.get::<*const std::ffi::c_void>(n.as_bytes()) }.is_err())
        .collect();
    if !missing.is_empty() {
        return Err(unsupported(format!("libnvrtc lacks {}: use NVRTC 12 or newer", missing.join(", "))));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the symbol exists; out-pointers are live locals.
    let r = unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(unsupported(format!("nvrtcVersion failed: {}", error_string(r))));
    }
    Ok((major, minor))
}

fn error_string(r: nvrtcResult) -> String {
    // SAFETY: only called after `load` found the symbol; returns a static string.
    let p = unsafe { nvrtc_sys::nvrtcGetErrorString(r) };
    if p.is_null() {
        format!("nvrtcResult {}", r as i32)
    } else {
        // SAFETY: NUL-terminated static string from NVRTC.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

fn fail(call: &'static str, r: nvrtcResult, log: &str) -> HalError {
    let log = log.trim();
    HalError::Driver {
        call,
        code: r as i32,
        name: if log.is_empty() { error_string(r) } else { format!("{}: {log}", error_string(r)) },
    }
}

/// Owns an `nvrtcProgram` and destroys it on drop.
struct Program(nvrtc_sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `nvrtcCreateProgram` and is destroyed once.
        unsafe { nvrtc_sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

/// Creates and compiles a program with exactly `options`.
fn compile(source: &str, name: &str, options: Vec<String>) -> Result<Program, HalError> {
    load()?;
    let src = CString::new(source).map_err(|_| unsupported("kernel source contains a NUL byte"))?;
    let cname = CString::new(name).map_err(|_| unsupported("program name contains a NUL byte"))?;
    let mut prog = Program(std::ptr::null_mut());
    // SAFETY: loaded; strings are NUL-terminated and outlive the call; no headers are passed.
    let r = unsafe {
        nvrtc_sys::nvrtcCreateProgram(&mut prog.0, src.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null())
    };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(fail("nvrtcCreateProgram", r, ""));
    }
    let options: Vec<CString> = options
        .into_iter()
        .map(|o| CString::new(o).map_err(|_| unsupported("a compile option contains a NUL byte")))
        .collect::<Result<_, _>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: the program is live; the option array holds `len` NUL-terminated strings.
    let r = unsafe { nvrtc_sys::nvrtcCompileProgram(prog.0, option_ptrs.len() as i32, option_ptrs.as_ptr()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(fail("nvrtcCompileProgram", r, &program_log(&prog)));
    }
    Ok(prog)
}

/// Compiles CUDA C++ `source` to a cubin for compute capability `arch = (major, minor)`.
///
/// Errors: `Unsupported` when NVRTC is missing; `Driver` with the compiler log when the source
/// does not compile.
pub fn compile_cubin(source: &str, name: &str, arch: (i32, i32), extra_options: &[&str]) -> Result<Vec<u8>, HalError> {
    let mut options = base_options(arch);
    options.extend(extra_options.iter().map(|s| (*s).to_owned()));
    let prog = compile(source, name, options)?;
    let mut size = 0usize;
    // SAFETY: the program compiled; out-pointer is a live local.
    let r = unsafe { nvrtc_sys::nvrtcGetCUBINSize(prog.0, &mut size) };
    if r != nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(fail("nvrtcGetCUBINSize", r, "no cubin (was a virtual compute_XY architecture requested?)"));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the size NVRTC reported.
    let r = unsafe { nvrtc_sys::nvrtcGetCUBIN(prog.0, cubin.as_mut_ptr().cast()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(fail("nvrtcGetCUBIN", r, ""));
    }
    Ok(cubin)
}

/// Compiles CUDA C++ `source` to PTX for the virtual architecture `compute_XY` (what NVVM
/// decided before `ptxas`: whether `a * b + c` became `fma.rn` or `mul.rn` + `add.rn`).
pub fn compile_ptx(source: &str, name: &str, arch: (i32, i32), extra_options: &[&str]) -> Result<String, HalError> {
    let mut options = vec![format!("--gpu-architecture=compute_{}{}", arch.0, arch.1), "--std=c++17".to_owned()];
    options.extend(extra_options.iter().map(|s| (*s).to_owned()));
    let prog = compile(source, name, options)?;
    let mut size = 0usize;
    // SAFETY: the program compiled; out-pointer is a live local.
    let r = unsafe { nvrtc_sys::nvrtcGetPTXSize(prog.0, &mut size) };
    if r != nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return Err(fail("nvrtcGetPTXSize", r, ""));
    }
    let mut ptx = vec![0u8; size];
    // SAFETY: `ptx` has the size NVRTC reported.
    let r = unsafe { nvrtc_sys::nvrtcGetPTX(prog.0, ptx.as_mut_ptr().cast()) };
    if r != nvrtcResult::NVRTC_SUCCESS {
        return Err(fail("nvrtcGetPTX", r, ""));
    }
    Ok(String::from_utf8_lossy(&ptx).trim_end_matches('\0').to_owned())
}

/// The options every compilation passes before the caller's: the architecture and the language.
pub fn base_options(arch: (i32, i32)) -> Vec<String> {
    vec![format!("--gpu-architecture=sm_{}{}", arch.0, arch.1), "--std=c++17".to_owned()]
}

/// Every option the determinism suite is compiled with for `variant` (what a record states).
pub fn suite_options(arch: (i32, i32), variant: vitamin_kernels_cuda::source::Variant) -> Vec<String> {
    let mut o = base_options(arch);
    o.extend(variant.nvrtc_options().iter().map(|s| (*s).to_owned()));
    o
}

fn program_log(prog: &Program) -> String {
    let mut size = 0usize;
    // SAFETY: the program is live; out-pointer is a live local.
    if unsafe { nvrtc_sys::nvrtcGetProgramLogSize(prog.0, &mut size) } != nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return String::new();
    }
    let mut log = vec![0u8; size];
    // SAFETY: `log` has the size NVRTC reported.
    if unsafe { nvrtc_sys::nvrtcGetProgramLog(prog.0, log.as_mut_ptr().cast()) } != nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    String::from_utf8_lossy(&log).trim_end_matches('\0').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compiles every kernel of `kernels/cuda` where NVRTC is installed (no GPU needed); skips
    /// with a message otherwise.
    #[test]
    fn the_kernel_library_compiles_for_hopper() {
        if let Err(e) = load() {
            eprintln!("SKIPPED: NVRTC not available ({e})");
            return;
        }
        let cubin = compile_cubin(vitamin_kernels_cuda::SOURCE, "vitamin_kernels.cu", (9, 0), &[]).expect("compiles");
        assert_eq!(&cubin[..4], b"\x7fELF", "a cubin is an ELF image");
        for name in vitamin_kernels_cuda::all_kernel_names() {
            let needle = name.as_bytes();
            assert!(cubin.windows(needle.len()).any(|w| w == needle), "{name} missing from the cubin");
        }
    }

    /// The shared suite source compiles with every variant's options (no GPU needed); the
    /// variants differ in code where contraction matters (the GEMM's `acc += a * b`).
    #[test]
    fn the_suite_compiles_with_every_variant() {
        use vitamin_kernels_cuda::source::{cuda_suite_source, suite_kernel_names, Variant};
        if let Err(e) = load() {
            eprintln!("SKIPPED: NVRTC not available ({e})");
            return;
        }
        let mut images = Vec::new();
        for v in Variant::ALL {
            let cubin = compile_cubin(&cuda_suite_source(), "vitamin_suite.cu", (9, 0), v.nvrtc_options())
                .unwrap_or_else(|e| panic!("variant {v}: {e}"));
            for name in suite_kernel_names() {
                assert!(cubin.windows(name.len()).any(|w| w == name.as_bytes()), "{v}: {name} missing");
            }
            images.push(cubin);
        }
        assert_ne!(images[0], images[1], "--fmad=false must change the code of contractible kernels");
        assert_eq!(
            suite_options((9, 0), Variant::NoContract),
            ["--gpu-architecture=sm_90", "--std=c++17", "--fmad=false"]
        );
    }

    /// `fma.rn.f32` instructions in each `.entry` of a PTX listing.
    fn ptx_fmas(ptx: &str) -> std::collections::HashMap<String, usize> {
        let mut counts = std::collections::HashMap::new();
        let mut current = None;
        for line in ptx.lines() {
            let t = line.trim();
            if let Some(rest) = t.strip_prefix(".visible .entry ") {
                current = Some(rest.split('(').next().unwrap_or("").to_owned());
            } else if let (Some(k), true) = (&current, t.starts_with("fma.rn.f32")) {
                *counts.entry(k.clone()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// NVVM contracts the suite's `acc += a * b` into `fma.rn.f32` with `--fmad=true` and
    /// never with `--fmad=false` (where every `a * b + c` of the source stays two roundings).
    #[test]
    fn fmad_false_leaves_no_contraction_in_the_ptx() {
        use vitamin_kernels_cuda::source::{cuda_suite_source, Variant};
        if let Err(e) = load() {
            eprintln!("SKIPPED: NVRTC not available ({e})");
            return;
        }
        let ptx = |v: Variant| {
            compile_ptx(&cuda_suite_source(), "vitamin_suite.cu", (9, 0), v.nvrtc_options())
                .unwrap_or_else(|e| panic!("{v}: {e}"))
        };
        let (on, off) = (ptx_fmas(&ptx(Variant::Default)), ptx_fmas(&ptx(Variant::NoContract)));
        eprintln!("fma.rn.f32 per kernel, --fmad=true: {on:?}\n--fmad=false: {off:?}");
        for k in ["gemm_splitk_partial_f32", "gemv_f32", "layernorm_f32", "attention_f32"] {
            assert!(on.get(k).copied().unwrap_or(0) > 0, "{k}: no contraction with --fmad=true");
        }
        for k in ["gemm_splitk_partial_f32", "gemv_f32", "reduce_partial_f32", "splitk_reduce_f32"] {
            assert_eq!(off.get(k).copied().unwrap_or(0), 0, "{k}: fma.rn.f32 with --fmad=false");
        }
    }

    #[test]
    fn compile_errors_carry_the_log() {
        if load().is_err() {
            eprintln!("SKIPPED: NVRTC not available");
            return;
        }
        let e = compile_cubin("__global__ void k() { undefined_thing(); }", "bad.cu", (9, 0), &[]).unwrap_err();
        assert!(e.to_string().contains("undefined_thing"), "{e}");
    }
}
