//! # vitamin-hal-hip: CU-masked queues (or HIP green contexts) as physical partitions
//!
//! Realizes the `vitamin-hal` contract on AMD GPUs through the HIP runtime, loaded at run time
//! (`libloading`; no link-time dependency on ROCm). **Not validated on AMD hardware**: nobody on
//! this project has an AMD GPU. The code is built against Debian's real HIP 5.2.3 headers and
//! library (ABI constants checked against the headers, symbol versions against the library) and
//! its logic is tested in CI against a HIP test double of the project's own ([`test_double`]);
//! `docs/amd.md` says what was validated where and what a ROCm host run needs.
//!
//! - [`probe()`](fn@probe) fills a [`HipCapabilities`] once: runtime version, device name,
//!   architecture (`gcnArchName`), CU count, XCDs, WGP mode, cooperative launch, which optional
//!   entry points exist (host functions, cooperative module launches, stream writes, HIP green
//!   contexts) and hipRTC.
//! - [`HipBackend`] builds the topology's leaves from those properties ([`probe::leaf_layout`]):
//!   runs of consecutive CU-mask bits, a multiple of `lcm(XCDs, 2 on WGP parts)` long, because the
//!   runtime deals mask bits round-robin over the XCDs (MI300X: bit `i` on XCD `i mod 8`; 19 leaves
//!   of 16 bits, 2 CUs on every XCD) and WGP-mode parts need CU pairs. The runtime's hierarchical
//!   pool is built from these leaves exactly as on NVIDIA.
//! - Every partition ([`HipPartition`]) is a set of streams created once with
//!   `hipExtStreamCreateWithCUMask` over the node's bits, or on a green context of them (below),
//!   read back and checked, never reconfigured. Submission passes descriptors through unchanged; fences are events or
//!   `hipStreamWriteValue64` words, polled in batches; asynchronous failures come back from the
//!   next poll with the runtime's error code.
//! - [`PhysicalPartition::can_execute`](vitamin_hal::PhysicalPartition::can_execute) sends
//!   cooperative launches (and graphs) to the whole-device node only: CU masks do not apply to
//!   cooperative launches, so a smaller node would misstate which CUs they use. Clusters do not
//!   exist on AMD and are refused.
//! - [`rtc`] compiles a source string to a code object with hipRTC ([`HipBackend::load_module`]
//!   loads it).
//! - [`client`]: the client runtime's view of the backend (`PoolBackend`) for the interposer
//!   (`shim-hip`).
//! - [`symbols`] compares a library's exported `hip*` symbols and version nodes with Debian's
//!   `libamdhip64.so.5` (for the test double now, for the interposer later).
//!
//! ## The stream bound
//! Each CU-masked stream owns a hardware queue, and queues are limited (the kernel driver caps a
//! process's queues; the hardware keeps only some resident and time-multiplexes the rest, which
//! degrades performance). [`StreamLimits`] bounds the streams: at most 8 lanes per partition and
//! 512 streams in all by default (configuration keys `max_lanes`, `max_streams`: [`settings`]), enough for
//! the runtime's default pool on an MI300X (71 nodes x 4 lanes + 8 = 292 streams). A partition
//! beyond the bound is refused with a clear error before any stream is created; a pool that
//! realizes only partly (the runtime refuses a stream: out of queue memory) fails cleanly and its
//! streams are destroyed. The numbers are not measured on AMD hardware.
//!
//! ## HIP green contexts
//! Where the probe finds ROCm 7.14's green-context API ([`HipCapabilities::green_contexts`]:
//! [`driver::GREEN_CONTEXT_SYMBOLS`]), partitions are realized over green contexts ([`green`]):
//! each node gets one context of exactly its CUs (the device resource split with
//! `hipDevSmResourceSplit` at the boundaries of the node's runs of mask bits), created once, and
//! its lanes are `hipExecutionCtxStreamCreate` streams (CU-masked streams underneath), read back
//! like the others. A node the API cannot express, or a failing context, falls back to
//! `hipExtStreamCreateWithCUMask` with the reason logged ([`PartitionRealization::Auto`]); the
//! configuration key `partitions` ([`settings::PARTITIONS`]) or
//! [`HipBackend::with_partitions`] chooses otherwise. The types follow ROCm's
//! `hip_runtime_api.h` (ROCm/rocm-systems at 0ff4546a, cited in [`driver`]); not validated on AMD
//! hardware, and Debian's HIP 5.2.3 has none of it, so on Debian the CU-mask path runs.
//!
//! ## Contract
//! No panics: the library, every required symbol and a device are checked before the first call,
//! and any failure is `HalError::Unsupported` with the reason (`vitamin info` prints it: without
//! the library, that it is missing; with Debian's library and no GPU, that `hipGetDeviceCount`
//! returned `hipErrorNoDevice`). `unsafe` is confined to the FFI layers ([`driver`], [`rtc`]) and
//! the places in `device.rs` and `partition.rs` that hand live handles to them.
#![warn(missing_docs)]

pub mod client;
mod device;
pub mod driver;
pub mod green;
mod partition;
pub mod probe;
pub mod rtc;
pub mod settings;
pub mod symbols;
pub mod test_double;

pub use device::{FenceMode, HipBackend, StreamLimits};
pub use green::{PartitionRealization, Realization};
pub use partition::{cu_mask, HipPartition, ERROR_CHECK_NS, FENCE_EVERY, MAX_FENCES};
pub use probe::{probe, probe_device, probe_library, HipCapabilities, LeafLayout};
