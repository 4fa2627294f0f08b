//! The kernel sources and the compile options that matter for bits.
//!
//! The determinism suite is **one** source, [`SUITE`] (`kernels/common/suite.cu`), written in the
//! common subset of CUDA C++ and HIP C++. A small per-vendor prelude maps the few names it needs:
//! [`CUDA_PRELUDE`] here, the HIP one in `vitamin-kernels-hip`. NVIDIA builds also append
//! [`CUDA_UTILITY`] (census, co-runner and conformance kernels that read `%globaltimer` and `%smid`
//! with inline PTX).
//!
//! [`Variant`] names the compile-option sets a record is made with. What matters for the bits of
//! these kernels: whether `a * b + c` may be **contracted** into one fused multiply-add (one
//! rounding instead of two), and **fast math** (approximate division, square root and `expf`,
//! denormals flushed to zero). Everything else (optimization level, architecture) leaves the bits
//! of a fixed-structure kernel alone as long as the compiler respects IEEE semantics, which both
//! compilers do without fast math.

/// The shared suite source (no prelude).
pub const SUITE: &str = include_str!("../../common/suite.cu");
/// The NVRTC prelude.
pub const CUDA_PRELUDE: &str = include_str!("../cuda/prelude.cuh");
/// NVIDIA-only utility kernels (after the suite, whose helpers they use).
pub const CUDA_UTILITY: &str = include_str!("../cuda/vitamin_kernels.cu");

/// A set of compile options the suite is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Contraction allowed (both compilers' default for GPU code), IEEE division, square root
    /// and denormals.
    Default,
    /// Contraction off: every `a * b + c` rounds twice, as written (what the CPU reference does).
    NoContract,
    /// Fast math: contraction on, approximate division/sqrt/exp, denormals flushed.
    FastMath,
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 3] = [Variant::Default, Variant::NoContract, Variant::FastMath];
    /// The variants `vitamin determinism --record` makes by default.
    pub const RECORDED: [Variant; 2] = [Variant::Default, Variant::NoContract];

    /// Stable name (records, CLI).
    pub fn name(self) -> &'static str {
        match self {
            Variant::Default => "default",
            Variant::NoContract => "nocontract",
            Variant::FastMath => "fastmath",
        }
    }

    /// Parses [`Variant::name`].
    pub fn from_name(s: &str) -> Option<Variant> {
        Self::ALL.into_iter().find(|v| v.name() == s)
    }

    /// NVRTC options (besides the architecture and `--std=c++17`). NVRTC's default is
    /// `--fmad=true`; it is passed explicitly so a record states it.
    pub fn nvrtc_options(self) -> &'static [&'static str] {
        match self {
            Variant::Default => &["--fmad=true"],
            Variant::NoContract => &["--fmad=false"],
            Variant::FastMath => &["--use_fast_math"],
        }
    }

    /// hipRTC / hipcc (clang) options. clang's default for HIP device code is
    /// `-ffp-contract=fast-honor-pragmas`; `fast` is the same for this source (it has no pragmas).
    pub fn hip_options(self) -> &'static [&'static str] {
        match self {
            Variant::Default => &["-ffp-contract=fast"],
            Variant::NoContract => &["-ffp-contract=off"],
            Variant::FastMath => &["-ffast-math"],
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every suite kernel's `extern "C"` name (all kernels and dtypes), sorted.
pub fn suite_kernel_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = crate::plan::SuiteKernel::ALL
        .into_iter()
        .flat_map(|k| crate::plan::DType::ALL.into_iter().flat_map(move |d| crate::plan::kernel_names(k, d)))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The suite as NVRTC compiles it: prelude + suite (no utility kernels).
pub fn cuda_suite_source() -> String {
    format!("{CUDA_PRELUDE}\n{SUITE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_kernel_is_defined_once_in_the_shared_source() {
        for name in suite_kernel_names() {
            let decl = format!("VT_KERNEL void {name}(");
            assert_eq!(SUITE.matches(&decl).count(), 1, "kernel {name} in kernels/common/suite.cu");
        }
    }

    #[test]
    fn the_shared_source_stays_in_the_common_subset() {
        // Inline PTX, warp-level primitives and vendor headers would tie the source to one vendor.
        for needle in [
            "asm(",
            "asm volatile",
            "#include",
            "__shfl",
            "warpSize",
            "atomicAdd",
            "__ballot",
            "%smid",
            "__half",
            "__nv_",
        ] {
            assert!(!SUITE.contains(needle), "kernels/common/suite.cu uses {needle:?}");
        }
    }

    #[test]
    fn variants_name_their_options_for_both_compilers() {
        for v in Variant::ALL {
            assert_eq!(Variant::from_name(v.name()), Some(v));
            assert!(!v.nvrtc_options().is_empty() && !v.hip_options().is_empty());
        }
        assert_eq!(Variant::NoContract.nvrtc_options(), ["--fmad=false"]);
        assert_eq!(Variant::NoContract.hip_options(), ["-ffp-contract=off"]);
    }
}
