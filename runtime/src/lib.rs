//! # vitamin-runtime: late binding of unchanged launches to physical partitions
//!
//! Vendor-neutral (it never names CUDA or HIP). Layers, each a folder:
//! - `vctx`: virtual contexts: logical streams, events with immutable generations, ops with
//!   predecessor tokens; answers every ordering/completion question an application can ask.
//! - `pool`: the hierarchical pool of pre-created physical contexts and the lease state machine.
//! - `dispatch`: binds ready ops to pool nodes (validated policy proposals, lane continuation,
//!   batched completion); the only place physical state changes.
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

pub use pool::{HolderId, NodeId, NodeState, Pool, PoolError, Realized, Reservation};
pub use vctx::{
    contended_locks, ContinuableOp, EventId, OpId, ReadyOp, Recorded, StreamId, StreamKind, VctxError, VctxId,
    VirtualContext, WaitAssist, SYNC_SPIN,
};

pub mod daemon;
pub mod dispatch;
pub mod policy;
pub mod profile;
pub mod scenario;
/// The op timeline (`VITAMIN_TRACE`), kept in `vitamin-hal` so that backends mark their driver
/// calls too.
pub use vitamin_hal::trace;
