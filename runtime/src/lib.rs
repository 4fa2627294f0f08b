//! # vitamin-runtime: late binding of unchanged launches to physical partitions
//!
//! Vendor-neutral (its code never names a vendor: `tests/vendor_neutral.rs`). Layers, each a folder:
//! - `client`: what every interposer needs once (logical handle registry, capture rules, the
//!   record / launch-first / eager paths, waits, the coordinator thread, census); vendor-specific
//!   parts reach it through `client::native`'s two small traits.
//! - `config`: the one configuration, parsed once.
//! - `arbiter`: the decide side: `ArbiterState` (lease state, policy, the steps of a round),
//!   which the dispatcher drives in-process and the daemon per device; plain records (ready
//!   records and completions up, bindings down, a lease view beside) and their `InProcess` driver.
//! - `vctx`: virtual contexts: logical streams, events with immutable generations, ops with
//!   predecessor tokens; answers every ordering/completion question an application can ask.
//! - `pool`: the hierarchical pool of pre-created physical contexts and the lease state machine.
//! - `dispatch`: the executor: takes ready ops, submits them where the arbiter's state admits a
//!   proposal (validated against the partition), lane continuation, batched completion; the only
//!   place physical state changes.
//! - `policy`: Pick / Select / Prepare and the shipped policies (Throughput-Oriented, TPOT-First,
//!   Static, Exclusive, Chaos).
//! - `profile`: execution-time profiles per launch configuration and pool size.
//! - `daemon`: the host-wide arbiter process: shared-memory rings, control socket, decision
//!   loop, client session.
//! - `scenario`: simulated tenants driven through all of the above on `hal::sim` (`vitamin demo`).
//!
//! ## Invariants
//! - No layer can alter a descriptor: ops travel as `Arc<OpDesc>` from the vCtx to the backend
//!   (a launch-first op, [`dispatch::Dispatcher::launch_fresh_native`], is the application's own
//!   launch, made before its descriptor is copied and recorded).
//! - An op reaches a backend only when all its happens-before predecessors completed, or when its
//!   only pending predecessors sit on the same backend lane under an open lease (lane continuation).
//!   A launch-first op has no predecessor: it is launched only if recording it now would leave it
//!   ready at once, with the vCtx lock held until it is recorded.
//! - Every op completes or fails visibly; nothing is dropped or kept ready for ever.
// `unsafe` is denied everywhere except `daemon::ring` (shared memory), which allows it.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod pool;
pub mod vctx;

pub use pool::{HolderId, Lease, NodeId, NodeState, Pool, PoolError, Realized, Reservation};

/// A completion token: the completion of one op, satisfied when its physical execution
/// completed (an op and its token share one id).
pub type Token = vctx::OpId;
/// A physical context (pCtx): one pre-created, replaceable partition of the device, as backend
/// `B` realizes it (a pool node's partition with its lanes).
pub type PhysicalContext<B> = <B as vitamin_hal::Backend>::Partition;
pub use vctx::{
    contended_locks, AssistScope, ContinuableOp, EventId, OpId, ReadyOp, Recorded, StreamId, StreamKind, VctxError,
    VctxId, VirtualContext, WaitAssist, SYNC_SPIN,
};

pub mod arbiter;
pub mod client;
pub mod config;
pub mod daemon;
pub mod dispatch;
pub mod policy;
pub mod profile;
pub mod scenario;
/// The op timeline (`VITAMIN_TRACE`), kept in `vitamin-hal` so that backends mark their driver
/// calls too.
pub use vitamin_hal::trace;
