//! # Bind mode (`VITAMIN_MODE=bind`): late-binding every launch of an unmodified application
//!
//! Asynchronous operations become ops of one [`VirtualContext`] (the application's logical
//! streams, events and happens-before order) with immutable descriptors, and the in-process
//! coordinator ([`coordinator`]) dispatches them through the runtime's dispatcher onto the green
//! context pool, under the policy `VITAMIN_POLICY` selects. The application sees native semantics:
//! synchronization and queries are answered from logical state, and everything vitamin does not
//! model takes the **native path**.
//!
//! ## What becomes an op
//! - Kernel launches (`cuLaunchKernel`, `cuLaunchKernelEx`, `cuLaunchCooperativeKernel`, each with
//!   its `_ptsz` variant): descriptor captured at the call ([`capture`], [`function`]): function,
//!   grid, block, dynamic shared memory, argument bytes copied by the parameter layout, attributes
//!   deep-copied. Cooperative and cluster launches included: the dispatcher offers them only the
//!   pool nodes whose SMs hold all their blocks at once (co-residency) or their clusters (cluster
//!   occupancy); one that not even the whole device holds is refused at the call (the native path,
//!   so the driver's own error, e.g. `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`, returns
//!   synchronously), as is one whose grid is not a whole number of clusters.
//! - `cuMemcpyAsync`, `cuMemcpyHtoDAsync`, `cuMemcpyDtoHAsync`, `cuMemcpyDtoDAsync`: copy ops
//!   ([`handles::plan_copy`]); a pageable source is staged at the call.
//! - `cuMemsetD8/16/32Async`: fill ops. `cuLaunchHostFunc`: a host-function op, ordered in its
//!   stream like any other.
//! - `cuGraphLaunch`: **one** graph-launch op, which the dispatcher binds as a whole to one pool
//!   node (the policy's `select_graph`), so every kernel of the graph runs on that node's SMs. Each
//!   launch of an executable graph is also ordered behind its previous launch (a hidden logical
//!   event per `CUgraphExec`), as the driver orders launches of one executable graph whatever
//!   their streams. Calls that change or destroy an executable graph (`cuGraphExecUpdate`,
//!   `cuGraphExec*NodeSetParams`, `cuGraphExec*NodeSetEvent`, `cuGraphNodeSetEnabled`,
//!   `cuGraphExecDestroy`) and `cuGraphUpload` first wait until that graph's deferred launches were
//!   **submitted** (handed to the driver on a pool node's stream), then pass through. Submission,
//!   not completion, is enough: the driver finishes launches it holds with the graph as it was
//!   when they were launched and defers the destruction of an executable graph in flight, exactly
//!   as natively; waiting for completion would add a synchronization the application never asked
//!   for. Instantiation passes through untouched.
//! - Event records and stream waits on events: logical generations (no device work).
//!
//! ## What is answered from logical state
//! `cuStreamQuery`, `cuStreamSynchronize`, `cuEventQuery`, `cuEventSynchronize` (events recorded
//! logically), `cuCtxSynchronize` (logical device synchronization, then the driver's own, which also
//! reports native errors). Queries report not-ready for work vitamin still holds; an asynchronous
//! failure of an op is reported by the next synchronization or query of its stream (code 719) and
//! of the device.
//!
//! ## The native path
//! Anything vitamin does not model, and anything it declines to defer, goes to the driver exactly
//! as the application called it, after **draining** the logical stream (a barrier op on it, which
//! also carries the legacy-default-stream edges, waited for), and followed, for calls that enqueue
//! work, by a wait for the application's native stream, so later logical ops follow it. This covers:
//! launches that fail validation (the driver returns its own error, synchronously) or use forms
//! vitamin does not model (cluster dimensions compiled into the function, launch attributes that
//! make the driver record events); device-to-pageable copies (they must be complete when the call
//! returns); 2-D/3-D/peer/array copies and 2-D fills; synchronous copies and fills (on the default
//! stream); `cuStreamAddCallback`; `cuMemFreeAsync`; stream capture begins; timing and
//! interprocess event records (so the driver's timestamps and IPC waits stay real).
//! Memory frees (`cuMemFree`, `cuMemFreeHost`) first synchronize the device logically (the
//! driver's implicit synchronization).
//!
//! ## Capture
//! Nothing is deferred on a capturing stream: while any capture is active, each call asks the
//! driver whether its stream is capturing and, if so, forwards unchanged (the work is recorded
//! into the application's graph, natively), so capture queries stay truthful. Ops on the legacy
//! stream while a capture is active take the native path (the driver decides whether they are
//! legal).
//!
//! ## Start-up and fallback
//! Nothing happens at load time. The first bind-mode call made with a current context starts the
//! coordinator (green contexts realized off the path of every later launch). Bind mode needs the
//! application to run on its device's primary context (the CUDA runtime and PyTorch do); otherwise,
//! or if the backend cannot start (no green contexts), the process keeps running in observe mode
//! and the census says why. A forked child runs in observe mode (no dispatcher thread in it).
//!
//! ## Not yet done (see docs/shim.md)
//! Per-thread default streams of exited threads are not released; launches on contexts other than
//! the primary one, and multi-device processes, are not supported. Event record and wait nodes
//! inside a graph act on the driver's events only: a logically recorded event is not updated by a
//! graph's event-record node.

pub(crate) mod calls;
pub mod capture;
mod coordinator;
mod driver;
mod function;
pub mod handles;
mod recent;

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use std::collections::HashMap;

use serde_json::{json, Value};
use vitamin_hal::{Dim3, Marker, OpDesc};
use vitamin_runtime::{StreamId, VctxError, VctxId, VirtualContext};

use self::coordinator::{Coordinator, Settings, Tuning};
use self::function::Functions;
use self::handles::{classify_stream, Registry, StreamRef, CU_STREAM_NON_BLOCKING};
use crate::census::Stat;
use crate::config::{LogLevel, Mode};
use crate::ffi::{CUresult, CUstream};
use crate::state::{self, vlog, ACTIVE_CAPTURES};

/// `CUDA_ERROR_INVALID_HANDLE`.
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
/// `CUDA_ERROR_LAUNCH_FAILED`.
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;

/// (function, grid, block, dynamic shared memory, cluster).
type ClusterKey = (usize, [u32; 3], [u32; 3], u32, [u32; 3]);

/// Set in a forked child and when bind mode could not start: every call then takes the observe
/// path.
static DISABLED: AtomicBool = AtomicBool::new(false);
/// The started bind state (`Some(None)`: bind mode is unavailable in this process).
static BIND: OnceLock<Option<Bind>> = OnceLock::new();
static INIT: Mutex<()> = Mutex::new(());
static UNAVAILABLE: OnceLock<String> = OnceLock::new();

/// Counters of what bind mode did (census `bind.ops`).
#[derive(Debug, Default)]
pub struct BindCounters {
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
}

impl BindCounters {
    fn to_json(&self) -> Value {
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
            "drains": self.drains.get(),
        })
    }
}

/// The bind state of the process: the application's virtual context, its handle maps, the
/// per-function cache and the coordinator.
#[derive(Debug)]
pub struct Bind {
    vctx: Arc<VirtualContext>,
    registry: Mutex<Registry>,
    functions: Functions,
    device: c_int,
    /// The device's primary context (the application's current context at start-up).
    context: usize,
    limits: driver::DeviceLimits,
    /// Co-resident blocks per SM by (function, threads per block, dynamic shared memory).
    coresident: Mutex<HashMap<(usize, u32, u32), Option<u32>>>,
    /// The driver's cluster occupancy on the whole device by (function, grid, block, dynamic shared
    /// memory, cluster).
    clusters: Mutex<HashMap<ClusterKey, Result<u32, CUresult>>>,
    settings: Settings,
    coordinator: Coordinator,
    /// What was done.
    pub counters: BindCounters,
}

enum StartError {
    /// No current context yet: try again at the next call.
    NotYet,
    /// Bind mode cannot run in this process.
    Unavailable(String),
}

/// Whether bind mode handles calls now (mode `bind`, not disabled).
#[inline]
pub fn active() -> bool {
    state::config().mode == Mode::Bind && !DISABLED.load(Ordering::Relaxed)
}

/// The started bind state, starting it on first use; `None` means "take the observe path".
pub(crate) fn get() -> Option<&'static Bind> {
    match BIND.get() {
        Some(b) => b.as_ref(),
        None => start_slow(),
    }
}

#[cold]
fn start_slow() -> Option<&'static Bind> {
    let _l = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = BIND.get() {
        return b.as_ref();
    }
    match Bind::start() {
        Ok(b) => {
            vlog!(
                LogLevel::Info,
                "bind mode: policy {}, {} pool nodes on {} realized in {:.1} ms, lane continuation {}",
                b.settings.policy,
                b.coordinator.started.nodes.len(),
                b.coordinator.started.device,
                b.coordinator.started.realize_ms,
                if b.settings.lane_continuation { "on" } else { "off" }
            );
            let _ = BIND.set(Some(b));
            // Registered after the CUDA runtime's own exit handlers, so it runs before them.
            // SAFETY: a plain extern "C" handler with no arguments that never unwinds.
            unsafe { libc::atexit(at_exit) };
        }
        Err(StartError::NotYet) => return None,
        Err(StartError::Unavailable(why)) => {
            vlog!(LogLevel::Error, "bind mode unavailable, running in observe mode: {why}");
            let _ = UNAVAILABLE.set(why);
            DISABLED.store(true, Ordering::Release);
            let _ = BIND.set(None);
        }
    }
    BIND.get().and_then(Option::as_ref)
}

fn settings() -> Settings {
    let c = state::config();
    Settings {
        policy: c.policy,
        seed: c.seed,
        lane_continuation: c.lane_continuation,
        tuning: Tuning::from_lookup(|k| std::env::var(k).ok()),
    }
}

thread_local! {
    /// How many more ops this thread continues on their predecessors' lane itself
    /// ([`Tuning::eager_continue_ops`]), counted down from its last launch-first launch.
    static CONTINUE_BUDGET: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A launch-first launch of this thread: the next `ops` ops it records are continued on their
/// predecessors' lane by this thread when the dispatcher is free ([`Tuning::eager_continue_ops`]).
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

/// How long a synchronize call spins (polling) before it parks, unless the application asked
/// for blocking synchronization: natively CUDA spins for the whole wait by default.
const SPIN_WAIT: Duration = Duration::from_secs(1);

/// The wait assist of bind mode's virtual context: completion polling by the waiting thread
/// (`VITAMIN_WAIT_ASSIST`, on by default, [`Coordinator::assist_wait`]) or, with it off, native
/// waits on the awaited ops' lanes (`VITAMIN_NATIVE_WAIT=1`, experimental,
/// [`Coordinator::native_wait`]).
fn wait_assist(ops: &[vitamin_runtime::OpId]) -> bool {
    match BIND.get() {
        Some(Some(b)) if b.settings.tuning.wait_assist => {
            if driver::current_context().is_ok_and(|c| c == b.context) {
                return b.coordinator.assist_wait(ops);
            }
            std::thread::yield_now();
            false
        }
        Some(Some(b)) => {
            let done = b.coordinator.native_wait(ops);
            if !done {
                std::thread::yield_now();
            }
            done
        }
        _ => {
            std::thread::yield_now();
            false
        }
    }
}

impl Bind {
    fn start() -> Result<Bind, StartError> {
        let unavailable = |what: &str, code: CUresult| StartError::Unavailable(format!("{what} failed ({code})"));
        let ctx = driver::current_context().map_err(|e| unavailable("cuCtxGetCurrent", e))?;
        if ctx == 0 {
            return Err(StartError::NotYet);
        }
        let device = driver::current_device().map_err(|e| unavailable("cuCtxGetDevice", e))?;
        let primary = driver::primary_context(device).map_err(|e| unavailable("cuDevicePrimaryCtxRetain", e))?;
        if primary != ctx {
            return Err(StartError::Unavailable(format!(
                "the current context is not device {device}'s primary context; bind mode supports applications on \
                 the primary context (the CUDA runtime, PyTorch)"
            )));
        }
        let limits = driver::device_limits(device).map_err(|e| unavailable("cuDeviceGetAttribute", e))?;
        let vctx = Arc::new(VirtualContext::new(VctxId(std::process::id())));
        let settings = settings();
        if trace_path().is_some() {
            vitamin_runtime::trace::start(TRACE_MARKS);
        }
        let coordinator = Coordinator::start(device, vctx.clone(), settings).map_err(StartError::Unavailable)?;
        // Synchronize calls wait like the application asked: CUDA spins (polling) unless it chose
        // blocking synchronization; a spinning waiter polls completions itself.
        let t = settings.tuning;
        let sched = driver::sched_mode(device);
        let blocking = sched == driver::Sched::BlockingSync;
        vctx.set_sync_spin(t.sync_spin.unwrap_or(if blocking { vitamin_runtime::SYNC_SPIN } else { SPIN_WAIT }));
        // CUDA spins without yielding unless the application asked it to yield (or has more
        // contexts than CPUs, which one primary context on a multi-core host never has).
        vctx.set_sync_yield(t.sync_yield.unwrap_or(sched == driver::Sched::Yield));
        // Spinning waiters poll completions themselves (the default), or (experimental) wait
        // natively on their lanes (not under blocking synchronization).
        if t.wait_assist || (t.native_wait && !blocking) {
            vctx.set_wait_assist(Box::new(wait_assist));
        }
        Ok(Bind {
            vctx,
            registry: Mutex::new(Registry::default()),
            functions: Functions::default(),
            device,
            context: ctx,
            limits,
            coresident: Mutex::new(HashMap::new()),
            clusters: Mutex::new(HashMap::new()),
            settings,
            coordinator,
            counters: BindCounters::default(),
        })
    }

    /// Records with `record` and, under inline submission, lets this (application) thread submit
    /// what became ready if the dispatcher is free and the thread's current context is the one
    /// the pool was built in (the backend would otherwise switch the application's current
    /// context). `record` returns its result and whether it recorded an op.
    fn record_inline<T>(&self, record: impl FnOnce() -> (T, bool)) -> T {
        if self.settings.tuning.inline && driver::current_context().is_ok_and(|c| c == self.context) {
            self.coordinator.record_inline(record)
        } else {
            record().0
        }
    }

    /// Records an op, eagerly bound by this thread when it is fresh, the dispatcher is free and
    /// the thread's current context is the pool's ([`Coordinator::record_eager`]; `VITAMIN_EAGER`,
    /// on by default; the same context condition as inline submission). Inline submission (an experiment, off) takes precedence.
    fn record_op(
        &self,
        s: vitamin_runtime::StreamId,
        desc: Arc<vitamin_hal::OpDesc>,
    ) -> Result<vitamin_runtime::Recorded, vitamin_runtime::VctxError> {
        let t = &self.settings.tuning;
        if t.eager && !t.inline {
            // The context is asked only for a fresh op (a driver call, kept off the path of ops
            // that wait for predecessors).
            let in_pool_context = || driver::current_context().is_ok_and(|c| c == self.context);
            let continue_too = t.eager_continue || take_continue_budget();
            self.coordinator.record_eager(&self.vctx, s, desc, continue_too, in_pool_context)
        } else {
            self.vctx.record_op(s, desc)
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Co-resident blocks per SM of handle `f` with this block shape (cached; `None` if the driver
    /// cannot say).
    fn blocks_per_sm(&self, f: usize, threads: u32, smem: u32) -> Option<u32> {
        let key = (f, threads, smem);
        if let Some(&n) = self.coresident.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return n;
        }
        let n = driver::blocks_per_sm(f, threads, smem).ok();
        self.coresident.lock().unwrap_or_else(|e| e.into_inner()).insert(key, n);
        n
    }

    /// Clusters of `cluster`'s shape the whole device holds for this launch (cached), or the
    /// driver's error.
    fn max_active_clusters(&self, f: usize, g: &capture::Geometry, cluster: Dim3) -> Result<u32, CUresult> {
        let dims = |d: Dim3| [d.x, d.y, d.z];
        let key = (f, dims(g.grid), dims(g.block), g.shared_mem_bytes, dims(cluster));
        if let Some(&n) = self.clusters.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return n;
        }
        let n = driver::max_active_clusters(f, key.1, key.2, key.3, key.4);
        self.clusters.lock().unwrap_or_else(|e| e.into_inner()).insert(key, n);
        n
    }

    /// The logical stream of a known stream reference (default streams always are).
    fn known_stream(&self, r: StreamRef) -> Option<StreamId> {
        match r {
            StreamRef::Legacy => Some(StreamId::LEGACY),
            StreamRef::PerThread => Some(self.vctx.per_thread_default_stream(thread_key())),
            StreamRef::Handle(h) => self.registry().stream(h),
        }
    }

    /// The logical stream of `r`, registering an application stream vitamin has not seen yet
    /// (created through a route it does not hook) with the flags and priority the driver reports.
    fn stream(&self, r: StreamRef, handle: CUstream) -> Result<StreamId, CUresult> {
        if let Some(s) = self.known_stream(r) {
            return Ok(s);
        }
        let (flags, priority) = driver::stream_flags_priority(handle)?;
        let kind = if flags & CU_STREAM_NON_BLOCKING != 0 {
            vitamin_runtime::StreamKind::NonBlocking
        } else {
            vitamin_runtime::StreamKind::Blocking
        };
        let id = self.vctx.create_stream(kind, priority);
        self.registry().add_stream(handle as usize, id);
        Ok(id)
    }

    /// Waits until everything the application enqueued on `s` before now completed, with the
    /// legacy-default-stream edges an action on `s` has (a barrier op).
    fn drain(&self, s: StreamId) -> Result<(), CUresult> {
        if self.vctx.outstanding() == 0 {
            return Ok(());
        }
        self.counters.drains.bump();
        self.vctx.record_synchronous_op(s, Arc::new(OpDesc::Marker(Marker::Barrier))).map(|_| ()).map_err(|e| code(&e))
    }
}

/// The CUDA error for a logical error (table in `vitamin_runtime::vctx`): an asynchronous failure
/// reports the driver's own code for it (e.g. 700 for an illegal address), as the native sync or
/// query would; one without a driver code reports `CUDA_ERROR_LAUNCH_FAILED`.
pub fn code(e: &VctxError) -> CUresult {
    match e {
        VctxError::InvalidHandle(_) => CUDA_ERROR_INVALID_HANDLE,
        VctxError::LaunchFailed { code: Some(c), .. } if *c != 0 => *c as CUresult,
        VctxError::LaunchFailed { .. } => CUDA_ERROR_LAUNCH_FAILED,
    }
}

/// The calling thread's key for its per-thread default stream (its kernel thread id).
fn thread_key() -> u64 {
    thread_local! {
        static KEY: u64 = {
            // SAFETY: gettid has no preconditions.
            (unsafe { libc::syscall(libc::SYS_gettid) }) as u64
        };
    }
    KEY.try_with(|k| *k).unwrap_or(0)
}

/// Whether `stream` (a hook's argument, `per_thread` variant or not) is being captured; asks the
/// driver only while some capture is active.
fn capturing(stream: CUstream, per_thread: bool) -> bool {
    ACTIVE_CAPTURES.get() > 0 && driver::is_capturing(stream, per_thread)
}

/// Where an asynchronous operation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Recorded as an op of this logical stream.
    Record(StreamId),
    /// Its stream is capturing: forwarded unchanged.
    Forward,
    /// The native path on this logical stream (the legacy stream while a capture is active).
    Native(StreamId),
}

impl Bind {
    fn target(&self, stream: CUstream, per_thread: bool) -> Result<Target, CUresult> {
        let r = classify_stream(stream as usize, per_thread);
        if ACTIVE_CAPTURES.get() > 0 {
            if driver::is_capturing(stream, per_thread) {
                self.counters.capturing.bump();
                return Ok(Target::Forward);
            }
            if r == StreamRef::Legacy {
                return Ok(Target::Native(StreamId::LEGACY));
            }
        }
        self.stream(r, stream).map(Target::Record)
    }

    /// The native path: drain `s`, call the driver, and if `wait_after` (the call enqueued work)
    /// wait for the application's native stream so that later logical ops follow it.
    fn native(
        &self,
        s: Option<StreamId>,
        stream: CUstream,
        per_thread: bool,
        wait_after: bool,
        real: &dyn Fn() -> CUresult,
    ) -> CUresult {
        if let Some(s) = s {
            if let Err(e) = self.drain(s) {
                return e;
            }
        }
        let r = real();
        if r == crate::ffi::CUDA_SUCCESS && wait_after {
            let w = driver::native_stream_synchronize(stream, per_thread);
            if w != crate::ffi::CUDA_SUCCESS {
                return w;
            }
        }
        r
    }

    /// The native path for a call on application stream `stream` (capturing: forwarded as is).
    fn native_on_stream(
        &self,
        stream: CUstream,
        per_thread: bool,
        wait_after: bool,
        real: &dyn Fn() -> CUresult,
    ) -> CUresult {
        if capturing(stream, per_thread) {
            self.counters.capturing.bump();
            return real();
        }
        let r = classify_stream(stream as usize, per_thread);
        // An unknown handle is registered so that the drain carries its legacy-stream edges; if the
        // driver does not know it either, the call itself reports that.
        let s = self.stream(r, stream).ok();
        self.native(s, stream, per_thread, wait_after, real)
    }
}

/// The census section of bind mode (`None` outside bind mode).
pub fn census() -> Option<Value> {
    if state::config().mode != Mode::Bind {
        return None;
    }
    let c = state::config();
    let common = json!({"policy": c.policy.name(), "seed": c.seed, "lane_continuation": c.lane_continuation});
    let mut v = match BIND.get() {
        None => json!({"active": false, "reason": "not started: no bind-mode call was made with a current context"}),
        Some(None) => json!({"active": false, "reason": UNAVAILABLE.get().cloned().unwrap_or_default()}),
        Some(Some(b)) => {
            let (streams, events, graph_execs) = {
                let r = b.registry();
                let (s, e) = r.counts();
                (s, e, r.graph_exec_count())
            };
            json!({
                "active": !DISABLED.load(Ordering::Relaxed),
                "device": b.coordinator.started.device,
                "realize_ms": b.coordinator.started.realize_ms,
                "nodes": b.coordinator.started.nodes,
                "ops": b.counters.to_json(),
                "streams_mapped": streams,
                "events_mapped": events,
                "graph_execs_mapped": graph_execs,
                "dispatcher": b.coordinator.stats(),
            })
        }
    };
    if let (Some(o), Some(common)) = (v.as_object_mut(), common.as_object()) {
        for (k, x) in common {
            o.insert(k.clone(), x.clone());
        }
    }
    Some(v)
}

/// In a forked child: no dispatcher thread exists there, so the child runs in observe mode.
/// Async-signal-safe (one atomic store).
pub(crate) fn after_fork_in_child() {
    DISABLED.store(true, Ordering::Relaxed);
}

/// Marks the op timeline trace keeps (`VITAMIN_TRACE`; 24 bytes each).
const TRACE_MARKS: usize = 2_000_000;

/// `VITAMIN_TRACE`: where to write the op timeline trace at exit (`%p`: the process id).
fn trace_path() -> Option<std::path::PathBuf> {
    let t = std::env::var("VITAMIN_TRACE").ok().filter(|t| !t.is_empty())?;
    Some(t.replace("%p", &std::process::id().to_string()).into())
}

fn write_trace(path: &std::path::Path) {
    let written = std::fs::File::create(path).and_then(|f| {
        let mut w = std::io::BufWriter::new(f);
        let n = vitamin_runtime::trace::write_csv(&mut w)?;
        std::io::Write::flush(&mut w)?;
        Ok(n)
    });
    match written {
        Ok(n) => vlog!(LogLevel::Info, "trace: {n} marks written to {}", path.display()),
        Err(e) => vlog!(LogLevel::Error, "trace: could not write {}: {e}", path.display()),
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _entered = crate::guard::enter();
        if DISABLED.load(Ordering::Relaxed) {
            return;
        }
        if let Some(Some(b)) = BIND.get() {
            // Work the application enqueued completes, as it would natively.
            if !matches!(b.vctx.device_synchronize_timeout(Duration::from_secs(60)), Ok(true)) {
                vlog!(LogLevel::Warn, "exit: enqueued work did not complete within 60 s (or failed)");
            }
            if !b.coordinator.stop(Duration::from_secs(5)) {
                vlog!(LogLevel::Warn, "exit: the dispatcher thread did not stop within 5 s");
            }
            if let Some(path) = trace_path() {
                write_trace(&path);
            }
        }
    });
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
}
