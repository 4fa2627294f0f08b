//! State-machine test of [`VirtualContext`] against a reference model.
//!
//! The model knows nothing of frontiers, dirty lists or counters: it keeps, for every stream,
//! the full set of ops an action there must follow (the happens-before *closure*) and, for
//! every op, its complete ancestor set, written directly from the documented rules (stream
//! order; legacy default stream: an action there first follows all blocking streams, and
//! blocking streams' ops follow it; per-thread default streams count as blocking; event waits
//! copy the generation current at the wait). Random sequences of stream/event creation and
//! destruction (per-thread default streams released), op recording on random streams (legacy
//! included), event record/wait/re-record,
//! dispatcher steps (take ready, take continuable, mark submitted, satisfy and fail in any
//! order the DAG allows, including lane-continuation-style early completions), queries and
//! syncs (immediate, timed, and blocking in background threads; and syncs whose wait assist
//! establishes the submitted ops they cover complete, returning before anything satisfied them)
//! are applied to both. Checked:
//! (a) an op is handed out as ready only when every ancestor completed, and every op whose
//! ancestors all completed is handed out (exactly the model's set, so no spurious edge and no
//! missed wake-up); (b) at the end, draining the dispatcher completes every op and releases
//! every blocked sync; (c) every query, sync and `outstanding()` answers as the model says after
//! every step; (d) re-recording never retargets an earlier wait (follows from (a)'s exactness,
//! since the model binds waits to the generation current at the wait). Direct predecessors
//! returned by `record_op` must be model ancestors that are still unretired and must cover all
//! unretired ancestors.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::Config;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use vitamin_hal::{Marker, OpDesc};
use vitamin_runtime::vctx::Handle;
use vitamin_runtime::{EventId, OpId, StreamId, StreamKind, VctxError, VctxId, VirtualContext};

// ---------------------------------------------------------------------------------------------
// Reference model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Legacy,
    Blocking,
    NonBlocking,
    PerThread(u64),
}

impl Kind {
    fn blocking(self) -> bool {
        matches!(self, Kind::Blocking | Kind::PerThread(_))
    }
}

#[derive(Clone, Debug)]
struct MStream {
    kind: Kind,
    alive: bool,
    /// Every op a new action on this stream must follow.
    before: BTreeSet<usize>,
    error: bool,
}

#[derive(Clone, Debug)]
struct MEvent {
    alive: bool,
    generation: u64,
    tokens: BTreeSet<usize>,
}

#[derive(Clone, Debug)]
struct MOp {
    stream: usize,
    /// All happens-before ancestors.
    anc: BTreeSet<usize>,
    submitted: bool,
    completed: bool,
    taken: bool,
}

#[derive(Clone, Debug)]
struct Model {
    streams: Vec<MStream>,
    events: Vec<MEvent>,
    ops: Vec<MOp>,
    per_thread: BTreeMap<u64, usize>,
    device_error: bool,
    bg_syncs: usize,
}

impl Model {
    fn new() -> Self {
        Model {
            streams: vec![MStream { kind: Kind::Legacy, alive: true, before: BTreeSet::new(), error: false }],
            events: Vec::new(),
            ops: Vec::new(),
            per_thread: BTreeMap::new(),
            device_error: false,
            bg_syncs: 0,
        }
    }

    fn completed(&self, o: usize) -> bool {
        self.ops[o].completed
    }

    fn retired(&self, o: usize) -> bool {
        self.ops[o].completed && self.ops[o].anc.iter().all(|a| self.completed(*a))
    }

    fn all_retired<'a>(&self, set: impl IntoIterator<Item = &'a usize>) -> bool {
        set.into_iter().all(|o| self.retired(*o))
    }

    fn ready_eligible(&self, o: usize) -> bool {
        let op = &self.ops[o];
        !op.submitted && !op.taken && op.anc.iter().all(|a| self.completed(*a))
    }

    fn add_stream(&mut self, kind: Kind) -> usize {
        self.streams.push(MStream { kind, alive: true, before: BTreeSet::new(), error: false });
        self.streams.len() - 1
    }

    /// "the legacy stream first waits on all blocking streams" (destroyed ones' work too).
    fn legacy_absorb(&mut self) {
        let all: BTreeSet<usize> =
            self.streams.iter().filter(|s| s.kind.blocking()).flat_map(|s| s.before.iter().copied()).collect();
        self.streams[0].before.extend(all);
    }

    /// What an action on `s` follows.
    fn capture(&mut self, s: usize) -> BTreeSet<usize> {
        if s == 0 {
            self.legacy_absorb();
            return self.streams[0].before.clone();
        }
        let mut set = self.streams[s].before.clone();
        if self.streams[s].kind.blocking() {
            set.extend(self.streams[0].before.iter().copied());
        }
        set
    }

    fn stream_ok(&self, s: usize) -> bool {
        self.streams.get(s).is_some_and(|x| x.alive)
    }

    fn event_ok(&self, e: usize) -> bool {
        self.events.get(e).is_some_and(|x| x.alive)
    }

    /// What a sync of `t` waits for, with every ancestor; `None` when the sync fails at once
    /// (invalid handle or sticky error) and so never waits.
    fn covered(&self, t: Target) -> Option<BTreeSet<usize>> {
        let direct = match t {
            Target::Stream(s) if self.stream_ok(s) && !self.streams[s].error => self.streams[s].before.clone(),
            Target::Event(e) if self.event_ok(e) && !self.device_error => self.events[e].tokens.clone(),
            Target::Device if !self.device_error => (0..self.ops.len()).collect(),
            _ => return None,
        };
        let mut all = direct.clone();
        for o in direct {
            all.extend(self.ops[o].anc.iter().copied());
        }
        Some(all)
    }

    /// Whether a wait assist could establish what a sync of `t` covers complete: all of it ran
    /// (was submitted, or completed already).
    fn assist_can_complete(&self, t: Target) -> bool {
        self.covered(t).is_some_and(|c| c.iter().all(|&o| self.ops[o].submitted || self.ops[o].completed))
    }
}

#[derive(Clone, Copy, Debug)]
enum Target {
    Stream(usize),
    Event(usize),
    Device,
}

#[derive(Clone, Debug)]
enum T {
    CreateStream {
        non_blocking: bool,
        priority: i32,
    },
    PerThread(u64),
    ReleasePerThread(u64),
    DestroyStream(usize),
    RecordOp(usize),
    RecordOnUnknown,
    CreateEvent,
    DestroyEvent(usize),
    RecordEvent(usize, usize),
    WaitEvent(usize, usize),
    TakeReady,
    TakeContinuable,
    MarkSubmitted(usize),
    Satisfy(usize),
    Fail(usize),
    Query(Target),
    Sync(Target),
    SpawnSync(Target),
    /// A sync whose wait assist reports the ops it covers, and their ancestors, complete (all
    /// submitted): it returns at once and leaves them to the next holder of the lock.
    AssistSync(Target),
}

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = Model;
    type Transition = T;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(m: &Model) -> BoxedStrategy<T> {
        let ns = m.streams.len();
        let ne = m.events.len();
        let stream = move || 0..ns;
        let target = move || {
            prop_oneof![(0..ns).prop_map(Target::Stream), (0..ne.max(1)).prop_map(Target::Event), Just(Target::Device)]
        };
        let mut v: Vec<(u32, BoxedStrategy<T>)> = vec![
            (
                3,
                (any::<bool>(), -2i32..1)
                    .prop_map(|(non_blocking, priority)| T::CreateStream { non_blocking, priority })
                    .boxed(),
            ),
            (1, (0u64..3).prop_map(T::PerThread).boxed()),
            (1, (0u64..3).prop_map(T::ReleasePerThread).boxed()),
            (3, stream().prop_map(T::DestroyStream).boxed()),
            (14, stream().prop_map(T::RecordOp).boxed()),
            (1, Just(T::RecordOnUnknown).boxed()),
            (2, Just(T::CreateEvent).boxed()),
            (5, Just(T::TakeReady).boxed()),
            (2, Just(T::TakeContinuable).boxed()),
            (3, target().prop_map(T::Query).boxed()),
            (3, target().prop_map(T::Sync).boxed()),
        ];
        if m.bg_syncs < 3 {
            v.push((1, target().prop_map(T::SpawnSync).boxed()));
        }
        // Syncs a wait assist can end early: everything they cover ran, and something of it is
        // not satisfied yet.
        let assistable: Vec<Target> = (0..ns)
            .map(Target::Stream)
            .chain((0..ne).map(Target::Event))
            .chain([Target::Device])
            .filter(|&t| m.assist_can_complete(t) && m.covered(t).is_some_and(|c| !m.all_retired(&c)))
            .collect();
        if !assistable.is_empty() {
            v.push((6, select(assistable).prop_map(T::AssistSync).boxed()));
        }
        if ne > 0 {
            v.push((1, (0..ne).prop_map(T::DestroyEvent).boxed()));
            v.push((4, (0..ne, stream()).prop_map(|(e, s)| T::RecordEvent(e, s)).boxed()));
            v.push((4, (stream(), 0..ne).prop_map(|(s, e)| T::WaitEvent(s, e)).boxed()));
        }
        let satisfiable: Vec<usize> =
            (0..m.ops.len()).filter(|&o| !m.ops[o].completed && (m.ops[o].taken || m.ops[o].submitted)).collect();
        if !satisfiable.is_empty() {
            v.push((12, select(satisfiable.clone()).prop_map(T::Satisfy).boxed()));
            v.push((1, select(satisfiable).prop_map(T::Fail).boxed()));
        }
        let submittable: Vec<usize> = (0..m.ops.len()).filter(|&o| !m.ops[o].submitted).collect();
        if !submittable.is_empty() {
            v.push((4, select(submittable).prop_map(T::MarkSubmitted).boxed()));
        }
        Union::new_weighted(v).boxed()
    }

    fn preconditions(m: &Model, t: &T) -> bool {
        let target_ok = |t: &Target| match *t {
            Target::Stream(s) => s < m.streams.len(),
            Target::Event(e) => e < m.events.len(),
            Target::Device => true,
        };
        match t {
            T::DestroyStream(s) | T::RecordOp(s) => *s < m.streams.len(),
            T::DestroyEvent(e) => *e < m.events.len(),
            T::RecordEvent(e, s) | T::WaitEvent(s, e) => *e < m.events.len() && *s < m.streams.len(),
            T::MarkSubmitted(o) => *o < m.ops.len() && !m.ops[*o].submitted,
            T::Satisfy(o) | T::Fail(o) => {
                *o < m.ops.len() && !m.ops[*o].completed && (m.ops[*o].taken || m.ops[*o].submitted)
            }
            T::Query(x) | T::Sync(x) => target_ok(x),
            T::SpawnSync(x) => target_ok(x) && m.bg_syncs < 3,
            T::AssistSync(x) => target_ok(x) && m.assist_can_complete(*x),
            _ => true,
        }
    }

    fn apply(mut m: Model, t: &T) -> Model {
        match *t {
            T::CreateStream { non_blocking, .. } => {
                m.add_stream(if non_blocking { Kind::NonBlocking } else { Kind::Blocking });
            }
            T::PerThread(th) => {
                if !m.per_thread.contains_key(&th) {
                    let s = m.add_stream(Kind::PerThread(th));
                    m.per_thread.insert(th, s);
                }
            }
            T::ReleasePerThread(th) => {
                if let Some(s) = m.per_thread.remove(&th) {
                    m.streams[s].alive = false;
                }
            }
            T::DestroyStream(s) => {
                if m.stream_ok(s) && matches!(m.streams[s].kind, Kind::Blocking | Kind::NonBlocking) {
                    m.streams[s].alive = false;
                }
            }
            T::RecordOp(s) => {
                if m.stream_ok(s) {
                    let anc = m.capture(s);
                    let o = m.ops.len();
                    m.ops.push(MOp { stream: s, anc: anc.clone(), submitted: false, completed: false, taken: false });
                    let st = &mut m.streams[s];
                    st.before = anc;
                    st.before.insert(o);
                }
            }
            T::CreateEvent => m.events.push(MEvent { alive: true, generation: 0, tokens: BTreeSet::new() }),
            T::DestroyEvent(e) => m.events[e].alive = false,
            T::RecordEvent(e, s) => {
                if m.event_ok(e) && m.stream_ok(s) {
                    let tokens = m.capture(s);
                    m.events[e].generation += 1;
                    m.events[e].tokens = tokens;
                }
            }
            T::WaitEvent(s, e) => {
                if m.event_ok(e) && m.stream_ok(s) {
                    if s == 0 {
                        m.legacy_absorb();
                    }
                    let tokens = m.events[e].tokens.clone();
                    m.streams[s].before.extend(tokens);
                }
            }
            T::TakeReady => {
                for o in 0..m.ops.len() {
                    if m.ready_eligible(o) {
                        m.ops[o].taken = true;
                    }
                }
            }
            T::MarkSubmitted(o) => m.ops[o].submitted = true,
            T::Satisfy(o) => {
                m.ops[o].submitted = true;
                m.ops[o].completed = true;
            }
            T::Fail(o) => {
                m.ops[o].submitted = true;
                m.ops[o].completed = true;
                let s = m.ops[o].stream;
                m.streams[s].error = true;
                m.device_error = true;
            }
            T::SpawnSync(_) => m.bg_syncs += 1,
            T::AssistSync(x) => {
                for o in m.covered(x).unwrap_or_default() {
                    m.ops[o].submitted = true;
                    m.ops[o].completed = true;
                }
            }
            T::RecordOnUnknown | T::TakeContinuable | T::Query(_) | T::Sync(_) => {}
        }
        m
    }
}

// ---------------------------------------------------------------------------------------------
// System under test
// ---------------------------------------------------------------------------------------------

struct BgSync {
    what: Target,
    /// Ops whose retirement releases the sync.
    target: BTreeSet<usize>,
    /// The call's result once it returned.
    done: Arc<Mutex<Option<Result<(), VctxError>>>>,
    handle: JoinHandle<()>,
}

struct Sut {
    ctx: Arc<VirtualContext>,
    streams: Vec<StreamId>,
    events: Vec<EventId>,
    ops: Vec<OpId>,
    descs: Vec<Arc<OpDesc>>,
    index: HashMap<OpId, usize>,
    /// Direct predecessors `record_op` returned, as op indices.
    preds: Vec<Vec<usize>>,
    handed_out: BTreeSet<usize>,
    reported: BTreeSet<usize>,
    bg: Vec<BgSync>,
    model: Model,
}

const LONG: Duration = Duration::from_secs(5);

thread_local! {
    /// What the wait assist reports on this thread: the test thread sets it for an
    /// [`T::AssistSync`] only, so background syncs never return on it.
    static ASSIST_DONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Sut {
    fn stream_expect<V: PartialEq + std::fmt::Debug>(&self, m: &Model, s: usize, got: Result<V, VctxError>, ok: V) {
        if !m.stream_ok(s) {
            assert_eq!(got.unwrap_err(), VctxError::InvalidHandle(Handle::Stream(self.streams[s])));
        } else if m.streams[s].error {
            assert!(
                matches!(got, Err(VctxError::LaunchFailed { .. })),
                "stream {s}: expected sticky error, got {got:?}"
            );
        } else {
            assert_eq!(got.unwrap(), ok, "stream {s}");
        }
    }

    fn target_done(m: &Model, t: Target) -> BTreeSet<usize> {
        match t {
            Target::Stream(s) => m.streams[s].before.clone(),
            Target::Event(e) => m.events[e].tokens.clone(),
            Target::Device => (0..m.ops.len()).collect(),
        }
    }

    fn check_query(&self, m: &Model, t: Target, sync: bool) {
        let done = |set: &BTreeSet<usize>| m.all_retired(set);
        match t {
            Target::Stream(s) => {
                let sid = self.streams[s];
                let expect = m.stream_ok(s) && done(&m.streams[s].before);
                let got = if !sync {
                    self.ctx.stream_query(sid)
                } else if expect {
                    self.ctx.stream_synchronize_timeout(sid, LONG)
                } else {
                    self.ctx.stream_synchronize_timeout(sid, Duration::ZERO)
                };
                self.stream_expect(m, s, got, expect);
            }
            Target::Event(e) => {
                let Some(&eid) = self.events.get(e) else { return };
                let got = if sync {
                    self.ctx
                        .event_synchronize_timeout(eid, if done(&m.events[e].tokens) { LONG } else { Duration::ZERO })
                } else {
                    self.ctx.event_query(eid)
                };
                if m.event_ok(e) && m.device_error {
                    // The context's sticky error, as the driver's event calls report it.
                    assert!(matches!(got, Err(VctxError::LaunchFailed { .. })), "event {e}: {got:?}");
                } else if m.event_ok(e) {
                    assert_eq!(got.unwrap(), done(&m.events[e].tokens), "event {e}");
                } else {
                    assert_eq!(got.unwrap_err(), VctxError::InvalidHandle(Handle::Event(eid)));
                }
            }
            Target::Device => {
                let all = (0..m.ops.len()).all(|o| m.retired(o));
                let got = self.ctx.device_synchronize_timeout(if sync && all { LONG } else { Duration::ZERO });
                if m.device_error {
                    assert!(matches!(got, Err(VctxError::LaunchFailed { .. })), "device: {got:?}");
                } else {
                    assert_eq!(got.unwrap(), all, "device sync");
                }
            }
        }
    }

    /// Waits until every background sync whose target retired has returned and all others are
    /// blocked, so each one's snapshot was taken in the state its transition saw.
    fn settle(&self, m: &Model) {
        let deadline = Instant::now() + LONG;
        loop {
            let unfinished: Vec<&BgSync> = self.bg.iter().filter(|b| b.done.lock().unwrap().is_none()).collect();
            let releasable = unfinished.iter().any(|b| m.all_retired(&b.target));
            if !releasable && self.ctx.blocked_threads() >= unfinished.len() {
                return;
            }
            assert!(Instant::now() < deadline, "(b) background syncs did not settle");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    fn spawn_sync(&mut self, m: &Model, t: Target) {
        self.settle(m);
        let ctx = Arc::clone(&self.ctx);
        let done = Arc::new(Mutex::new(None));
        let d2 = Arc::clone(&done);
        let call: Box<dyn FnOnce() -> Result<(), VctxError> + Send> = match t {
            Target::Stream(s) if m.stream_ok(s) && !m.streams[s].error => {
                let sid = self.streams[s];
                Box::new(move || ctx.stream_synchronize(sid))
            }
            Target::Event(e) if m.event_ok(e) && !m.device_error => {
                let eid = self.events[e];
                Box::new(move || ctx.event_synchronize(eid))
            }
            Target::Device if !m.device_error => Box::new(move || ctx.device_synchronize()),
            _ => return,
        };
        let handle = std::thread::spawn(move || {
            let r = call();
            *d2.lock().unwrap() = Some(r);
        });
        self.bg.push(BgSync { what: t, target: Self::target_done(m, t), done, handle });
        self.settle(m);
    }
}

/// A background sync may fail with the sticky error (reported at once, pending work or not),
/// or with an invalid handle if its target was destroyed before the thread got to call.
fn bg_error_ok(m: &Model, what: Target, e: &VctxError) -> bool {
    match e {
        VctxError::LaunchFailed { .. } => m.device_error,
        VctxError::InvalidHandle(_) => match what {
            Target::Stream(s) => !m.streams[s].alive,
            Target::Event(x) => !m.events[x].alive,
            Target::Device => false,
        },
        VctxError::Timeout(_) | VctxError::RuntimeLost(_) => false,
    }
}

struct VctxMachine;

impl StateMachineTest for VctxMachine {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(m: &Model) -> Sut {
        let ctx = Arc::new(VirtualContext::new(VctxId(1)));
        assert!(ctx.set_wait_assist(Box::new(|_: &[OpId]| ASSIST_DONE.with(|d| d.get()))));
        // No spin window: an assisted sync must still ask its assist before it parks (a thread
        // descheduled past the window once parked without asking, and the sync timed out).
        ctx.set_sync_spin(Duration::ZERO);
        Sut {
            streams: vec![ctx.legacy_default_stream()],
            ctx,
            events: Vec::new(),
            ops: Vec::new(),
            descs: Vec::new(),
            index: HashMap::new(),
            preds: Vec::new(),
            handed_out: BTreeSet::new(),
            reported: BTreeSet::new(),
            bg: Vec::new(),
            model: m.clone(),
        }
    }

    fn apply(mut sut: Sut, m: &Model, t: T) -> Sut {
        let ctx = Arc::clone(&sut.ctx);
        match t {
            T::CreateStream { non_blocking, priority } => {
                let kind = if non_blocking { StreamKind::NonBlocking } else { StreamKind::Blocking };
                let s = ctx.create_stream(kind, priority);
                assert!(!sut.streams.contains(&s), "stream id reused");
                assert_eq!(ctx.stream_priority(s).unwrap(), priority);
                assert_eq!(ctx.stream_kind(s).unwrap(), kind);
                sut.streams.push(s);
            }
            T::PerThread(th) => {
                let s = ctx.per_thread_default_stream(th);
                let idx = m.per_thread[&th];
                if idx == sut.streams.len() {
                    sut.streams.push(s);
                } else {
                    assert_eq!(sut.streams[idx], s);
                }
            }
            T::ReleasePerThread(th) => ctx.release_per_thread_default_stream(th),
            T::DestroyStream(s) => {
                let r = ctx.destroy_stream(sut.streams[s]);
                let model_destroyed = !m.streams[s].alive && sut.model.streams[s].alive;
                if model_destroyed {
                    r.unwrap();
                } else {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Stream(sut.streams[s])));
                }
            }
            T::RecordOp(s) => {
                let desc = Arc::new(OpDesc::Marker(Marker::Barrier));
                let r = ctx.record_op(sut.streams[s], Arc::clone(&desc));
                if m.stream_ok(s) {
                    let rec = r.unwrap();
                    let o = sut.ops.len();
                    assert_eq!(m.ops.len(), o + 1);
                    if let Some(last) = sut.ops.last() {
                        assert!(rec.op > *last, "op ids must increase");
                    }
                    let anc = &m.ops[o].anc;
                    let preds: Vec<usize> = rec.preds.iter().map(|p| sut.index[p]).collect();
                    for p in &preds {
                        assert!(anc.contains(p), "op {o}: spurious edge from {p} (not an ancestor)");
                        assert!(!m.retired(*p), "op {o}: pred {p} already satisfied");
                    }
                    // The direct predecessors must cover every unretired ancestor.
                    for a in anc.iter().filter(|a| !m.retired(**a)) {
                        let covered = preds.contains(a) || preds.iter().any(|p| m.ops[*p].anc.contains(a));
                        assert!(covered, "op {o}: ancestor {a} not covered by preds {preds:?}");
                    }
                    sut.index.insert(rec.op, o);
                    sut.ops.push(rec.op);
                    sut.descs.push(desc);
                    sut.preds.push(preds);
                } else {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Stream(sut.streams[s])));
                }
            }
            T::RecordOnUnknown => {
                let unknown = StreamId(u32::MAX - 1);
                let r = ctx.record_op(unknown, Arc::new(OpDesc::Marker(Marker::Barrier)));
                assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Stream(unknown)));
            }
            T::CreateEvent => {
                let e = ctx.create_event();
                assert!(!sut.events.contains(&e), "event id reused");
                if m.device_error {
                    assert!(ctx.event_query(e).is_err(), "the sticky error is reported for a fresh event too");
                } else {
                    assert!(ctx.event_query(e).unwrap(), "a fresh event is complete");
                }
                sut.events.push(e);
            }
            T::DestroyEvent(e) => {
                let r = ctx.destroy_event(sut.events[e]);
                if sut.model.events[e].alive {
                    r.unwrap();
                } else {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Event(sut.events[e])));
                }
            }
            T::RecordEvent(e, s) => {
                let r = ctx.record_event(sut.events[e], sut.streams[s]);
                if !m.event_ok(e) {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Event(sut.events[e])));
                } else if !m.stream_ok(s) {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Stream(sut.streams[s])));
                } else {
                    assert_eq!(r.unwrap(), m.events[e].generation);
                    assert_eq!(ctx.event_generation(sut.events[e]).unwrap(), m.events[e].generation);
                }
            }
            T::WaitEvent(s, e) => {
                let r = ctx.wait_event(sut.streams[s], sut.events[e]);
                if !m.event_ok(e) {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Event(sut.events[e])));
                } else if !m.stream_ok(s) {
                    assert_eq!(r.unwrap_err(), VctxError::InvalidHandle(Handle::Stream(sut.streams[s])));
                } else {
                    r.unwrap();
                }
            }
            T::TakeReady => {
                let mut got = Vec::new();
                ctx.take_ready(&mut got);
                for r in &got {
                    let o = sut.index[&r.op];
                    assert!(sut.handed_out.insert(o), "op {o} handed out twice");
                    assert!(m.ops[o].anc.iter().all(|a| m.completed(*a)), "(a) op {o} ready before its ancestors");
                    assert_eq!(r.stream, sut.streams[m.ops[o].stream]);
                    assert!(Arc::ptr_eq(&r.desc, &sut.descs[o]), "descriptor is not the recorded one");
                }
                let expected: BTreeSet<usize> = (0..m.ops.len()).filter(|&o| m.ops[o].taken).collect();
                assert_eq!(sut.handed_out, expected, "ready set differs from the model");
            }
            T::TakeContinuable => {
                let mut got = Vec::new();
                ctx.take_continuable(&mut got);
                let mut got_set = BTreeSet::new();
                for c in &got {
                    let o = sut.index[&c.op];
                    assert!(sut.reported.insert(o), "op {o} reported continuable twice");
                    got_set.insert(o);
                    let pending: Vec<usize> = c.pending_preds.iter().map(|p| sut.index[p]).collect();
                    let expect: Vec<usize> = sut.preds[o].iter().copied().filter(|p| !m.retired(*p)).collect();
                    assert_eq!(pending, expect, "op {o}: pending preds");
                }
                let expected: BTreeSet<usize> = (0..m.ops.len())
                    .filter(|&o| {
                        let unretired: Vec<usize> = sut.preds[o].iter().copied().filter(|p| !m.retired(*p)).collect();
                        !m.ops[o].submitted
                            && !unretired.is_empty()
                            && unretired.iter().all(|p| m.ops[*p].submitted)
                            && (got_set.contains(&o) || !sut.reported.contains(&o))
                    })
                    .collect();
                assert_eq!(got_set, expected, "continuable set differs from the model");
            }
            T::MarkSubmitted(o) => ctx.mark_submitted(sut.ops[o]),
            T::Satisfy(o) => ctx.satisfy(sut.ops[o]),
            T::Fail(o) => ctx.fail(sut.ops[o], format!("op {o} faulted")),
            T::Query(x) => sut.check_query(m, x, false),
            T::Sync(x) => sut.check_query(m, x, true),
            T::SpawnSync(x) => sut.spawn_sync(m, x),
            T::AssistSync(x) => {
                ASSIST_DONE.with(|d| d.set(true));
                let got = match x {
                    Target::Stream(s) => ctx.stream_synchronize_timeout(sut.streams[s], LONG),
                    Target::Event(e) => ctx.event_synchronize_timeout(sut.events[e], LONG),
                    Target::Device => ctx.device_synchronize_timeout(LONG),
                };
                ASSIST_DONE.with(|d| d.set(false));
                assert_eq!(got, Ok(true), "a sync whose assist saw its ops complete: {x:?}");
            }
        }
        sut.model = m.clone();
        sut
    }

    fn check_invariants(sut: &Sut, m: &Model) {
        let unretired = (0..m.ops.len()).filter(|&o| !m.retired(o)).count();
        assert_eq!(sut.ctx.outstanding(), unretired, "outstanding()");
        // The lock-free hint never misses a live op of the stream (with few streams no bucket is
        // shared, so it is exact here).
        for (s, id) in sut.streams.iter().enumerate() {
            let live = m.ops.iter().enumerate().any(|(o, op)| op.stream == s && !m.retired(o));
            assert_eq!(sut.ctx.stream_has_live_op(*id), live, "stream_has_live_op({s})");
        }
        for s in 0..m.streams.len() {
            sut.check_query(m, Target::Stream(s), false);
        }
        for e in 0..m.events.len() {
            sut.check_query(m, Target::Event(e), false);
        }
        sut.check_query(m, Target::Device, false);
        for (i, b) in sut.bg.iter().enumerate() {
            match &*b.done.lock().unwrap() {
                None => {}
                Some(Ok(())) => {
                    assert!(m.all_retired(&b.target), "background sync {i} returned before its target retired")
                }
                Some(Err(e)) => assert!(bg_error_ok(m, b.what, e), "background sync {i} failed: {e}"),
            }
        }
    }

    fn teardown(sut: Sut) {
        // (b): a dispatcher that keeps taking and completing ready ops completes everything.
        let m = sut.model;
        let mut completed: Vec<bool> = m.ops.iter().map(|o| o.completed).collect();
        let mut handed = sut.handed_out;
        // Ops already handed out or submitted (by lane continuation) complete on their own.
        for ((op, done), id) in m.ops.iter().zip(completed.iter_mut()).zip(&sut.ops) {
            if (op.submitted || op.taken) && !*done {
                *done = true;
                sut.ctx.satisfy(*id);
            }
        }
        let mut buf = Vec::new();
        loop {
            sut.ctx.take_ready(&mut buf);
            if buf.is_empty() {
                break;
            }
            for r in buf.drain(..) {
                let o = sut.index[&r.op];
                assert!(handed.insert(o), "op {o} handed out twice");
                assert!(m.ops[o].anc.iter().all(|a| completed[*a]), "(a) op {o} ready before its ancestors");
                sut.ctx.mark_submitted(r.op);
                completed[o] = true;
                sut.ctx.satisfy(r.op);
            }
        }
        assert!(completed.iter().all(|c| *c), "(b) some op never became ready: {completed:?}");
        assert_eq!(sut.ctx.outstanding(), 0);
        let deadline = Instant::now() + LONG;
        for b in sut.bg {
            while !b.handle.is_finished() {
                assert!(Instant::now() < deadline, "(b) a blocked sync was never released");
                std::thread::sleep(Duration::from_millis(1));
            }
            b.handle.join().expect("sync thread panicked");
            let r = b.done.lock().unwrap().take().expect("finished sync stored its result");
            if let Err(e) = &r {
                assert!(bg_error_ok(&m, b.what, e), "background sync failed: {e}");
            }
        }
        let r = sut.ctx.device_synchronize_timeout(LONG);
        if m.device_error {
            assert!(matches!(r, Err(VctxError::LaunchFailed { .. })));
        } else {
            assert!(r.unwrap());
        }
    }
}

prop_state_machine! {
    #![proptest_config(Config { cases: 256, max_shrink_iters: 20_000, ..Config::default() })]
    #[test]
    fn vctx_matches_the_happens_before_model(sequential 1..90 => VctxMachine);
}
