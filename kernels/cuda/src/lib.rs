//! # vitamin-kernels-cuda: fixed-structure test kernels
//!
//! The CUDA C++ source ([`SOURCE`]) of every kernel vitamin runs itself on NVIDIA GPUs, compiled at
//! run time with NVRTC by `vitamin-hal-cuda` (no CUDA toolkit needed at build time):
//!
//! - the conformance suite's reference kernels with exactly the simulator's semantics
//!   (`reduce_partial`, `reduce_final`, `busy`; see `hal/src/sim/kernels.rs`), a `%smid` census
//!   kernel and an empty kernel for launch-overhead benchmarks;
//! - the determinism suite ([`plan::SuiteKernel`]): a block-partitioned reduction, a split-K GEMM,
//!   a LayerNorm and a GEMV, each in FP32 and BF16 ([`plan::DType`]).
//!
//! ## Contract
//! Every kernel's result depends only on its launch (binary, grid, block, arguments): blocks own
//! fixed slices of the work and partial results are combined in a fixed order, never by float
//! atomics or anything that depends on which SMs run the blocks. [`plan`] describes, for each suite
//! kernel, the **fixed** launch structure (tuned once for the whole H200 and then never changed) and
//! the **reshaped** structure a kernel-reshaping system would pick for an allocation of `units` SMs
//! (another grid, split factor or threads per row): the same function computed with another
//! decomposition, whose floating-point rounding generally differs. [`reference`] holds FP64 CPU
//! references used to check that the kernels compute the right function.
//!
//! This crate is plain Rust (no FFI); [`bf16`] has the host-side BF16 conversions that match the
//! device code bit for bit.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bf16;
pub mod plan;
pub mod reference;

/// CUDA C++ source of every kernel (extern "C" names, no includes: NVRTC compiles it as is).
pub const SOURCE: &str = include_str!("../cuda/vitamin_kernels.cu");

/// Names of the conformance-suite and utility kernels in [`SOURCE`].
pub const UTILITY_KERNELS: &[&str] =
    &["reduce_partial", "reduce_final", "busy", "smid_census", "empty_kernel", "noop3"];

/// Every `extern "C"` kernel name in [`SOURCE`] (utility and suite kernels).
pub fn all_kernel_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = UTILITY_KERNELS.to_vec();
    for k in plan::SuiteKernel::ALL {
        for d in plan::DType::ALL {
            v.extend(plan::kernel_names(k, d));
        }
    }
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
            let decl = format!("__global__ void {name}(");
            assert!(SOURCE.contains(&decl), "kernel {name} missing from vitamin_kernels.cu");
        }
    }

    #[test]
    fn the_source_needs_no_headers() {
        assert!(!SOURCE.contains("#include"), "NVRTC compiles the source without an include path");
    }
}
