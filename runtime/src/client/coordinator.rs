//! The in-process coordinator: the policy runs inside the interposer.
//!
//! One thread (`vitamin-dispatch`) runs a [`Dispatcher`] over the interposer's pool backend
//! ([`NativeApi::Backend`]) on the device of the application's primary context (behind a lock it
//! holds one round at a time, so that with [`Tuning::inline`] application threads can submit in
//! between). It is started by the first bind-mode call that needs it: the thread creates the
//! backend (one unit split) and realizes every pool node as a physical context with its lanes (the
//! H200's 59 nodes: about 100 ms, docs/STATUS.md), reports the outcome to the starting call, and
//! from then on pumps: intake of ready ops from the application's virtual context, lane
//! continuation, policy binding, batched completion polling. Later launches never wait for
//! realization; they only record ops.
//!
//! The thread holds the interposer's re-entry guard ([`NativeApi::enter_runtime_thread`]) for its
//! whole life: every driver call it makes (the backend's launches, copies, fences, which go through
//! the interposer's exported symbols or its symbol lookups) is forwarded untouched instead of being
//! taken for an application call.
//!
//! A second thread (`vitamin-submit`, the backend's submission thread, [`Tuning::submit_thread`],
//! on by default) issues the driver calls of bursts of submissions, so that a streamed chain's
//! launches overlap the dispatcher's bookkeeping; it enters the re-entry guard too. A lone
//! submission is issued by the dispatcher thread itself.
//!
//! Application threads do part of the work themselves: a fresh op (the first launch after a wait)
//! is bound and launched by the thread recording it ([`Coordinator::record_eager`], eager binding),
//! optionally with the dependent ops behind it ([`Tuning::eager_continue`]; by default the next
//! [`Tuning::eager_continue_ops`] after a launch-first launch), and a thread waiting
//! in a synchronize call polls its own completions ([`Tuning::wait_assist`]), then spins on the
//! fence words of the ops it waits for and returns as soon as they are reached
//! ([`Tuning::fast_wait`]): on this VM a hand-off between threads costs microseconds, a wake-up
//! of a parked thread tens, and a cache line moved between two cores about 0.2 us.
//!
//! Waiting: with work in flight the thread spins (yielding, on lock-free hints) until new work
//! arrives, a thread starts waiting in a synchronize call (without the wait assist), or the poll
//! interval passes; it polls every round while progress waits on completions. It starts no round
//! while an application thread spins for its lock to launch, and holds a round off while a
//! waiting thread's polls hold the lock and, once that thread returned, until its next submission
//! ([`Tuning::wake_grace`]). With nothing to do it
//! spins briefly, then parks in [`VirtualContext::wait_for_work`], which new ops, eager submissions
//! and newly waiting threads (without the wait assist) wake. `dispatch_nap` makes it nap
//! instead of spinning (experimental, measured worse).
//!
//! Shutdown ([`Coordinator::stop`], at process exit): the thread publishes its statistics and exits
//! without tearing the pool down (the process is ending; the driver reclaims the physical contexts).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use vitamin_hal::Backend;

use super::log::clog as vlog;
use super::native::{NativeApi, PoolBackend};
use crate::config::LogLevel;
use crate::dispatch::{DispatchConfig, Dispatcher};
use crate::policy::{AnyPolicy, ClientClass, Policy, PolicyKind};
use crate::pool::PoolLayout;
use crate::profile::Profiles;
use crate::VirtualContext;

/// How the coordinator schedules (from `VITAMIN_POLICY`, `VITAMIN_SEED`, `VITAMIN_LANE_CONTINUATION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The policy.
    pub policy: PolicyKind,
    /// Seed of the Chaos policy.
    pub seed: u64,
    /// Lane continuation (default) or strict readiness.
    pub lane_continuation: bool,
    /// Measurement knobs (environment, read once at start).
    pub tuning: Tuning,
    /// The coordination daemon's socket, if bindings come from one.
    pub daemon: Option<std::path::PathBuf>,
    /// The class the daemon sees.
    pub class: ClientClass,
    /// The profile file the policy sizes launches by (`profiles`); `None`: the wave model.
    pub profiles: Option<std::path::PathBuf>,
    /// Where to write the recorded profile at stop (`profile_out`, this process's path); `None`:
    /// nothing is recorded.
    pub profile_out: Option<std::path::PathBuf>,
}

impl Settings {
    /// The settings of `config` (policy, seed, lane continuation), with the tuning knobs read
    /// through `get` (the environment in the interposer).
    pub fn from_config(config: &crate::config::Config, get: impl Fn(&str) -> Option<String>) -> Settings {
        Settings {
            policy: config.policy,
            seed: config.seed,
            lane_continuation: config.lane_continuation,
            tuning: Tuning::from_lookup(get),
            daemon: config.daemon.clone(),
            class: config.class,
            profiles: config.profiles.clone(),
            profile_out: config.profile_out_path(std::process::id()),
        }
    }
}

/// Tuning knobs for measurements, not part of the stable interface: the `[advanced]` keys of the
/// configuration (docs/config.md lists them with the measurement behind each default). Every
/// field is the default unless its key is set; the parser asks for each by its variable name
/// (`VITAMIN_` + the key), which the configuration layers answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuning {
    /// `continuation_depth`: ops lane continuation may queue on one lane.
    pub continuation_depth: u32,
    /// `continuation_us`: bound on a lane's predicted backlog for continuation, ns.
    pub continuation_ns: u64,
    /// `poll_interval_us`: least time between completion polls while nothing waits, ns.
    pub poll_interval_ns: u64,
    /// `VITAMIN_PROFILE_DISPATCH=1`: per-phase dispatcher times in the census.
    pub profile_phases: bool,
    /// `inline=1`: application threads submit the ready ops they record when the
    /// dispatcher is free (experimental; off).
    pub inline: bool,
    /// `wait_assist`: threads spinning in a synchronize call poll completions
    /// themselves when the dispatcher is free (on by default; replaces the native wait).
    pub wait_assist: bool,
    /// `native_wait=1`: threads spinning in a synchronize call wait on the lanes their
    /// ops were submitted to with the driver's stream synchronize ([`Coordinator::native_wait`]; not under
    /// blocking synchronization; experimental, off: no gain measured on the H200).
    pub native_wait: bool,
    /// `idle_spin_us`: how long the idle dispatcher thread naps before it parks.
    pub idle_spin: Duration,
    /// `sync_spin_us`: how long synchronize calls spin before they park (`None`: by the
    /// application's scheduling flags).
    pub sync_spin: Option<Duration>,
    /// `sync_yield=0|1`: whether spinning synchronize calls yield the CPU between checks
    /// (`None`: by the application's scheduling flags, as the driver does: only when the
    /// application asked for yielding, [`HostWait::Yield`](super::native::HostWait::Yield)).
    pub sync_yield: Option<bool>,
    /// `dispatch_cpu`: the CPU the dispatcher thread pins itself to (placement
    /// experiments; unpinned by default).
    pub dispatch_cpu: Option<usize>,
    /// `submit_thread`: whether a second thread issues bursts of driver calls while the
    /// dispatcher thread decides (the backend's submission thread).
    pub submit_thread: bool,
    /// `submit_burst_us`: submissions closer than this to the previous one go to the
    /// submission thread.
    pub submit_burst: Duration,
    /// `submit_spin_us`: how long the idle submission thread spins before it parks
    /// (`None`: the backend's default).
    pub submit_spin: Option<Duration>,
    /// `tight_poll`: whether the dispatcher thread polls completions in a tight loop
    /// (no rounds, no yield) while host threads wait and nothing else is to be done (on by
    /// default).
    pub tight_poll: bool,
    /// `eager`: whether a thread recording a fresh op (ready at once) binds and submits
    /// it itself when the dispatcher is free ([`Coordinator::record_eager`]; on by default).
    pub eager: bool,
    /// `launch_first`: under eager binding, a fresh plain kernel launch is made on its
    /// lane with the application's own argument pointers before its descriptor is copied and
    /// recorded ([`Coordinator::launch_first`]; on by default after same-call
    /// measurements on the H200: see [`LAUNCH_FIRST`]).
    pub launch_first: bool,
    /// `dispatch_nap`: how the dispatcher thread waits between rounds when nothing
    /// needs it at once (`off`, the default: it spins, yielding; `all`: it naps, idle or with
    /// work in flight; `busy`: it naps only with work in flight; experimental, measured worse).
    pub nap: Nap,
    /// `eager_continue`: whether, under eager binding, a thread recording an op whose
    /// live predecessors are all submitted continues it on their lane itself when the
    /// dispatcher is free (lane continuation on the recording thread; off by default).
    pub eager_continue: bool,
    /// `eager_continue_ops`: under eager binding, how many ops a thread records after
    /// each of its launch-first launches it continues itself as under
    /// [`eager_continue`](Self::eager_continue) (an operator's launches after the first one:
    /// the application thread then launches a small operator's kernels, as natively, while the
    /// ops of long launch streams still go to the dispatcher; 0: none).
    pub eager_continue_ops: u32,
    /// `busy_query_us`: least time between fence queries of a lane the submission thread
    /// still feeds ([`PoolBackend::set_busy_query`]; `None`: the backend's default).
    pub busy_query: Option<Duration>,
    /// `spin_yield`: whether the dispatcher thread yields the CPU (`sched_yield`) at
    /// each check while it spins ([`relax`]); without, it runs a batch of pause instructions.
    pub spin_yield: bool,
    /// `defer_to_waiters`: with work in flight and nothing else to do, the dispatcher
    /// thread skips its periodic poll round while threads waiting in synchronize calls poll for
    /// themselves (the wait assist), instead of taking the lock they poll under (experimental, off).
    pub defer_to_waiters: bool,
    /// `fast_wait`: whether a thread waiting in a synchronize call, once every op it
    /// waits for is covered by a memory fence, spins on the lanes' fence words without the
    /// dispatcher lock and returns when they are reached ([`Coordinator::assist_wait`]),
    /// leaving the ops' retirement to the next holder of the vCtx lock and the pool's
    /// bookkeeping to the next poll (on by default).
    pub fast_wait: bool,
    /// `lf_lock_wait_us`: how long a launch-first launch spins for the dispatcher lock
    /// the dispatcher thread holds before it is handed over instead (0: only tried).
    pub lf_lock_wait: Duration,
    /// `wake_grace_us`: when the dispatcher thread, about to run a round, found its lock
    /// held by a thread polling in a synchronize call that has since returned, how long the round
    /// waits for that thread's next submission (0: none, the round follows at once).
    pub wake_grace: Duration,
    /// `unbound_timeout_ms` (`VITAMIN_UNBOUND_TIMEOUT_MS`): how long ready work may stay unbound
    /// with nothing of this process in flight, or the dispatcher thread go without a round, before
    /// a waiting call returns [`VctxError::Timeout`](crate::VctxError::Timeout) instead of waiting
    /// on ([`Coordinator::check_progress`]).
    pub unbound_timeout: Duration,
    /// `max_outstanding_ops` (`VITAMIN_MAX_OUTSTANDING_OPS`): recorded ops not yet retired past
    /// which a recording call waits (bounded like a synchronize call), as a native launch blocks
    /// when the driver's queue is full.
    pub max_outstanding: usize,
    /// `max_staged_bytes`: pageable source bytes staged by copies still in flight past which a
    /// pageable copy runs synchronously (the native path) instead of being staged.
    pub max_staged_bytes: u64,
    /// `start_timeout_ms`: how long the first bind-mode call waits for the dispatcher thread to
    /// realize the pool before the process falls back to observe mode.
    pub start_timeout: Duration,
    /// `pool`: how the pool is laid out and when its partitions are created.
    pub pool: PoolLayout,
    /// Whether `pool` was set to a value that is none of its three (then it is the default).
    pub pool_unknown: bool,
    /// `remainders`: whether a hierarchical or flat pool creates its remainder nodes' partitions
    /// at start-up (`start-up`) rather than at their first use (`on-demand`, the default).
    pub remainders_at_start: bool,
    /// Whether `remainders` was set to a value that is neither of its two.
    pub remainders_unknown: bool,
    /// `guard_hold_ms`: the longest a best-effort process under a TPOT-First daemon holds back a
    /// launch it would share on the whole device while a latency-critical client is busy
    /// ([`DispatchConfig::guard_hold_max_ns`]).
    pub guard_hold: Duration,
    /// `fault_dispatch` (fault injection for tests): `panic:N` / `hang:N`, the dispatcher thread
    /// panics / stops making progress (holding its lock) at its first round after N ops were
    /// submitted.
    pub fault: Option<(Fault, u64)>,
}

/// An injected dispatcher fault ([`Tuning::fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The dispatcher thread panics.
    Panic,
    /// The dispatcher thread stops in a round, holding its lock, until the process stops it.
    Hang,
}

impl Fault {
    fn parse(v: &str) -> Option<(Fault, u64)> {
        let (what, n) = v.trim().split_once(':')?;
        let fault = match what.trim() {
            "panic" => Fault::Panic,
            "hang" => Fault::Hang,
            _ => return None,
        };
        Some((fault, n.trim().parse().ok()?))
    }
}

impl Tuning {
    /// Reads the knobs through `get` (the process's configuration layers in the interposer).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Tuning {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u64>().ok());
        let flag = |k: &str, value: &str| get(k).is_some_and(|v| v.trim() == value);
        Tuning {
            continuation_depth: num("continuation_depth")
                .map_or(CONTINUATION_DEPTH, |d| d.clamp(1, u64::from(u32::MAX)) as u32),
            continuation_ns: num("continuation_us").map_or(CONTINUATION_NS, |us| us.saturating_mul(1000)),
            poll_interval_ns: num("poll_interval_us").map_or(POLL_INTERVAL_NS, |us| us.saturating_mul(1000)),
            profile_phases: flag("VITAMIN_PROFILE_DISPATCH", "1"),
            inline: flag("inline", "1"),
            wait_assist: get("wait_assist").map_or(WAIT_ASSIST, |v| v.trim() == "1"),
            native_wait: flag("native_wait", "1"),
            idle_spin: num("idle_spin_us").map_or(IDLE_SPIN, Duration::from_micros),
            sync_spin: num("sync_spin_us").map(Duration::from_micros),
            sync_yield: get("sync_yield").and_then(|v| match v.trim() {
                "0" => Some(false),
                "1" => Some(true),
                _ => None,
            }),
            dispatch_cpu: num("dispatch_cpu").and_then(|c| usize::try_from(c).ok()),
            submit_thread: get("submit_thread").map_or(SUBMIT_THREAD, |v| v.trim() == "1"),
            submit_burst: num("submit_burst_us").map_or(SUBMIT_BURST, Duration::from_micros),
            submit_spin: num("submit_spin_us").map(Duration::from_micros),
            eager: get("eager").map_or(EAGER, |v| v.trim() == "1"),
            launch_first: get("launch_first").map_or(LAUNCH_FIRST, |v| v.trim() == "1"),
            nap: match get("dispatch_nap").as_deref().map(str::trim) {
                Some("off") => Nap::Off,
                Some("busy") => Nap::Busy,
                Some("all") => Nap::All,
                _ => NAP,
            },
            eager_continue: get("eager_continue").map_or(EAGER_CONTINUE, |v| v.trim() == "1"),
            eager_continue_ops: num("eager_continue_ops")
                .map_or(EAGER_CONTINUE_OPS, |n| n.min(u64::from(u32::MAX)) as u32),
            tight_poll: get("tight_poll").map_or(TIGHT_POLL, |v| v.trim() == "1"),
            busy_query: num("busy_query_us").map(Duration::from_micros),
            spin_yield: get("spin_yield").map_or(SPIN_YIELD, |v| v.trim() == "1"),
            defer_to_waiters: get("defer_to_waiters").map_or(DEFER_TO_WAITERS, |v| v.trim() == "1"),
            fast_wait: get("fast_wait").map_or(FAST_WAIT, |v| v.trim() == "1"),
            lf_lock_wait: num("lf_lock_wait_us").map_or(LF_LOCK_WAIT, Duration::from_micros),
            wake_grace: num("wake_grace_us").map_or(WAKE_GRACE, Duration::from_micros),
            unbound_timeout: num("VITAMIN_UNBOUND_TIMEOUT_MS")
                .map_or(UNBOUND_TIMEOUT, |ms| Duration::from_millis(ms.max(1))),
            max_outstanding: num("VITAMIN_MAX_OUTSTANDING_OPS")
                .map_or(MAX_OUTSTANDING, |n| usize::try_from(n.max(1)).unwrap_or(usize::MAX)),
            max_staged_bytes: num("max_staged_bytes").unwrap_or(MAX_STAGED_BYTES),
            start_timeout: num("start_timeout_ms").map_or(START_TIMEOUT, |ms| Duration::from_millis(ms.max(1))),
            pool: get("pool").as_deref().and_then(PoolLayout::parse).unwrap_or_default(),
            pool_unknown: get("pool").is_some_and(|v| PoolLayout::parse(&v).is_none()),
            remainders_at_start: get("remainders").is_some_and(|v| v.trim().eq_ignore_ascii_case("start-up")),
            remainders_unknown: get("remainders")
                .is_some_and(|v| !["start-up", "on-demand"].iter().any(|k| v.trim().eq_ignore_ascii_case(k))),
            guard_hold: num("guard_hold_ms").map_or(GUARD_HOLD, Duration::from_millis),
            fault: get("fault_dispatch").as_deref().and_then(Fault::parse),
        }
    }
}

/// What the started coordinator reports.
#[derive(Debug, Clone)]
pub struct Started<B> {
    /// Device name.
    pub device: String,
    /// Every pool node's units, by node id.
    pub nodes: Vec<String>,
    /// Wall time to create the backend and realize the pool, ms.
    pub realize_ms: f64,
    /// The policy deciding this process's bindings: the configured one, or the daemon's once
    /// attached to one.
    pub policy: &'static str,
    /// A handle on the backend (shared state), for calls that need no dispatcher lock.
    pub backend: B,
    /// The application's client id in the dispatcher (its virtual context's registration).
    pub client: usize,
}

type Shim<N> = Dispatcher<<N as NativeApi>::Backend, AnyPolicy>;

/// The dispatcher, shared by the dispatcher thread and application threads that submit inline.
/// `None` until the pool is realized and after shutdown.
type Slot<N> = Arc<parking_lot::Mutex<Option<Shim<N>>>>;

/// The running coordinator.
pub struct Coordinator<N: NativeApi> {
    /// What start-up built.
    pub started: Started<N::Backend>,
    /// The interposer's side.
    native: Arc<N>,
    /// The application's client id in the dispatcher.
    client: usize,
    stop: Arc<AtomicBool>,
    stopped: Mutex<Option<mpsc::Receiver<()>>>,
    stats: Arc<Mutex<Option<serde_json::Value>>>,
    dispatcher: Slot<N>,
    /// Inline submission from application threads (`inline=1`; off by default).
    inline: bool,
    inline_errors: std::sync::atomic::AtomicU64,
    /// Whether waiting threads count their polls for the dispatcher thread
    /// ([`Tuning::defer_to_waiters`]; off by default, when the count is not kept).
    count_assists: bool,
    /// Submissions made by application threads, which the dispatcher thread must learn of.
    submits: Arc<Submits>,
    /// [`Tuning::fast_wait`].
    fast_wait: bool,
    /// [`Tuning::lf_lock_wait`].
    lf_lock_wait: Duration,
    /// What waiting calls check between slices of their waits.
    health: Arc<Health>,
    /// [`Tuning::unbound_timeout`].
    unbound_timeout: Duration,
}

/// Counts of submissions made by application threads ([`Coordinator`]).
#[derive(Debug, Default)]
struct Submits {
    /// Inline submissions that submitted something: the dispatcher thread runs a round at once
    /// (and must not park while such work is in flight unobserved).
    inline: std::sync::atomic::AtomicU64,
    /// Eager submissions: the dispatcher thread must not park while such work is in flight
    /// unobserved, but leaves its lock to the application thread (which continues its lane and
    /// polls its own completions) for a poll interval before its next round.
    eager: std::sync::atomic::AtomicU64,
    /// Completion polls made by waiting threads ([`Coordinator::assist_wait`]): while they poll,
    /// the dispatcher thread leaves its periodic poll to them ([`Tuning::defer_to_waiters`]).
    assists: std::sync::atomic::AtomicU64,
    /// Launch-first attempts whose op would not have been fresh (the vCtx's locked check).
    lf_not_fresh: std::sync::atomic::AtomicU64,
    /// Launch-first attempts that found the dispatcher lock held for longer than
    /// [`Tuning::lf_lock_wait`].
    lf_dispatcher_busy: std::sync::atomic::AtomicU64,
    /// Launch-first attempts that found the dispatcher lock held and got it within
    /// [`Tuning::lf_lock_wait`].
    lf_lock_waited: std::sync::atomic::AtomicU64,
    /// Their total wait, ns.
    lf_lock_wait_ns: std::sync::atomic::AtomicU64,
    /// Rounds the dispatcher thread held back after a waiting thread returned ([`Tuning::wake_grace`]).
    graces: std::sync::atomic::AtomicU64,
    /// Application threads spinning for the dispatcher lock ([`Coordinator::launch_first`]):
    /// while nonzero, the dispatcher thread starts no round or poll.
    lock_wanted: std::sync::atomic::AtomicU32,
    /// Waits that ended on fence words a waiting thread read itself ([`Tuning::fast_wait`]).
    fast_waits: std::sync::atomic::AtomicU64,
    /// Until when (ns after `epoch`) a waiting thread spins on fence words: the dispatcher
    /// thread's tight polling leaves the lanes to it until then.
    probing_until_ns: std::sync::atomic::AtomicU64,
    /// The clock of `probing_until_ns`.
    epoch: std::sync::OnceLock<Instant>,
}

impl Submits {
    fn now_ns(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    /// Whether a waiting thread spins on fence words now (see `probing_until_ns`).
    fn waiter_probing(&self) -> bool {
        let until = self.probing_until_ns.load(Ordering::Relaxed);
        until != 0 && self.now_ns() < until
    }
}

/// What waiting calls learn of the dispatcher thread without its lock ([`Coordinator::check_progress`]).
#[derive(Debug, Default)]
struct Health {
    /// Set when the dispatcher thread ended (a panic, or stop at exit), with why.
    lost: std::sync::OnceLock<String>,
    /// Bumped by the dispatcher thread at every turn of its loops: a waiting call that sees it
    /// still for [`Tuning::unbound_timeout`] knows the thread is stuck.
    beats: std::sync::atomic::AtomicU64,
    /// Set by the stall watch while ready work has stayed unbound with nothing in flight for
    /// longer than [`Tuning::unbound_timeout`]; cleared when work progresses again.
    stalled: AtomicBool,
    /// Whether a waiting call already logged why it gave up (once per process).
    logged: AtomicBool,
}

impl Health {
    /// Called by the dispatcher thread only (the one writer): a plain store, no locked
    /// read-modify-write in its spin loops.
    fn beat(&self) {
        let b = self.beats.load(Ordering::Relaxed);
        self.beats.store(b.wrapping_add(1), Ordering::Relaxed);
    }

    /// [`Coordinator::check_progress`]'s decision (without the log), `bound` being
    /// [`Tuning::unbound_timeout`].
    fn check(&self, seen: &mut Progress, bound: Duration) -> Result<(), crate::VctxError> {
        if let Some(why) = self.lost.get() {
            return Err(crate::VctxError::RuntimeLost(format!("{why}; recorded work can no longer reach the device")));
        }
        if self.stalled.load(Ordering::Acquire) {
            return Err(crate::VctxError::Timeout(format!(
                "ready work stayed unbound with nothing in flight for over {} ms (unbound_timeout_ms)",
                bound.as_millis()
            )));
        }
        let beats = self.beats.load(Ordering::Relaxed);
        let Some(since) = seen.since.filter(|_| beats == seen.beats) else {
            *seen = Progress { beats, since: Some(Instant::now()) };
            return Ok(());
        };
        if since.elapsed() < bound {
            return Ok(());
        }
        Err(crate::VctxError::Timeout(format!(
            "the dispatcher thread made no progress for over {} ms (unbound_timeout_ms)",
            bound.as_millis()
        )))
    }
}

/// What one bounded wait saw of the dispatcher thread ([`Coordinator::check_progress`]): its
/// beat count, and since when it has not changed (taken at the first check, so that a wait that
/// ends in its first slice reads no clock).
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    beats: u64,
    since: Option<Instant>,
}

/// What a thread waiting in a synchronize call spins on under [`Tuning::fast_wait`]: the ops it
/// waits for, and for each the progress of its lane and its sequence number there.
#[derive(Default)]
struct Probe {
    ops: smallvec::SmallVec<[crate::OpId; 4]>,
    lanes: smallvec::SmallVec<[(vitamin_hal::LaneProgress, u64); 4]>,
    /// When the thread polls completions again the usual way (errors, and anything the words
    /// do not cover).
    next_poll: Option<Instant>,
}

thread_local! {
    static PROBE: std::cell::RefCell<Probe> = std::cell::RefCell::new(Probe::default());
}

/// How often a thread spinning on fence words ([`Tuning::fast_wait`]) still polls completions
/// the usual way: a failed kernel never lets its fence write run, so its error surfaces at such
/// a poll.
const FAST_WAIT_POLL: Duration = Duration::from_micros(100);

impl<N: NativeApi> std::fmt::Debug for Coordinator<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").field("started", &self.started).field("inline", &self.inline).finish()
    }
}

impl<N: NativeApi> Coordinator<N> {
    /// Starts the dispatcher thread for device `ordinal` and waits until the pool is realized.
    pub fn start(
        native: Arc<N>,
        ordinal: i32,
        vctx: Arc<VirtualContext>,
        settings: Settings,
    ) -> Result<Coordinator<N>, String> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<Started<N::Backend>, String>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(None));
        let dispatcher: Slot<N> = Arc::new(parking_lot::Mutex::new(None));
        let submits = Arc::new(Submits::default());
        let health = Arc::new(Health::default());
        let (stop2, stats2, slot2, submits2) = (stop.clone(), stats.clone(), dispatcher.clone(), submits.clone());
        let (native2, health2) = (native.clone(), health.clone());
        let tuning = settings.tuning;
        let spawned = std::thread::Builder::new().name("vitamin-dispatch".into()).spawn(move || {
            let _entered = N::enter_runtime_thread();
            let ready_tx2 = ready_tx.clone();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let shared =
                    ThreadShared { stop: &stop2, stats: &stats2, slot: &slot2, submits: &submits2, health: &health2 };
                run(&*native2, ordinal, vctx, settings, ready_tx, shared);
            }));
            if run.is_err() {
                let _ = ready_tx2.send(Err("the dispatcher thread panicked".into()));
                vlog!(LogLevel::Error, "the dispatcher thread panicked; bound work stops progressing");
                // Application threads must not submit or poll through a dispatcher whose thread
                // is gone (its state may be half-updated): they see none. The process keeps the
                // physical contexts (as at exit).
                if let Some(d) = slot2.lock().take() {
                    std::mem::forget(d);
                }
            }
            let why = if run.is_err() { "the dispatcher thread panicked" } else { "the dispatcher thread stopped" };
            let _ = health2.lost.set(why.into());
            let _ = done_tx.send(());
        });
        if let Err(e) = spawned {
            return Err(format!("could not start the dispatcher thread: {e}"));
        }
        let start_timeout = tuning.start_timeout;
        match ready_rx.recv_timeout(start_timeout) {
            Ok(Ok(started)) => Ok(Coordinator {
                client: started.client,
                started,
                native,
                stop,
                stopped: Mutex::new(Some(done_rx)),
                stats,
                dispatcher,
                inline: tuning.inline,
                inline_errors: std::sync::atomic::AtomicU64::new(0),
                count_assists: tuning.defer_to_waiters,
                submits,
                fast_wait: tuning.fast_wait,
                lf_lock_wait: tuning.lf_lock_wait,
                health,
                unbound_timeout: tuning.unbound_timeout,
            }),
            Ok(Err(e)) => Err(e),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The thread, once it gets there, finds nobody to report to and ends.
                stop.store(true, Ordering::Release);
                Err(format!(
                    "the dispatcher thread did not realize the pool within {} ms (start_timeout_ms)",
                    start_timeout.as_millis()
                ))
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err("the dispatcher thread ended during start-up".into()),
        }
    }

    /// The dispatcher thread's progress now, for a bounded wait starting
    /// ([`check_progress`](Self::check_progress)).
    pub fn progress(&self) -> Progress {
        Progress { beats: self.health.beats.load(Ordering::Relaxed), since: None }
    }

    /// Between slices of a bounded wait (every synchronize call, drain and held recording call):
    /// an error if the wait can no longer end by itself.
    /// [`VctxError::RuntimeLost`](crate::vctx::VctxError::RuntimeLost) when the dispatcher thread
    /// ended; [`VctxError::Timeout`](crate::vctx::VctxError::Timeout) when ready work has stayed
    /// unbound with nothing in flight for [`Tuning::unbound_timeout`] (the stall watch says so) or the
    /// dispatcher thread has not turned its loop for that long since `seen` (stuck in a call).
    /// The first such error of the process is logged with its reason.
    pub fn check_progress(&self, seen: &mut Progress) -> Result<(), crate::VctxError> {
        let Err(error) = self.health.check(seen, self.unbound_timeout) else { return Ok(()) };
        if !self.health.logged.swap(true, Ordering::AcqRel) {
            vlog!(LogLevel::Error, "a waiting call gives up: {error}");
        }
        Err(error)
    }

    /// Asks the thread to stop and waits up to `timeout` for it; returns whether it stopped.
    pub fn stop(&self, timeout: Duration) -> bool {
        self.stop.store(true, Ordering::Release);
        let rx = self.stopped.lock().unwrap_or_else(|e| e.into_inner()).take();
        rx.is_some_and(|rx| rx.recv_timeout(timeout).is_ok())
    }

    /// Inline submission: an application thread records an op with `record` and, if the
    /// dispatcher was free, binds and submits what became ready itself (intake and binding of
    /// ready ops), so the first launch after the application waited reaches the driver from the
    /// application's own thread, as natively, without a hand-off. The dispatcher lock is taken
    /// *before* recording: the dispatcher thread, which spins on the new-work hint, would
    /// otherwise take the op first. If the dispatcher thread holds the lock, the op is only
    /// recorded (that thread takes it). Lane continuation and completion polling stay with the
    /// dispatcher thread. Never blocks.
    pub fn record_inline<T>(&self, record: impl FnOnce() -> (T, bool)) -> T {
        if !self.inline {
            return record().0;
        }
        let Some(mut slot) = self.dispatcher.try_lock() else { return record().0 };
        let (out, recorded) = record();
        let Some(d) = slot.as_mut().filter(|_| recorded) else { return out };
        match d.pump_submit() {
            Ok(0) => {}
            Ok(_) => {
                self.submits.inline.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) => {
                if self.inline_errors.fetch_add(1, Ordering::Relaxed) < 10 {
                    vlog!(LogLevel::Error, "inline submission failed: {e}; the dispatcher thread retries");
                }
            }
        }
        out
    }

    /// Eager binding ([`Tuning::eager`], on by default): records `desc` on `s` of `vctx` (the
    /// application's context, registered as [`Started::client`]) and, if the op is ready at once and
    /// the dispatcher is free, binds and submits it from this thread through the policy
    /// ([`Dispatcher::submit_fresh`]) before returning: the first launch after the application
    /// waited (a launch-sync loop's every launch) reaches the driver without waiting for the
    /// dispatcher thread to notice, take in and bind it. With `continue_too`
    /// ([`Tuning::eager_continue`]) an op whose live predecessors are all submitted is continued
    /// on their lane the same way ([`Dispatcher::submit_continued`]): the application thread
    /// then launches an operator's kernels on its lane itself, as natively, and the stream's
    /// driver state stays with that thread (a first launch after another thread launched on the
    /// stream cost 1.2-1.3 us more on the H200, `bench/probes/shim/launch_xthread.cu`). Other ops,
    /// and every op while the dispatcher thread is in a round, are only recorded. The dispatcher
    /// lock is only tried, inside the vCtx lock (the reverse of the dispatcher thread's order,
    /// hence never waited for). Never blocks on the dispatcher. `in_pool_context` is asked only
    /// for an offered op: whether this thread's current context is the pool's (the backend
    /// would otherwise switch it).
    pub fn record_eager(
        &self,
        vctx: &VirtualContext,
        s: crate::StreamId,
        desc: Arc<vitamin_hal::OpDesc>,
        continue_too: bool,
        in_pool_context: impl FnOnce() -> bool,
    ) -> Result<crate::Recorded, crate::VctxError> {
        // The dispatcher lock is released only after the vCtx lock: the dispatcher thread,
        // waiting for it (it only ever tries it), cannot then find the vCtx lock held by this
        // thread, park on it and cost this thread a wake-up system call when it releases it.
        let mut held = None;
        let (recorded, taken) = vctx.record_op_eager(s, desc, |op, desc, preds| {
            if !(preds.is_empty() || continue_too) || !in_pool_context() {
                return false;
            }
            let Some(mut slot) = self.dispatcher.try_lock() else { return false };
            let taken = slot.as_mut().is_some_and(|d| {
                if preds.is_empty() {
                    d.submit_fresh(self.client, op, desc)
                } else {
                    d.submit_continued(self.client, op, desc, preds)
                }
            });
            held = Some(slot);
            taken
        })?;
        drop(held);
        if taken {
            // The dispatcher thread must poll it, not park.
            self.submits.eager.fetch_add(1, Ordering::AcqRel);
        }
        Ok(recorded)
    }

    /// Launch-first eager binding ([`Tuning::launch_first`]): if an op recorded on `s` of `vctx`
    /// now would be fresh and the dispatcher lock can be had (waiting up to
    /// [`Tuning::lf_lock_wait`] for the dispatcher thread), binds the launch described by `probe`
    /// (function and shape, no arguments) through the policy's direct answer and makes it on the
    /// chosen lane with `launch` (the application's own argument pointers), then copies the
    /// descriptor with `capture` (`probe` stands in if that fails: the launch already ran, and
    /// the descriptor is then only bookkeeping) and records the op as submitted. So the kernel
    /// starts before vitamin copies, records and accounts for it. Returns `None` when not
    /// applicable (nothing done: the usual path follows), `Some(Ok(()))` when launched and
    /// recorded, and `Some(Err(e))` when the driver refused the launch (nothing recorded, as
    /// natively).
    pub fn launch_first(
        &self,
        vctx: &VirtualContext,
        s: crate::StreamId,
        probe: &Arc<vitamin_hal::OpDesc>,
        mut launch: impl FnMut(u64) -> Result<(), vitamin_hal::HalError>,
        capture: impl FnOnce() -> Option<vitamin_hal::OpDesc>,
    ) -> Option<Result<crate::Recorded, vitamin_hal::HalError>> {
        let mut failure = None;
        let mut fresh = false;
        // The dispatcher lock is taken before the vCtx lock (the dispatcher thread's order), so
        // it may be waited for: right after a synchronize call returned, the dispatcher thread
        // is often in the round that takes in the completion, and the launch would otherwise
        // be handed over.
        vitamin_hal::trace::step(7);
        let Some(slot) = self.lock_for_launch() else {
            self.submits.lf_dispatcher_busy.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        // Moved into the closure: released after the vCtx lock whether or not it is called.
        let recorded = vctx.record_launched_first(
            s,
            || {
                fresh = true;
                let mut slot = slot;
                vitamin_hal::trace::step(8);
                match slot.as_mut()?.launch_fresh_native(self.client, probe, &mut launch)? {
                    Ok(launched) => {
                        let desc = capture().map_or_else(|| probe.clone(), Arc::new);
                        Some((desc, (slot, launched)))
                    }
                    Err(e) => {
                        failure = Some(e);
                        None
                    }
                }
            },
            |op, desc, (mut slot, launched)| {
                if let Some(d) = slot.as_mut() {
                    d.commit_native(launched, op, desc.clone());
                }
                // Released after the vCtx lock (as in `record_eager`).
                slot
            },
        );
        match recorded {
            Ok(Some((recorded, slot))) => {
                drop(slot);
                self.submits.eager.fetch_add(1, Ordering::AcqRel);
                Some(Ok(recorded))
            }
            Ok(None) => {
                if !fresh {
                    self.submits.lf_not_fresh.fetch_add(1, Ordering::Relaxed);
                }
                failure.map(Err)
            }
            Err(e) => {
                vlog!(LogLevel::Error, "launch-first recording failed after the launch: {e}");
                None
            }
        }
    }

    /// The dispatcher lock for an application thread's launch-first: at once when free, else
    /// after spinning up to [`Tuning::lf_lock_wait`] while the dispatcher thread, seeing
    /// `lock_wanted`, starts no new round or poll (it holds the lock for one round or poll at a
    /// time, a few microseconds). `None`: still held (a round with many launches). Spins
    /// rather than parks (`try_lock_for` would park): the holder's unlock would then pay for a
    /// futex wake-up, and this thread for being woken.
    fn lock_for_launch(&self) -> Option<parking_lot::MutexGuard<'_, Option<Shim<N>>>> {
        if let Some(g) = self.dispatcher.try_lock() {
            return Some(g);
        }
        if self.lf_lock_wait.is_zero() {
            return None;
        }
        self.submits.lock_wanted.fetch_add(1, Ordering::AcqRel);
        let start = Instant::now();
        let deadline = start + self.lf_lock_wait;
        let got = loop {
            std::hint::spin_loop();
            if let Some(g) = self.dispatcher.try_lock() {
                break Some(g);
            }
            if Instant::now() >= deadline {
                break None;
            }
        };
        self.submits.lock_wanted.fetch_sub(1, Ordering::AcqRel);
        if got.is_some() {
            self.submits.lf_lock_waited.fetch_add(1, Ordering::Relaxed);
            let waited = start.elapsed().as_nanos() as u64;
            self.submits.lf_lock_wait_ns.fetch_add(waited, Ordering::Relaxed);
        }
        got
    }

    /// Wait assist: a thread spinning in a synchronize call for `ops` polls completions itself
    /// when the dispatcher is free, so it sees its own completion without being woken by
    /// another thread (a native spinning sync polls too). Yields when the dispatcher thread
    /// holds it. Under [`Tuning::fast_wait`], once every op in `ops` is covered by a memory
    /// fence ([`Dispatcher::lane_progress`], learnt at such a poll), the thread instead spins on
    /// the lanes' fence words without the lock, polling the usual way only every
    /// [`FAST_WAIT_POLL`], and returns `true` when every word reached its op: the synchronize
    /// call then returns, the ops (and their ancestors, which completed before them) are
    /// satisfied by the next holder of the vCtx lock, and the pool's bookkeeping by the next
    /// poll. Returns `false` otherwise (a poll satisfies what it observes itself).
    pub fn assist_wait(&self, ops: &[crate::OpId]) -> bool {
        if self.fast_wait {
            let probed = PROBE.with(|p| {
                let p = p.borrow();
                (p.ops.as_slice() == ops && !p.lanes.is_empty())
                    .then(|| (p.lanes.iter().all(|(lane, seq)| lane.reached(*seq)), p.next_poll))
            });
            if let Some((reached, next_poll)) = probed {
                if reached {
                    vitamin_hal::trace::step(25);
                    self.submits.fast_waits.fetch_add(1, Ordering::Relaxed);
                    PROBE.with(|p| p.borrow_mut().lanes.clear());
                    return true;
                }
                if next_poll.is_some_and(|t| Instant::now() < t) {
                    std::hint::spin_loop();
                    return false;
                }
            }
        }
        match self.dispatcher.try_lock() {
            Some(mut slot) => {
                if let Some(d) = slot.as_mut() {
                    if self.count_assists {
                        self.submits.assists.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Err(e) = d.poll_completions() {
                        vlog!(LogLevel::Debug, "polling from a waiting thread failed: {e}");
                    }
                    if self.fast_wait {
                        self.learn_probe(d, ops);
                    }
                }
            }
            None => std::thread::yield_now(),
        }
        false
    }

    /// After a waiting thread's poll: the lanes' progress for `ops` if every op is covered by a
    /// memory fence, kept for the thread's next checks ([`assist_wait`](Self::assist_wait)).
    fn learn_probe(&self, d: &Shim<N>, ops: &[crate::OpId]) {
        let lanes: smallvec::SmallVec<[(vitamin_hal::LaneProgress, u64); 4]> =
            ops.iter().map(|&op| d.lane_progress(self.client, op)).collect::<Option<_>>().unwrap_or_default();
        let probing = !lanes.is_empty();
        let now = Instant::now();
        PROBE.with(|p| {
            let mut p = p.borrow_mut();
            p.ops.clear();
            p.ops.extend_from_slice(ops);
            p.lanes = lanes;
            p.next_poll = Some(now + FAST_WAIT_POLL);
        });
        if probing {
            let until = self.submits.now_ns() + 2 * FAST_WAIT_POLL.as_nanos() as u64;
            self.submits.probing_until_ns.store(until, Ordering::Relaxed);
        }
    }

    /// Waits until the submission thread issued every submission handed to it: an op the
    /// dispatcher reports as submitted is then in its lane stream, as the driver sees it.
    pub fn flush_submissions(&self) {
        self.started.backend.flush_submissions();
    }

    /// Native wait (experimental wait assist): a thread waiting for `ops` looks up, when the
    /// dispatcher is free, the lanes they were submitted to and waits on those lane streams
    /// with the driver's own stream synchronize, as a native synchronize call would, instead
    /// of waiting for the dispatcher thread to poll their fence. Returns `true` when every op
    /// was submitted and every lane drained without error: the ops and all their live ancestors
    /// ran (a submitted op's live predecessors sit before it on its lane). Returns `false`
    /// (the caller keeps waiting the usual way) when the dispatcher is busy, an op is not
    /// submitted yet, or a lane reports an error (the dispatcher's poll then fails the ops).
    /// Waiting on a lane may also wait for later work queued on it: never less than natively.
    pub fn native_wait(&self, ops: &[crate::OpId]) -> bool {
        let mut streams: smallvec::SmallVec<[u64; 2]> = smallvec::SmallVec::new();
        {
            let Some(slot) = self.dispatcher.try_lock() else { return false };
            let Some(d) = slot.as_ref() else { return false };
            for &op in ops {
                let Some((node, lane)) = d.placement(self.client, op) else { return false };
                let Some(s) = d.partition(node).and_then(|p| N::Backend::raw_stream(p, lane)) else { return false };
                if !streams.contains(&s) {
                    streams.push(s);
                }
            }
            // Ops handed to the submission thread must reach their lanes before the lanes are
            // waited on (an empty stream would report them complete).
            d.backend().flush_submissions();
        }
        streams.iter().all(|&s| self.native.synchronize_raw_stream(s))
    }

    /// The dispatcher's statistics as published at stop (`None` before).
    pub fn stats(&self) -> Option<serde_json::Value> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What the dispatcher thread shares with the [`Coordinator`].
struct ThreadShared<'a, N: NativeApi> {
    stop: &'a AtomicBool,
    stats: &'a Mutex<Option<serde_json::Value>>,
    slot: &'a Slot<N>,
    submits: &'a Submits,
    health: &'a Health,
}

fn run<N: NativeApi>(
    native: &N,
    ordinal: i32,
    vctx: Arc<VirtualContext>,
    settings: Settings,
    ready: mpsc::Sender<Result<Started<N::Backend>, String>>,
    shared: ThreadShared<'_, N>,
) {
    let ThreadShared { stop, stats, slot, submits, health } = shared;
    let t0 = Instant::now();
    if let Some(cpu) = settings.tuning.dispatch_cpu {
        match pin_to_cpu(cpu) {
            Ok(()) => vlog!(LogLevel::Info, "dispatcher thread pinned to CPU {cpu}"),
            Err(e) => vlog!(LogLevel::Error, "could not pin the dispatcher thread to CPU {cpu}: {e}"),
        }
    }
    let backend = match native.create_backend(ordinal) {
        Ok(b) => b,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    if settings.tuning.submit_thread {
        // The thread's driver calls must be forwarded untouched, like this thread's.
        let t = settings.tuning;
        if let Err(e) = backend.start_submit_thread(t.submit_burst, t.submit_spin, N::enter_runtime_thread) {
            // A backend without one by design (one whose runtime calls are issued by the calling
            // thread) is no warning; a failure to start one is.
            let level =
                if matches!(e, vitamin_hal::HalError::Unsupported { .. }) { LogLevel::Debug } else { LogLevel::Warn };
            vlog!(level, "no submission thread ({e}); the dispatcher thread issues every launch");
        }
    }
    if let Some(every) = settings.tuning.busy_query {
        backend.set_busy_query(every);
    }
    let spin_yield = settings.tuning.spin_yield;
    let kind = backend.topology().unit_name().to_owned();
    let device = backend.topology().device_name().to_owned();
    let config = dispatch_config(&settings);
    if settings.tuning.pool_unknown {
        vlog!(
            LogLevel::Warn,
            "pool: unknown value (expected hierarchical, flat or on-demand); the pool is hierarchical"
        );
    }
    if settings.tuning.remainders_unknown {
        vlog!(
            LogLevel::Warn,
            "remainders: unknown value (expected on-demand or start-up); remainders are created on demand"
        );
    }
    let policy = settings.policy.build(settings.seed);
    let profiles = match load_profiles(settings.profiles.as_deref(), &device) {
        Ok(p) => p,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut d = match Dispatcher::new(backend, policy, profiles, config) {
        Ok(d) => d,
        Err(e) => {
            let _ = ready.send(Err(format!("could not realize the pool: {e}")));
            return;
        }
    };
    let client = d.register(vctx.clone(), "application", settings.class).0 as usize;
    #[cfg(not(loom))]
    if let Some(socket) = &settings.daemon {
        attach_daemon(&mut d, socket, ordinal, &settings);
    }
    let nodes = d.pool().nodes().iter().map(|n| n.units.display(&kind).to_string()).collect();
    let realize_ms = t0.elapsed().as_secs_f64() * 1e3;
    let policy = d.policy().name();
    let poll_interval = Duration::from_nanos(d.config().min_poll_interval_ns);
    let idle_spin = settings.tuning.idle_spin;
    let wake_grace = settings.tuning.wake_grace;
    // With the wait assist, waiting threads poll for themselves: one starting to wait is no
    // reason for this thread to run a round (it would only take the lock from them).
    let waiters_wake = !settings.tuning.wait_assist;
    let woken = || vctx.has_work_hint() || (waiters_wake && vctx.has_waiters());
    let handle = d.backend().clone();
    *slot.lock() = Some(d);
    if ready.send(Ok(Started { device, nodes, realize_ms, policy, backend: handle, client })).is_err() {
        // The starting call gave up waiting (`start_timeout_ms`): the process runs in observe mode.
        if let Some(d) = slot.lock().take() {
            std::mem::forget(d);
        }
        return;
    }
    let mut errors = 0u64;
    let mut watch = Stall { bound: settings.tuning.unbound_timeout, ..Stall::default() };
    let fault = settings.tuning.fault;
    while !stop.load(Ordering::Acquire) {
        health.beat();
        // The lock is held for one round only: application threads submit inline in between.
        let inline_seen = submits.inline.load(Ordering::Acquire);
        let eager_seen = submits.eager.load(Ordering::Acquire);
        let (pumped, idle, eager) = {
            let mut g = lock_for_round::<N>(slot, &vctx, submits, wake_grace, stop, spin_yield, health);
            let d = g.as_mut().expect("the dispatcher lives until this thread ends");
            let submitted = || {
                let s = d.stats();
                s.bound + s.continued + s.eager + s.launched_first + s.eager_continued
            };
            match fault {
                Some((f, n)) if submitted() >= n => match f {
                    Fault::Panic => panic!("fault injection: fault_dispatch = panic:{n}"),
                    Fault::Hang => {
                        while !stop.load(Ordering::Acquire) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        continue;
                    }
                },
                _ => {}
            }
            watch.check(d, health);
            (d.pump(), d.is_idle(), d.needs_completions())
        };
        // Something an application thread submitted inline since this round began.
        let inline_new = || submits.inline.load(Ordering::Acquire) != inline_seen;
        // Something an application thread submitted eagerly since this round began.
        let eager_new = || submits.eager.load(Ordering::Acquire) != eager_seen;
        match pumped {
            Ok(n) if n > 0 => continue,
            Ok(_) => {}
            Err(e) => {
                errors += 1;
                if errors <= 10 {
                    vlog!(LogLevel::Error, "dispatcher round failed: {e}");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if idle {
            // Wait briefly (spinning, yielding; or napping under `dispatch_nap=all`)
            // before parking: the next op of a launch-sync loop usually arrives within
            // microseconds, and an application thread would pay for waking a parked dispatcher
            // (2-4 us there, and it runs 13-19 us later: `bench/probes/host/host_probe.c`). Under
            // eager continuation, an eager submission (an application thread bound a fresh op
            // itself, and continues its lane and polls its own completions) is left the lock for
            // a poll interval: taking it at once would make that thread hand its next launch
            // over. Without it, an eager submission starts a round at once (the dispatcher
            // continues the ops that follow).
            let until = Instant::now() + idle_spin;
            let mut woke = false;
            loop {
                if woken() || inline_new() {
                    woke = true;
                    break;
                }
                let now = Instant::now();
                if now >= until || stop.load(Ordering::Acquire) {
                    break;
                }
                if settings.tuning.nap == Nap::All {
                    vctx.nap_for_work(poll_interval.min(until - now));
                } else if eager_new() {
                    if !settings.tuning.eager_continue && settings.tuning.eager_continue_ops == 0 {
                        woke = true;
                        break;
                    }
                    // Spinning: an eager submission is left the lock for a poll interval.
                    let grace = now + poll_interval;
                    while Instant::now() < grace && !woken() && !inline_new() {
                        relax(spin_yield);
                    }
                    break;
                } else {
                    relax(spin_yield);
                }
            }
            // Parked, a recorded op, an eager submission or a thread starting to wait in a
            // synchronize call (without the wait assist) wakes it.
            if !woke && !inline_new() && !eager_new() {
                vctx.wait_for_work(Duration::from_millis(2));
            }
        } else if !eager {
            // Work in flight and nothing waits on its completion (waiting threads poll for
            // themselves): the next round when new work arrives that no application thread took,
            // when somebody starts waiting without the wait assist, or when the poll interval
            // has passed. Spinning on atomics keeps the lock free for the application thread's
            // submissions and the driver free of event queries while it launches. (Napping
            // would also leave the CPU free: a busy CPU beside it slowed a native launch-bound
            // chain by 5-18% on the H200 host, `bench/probes/host/spin_check.sh`; but the napping
            // dispatcher measured worse overall, see [`NAP`].)
            if settings.tuning.nap == Nap::Off {
                let mut until = Instant::now() + poll_interval;
                let mut assists = submits.assists.load(Ordering::Relaxed);
                while !woken() {
                    let now = Instant::now();
                    if now >= until {
                        // A waiting thread polled since: the completions it waits for are
                        // observed without this thread's round (which would hold the lock
                        // that thread polls under). Another interval.
                        let a = submits.assists.load(Ordering::Relaxed);
                        if !(settings.tuning.defer_to_waiters && a != assists) {
                            break;
                        }
                        assists = a;
                        until = now + poll_interval;
                    }
                    relax(spin_yield);
                }
            } else if !woken() && !inline_new() {
                vctx.nap_for_work(poll_interval);
            }
        } else if settings.tuning.tight_poll {
            // Progress waits on completions. While only waiting threads need them, poll in a
            // tight loop (no intake, continuation or binding, no yield): a synchronize call then
            // sees its completion within about one event query, as a native spinning wait would.
            // New work, a completion or anything else to do ends it and runs a round.
            poll_for_waiters::<N>(slot, &vctx, stop, &inline_new, submits, health);
        } else {
            // Progress waits on completions: poll again after a yield.
            std::thread::yield_now();
        }
    }
    let Some(d) = slot.lock().take() else { return };
    let mut published = serde_json::to_value(d.stats()).unwrap_or_default();
    published["round_errors"] = errors.into();
    if let Some(c) = d.backend().submission_counts() {
        published["submit_thread"] =
            serde_json::json!({ "handed_off": c.handed_off, "direct": c.direct, "wakes": c.wakes });
    }
    published["vctx_lock_contended"] = crate::contended_locks().into();
    published["launch_first_shim"] = serde_json::json!({
        "not_fresh": submits.lf_not_fresh.load(Ordering::Relaxed),
        "dispatcher_busy": submits.lf_dispatcher_busy.load(Ordering::Relaxed),
        "lock_waited": submits.lf_lock_waited.load(Ordering::Relaxed),
        "lock_wait_ns": submits.lf_lock_wait_ns.load(Ordering::Relaxed),
    });
    published["wake_graces"] = submits.graces.load(Ordering::Relaxed).into();
    // Where the structures both threads touch lie (offsets in their 4 KiB page), to tell whether
    // a process's speed follows which data share a cache line (it did not: docs/results/shim-bind-overhead.md).
    let page_offset = |p: *const u8| (p as usize % 4096) as u64;
    published["layout"] = serde_json::json!({
        "vctx": page_offset(Arc::as_ptr(&vctx).cast()),
        "submits": page_offset((submits as *const Submits).cast()),
        "slot": page_offset(Arc::as_ptr(slot).cast()),
        "stop": page_offset((stop as *const AtomicBool).cast()),
    });
    published["fast_waits"] = submits.fast_waits.load(Ordering::Relaxed).into();
    published["policy"] = d.policy().name().into();
    #[cfg(not(loom))]
    if let Some(r) = d.remote() {
        let w = r.client().welcome();
        published["daemon"] = serde_json::json!({
            "client": w.client,
            "policy": w.policy,
            "sent": r.sent_total,
            "refused_bindings": r.refused,
            "reconnects": r.reconnects,
            "hints_sent": r.hints_sent,
            "safe_mode": r.safe_mode(),
        });
    }
    published["fence"] = d.backend().fence_mode().into();
    published["pool"] = serde_json::to_value(d.pool_report()).unwrap_or_default();
    *stats.lock().unwrap_or_else(|e| e.into_inner()) = Some(published);
    if let (Some(path), Some((p, timed))) = (settings.profile_out.as_deref(), d.recorded_profiles()) {
        match p.save(path) {
            Ok(()) => vlog!(
                LogLevel::Info,
                "profile: {timed} timed launches; {} launch configurations written to {}",
                p.len(),
                path.display()
            ),
            Err(e) => vlog!(LogLevel::Error, "could not write the recorded profile: {e}"),
        }
    }
    // The process is exiting: leave the physical contexts to the driver instead of draining and
    // destroying every pool node here.
    std::mem::forget(d);
}

#[cfg(not(loom))]
/// Registers with the coordination daemon at `socket` and lets it decide the bindings; without
/// one (not running, refused, another pool), this process decides alone, and the log says why.
fn attach_daemon<B: Backend>(
    d: &mut Dispatcher<B, AnyPolicy>,
    socket: &std::path::Path,
    ordinal: i32,
    settings: &Settings,
) {
    let name = std::fs::read_to_string("/proc/self/comm").map(|s| s.trim().to_owned()).unwrap_or_default();
    let opts = crate::daemon::client::ConnectOptions {
        socket: socket.to_owned(),
        name,
        device: u32::try_from(ordinal).unwrap_or(0),
        topology: d.backend().topology().clone(),
        class: settings.class,
        lanes: u16::try_from(d.config().lanes_per_node).unwrap_or(u16::MAX),
        timeout: Duration::from_secs(5),
    };
    let attached = crate::daemon::client::DaemonClient::connect(opts).map_err(|e| e.to_string()).and_then(|c| {
        let (id, policy) = (c.welcome().client, c.welcome().policy.clone());
        // What this process still decides itself (continuation, launch-first, whole-device
        // launches) follows the daemon's policy, whatever the local configuration names.
        if let Ok(kind) = policy.parse::<PolicyKind>() {
            if kind.name() != d.policy().name() {
                d.replace_policy(kind.build(settings.seed));
            }
        }
        d.attach_remote(crate::dispatch::Remote::new(c)).map(|()| (id, policy)).map_err(|e| e.to_string())
    });
    match attached {
        Ok((id, policy)) => vlog!(
            LogLevel::Info,
            "bindings come from the vitamin daemon at {} (client {id}, its policy {policy})",
            socket.display()
        ),
        Err(e) => vlog!(
            LogLevel::Warn,
            "no vitamin daemon at {} ({e}): this process decides its bindings alone",
            socket.display()
        ),
    }
}

/// The dispatcher lock for the dispatcher thread's next round. Never parks on the lock (an
/// application thread releasing it would then pay for a futex wake-up on its launch path). An
/// application thread spinning for it to launch goes first; a thread polling in a synchronize call
/// holds the round off (up to `wake_grace`), and once it returned, [`grace`] waits for its next
/// submission.
fn lock_for_round<'a, N: NativeApi>(
    slot: &'a Slot<N>,
    vctx: &VirtualContext,
    submits: &Submits,
    wake_grace: Duration,
    stop: &AtomicBool,
    spin_yield: bool,
    health: &Health,
) -> parking_lot::MutexGuard<'a, Option<Shim<N>>> {
    // Since when a thread polling in a synchronize call holds this round off.
    let mut held_off: Option<Instant> = None;
    loop {
        health.beat();
        if submits.lock_wanted.load(Ordering::Acquire) == 0 {
            if held_off.is_some_and(|s| !vctx.has_work_hint() && s.elapsed() < wake_grace) {
                if vctx.has_assisting_waiters() {
                    // Its polls observe the completions it waits for: no round until it returns
                    // (or the grace passed, or new work came).
                    relax(spin_yield);
                    continue;
                }
                // It returned: it usually launches next, and would find the lock held by this
                // round (bookkeeping its own polls already did).
                held_off = None;
                grace(vctx, submits, wake_grace, stop, spin_yield);
            }
            if let Some(g) = slot.try_lock() {
                return g;
            }
            if held_off.is_none() && !wake_grace.is_zero() && vctx.has_assisting_waiters() {
                held_off = Some(Instant::now());
            }
        }
        relax(spin_yield);
    }
}

/// Waits up to `grace` before a round the dispatcher thread was held off by a waiting thread's
/// polls, after that thread returned: until it submitted something (an eager or inline
/// submission), new work was recorded, or the grace passed (also when stopping).
fn grace(vctx: &VirtualContext, submits: &Submits, grace: Duration, stop: &AtomicBool, spin_yield: bool) {
    if grace.is_zero() {
        return;
    }
    submits.graces.fetch_add(1, Ordering::Relaxed);
    let (eager, inline) = (submits.eager.load(Ordering::Acquire), submits.inline.load(Ordering::Acquire));
    let until = Instant::now() + grace;
    while !vctx.has_work_hint()
        && submits.eager.load(Ordering::Acquire) == eager
        && submits.inline.load(Ordering::Acquire) == inline
        && !stop.load(Ordering::Acquire)
        && Instant::now() < until
    {
        relax(spin_yield);
    }
}

/// The dispatcher thread's tight completion polling while host threads wait and nothing else
/// is to be done ([`Dispatcher::waits_only_on_completions`]); returns when a poll completed
/// something, new work arrived, or there is more to do than polling.
fn poll_for_waiters<N: NativeApi>(
    slot: &Slot<N>,
    vctx: &VirtualContext,
    stop: &AtomicBool,
    inline_new: &dyn Fn() -> bool,
    submits: &Submits,
    health: &Health,
) {
    loop {
        health.beat();
        if stop.load(Ordering::Acquire)
            || vctx.has_work_hint()
            || inline_new()
            || submits.lock_wanted.load(Ordering::Acquire) != 0
        {
            return;
        }
        if submits.waiter_probing() {
            // The waiting thread reads its lanes' fence words itself (`Tuning::fast_wait`): a
            // poll here would only race it for the completion and the vCtx lock. Once it
            // returned (leaving the pool's bookkeeping to a poll), a round catches up at once,
            // so that the next launch finds the pool quiescent.
            if !vctx.has_waiters() {
                return;
            }
            relax(true);
            continue;
        }
        {
            let Some(mut g) = slot.try_lock() else {
                std::thread::yield_now();
                continue;
            };
            let Some(d) = g.as_mut() else { return };
            if !d.waits_only_on_completions() {
                return;
            }
            match d.poll_completions_for_waiters() {
                Ok(0) => {}
                Ok(_) => return,
                Err(e) => {
                    vlog!(LogLevel::Debug, "completion poll failed: {e}; a round handles it");
                    return;
                }
            }
        }
        std::hint::spin_loop();
    }
}

/// One wait step of the dispatcher thread's spinning: a pause and a `sched_yield` (`yield_cpu`),
/// or a batch of pause instructions and no system call. On the H200 host, two processes spinning
/// with `sched_yield` slowed a native launch-bound chain by 5-18% (`bench/probes/host/spin_check.sh`).
fn relax(yield_cpu: bool) {
    if yield_cpu {
        std::hint::spin_loop();
        std::thread::yield_now();
    } else {
        for _ in 0..RELAX_PAUSES {
            std::hint::spin_loop();
        }
    }
}

/// Pause instructions per [`relax`] step without yielding (0.1-0.4 us on recent Intel cores,
/// where a pause takes 40-140 cycles): a check of new work about as often as a yield allowed.
const RELAX_PAUSES: u32 = 8;

/// Whether launch-first eager binding is on by default (`launch_first`). Measured on the
/// H200 (8 rounds each paired with a native run of the same round, medians; docs/results/shim-bind-overhead.md):
/// 10,000-kernel chain 0.896x native with it vs 0.800x without, 8-kernel operator p95 +1.26% vs
/// +1.64% (p50 +1.06% vs +0.92%); training step -4.6% and -4.1% vs native (two device calls).
const LAUNCH_FIRST: bool = true;

/// Whether the dispatcher thread leaves periodic polls to waiting threads that poll for
/// themselves by default (`defer_to_waiters`; experimental, off). In a traced run of the
/// 8-kernel operator (H200, docs/results/shim-bind-overhead.md) the dispatcher thread's periodic round took the lock
/// in 360 of 420 operators while the application thread waited, and observed the last completion
/// itself in 21. Deferring measured better for the 1-kernel small op (p95 +24% over native vs
/// +57%) but worse for the operator (p95 +2.55% vs +1.27%, p50 +1.69% vs +1.20%; 8 rounds
/// paired with native): the rounds it skips also release leases, so the next operator's first
/// launch less often finds the quiescent pool its memoized plan needs (not yet confirmed by a trace).
const DEFER_TO_WAITERS: bool = false;

/// Whether waiting threads spin on fence words by default (`fast_wait`, see
/// [`Tuning::fast_wait`]). Measured on the H200 (docs/results/shim-bind-overhead.md, `phase_check.sh`, 5 rounds against
/// native in the same calls): the 8-kernel operator's synchronize call returned 0.19 us earlier
/// than natively after its last kernel, against 1.10-1.94 us later with the waiting
/// thread polling and retiring the ops itself (two earlier calls); canonical operator p95 +0.43% and
/// +0.25% in two of three runs (+2.12% in the third, a slow machine).
const FAST_WAIT: bool = true;

/// How long a launch-first launch spins for the dispatcher lock by default
/// (`lf_lock_wait_us`): longer than a round that takes in a completion or a poll.
const LF_LOCK_WAIT: Duration = Duration::from_micros(20);
/// How long a dispatcher round held off by a waiting thread's polls waits, once that thread
/// returned, for its next submission by default (`wake_grace_us`).
const WAKE_GRACE: Duration = Duration::from_micros(20);
/// Whether the dispatcher thread yields the CPU while it spins by default (`spin_yield`).
const SPIN_YIELD: bool = true;

/// Pins the calling thread to `cpu` (`dispatch_cpu`).
fn pin_to_cpu(cpu: usize) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "CPU number out of range"));
    }
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(std::io::Error::from)
}

/// How long the idle dispatcher thread naps (timed waits that new work ends) before it parks
/// until woken ([`Tuning::idle_spin`] overrides it for measurements). Waking a parked thread
/// costs the waker a system call on this VM, and the woken thread runs 13-19 us later.
const IDLE_SPIN: Duration = Duration::from_micros(100);

/// Whether the submission thread runs by default (`submit_thread`): on, a dependent
/// chain of 10,000 tiny kernels ran 0.87-0.88x native instead of 0.72-0.77x on the H200
/// (docs/results/shim-bind-overhead.md).
const SUBMIT_THREAD: bool = true;
/// Whether eager binding is on by default (`eager`).
const EAGER: bool = true;
/// How the dispatcher thread waits between rounds ([`Tuning::nap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nap {
    /// It spins, yielding.
    Off,
    /// It naps only while work is in flight.
    Busy,
    /// It naps, idle or not.
    All,
}

/// How the dispatcher thread waits by default (`dispatch_nap`): spinning. Napping
/// (timed waits) left a CPU free but measured worse on the H200 (docs/results/shim-bind-overhead.md, 4 rounds:
/// operator p95 440.8 us napping, 441.1 napping only with work in flight, 432.6 spinning;
/// native 426.9), as a napping thread wakes up late for its next round.
const NAP: Nap = Nap::Off;
/// Whether eager continuation is on by default (`eager_continue`): off. It made the
/// 8-kernel operator 0.6-3.6 us faster on the H200 (docs/results/shim-bind-overhead.md), but it moves the
/// launches of sparse launch streams onto the application thread: in the PyTorch training step
/// the application thread issued 24-31k of its 48k launches itself, and the step measured +7.2%
/// over native on one machine (7 pairs; -3.1% on another), where launches handed to the
/// dispatcher and submission threads had kept it at or below native (earlier rounds of the same page).
const EAGER_CONTINUE: bool = false;
/// How many ops a thread continues itself after each of its launch-first launches by default
/// (`eager_continue_ops`): an 8-kernel operator's 7 others and a few more.
const EAGER_CONTINUE_OPS: u32 = 8;
/// Whether waiting threads poll completions themselves by default (`wait_assist`): with
/// eager binding the application thread then launches, fences and polls its own lane, as a
/// native program does (H200, two rounds, docs/results/shim-bind-overhead.md: the 8-kernel operator's p95
/// 429.2-429.6 us instead of 428.9-436.3, native 425.0-425.8; the small op's p50 10.9-11.3 us
/// instead of 14.1-16.9).
const WAIT_ASSIST: bool = true;
/// Whether tight completion polling for waiting threads is on by default (`tight_poll`).
const TIGHT_POLL: bool = true;
/// Submissions closer than this to the previous one go to the submission thread.
const SUBMIT_BURST: Duration = Duration::from_micros(10);

/// How long ready work may stay unbound with nothing in flight (or the dispatcher thread go
/// without a round) before waiting calls time out (`unbound_timeout_ms`). Ten seconds: far
/// beyond any round (microseconds) or pool realization (about 100 ms on the H200, docs/STATUS.md),
/// and the delay the dispatcher's own stall report already used.
pub const UNBOUND_TIMEOUT: Duration = Duration::from_secs(10);
/// Recorded ops not yet retired past which recording waits (`max_outstanding_ops`). The driver
/// itself accepts about this many pending launches before a launch call blocks (its launch queue;
/// `bench/gpu/rss/run.sh` measures the depth on the H200 natively), so an application never sees
/// vitamin hold much more work than the driver would, and the DAG, descriptors and staged
/// copies of a process that never synchronizes stay bounded (docs/results/rss-fake.md).
pub const MAX_OUTSTANDING: usize = 1024;
/// Staged pageable bytes in flight past which a pageable copy runs synchronously
/// (`max_staged_bytes`): 64 MiB, what [`MAX_OUTSTANDING`] copies of the largest staged size
/// ([`STAGE_MAX_BYTES`](super::handles::STAGE_MAX_BYTES)) hold.
pub const MAX_STAGED_BYTES: u64 = 64 << 20;
/// The longest a best-effort process holds back a shared whole-device launch while a
/// latency-critical client of a TPOT-First daemon is busy (`guard_hold_ms`): a few decode steps
/// of the decoders measured (10-15 ms each, docs/results/eval.md, mixed-graph), so a decoder that
/// never idles delays each such launch of a training job by this much at most.
pub const GUARD_HOLD: Duration = Duration::from_millis(50);
/// How long the first bind-mode call waits for the pool (`start_timeout_ms`): realizing the
/// H200's 59 nodes takes about 100 ms (docs/STATUS.md).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Most ops lane continuation queues on one lane ahead of observed completions.
pub const CONTINUATION_DEPTH: u32 = 256;
/// Most predicted backlog (ns) lane continuation queues on one lane: no bound by default, because
/// predictions of kernels nobody profiled (the wave model's guesses) are too coarse to bound
/// by; a 200 us bound made a dependent chain wait for polls (docs/results/shim-bind-overhead.md).
pub const CONTINUATION_NS: u64 = u64::MAX;
/// Least time between completion polls while launches keep flowing and nobody waits.
pub const POLL_INTERVAL_NS: u64 = 50_000;

/// The profiles the policy starts with: the file `path` (`profiles`), or none. A file measured on
/// another device is used and said so; one that cannot be read is an error (bind mode does not
/// start: sizing by a file the user named but did not get would be a silent change).
fn load_profiles(path: Option<&std::path::Path>, device: &str) -> Result<Profiles, String> {
    let Some(path) = path else { return Ok(Profiles::new(device)) };
    let p = Profiles::load(path).map_err(|e| format!("profiles: {e}"))?;
    if p.device != device {
        vlog!(LogLevel::Warn, "profiles: {} was measured on {:?}; this device is {device:?}", path.display(), p.device);
    }
    vlog!(LogLevel::Info, "profiles: {} launch configurations from {}", p.len(), path.display());
    Ok(p)
}

/// The dispatcher settings of the shim. Against the runtime's defaults (tuned on the simulator):
/// - completion polls are rate-limited ([`POLL_INTERVAL_NS`]): each poll records and queries
///   events (about 1.3 us per busy lane on the H200, FACTS.md), which would otherwise dominate the
///   thread's per-op cost and contend with the launches in the driver; the dispatcher polls every
///   round while progress waits on completions ([`Dispatcher::needs_completions`]: a thread in a
///   synchronize call, ready ops waiting for a node, ops waiting for predecessors on other lanes);
/// - lane continuation may queue [`CONTINUATION_DEPTH`] ops on a lane (the policy still approves
///   each one), so a dependent chain is bound without waiting for each completion to be
///   observed (a launch takes 3.3-3.6 us of driver time; waiting for completions made the
///   dispatcher the bottleneck, docs/results/shim-bind-overhead.md).
///
/// [`Tuning`] overrides these for measurements.
fn dispatch_config(settings: &Settings) -> DispatchConfig {
    let t = settings.tuning;
    DispatchConfig {
        lane_continuation: settings.lane_continuation,
        min_poll_interval_ns: t.poll_interval_ns,
        max_continuation_depth: t.continuation_depth,
        max_continuation_ns: t.continuation_ns,
        profile_phases: t.profile_phases,
        waiters_poll: t.wait_assist,
        pool: t.pool,
        remainders_at_start: t.remainders_at_start,
        guard_hold_max_ns: u64::try_from(t.guard_hold.as_nanos()).unwrap_or(u64::MAX),
        record_profile: settings.profile_out.is_some(),
        ..DispatchConfig::default()
    }
}

/// Notices a dispatcher that makes no progress while holding work (every proposal rejected or
/// every submission refused, e.g. an op no partition can run): says so once in the log, with the
/// counters, instead of hanging silently.
/// Past [`Tuning::unbound_timeout`] it also tells waiting calls, which then time out
/// ([`Coordinator::check_progress`]), until work progresses again.
#[derive(Debug, Default)]
struct Stall {
    completed: u64,
    since: Option<Instant>,
    reported: bool,
    /// [`Tuning::unbound_timeout`].
    bound: Duration,
}

impl Stall {
    fn check<B: Backend, P: Policy>(&mut self, d: &Dispatcher<B, P>, health: &Health) {
        let s = d.stats();
        // Ready work waiting for a live daemon's binding is not a stall: other processes hold the
        // nodes, as a native launch waits behind another context's time slice. A daemon that goes
        // away puts the session in safe mode, and the dispatcher binds in-process after
        // `DEFAULT_FALLBACK_AFTER` (5 s, within the bound), where this watch applies again.
        let waits_on_daemon = d.remote().is_some_and(|r| r.safe_mode().is_none());
        if self.observe(d.is_idle() || waits_on_daemon, s.completed, d.inflight(), Instant::now(), health)
            && !self.reported
        {
            self.reported = true;
            vlog!(
                LogLevel::Error,
                "dispatcher stalled for {} ms with ready work and nothing in flight: {} proposals rejected, {} \
                 submissions refused; waiting calls time out",
                self.bound.as_millis(),
                s.rejected,
                s.submit_failures
            );
        }
    }

    /// One observation at `now` (idle, ops completed so far, ops in flight); sets or clears
    /// `health.stalled` and returns whether the dispatcher is stalled: work held (not idle), none
    /// in flight and no completion for longer than the bound.
    fn observe(&mut self, idle: bool, completed: u64, inflight: usize, now: Instant, health: &Health) -> bool {
        if idle || completed != self.completed || inflight != 0 {
            self.completed = completed;
            self.since = None;
            health.stalled.store(false, Ordering::Release);
            return false;
        }
        let since = *self.since.get_or_insert(now);
        let stalled = now.saturating_duration_since(since) > self.bound;
        health.stalled.store(stalled, Ordering::Release);
        stalled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuning(vars: &[(&str, &str)]) -> Tuning {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Tuning::from_lookup(|k| vars.iter().find(|(name, _)| name == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn a_held_off_round_waits_for_the_next_submission_or_new_work_not_the_whole_grace() {
        let vctx = VirtualContext::new(crate::VctxId(1));
        let stop = AtomicBool::new(false);
        let submits = Submits::default();
        let long = Duration::from_secs(30);
        // An eager submission ends it.
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                submits.eager.fetch_add(1, Ordering::AcqRel);
            });
            let t = Instant::now();
            grace(&vctx, &submits, long, &stop, true);
            assert!(t.elapsed() < long / 2, "the grace outlived the submission");
        });
        // So does an inline submission, and stopping.
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(5));
                submits.inline.fetch_add(1, Ordering::AcqRel);
            });
            grace(&vctx, &submits, long, &stop, false);
        });
        stop.store(true, Ordering::Release);
        grace(&vctx, &submits, long, &stop, false);
        stop.store(false, Ordering::Release);
        // Nothing happening: it ends with the grace.
        let t = Instant::now();
        grace(&vctx, &submits, Duration::from_millis(2), &stop, false);
        assert!(t.elapsed() >= Duration::from_millis(2));
        // New work recorded ends it at once.
        let s = vctx.create_stream(crate::StreamKind::NonBlocking, 0);
        let marker = vitamin_hal::Marker::EventRecord { event: 1, generation: 1 };
        vctx.record_op(s, Arc::new(vitamin_hal::OpDesc::Marker(marker))).expect("recorded");
        assert!(vctx.has_work_hint());
        grace(&vctx, &submits, long, &stop, false);
        assert_eq!(submits.graces.load(Ordering::Relaxed), 5);
        grace(&vctx, &submits, Duration::ZERO, &stop, false);
        assert_eq!(submits.graces.load(Ordering::Relaxed), 5, "a zero grace is no grace");
    }

    #[test]
    fn work_held_with_nothing_in_flight_past_the_bound_times_waiting_calls_out_until_it_progresses() {
        let health = Health::default();
        let mut stall = Stall { bound: Duration::from_secs(10), ..Stall::default() };
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(!stall.observe(false, 0, 0, at(0), &health));
        assert!(!stall.observe(false, 0, 0, at(10), &health), "not past the bound yet");
        let mut seen = Progress { beats: health.beats.load(Ordering::Relaxed), since: None };
        assert!(health.check(&mut seen, Duration::from_secs(3600)).is_ok());
        assert!(stall.observe(false, 0, 0, at(11), &health));
        let e = health.check(&mut seen, Duration::from_secs(3600)).unwrap_err();
        assert!(matches!(&e, crate::VctxError::Timeout(m) if m.contains("unbound")), "{e}");
        // A completion, work in flight, or an idle dispatcher ends it.
        assert!(!stall.observe(false, 1, 0, at(12), &health));
        assert!(health.check(&mut seen, Duration::from_secs(3600)).is_ok());
        assert!(!stall.observe(false, 1, 0, at(13), &health), "the bound counts anew after a completion");
        assert!(stall.observe(false, 1, 0, at(24), &health));
        assert!(!stall.observe(false, 1, 3, at(25), &health), "work in flight: a long kernel, not a stall");
        assert!(!stall.observe(false, 1, 0, at(30), &health));
        assert!(!stall.observe(true, 1, 0, at(100), &health), "idle");
    }

    #[test]
    fn a_waiting_call_gives_up_on_a_lost_or_motionless_dispatcher_only() {
        let health = Health::default();
        let mut seen = Progress { beats: 0, since: None };
        // The first look only starts the clock; beats since the last look: progress, whatever
        // the bound.
        assert!(health.check(&mut seen, Duration::ZERO).is_ok());
        health.beat();
        assert!(health.check(&mut seen, Duration::ZERO).is_ok());
        assert_eq!(seen.beats, 1);
        // No beat since: fine within the bound, a timeout past it.
        assert!(health.check(&mut seen, Duration::from_secs(3600)).is_ok());
        let e = health.check(&mut seen, Duration::ZERO).unwrap_err();
        assert!(matches!(&e, crate::VctxError::Timeout(m) if m.contains("no progress")), "{e}");
        // A lost dispatcher is reported first, beating or not.
        health.beat();
        let _ = health.lost.set("the dispatcher thread panicked".into());
        let e = health.check(&mut seen, Duration::from_secs(3600)).unwrap_err();
        assert!(matches!(&e, crate::VctxError::RuntimeLost(m) if m.contains("panicked")), "{e}");
    }

    #[test]
    fn injected_dispatcher_faults_parse_or_are_ignored() {
        assert_eq!(tuning(&[("fault_dispatch", "panic:3")]).fault, Some((Fault::Panic, 3)));
        assert_eq!(tuning(&[("fault_dispatch", " hang : 0 ")]).fault, Some((Fault::Hang, 0)));
        for bad in ["none", "panic", "hang:x", "explode:1", ""] {
            assert_eq!(tuning(&[("fault_dispatch", bad)]).fault, None, "{bad}");
        }
        let t = tuning(&[]);
        assert_eq!(
            (t.unbound_timeout, t.max_outstanding, t.start_timeout),
            (UNBOUND_TIMEOUT, MAX_OUTSTANDING, START_TIMEOUT)
        );
        assert_eq!(t.max_staged_bytes, MAX_STAGED_BYTES);
        let t = tuning(&[("VITAMIN_UNBOUND_TIMEOUT_MS", "0"), ("VITAMIN_MAX_OUTSTANDING_OPS", "0")]);
        assert_eq!((t.unbound_timeout, t.max_outstanding), (Duration::from_millis(1), 1), "zero is clamped");
    }

    #[test]
    fn defaults_are_the_measured_choices() {
        let t = tuning(&[]);
        assert!(t.eager && t.launch_first && t.wait_assist && t.submit_thread && t.tight_poll && t.spin_yield);
        assert!(t.fast_wait);
        assert_eq!(t.lf_lock_wait, LF_LOCK_WAIT);
        assert_eq!(t.wake_grace, WAKE_GRACE);
        assert_eq!(t.eager_continue_ops, EAGER_CONTINUE_OPS);
        assert!(!t.eager_continue && !t.defer_to_waiters && !t.inline && !t.native_wait);
        assert_eq!(t.nap, Nap::Off);
        assert_eq!(t.busy_query, None, "the backend's default");
        assert_eq!(t.submit_spin, None, "the backend's default");
        assert_eq!(t.continuation_depth, CONTINUATION_DEPTH);
    }

    #[test]
    fn every_knob_can_be_turned_and_bad_values_keep_the_default() {
        let t = tuning(&[
            ("launch_first", "0"),
            ("eager_continue", "1"),
            ("defer_to_waiters", " 1 "),
            ("spin_yield", "0"),
            ("busy_query_us", "100"),
            ("dispatch_nap", "busy"),
            ("continuation_depth", "0"),
            ("fast_wait", "0"),
            ("lf_lock_wait_us", "0"),
            ("wake_grace_us", "0"),
            ("eager_continue_ops", "0"),
        ]);
        assert!(!t.fast_wait);
        assert!(t.lf_lock_wait.is_zero() && t.wake_grace.is_zero() && t.eager_continue_ops == 0);
        assert!(!t.launch_first && t.eager_continue && t.defer_to_waiters && !t.spin_yield);
        assert_eq!(t.busy_query, Some(Duration::from_micros(100)));
        assert_eq!(t.nap, Nap::Busy);
        assert_eq!(t.continuation_depth, 1, "a depth of 0 is clamped to 1");
        let bad = tuning(&[("busy_query_us", "soon"), ("dispatch_nap", "sometimes")]);
        assert_eq!(bad.busy_query, None);
        assert_eq!(bad.nap, NAP);
    }
}
