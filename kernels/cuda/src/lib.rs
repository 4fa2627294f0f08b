//! # vitamin-kernels-cuda: fixed-structure test kernels
//!
//! CUDA C++ sources of the determinism suite's kernels (block-partitioned reduction, split-K GEMM,
//! LayerNorm, GEMV; FP32 and BF16), each with a *reshaped* variant whose decomposition depends on
//! the allocation, compiled at run time with NVRTC by `vitamin-hal-cuda`. Filled in by the NVIDIA
//! backend issue.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
