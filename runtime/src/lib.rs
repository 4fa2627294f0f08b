//! # vitamin-runtime: late binding of unchanged launches to physical partitions
//!
//! Vendor-neutral (it never names CUDA or HIP). Layers, each a folder:
//! - `vctx`: virtual contexts: logical streams, events with immutable generations, ops with
//!   predecessor tokens; answers every ordering/completion question an application can ask.
//! - `pool`: the hierarchical pool of pre-created physical contexts and the lease state machine.
//! - `dispatch`: binds ready ops to pool nodes (validated policy proposals, lane continuation).
//! - `policy`: Pick / Select / Prepare and the shipped policies.
//!
//! Filled in by the vCtx, pool and dispatcher issues.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod pool;
pub mod vctx;

pub use pool::{HolderId, NodeId, NodeState, Pool, PoolError, Realized, Reservation};
pub use vctx::{
    ContinuableOp, EventId, OpId, ReadyOp, Recorded, StreamId, StreamKind, VctxError, VctxId, VirtualContext,
};

pub mod dispatch;
pub mod policy;
pub mod profile;
pub mod scenario;
