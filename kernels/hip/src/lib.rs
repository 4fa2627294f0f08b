//! # vitamin-kernels-hip: the fixed-structure test kernels for AMD
//!
//! The determinism suite for hipRTC: the **same** source as NVIDIA's
//! ([`vitamin_kernels_cuda::source::SUITE`], `kernels/common/suite.cu`) behind the HIP prelude
//! ([`PRELUDE`], `kernels/hip/hip/prelude.h`), with the same launch plans
//! ([`vitamin_kernels_cuda::plan`], re-exported as [`plan`]) and the same kernel names. Only the
//! prelude and the compile options ([`Variant::hip_options`]) differ per vendor.
//!
//! hipRTC compiles [`source`] as is (it defines `__HIPCC_RTC__`, so the prelude includes nothing);
//! `hipcc` compiles the same text from a file (the prelude then includes `hip/hip_runtime.h`).
//! `tests/hipcc.rs` is that offline compile check: it builds code objects for
//! [`COMPILE_CHECK_TARGETS`] with every [`Variant`] where `hipcc` is installed (CI installs
//! Debian's 5.2.3) and says SKIPPED otherwise. That hipcc (clang 15) does not know `gfx942`
//! (MI300X); `gfx940`, the MI300 target clang 15 knows, stands in for it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use vitamin_kernels_cuda::plan;
pub use vitamin_kernels_cuda::source::{suite_kernel_names, Variant, SUITE};

/// The HIP prelude.
pub const PRELUDE: &str = include_str!("../hip/prelude.h");

/// Offload targets of the compile check: MI200 (gfx90a), MI100 (gfx908), MI300 (gfx940; gfx942
/// where the compiler knows it).
pub const COMPILE_CHECK_TARGETS: &[&str] = &["gfx90a", "gfx908", "gfx940"];

/// The suite as hipRTC (or hipcc) compiles it: prelude + shared suite.
pub fn source() -> String {
    format!("{PRELUDE}\n{SUITE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hip_source_is_the_shared_suite_behind_the_hip_prelude() {
        let s = source();
        assert!(s.starts_with(PRELUDE) && s.ends_with(SUITE));
        for name in suite_kernel_names() {
            assert!(s.contains(&format!("VT_KERNEL void {name}(")), "{name}");
        }
        // hipRTC needs no header: the only include is behind the hipcc-only guard.
        assert!(PRELUDE.contains("#if !defined(__HIPCC_RTC__)\n#include <hip/hip_runtime.h>\n#endif"));
        assert_eq!(s.matches("#include").count(), 1);
    }
}
