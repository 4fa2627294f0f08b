//! Building the HIP test double (`tests/fake/libamdhip64.c`): a fake `libamdhip64.so.5` with a
//! simulated MI300X or WGP-mode part, CU-masked streams executed asynchronously on worker threads,
//! events, an execution log and failure injection (the C file's header documents its variables).
//! Test support only: the backend never loads it unless `VITAMIN_HIP_LIBRARY` names it.
//!
//! Its kernels run on the CPU: the few of [`TEST_KERNELS`], and every kernel of vitamin's
//! determinism suite ([`SUITE_SOURCE`], `tests/fake/suite_kernels.c`: suite.cu's block structure
//! and accumulation order, contraction on or off as the module's compile options say, and
//! `FAKE_HIP_PERTURB` to change one kernel's output on purpose). Both files are compiled with
//! `-ffp-contract=off`, so the C compiler fuses nothing the source does not ask it to.
//!
//! It is compiled against the real HIP headers (Debian's `libamdhip64-dev`, under `/usr/include`
//! or `HIP_INCLUDE_DIR`), so its prototypes, enums and `hipDeviceProp_t` are the real ones, and
//! linked with a version script giving every symbol the real library's version node.
//!
//! Two variants ([`Variant`]): the base double (HIP 5.2's surface) and one that also exports HIP
//! green contexts (ROCm 7.14), so the backend's two partition realizations both run in CI.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The double's C source.
pub const SOURCE: &str = include_str!("../tests/fake/libamdhip64.c");
/// The suite kernels' CPU implementations, compiled into the same library.
pub const SUITE_SOURCE: &str = include_str!("../tests/fake/suite_kernels.c");
/// Its linker version script.
pub const VERSION_SCRIPT: &str = include_str!("../tests/fake/libamdhip64.map");
/// Symbols the double exports that HIP 5.2 does not (newer ROCm API); their version nodes are
/// assumptions (see the version script).
pub const NEWER_THAN_5_2: &[&str] = &[
    "hipDrvLaunchKernelEx",
    "hipGetFuncBySymbol",
    "hipKernelGetParamInfo",
    "hipLaunchKernelExC",
    "hipModuleLaunchCooperativeKernel",
];

/// Which library the double is built as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// Debian's HIP 5.2 surface (no green contexts): the default.
    Base,
    /// The base plus ROCm 7.14's green-context entry points ([`GREEN_CONTEXT_EXPORTS`]), compiled
    /// with `FAKE_HIP_GREEN_CONTEXTS` (the C file documents their behaviour).
    GreenContexts,
}

impl Variant {
    /// The variant [`VARIANT_ENV`] names (`green-contexts`), else [`Variant::Base`]: the whole HIP
    /// test matrix runs against either (`FAKE_HIP_VARIANT=green-contexts cargo test ...`).
    pub fn from_env() -> Variant {
        match std::env::var(VARIANT_ENV).as_deref() {
            Ok("green-contexts") => Variant::GreenContexts,
            _ => Variant::Base,
        }
    }

    /// The name [`VARIANT_ENV`] takes.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Base => "base",
            Variant::GreenContexts => "green-contexts",
        }
    }
}

/// Environment variable choosing the variant [`build`] builds (read by the test harnesses, not by
/// the backend).
pub const VARIANT_ENV: &str = "FAKE_HIP_VARIANT";

/// The green-context symbols the [`Variant::GreenContexts`] double exports, in a version node of
/// their own, `hip_7.14` (an assumption: not checked against a ROCm library).
pub const GREEN_CONTEXT_EXPORTS: &[&str] = &[
    "hipDeviceGetDevResource",
    "hipDevResourceGenerateDesc",
    "hipDevSmResourceSplit",
    "hipDevSmResourceSplitByCount",
    "hipExecutionCtxDestroy",
    "hipExecutionCtxStreamCreate",
    "hipGreenCtxCreate",
];

/// Where the HIP headers are: `HIP_INCLUDE_DIR`, else `/usr/include`.
pub fn include_dir() -> PathBuf {
    std::env::var_os("HIP_INCLUDE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/include"))
}

/// Why the double cannot be built here (no HIP headers, no C compiler), or `None`.
pub fn unavailable() -> Option<String> {
    let header = include_dir().join("hip/hip_runtime_api.h");
    if !header.exists() {
        return Some(format!(
            "{} not found: install Debian's libamdhip64-dev (or set HIP_INCLUDE_DIR)",
            header.display()
        ));
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    match Command::new(&cc).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some(format!("no C compiler `{cc}`: install gcc or set CC")),
    }
}

/// Builds the double of the variant [`VARIANT_ENV`] names into `dir` as `libamdhip64.so.5` and
/// returns its path.
pub fn build(dir: &Path) -> Result<PathBuf, String> {
    build_variant(dir, Variant::from_env())
}

/// Builds the double of `variant` into `dir` as `libamdhip64.so.5` and returns its path.
pub fn build_variant(dir: &Path, variant: Variant) -> Result<PathBuf, String> {
    if let Some(why) = unavailable() {
        return Err(why);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Tests of one binary (and several test binaries) build the double concurrently into the same
    // folder while others already load it: each build works in a private folder and the finished
    // library is renamed into place, so a loader never sees a half-written file.
    static BUILDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let work = dir.join(format!(".build-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let src = work.join("libamdhip64.c");
    let suite = work.join("suite_kernels.c");
    let map = work.join("libamdhip64.map");
    std::fs::write(&src, SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    std::fs::write(&suite, SUITE_SOURCE).map_err(|e| format!("{}: {e}", suite.display()))?;
    let mut script = VERSION_SCRIPT.to_owned();
    if variant == Variant::GreenContexts {
        script.push_str("hip_7.14 {\n  global:\n");
        for name in GREEN_CONTEXT_EXPORTS {
            script.push_str(&format!("    {name};\n"));
        }
        script.push_str("} hip_7.0;\n");
    }
    std::fs::write(&map, script).map_err(|e| format!("{}: {e}", map.display()))?;
    let built = work.join("libamdhip64.so.5");
    let lib = dir.join("libamdhip64.so.5");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-shared", "-fPIC", "-pthread", "-O1", "-ffp-contract=off", "-Wall", "-Werror"])
        .args((variant == Variant::GreenContexts).then_some("-DFAKE_HIP_GREEN_CONTEXTS"))
        .arg(format!("-I{}", include_dir().display()))
        .arg(format!("-Wl,--version-script={}", map.display()))
        .args(["-Wl,-soname,libamdhip64.so.5", "-o"])
        .arg(&built)
        .arg(&src)
        .arg(&suite)
        .arg("-lm")
        .output()
        .map_err(|e| format!("cannot run {cc}: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&work);
        return Err(format!("{cc} failed to build the HIP test double:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    std::fs::rename(&built, &lib).map_err(|e| format!("{} -> {}: {e}", built.display(), lib.display()))?;
    let _ = std::fs::remove_dir_all(&work);
    Ok(lib)
}

/// Names of the kernels in [`TEST_KERNELS`] (the double runs these on the CPU, and the suite's,
/// [`SUITE_SOURCE`]).
pub const TEST_KERNEL_NAMES: &[&str] = &["reduce_partial", "reduce_final", "busy", "empty_kernel"];

/// HIP C++ source of the reference kernels the tests launch, with the block structure of
/// `hal::sim`'s CPU references (so results are bitwise the simulator's). The double's hipRTC
/// accepts it as is; Debian's hipcc compiles it (`tests/abi.rs`); on a ROCm host hipRTC would
/// compile it at run time (not tried: no AMD GPU).
pub const TEST_KERNELS: &str = r#"
#include <hip/hip_runtime.h>

// Block b of G blocks with T threads: thread t sums x[i], i = b*T + t, + G*T, ... in order; the
// block combines its threads by the shared-memory tree s[t] += s[t + k], k = T/2 .. 1.
extern "C" __global__ void reduce_partial(const float* x, unsigned n, float* partial) {
  __shared__ float s[1024];
  float acc = 0.0f;
  unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    acc += x[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// One thread sums partial[0..m) in block order into *out.
extern "C" __global__ void reduce_final(const float* partial, unsigned m, float* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float acc = 0.0f;
    for (unsigned i = 0; i < m; i++) acc += partial[i];
    *out = acc;
  }
}

// Each block spins for about block_ns (wall_clock64 assumed to tick at 100 MHz); no memory effect.
extern "C" __global__ void busy(unsigned block_ns) {
  unsigned long long start = wall_clock64();
  float a = (float)threadIdx.x;
  while ((wall_clock64() - start) * 10ull < block_ns) a = a * 0.999f + 1.0f;
  if (a == -1.0f) asm volatile("s_nop 0");
}

extern "C" __global__ void empty_kernel() {}
"#;
