//! # vitamin-hal-hip: CU-masked queues as physical partitions
//!
//! Realizes the `vitamin-hal` contract on AMD GPUs: every pool node is a set of streams created
//! with `hipExtStreamCreateWithCUMask` over a union of leaves (CU masks are fixed at creation, so
//! all are pre-created). `libamdhip64` is loaded at run time through a small `libloading` table of
//! the functions needed, each returning `Result` (FACTS.md: `hip-sys` needs ROCm at build time and
//! `cubecl-hip-sys` panics on missing symbols).
//!
//! Status: not implemented yet. No AMD GPU is available to this project; this backend will be
//! validated against the real HIP headers/library for ABI and a test double for logic only.
#![warn(missing_docs)]

use vitamin_hal::HalError;

/// Probes for a usable HIP runtime. Returns why the backend cannot be used.
pub fn probe() -> Result<(), HalError> {
    Err(HalError::Unsupported { backend: "hip", reason: "the HIP backend is not implemented yet".into() })
}
