//! # vitamin-hal-cuda: Green Contexts as physical partitions
//!
//! Realizes the `vitamin-hal` contract on NVIDIA GPUs through the CUDA driver API, loaded at run
//! time with cudarc's `driver::sys` (no link-time dependency on libcuda; ABI pinned to CUDA 13.0).
//!
//! - [`probe()`](fn@probe) fills a [`CudaCapabilities`] once: driver version, SM count, minimum partition size
//!   and alignment, green-context support, NVRTC.
//! - [`CudaBackend`] performs **one** `cuDevSmResourceSplitByCount` at start-up; its groups plus the
//!   remainder are the topology's leaves (H200: 15 x 8 SMs + 12). Every partition
//!   ([`CudaPartition`]) is a green context generated from a union of those leaf resources, with
//!   N lanes from `cuGreenCtxStreamCreate`. Partitions are created off the dispatch path (about
//!   1.3 ms each) and drained before they are destroyed.
//! - Submission passes descriptors through unchanged (`cuLaunchKernelEx` with the descriptor's
//!   function, grid, block, shared memory, argument bytes and attributes; copies; fills; host
//!   functions; graphs). A graph launch bound to a green-context partition runs a copy of the
//!   application's graph whose kernel nodes name that green context ([`copies`]; made at the
//!   graph's first launch there), where every node of the graph allows it; any other graph runs
//!   on the whole device and is bound only to the whole-device node. Fences come from an event pool, recorded lazily and polled in batches.
//! - [`PhysicalPartition::can_execute`](vitamin_hal::PhysicalPartition::can_execute) refuses
//!   cooperative launches whose blocks cannot all be co-resident on the partition (occupancy x
//!   SMs) and cluster launches whose shape the partition's SMs cannot hold.
//! - [`census`] reads which physical SMs a partition's launches use (plain launches, and the
//!   kernels of a graph launched as one op: [`graph`] captures such graphs); [`determinism`] is the
//!   fixed-structure vs reshaped determinism suite behind `vitamin determinism`.
//!
//! ## Contract
//! No panics. The driver library, every symbol this crate calls, and the driver version are checked
//! before the first call ([`driver::load`]); a missing library, symbol, device or too-old driver is
//! `HalError::Unsupported` with the reason. Memory is allocated in the primary context (kernels on
//! green-context streams use it); the primary context is made current on each calling thread.
//! `unsafe` is confined to the FFI layers ([`driver`], [`nvrtc`]) and to the places in `device.rs`,
//! `partition.rs` and `copies.rs` that hand live handles to them; every block states why it is sound.
#![warn(missing_docs)]

pub mod census;
mod client;
pub mod copies;
pub mod determinism;
mod device;
pub mod driver;
pub mod graph;
pub mod nvrtc;
mod partition;
pub mod probe;
mod submit;

pub use copies::{graph_copy_counts, graph_copy_reasons, CudaGraphCopies, GraphCopyCounts, NotConfinable};
pub use device::{CudaBackend, FenceMode, RealizationStats, FENCE_ENV, ROOT_CONTEXT_ENV};
pub use partition::{launch_native, CudaPartition, BUSY_QUERY_NS, WAIT_TIMEOUT};
pub use probe::{probe, probe_device, CudaCapabilities};
pub use submit::{SubmitCounts, SPIN as SUBMIT_SPIN};
