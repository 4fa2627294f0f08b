//! # Bind mode (`VITAMIN_MODE=bind`, the default): late-binding every launch of a HIP application
//!
//! Asynchronous operations become ops of one virtual context and the client runtime
//! ([`vitamin_runtime::client`]: registry, capture rules, record paths, waits, coordinator) binds
//! them to the pool of CU-masked streams (hal-hip), under the policy `VITAMIN_POLICY` selects.
//! This module holds only what is HIP's: the handlers (`calls`), the runtime calls bind mode
//! makes itself ([`driver`]), the function cache ([`function`]), HIP's stream handles, and
//! [`HipNative`], the client's view of the runtime.
//!
//! ## What becomes an op
//! - `hipModuleLaunchKernel` (kernel parameters, or an `extra` buffer copied whole),
//!   `hipLaunchKernel` (+`_spt`), `hipExtLaunchKernel`, `hipExtModuleLaunchKernel` (a grid of
//!   whole work-groups: `hipModuleLaunchKernel` of grid = global / local), and
//!   `hipLaunchKernelExC` / `hipDrvLaunchKernelEx` without attributes that change the launch:
//!   kernel ops, captured at the call (parameter bytes copied by the layout [`function`] finds:
//!   the runtime's, or the code objects' metadata). A host stub is launched as the runtime
//!   function it stands for (`hipGetFuncBySymbol`), else as itself (`hipLaunchKernel`): the same
//!   kernel, grid, block, shared memory and arguments. A launch with start/stop events is bound
//!   only by launch-first (the runtime records the events around it on the lane), else takes the
//!   native path; its events are the runtime's from then on.
//! - `hipMemcpyAsync` (+ HtoD/DtoH/DtoD), `hipMemsetAsync`, `hipMemsetD8/16/32Async`: copy and
//!   fill ops (a pageable source is staged at the call; a pageable destination takes the native
//!   path).
//! - `hipStreamAddCallback`, `hipLaunchHostFunc`: host-function ops; the callback gets the
//!   application's stream handle and the status of the work before it.
//! - `hipGraphLaunch`: one op, bound to the whole-device node (hal-hip: whether graph kernels
//!   honour a stream's CU mask is unknown).
//! - Event records (events created with `hipEventDisableTiming`) and stream waits: logical
//!   generations. Timing events are recorded natively after a drain, so timestamps stay real.
//!
//! ## Answered from logical state
//! `hipStreamSynchronize`, `hipStreamQuery`, `hipEventSynchronize`, `hipEventQuery` (events
//! recorded logically), `hipDeviceSynchronize` (logical, then the runtime's own). An asynchronous
//! failure is reported with the runtime's own code (e.g. `hipErrorLaunchFailure`) by the next
//! synchronization or query.
//!
//! ## The native path
//! Everything else that names a stream, and every launch vitamin declines (invalid ones, so the
//! runtime's error returns synchronously; no parameter layout; extended launches with flags or a
//! partial work-group; cooperative launches, which CU masks do not confine, and launches with
//! attributes vitamin does not model), drains the logical stream, calls the runtime
//! unchanged on the application's stream, and waits for that native stream, so later logical ops
//! follow it. Synchronous copies and memsets drain the legacy stream first (its implicit
//! ordering). `hipFree`/`hipHostFree` synchronize the device logically first.
//!
//! ## Streams
//! The null stream is the legacy default stream (`_spt` variants: the calling thread's default
//! stream); `hipStreamPerThread` is the calling thread's default stream in every variant.
//! Streams created through routes vitamin does not hook are registered at first use with the
//! flags and priority the runtime reports. A stream being captured is forwarded unchanged.
//!
//! ## Start-up
//! The first bind-mode call starts the coordinator on the calling thread's current device (the
//! pool is realized from the same library the application loaded). If it cannot start, the
//! process runs in observe mode and the census says why. One device only: work issued while
//! another device is current takes the native path (multi-device processes are not modelled).

pub(crate) mod calls;
pub mod driver;
pub mod function;

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::Value;
use vitamin_hal_hip::{HipBackend, StreamLimits};
use vitamin_runtime::client::coordinator::Settings;
use vitamin_runtime::client::devices::{DeviceState, Devices};
use vitamin_runtime::client::handles::StreamRef;
use vitamin_runtime::client::lifecycle::StartError;
use vitamin_runtime::client::native::{HostWait, NativeApi};
use vitamin_runtime::client::Client;
use vitamin_runtime::config::{LogLevel, Mode};
use vitamin_runtime::{StreamId, StreamKind, VctxError};

use crate::ffi::*;
use crate::state::{self, vlog};

/// The bind state of each device of the process (pool, virtual context, coordinator), started by
/// the first call made with that device current.
static BINDS: Devices<Bind> = Devices::new();

/// The client runtime's view of the HIP runtime, through the interposer's table of real
/// functions and its re-entry guard.
#[derive(Debug)]
pub struct HipNative {
    /// The device the pool was built on.
    device: c_int,
}

impl NativeApi for HipNative {
    type Backend = HipBackend;
    type Guard = Option<vitamin_runtime::client::guard::Entered>;

    fn create_backend(&self, ordinal: i32) -> Result<HipBackend, String> {
        let limits = StreamLimits::from_config().map_err(|e| e.to_string())?;
        let library = crate::real::library_path();
        HipBackend::with_library(library.as_deref(), ordinal, limits)
            .map_err(|e| format!("the HIP backend is unavailable: {e}"))
    }

    fn enter_runtime_thread() -> Self::Guard {
        vitamin_runtime::client::guard::enter()
    }

    fn in_pool_context(&self) -> bool {
        // The backend makes the pool's device current on the thread that submits; a thread on
        // another device must not have it switched.
        driver::current_device() == Ok(self.device)
    }

    fn synchronize_raw_stream(&self, stream: u64) -> bool {
        driver::native_stream_synchronize(stream as usize) == HIP_SUCCESS
    }
}

/// The bind state: the client runtime and what is HIP's.
#[derive(Debug)]
pub struct Bind {
    client: Client<HipNative>,
    functions: function::Cache,
    /// The device the pool was built on (the calling thread's current device at start-up).
    device: c_int,
    /// The device's threads-per-block limit (what a launch is validated against).
    max_threads: u32,
}

impl std::ops::Deref for Bind {
    type Target = Client<HipNative>;
    fn deref(&self) -> &Client<HipNative> {
        &self.client
    }
}

/// Whether bind mode handles calls now (mode `bind`, not in a forked child). A device whose bind
/// state is unavailable passes its calls through ([`get`] answers `None` there).
#[inline]
pub fn active() -> bool {
    state::config().mode == Mode::Bind && BINDS.enabled()
}

/// The bind state of the calling thread's current device, starting it on first use; `None`: take
/// the observe path.
pub(crate) fn get() -> Option<&'static Bind> {
    let device = usize::try_from(driver::current_device().ok()?).ok()?;
    BINDS.current(
        device + 1,
        || Some(device),
        Bind::start,
        |device, b| {
            vlog!(
                LogLevel::Info,
                "bind mode on device {device}: policy {}, {} pool nodes on {} realized in {:.1} ms",
                b.coordinator.started.policy,
                b.coordinator.started.nodes.len(),
                b.coordinator.started.device,
                b.coordinator.started.realize_ms,
            );
            static AT_EXIT: std::sync::Once = std::sync::Once::new();
            // SAFETY: a plain extern "C" handler without arguments that never unwinds.
            AT_EXIT.call_once(|| unsafe {
                libc::atexit(at_exit);
            });
        },
    )
}

/// The bind state that owns application stream `stream`: the current device's unless another
/// device's registry holds the handle (a stream's work belongs to the device it was created on).
pub(crate) fn get_for_stream(stream: HipStream, per_thread: bool) -> Option<&'static Bind> {
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

/// Another device's bind state that recorded application event `event` logically, with the
/// event's id: a wait on it from `b`'s device is a cross-device wait.
pub(crate) fn logical_event_elsewhere(b: &Bind, event: usize) -> Option<(&'static Bind, vitamin_runtime::EventId)> {
    BINDS.logical_event_elsewhere(b, event)
}

/// Runs `f` on every started bind state (calls whose effect spans devices: frees, graph changes).
pub(crate) fn for_each_started(f: impl FnMut(&'static Bind)) {
    BINDS.started().for_each(f);
}

impl DeviceState for Bind {
    fn handles(&self) -> std::sync::MutexGuard<'_, vitamin_runtime::client::handles::Registry> {
        self.registry()
    }
    fn pool_context(&self) -> usize {
        self.device as usize + 1
    }
}

impl Bind {
    fn start() -> Result<Bind, StartError> {
        let unavailable = |what: &str, code: HipError| StartError::Unavailable(format!("{what} failed ({code})"));
        let device = driver::current_device().map_err(|e| unavailable("hipGetDevice", e))?;
        let attr = |a| driver::attribute(device, a).map_err(|e| unavailable("hipDeviceGetAttribute", e));
        let max_threads = attr(vitamin_hal_hip::driver::ATTR_MAX_THREADS_PER_BLOCK)?.max(0) as u32;
        let layers = vitamin_runtime::config::process();
        let settings = Settings::from_config(state::config(), |k| layers.get(k));
        // HIP host threads spin in synchronize calls unless the application asked otherwise
        // (hipSetDeviceFlags, not read here).
        let client =
            Client::start(HipNative { device }, device, settings, HostWait::Spin).map_err(StartError::Unavailable)?;
        Ok(Bind { client, functions: function::Cache::default(), device, max_threads })
    }

    /// The logical stream of `r`, registering an application stream vitamin has not seen yet
    /// with the flags and priority the runtime reports.
    fn stream(&self, r: StreamRef, handle: HipStream) -> Result<StreamId, HipError> {
        if let Some(s) = self.known_stream(r) {
            return Ok(s);
        }
        let (flags, priority) = driver::stream_flags_priority(handle as usize)?;
        Ok(self.register_stream(handle as usize, stream_kind(flags), priority))
    }

    /// Drains `s` (a barrier op carrying its legacy-stream edges, waited for).
    fn drain(&self, s: StreamId) -> Result<(), HipError> {
        self.client.drain(s).map_err(|e| code(&e))
    }

    /// Where an asynchronous operation on application stream `stream` goes. Work issued while
    /// another device is current is not modelled (the pool is one device's): it takes the
    /// native path.
    fn target(&self, stream: HipStream, per_thread: bool) -> Result<Target, HipError> {
        if is_capturing(stream) {
            self.counters.capturing.bump();
            return Ok(Target::Forward);
        }
        if driver::current_device() != Ok(self.device) {
            self.counters.native_unmodelled.bump();
            return Ok(Target::Native);
        }
        self.stream(classify_stream(stream as usize, per_thread), stream).map(Target::Record)
    }

    /// The native path: drain `s`, call the runtime, and if `wait_after` (the call enqueued work)
    /// wait for the application's native stream so that later logical ops follow it.
    fn native(
        &self,
        s: Option<StreamId>,
        stream: HipStream,
        wait_after: bool,
        real: &dyn Fn() -> HipError,
    ) -> HipError {
        if let Some(s) = s {
            if let Err(e) = self.drain(s) {
                return e;
            }
        }
        let r = real();
        if r == HIP_SUCCESS && wait_after {
            let w = driver::native_stream_synchronize(stream as usize);
            if w != HIP_SUCCESS {
                return w;
            }
        }
        r
    }

    /// The native path for a call on application stream `stream` (capturing: forwarded as is).
    fn native_on_stream(
        &self,
        stream: HipStream,
        per_thread: bool,
        wait_after: bool,
        real: &dyn Fn() -> HipError,
    ) -> HipError {
        if is_capturing(stream) {
            self.counters.capturing.bump();
            return real();
        }
        // An unknown handle the runtime does not know either: the call itself reports it.
        let s = self.stream(classify_stream(stream as usize, per_thread), stream).ok();
        self.native(s, stream, wait_after, real)
    }
}

/// Where an asynchronous operation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Recorded as an op of this logical stream.
    Record(StreamId),
    /// Its stream is capturing: forwarded unchanged.
    Forward,
    /// Another device is current: the native path.
    Native,
}

/// Classifies a hook's stream argument: the null stream is the legacy default stream, or the
/// calling thread's default stream in a per-thread (`_spt`) variant; `hipStreamPerThread` is
/// the calling thread's default stream in every variant.
pub fn classify_stream(handle: usize, per_thread_variant: bool) -> StreamRef {
    match handle {
        0 if per_thread_variant => StreamRef::PerThread,
        0 => StreamRef::Legacy,
        HIP_STREAM_PER_THREAD => StreamRef::PerThread,
        h => StreamRef::Handle(h),
    }
}

/// The logical kind of a stream created with `flags`.
pub fn stream_kind(flags: u32) -> StreamKind {
    if flags & HIP_STREAM_NON_BLOCKING != 0 {
        StreamKind::NonBlocking
    } else {
        StreamKind::Blocking
    }
}

/// The HIP error for a logical error: an asynchronous failure reports the runtime's own code for
/// it, as the native synchronize or query would; one without a code reports
/// `hipErrorLaunchFailure`.
pub fn code(e: &VctxError) -> HipError {
    match e {
        VctxError::InvalidHandle(_) => HIP_ERROR_INVALID_HANDLE,
        VctxError::LaunchFailed { code: Some(c), .. } if *c != 0 => *c as HipError,
        VctxError::LaunchFailed { .. } => HIP_ERROR_LAUNCH_FAILURE,
        // Work left unbound past `unbound_timeout_ms`, or the dispatcher gone (the CUDA shim's
        // choice of codes, in HIP's numbering).
        VctxError::Timeout(_) => crate::ffi::HIP_ERROR_LAUNCH_TIMEOUT,
        VctxError::RuntimeLost(_) => crate::ffi::HIP_ERROR_UNKNOWN,
    }
}

/// Application streams being captured (`hipStreamBeginCapture` .. `hipStreamEndCapture`): work
/// on them is forwarded unchanged, into the application's graph.
static CAPTURING: Mutex<Vec<usize>> = Mutex::new(Vec::new());
/// How many, read without the lock on every call.
static CAPTURES: AtomicUsize = AtomicUsize::new(0);

/// Whether application stream `stream` is being captured.
#[inline]
pub fn is_capturing(stream: HipStream) -> bool {
    CAPTURES.load(Ordering::Acquire) > 0
        && CAPTURING.lock().unwrap_or_else(|e| e.into_inner()).contains(&(stream as usize))
}

/// Notes that a capture of `stream` began (`true`) or ended.
pub fn note_capture(stream: HipStream, began: bool) {
    let mut c = CAPTURING.lock().unwrap_or_else(|e| e.into_inner());
    let h = stream as usize;
    if began {
        c.push(h);
    } else if let Some(i) = c.iter().position(|&x| x == h) {
        c.swap_remove(i);
    }
    CAPTURES.store(c.len(), Ordering::Release);
}

/// The census section of bind mode (`None` outside bind mode): the first started device's state
/// (or why none started), with every started device's under `devices` when there are several.
pub fn census() -> Option<Value> {
    BINDS.bind_census(state::config(), |b| b.census_json())
}

/// In a forked child: no dispatcher thread exists there, so the child runs in observe mode.
/// Async-signal-safe (atomic stores).
pub(crate) fn after_fork_in_child() {
    BINDS.disable_after_fork();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _entered = vitamin_runtime::client::guard::enter();
        for_each_started(|b| b.shutdown());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_stream_handles() {
        assert_eq!(classify_stream(0, false), StreamRef::Legacy);
        assert_eq!(classify_stream(0, true), StreamRef::PerThread);
        for pt in [false, true] {
            assert_eq!(classify_stream(HIP_STREAM_PER_THREAD, pt), StreamRef::PerThread);
            assert_eq!(classify_stream(0x7f00_1000, pt), StreamRef::Handle(0x7f00_1000));
        }
    }

    #[test]
    fn stream_kinds_and_codes() {
        assert_eq!(stream_kind(0), StreamKind::Blocking);
        assert_eq!(stream_kind(HIP_STREAM_NON_BLOCKING), StreamKind::NonBlocking);
        let failed =
            |code| VctxError::LaunchFailed { op: vitamin_runtime::OpId(1), stream: None, message: String::new(), code };
        assert_eq!(code(&failed(Some(719))), HIP_ERROR_LAUNCH_FAILURE);
        assert_eq!(code(&failed(Some(700))), 700);
        assert_eq!(code(&failed(None)), HIP_ERROR_LAUNCH_FAILURE);
    }

    #[test]
    fn captures_are_tracked_per_stream() {
        let (a, b) = (0x1000 as HipStream, 0x2000 as HipStream);
        assert!(!is_capturing(a));
        note_capture(a, true);
        assert!(is_capturing(a) && !is_capturing(b));
        note_capture(b, false); // ending a capture that never began changes nothing
        assert!(is_capturing(a));
        note_capture(a, false);
        assert!(!is_capturing(a));
    }
}
