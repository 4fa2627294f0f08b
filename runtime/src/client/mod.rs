//! # The client runtime: what every interposer needs, once
//!
//! An interposer (`LD_PRELOAD` library) turns an unmodified application's asynchronous work into
//! ops of one [`VirtualContext`] and lets the in-process coordinator late-bind them to the pool.
//! Everything that does not depend on the vendor's types lives here, so that each interposer keeps
//! only its exported entry points, its type conversion and its hook table:
//! - [`handles`]: the logical stream / event / executable-graph registry (ids with epochs), the
//!   copy rules;
//! - [`capture`]: descriptor capture and validation rules (argument packing, launch shape,
//!   cooperative and cluster constraints); [`functions`]: the per-function cache;
//! - [`Client`]: the record, launch-first, eager and continuation paths, drains, synchronization
//!   and queries answered from logical state, graph-launch ordering;
//! - [`coordinator`]: the dispatcher thread, the wait assist and fast waits;
//! - [`census`] (launch table, kernel census, counters) and the op timeline ([`crate::trace`]);
//! - [`lifecycle`]: started once per process, unavailable for good, disabled after fork;
//! - [`log`]: logging through the interposer's sink; [`guard`]: the re-entry guard.
//!
//! What is vendor-specific reaches it through [`native::PoolBackend`] (implemented by the hal
//! backend) and [`native::NativeApi`] (implemented by the interposer, which owns the table of the
//! driver's real functions).
//!
//! ## One launch, top to bottom
//! 1. The interposer classifies the stream ([`handles::StreamRef`]) and asks [`Client::known_stream`]
//!    (or registers it). A capturing stream is forwarded unchanged (nothing is deferred there).
//! 2. It looks the function up (parameter layout, limits) and validates the launch once
//!    ([`capture::validate`] and the cooperative / cluster checks). A launch that fails takes the
//!    native path ([`Client::drain`], then the driver answers), so errors return synchronously.
//! 3. A plain launch on a stream with no live op tries [`Client::launch_first`]: bound through the
//!    policy's direct answer and launched on the chosen lane with the application's own argument
//!    pointers, before its descriptor is copied and recorded as submitted.
//! 4. Otherwise the descriptor is copied ([`capture::pack_params`]) and recorded with
//!    [`Client::record`]: eagerly bound by the recording thread when it is fresh and the
//!    dispatcher is free, or continued on its predecessors' lane, or left to the dispatcher thread.
//! 5. Synchronization and queries are answered from logical state ([`Client::synchronize_stream`]);
//!    a waiting thread polls its own completions and spins on fence words (the wait assist).
//!
//! ## Bounded waits and bounded memory (docs/robustness.md)
//! Every wait here (synchronize calls, drains, graph-submission waits, the exit) runs in slices
//! ([`WATCH_SLICE`]) and asks [`Coordinator::check_progress`] between them: a dispatcher thread
//! that ended makes it return [`VctxError::RuntimeLost`]; ready work left unbound with nothing in
//! flight, or a dispatcher thread without a turn, for `unbound_timeout_ms` makes it return
//! [`VctxError::Timeout`]. Recording holds the calling thread while `max_outstanding_ops` ops are
//! outstanding ([`Client::hold_while_full`], bounded the same way), and staged pageable bytes in
//! flight are bounded by `max_staged_bytes` ([`Client::stage`]).
//!
//! ## Invariants
//! - Nothing here changes a launch: what is submitted is the application's descriptor, copied at
//!   the call (or, launch-first, the application's own call made on another stream).
//! - Every runtime thread holds the interposer's re-entry guard, so its own driver calls are
//!   forwarded untouched.
//! - Nothing here names a vendor; nothing panics on application input.

pub mod capture;
pub mod census;
pub mod coordinator;
pub mod devices;
pub mod functions;
pub mod guard;
pub mod handles;
pub mod lifecycle;
pub mod log;
pub mod native;
pub mod recent;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use serde_json::{json, Value};
use smallvec::SmallVec;
use vitamin_hal::{Dim3, FunctionKind, FunctionRef, GraphLaunch, HalError, KernelArgs, KernelLaunch, Marker, OpDesc};

use self::census::Stat;
use self::coordinator::{Coordinator, Settings};
use self::handles::{EventEntry, Recorder, Registered, Registry, StreamRef};
use self::log::clog;
use self::native::{HostWait, NativeApi};
use crate::config::LogLevel;
use crate::trace::{self, Tag};
use crate::{EventId, OpId, Recorded, StreamId, StreamKind, VctxError, VctxId, VirtualContext};

/// Counters of what bind mode did (census `bind.ops`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Kernel launches recorded as ops.
    pub kernels: Stat,
    /// Copies recorded as ops.
    pub copies: Stat,
    /// Of those, copies from pageable memory staged at the call.
    pub staged_copies: Stat,
    /// Bytes staged.
    pub staged_bytes: Stat,
    /// Fills recorded as ops.
    pub fills: Stat,
    /// Host functions recorded as ops.
    pub host_functions: Stat,
    /// Graph launches recorded as ops.
    pub graph_launches: Stat,
    /// Calls on an executable graph (update, parameter changes, destroy, upload) that waited for
    /// the submission of its deferred launches.
    pub graph_exec_waits: Stat,
    /// Logical event records.
    pub event_records: Stat,
    /// Logical event waits.
    pub event_waits: Stat,
    /// Synchronizations answered from logical state.
    pub syncs: Stat,
    /// Queries answered from logical state.
    pub queries: Stat,
    /// Calls forwarded unchanged because their stream was capturing.
    pub capturing: Stat,
    /// Launches that failed vitamin's validation (the driver answered, natively).
    pub invalid_launches: Stat,
    /// Calls on the native path because vitamin does not model them.
    pub native_unmodelled: Stat,
    /// Of those, cooperative and cluster launches (compiled-in cluster dimensions, unknown
    /// occupancy).
    pub native_constrained: Stat,
    /// Cooperative and cluster launches recorded as ops (bound only to nodes that hold them).
    pub cooperative_or_cluster: Stat,
    /// Barrier drains before native-path calls.
    pub drains: Stat,
    /// Recording calls that waited because `max_outstanding_ops` ops were outstanding.
    pub held_records: Stat,
    /// Pageable copies run synchronously because `max_staged_bytes` were staged in flight.
    pub staging_full: Stat,
    /// Waits of this device's streams on events another device recorded logically (each waited
    /// on the host for that record to complete).
    pub cross_device_waits: Stat,
}

impl Counters {
    /// The census form.
    pub fn to_json(&self) -> Value {
        json!({
            "kernels": self.kernels.get(), "copies": self.copies.get(), "staged_copies": self.staged_copies.get(),
            "staged_bytes": self.staged_bytes.get(), "fills": self.fills.get(),
            "host_functions": self.host_functions.get(), "graph_launches": self.graph_launches.get(),
            "graph_exec_waits": self.graph_exec_waits.get(), "event_records": self.event_records.get(),
            "event_waits": self.event_waits.get(), "syncs_answered": self.syncs.get(),
            "queries_answered": self.queries.get(), "forwarded_capturing": self.capturing.get(),
            "invalid_launches": self.invalid_launches.get(), "native_unmodelled": self.native_unmodelled.get(),
            "native_cooperative_or_cluster": self.native_constrained.get(),
            "cooperative_or_cluster": self.cooperative_or_cluster.get(),
            "drains": self.drains.get(), "held_records": self.held_records.get(),
            "staging_full": self.staging_full.get(), "cross_device_waits": self.cross_device_waits.get(),
        })
    }
}

/// The client state of one process and device: the application's virtual context, its handle
/// registry and the coordinator.
#[derive(Debug)]
pub struct Client<N: NativeApi> {
    /// The application's virtual context.
    pub vctx: Arc<VirtualContext>,
    registry: Mutex<Registry>,
    /// How it schedules.
    pub settings: Settings,
    /// The coordinator (dispatcher thread and the application threads' fast paths).
    pub coordinator: Arc<Coordinator<N>>,
    native: Arc<N>,
    /// What was done.
    pub counters: Counters,
    /// Staged pageable bytes of copies still in flight ([`Client::stage`]).
    staging: Mutex<handles::StagingBudget>,
    /// Logical streams handed to the driver ([`Client::hand_to_driver`]); `any_handed` is set
    /// once there is one, so the usual check reads one atomic.
    handed: Mutex<HashSet<StreamId>>,
    any_handed: AtomicBool,
}

/// How long a synchronize call spins (polling) before it parks, unless the application asked
/// for blocking synchronization: natively the driver spins for the whole wait by default.
const SPIN_WAIT: Duration = Duration::from_secs(1);

/// How often a bounded wait asks the coordinator whether it can still end by itself
/// ([`Client::bounded`]): often enough that a dead dispatcher is reported within a fraction of a
/// second, rarely enough to cost nothing (a parked waiter wakes 10 times a second).
const WATCH_SLICE: Duration = Duration::from_millis(100);

/// Marks the op timeline trace keeps (`VITAMIN_TRACE`; 24 bytes each).
const TRACE_MARKS: usize = 2_000_000;

impl<N: NativeApi> Client<N> {
    /// Starts the coordinator for device `ordinal` (the pool is realized before this returns) and
    /// sets how synchronize calls wait: like the application asked (`host_wait`), spinning and
    /// polling completions themselves unless it chose blocking synchronization.
    pub fn start(native: N, ordinal: i32, settings: Settings, host_wait: HostWait) -> Result<Client<N>, String> {
        let native = Arc::new(native);
        let vctx = Arc::new(VirtualContext::new(VctxId(std::process::id())));
        if trace_path().is_some() {
            trace::start(TRACE_MARKS);
        }
        let t = settings.tuning;
        let coordinator = Arc::new(Coordinator::start(native.clone(), ordinal, vctx.clone(), settings.clone())?);
        let blocking = host_wait == HostWait::BlockingSync;
        vctx.set_sync_spin(t.sync_spin.unwrap_or(if blocking { crate::SYNC_SPIN } else { SPIN_WAIT }));
        // The driver spins without yielding unless the application asked it to yield (or has
        // more contexts than CPUs, which one primary context on a multi-core host never has).
        vctx.set_sync_yield(t.sync_yield.unwrap_or(host_wait == HostWait::Yield));
        // Spinning waiters poll completions themselves (the default), or (experimental) wait
        // natively on their lanes (not under blocking synchronization).
        if t.wait_assist || (t.native_wait && !blocking) {
            vctx.set_wait_assist(wait_assist(Arc::downgrade(&coordinator), t.wait_assist));
            if t.wait_assist {
                // Completion polling runs only where the device's pool context is current; a
                // thread waiting with another device's context current (or none) leaves the
                // polling to the dispatcher thread, which then records the lanes' fences.
                let native = native.clone();
                vctx.set_wait_assist_scope(Box::new(move || native.in_pool_context()));
            }
        }
        Ok(Client {
            vctx,
            registry: Mutex::new(Registry::default()),
            settings,
            coordinator,
            native,
            counters: Counters::default(),
            staging: Mutex::new(handles::StagingBudget::new(t.max_staged_bytes)),
            handed: Mutex::new(HashSet::new()),
            any_handed: AtomicBool::new(false),
        })
    }

    /// Runs `wait` (a checked wait of the virtual context) bounded: between its slices of
    /// [`WATCH_SLICE`] the coordinator says whether the wait can still end by itself
    /// ([`Coordinator::check_progress`]); if not, the wait returns that error
    /// ([`VctxError::Timeout`] or [`VctxError::RuntimeLost`]) instead of waiting forever.
    fn bounded<T>(&self, wait: impl FnOnce(crate::vctx::Check<'_>) -> Result<T, VctxError>) -> Result<T, VctxError> {
        let mut seen = self.coordinator.progress();
        let mut check = || self.coordinator.check_progress(&mut seen);
        wait(crate::vctx::Check { slice: WATCH_SLICE, f: &mut check })
    }

    /// Holds a recording call while `max_outstanding_ops` recorded ops are outstanding (not
    /// retired), as a native launch blocks while the driver's queue is full, so that a program
    /// that never synchronizes keeps a bounded amount of recorded work; bounded like a
    /// synchronize call. Lock-free when below the bound.
    fn hold_while_full(&self) -> Result<(), VctxError> {
        let max = self.settings.tuning.max_outstanding;
        if self.vctx.outstanding_hint() < max {
            return Ok(());
        }
        self.counters.held_records.bump();
        let mut seen = self.coordinator.progress();
        let mut slice_end = std::time::Instant::now() + WATCH_SLICE;
        let mut turns = 0u32;
        while self.vctx.outstanding_hint() >= max {
            // Completions come from the dispatcher thread's polls (every poll interval while work
            // is in flight): spin briefly, then sleep in short naps.
            turns += 1;
            if turns < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
            if std::time::Instant::now() >= slice_end {
                self.coordinator.check_progress(&mut seen)?;
                slice_end = std::time::Instant::now() + WATCH_SLICE;
            }
        }
        Ok(())
    }

    /// A copy of pageable source bytes `data` for a staged copy, or `None` when
    /// `max_staged_bytes` are already staged by copies in flight (the copy then runs
    /// synchronously, on the native path). Staged bytes count until every descriptor holding
    /// them is gone.
    pub fn stage(&self, data: &[u8]) -> Option<Arc<[u8]>> {
        let staged = self.staging.lock().unwrap_or_else(|e| e.into_inner()).stage(data);
        if staged.is_none() {
            self.counters.staging_full.bump();
        }
        staged
    }

    /// The handle registry.
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records with `record` and, under inline submission, lets this (application) thread submit
    /// what became ready if the dispatcher is free and the thread's current context is the one
    /// the pool was built in (the backend would otherwise switch the application's current
    /// context). `record` returns its result and whether it recorded an op.
    pub fn record_inline<T>(&self, record: impl FnOnce() -> (T, bool)) -> T {
        if self.settings.tuning.inline && self.native.in_pool_context() {
            self.coordinator.record_inline(record)
        } else {
            record().0
        }
    }

    /// Records an op, eagerly bound by this thread when it is fresh, the dispatcher is free and
    /// the thread's current context is the pool's ([`Coordinator::record_eager`]; `eager`,
    /// on by default; the same context condition as inline submission). Inline submission (an
    /// experiment, off) takes precedence.
    pub fn record_op(&self, s: StreamId, desc: Arc<OpDesc>) -> Result<Recorded, VctxError> {
        let t = &self.settings.tuning;
        if t.eager && !t.inline {
            // The context is asked only for a fresh op (a driver call, kept off the path of ops
            // that wait for predecessors).
            let in_pool_context = || self.native.in_pool_context();
            let continue_too = t.eager_continue || take_continue_budget();
            self.coordinator.record_eager(&self.vctx, s, desc, continue_too, in_pool_context)
        } else {
            self.vctx.record_op(s, desc)
        }
    }

    /// Records `desc` on `s` (the usual path of every op: [`record_inline`](Self::record_inline)
    /// around [`record_op`](Self::record_op)), first held while `max_outstanding_ops` ops are
    /// outstanding ([`hold_while_full`](Self::hold_while_full)).
    pub fn record(&self, s: StreamId, desc: OpDesc) -> Result<OpId, VctxError> {
        // Held before inline submission takes the dispatcher lock, which completions need.
        self.hold_while_full()?;
        self.record_inline(|| match self.record_op(s, Arc::new(desc)) {
            Ok(r) => {
                trace::mark(Tag::LaunchExit, r.op.0);
                (Ok(r.op), true)
            }
            Err(e) => (Err(e), false),
        })
    }

    /// Launch-first eager binding (`launch_first`, on by default): a plain launch of `f`
    /// (no argument buffer, attributes, cooperative flag or dynamic shared memory), already
    /// validated, whose arguments are all given, on stream `s`. If `s` holds no live op, the
    /// settings allow it and this thread's current context is the pool's, it is handed to
    /// [`Coordinator::launch_first`], which launches it with `launch` (the application's own
    /// argument pointers, on the lane stream it is given) before `capture` copies the
    /// descriptor. `None`: not applicable, the usual path follows; `Some(Err)`: the driver
    /// refused the launch (nothing recorded, as natively).
    pub fn launch_first(
        &self,
        s: StreamId,
        f: FunctionRef,
        grid: Dim3,
        block: Dim3,
        launch: impl FnMut(u64) -> Result<(), HalError>,
        capture: impl FnOnce() -> Option<OpDesc>,
    ) -> Option<Result<(), HalError>> {
        let t = &self.settings.tuning;
        // A live op on the stream (a dependent chain): the op would not be fresh. Read without
        // the vCtx lock, which the locked check would otherwise take (and find the op not
        // fresh) at every launch of a chain, before the record path takes it again.
        if !(t.launch_first && t.eager && !t.inline) || self.vctx.stream_has_live_op(s) {
            return None;
        }
        if self.vctx.outstanding_hint() >= t.max_outstanding {
            return None; // the record path holds the call until there is room
        }
        if !self.native.in_pool_context() {
            return None;
        }
        trace::step(5);
        let probe = launch_probe(f, grid, block);
        trace::step(6);
        match self.coordinator.launch_first(&self.vctx, s, &probe, launch, capture)? {
            Ok(r) => {
                self.counters.kernels.bump();
                set_continue_budget(t.eager_continue_ops);
                trace::mark(Tag::LaunchExit, r.op.0);
                Some(Ok(()))
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// The logical stream of a known stream reference (default streams always are). A thread's
    /// per-thread default stream is released when the thread exits.
    pub fn known_stream(&self, r: StreamRef) -> Option<StreamId> {
        match r {
            StreamRef::Legacy => Some(StreamId::LEGACY),
            StreamRef::PerThread => {
                let key = thread_key();
                release_at_thread_exit(&self.vctx, key);
                Some(self.vctx.per_thread_default_stream(key))
            }
            StreamRef::Handle(h) => self.registry().stream(h),
        }
    }

    /// Registers application stream `handle` as a new logical stream.
    pub fn register_stream(&self, handle: usize, kind: StreamKind, priority: i32) -> StreamId {
        let id = self.vctx.create_stream(kind, priority);
        self.registry().add_stream(handle, id);
        id
    }

    /// Destroys application stream `handle` with `destroy` (the driver's call, whose result it
    /// returns; `ok`: it succeeded), then forgets this mapping of it. Work already recorded on it
    /// still completes, and still counts for device synchronization, as natively. The mapping is looked up before
    /// the driver frees the handle, so a stream another thread creates meanwhile, to which the
    /// driver hands the same value, keeps its own mapping.
    pub fn destroy_stream<R>(&self, handle: usize, destroy: impl FnOnce() -> R, ok: impl FnOnce(&R) -> bool) -> R {
        let (r, gone) = handles::destroy_stream_mapping(&self.registry, handle, destroy, ok);
        if let Some(s) = gone {
            self.handed.lock().unwrap_or_else(|e| e.into_inner()).remove(&s);
            let _ = self.vctx.destroy_stream(s);
        }
        r
    }

    /// Registers a new application event.
    pub fn register_event(&self, handle: usize, make: impl FnOnce(EventId) -> EventEntry) -> Registered {
        let e = self.vctx.create_event();
        self.registry().add_event(handle, make(e))
    }

    /// Destroys application event `handle` with `destroy`, then forgets this mapping of it (as
    /// [`destroy_stream`](Self::destroy_stream): a pending record still completes; a reused
    /// handle keeps its new mapping).
    pub fn destroy_event<R>(&self, handle: usize, destroy: impl FnOnce() -> R, ok: impl FnOnce(&R) -> bool) -> R {
        let (r, gone) = handles::destroy_event_mapping(&self.registry, handle, destroy, ok);
        if let Some(e) = gone {
            let _ = self.vctx.destroy_event(e.id);
        }
        r
    }

    /// Hands logical stream `s` to the driver: it received a native wait on a condition outside
    /// the stream (a memory value, an external semaphore), which a host wait cannot stand in for
    /// (the condition may be met by work issued later), so every later call on `s` is forwarded
    /// natively after a drain, in the driver's stream order.
    pub fn hand_to_driver(&self, s: StreamId) {
        self.handed.lock().unwrap_or_else(|e| e.into_inner()).insert(s);
        self.any_handed.store(true, Ordering::Release);
    }

    /// Whether `s` was handed to the driver.
    pub fn handed_to_driver(&self, s: StreamId) -> bool {
        self.any_handed.load(Ordering::Acquire) && self.handed.lock().unwrap_or_else(|e| e.into_inner()).contains(&s)
    }

    /// Whether the calling thread's current context is the one the pool was built in (work
    /// from any other context or device is forwarded natively).
    pub fn in_pool_context(&self) -> bool {
        self.native.in_pool_context()
    }

    /// Waits until everything the application enqueued on `s` before now completed, with the
    /// legacy-default-stream edges an action on `s` has (a barrier op).
    pub fn drain(&self, s: StreamId) -> Result<(), VctxError> {
        if self.vctx.outstanding() == 0 {
            return Ok(());
        }
        self.counters.drains.bump();
        self.hold_while_full()?;
        let op = self.vctx.record_op(s, Arc::new(OpDesc::Marker(Marker::Barrier)))?.op;
        self.bounded(|check| self.vctx.op_synchronize_checked(op, s, check))
    }

    /// A stream synchronization answered from logical state.
    pub fn synchronize_stream(&self, s: StreamId) -> Result<(), VctxError> {
        self.counters.syncs.bump();
        trace::mark(Tag::SyncEnter, u64::from(s.0));
        let r = self.bounded(|check| self.vctx.stream_synchronize_checked(s, check));
        trace::mark(Tag::SyncExit, u64::from(s.0));
        r
    }

    /// A stream query answered from logical state: whether all its work completed.
    pub fn query_stream(&self, s: StreamId) -> Result<bool, VctxError> {
        self.counters.queries.bump();
        self.vctx.stream_query(s)
    }

    /// An event synchronization answered from logical state.
    pub fn synchronize_event(&self, e: EventId) -> Result<(), VctxError> {
        self.counters.syncs.bump();
        self.bounded(|check| self.vctx.event_synchronize_checked(e, check))
    }

    /// An event query answered from logical state.
    pub fn query_event(&self, e: EventId) -> Result<bool, VctxError> {
        self.counters.queries.bump();
        self.vctx.event_query(e)
    }

    /// A logical record of the event mapped as `id` on `s`.
    pub fn record_event(&self, id: Registered, entry: EventEntry, s: StreamId) -> Result<(), VctxError> {
        self.counters.event_records.bump();
        self.vctx.record_event(entry.id, s)?;
        self.registry().set_recorder(id, Recorder::Logical);
        Ok(())
    }

    /// Notes that the driver recorded the event mapped as `id` (on `s`, after a drain, when
    /// `s` is given: the logical generation then follows the stream too).
    pub fn note_native_record(&self, id: Registered, entry: EventEntry, s: Option<StreamId>) {
        if let Some(s) = s {
            let _ = self.vctx.record_event(entry.id, s);
        }
        self.registry().set_recorder(id, Recorder::Native);
    }

    /// A logical wait of `s` on event `e`'s current generation.
    pub fn wait_event(&self, s: StreamId, e: EventId) -> Result<(), VctxError> {
        self.counters.event_waits.bump();
        self.vctx.wait_event(s, e)
    }

    /// A device synchronization answered from logical state.
    pub fn synchronize_device(&self) -> Result<(), VctxError> {
        self.counters.syncs.bump();
        self.bounded(|check| self.vctx.device_synchronize_checked(check))
    }

    /// The driver's implicit device synchronization before a memory free.
    pub fn synchronize_before_free(&self) {
        if self.vctx.outstanding() > 0 {
            self.counters.drains.bump();
            if let Err(e) = self.bounded(|check| self.vctx.device_synchronize_checked(check)) {
                clog!(LogLevel::Warn, "free after a failed operation: {e}");
            }
        }
    }

    /// Records a launch of executable graph `exec` on `s` as one op, ordered behind the previous
    /// launch of the same executable graph through the graph's logical ordering event, as the
    /// driver orders launches of one executable graph whatever their streams.
    pub fn record_graph_launch(&self, s: StreamId, exec: usize) -> Result<OpId, VctxError> {
        self.record_graph_launch_with(s, exec, None)
    }

    /// [`Self::record_graph_launch`] of a graph the backend can confine to a partition through
    /// `copies` (see [`vitamin_hal::GraphLaunch::copies`]); `None` as `record_graph_launch`.
    pub fn record_graph_launch_with(
        &self,
        s: StreamId,
        exec: usize,
        copies: Option<Arc<dyn vitamin_hal::PartitionCopies>>,
    ) -> Result<OpId, VctxError> {
        self.hold_while_full()?;
        let mut registry = self.registry();
        let (order, name) = {
            let entry = registry.graph_exec_or_insert(exec, || self.vctx.create_event());
            (entry.order, entry.name.clone())
        };
        Self::wait_logically_recorded_events(&self.vctx, &registry, s)?;
        let launch = GraphLaunch::new(exec as u64, name);
        let desc = Arc::new(OpDesc::Graph(match copies {
            Some(c) => launch.with_copies(c),
            None => launch,
        }));
        let op = self.vctx.wait_event(s, order).and_then(|()| self.vctx.record_op(s, desc))?.op;
        self.vctx.record_event(order, s)?;
        registry.graph_exec_or_insert(exec, || order).note_launch(op, |o| self.vctx.is_submitted(o));
        self.counters.graph_launches.bump();
        Ok(op)
    }

    /// Makes the next op of `s` (a graph launch) wait for every logically recorded event: an
    /// event-wait node of the graph waits on the driver's event, which a logical record never
    /// touched. Records made before it only, so no cycle; more order than the graph asks for,
    /// never less. A graph launch on the native path calls it before its drain.
    pub fn wait_for_logical_events(&self, s: StreamId) -> Result<(), VctxError> {
        Self::wait_logically_recorded_events(&self.vctx, &self.registry(), s)
    }

    fn wait_logically_recorded_events(
        vctx: &VirtualContext,
        registry: &Registry,
        s: StreamId,
    ) -> Result<(), VctxError> {
        for e in registry.logically_recorded_events() {
            vctx.wait_event(s, e)?;
        }
        Ok(())
    }

    /// Makes the next op of `s` wait for the last recorded launch of executable graph `exec` (its
    /// hidden ordering event). A launch on the native path calls it before its drain: the driver
    /// orders launches of one executable graph, but not a launch of the application's graph behind
    /// a launch of a partition's copy of it.
    pub fn wait_graph_order(&self, s: StreamId, exec: usize) -> Result<(), VctxError> {
        let order = self.registry().graph_exec(exec).map(|e| e.order);
        match order {
            Some(order) => self.vctx.wait_event(s, order),
            None => Ok(()),
        }
    }

    /// Blocks until every launch of `exec` recorded as an op was handed to the driver (on a pool
    /// node's stream), so that a call on the executable graph cannot overtake them. Submission
    /// suffices: the driver finishes launches it holds with the graph as it was when they were
    /// launched, whatever is updated or destroyed afterwards, exactly as natively. A launch the
    /// dispatcher submitted may still sit with the submission thread: that is flushed too (for
    /// every graph this process launched in bind mode, since launches already reported submitted
    /// are no longer tracked; a flush with nothing pending is one atomic comparison).
    pub fn wait_graph_launches_submitted(&self, exec: usize) -> Result<(), VctxError> {
        let pending = match self.registry().graph_exec(exec) {
            Some(e) => e.pending.clone(),
            None => return Ok(()),
        };
        if !pending.iter().all(|&o| self.vctx.is_submitted(o)) {
            self.counters.graph_exec_waits.bump();
            let mut seen = self.coordinator.progress();
            while !self.vctx.wait_submitted_timeout(&pending, WATCH_SLICE) {
                self.coordinator.check_progress(&mut seen)?;
            }
        }
        self.coordinator.flush_submissions();
        Ok(())
    }

    /// Forgets destroyed executable graph `exec`.
    pub fn destroy_graph_exec(&self, exec: usize) {
        let removed = self.registry().remove_graph_exec(exec);
        if let Some(e) = removed {
            let _ = self.vctx.destroy_event(e.order);
        }
    }

    /// The census section of a started client.
    pub fn census_json(&self) -> Value {
        let (streams, events, graph_execs) = {
            let r = self.registry();
            let (s, e) = r.counts();
            (s, e, r.graph_exec_count())
        };
        let started = &self.coordinator.started;
        json!({
            "device": started.device,
            "realize_ms": started.realize_ms,
            "nodes": started.nodes,
            "ops": self.counters.to_json(),
            "streams_mapped": streams,
            "events_mapped": events,
            "graph_execs_mapped": graph_execs,
            "per_thread_streams": self.vctx.per_thread_default_streams(),
            "streams_handed_to_driver": self.handed.lock().unwrap_or_else(|e| e.into_inner()).len(),
            "dispatcher": self.coordinator.stats(),
        })
    }

    /// At process exit: lets enqueued work complete (as it would natively), stops the
    /// dispatcher thread and writes the op timeline (`VITAMIN_TRACE`).
    pub fn shutdown(&self) {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        let mut seen = self.coordinator.progress();
        let mut check = || {
            self.coordinator.check_progress(&mut seen)?;
            if std::time::Instant::now() >= until {
                return Err(VctxError::Timeout("exit: enqueued work did not complete within 60 s".into()));
            }
            Ok(())
        };
        let done = self.vctx.device_synchronize_checked(crate::vctx::Check { slice: WATCH_SLICE, f: &mut check });
        if let Err(e) = done {
            clog!(LogLevel::Warn, "exit: enqueued work did not complete: {e}");
        }
        if !self.coordinator.stop(Duration::from_secs(5)) {
            clog!(LogLevel::Warn, "exit: the dispatcher thread did not stop within 5 s");
        }
        if let Some(path) = trace_path() {
            write_trace(&path);
        }
    }
}

/// The wait assist of bind mode's virtual context: completion polling by the waiting thread
/// (`wait_assist`, on by default, [`Coordinator::assist_wait`]) or, with it off, native
/// waits on the awaited ops' lanes (`native_wait=1`, experimental,
/// [`Coordinator::native_wait`]).
fn wait_assist<N: NativeApi>(coordinator: Weak<Coordinator<N>>, polls: bool) -> crate::WaitAssist {
    Box::new(move |ops: &[OpId]| {
        let Some(c) = coordinator.upgrade() else {
            std::thread::yield_now();
            return false;
        };
        if polls {
            // Only called in its scope (`Client::start`): the device's pool context is current.
            return c.assist_wait(ops);
        }
        let done = c.native_wait(ops);
        if !done {
            std::thread::yield_now();
        }
        done
    })
}

thread_local! {
    /// How many more ops this thread continues on their predecessors' lane itself
    /// ([`coordinator::Tuning::eager_continue_ops`]), counted down from its last launch-first launch.
    static CONTINUE_BUDGET: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A launch-first launch of this thread: the next `ops` ops it records are continued on their
/// predecessors' lane by this thread when the dispatcher is free
/// ([`coordinator::Tuning::eager_continue_ops`]).
fn set_continue_budget(ops: u32) {
    CONTINUE_BUDGET.with(|b| b.set(ops));
}

/// Whether the op this thread records now is one of those [`set_continue_budget`] counted.
fn take_continue_budget() -> bool {
    CONTINUE_BUDGET.with(|b| {
        let left = b.get();
        b.set(left.saturating_sub(1));
        left > 0
    })
}

/// A launch-first probe's key: function handle, kind, grid and block.
type ProbeKey = (u64, FunctionKind, [u32; 3], [u32; 3]);

thread_local! {
    /// Probes (function and shape, no arguments) this thread built for launch-first.
    static LAUNCH_PROBES: recent::Recent<ProbeKey, Arc<OpDesc>> = std::cell::RefCell::new(SmallVec::new());
}

/// The launch-first probe of a launch of `f` with this grid and block: this thread's cached one
/// when it launched the same shape recently, else a new one (kept, the oldest of
/// [`recent::ENTRIES`] dropped). Building one costs an allocation and a reference count on the
/// function's name that other threads' descriptors share: about 1 us before the driver call on
/// the H200 host (a trace of the 8-kernel operator, docs/results/shim-bind-overhead.md), where an
/// operator repeats one shape.
pub fn launch_probe(f: FunctionRef, grid: Dim3, block: Dim3) -> Arc<OpDesc> {
    let key = (f.handle(), f.kind(), [grid.x, grid.y, grid.z], [block.x, block.y, block.z]);
    recent::get_or_make(&LAUNCH_PROBES, key, || {
        Arc::new(OpDesc::Kernel(KernelLaunch::new(
            f,
            grid,
            block,
            0,
            KernelArgs::empty(),
            vitamin_hal::LaunchAttributes::default(),
        )))
    })
}

/// Releases the per-thread default streams of the calling thread when it exits.
struct PerThreadRelease(Vec<(Weak<VirtualContext>, u64)>);

impl Drop for PerThreadRelease {
    fn drop(&mut self) {
        for (vctx, key) in self.0.drain(..) {
            if let Some(v) = vctx.upgrade() {
                v.release_per_thread_default_stream(key);
            }
        }
    }
}

thread_local! {
    static PER_THREAD_RELEASE: std::cell::RefCell<PerThreadRelease> =
        const { std::cell::RefCell::new(PerThreadRelease(Vec::new())) };
}

/// Arranges that `vctx` forgets the per-thread default stream `key` when this thread exits
/// (its recorded work still completes); once per virtual context and thread.
fn release_at_thread_exit(vctx: &Arc<VirtualContext>, key: u64) {
    let _ = PER_THREAD_RELEASE.try_with(|r| {
        let Ok(mut r) = r.try_borrow_mut() else { return };
        if !r.0.iter().any(|(v, _)| std::ptr::eq(v.as_ptr(), Arc::as_ptr(vctx))) {
            r.0.push((Arc::downgrade(vctx), key));
        }
    });
}

/// The calling thread's key for its per-thread default stream (its kernel thread id).
fn thread_key() -> u64 {
    thread_local! {
        static KEY: u64 = u64::from(rustix::thread::gettid().as_raw_nonzero().get().unsigned_abs());
    }
    KEY.try_with(|k| *k).unwrap_or(0)
}

/// `VITAMIN_TRACE`: where to write the op timeline trace at exit (`%p`: the process id).
fn trace_path() -> Option<std::path::PathBuf> {
    let t = crate::config::process().get("VITAMIN_TRACE").filter(|t| !t.is_empty())?;
    Some(t.replace("%p", &std::process::id().to_string()).into())
}

fn write_trace(path: &std::path::Path) {
    let written = std::fs::File::create(path).and_then(|f| {
        let mut w = std::io::BufWriter::new(f);
        let n = trace::write_csv(&mut w)?;
        std::io::Write::flush(&mut w)?;
        Ok(n)
    });
    match written {
        Ok(n) => clog!(LogLevel::Info, "trace: {n} marks written to {}", path.display()),
        Err(e) => clog!(LogLevel::Error, "trace: could not write {}: {e}", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_first_launch_lets_its_thread_continue_the_next_ops_it_records() {
        assert!(!take_continue_budget(), "no launch-first launch yet");
        set_continue_budget(2);
        assert!(take_continue_budget() && take_continue_budget());
        assert!(!take_continue_budget() && !take_continue_budget(), "the budget is spent");
        // Another launch-first launch sets it again (not added to what is left); 0 turns it off.
        set_continue_budget(1);
        set_continue_budget(1);
        assert!(take_continue_budget() && !take_continue_budget());
        set_continue_budget(0);
        assert!(!take_continue_budget());
        // Per thread: another thread's launch gives this one nothing.
        std::thread::spawn(|| set_continue_budget(5)).join().unwrap();
        assert!(!take_continue_budget());
    }

    fn dim(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }

    #[test]
    fn launch_first_probes_are_reused_per_function_kind_and_shape_only() {
        let name = "layer";
        let f = |h: u64, kind| FunctionRef::with_static_name(h, kind, name);
        let a = launch_probe(f(7, FunctionKind::Function), dim(528), dim(256));
        let again = launch_probe(f(7, FunctionKind::Function), dim(528), dim(256));
        assert!(Arc::ptr_eq(&a, &again));
        let k = a.as_kernel().expect("a kernel probe");
        assert_eq!((k.function().handle(), k.grid(), k.block()), (7, dim(528), dim(256)));
        assert!(k.args().bytes().is_empty(), "a probe carries no argument bytes");
        for other in [
            launch_probe(f(7, FunctionKind::Function), dim(529), dim(256)),
            launch_probe(f(7, FunctionKind::Function), dim(528), dim(128)),
            launch_probe(f(7, FunctionKind::Kernel), dim(528), dim(256)),
            launch_probe(f(8, FunctionKind::Function), dim(528), dim(256)),
        ] {
            assert!(!Arc::ptr_eq(&a, &other));
            let o = other.as_kernel().expect("a kernel probe");
            assert!(
                o.function().handle() != 7
                    || o.grid() != dim(528)
                    || o.block() != dim(256)
                    || o.function().kind() != k.function().kind()
            );
        }
        // Eight more shapes push the first one out: it is built anew.
        for g in 1..=recent::ENTRIES as u32 {
            launch_probe(f(9, FunctionKind::Function), dim(g), dim(32));
        }
        let rebuilt = launch_probe(f(7, FunctionKind::Function), dim(528), dim(256));
        assert!(!Arc::ptr_eq(&a, &rebuilt));
    }
}
