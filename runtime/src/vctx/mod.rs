//! # vctx: virtual contexts and the happens-before token DAG
//!
//! The logical half of the runtime. A [`VirtualContext`] holds, for one process and device,
//! everything an application can observe about ordering and completion: logical streams,
//! events with immutable generations, recorded ops with their predecessor tokens, and the
//! tokens' completion. It answers every synchronization and query from this logical state,
//! whatever physical context an op ran on.
//!
//! ## Contract
//! - **Recording returns at once.** [`VirtualContext::record_op`] gives the op an [`OpId`] (its
//!   token; ids increase strictly in recording order) and its unsatisfied direct predecessors:
//!   the stream's tail, the legacy-default-stream edges, and the event generations waited on
//!   since the stream's previous op. Ops not ordered by these rules get no edge, directly or
//!   indirectly: any serialization among them is a physical outcome.
//! - **Ready means all happens-before ancestors completed.** An op becomes ready when all its
//!   predecessor tokens retired; since a token retires only after its own predecessors retired,
//!   every transitive ancestor has completed by then. Readiness is pushed to dependents when a
//!   token retires (no scan); [`VirtualContext::take_ready`] hands each ready op out once, in
//!   readiness order.
//! - **Streams** ([`StreamKind`]): a new op depends on its stream's tail; an empty stream's tail
//!   is satisfied. The legacy default stream follows the drivers' documented behaviour: an action on it
//!   (op, event record or wait) first waits for all blocking streams, and later ops of blocking
//!   streams wait for it. Per-thread default streams behave as blocking streams toward the
//!   legacy stream and are unordered with every other stream; non-blocking streams are exempt.
//!   (Details and the quoted documentation in `order.rs`.)
//! - **Events**: [`VirtualContext::record_event`] creates a new immutable generation bound to
//!   the tokens an op recorded there would follow; [`VirtualContext::wait_event`] binds the
//!   generation visible at the time of the wait, so re-recording never retargets an earlier
//!   wait. An event never recorded, or recorded on a stream with no unfinished work, is complete.
//!   Records and waits are pure bookkeeping: no marker ops reach the dispatcher.
//! - **Synchronization and queries**: stream sync/query look at the stream's tail (its frontier:
//!   last op plus later event waits), event sync/query at the generation current at the call,
//!   device sync at every stream's tail including destroyed streams with pending work. Blocking
//!   calls spin for a while ([`VirtualContext::set_sync_spin`], running the wait assist if one
//!   is installed, [`VirtualContext::set_wait_assist`], and it can act on the calling thread,
//!   [`VirtualContext::set_wait_assist_scope`]), then park on a condition variable and
//!   are woken only when a token some blocked thread watches retires, not on every completion;
//!   `*_timeout` variants bound the wait; `*_checked` variants wait in slices and let the
//!   caller end the wait with an error between them ([`Check`]). An assist that establishes the awaited ops complete
//!   (with every ancestor) ends the call at once: the ops are satisfied by the next holder of
//!   the context's lock, before it reads anything, so no caller can observe them live; a
//!   launch-first recording that depends on nothing else launches before it satisfies them.
//! - **Host functions and synchronous operations** are ops like any other, ordered in their
//!   stream; [`VirtualContext::record_synchronous_op`] records one and blocks until it completed.
//! - **Destruction** behaves as natively documented: destroying a stream or event with pending
//!   work returns at once, the work completes, and the handle is invalid from then on. The
//!   default streams cannot be destroyed.
//! - **Errors**: misuse returns a [`VctxError`] named after the native code, never a panic.
//!   An asynchronous failure ([`VirtualContext::fail`]) satisfies the op and becomes a sticky
//!   [`VctxError::LaunchFailed`] reported by every later sync/query of that op's stream and by
//!   device synchronization ([`VirtualContext::sticky_error`] exposes it for other calls).
//!
//! ## Dispatcher protocol
//! `take_ready` -> bind -> [`mark_submitted`](VirtualContext::mark_submitted) -> on completion
//! [`satisfy`](VirtualContext::satisfy) (or [`fail`](VirtualContext::fail)). For lane
//! continuation, [`take_continuable`](VirtualContext::take_continuable) reports once each op that
//! is not ready but whose unsatisfied predecessors are all submitted; an op submitted early this
//! way is never handed out by `take_ready`. Completions may be reported in any order: an op
//! satisfied before its predecessors stays live (counted by
//! [`outstanding`](VirtualContext::outstanding), listed as a predecessor) until they retire,
//! and only then releases its dependents. Satisfying an unknown or retired id is a no-op.
//! [`wait_for_work`](VirtualContext::wait_for_work) parks a dispatcher until a queue has work.
//!
//! Each call is atomic, but a continuable report is a snapshot: the op may become ready (and be
//! handed out by `take_ready`) before the dispatcher acts on the report. This is safe when one
//! submission thread per context takes ready and continuable ops, as in the runtime's design
//! (marking the op submitted first keeps it out of the ready queue); completions may come from
//! any number of threads.
//!
//! ## Memory
//! Retired ops are removed from the op table at once (a window indexed by op id, with an
//! overflow map for long-lived stragglers, so lookups do not hash); queues drop stale entries
//! lazily and are compacted when they outgrow the table; events and streams are removed when
//! destroyed (a destroyed stream's unfinished tail is kept only until it retires), and the
//! per-thread default stream of an exited thread with
//! [`release_per_thread_default_stream`](VirtualContext::release_per_thread_default_stream).
//! Memory is therefore proportional to live ops, streams and events.
//!
//! ## Concurrency
//! All state sits behind one mutex (`parking_lot`; no lock-free code). Host threads blocked in
//! a synchronize call and dispatcher threads blocked in `wait_for_work` use two condition
//! variables; notifications are sent after the lock is released, except those of satisfying the
//! ops a waiting thread left to the next lock holder, sent with the lock held. The `sync` module swaps in
//! loom's primitives under `--cfg loom` so the notify/wait protocol is model-checked.
//!
//! ## Error mapping
//! [`VctxError`] has one variant per native error the logical layer answers with: an invalid
//! handle (code 400 in both vendors' drivers) and a launch failure (719); each interposer maps
//! them to its driver's codes.

mod context;
mod dag;
mod error;
mod ids;
mod order;
mod sync;
mod table;

pub use context::{AssistScope, Check, VirtualContext, WaitAssist, SYNC_SPIN};
pub use dag::{ContinuableOp, ReadyOp, Recorded};
pub use error::{Handle, VctxError};
pub use ids::{EventId, OpId, StreamId, StreamKind, VctxId};
pub use sync::contended_locks;
