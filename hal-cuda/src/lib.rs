//! # vitamin-hal-cuda: Green Contexts as physical partitions
//!
//! Realizes the `vitamin-hal` contract on NVIDIA GPUs through the CUDA driver API, loaded at run
//! time with cudarc's `driver::sys` (no link-time dependency on libcuda). One
//! `cuDevSmResourceSplitByCount` at start-up produces the leaves; every pool node is a green
//! context built from a union of those leaves, with lanes from `cuGreenCtxStreamCreate`.
//!
//! Contract: no panics. The driver library and version are checked before any call; a missing
//! library, symbol or too-old driver is `HalError::Unsupported` with the reason.
//!
//! Status: the capability probe and partition realization are filled in by the NVIDIA backend work
//! (issue 6); until then [`probe`] reports the backend as unsupported.
#![warn(missing_docs)]

use vitamin_hal::HalError;

/// Probes for a usable CUDA driver. Returns why the backend cannot be used.
pub fn probe() -> Result<(), HalError> {
    Err(HalError::Unsupported { backend: "cuda", reason: "the CUDA backend is not implemented yet".into() })
}
