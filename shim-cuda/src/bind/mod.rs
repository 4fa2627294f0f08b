//! # Bind mode (`VITAMIN_MODE=bind`): late-binding every launch of an unmodified application
//!
//! Asynchronous operations become ops of one [`VirtualContext`](vitamin_runtime::VirtualContext) (the application's logical
//! streams, events and happens-before order) with immutable descriptors, and the client runtime
//! ([`vitamin_runtime::client`]: its registry, capture rules, record paths, waits and coordinator
//! thread) dispatches them through the runtime's dispatcher onto the green-context pool, under
//! the policy `VITAMIN_POLICY` selects. This module holds only what is CUDA's: the hooks'
//! handlers ([`calls`]), the driver calls bind mode makes itself, the per-function cache, and
//! [`CudaNative`], the client's view of the driver through the shim's table of real functions. The application sees native semantics:
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
//! Every other driver ABI that takes a stream has a generated hook (`hooks::native`, from
//! `data/native_entry_points.txt`) of one class ([`calls::NativeClass`]): the native path above
//! (`enqueue`), the native path without the host wait that then hands the logical stream to the
//! driver for good (`wait`: stream memory waits, external semaphore waits), a drain before the call
//! (`order`), or a plain forward (`query`). Context destroy and reset, module and library unloads
//! synchronize the device logically and drop cached function layouts first (`lifetime`). A call
//! made while the thread's current context is not a pool's (a `cuCtxCreate` context) takes the
//! native path without the host wait (other contexts are ordered natively).
//!
//! ## Devices
//! Each device has its own bind state (`BINDS`: pool, virtual context, coordinator), started by
//! the first call made on that device's primary context. A call goes to the state of the current
//! context's device, or, for a stream or event handle, to the device whose registry holds the
//! handle ([`get_for_stream`], [`get_for_event`]). A wait of one device's stream on an event
//! another device recorded logically waits on the host for that record ([`logical_event_elsewhere`]):
//! ordered, and more synchronous than natively.
//!
//! ## Capture
//! Nothing is deferred on a capturing stream: while any capture is active, each call asks the
//! driver whether its stream is capturing and, if so, forwards unchanged (the work is recorded
//! into the application's graph, natively), so capture queries stay truthful. Ops on the legacy
//! stream while a capture is active take the native path (the driver decides whether they are
//! legal).
//!
//! ## Start-up and fallback
//! Nothing happens at load time. The first bind-mode call made on a device's primary context starts
//! the coordinator for that device (green contexts realized off the path of every later launch);
//! calls before it pass through. If the backend cannot start (no green contexts), the process keeps
//! running in observe mode and the census says why. A forked child runs in observe mode (no
//! dispatcher thread in it) and warns once.
//! A pool not realized within `start_timeout_ms` falls back to observe mode the same way.
//!
//! ## Waits and bounds (docs/robustness.md)
//! No call waits forever: a wait whose work can no longer complete returns
//! `CUDA_ERROR_UNKNOWN` (the dispatcher thread ended) or `CUDA_ERROR_LAUNCH_TIMEOUT` (work left
//! unbound, or the dispatcher motionless, past `unbound_timeout_ms`) ([`code`]). Recording waits
//! while `max_outstanding_ops` ops are outstanding; past `max_staged_bytes` staged, a pageable
//! copy runs synchronously.
//!
//! ## Not yet done (see docs/shim.md)
//! A graph launch waits for every logically recorded event (its event-wait nodes would otherwise
//! miss them), but a graph's event-record node does not update a logically recorded event. Each
//! context's legacy default stream is one logical legacy stream (more order than natively).

pub(crate) mod calls;
pub mod capture;
mod driver;
mod function;
pub mod handles;

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Mutex, Once};

use serde_json::Value;
use vitamin_hal::Dim3;
use vitamin_hal_cuda::CudaBackend;
use vitamin_runtime::client::coordinator::Settings;
use vitamin_runtime::client::devices::{DeviceState, Devices};
use vitamin_runtime::client::lifecycle::StartError;
use vitamin_runtime::client::native::NativeApi;
use vitamin_runtime::client::Client;
use vitamin_runtime::{StreamId, VctxError};

use self::function::Functions;
use self::handles::{classify_stream, StreamRef, CU_STREAM_NON_BLOCKING};
use crate::config::{LogLevel, Mode};
use crate::ffi::{CUresult, CUstream};
use crate::state::{self, vlog, ACTIVE_CAPTURES};

/// `CUDA_ERROR_INVALID_HANDLE`.
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
/// `CUDA_ERROR_LAUNCH_FAILED`.
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
/// `CUDA_ERROR_LAUNCH_TIMEOUT`: a wait vitamin gave up because the awaited work was never bound.
pub const CUDA_ERROR_LAUNCH_TIMEOUT: CUresult = 702;

/// (function, grid, block, dynamic shared memory, cluster).
type ClusterKey = (usize, [u32; 3], [u32; 3], u32, [u32; 3]);

/// The bind state of each device of the process: a pool, a virtual context and a coordinator per
/// device, started by the first call made on that device's primary context.
static BINDS: Devices<Bind> = Devices::new();

/// The client runtime's view of the CUDA driver, through the shim's table of real functions
/// ([`driver`]) and its re-entry guard: it lives here, not in hal-cuda, because the context
/// query and the native stream wait must go to the driver's own symbols without re-entering the
/// hooks, and runtime threads must hold the shim's guard.
#[derive(Debug)]
pub struct CudaNative {
    /// The device's primary context (the application's current context at start-up).
    context: usize,
}

impl NativeApi for CudaNative {
    type Backend = CudaBackend;
    type Guard = Option<crate::guard::Entered>;

    fn create_backend(&self, ordinal: i32) -> Result<CudaBackend, String> {
        CudaBackend::with_ordinal(ordinal).map_err(|e| format!("the CUDA backend is unavailable: {e}"))
    }

    fn enter_runtime_thread() -> Self::Guard {
        crate::guard::enter()
    }

    fn in_pool_context(&self) -> bool {
        driver::current_context().is_ok_and(|c| c == self.context)
    }

    fn synchronize_raw_stream(&self, stream: u64) -> bool {
        driver::native_stream_synchronize(stream as CUstream, false) == crate::ffi::CUDA_SUCCESS
    }
}

/// The bind state of the process: the client runtime and what is CUDA's (the per-function
/// cache, the device's limits and occupancy answers).
#[derive(Debug)]
pub struct Bind {
    client: Client<CudaNative>,
    functions: Functions,
    device: c_int,
    /// The device's primary context: the pool's, where this state's calls are bound.
    context: usize,
    limits: driver::DeviceLimits,
    /// Co-resident blocks per SM by (function, threads per block, dynamic shared memory).
    coresident: Mutex<HashMap<(usize, u32, u32), Option<u32>>>,
    /// The driver's cluster occupancy on the whole device by (function, grid, block, dynamic shared
    /// memory, cluster).
    clusters: Mutex<HashMap<ClusterKey, Result<u32, CUresult>>>,
}

impl std::ops::Deref for Bind {
    type Target = Client<CudaNative>;
    fn deref(&self) -> &Client<CudaNative> {
        &self.client
    }
}

/// Whether bind mode handles calls now (mode `bind`, not in a forked child). A device whose bind
/// state is unavailable passes its calls through ([`get`] answers `None` there).
#[inline]
pub fn active() -> bool {
    state::config().mode == Mode::Bind && BINDS.enabled()
}

/// The bind state of the thread's current context's device, starting it on first use; `None`
/// means "take the observe path" (no current context and no device started, a device past the
/// 16th, a device whose bind state is unavailable, or one whose primary context was never
/// current).
pub(crate) fn get() -> Option<&'static Bind> {
    let ctx = driver::current_context().unwrap_or(0);
    if ctx == 0 {
        // A thread without a current context (a synchronize or query on a handle, which the
        // driver accepts): the first started device's state, whose handle routing finds the
        // owner ([`get_for_stream`], [`get_for_event`]); none started: the observe path.
        return BINDS.started().next();
    }
    let device = || driver::current_device().ok().and_then(|d| usize::try_from(d).ok());
    BINDS.current(ctx, device, Bind::start, |device, b| {
        vlog!(
            LogLevel::Info,
            "bind mode on device {device}: policy {}, {} pool nodes on {} realized in {:.1} ms, lane continuation {}",
            b.coordinator.started.policy,
            b.coordinator.started.nodes.len(),
            b.coordinator.started.device,
            b.coordinator.started.realize_ms,
            if b.settings.lane_continuation { "on" } else { "off" }
        );
        static AT_EXIT: Once = Once::new();
        // Registered after the CUDA runtime's own exit handlers, so it runs before them.
        // SAFETY: a plain extern "C" handler with no arguments that never unwinds.
        AT_EXIT.call_once(|| unsafe {
            libc::atexit(at_exit);
        });
    })
}

/// The bind state that owns application stream `stream` (a hook's argument): the one of the
/// current context's device unless another device's registry holds the handle (work of a stream
/// belongs to the device the stream was created on).
pub(crate) fn get_for_stream(stream: CUstream, per_thread: bool) -> Option<&'static Bind> {
    let b = get()?;
    if !matches!(classify_stream(stream as usize, per_thread), StreamRef::Handle(_)) {
        return Some(b);
    }
    Some(BINDS.stream_owner(b, stream as usize))
}

/// The bind state whose registry holds application event `event`, the current device's if none
/// other does.
pub(crate) fn get_for_event(event: usize) -> Option<&'static Bind> {
    let b = get()?;
    Some(BINDS.event_owner(b, event))
}

/// Another device's bind state that recorded application event `event` logically, with that
/// event's id: a wait on it from `b`'s device is a cross-device wait.
pub(crate) fn logical_event_elsewhere(b: &Bind, event: usize) -> Option<(&'static Bind, vitamin_runtime::EventId)> {
    BINDS.logical_event_elsewhere(b, event)
}

/// Runs `f` on every started bind state (calls whose effect spans devices: unloads, frees,
/// executable-graph changes).
pub(crate) fn for_each_started(f: impl FnMut(&'static Bind)) {
    BINDS.started().for_each(f);
}

impl DeviceState for Bind {
    fn handles(&self) -> std::sync::MutexGuard<'_, vitamin_runtime::client::handles::Registry> {
        self.registry()
    }
    fn pool_context(&self) -> usize {
        self.context
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
            return Err(StartError::NotYet); // binds a device's primary context, once one is current
        }
        let limits = driver::device_limits(device).map_err(|e| unavailable("cuDeviceGetAttribute", e))?;
        // Synchronize calls wait like the application asked: CUDA spins (polling) unless it chose
        // blocking synchronization (or yielding).
        let host_wait = driver::sched_mode(device);
        let layers = vitamin_runtime::config::process();
        let settings = Settings::from_config(state::config(), |k| layers.get(k));
        let client =
            Client::start(CudaNative { context: ctx }, device, settings, host_wait).map_err(StartError::Unavailable)?;
        Ok(Bind {
            client,
            functions: Functions::default(),
            device,
            context: ctx,
            limits,
            coresident: Mutex::new(HashMap::new()),
            clusters: Mutex::new(HashMap::new()),
        })
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

    /// The logical stream of `r`, registering an application stream vitamin has not seen yet
    /// (created through a route it does not hook) with the flags and priority the driver reports.
    fn stream(&self, r: StreamRef, handle: CUstream) -> Result<StreamId, CUresult> {
        if let Some(s) = self.known_stream(r) {
            return Ok(s);
        }
        let (flags, priority) = driver::stream_flags_priority(handle)?;
        Ok(self.register_stream(handle as usize, stream_kind(flags), priority))
    }

    /// Waits until everything the application enqueued on `s` before now completed, with the
    /// legacy-default-stream edges an action on `s` has (a barrier op).
    fn drain(&self, s: StreamId) -> Result<(), CUresult> {
        self.client.drain(s).map_err(|e| code(&e))
    }

    /// A context, module or library ends: function handles may name other functions from now on.
    fn end_of_lifetime(&self) {
        self.functions.invalidate();
        self.coresident.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.clusters.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The logical kind of a stream created with `flags`.
fn stream_kind(flags: u32) -> vitamin_runtime::StreamKind {
    if flags & CU_STREAM_NON_BLOCKING != 0 {
        vitamin_runtime::StreamKind::NonBlocking
    } else {
        vitamin_runtime::StreamKind::Blocking
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
        VctxError::Timeout(_) => CUDA_ERROR_LAUNCH_TIMEOUT,
        VctxError::RuntimeLost(_) => crate::ffi::CUDA_ERROR_UNKNOWN,
    }
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
        let s = self.stream(r, stream)?;
        if self.elsewhere(s) {
            return Ok(Target::Native(s));
        }
        Ok(Target::Record(s))
    }

    /// Whether work on `s` is forwarded natively: the calling thread is on another context or
    /// device, or `s` was handed to the driver.
    fn elsewhere(&self, s: StreamId) -> bool {
        self.handed_to_driver(s) || !self.in_pool_context()
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
        // Work on another context, or on a stream handed to the driver, is ordered natively.
        if r == crate::ffi::CUDA_SUCCESS && wait_after && !s.map_or(!self.in_pool_context(), |s| self.elsewhere(s)) {
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

/// The census section of bind mode (`None` outside bind mode): the first started device's state
/// (or why none started), with every started device's under `devices` when there are several.
pub fn census() -> Option<Value> {
    let mut v = BINDS.bind_census(state::config(), |b| b.census_json())?;
    if let Some(o) = v.as_object_mut() {
        // Process-wide: executable graphs confinable to a partition, and their copies.
        let mut copies = serde_json::json!(vitamin_hal_cuda::graph_copy_counts());
        copies["reasons"] = serde_json::json!(vitamin_hal_cuda::graph_copy_reasons());
        o.insert("graph_copies".into(), copies);
    }
    Some(v)
}

/// In a forked child: no dispatcher thread exists there, so the child runs in observe mode.
/// Async-signal-safe (atomic stores).
pub(crate) fn after_fork_in_child() {
    BINDS.disable_after_fork();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _entered = crate::guard::enter();
        for_each_started(|b| b.shutdown());
    });
}
