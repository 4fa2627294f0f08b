//! [`VirtualContext`]: the lock around the DAG and the ordering rules, and the blocking waits.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;
use vitamin_hal::OpDesc;

use super::dag::{ContinuableOp, Dag, LiveByStream, ReadyOp, Recorded};
use super::error::VctxError;
use super::ids::{EventId, OpId, StreamId, StreamKind, VctxId};
use super::order::{Frontier, Order};
use super::sync::{wait_opt, Condvar, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct State {
    dag: Dag,
    order: Order,
    /// First asynchronous failure in this context (sticky; reported by device sync).
    sticky: Option<VctxError>,
    /// Threads blocked in [`VirtualContext::wait_for_work`].
    work_waiters: usize,
    /// Of `work_waiters`, those that also wake for an eager submission (an idle dispatcher,
    /// which must observe the op; a napping one polls at the end of its nap anyway).
    eager_waiters: usize,
    /// Host threads blocked in a synchronize call.
    blocked: usize,
    /// Ops a waiting thread established complete, with all their live ancestors (its wait
    /// assist returned `true`), and returned without satisfying: the next holder of the lock
    /// satisfies them first ([`VirtualContext::lock`]), so the waiting thread's return does not
    /// wait for their retirement.
    completed: SmallVec<[OpId; 4]>,
}

/// All application-visible logical state of one process and device: streams, events, ops and
/// their completion tokens. `Send + Sync`; share it as `Arc<VirtualContext>`.
///
/// See the [module documentation](super) for the ordering rules, the dispatcher protocol and the
/// error mapping.
pub struct VirtualContext {
    id: VctxId,
    state: Mutex<State>,
    /// Host threads blocked in a synchronize call wait here for watched tokens to retire.
    completion: Condvar,
    /// Dispatcher threads blocked in [`VirtualContext::wait_for_work`] wait here.
    work: Condvar,
    /// Bumped (after the lock is released) by every call that may retire ops: a spinning sync
    /// re-takes the lock only when it changed, so spinners do not contend with the dispatcher.
    retirements: AtomicU64,
    /// Set when a queue got new work, cleared when the dispatcher empties the queues: lets an
    /// idle dispatcher spin without taking the lock ([`VirtualContext::has_work_hint`]).
    work_hint: AtomicBool,
    /// Host threads inside a blocking synchronize call (spinning or parked).
    waiters: AtomicUsize,
    /// How long a blocking sync spins before it parks, ns ([`VirtualContext::set_sync_spin`]).
    sync_spin_ns: AtomicU64,
    /// Whether a spinning sync yields the CPU between checks ([`VirtualContext::set_sync_yield`]).
    sync_yield: AtomicBool,
    /// Called by spinning waiters (without the lock), see [`VirtualContext::set_wait_assist`].
    assist: std::sync::OnceLock<WaitAssist>,
    /// Whether the wait assist can act on the calling thread, see
    /// [`VirtualContext::set_wait_assist_scope`]; absent: on every thread.
    assist_scope: std::sync::OnceLock<AssistScope>,
    /// Of `waiters`, those spinning with the wait assist (calling it between checks).
    assisting: AtomicUsize,
    /// The DAG's live-op counts per stream bucket ([`VirtualContext::stream_has_live_op`]).
    live: std::sync::Arc<LiveByStream>,
    /// Whether `State::completed` may hold ops (then the live counts may be stale).
    has_completed: AtomicBool,
    /// The DAG's live-op count as of the last change under the lock
    /// ([`VirtualContext::outstanding_hint`]); on a cache line of its own, so that its stores do
    /// not disturb the lock-free hints spinning threads read.
    live_ops: LiveOps,
}

/// [`VirtualContext`]'s live-op count, alone on its cache line.
#[repr(align(64))]
#[derive(Debug)]
struct LiveOps(AtomicUsize);

/// Work a spinning waiter does on each turn, with the ops it waits for (live, unsatisfied): e.g.
/// polling completions itself. Returns `true` only if it established that those ops **and all
/// their live ancestors** physically completed (e.g. by waiting natively on the FIFO lane they
/// were submitted to, or reading the fence words the device wrote after them): the waiter then
/// returns at once, leaving their satisfaction to the next holder of the context's lock.
pub type WaitAssist = Box<dyn Fn(&[OpId]) -> bool + Send + Sync>;

/// Whether the [`WaitAssist`] can act on the calling thread (e.g. only where the device's
/// context is current): asked once when a blocking wait begins. A waiter it cannot help waits
/// like one without an assist: it does not count as assisting (so the dispatcher keeps recording
/// the fences a completion is observed by) and it wakes a parked dispatcher.
pub type AssistScope = Box<dyn Fn() -> bool + Send + Sync>;

impl fmt::Debug for VirtualContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = self.lock();
        let (streams, events) = g.order.counts();
        f.debug_struct("VirtualContext")
            .field("id", &self.id)
            .field("outstanding", &g.dag.len())
            .field("streams", &streams)
            .field("events", &events)
            .field("sticky_error", &g.sticky)
            .finish()
    }
}

/// The bound of a checked wait ([`VirtualContext::stream_synchronize_checked`]): the wait runs in
/// slices of `slice`, and `f` runs between slices; an error from `f` ends the wait with it.
pub struct Check<'a> {
    /// How long one slice of the wait lasts.
    pub slice: Duration,
    /// Called between slices (without the context's lock).
    pub f: &'a mut dyn FnMut() -> Result<(), VctxError>,
}

impl fmt::Debug for Check<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Check").field("slice", &self.slice).finish_non_exhaustive()
    }
}

/// How long a blocking sync spins (yielding) before it parks on the condition variable, unless
/// [`VirtualContext::set_sync_spin`] says otherwise.
pub const SYNC_SPIN: Duration = Duration::from_micros(50);

#[derive(Debug, Clone, Copy)]

enum Block {
    /// Not at all (a query).
    No,
    /// Until the instant, or forever if `None` (a timeout too large to represent).
    Until(Option<Instant>),
}

impl Block {
    fn after(timeout: Duration) -> Block {
        Block::Until(Instant::now().checked_add(timeout))
    }
    const FOREVER: Block = Block::Until(None);
}

impl VirtualContext {
    /// An empty context: only the legacy default stream exists.
    pub fn new(id: VctxId) -> Self {
        let state = State::default();
        let live = state.dag.live_by_stream();
        VirtualContext {
            id,
            live,
            state: Mutex::new(state),
            completion: Condvar::new(),
            work: Condvar::new(),
            retirements: AtomicU64::new(0),
            work_hint: AtomicBool::new(false),
            waiters: AtomicUsize::new(0),
            sync_spin_ns: AtomicU64::new(SYNC_SPIN.as_nanos() as u64),
            sync_yield: AtomicBool::new(true),
            assist: std::sync::OnceLock::new(),
            assist_scope: std::sync::OnceLock::new(),
            assisting: AtomicUsize::new(0),
            has_completed: AtomicBool::new(false),
            live_ops: LiveOps(AtomicUsize::new(0)),
        }
    }

    /// The context's lock, after satisfying the ops waiting threads established complete
    /// (`State::completed`): every reader of the DAG sees them retired. Its wake-ups are made
    /// with the lock held.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut g = self.state.lock();
        if !g.completed.is_empty() {
            self.settle(&mut g);
        }
        g
    }

    /// Satisfies `State::completed` (see [`lock`](Self::lock)).
    fn settle(&self, g: &mut State) {
        crate::trace::step(28);
        for op in std::mem::take(&mut g.completed) {
            g.dag.satisfy_with_ancestors(op);
        }
        self.has_completed.store(false, Ordering::Release);
        let wake = self.take_wakeups(g);
        self.retirements.fetch_add(1, Ordering::AcqRel);
        self.wake(wake);
    }

    /// How long blocking synchronize calls spin (yielding, and running the wait assist) before
    /// they park: [`SYNC_SPIN`] by default. A shim mirrors the application's scheduling choice
    /// here (the driver spins by default and parks only under blocking synchronization).
    pub fn set_sync_spin(&self, spin: Duration) {
        self.sync_spin_ns.store(spin.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// Whether a spinning sync yields the CPU (`sched_yield`) between checks (default) or only
    /// spins on the CPU (no system calls; for a dedicated core).
    pub fn set_sync_yield(&self, yield_between_checks: bool) {
        self.sync_yield.store(yield_between_checks, Ordering::Relaxed);
    }

    /// Installs work that a spinning waiter runs on each turn, outside the lock ([`WaitAssist`]):
    /// "poll completions if the dispatcher is free", or "wait natively on the lane the awaited
    /// ops run on", so a waiting thread observes its own completion without a wake-up from
    /// another thread (as a native spinning sync does). It must not call back into this
    /// context's blocking waits. Only the first call installs; returns whether it did.
    pub fn set_wait_assist(&self, assist: WaitAssist) -> bool {
        self.assist.set(assist).is_ok()
    }

    /// Installs where the wait assist can act ([`AssistScope`]). Only the first call installs;
    /// returns whether it did.
    pub fn set_wait_assist_scope(&self, scope: AssistScope) -> bool {
        self.assist_scope.set(scope).is_ok()
    }

    /// The wait assist, if one is installed and it can act on the calling thread.
    fn assist_here(&self) -> Option<&WaitAssist> {
        self.assist.get().filter(|_| self.assist_scope.get().is_none_or(|here| here()))
    }

    /// This context's id.
    pub fn id(&self) -> VctxId {
        self.id
    }

    /// Releases the lock, then wakes whoever the mutation concerns.
    fn finish(&self, mut g: MutexGuard<'_, State>) {
        let wake = self.take_wakeups(&mut g);
        drop(g);
        self.wake(wake);
    }

    /// Takes the DAG's effects: sets the work hint for new work and returns whom to wake
    /// (blocked synchronize calls, dispatchers waiting for work).
    fn take_wakeups(&self, g: &mut State) -> (bool, bool) {
        let fx = g.dag.take_effects();
        self.live_ops.0.store(g.dag.len(), Ordering::Relaxed);
        let wake_work = (fx.new_work && g.work_waiters > 0) || (fx.submitted_eagerly && g.eager_waiters > 0);
        if fx.new_work {
            self.work_hint.store(true, Ordering::Release);
        }
        (fx.woke_watched, wake_work)
    }

    /// Wakes what [`take_wakeups`](Self::take_wakeups) returned.
    fn wake(&self, (completion, work): (bool, bool)) {
        if completion && self.completion.notify_all() {
            crate::trace::mark(crate::trace::Tag::Wake, 3);
        }
        if work && self.work.notify_all() {
            crate::trace::mark(crate::trace::Tag::Wake, 2);
        }
    }

    // ---- streams ---------------------------------------------------------------------------

    /// The legacy default stream ([`StreamId::LEGACY`]); always exists.
    pub fn legacy_default_stream(&self) -> StreamId {
        StreamId::LEGACY
    }

    /// The per-thread default stream of host thread `thread`, created on first use.
    pub fn per_thread_default_stream(&self, thread: u64) -> StreamId {
        self.lock().order.per_thread(thread)
    }

    /// Creates a stream. `Blocking` and `NonBlocking` create a new stream with `priority` (lower
    /// is higher priority, as natively); `LegacyDefault` and `PerThreadDefault` return the
    /// existing default stream instead (priority ignored).
    pub fn create_stream(&self, kind: StreamKind, priority: i32) -> StreamId {
        let mut g = self.lock();
        match kind {
            StreamKind::LegacyDefault => StreamId::LEGACY,
            StreamKind::PerThreadDefault { thread } => g.order.per_thread(thread),
            StreamKind::Blocking | StreamKind::NonBlocking => g.order.create_stream(kind, priority),
        }
    }

    /// Destroys a created stream. Returns at once; work already recorded on it still completes
    /// and still counts for events, waits and device synchronization (as a native stream destroy).
    /// The default streams cannot be destroyed ([`VctxError::InvalidHandle`]).
    pub fn destroy_stream(&self, s: StreamId) -> Result<(), VctxError> {
        let mut g = self.lock();
        let st = &mut *g;
        st.order.destroy_stream(s, &st.dag)
    }

    /// Forgets the per-thread default stream of a thread that exited (its recorded work still
    /// completes). Keeps the stream table bounded when threads come and go.
    pub fn release_per_thread_default_stream(&self, thread: u64) {
        let mut g = self.lock();
        let st = &mut *g;
        st.order.release_per_thread(thread, &st.dag);
    }

    /// Per-thread default streams live now (threads that used theirs and did not exit).
    pub fn per_thread_default_streams(&self) -> usize {
        self.lock().order.per_thread_count()
    }

    /// The kind of a live stream.
    pub fn stream_kind(&self, s: StreamId) -> Result<StreamKind, VctxError> {
        Ok(self.lock().order.stream(s)?.kind)
    }

    /// The priority a live stream was created with.
    pub fn stream_priority(&self, s: StreamId) -> Result<i32, VctxError> {
        Ok(self.lock().order.stream(s)?.priority)
    }

    // ---- ops ----------------------------------------------------------------------------

    /// Records an op on `s` and returns at once with its token and its unsatisfied direct
    /// predecessors: the stream's tail, the legacy-default-stream edges and the event
    /// generations waited on since the previous op. Host functions and the device part of
    /// synchronous calls are recorded like any op.
    pub fn record_op(&self, s: StreamId, desc: Arc<OpDesc>) -> Result<Recorded, VctxError> {
        let mut g = self.lock();
        let st = &mut *g;
        let recorded = st.order.record_op(s, &mut st.dag, desc)?;
        crate::trace::mark(crate::trace::Tag::Recorded, recorded.op.0);
        self.finish(g);
        Ok(recorded)
    }

    /// [`record_op`](Self::record_op) with an eager submission: if the op is ready at once (no
    /// live predecessor) or every live predecessor is already submitted (it could follow them
    /// on their lane), `submit` is offered it with those predecessors (empty: fresh) **before any
    /// other thread can see it** (the context's lock is held) and the op counts as submitted if
    /// `submit` returns `true`, so the dispatcher never hands it out. This lets the recording
    /// thread bind and launch a fresh op, or continue a dependent one, itself without a
    /// hand-off, while keeping the op's place in its stream's order: no other op can be recorded
    /// between the check and the launch. `submit` must not call back into this context. Returns
    /// the record and whether `submit` took the op.
    pub fn record_op_eager(
        &self,
        s: StreamId,
        desc: Arc<OpDesc>,
        submit: impl FnOnce(OpId, &Arc<OpDesc>, &[OpId]) -> bool,
    ) -> Result<(Recorded, bool), VctxError> {
        let mut g = self.lock();
        let st = &mut *g;
        let had_work = st.dag.pending_new_work();
        let recorded = st.order.record_op(s, &mut st.dag, desc.clone())?;
        crate::trace::mark(crate::trace::Tag::Recorded, recorded.op.0);
        let offered = recorded.preds.iter().all(|p| st.dag.is_submitted(*p));
        let taken = offered && submit(recorded.op, &desc, &recorded.preds);
        if taken {
            // No work for the dispatcher (no hint), but a parked one is woken: it has a
            // submitted op to observe.
            g.dag.recorded_op_submitted_eagerly(recorded.op, had_work);
        }
        self.finish(g);
        Ok((recorded, taken))
    }

    /// Launch-first recording (the shim's default for fresh plain launches): if an op recorded on `s` now would have no live
    /// predecessor, `launch` runs **before** the op is recorded, with the context's lock held
    /// (nothing can be recorded in between, so the op's place in its stream's order is kept);
    /// it launches the op itself and returns its descriptor, copied after the launch, with what
    /// `commit` needs, or `None` (nothing launched). A launched op is then recorded as submitted
    /// and handed to `commit` with its id; the record and what `commit` returned are returned. Returns `Ok(None)` when the op would not be fresh or `launch`
    /// returned `None`: nothing was recorded. `launch` and `commit` must not call back into this
    /// context.
    pub fn record_launched_first<T, U>(
        &self,
        s: StreamId,
        launch: impl FnOnce() -> Option<(Arc<OpDesc>, T)>,
        commit: impl FnOnce(OpId, &Arc<OpDesc>, T) -> U,
    ) -> Result<Option<(Recorded, U)>, VctxError> {
        // Ops a waiting thread established complete are satisfied after the launch when the op
        // depends on nothing else (the first launch after a synchronize call that returned on
        // fence words): their retirement then overlaps the launched kernel.
        let mut g = self.state.lock();
        let st = &mut *g;
        if !st.completed.is_empty() && !st.order.would_be_fresh_after(s, &st.dag, &st.completed)? {
            self.settle(st);
        }
        if st.completed.is_empty() && !st.order.would_be_fresh(s, &st.dag)? {
            return Ok(None);
        }
        let Some((desc, launched)) = launch() else { return Ok(None) };
        if !st.completed.is_empty() {
            self.settle(st);
        }
        let had_work = st.dag.pending_new_work();
        // Cannot fail: the stream was just found valid.
        let recorded = st.order.record_op(s, &mut st.dag, desc.clone())?;
        debug_assert!(recorded.preds.is_empty(), "a fresh op got predecessors {:?}", recorded.preds);
        crate::trace::mark(crate::trace::Tag::Recorded, recorded.op.0);
        let out = commit(recorded.op, &desc, launched);
        g.dag.recorded_op_submitted_eagerly(recorded.op, had_work);
        self.finish(g);
        Ok(Some((recorded, out)))
    }

    /// A hint, read without the lock: `true` when stream `s` (or another stream sharing its
    /// bucket of 64) had a live op when read, so an op recorded on `s` now would most likely
    /// depend on a live op and [`record_launched_first`](Self::record_launched_first) would
    /// refuse it. `false` decides nothing (the op may still wait on events or the legacy
    /// stream): only the locked check does. May be stale either way.
    pub fn stream_has_live_op(&self, s: StreamId) -> bool {
        // Counts include ops established complete but not yet satisfied: no hint then.
        self.live.any(s) && !self.has_completed.load(Ordering::Acquire)
    }

    /// A synchronous operation (e.g. a synchronous copy): records `desc` on `s` and blocks until it
    /// completed. Returns the stream's sticky error if it (or an earlier op of the stream) failed.
    pub fn record_synchronous_op(&self, s: StreamId, desc: Arc<OpDesc>) -> Result<OpId, VctxError> {
        let recorded = self.record_op(s, desc)?;
        let g = self.lock();
        let (g, _) = self.wait_tokens(g, Frontier::from_slice(&[recorded.op]), Block::FOREVER);
        if let Ok(stream) = g.order.stream(s) {
            if let Some(e) = &stream.error {
                return Err(e.clone());
            }
        }
        Ok(recorded.op)
    }

    /// Whether `op`'s token is satisfied: it retired, or was never recorded.
    pub fn is_complete(&self, op: OpId) -> bool {
        !self.lock().dag.is_live(op)
    }

    /// Recorded ops that have not retired yet (an op satisfied before its predecessors counts
    /// until they retire).
    pub fn outstanding(&self) -> usize {
        self.lock().dag.len()
    }

    /// [`outstanding`](Self::outstanding) as of the last change, read without the lock (may be
    /// stale either way; ops established complete by a waiting thread count until satisfied).
    pub fn outstanding_hint(&self) -> usize {
        self.live_ops.0.load(Ordering::Relaxed)
    }

    /// Waits for `op` (recorded on `s`) to complete, then reports `s`'s sticky error if it has
    /// one (the second half of [`record_synchronous_op`](Self::record_synchronous_op), for callers
    /// that bound the wait), with `check` between slices as in
    /// [`stream_synchronize_checked`](Self::stream_synchronize_checked).
    pub fn op_synchronize_checked(&self, op: OpId, s: StreamId, check: Check<'_>) -> Result<(), VctxError> {
        let g = self.lock();
        let g = self.wait_checked(g, Frontier::from_slice(&[op]), check)?;
        if let Ok(stream) = g.order.stream(s) {
            if let Some(e) = &stream.error {
                return Err(e.clone());
            }
        }
        Ok(())
    }

    // ---- events -------------------------------------------------------------------------

    /// Creates an event. Never recorded, it is complete.
    pub fn create_event(&self) -> EventId {
        self.lock().order.create_event()
    }

    /// Destroys an event. Returns at once; waits already issued keep their generation (as a native
    /// event destroy). Later use of the handle is [`VctxError::InvalidHandle`].
    pub fn destroy_event(&self, e: EventId) -> Result<(), VctxError> {
        self.lock().order.destroy_event(e)
    }

    /// Records a new immutable generation of `e` at the current end of `s`; returns its number
    /// (1, 2, ...). An event recorded on a stream with no unfinished work is complete at once.
    pub fn record_event(&self, e: EventId, s: StreamId) -> Result<u64, VctxError> {
        let mut g = self.lock();
        let st = &mut *g;
        st.order.record_event(e, s, &st.dag)
    }

    /// Makes every later action on `s` follow the generation of `e` visible now. A later record
    /// of `e` does not retarget this wait. Waiting on a never-recorded event is a no-op.
    pub fn wait_event(&self, s: StreamId, e: EventId) -> Result<(), VctxError> {
        let mut g = self.lock();
        let st = &mut *g;
        st.order.wait_event(s, e, &st.dag)
    }

    /// The number of the generation of `e` current now (0 if never recorded).
    pub fn event_generation(&self, e: EventId) -> Result<u64, VctxError> {
        Ok(self.lock().order.event_tokens(e)?.0)
    }

    // ---- synchronization and queries ------------------------------------------------------

    /// Blocks (parked, no spinning) until every token in `tokens` retired or `block` says stop.
    /// Returns the guard and whether all retired. Only the first live token is watched at a
    /// time, so a waiter wakes once per watched retirement, not on every completion.
    fn wait_tokens<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        mut tokens: Frontier,
        block: Block,
    ) -> (MutexGuard<'a, State>, bool) {
        let deadline = match block {
            Block::No => {
                tokens.retain(|t| g.dag.is_live(*t));
                return (g, tokens.is_empty());
            }
            Block::Until(deadline) => deadline,
        };
        // A parked dispatcher must poll completions for this thread: wake it (unless this thread
        // polls for itself with the wait assist: the wake-up would only cost it a system call).
        let assist = self.assist_here();
        if g.work_waiters > 0 && assist.is_none() {
            self.work.notify_all();
        }
        // Spin briefly before parking: completions usually arrive from the dispatcher thread
        // within microseconds, and a park/unpark round trip costs more than that.
        #[cfg(not(loom))]
        {
            let spin_until = Instant::now() + Duration::from_nanos(self.sync_spin_ns.load(Ordering::Relaxed));
            let yields = self.sync_yield.load(Ordering::Relaxed);
            let assisting = usize::from(assist.is_some());
            self.waiters.fetch_add(1, Ordering::AcqRel);
            self.assisting.fetch_add(assisting, Ordering::AcqRel);
            let mut seen = self.retirements.load(Ordering::Acquire);
            loop {
                tokens.retain(|t| g.dag.is_live(*t));
                if tokens.is_empty() {
                    self.assisting.fetch_sub(assisting, Ordering::AcqRel);
                    self.waiters.fetch_sub(1, Ordering::AcqRel);
                    return (g, true);
                }
                drop(g);
                // Re-check under the lock only after some op retired. The time check comes last,
                // so the assist is asked at least once even when this thread was descheduled past
                // the spin window (else an assisting waiter would park without asking it).
                let timed_out = loop {
                    let r = self.retirements.load(Ordering::Acquire);
                    if r != seen {
                        seen = r;
                        break false;
                    }
                    match assist {
                        Some(f) => {
                            if f(&tokens) {
                                // Complete, with every ancestor: return now; the next holder
                                // of the lock satisfies them (`lock`).
                                let mut s = self.state.lock();
                                crate::trace::step(26);
                                s.completed.extend_from_slice(&tokens);
                                self.has_completed.store(true, Ordering::Release);
                                self.assisting.fetch_sub(assisting, Ordering::AcqRel);
                                self.waiters.fetch_sub(1, Ordering::AcqRel);
                                return (s, true);
                            }
                        }
                        None if yields => {
                            std::hint::spin_loop();
                            std::thread::yield_now();
                        }
                        // One pause per check: the counter's cache line changes only when ops
                        // retire, so checking it this often costs nothing, and a completion is
                        // seen within a pause (64 pauses are about 3 us on recent Intel cores).
                        None => std::hint::spin_loop(),
                    }
                    let now = Instant::now();
                    if now >= spin_until || deadline.is_some_and(|d| now >= d) {
                        break true;
                    }
                };
                g = self.lock();
                if timed_out {
                    break;
                }
            }
            self.assisting.fetch_sub(assisting, Ordering::AcqRel);
            self.waiters.fetch_sub(1, Ordering::AcqRel);
        }
        loop {
            tokens.retain(|t| g.dag.is_live(*t));
            let Some(&watch) = tokens.first() else { return (g, true) };
            g.dag.watch(watch);
            g.blocked += 1;
            self.waiters.fetch_add(1, Ordering::AcqRel);
            let (g2, timed_out) = wait_opt(&self.completion, g, deadline);
            g = g2;
            g.blocked -= 1;
            self.waiters.fetch_sub(1, Ordering::AcqRel);
            g.dag.unwatch(watch);
            if timed_out {
                tokens.retain(|t| g.dag.is_live(*t));
                return (g, tokens.is_empty());
            }
        }
    }

    /// [`wait_tokens`](Self::wait_tokens) in slices of `check.slice`, calling `check.f` (without
    /// the lock) after every slice that ended with tokens still live: its error ends the wait. The
    /// tokens are the ones taken at the call, so later work never extends the wait.
    fn wait_checked<'a>(
        &'a self,
        mut g: MutexGuard<'a, State>,
        mut tokens: Frontier,
        check: Check<'_>,
    ) -> Result<MutexGuard<'a, State>, VctxError> {
        // Done already (the usual case of a query-like sync): no clock read, no slice.
        tokens.retain(|t| g.dag.is_live(*t));
        if tokens.is_empty() {
            return Ok(g);
        }
        loop {
            let (g2, done) = self.wait_tokens(g, tokens.clone(), Block::after(check.slice));
            if done {
                return Ok(g2);
            }
            tokens.retain(|t| g2.dag.is_live(*t));
            drop(g2);
            (check.f)()?;
            g = self.lock();
        }
    }

    /// Blocks until every op in `ops` was handed to a backend lane, retired or was never
    /// recorded, or `block` says stop; returns whether all were. Parks like [`Self::wait_tokens`].
    fn wait_submissions(&self, ops: &[OpId], block: Block) -> bool {
        let mut g = self.lock();
        let mut pending: SmallVec<[OpId; 4]> = ops.iter().copied().filter(|o| !g.dag.is_submitted(*o)).collect();
        let deadline = match block {
            Block::No => return pending.is_empty(),
            Block::Until(deadline) => deadline,
        };
        #[cfg(not(loom))]
        {
            let spin_until = Instant::now() + SYNC_SPIN;
            loop {
                pending.retain(|o| !g.dag.is_submitted(*o));
                if pending.is_empty() {
                    return true;
                }
                let now = Instant::now();
                if now >= spin_until || deadline.is_some_and(|d| now >= d) {
                    break;
                }
                drop(g);
                std::thread::yield_now();
                g = self.lock();
            }
        }
        loop {
            pending.retain(|o| !g.dag.is_submitted(*o));
            let Some(&watch) = pending.first() else { return true };
            g.dag.watch_submission(watch);
            g.blocked += 1;
            let (g2, timed_out) = wait_opt(&self.completion, g, deadline);
            g = g2;
            g.blocked -= 1;
            g.dag.unwatch_submission(watch);
            if timed_out {
                pending.retain(|o| !g.dag.is_submitted(*o));
                return pending.is_empty();
            }
        }
    }

    /// Whether `op` was handed to a backend lane (it may still be running), retired, or was never
    /// recorded.
    pub fn is_submitted(&self, op: OpId) -> bool {
        self.lock().dag.is_submitted(op)
    }

    /// Blocks until every op in `ops` was handed to a backend lane (or retired; unknown ids count
    /// as retired). For a call that must not overtake the **submission** of earlier deferred work
    /// but need not wait for its completion: once the backend holds a graph launch, destroying or
    /// updating the executable graph is as safe as it is natively (the driver finishes launches in
    /// flight with the graph as it was when they were launched).
    pub fn wait_submitted(&self, ops: &[OpId]) {
        self.wait_submissions(ops, Block::FOREVER);
    }

    /// [`wait_submitted`](Self::wait_submitted) for at most `timeout`; whether all were submitted.
    pub fn wait_submitted_timeout(&self, ops: &[OpId], timeout: Duration) -> bool {
        self.wait_submissions(ops, Block::after(timeout))
    }

    fn sync_stream(&self, s: StreamId, block: Block) -> Result<bool, VctxError> {
        let g = self.lock();
        let stream = g.order.stream(s)?;
        if let Some(e) = &stream.error {
            return Err(e.clone());
        }
        let tokens = stream.frontier.clone();
        let (g, done) = self.wait_tokens(g, tokens, block);
        if let Ok(stream) = g.order.stream(s) {
            if let Some(e) = &stream.error {
                return Err(e.clone());
            }
        }
        Ok(done)
    }

    /// [`stream_synchronize`](Self::stream_synchronize), bounded by its caller: the wait runs in
    /// slices and `check` runs after each slice that did not see the work complete; its error ends
    /// the wait (the work stays recorded). For a runtime that must never wait forever on work it
    /// may be unable to complete (e.g. a dispatcher that stopped).
    pub fn stream_synchronize_checked(&self, s: StreamId, check: Check<'_>) -> Result<(), VctxError> {
        let g = self.lock();
        let stream = g.order.stream(s)?;
        if let Some(e) = &stream.error {
            return Err(e.clone());
        }
        let tokens = stream.frontier.clone();
        let g = self.wait_checked(g, tokens, check)?;
        if let Ok(stream) = g.order.stream(s) {
            if let Some(e) = &stream.error {
                return Err(e.clone());
            }
        }
        Ok(())
    }

    /// [`event_synchronize`](Self::event_synchronize), bounded like
    /// [`stream_synchronize_checked`](Self::stream_synchronize_checked).
    pub fn event_synchronize_checked(&self, e: EventId, check: Check<'_>) -> Result<(), VctxError> {
        let g = self.lock();
        let (_, tokens) = g.order.event_tokens(e)?;
        if let Some(err) = &g.sticky {
            return Err(err.clone());
        }
        let g = self.wait_checked(g, tokens, check)?;
        if let Some(err) = &g.sticky {
            return Err(err.clone());
        }
        Ok(())
    }

    /// [`device_synchronize`](Self::device_synchronize), bounded like
    /// [`stream_synchronize_checked`](Self::stream_synchronize_checked).
    pub fn device_synchronize_checked(&self, check: Check<'_>) -> Result<(), VctxError> {
        let g = self.lock();
        if let Some(e) = &g.sticky {
            return Err(e.clone());
        }
        let tokens: Frontier = g.order.all_tokens(&g.dag).into_iter().collect();
        let g = self.wait_checked(g, tokens, check)?;
        if let Some(e) = &g.sticky {
            return Err(e.clone());
        }
        Ok(())
    }

    /// Whether all work recorded on `s` (ops and event waits) completed. Reports the stream's
    /// sticky asynchronous error, if any.
    pub fn stream_query(&self, s: StreamId) -> Result<bool, VctxError> {
        self.sync_stream(s, Block::No)
    }

    /// Blocks until all work recorded on `s` before the call completed.
    pub fn stream_synchronize(&self, s: StreamId) -> Result<(), VctxError> {
        self.sync_stream(s, Block::FOREVER).map(|_| ())
    }

    /// [`stream_synchronize`](Self::stream_synchronize) for at most `timeout`; `Ok(false)` if it
    /// timed out.
    pub fn stream_synchronize_timeout(&self, s: StreamId, timeout: Duration) -> Result<bool, VctxError> {
        self.sync_stream(s, Block::after(timeout))
    }

    /// An event's sync or query reports the context's sticky asynchronous error, as the driver's
    /// does after a fault (an event query is where a program polling for completion sees it).
    fn sync_event(&self, e: EventId, block: Block) -> Result<bool, VctxError> {
        let g = self.lock();
        let (_, tokens) = g.order.event_tokens(e)?;
        if let Some(err) = &g.sticky {
            return Err(err.clone());
        }
        let (g, done) = self.wait_tokens(g, tokens, block);
        if let Some(err) = &g.sticky {
            return Err(err.clone());
        }
        Ok(done)
    }

    /// Whether the generation of `e` current now completed (true if never recorded).
    pub fn event_query(&self, e: EventId) -> Result<bool, VctxError> {
        self.sync_event(e, Block::No)
    }

    /// Blocks until the generation of `e` current at the call completed; a concurrent re-record
    /// does not extend the wait.
    pub fn event_synchronize(&self, e: EventId) -> Result<(), VctxError> {
        self.sync_event(e, Block::FOREVER).map(|_| ())
    }

    /// [`event_synchronize`](Self::event_synchronize) for at most `timeout`.
    pub fn event_synchronize_timeout(&self, e: EventId, timeout: Duration) -> Result<bool, VctxError> {
        self.sync_event(e, Block::after(timeout))
    }

    fn sync_device(&self, block: Block) -> Result<bool, VctxError> {
        let g = self.lock();
        if let Some(e) = &g.sticky {
            return Err(e.clone());
        }
        let tokens: Frontier = g.order.all_tokens(&g.dag).into_iter().collect();
        let (g, done) = self.wait_tokens(g, tokens, block);
        if let Some(e) = &g.sticky {
            return Err(e.clone());
        }
        Ok(done)
    }

    /// Blocks until all work recorded in this context before the call completed, on every
    /// stream (destroyed ones included). Reports the context's sticky asynchronous error.
    pub fn device_synchronize(&self) -> Result<(), VctxError> {
        self.sync_device(Block::FOREVER).map(|_| ())
    }

    /// [`device_synchronize`](Self::device_synchronize) for at most `timeout`.
    pub fn device_synchronize_timeout(&self, timeout: Duration) -> Result<bool, VctxError> {
        self.sync_device(Block::after(timeout))
    }

    /// Host threads blocked in a synchronize call right now (observability and tests).
    pub fn blocked_threads(&self) -> usize {
        self.lock().blocked
    }

    /// The first asynchronous failure in this context, if any (for shims that report it from
    /// every call, as a driver does after a sticky error).
    pub fn sticky_error(&self) -> Option<VctxError> {
        self.lock().sticky.clone()
    }

    // ---- dispatcher side ------------------------------------------------------------------

    /// Appends the ops that became ready since the last call, in the order they became ready.
    /// Each op is handed out once; ops submitted before becoming ready are not handed out.
    pub fn take_ready(&self, out: &mut Vec<ReadyOp>) {
        let mut g = self.lock();
        g.dag.take_ready(out);
        self.clear_hint_if_drained(&g);
    }

    /// Notes that `op` was handed to a backend lane (not yet complete). Idempotent.
    pub fn mark_submitted(&self, op: OpId) {
        let mut g = self.lock();
        g.dag.mark_submitted(op);
        self.finish(g);
    }

    /// Appends the ops, not ready, whose unsatisfied predecessors are all submitted (lane
    /// continuation candidates). Each op is reported at most once.
    pub fn take_continuable(&self, out: &mut Vec<ContinuableOp>) {
        let mut g = self.lock();
        g.dag.take_continuable(out);
        self.clear_hint_if_drained(&g);
    }

    /// Clears the work hint once both queues are empty (called with the lock held).
    fn clear_hint_if_drained(&self, g: &State) {
        if !g.dag.has_work() {
            self.work_hint.store(false, Ordering::Release);
        }
    }

    /// Physical completion of `op`: satisfies its token, releases its dependents and wakes the
    /// threads waiting for it. Unknown or already satisfied ids are ignored.
    pub fn satisfy(&self, op: OpId) {
        self.satisfy_all(std::slice::from_ref(&op));
    }

    /// [`satisfy`](Self::satisfy) for several ops under one lock (a poll's batch of completions).
    pub fn satisfy_all(&self, ops: &[OpId]) {
        if ops.is_empty() {
            return;
        }
        let mut g = self.lock();
        crate::trace::step(23);
        for &op in ops {
            g.dag.satisfy(op);
        }
        crate::trace::step(24);
        self.finish(g);
        self.retirements.fetch_add(1, Ordering::AcqRel);
    }

    /// Host threads inside a blocking synchronize call now (lock-free; a dispatcher polls
    /// completions eagerly while somebody waits).
    pub fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::Acquire) > 0
    }

    /// Host threads spinning in a synchronize call that run the wait assist between checks now
    /// (lock-free): they poll for themselves, a parked waiter does not.
    pub fn has_assisting_waiters(&self) -> bool {
        self.assisting.load(Ordering::Acquire) > 0
    }

    /// Whether new ready or continuable work may be queued (lock-free hint, may be stale: a
    /// `false` can be followed by work at once; [`wait_for_work`](Self::wait_for_work) is exact).
    pub fn has_work_hint(&self) -> bool {
        self.work_hint.load(Ordering::Acquire)
    }

    /// Asynchronous failure of `op`: satisfies it like [`satisfy`](Self::satisfy) and records
    /// [`VctxError::LaunchFailed`], reported from then on by every sync/query of the op's stream
    /// and by device synchronization. A failure of an op that is not live is recorded for the
    /// device only.
    pub fn fail(&self, op: OpId, error: String) {
        self.fail_with_code(op, None, error)
    }

    /// [`fail`](Self::fail) with the backend's native error code, reported by the syncs and
    /// queries that see the failure.
    pub fn fail_with_code(&self, op: OpId, code: Option<i32>, error: String) {
        let mut g = self.lock();
        let stream = if g.dag.is_live(op) { g.dag.stream_of(op) } else { None };
        let err = VctxError::LaunchFailed { op, stream, message: error, code };
        if let Some(s) = stream {
            g.order.set_stream_error(s, &err);
        }
        g.sticky.get_or_insert(err);
        g.dag.satisfy(op);
        self.finish(g);
        self.retirements.fetch_add(1, Ordering::AcqRel);
    }

    /// Blocks until the ready or continuable queue holds something, a host thread starts
    /// waiting in a synchronize call (without a wait assist), an op is submitted eagerly, or
    /// `timeout` passed (also on a notification whose work another thread already took: the
    /// caller re-checks its own state). Returns whether there is (possibly stale) work to take.
    pub fn wait_for_work(&self, timeout: Duration) -> bool {
        self.wait_work(timeout, true)
    }

    /// [`wait_for_work`](Self::wait_for_work) for a dispatcher with work in flight that nothing
    /// needs now: an eager submission does not end the nap (the submitting thread continues
    /// and observes its own work; the napper polls when the nap ends), so that thread is spared
    /// the wake-up system call. Busy-waiting instead would keep a CPU busy, which slowed a
    /// native launch-bound chain by 5-18% on the H200 host (`bench/probes/host/spin_check.sh`).
    pub fn nap_for_work(&self, timeout: Duration) -> bool {
        self.wait_work(timeout, false)
    }

    fn wait_work(&self, timeout: Duration, wake_on_eager: bool) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut g = self.lock();
        if g.dag.has_work() {
            return true;
        }
        g.work_waiters += 1;
        g.eager_waiters += usize::from(wake_on_eager);
        let (g2, _) = wait_opt(&self.work, g, deadline);
        g = g2;
        g.work_waiters -= 1;
        g.eager_waiters -= usize::from(wake_on_eager);
        g.dag.has_work()
    }
}
