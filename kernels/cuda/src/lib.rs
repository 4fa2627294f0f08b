//! # vitamin-kernels-cuda: fixed-structure test kernels
//!
//! The kernels vitamin runs itself, compiled at run time (no toolkit needed at build time):
//!
//! - the **determinism suite** ([`plan::SuiteKernel`]): a block-partitioned reduction, a split-K
//!   GEMM, a LayerNorm, a GEMV, a softmax and a small attention block, each in FP32, BF16 and
//!   FP16 ([`plan::DType`]). Their source is **one** file shared with `vitamin-kernels-hip`
//!   ([`source::SUITE`], `kernels/common/suite.cu`), in the common subset of CUDA and HIP C++,
//!   behind a small per-vendor prelude; [`source::Variant`] names the compile options that matter
//!   for bits (FMA contraction, fast math);
//! - NVIDIA-only utility kernels ([`UTILITY_KERNELS`]): the conformance suite's reference kernels
//!   with exactly the simulator's semantics (`reduce_partial`, `reduce_final`, `busy`; see
//!   `hal/src/sim/kernels.rs`), a `%smid` census kernel and empty kernels for launch-overhead
//!   benchmarks. [`SOURCE`] is prelude + suite + utility, what `vitamin-hal-cuda` compiles.
//!
//! ## Contract
//! Every kernel's result depends only on its launch (binary, grid, block, arguments): blocks own
//! fixed slices of the work and partial results are combined in a fixed order, never by float
//! atomics or anything that depends on which SMs run the blocks. [`plan`] describes, for each suite
//! kernel, the **fixed** launch structure (tuned once for the whole H200 and then never changed) and
//! the **reshaped** structure a kernel-reshaping system would pick for an allocation of `units` SMs
//! (another grid, split factor or threads per row): the same function computed with another
//! decomposition, whose floating-point rounding generally differs.
//!
//! [`cpu`] is the bitwise-structured CPU reference (same trees, strides and split order, FP32,
//! no contraction) and [`sim`] registers it with the simulated device, the stand-in for a second
//! vendor; [`reference`] holds FP64 references that check the kernels compute the right function.
//! [`bf16`] and [`f16`] are the host-side conversions that match the device code bit for bit.
//! This crate is plain Rust (no FFI).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bf16;
pub mod cpu;
pub mod f16;
pub mod plan;
pub mod reference;
pub mod sim;
pub mod source;

/// The CUDA C++ source NVRTC compiles: the NVRTC prelude, the shared suite and the utility kernels
/// (extern "C" names, no includes).
pub const SOURCE: &str = concat!(
    include_str!("../cuda/prelude.cuh"),
    "\n",
    include_str!("../../common/suite.cu"),
    "\n",
    include_str!("../cuda/vitamin_kernels.cu")
);

/// Names of the conformance-suite and utility kernels in [`SOURCE`].
pub const UTILITY_KERNELS: &[&str] =
    &["reduce_partial", "reduce_final", "busy", "smid_census", "empty_kernel", "noop3"];

/// Every `extern "C"` kernel name in [`SOURCE`] (utility and suite kernels).
pub fn all_kernel_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = UTILITY_KERNELS.to_vec();
    v.extend(source::suite_kernel_names());
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_kernel_is_defined_in_the_source() {
        for name in all_kernel_names() {
            let decl = format!("VT_KERNEL void {name}(");
            assert!(SOURCE.contains(&decl), "kernel {name} missing from the CUDA source");
        }
    }

    #[test]
    fn the_source_needs_no_headers() {
        assert!(!SOURCE.contains("#include"), "NVRTC compiles the source without an include path");
        assert!(SOURCE.starts_with(source::CUDA_PRELUDE));
    }
}
