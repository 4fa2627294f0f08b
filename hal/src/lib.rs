//! # vitamin-hal: the vendor-neutral hardware contract
//!
//! This crate says what a GPU backend must provide for vitamin to late-bind launches to spatial
//! partitions, without naming a vendor:
//!
//! - [`UnitSet`]: a set of execution units (SMs or CUs), at most [`MAX_UNITS`].
//! - [`Topology`]: the device's units, its **leaves** (the smallest allocations, produced by one
//!   split at start-up) and a [`Capabilities`] record filled once by the backend's probe. The
//!   vendor and the unit's name ("SM", "CU") are labels the backend supplies, shown to users and
//!   never matched on.
//! - [`OpDesc`] and friends: immutable descriptors of asynchronous operations. Built once,
//!   shared as `Arc<OpDesc>`, never mutated: no API hands out `&mut` to a descriptor, so neither
//!   the runtime nor a backend can reshape a launch (the *parallel-structure invariant*).
//! - [`Backend`] / [`PhysicalPartition`]: create a partition for a union of leaves with N lanes,
//!   submit a descriptor **unchanged** on a lane, poll completions in batches, and say whether a
//!   descriptor can run unchanged on a partition at all ([`PhysicalPartition::can_execute`]).
//!   A backend with native streams may also let its caller make a launch itself on a lane's
//!   stream ([`PhysicalPartition::submit_native`]): the application's call, unchanged, with the
//!   application's own argument pointers; the descriptor is copied afterwards.
//!
//! ## Contract
//! Backends do not validate scheduling: leases, dependencies and conflicts are the runtime's job.
//! They validate only what the hardware imposes (lanes in range, co-residency, cluster shapes) and
//! report failures as [`HalError`]; a missing driver or library is [`HalError::Unsupported`] with
//! a reason, never a panic. Ops submitted on one lane execute in submission order; ops on
//! different lanes or partitions are unordered unless the runtime orders them.
//!
//! [`trace`] is the op timeline of a run (`VITAMIN_TRACE` in the shim): marks from the runtime and
//! from backends' driver calls into one lock-free ring.
//!
//! [`sim`] is a deterministic simulated device implementing both traits in virtual time, with CPU
//! reference kernels, so everything above this crate can be tested without a GPU. Its device
//! presets are data (`src/sim/presets.toml`), looked up by name.
//!
//! Nothing in this crate's code names a vendor (`runtime/tests/vendor_neutral.rs` checks it).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod error;
pub mod op;
pub mod sim;
pub mod topology;
pub mod trace;
pub mod unitset;

pub use backend::{check_union_of_leaves, Backend, Fence, LaneId, LaneProgress, PhysicalPartition};
pub use error::{HalError, Incompatibility};
pub use op::{
    Copy, Dim3, Endpoint, Fill, FunctionKind, FunctionRef, GraphLaunch, HostFunction, KernelArgs, KernelLaunch,
    LaunchAttributes, LaunchConfig, Marker, OpDesc, ParamLayout, PartitionCopies, RawAttribute,
};
pub use topology::{Capabilities, Topology, TopologySpec};
pub use unitset::{UnitSet, MAX_UNITS};
