//! Process state of the interposer: configuration, call counters, the launch census, kernel
//! names, logging, exit and fork.
//!
//! Nothing runs at load time. The first intercepted call reads the configuration (the client
//! runtime's, [`vitamin_runtime::config`]), registers an `atexit` handler (writes the census) and
//! a `pthread_atfork` child handler (zeroes the counters: the child writes its own census, in
//! observe mode).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use vitamin_runtime::client::census::{
    ApiCounters, EntryPoint, GraphStats, InterposeStats, KernelCensus, LaunchKey, LaunchTable, Recorded, Report,
};
use vitamin_runtime::config::{Config, LogLevel, Mode};

use crate::hooks::{HookId, HOOKS, HOOK_COUNT};

/// Calls per hook.
pub static COUNTERS: ApiCounters<{ HOOK_COUNT }> = ApiCounters::new();
/// Interposition statistics (only `missing_real` applies: HIP has no entry-point lookup in 5.2).
pub static STATS: InterposeStats = InterposeStats::new();
/// Graph launches.
pub static GRAPHS: GraphStats = GraphStats::new();
/// Launch counts per (function, grid, block).
pub static LAUNCHES: LaunchTable = LaunchTable::new();

static CONFIG: OnceLock<Config> = OnceLock::new();
static PID: AtomicU32 = AtomicU32::new(0);

/// Kernel names by handle: host stubs (`__hipRegisterFunction`) and module functions
/// (`hipModuleGetFunction`), behind an atomic pointer so that a forked child can detach the
/// parent's map (another thread may have held its lock at the fork) and start its own.
static NAMES: AtomicPtr<Mutex<HashMap<usize, String>>> = AtomicPtr::new(std::ptr::null_mut());

fn names() -> &'static Mutex<HashMap<usize, String>> {
    let p = NAMES.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: NAMES only ever holds pointers from Box::into_raw that are never freed.
        return unsafe { &*p };
    }
    let fresh = Box::into_raw(Box::default());
    match NAMES.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: just published; never freed.
        Ok(_) => unsafe { &*fresh },
        Err(existing) => {
            // SAFETY: `fresh` came from Box::into_raw above and was not published.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: a published, never-freed map.
            unsafe { &*existing }
        }
    }
}

/// The configuration, initializing the process state on first use.
#[inline]
pub fn config() -> &'static Config {
    CONFIG.get_or_init(init)
}

/// Whether calls are counted (observe and bind modes).
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
    vitamin_runtime::client::log::install(emit, cfg.log);
    // SAFETY: getpid has no preconditions.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    // SAFETY: plain extern "C" handlers without arguments that never unwind.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    }
    vitamin_runtime::client::log::announce(&cfg, layers, "libvitamin_hip", emit);
    cfg
}

/// Whether a message at `level` would be printed (never initializes anything).
#[inline]
pub fn log_enabled(level: LogLevel) -> bool {
    CONFIG.get().is_some_and(|c| c.log >= level)
}

/// Emits one log event through `tracing`.
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

/// One log line to stderr with one `write(2)`.
fn write_stderr(line: &str) {
    let line = format!("[vitamin {}] {line}", PID.load(Ordering::Relaxed));
    // SAFETY: an initialized buffer of the given length, written to fd 2.
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

/// Notes the name of kernel handle `f` (a host stub or a module function).
pub fn note_name(f: usize, name: &str) {
    if f != 0 {
        names().lock().unwrap_or_else(|e| e.into_inner()).insert(f, name.to_owned());
    }
}

/// The name noted for `f`, or `<unknown>`.
pub fn kernel_name(f: usize) -> String {
    names().lock().unwrap_or_else(|e| e.into_inner()).get(&f).cloned().unwrap_or_else(|| "<unknown>".into())
}

/// Records one successful kernel launch in the census (`captured`: its stream was capturing).
pub fn record_launch(func: usize, grid: [u32; 3], block: [u32; 3], captured: bool) {
    if observing() {
        let _: Recorded = LAUNCHES.record(&LaunchKey { func, grid, block }, captured);
    }
}

/// Records one successful graph launch.
pub fn record_graph_launch(captured: bool) {
    if observing() {
        if captured {
            GRAPHS.captured.bump();
        } else {
            GRAPHS.launched.bump();
        }
    }
}

extern "C" fn after_fork_in_child() {
    // Only atomic stores: this runs between fork and its return in the child.
    // SAFETY: getpid is async-signal-safe.
    PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    COUNTERS.reset();
    STATS.reset();
    GRAPHS.launched.reset();
    GRAPHS.captured.reset();
    LAUNCHES.reset();
    // The parent's name map may have been locked by another thread at the fork: leak it.
    NAMES.store(std::ptr::null_mut(), Ordering::Release);
    crate::bind::after_fork_in_child();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let _entered = vitamin_runtime::client::guard::enter();
        write_census();
    });
}

/// The family of a hooked symbol, for the census.
fn family(symbol: &str) -> &'static str {
    let s = symbol.trim_start_matches('_');
    if s.contains("Launch") && !s.starts_with("hipGraph") || s.starts_with("hipRegister") {
        "launch"
    } else if s.starts_with("hipStream") {
        "stream"
    } else if s.starts_with("hipEvent") {
        "event"
    } else if s.starts_with("hipMem")
        || s.starts_with("hipFree")
        || s.starts_with("hipHost")
        || s.starts_with("hipMalloc")
    {
        "memory"
    } else if s.starts_with("hipModule") {
        "module"
    } else if s.starts_with("hipGraph") {
        "graph"
    } else {
        "device"
    }
}

/// This process's census document (schema `vitamin.shim.census/1`, as the CUDA interposer's).
pub fn census_json() -> serde_json::Value {
    let cfg = config();
    let kernels = {
        let names = names().lock().unwrap_or_else(|e| e.into_inner());
        KernelCensus::from_table(&LAUNCHES, &names)
    };
    let entry_points = HOOKS.iter().enumerate().map(|(index, id)| {
        let symbol = id.symbol();
        EntryPoint { index, symbol, base: symbol.trim_end_matches("_spt"), family: family(symbol) }
    });
    let mut doc = Report {
        pid: PID.load(Ordering::Relaxed),
        mode: cfg.mode.name(),
        api: COUNTERS.to_json(entry_points),
        interposition: STATS.to_json(),
        graphs: &GRAPHS,
        kernels: &kernels,
        launch_overflow: LAUNCHES.overflow(),
    }
    .to_json();
    doc["interposer"] = "hip".into();
    if let Some(bind) = crate::bind::census() {
        doc["bind"] = bind;
    }
    doc
}

fn write_census() {
    let Some(cfg) = CONFIG.get() else { return };
    if COUNTERS.total() == 0 {
        return; // no HIP activity in this process
    }
    let pid = PID.load(Ordering::Relaxed);
    let doc = census_json();
    let Some(path) = cfg.census_path(pid) else { return };
    if let Err(e) = vitamin_runtime::client::census::write_atomically(&path, &doc, pid) {
        vlog!(LogLevel::Error, "could not write the census to {}: {e}", path.display());
    }
}

/// The hook table's index of `id` (the counters' index).
pub fn index(id: HookId) -> usize {
    id as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_of_hooked_symbols() {
        assert_eq!(family("hipLaunchKernel"), "launch");
        assert_eq!(family("hipModuleLaunchKernel"), "launch");
        assert_eq!(family("__hipRegisterFunction"), "launch");
        assert_eq!(family("hipGraphLaunch"), "graph");
        assert_eq!(family("hipStreamSynchronize_spt"), "stream");
        assert_eq!(family("hipEventRecord"), "event");
        assert_eq!(family("hipMemcpyAsync"), "memory");
        assert_eq!(family("hipFree"), "memory");
        assert_eq!(family("hipModuleGetFunction"), "module");
        assert_eq!(family("hipDeviceSynchronize"), "device");
    }
}
