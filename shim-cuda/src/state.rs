//! Process state of the interposer: configuration, counters, the census, logging, exit and fork.
//!
//! Nothing runs at load time. The first intercepted driver call initializes the configuration
//! (reads the environment), registers an `atexit` handler (writes the census) and a
//! `pthread_atfork` child handler. Counters and the launch table are static atomics in the shim's
//! own memory; only the kernel-name map is allocated (behind an atomic pointer), once per process.
//!
//! Fork safety: the child handler runs in the child before `fork` returns and only stores atomics:
//! it zeroes the counters and the launch table, detaches the name map (the parent's copy may have
//! been locked by another thread at the moment of the fork, so the child never touches it; it
//! leaks instead), and records the new pid. The child then re-creates its map lazily and writes
//! its own file
//! (see [`Config::census_path`]). Resolved driver pointers stay valid across fork and are kept.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::census::{
    Counters, GraphStats, InterposeStats, KernelCensus, LaunchKey, LaunchTable, Recorded, Report, Stat,
};
use crate::config::{Config, LogLevel, Mode};
use crate::ffi::{CUresult, CUstream, CUstreamCaptureStatus, CUDA_SUCCESS, CU_STREAM_CAPTURE_STATUS_NONE};
use crate::guard;
use crate::real;
use crate::table::{Flavor, HookId};

/// Call counters (observe mode).
pub static COUNTERS: Counters = Counters::new();
/// Interposition statistics.
pub static STATS: InterposeStats = InterposeStats::new();
/// Graph launch counts.
pub static GRAPHS: GraphStats = GraphStats::new();
/// Stream captures begun and not yet ended (decides whether launches must ask the driver whether
/// their stream is capturing).
pub static ACTIVE_CAPTURES: Stat = Stat::new();

static CONFIG: OnceLock<Config> = OnceLock::new();
static PID: AtomicU32 = AtomicU32::new(0);
/// Launch counts per (function, grid, block): lock-free, in the shim's static memory.
pub static LAUNCHES: LaunchTable = LaunchTable::new();
/// Kernel names per function handle, filled when a configuration is first seen.
static NAMES: AtomicPtr<Mutex<HashMap<usize, String>>> = AtomicPtr::new(std::ptr::null_mut());

/// The configuration, initializing the process state on first use.
#[inline]
pub fn config() -> &'static Config {
    CONFIG.get_or_init(init)
}

/// Whether calls are being counted (observe and bind modes).
#[inline]
pub fn observing() -> bool {
    config().mode != Mode::Passthrough
}

#[cold]
fn init() -> Config {
    let layers = vitamin_runtime::config::process();
    let cfg = Config::from_lookup(|k| layers.get(k));
    if cfg.log != LogLevel::Off {
        vitamin_runtime::client::log::install_subscriber(layers.get("VITAMIN_LOG").as_deref(), write_stderr);
    }
    // The client runtime logs through the same sink (its lines become `tracing` events too).
    vitamin_runtime::client::log::install(emit, cfg.log);
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    // SAFETY: registering plain extern "C" handlers with no arguments; they never unwind.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    }
    vitamin_runtime::client::log::announce(&cfg, layers, "libvitamin_cuda", emit);
    cfg
}

/// Whether a message at `level` would be printed (never initializes anything).
#[inline]
pub fn log_enabled(level: LogLevel) -> bool {
    CONFIG.get().is_some_and(|c| c.log >= level)
}

/// Emits one log event through `tracing` (the subscriber `vitamin_runtime::client::log::install_subscriber`
/// installs).
pub fn emit(level: LogLevel, args: std::fmt::Arguments<'_>) {
    match level {
        LogLevel::Off => {}
        LogLevel::Error => tracing::error!(target: "vitamin", "{args}"),
        LogLevel::Warn => tracing::warn!(target: "vitamin", "{args}"),
        LogLevel::Info => tracing::info!(target: "vitamin", "{args}"),
        LogLevel::Debug => tracing::debug!(target: "vitamin", "{args}"),
        LogLevel::Trace => tracing::trace!(target: "vitamin", "{args}"),
    }
}

/// Writes one formatted log line to stderr with one `write(2)` (no locks, no buffering, no
/// thread-locals: it is called from thread-exit paths too).
fn write_stderr(line: &str) {
    let line = format!("[vitamin {}] {line}", PID.load(Ordering::Relaxed));
    // SAFETY: writes an initialized buffer of the given length to fd 2.
    unsafe {
        libc::write(2, line.as_ptr() as *const c_void, line.len());
    }
}

/// Logs when the level is enabled.
macro_rules! vlog {
    ($level:expr, $($arg:tt)*) => {
        if $crate::state::log_enabled($level) {
            $crate::state::emit($level, format_args!($($arg)*));
        }
    };
}
pub(crate) use vlog;

fn names() -> &'static Mutex<HashMap<usize, String>> {
    let p = NAMES.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: NAMES only ever holds pointers from Box::into_raw that are never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::new(Mutex::new(HashMap::new())));
    match NAMES.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: we just published it; it is never freed.
        Ok(_) => unsafe { &*fresh },
        Err(existing) => {
            // SAFETY: `fresh` came from Box::into_raw above and was not published.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: as above, a published, never-freed map.
            unsafe { &*existing }
        }
    }
}

/// Whether `stream` is capturing, asked only while some capture is active. `flavor` picks the
/// per-thread or legacy query so that the null stream means what it meant for the launch.
fn is_capturing(stream: CUstream, flavor: Flavor) -> bool {
    if ACTIVE_CAPTURES.get() == 0 {
        return false;
    }
    let id = if flavor.is_per_thread() { HookId::cuStreamIsCapturing_ptsz } else { HookId::cuStreamIsCapturing };
    let Some(p) = real::canonical(id) else { return false };
    type IsCapturing = unsafe extern "C" fn(CUstream, *mut CUstreamCaptureStatus) -> CUresult;
    // SAFETY: p is the driver's cuStreamIsCapturing(_ptsz), which has this signature.
    let f = unsafe { std::mem::transmute::<usize, IsCapturing>(p) };
    let mut status = CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: a stream the application just launched on successfully, and a valid out pointer.
    let r = unsafe { f(stream, &mut status) };
    r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE
}

/// Records one successful kernel launch in the census. The common case (a configuration seen
/// before) is one hash, one probe and one atomic add on a cache line of the shim's own.
pub fn record_launch(id: HookId, func: usize, grid: [u32; 3], block: [u32; 3], stream: CUstream) {
    if !observing() {
        return;
    }
    let captured = is_capturing(stream, id.spec().flavor);
    if LAUNCHES.record(&LaunchKey { func, grid, block }, captured) == Recorded::New {
        let known = names().lock().unwrap_or_else(|e| e.into_inner()).contains_key(&func);
        if !known {
            // Resolved outside the lock: a driver call.
            let name = kernel_name(func);
            names().lock().unwrap_or_else(|e| e.into_inner()).insert(func, name);
        }
    }
}

/// Records one successful graph launch.
pub fn record_graph_launch(id: HookId, stream: CUstream) {
    if !observing() {
        return;
    }
    if is_capturing(stream, id.spec().flavor) {
        GRAPHS.captured.bump();
    } else {
        GRAPHS.launched.bump();
    }
}

/// The kernel's name from `cuFuncGetName`, else `cuKernelGetName` (a launch handle may be a
/// `CUkernel`), else `<unknown>`.
pub(crate) fn kernel_name(func: usize) -> String {
    type GetName = unsafe extern "C" fn(*mut *const std::ffi::c_char, *mut c_void) -> CUresult;
    for symbol in ["cuFuncGetName", "cuKernelGetName"] {
        let Some(p) = real::driver_symbol(symbol) else { continue };
        // SAFETY: both driver functions have this signature (cuda.h, CUDA 12.3+).
        let f = unsafe { std::mem::transmute::<usize, GetName>(p) };
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: a handle the driver just accepted for a launch, and a valid out pointer.
        let r = unsafe { f(&mut name, func as *mut c_void) };
        if r == CUDA_SUCCESS && !name.is_null() {
            // SAFETY: the driver returns a NUL-terminated string it owns.
            return unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned();
        }
    }
    "<unknown>".to_string()
}

extern "C" fn after_fork_in_child() {
    // Only atomic stores: this runs between fork and its return in the child.
    // SAFETY: getpid is async-signal-safe.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    COUNTERS.reset();
    STATS.reset();
    GRAPHS.launched.reset();
    GRAPHS.captured.reset();
    ACTIVE_CAPTURES.reset();
    LAUNCHES.reset();
    // The parent's name map may have been locked by another thread at the fork: leak it.
    NAMES.store(std::ptr::null_mut(), Ordering::Release);
    crate::bind::after_fork_in_child();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _entered = guard::enter();
        write_census();
    });
}

/// Renders this process's census document.
pub fn census_json() -> serde_json::Value {
    let cfg = config();
    let kernels = {
        let names = names().lock().unwrap_or_else(|e| e.into_inner());
        KernelCensus::from_table(&LAUNCHES, &names)
    };
    let mut doc = Report {
        pid: PID.load(Ordering::Relaxed),
        mode: cfg.mode.name(),
        api: COUNTERS.to_json(),
        interposition: STATS.to_json(),
        graphs: &GRAPHS,
        kernels: &kernels,
        launch_overflow: LAUNCHES.overflow(),
    }
    .to_json();
    if let Some(bind) = crate::bind::census() {
        doc["bind"] = bind;
    }
    doc
}

fn write_census() {
    let Some(cfg) = CONFIG.get() else { return };
    if COUNTERS.total() == 0 && STATS.proc_substituted.get() == 0 && STATS.dlsym_substituted.get() == 0 {
        return; // no CUDA activity in this process (a compiler or shell spawned by the app)
    }
    let pid = PID.load(Ordering::Relaxed);
    let doc = census_json();
    if cfg.log >= LogLevel::Info {
        emit(
            LogLevel::Info,
            format_args!(
                "exit: {} intercepted calls, {} kernel launches, {} graph launches",
                doc["totals"]["intercepted_calls"], doc["totals"]["kernel_launches"], doc["totals"]["graph_launches"]
            ),
        );
    }
    let Some(path) = cfg.census_path(pid) else { return };
    if let Err(e) = crate::census::write_atomically(&path, &doc, pid) {
        if cfg.log >= LogLevel::Error {
            emit(LogLevel::Error, format_args!("could not write the census to {}: {e}", path.display()));
        }
    }
}
