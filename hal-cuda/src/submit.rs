//! Asynchronous submission: an optional thread that issues a backend's driver calls (launches,
//! copies, fills, host functions, graph launches, fence records) in the order they were submitted,
//! so that the thread deciding bindings (the dispatcher) and the thread paying the driver's launch
//! cost (about 3.5 us per launch on the H200 host, docs/results/shim-bind-overhead.md) work in
//! parallel: a dependent chain is then bound by the launch cost alone, as natively, instead of the
//! launch cost plus the dispatcher's bookkeeping.
//!
//! A submission is handed to the thread only when that helps: when earlier hand-offs are still
//! pending (so order is kept), or when submissions come in a burst (the previous one less than
//! `burst` ago). A lone submission after a pause is issued directly by the submitting thread:
//! a hand-off would only add latency to it. Direct issue is allowed only while nothing handed
//! off is pending, so the driver sees every stream's commands in submission order.
//!
//! Every handed-off command gets a ticket (the count of hand-offs so far); [`Submitter::executed`]
//! says how many the thread has issued. A fence event is queried only once its record was
//! issued (an event never recorded reports complete). A command that fails stores its error in
//! its partition's error slot before it counts as executed, so a poll reports it (as an
//! asynchronous failure of the partition's ops in flight) instead of trusting a fence.
//!
//! Hand-written rather than a channel: the hand-off must be a lock-free push and the idle
//! thread must not cost a system call per command (it spins for a while, [`SPIN`] by default,
//! after its last command, then parks; the submitting side unparks it only when it sleeps).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::queue::SegQueue;
use parking_lot::Mutex;
use vitamin_hal::{HalError, OpDesc};

use crate::driver::{ctx, event, CUcontext, CUevent, CUstream};

/// How long the idle submission thread spins before it parks, by default.
pub const SPIN: Duration = Duration::from_micros(200);

/// A parked thread is woken only once a burst is long: at its 16th consecutive submission less
/// than `burst` after the previous one. The wake-up costs the waking thread 2-4 us on the H200
/// host and the woken thread runs 13-19 us later (`bench/probes/host/host_probe.c`): worth it for a
/// streamed chain, not for the few launches of an operator, which the submitting thread issues
/// itself meanwhile.
const WAKE_AFTER: u64 = 16;

/// Error slot of a partition.
pub(crate) type Errors = Arc<Mutex<Option<HalError>>>;

/// One driver call to issue. `slot` names the partition's error slot ([`Submitter::slot`]): a
/// command carries a number rather than a clone of the slot's `Arc`, whose reference count would
/// otherwise travel between the two threads' cores at every command.
pub(crate) enum Command {
    /// Submit an op on a stream (see `partition::issue`).
    Issue { stream: CUstream, op: Arc<OpDesc>, slot: u32 },
    /// Record a fence event on a stream.
    Record { event: CUevent, stream: CUstream, slot: u32 },
    /// Write a memory fence's value after the work on a stream.
    Write { stream: CUstream, addr: crate::driver::CUdeviceptr, value: u64, slot: u32 },
}

impl Command {
    /// Issues the command on the calling thread (host functions report panics into `errors`).
    pub(crate) fn run(&self, errors: &dyn Fn() -> Errors) -> Result<(), HalError> {
        match self {
            Command::Issue { stream, op, .. } => crate::partition::issue(*stream, op, errors),
            // SAFETY: the event is a pooled idle event and the stream a live lane stream.
            Command::Record { event, stream, .. } => unsafe { event::record(*event, *stream) },
            // SAFETY: a live lane stream and its fence word, which outlives the partition.
            Command::Write { stream, addr, value, .. } => unsafe {
                crate::driver::stream::write_value64(*stream, *addr, *value)
            },
        }
    }

    /// The trace argument of the command's driver call: its stream, flagged when it is a fence
    /// ([`vitamin_hal::trace::ISSUE_FENCE`]).
    pub(crate) fn trace_arg(&self) -> u64 {
        match self {
            Command::Issue { stream, .. } => *stream as u64,
            Command::Record { stream, .. } | Command::Write { stream, .. } => {
                *stream as u64 | vitamin_hal::trace::ISSUE_FENCE
            }
        }
    }

    /// The error slot the command reports its failure to.
    fn slot(&self) -> u32 {
        match self {
            Command::Issue { slot, .. } | Command::Record { slot, .. } | Command::Write { slot, .. } => *slot,
        }
    }

    /// The command reporting its failure to error slot `slot`.
    pub(crate) fn with_slot(self, slot: u32) -> Command {
        match self {
            Command::Issue { stream, op, .. } => Command::Issue { stream, op, slot },
            Command::Record { event, stream, .. } => Command::Record { event, stream, slot },
            Command::Write { stream, addr, value, .. } => Command::Write { stream, addr, value, slot },
        }
    }
}

// SAFETY: streams and events are driver handles usable from any thread; the op is immutable.
unsafe impl Send for Command {}

struct Inner {
    queue: SegQueue<Command>,
    pushed: AtomicU64,
    executed: AtomicU64,
    sleeping: AtomicBool,
    stop: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
    /// Error slots of the partitions that handed commands off, by slot number.
    slots: Mutex<Vec<Errors>>,
}

impl Inner {
    fn slot(&self, n: u32) -> Option<Errors> {
        self.slots.lock().get(n as usize).cloned()
    }
}

/// What a submission thread did so far ([`crate::CudaBackend::submission_counts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubmitCounts {
    /// Commands handed to the thread.
    pub handed_off: u64,
    /// Submissions the submitting thread issued itself.
    pub direct: u64,
    /// Times a submitting thread woke the parked thread (a system call each).
    pub wakes: u64,
}

/// What [`Submitter::should_hand_off`] decided for one submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandOff {
    /// Push it to the thread.
    Yes,
    /// Issue it directly (nothing pending, not in a burst).
    Direct,
    /// Issue it directly, then [`Submitter::wake`] the parked thread for the rest of the burst.
    DirectThenWake,
}

/// The hand-off rule of [`Submitter::should_hand_off`] as a pure function of what it reads:
/// whether this submission comes in a burst, the burst's consecutive submissions so far (`run`),
/// whether the thread sleeps, and whether it has issued every handed-off command (`idle`, read
/// only when the rule needs it: in a burst, only if the thread sleeps, since the counter it
/// reads is a cache line the busy thread writes at every command). A submission is issued
/// directly only when nothing handed off is pending, so the driver sees every stream's commands
/// in submission order.
fn decide(burst: bool, run: u64, sleeping: bool, idle: impl FnOnce() -> bool) -> HandOff {
    if burst {
        if sleeping && idle() {
            if run >= WAKE_AFTER {
                HandOff::DirectThenWake
            } else {
                HandOff::Direct
            }
        } else {
            HandOff::Yes
        }
    } else if idle() {
        HandOff::Direct
    } else {
        HandOff::Yes
    }
}

/// The submission thread of one backend.
pub(crate) struct Submitter {
    inner: Arc<Inner>,
    handle: Mutex<Option<JoinHandle<()>>>,
    epoch: Instant,
    burst_ns: u64,
    last_submit_ns: AtomicU64,
    /// Submissions issued directly by the submitting thread.
    direct: AtomicU64,
    /// Times a submitting thread woke the parked thread.
    wakes: AtomicU64,
    /// Consecutive submissions less than `burst` apart, up to now.
    burst_run: AtomicU64,
}

impl std::fmt::Debug for Submitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Submitter")
            .field("pushed", &self.inner.pushed.load(Ordering::Relaxed))
            .field("executed", &self.inner.executed.load(Ordering::Relaxed))
            .finish()
    }
}

/// A raw context handle that may cross to the submission thread.
struct SendCtx(CUcontext);
// SAFETY: a context handle is usable from any thread.
unsafe impl Send for SendCtx {}

impl Submitter {
    /// Starts the thread: it runs `init` first (and keeps what it returns for its life), makes
    /// `primary` current, then issues commands. `burst`: submissions closer than this to the
    /// previous one are handed off.
    pub(crate) fn start<G: 'static>(
        primary: CUcontext,
        burst: Duration,
        spin: Duration,
        init: impl FnOnce() -> G + Send + 'static,
    ) -> Result<Submitter, HalError> {
        let inner = Arc::new(Inner {
            queue: SegQueue::new(),
            pushed: AtomicU64::new(0),
            executed: AtomicU64::new(0),
            sleeping: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            thread: OnceLock::new(),
            slots: Mutex::new(Vec::new()),
        });
        let worker = inner.clone();
        let primary = SendCtx(primary);
        let handle = std::thread::Builder::new()
            .name("vitamin-submit".into())
            .spawn(move || {
                let _kept = init();
                let primary = primary;
                // SAFETY: the backend keeps the primary context retained while this thread runs
                // (it is stopped and joined before the context is released).
                if let Err(e) = unsafe { ctx::ensure_current(primary.0) } {
                    tracing::error!(error = %e, "submission thread: could not make the primary context current");
                }
                run(&worker, spin);
            })
            .map_err(|e| HalError::Unsupported {
                backend: "cuda",
                reason: format!("could not start the submission thread: {e}"),
            })?;
        let _ = inner.thread.set(handle.thread().clone());
        Ok(Submitter {
            inner,
            handle: Mutex::new(Some(handle)),
            epoch: Instant::now(),
            burst_ns: burst.as_nanos() as u64,
            last_submit_ns: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            burst_run: AtomicU64::new(0),
        })
    }

    /// Registers a partition's error slot; returns its number for [`Command`]s.
    pub(crate) fn register_slot(&self, errors: Errors) -> u32 {
        let mut slots = self.inner.slots.lock();
        slots.push(errors);
        (slots.len() - 1) as u32
    }

    /// Whether every handed-off command was issued.
    pub(crate) fn idle(&self) -> bool {
        self.inner.executed.load(Ordering::Acquire) == self.inner.pushed.load(Ordering::Acquire)
    }

    /// Called at each submission: whether to hand it off (see the module docs). A burst that
    /// finds the thread parked is not handed to it (waking a parked thread takes 15-20
    /// microseconds on the H200 host, which the submission would wait for): the submission is
    /// issued directly, and the caller wakes the thread for the rest of the burst with
    /// [`wake`](Self::wake) **after** issuing it (the wake-up is a system call of 2-4 us there,
    /// which would otherwise delay this submission's launch).
    pub(crate) fn should_hand_off(&self) -> HandOff {
        let now = self.epoch.elapsed().as_nanos() as u64;
        let last = self.last_submit_ns.swap(now, Ordering::AcqRel);
        let burst = now.saturating_sub(last) < self.burst_ns;
        // Consecutive submissions in the burst so far: a launch-sync loop whose iterations
        // happen to come closer than `burst` is no burst worth waking the thread for.
        let run = if burst { self.burst_run.fetch_add(1, Ordering::Relaxed) + 1 } else { 0 };
        if !burst {
            self.burst_run.store(0, Ordering::Relaxed);
        }
        let decision = decide(burst, run, self.inner.sleeping.load(Ordering::SeqCst), || self.idle());
        if decision != HandOff::Yes {
            self.direct.fetch_add(1, Ordering::Relaxed);
        }
        decision
    }

    /// Wakes the thread if it is parked (after a [`HandOff::DirectThenWake`] submission).
    pub(crate) fn wake(&self) {
        if self.inner.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = self.inner.thread.get() {
                vitamin_hal::trace::mark(vitamin_hal::trace::Tag::Wake, 1);
                self.wakes.fetch_add(1, Ordering::Relaxed);
                t.unpark();
            }
        }
    }

    /// Commands handed off, submissions issued directly, and wake-ups of the parked thread so far.
    pub(crate) fn counts(&self) -> SubmitCounts {
        SubmitCounts {
            handed_off: self.inner.pushed.load(Ordering::Acquire),
            direct: self.direct.load(Ordering::Relaxed),
            wakes: self.wakes.load(Ordering::Relaxed),
        }
    }

    /// Hands `cmd` off; returns its ticket.
    pub(crate) fn push(&self, cmd: Command) -> u64 {
        let ticket = self.inner.pushed.fetch_add(1, Ordering::AcqRel) + 1;
        self.inner.queue.push(cmd);
        // Pairs with the fence in `run`: either the thread sees this command before it parks, or
        // this sees it sleeping and unparks it (no lost wake-up).
        std::sync::atomic::fence(Ordering::SeqCst);
        self.wake();
        ticket
    }

    /// How many handed-off commands the thread has issued.
    pub(crate) fn executed(&self) -> u64 {
        self.inner.executed.load(Ordering::Acquire)
    }

    /// Waits until every handed-off command was issued.
    pub(crate) fn flush(&self) {
        while !self.idle() {
            std::thread::yield_now();
        }
    }
}

impl Drop for Submitter {
    fn drop(&mut self) {
        self.flush();
        self.inner.stop.store(true, Ordering::Release);
        if let Some(t) = self.inner.thread.get() {
            t.unpark();
        }
        if let Some(h) = self.handle.lock().take() {
            let _ = h.join();
        }
    }
}

fn run(inner: &Inner, spin: Duration) {
    let mut idle_since = Instant::now();
    let mut busy = false;
    loop {
        if let Some(cmd) = inner.queue.pop() {
            // A panic here would be a bug; the command still counts as executed so that nobody
            // waits for it for ever.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| execute(inner, cmd))).is_err() {
                tracing::error!("submission thread: a command panicked");
            }
            inner.executed.fetch_add(1, Ordering::AcqRel);
            busy = true;
            continue;
        }
        if inner.stop.load(Ordering::Acquire) {
            return;
        }
        // The clock is read when the queue runs dry, not once per command.
        if busy {
            busy = false;
            idle_since = Instant::now();
        }
        if idle_since.elapsed() < spin {
            std::hint::spin_loop();
            continue;
        }
        inner.sleeping.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if inner.queue.is_empty() && !inner.stop.load(Ordering::Acquire) {
            std::thread::park_timeout(Duration::from_millis(10));
        }
        inner.sleeping.store(false, Ordering::SeqCst);
        idle_since = Instant::now();
    }
}

fn execute(inner: &Inner, cmd: Command) {
    let slot = cmd.slot();
    vitamin_hal::trace::mark(vitamin_hal::trace::Tag::IssueBegin, cmd.trace_arg());
    let result = cmd.run(&|| inner.slot(slot).unwrap_or_default());
    vitamin_hal::trace::mark(vitamin_hal::trace::Tag::IssueEnd, 0);
    if let Err(e) = result {
        match inner.slot(slot) {
            Some(errors) => {
                errors.lock().get_or_insert_with(|| {
                    let message = format!("asynchronous submission failed: {e}");
                    match e.native_code() {
                        Some(code) => HalError::AsyncDriver { code, message },
                        None => HalError::Async(message),
                    }
                });
            }
            None => tracing::error!(error = %e, "asynchronous submission failed for an unknown partition"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lone_submissions_go_direct_unless_hand_offs_are_pending() {
        assert_eq!(decide(false, 0, true, || true), HandOff::Direct);
        assert_eq!(decide(false, 0, false, || true), HandOff::Direct);
        assert_eq!(decide(false, 0, false, || false), HandOff::Yes);
    }

    #[test]
    fn a_burst_goes_to_an_awake_thread_without_reading_its_progress() {
        assert_eq!(decide(true, 3, false, || panic!("progress read in a burst")), HandOff::Yes);
        assert_eq!(decide(true, 40, false, || panic!("progress read in a burst")), HandOff::Yes);
    }

    #[test]
    fn a_parked_thread_is_woken_only_by_a_long_burst() {
        for run in 1..WAKE_AFTER {
            assert_eq!(decide(true, run, true, || true), HandOff::Direct, "run {run}");
        }
        assert_eq!(decide(true, WAKE_AFTER, true, || true), HandOff::DirectThenWake);
        assert_eq!(decide(true, WAKE_AFTER + 7, true, || true), HandOff::DirectThenWake);
        // Parked with work still pending (it is about to notice): queue behind it.
        assert_eq!(decide(true, WAKE_AFTER, true, || false), HandOff::Yes);
    }

    proptest! {
        /// The ordering invariant: nothing is issued directly while a hand-off is pending.
        #[test]
        fn never_direct_while_hand_offs_are_pending(burst: bool, run in 0u64..64, sleeping: bool, idle: bool) {
            let d = decide(burst, run, sleeping, || idle);
            prop_assert!(d == HandOff::Yes || idle, "{d:?} with pending hand-offs");
            prop_assert!(d != HandOff::DirectThenWake || (burst && sleeping && run >= WAKE_AFTER));
        }
    }
}
