//! The dispatcher never violates happens-before, under every policy, with and without lane
//! continuation (issue 5, check 1).
//!
//! Random programs of several clients (one vCtx each) record kernels (the simulated `busy`
//! kernel with random grids, block shapes and costs, some cooperative), graph launches (bound to
//! one node through `Policy::select_graph`), device and host copies, fills and host functions on the legacy default stream and on blocking, non-blocking and
//! per-thread default streams, with event records and cross-stream waits, interleaved with
//! dispatcher rounds and virtual-time steps (so ops are recorded while earlier ones run) and
//! with deadline advice (so TPOT-First reserves and reclaims). Everything runs on the simulated
//! H200 through the real dispatcher, pool and policy.
//!
//! ## The reference model of H
//! Per client, each stream `s` has the set `before(s)` of ops that the next action on `s` must
//! follow, closed under happens-before (it holds every ancestor of its members):
//! - an action on the **legacy** stream first absorbs `before(b)` of every blocking stream `b`
//!   (blocking and per-thread default streams: the drivers' "the legacy stream first waits on all
//!   blocking streams", for launches, event records and waits alike);
//! - an op on a **blocking** stream follows `before(s) ∪ before(legacy)` ("then all blocking
//!   streams wait on the legacy stream"); on a **non-blocking** stream it follows `before(s)`;
//!   on the legacy stream `before(legacy)` (after absorption). The op then joins: `before(s) =
//!   preds ∪ {op}`;
//! - an event record on `s` captures, as a new generation, exactly what an op recorded there now
//!   would follow; a wait on `s` adds the generation current **at the wait** to `before(s)`
//!   (re-recording later does not retarget it; waiting on a never-recorded event does nothing).
//!
//! ## What is checked
//! - every op completed exactly once: one timeline span per op, one invocation per host
//!   function, the dispatcher's completion count, no outstanding token, no failure;
//! - physical order: each op started only after every one of its H-predecessors completed.
//!   Times are the simulated device's virtual times. The start of an op is reconstructed from the
//!   timeline by the backend's lane rule (an op starts when it is submitted or when the previous
//!   op of its lane completes, whichever is later); the completion is the dispatcher's
//!   observation, which this test's driver makes at the completion instant (it pumps after each
//!   single virtual-time step). Host functions cross-check both: each records the device clock
//!   when it runs, which must equal its span's end and its reconstructed start + 1 us;
//! - the vCtx added no edge outside H (each direct predecessor it reported is in the model's set);
//! - the dispatcher's own recorded span start equals the reconstruction;
//! - liveness: the run drains (no round after round with nothing running and nothing bound).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use proptest::prelude::*;
use vitamin_hal::sim::{SimBackend, HOST_FN_NS};
use vitamin_hal::{
    Backend, Copy, Dim3, Endpoint, Fill, GraphLaunch, HostFunction, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc,
};
use vitamin_runtime::dispatch::{DispatchConfig, DispatchStats, Dispatcher, Span, SERVICE_NODE};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::pool::PoolLayout;
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::{EventId, HolderId, OpId, StreamId, StreamKind, VctxId, VirtualContext};

// ---- the generated program ---------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SKind {
    Blocking,
    NonBlocking,
    PerThread,
}

#[derive(Debug, Clone)]
struct ClientSpec {
    /// Created streams (the legacy default stream always exists as stream index 0).
    streams: Vec<SKind>,
    events: usize,
    latency_critical: bool,
}

#[derive(Debug, Clone)]
enum Work {
    Kernel {
        grid: u32,
        threads: u32,
        block_ns: u32,
        cooperative: bool,
    },
    Copy {
        bytes: u32,
        to_host: bool,
    },
    Fill {
        count: u32,
    },
    Host,
    /// A graph launch (one op on one node; the simulated device runs it as a fixed 20 us).
    Graph,
}

/// Indices are reduced modulo the actual counts when executed, so shrinking keeps steps valid.
#[derive(Debug, Clone)]
enum Step {
    Op {
        client: usize,
        stream: usize,
        work: Work,
    },
    Record {
        client: usize,
        event: usize,
        stream: usize,
    },
    Wait {
        client: usize,
        stream: usize,
        event: usize,
    },
    /// Dispatcher rounds, each followed by one virtual-time step if nothing happened.
    Pump {
        rounds: u8,
    },
    /// Advise a client's next-step deadline, `in_us` from now.
    Advise {
        client: usize,
        in_us: u32,
    },
}

#[derive(Debug, Clone)]
struct Case {
    clients: Vec<ClientSpec>,
    steps: Vec<Step>,
    lane_continuation: bool,
    lanes_per_node: usize,
    max_continuation_depth: u32,
    seed: u64,
    /// How recorded ops are submitted besides the pump rounds.
    submit: Submit,
}

/// Submission from the recording thread, besides the dispatcher's rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Submit {
    /// Only pump rounds.
    Rounds,
    /// Inline after every recorded op (`Dispatcher::pump_submit`, the shim's `VITAMIN_INLINE`).
    Inline,
    /// Eager binding of fresh ops while recording them (`VirtualContext::record_op_eager` +
    /// `Dispatcher::submit_fresh`, the shim's default).
    Eager,
    /// Eager binding and eager continuation of ops behind submitted predecessors
    /// (`Dispatcher::submit_continued`, the shim's `VITAMIN_EAGER_CONTINUE=1`).
    EagerContinue,
    /// Launch-first eager binding of fresh kernels (`VirtualContext::record_launched_first` +
    /// `Dispatcher::launch_fresh_native` / `commit_native`, the shim's default `VITAMIN_LAUNCH_FIRST`;
    /// the simulated launch hands its descriptor over with `hal::sim::issue_native`), then
    /// eager binding for what it declines.
    LaunchFirst,
}

fn client_spec() -> impl Strategy<Value = ClientSpec> {
    let kind = prop_oneof![Just(SKind::Blocking), Just(SKind::NonBlocking), Just(SKind::PerThread)];
    (prop::collection::vec(kind, 0..=3), 0usize..=2, prop::bool::weighted(0.3))
        .prop_map(|(streams, events, latency_critical)| ClientSpec { streams, events, latency_critical })
}

fn work() -> impl Strategy<Value = Work> {
    prop_oneof![
        8 => (1u32..=300, prop::sample::select(vec![32u32, 128, 256, 1024]), 100u32..=20_000, prop::bool::weighted(0.1))
            .prop_map(|(grid, threads, block_ns, cooperative)| Work::Kernel {
                // A cooperative launch must fit co-resident on the smallest node (8 SMs x 4 blocks).
                grid: if cooperative { grid.min(32) } else { grid },
                threads,
                block_ns,
                cooperative,
            }),
        1 => (1u32..=(1 << 19), any::<bool>()).prop_map(|(bytes, to_host)| Work::Copy { bytes, to_host }),
        1 => (1u32..=4096).prop_map(|count| Work::Fill { count }),
        1 => Just(Work::Host),
        1 => Just(Work::Graph),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        12 => (0usize..8, 0usize..4, work()).prop_map(|(client, stream, work)| Step::Op { client, stream, work }),
        2 => (0usize..8, 0usize..2, 0usize..4).prop_map(|(client, event, stream)| Step::Record { client, event, stream }),
        2 => (0usize..8, 0usize..4, 0usize..2).prop_map(|(client, stream, event)| Step::Wait { client, stream, event }),
        2 => (1u8..=8).prop_map(|rounds| Step::Pump { rounds }),
        1 => (0usize..8, 1u32..=500).prop_map(|(client, in_us)| Step::Advise { client, in_us }),
    ]
}

fn case(max_clients: usize, max_steps: usize) -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(client_spec(), 1..=max_clients),
        prop::collection::vec(step(), 1..=max_steps),
        any::<bool>(),
        1usize..=4,
        prop_oneof![1u32..=4, Just(64u32)],
        any::<u64>(),
        prop_oneof![
            Just(Submit::Rounds),
            Just(Submit::Inline),
            Just(Submit::Eager),
            Just(Submit::EagerContinue),
            Just(Submit::LaunchFirst)
        ],
    )
        .prop_map(|(clients, steps, lane_continuation, lanes_per_node, max_continuation_depth, seed, submit)| {
            Case { clients, steps, lane_continuation, lanes_per_node, max_continuation_depth, seed, submit }
        })
}

// ---- the reference model of H ------------------------------------------------------------------

/// Happens-before of one client, over the test's global op indices.
#[derive(Debug)]
struct Model {
    /// Stream kinds; index 0 is the legacy default stream.
    kinds: Vec<Option<SKind>>,
    /// Per stream: what the next action on it must follow (closed under H).
    before: Vec<BTreeSet<usize>>,
    /// Per event: its current generation, if ever recorded.
    events: Vec<Option<BTreeSet<usize>>>,
}

impl Model {
    fn new(spec: &ClientSpec) -> Self {
        let kinds: Vec<Option<SKind>> = std::iter::once(None).chain(spec.streams.iter().map(|&k| Some(k))).collect();
        Model { before: vec![BTreeSet::new(); kinds.len()], kinds, events: vec![None; spec.events] }
    }

    fn syncs_with_legacy(&self, s: usize) -> bool {
        matches!(self.kinds[s], Some(SKind::Blocking | SKind::PerThread))
    }

    /// "The legacy stream first waits on all blocking streams" (any action on it).
    fn absorb_if_legacy(&mut self, s: usize) {
        if s != 0 {
            return;
        }
        let mut absorbed = std::mem::take(&mut self.before[0]);
        for b in 1..self.kinds.len() {
            if self.syncs_with_legacy(b) {
                absorbed.extend(self.before[b].iter().copied());
            }
        }
        self.before[0] = absorbed;
    }

    /// What an op recorded on `s` now must follow (after `absorb_if_legacy`).
    fn follow(&self, s: usize) -> BTreeSet<usize> {
        let mut f = self.before[s].clone();
        if self.syncs_with_legacy(s) {
            f.extend(self.before[0].iter().copied());
        }
        f
    }

    /// Records op `x` on `s`; returns its H-predecessors (all ancestors).
    fn op(&mut self, s: usize, x: usize) -> BTreeSet<usize> {
        self.absorb_if_legacy(s);
        let preds = self.follow(s);
        let mut b = preds.clone();
        b.insert(x);
        self.before[s] = b;
        preds
    }

    fn record(&mut self, e: usize, s: usize) {
        self.absorb_if_legacy(s);
        self.events[e] = Some(self.follow(s));
    }

    fn wait(&mut self, s: usize, e: usize) {
        self.absorb_if_legacy(s);
        if let Some(g) = self.events[e].clone() {
            self.before[s].extend(g);
        }
    }
}

// ---- running a case ----------------------------------------------------------------------------

/// One recorded op.
#[derive(Debug)]
struct OpRec {
    client: usize,
    id: OpId,
    stream: usize,
    label: &'static str,
    /// Its H-predecessors (global indices), from the model.
    preds: BTreeSet<usize>,
    host: bool,
}

/// What a run produced.
#[derive(Debug)]
struct Outcome {
    ops: Vec<OpRec>,
    spans: Vec<Span>,
    host_log: Vec<(usize, u64)>,
    stats: DispatchStats,
}

const BUFFER_BYTES: usize = 1 << 20;

fn kernel_desc(sim: &SimBackend, grid: u32, threads: u32, block_ns: u32, cooperative: bool) -> Arc<OpDesc> {
    let busy = sim.kernel("busy").expect("built-in kernel");
    let attrs =
        if cooperative { LaunchAttributes::new(true, None, None, Vec::new()) } else { LaunchAttributes::none() };
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        busy,
        Dim3::x(grid),
        Dim3::x(threads),
        0,
        KernelArgs::pack(&[&block_ns.to_le_bytes()]),
        attrs,
    )))
}

/// One dispatcher round; if it did nothing, one virtual-time step. Returns (progress, device busy).
fn round<P: vitamin_runtime::policy::Policy>(
    disp: &mut Dispatcher<SimBackend, P>,
    sim: &SimBackend,
) -> Result<(usize, bool), String> {
    let progress = disp.pump().map_err(|e| format!("pump failed: {e}"))?;
    if progress > 0 {
        return Ok((progress, true));
    }
    let busy = sim.wait_for_progress(Duration::ZERO).map_err(|e| format!("backend failed: {e}"))?;
    Ok((0, busy))
}

fn run_case(case: &Case, policy: PolicyKind) -> Result<Outcome, String> {
    let sim = SimBackend::preset("h200").unwrap();
    let config = DispatchConfig {
        lanes_per_node: case.lanes_per_node,
        service_lanes: 8,
        lane_continuation: case.lane_continuation,
        record_timeline: true,
        max_continuation_depth: case.max_continuation_depth,
        // Half the cases rate-limit completion polling (as the shim does): ordering must not depend on it.
        min_poll_interval_ns: if case.seed.is_multiple_of(2) { 0 } else { 5_000 },
        // A third of the cases also bound continuation by predicted backlog.
        max_continuation_ns: if case.seed.is_multiple_of(3) { 20_000 } else { u64::MAX },
        profile_phases: case.seed.is_multiple_of(5),
        // Waiting threads as pollers (the shim's wait assist) only changes when polls happen.
        waiters_poll: case.seed.is_multiple_of(7),
        // Every pool layout: the same nodes, conflicts found another way, or partitions created
        // on the dispatch path; remainders created at start-up or at first use. None may change
        // an order or an output.
        pool: [PoolLayout::Hierarchical, PoolLayout::Flat, PoolLayout::OnDemand][(case.seed % 3) as usize],
        remainders_at_start: (case.seed / 3).is_multiple_of(2),
        ..DispatchConfig::default()
    };
    let mut disp = Dispatcher::new(sim.clone(), policy.build(case.seed), Profiles::new("simulated H200"), config)
        .map_err(|e| format!("dispatcher: {e}"))?;

    struct Client {
        vctx: Arc<VirtualContext>,
        holder: HolderId,
        streams: Vec<StreamId>,
        events: Vec<EventId>,
        buffer: u64,
        model: Model,
    }
    let mut clients: Vec<Client> = Vec::new();
    for (i, spec) in case.clients.iter().enumerate() {
        let vctx = Arc::new(VirtualContext::new(VctxId(i as u32)));
        let class = if spec.latency_critical {
            ClientClass::LatencyCritical { tpot_target_ns: 200_000 }
        } else {
            ClientClass::BestEffort
        };
        let holder = disp.register(vctx.clone(), format!("client{i}"), class);
        let mut streams = vec![vctx.legacy_default_stream()];
        for (j, k) in spec.streams.iter().enumerate() {
            streams.push(match k {
                SKind::Blocking => vctx.create_stream(StreamKind::Blocking, 0),
                SKind::NonBlocking => vctx.create_stream(StreamKind::NonBlocking, -(j as i32)),
                SKind::PerThread => vctx.per_thread_default_stream(j as u64),
            });
        }
        let events = (0..spec.events).map(|_| vctx.create_event()).collect();
        clients.push(Client {
            vctx,
            holder,
            streams,
            events,
            buffer: sim.alloc(BUFFER_BYTES),
            model: Model::new(spec),
        });
    }

    let host_log: Arc<Mutex<Vec<(usize, u64)>>> = Arc::default();
    let mut ops: Vec<OpRec> = Vec::new();
    let n = clients.len();
    for st in &case.steps {
        match st {
            Step::Op { client, stream, work } => {
                let ci = client % n;
                let c = &mut clients[ci];
                let s = stream % c.streams.len();
                let x = ops.len();
                let (desc, label) = match *work {
                    Work::Kernel { grid, threads, block_ns, cooperative } => {
                        (kernel_desc(&sim, grid, threads, block_ns, cooperative), "kernel")
                    }
                    Work::Copy { bytes, to_host } => {
                        let half = (BUFFER_BYTES / 2) as u64;
                        let bytes = u64::from(bytes).min(half);
                        let (dst, src) = if to_host {
                            (Endpoint::Host(0x1000), Endpoint::Device(c.buffer))
                        } else {
                            (Endpoint::Device(c.buffer), Endpoint::Device(c.buffer + half))
                        };
                        (Arc::new(OpDesc::Copy(Copy::new(dst, src, bytes).expect("valid copy"))), "copy")
                    }
                    Work::Fill { count } => (
                        Arc::new(OpDesc::Fill(Fill::new(c.buffer, x as u32, 4, u64::from(count)).expect("valid"))),
                        "fill",
                    ),
                    Work::Graph => {
                        (Arc::new(OpDesc::Graph(GraphLaunch::new(0x6000 + x as u64, format!("graph{x}")))), "graph")
                    }
                    Work::Host => {
                        let (log, clock) = (host_log.clone(), sim.clone());
                        let f = HostFunction::new(format!("host{x}"), move || {
                            log.lock().expect("host log").push((x, clock.now_ns()));
                        });
                        (Arc::new(OpDesc::Host(f)), "host")
                    }
                };
                let preds = c.model.op(s, x);
                let launched_first = if case.submit == Submit::LaunchFirst && desc.as_kernel().is_some() {
                    let mut failure = None;
                    let r = c
                        .vctx
                        .record_launched_first(
                            c.streams[s],
                            || {
                                let d = &mut disp;
                                let mut issue = |token| vitamin_hal::sim::issue_native(token, desc.clone());
                                match d.launch_fresh_native(ci, &desc, &mut issue)? {
                                    Ok(l) => Some((desc.clone(), (d, l))),
                                    Err(e) => {
                                        failure = Some(e);
                                        None
                                    }
                                }
                            },
                            |op, d, (disp, l)| disp.commit_native(l, op, d.clone()),
                        )
                        .map_err(|e| format!("record_launched_first: {e}"))?;
                    if let Some(e) = failure {
                        return Err(format!("op {x}: the launch-first launch failed: {e}"));
                    }
                    r.map(|(rec, ())| rec)
                } else {
                    None
                };
                let recorded = if let Some(r) = launched_first {
                    if !r.preds.is_empty() {
                        return Err(format!("op {x} was launched first with live predecessors {:?}", r.preds));
                    }
                    r
                } else if matches!(case.submit, Submit::Eager | Submit::EagerContinue | Submit::LaunchFirst) {
                    let continue_too = case.submit == Submit::EagerContinue;
                    let (r, taken) = c
                        .vctx
                        .record_op_eager(c.streams[s], desc, |op, d, preds| {
                            if preds.is_empty() {
                                disp.submit_fresh(ci, op, d)
                            } else {
                                continue_too && disp.submit_continued(ci, op, d, preds)
                            }
                        })
                        .map_err(|e| format!("record_op_eager: {e}"))?;
                    // Only an op without live predecessors may be bound eagerly; one with live
                    // predecessors only continued, and only under eager continuation.
                    if taken && !r.preds.is_empty() && !continue_too {
                        return Err(format!("op {x} was submitted eagerly with live predecessors {:?}", r.preds));
                    }
                    r
                } else {
                    c.vctx.record_op(c.streams[s], desc).map_err(|e| format!("record_op: {e}"))?
                };
                // The vCtx adds no edge outside H: each direct predecessor it reports is in H.
                for p in &recorded.preds {
                    let pi = ops
                        .iter()
                        .position(|o| o.client == ci && o.id == *p)
                        .ok_or_else(|| format!("op {x}: the vCtx reported unknown predecessor {p}"))?;
                    if !preds.contains(&pi) {
                        return Err(format!("op {x}: the vCtx made op {pi} a predecessor, which H does not"));
                    }
                }
                if case.submit == Submit::Inline {
                    disp.pump_submit().map_err(|e| format!("pump_submit failed: {e}"))?;
                }
                ops.push(OpRec {
                    client: ci,
                    id: recorded.op,
                    stream: s,
                    label,
                    preds,
                    host: matches!(work, Work::Host),
                });
            }
            Step::Record { client, event, stream } => {
                let c = &mut clients[client % n];
                if c.events.is_empty() {
                    continue;
                }
                let (e, s) = (event % c.events.len(), stream % c.streams.len());
                c.model.record(e, s);
                c.vctx.record_event(c.events[e], c.streams[s]).map_err(|e| format!("record_event: {e}"))?;
            }
            Step::Wait { client, stream, event } => {
                let c = &mut clients[client % n];
                if c.events.is_empty() {
                    continue;
                }
                let (e, s) = (event % c.events.len(), stream % c.streams.len());
                c.model.wait(s, e);
                c.vctx.wait_event(c.streams[s], c.events[e]).map_err(|e| format!("wait_event: {e}"))?;
            }
            Step::Pump { rounds } => {
                for _ in 0..*rounds {
                    round(&mut disp, &sim)?;
                }
            }
            Step::Advise { client, in_us } => {
                let c = &clients[client % n];
                disp.advise_deadline(c.holder, Some(sim.now_ns() + u64::from(*in_us) * 1_000));
            }
        }
    }

    // Drain. A run that makes no progress with nothing running for many rounds is stuck.
    let mut stalled = 0;
    loop {
        let outstanding: usize = clients.iter().map(|c| c.vctx.outstanding()).sum();
        if outstanding == 0 && disp.is_idle() {
            break;
        }
        let (progress, busy) = round(&mut disp, &sim)?;
        stalled = if progress == 0 && !busy { stalled + 1 } else { 0 };
        if stalled > 1_000 {
            return Err(format!(
                "stalled: {outstanding} ops outstanding, {} in flight, nothing running, nothing bound; {:?}",
                disp.inflight(),
                disp.stats()
            ));
        }
    }
    for (i, c) in clients.iter().enumerate() {
        if let Some(e) = c.vctx.sticky_error() {
            return Err(format!("client {i} has an asynchronous error: {e}"));
        }
    }
    let spans = disp.timeline().expect("timeline recorded").spans.clone();
    let host_log = host_log.lock().expect("host log").clone();
    Ok(Outcome { ops, spans, host_log, stats: disp.stats().clone() })
}

// ---- the checks --------------------------------------------------------------------------------

fn check(case: &Case, out: &Outcome) -> Result<(), String> {
    let holder_of = |c: usize| c as u32; // clients are registered in order: holder i = client i
    let index: HashMap<(u32, u64), usize> =
        out.ops.iter().enumerate().map(|(i, o)| ((holder_of(o.client), o.id.0), i)).collect();

    // Exactly once.
    let mut span_of: Vec<Option<usize>> = vec![None; out.ops.len()];
    for (si, s) in out.spans.iter().enumerate() {
        let &i = index.get(&(s.holder, s.op)).ok_or_else(|| format!("span of an unknown op: {s:?}"))?;
        if let Some(prev) = span_of[i].replace(si) {
            return Err(format!("op {i} completed twice: {:?} and {s:?}", out.spans[prev]));
        }
    }
    if let Some(i) = span_of.iter().position(Option::is_none) {
        return Err(format!("op {i} ({:?}) never completed", out.ops[i]));
    }
    if out.stats.completed != out.ops.len() as u64 || out.stats.failed != 0 {
        return Err(format!("{} ops recorded, dispatcher stats {:?}", out.ops.len(), out.stats));
    }
    // Graph launches occupy units: each ran on a pool node (bound through `select_graph` or by lane
    // continuation), never on the service partition.
    let graphs = out.ops.iter().filter(|o| o.label == "graph").count() as u64;
    if out.stats.graphs > graphs {
        return Err(format!("{graphs} graph launches recorded, {} bound as graphs: {:?}", out.stats.graphs, out.stats));
    }
    for (x, o) in out.ops.iter().enumerate() {
        let s = &out.spans[span_of[x].expect("checked")];
        if o.label == "graph" && s.node == SERVICE_NODE {
            return Err(format!("graph launch op {x} ran on the service partition: {s:?}"));
        }
    }

    // Physical start: the lane rule over each (node, lane) in completion (= FIFO) order.
    let mut start = vec![0u64; out.spans.len()];
    let mut lane_end: HashMap<(u16, u32), (u64, u64)> = HashMap::new();
    for (si, s) in out.spans.iter().enumerate() {
        let prev = lane_end.get(&(s.node, s.lane)).copied();
        if let Some((prev_submitted, prev_end)) = prev {
            if s.submitted_ns < prev_submitted || s.end_ns < prev_end {
                return Err(format!("lane ({}, {}) completed out of submission order at {s:?}", s.node, s.lane));
            }
        }
        start[si] = s.submitted_ns.max(prev.map_or(0, |p| p.1));
        if s.end_ns < start[si] {
            return Err(format!("span ends before it starts: {s:?}"));
        }
        if s.start_ns != start[si] {
            return Err(format!(
                "the dispatcher's timeline says {s:?} started at {}, the lane rule says {}",
                s.start_ns, start[si]
            ));
        }
        lane_end.insert((s.node, s.lane), (s.submitted_ns, s.end_ns));
    }

    // Host functions ran once each, at the device time of their completion.
    let mut host_seen = vec![0u32; out.ops.len()];
    for &(x, t) in &out.host_log {
        host_seen[x] += 1;
        let s = &out.spans[span_of[x].expect("checked")];
        // Span ends are the times completions were observed. Pump rounds poll before they submit,
        // so there they are exact; inline and eager submission do not poll, so an op may be queued behind
        // one that already finished unobserved, whose span then ends late: the host function
        // still ran after its submission and before it was observed complete.
        let exact = s.end_ns == t && start[span_of[x].expect("checked")] + HOST_FN_NS as u64 == t;
        let bounded = s.submitted_ns + HOST_FN_NS as u64 <= t && t <= s.end_ns;
        if !(exact || case.submit != Submit::Rounds && bounded) {
            return Err(format!("host function of op {x} ran at {t} ns; its span says {s:?}"));
        }
    }
    for (x, o) in out.ops.iter().enumerate() {
        if o.host && host_seen[x] != 1 {
            return Err(format!("host function of op {x} ran {} times", host_seen[x]));
        }
    }

    // Happens-before: every H-predecessor completed before the op started.
    for (x, o) in out.ops.iter().enumerate() {
        let sx = span_of[x].expect("checked");
        for &y in &o.preds {
            let sy = span_of[y].expect("checked");
            if out.spans[sy].end_ns > start[sx] {
                return Err(format!(
                    "happens-before violated ({} clients, lane continuation {}): op {x} ({} on stream {} of client \
                     {}) started at {} ns on node {} lane {} (continued: {}), but its predecessor op {y} ({} on \
                     stream {}) completed at {} ns on node {} lane {}",
                    case.clients.len(),
                    case.lane_continuation,
                    o.label,
                    o.stream,
                    o.client,
                    start[sx],
                    out.spans[sx].node,
                    out.spans[sx].lane,
                    out.spans[sx].continued,
                    out.ops[y].label,
                    out.ops[y].stream,
                    out.spans[sy].end_ns,
                    out.spans[sy].node,
                    out.spans[sy].lane,
                ));
            }
        }
    }
    Ok(())
}

fn run_and_check(case: &Case, policy: PolicyKind) -> Result<Outcome, TestCaseError> {
    let out = run_case(case, policy).map_err(|e| TestCaseError::fail(format!("{policy}: {e}")))?;
    check(case, &out).map_err(|e| TestCaseError::fail(format!("{policy}: {e}")))?;
    Ok(out)
}

// ---- the properties, one per policy ------------------------------------------------------------

const CASES: u32 = 256;

macro_rules! hb_property {
    ($name:ident, $policy:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: CASES, max_shrink_iters: 2_000, ..ProptestConfig::default() })]
            #[test]
            fn $name(case in case(5, 80)) {
                run_and_check(&case, $policy)?;
            }
        }
    };
}

hb_property!(no_happens_before_violation_throughput, PolicyKind::Throughput);
hb_property!(no_happens_before_violation_tpot, PolicyKind::Tpot);
hb_property!(no_happens_before_violation_exclusive, PolicyKind::Exclusive);
hb_property!(no_happens_before_violation_static, PolicyKind::Static);
hb_property!(no_happens_before_violation_chaos, PolicyKind::Chaos);

// ---- deterministic cases -----------------------------------------------------------------------

fn kernel(block_ns: u32) -> Work {
    Work::Kernel { grid: 64, threads: 128, block_ns, cooperative: false }
}

fn single_client(streams: Vec<SKind>, events: usize) -> ClientSpec {
    ClientSpec { streams, events, latency_critical: false }
}

/// A chain of dependent kernels on one stream binds early (lane continuation) when enabled, and
/// never when disabled; both orders are correct.
#[test]
fn lane_continuation_binds_a_dependent_chain_early_only_when_enabled() {
    let steps: Vec<Step> = (0..24).map(|i| Step::Op { client: 0, stream: 1, work: kernel(1_000 + 100 * i) }).collect();
    for policy in PolicyKind::ALL {
        for lane_continuation in [true, false] {
            let case = Case {
                clients: vec![single_client(vec![SKind::NonBlocking], 0)],
                steps: steps.clone(),
                lane_continuation,
                lanes_per_node: 4,
                max_continuation_depth: 2,
                submit: Submit::Rounds,
                seed: 7,
            };
            let out = run_and_check(&case, policy).unwrap_or_else(|e| panic!("{e}"));
            let continued = out.spans.iter().filter(|s| s.continued).count() as u64;
            assert_eq!(continued, out.stats.continued, "{policy}: spans and counters disagree");
            if lane_continuation {
                // Chaos refuses continuation half the time, the others accept it.
                assert!(continued >= 4, "{policy}: only {continued} of 24 chained kernels were continued");
            } else {
                assert_eq!(continued, 0, "{policy}: lane continuation is off, yet ops were continued");
            }
        }
    }
}

/// Six pairs of kernels on one stream, each pair followed by pump rounds that drain it: the first
/// kernel of a pair is fresh when recorded, the second follows it while it runs. Run under every
/// policy, with and without lane continuation, with recording-thread submission `submit`; `check`
/// gets the policy, whether lane continuation was on, and the dispatcher's statistics.
fn run_kernel_pairs(submit: Submit, check: impl Fn(PolicyKind, bool, &DispatchStats)) {
    use Step::*;
    let op = |stream, work| Op { client: 0, stream, work };
    let mut steps = Vec::new();
    for i in 0..6 {
        steps.push(op(1, kernel(2_000 + 500 * i)));
        steps.push(op(1, kernel(1_000)));
        steps.push(Pump { rounds: 8 });
    }
    for policy in PolicyKind::ALL {
        for lane_continuation in [true, false] {
            let case = Case {
                clients: vec![single_client(vec![SKind::NonBlocking], 0)],
                steps: steps.clone(),
                lane_continuation,
                lanes_per_node: 2,
                max_continuation_depth: 64,
                submit,
                seed: 3,
            };
            let out = run_and_check(&case, policy).unwrap_or_else(|e| panic!("{policy}: {e}"));
            check(policy, lane_continuation, &out.stats);
        }
    }
}

/// Eager binding (the shim's default): a launch-sync loop's every kernel is fresh when recorded
/// (the stream drained), so the recording thread binds it; a dependent kernel recorded right
/// after one still running is not fresh and is left to the dispatcher (continued or bound later).
/// Every policy, with and without lane continuation (eager binding needs it: strict readiness
/// keeps binding in the rounds).
#[test]
fn eager_binding_takes_fresh_ops_only() {
    run_kernel_pairs(Submit::Eager, |policy, lane_continuation, stats| {
        if lane_continuation {
            // The first kernel of each pair; the second follows a live one.
            assert_eq!(stats.eager, 6, "{policy}: {stats:?}");
            assert_eq!(stats.eager_continued, 0, "{policy}: {stats:?}");
        } else {
            assert_eq!(stats.eager, 0, "{policy}: strict readiness binds in rounds only");
        }
    });
}

/// Eager continuation: the second kernel of each pair follows the first, which was bound eagerly
/// and is still running, so the recording thread continues it on that lane itself when the
/// policy agrees; never under strict readiness.
#[test]
fn eager_continuation_follows_submitted_predecessors_only() {
    run_kernel_pairs(Submit::EagerContinue, |policy, lane_continuation, stats| {
        if lane_continuation {
            assert_eq!(stats.eager, 6, "{policy}: {stats:?}");
            assert!(stats.eager_continued <= stats.continued, "{policy}: {stats:?}");
            if matches!(policy, PolicyKind::Throughput | PolicyKind::Exclusive) {
                assert_eq!(stats.eager_continued, 6, "{policy}: {stats:?}");
            }
        } else {
            assert_eq!(stats.eager + stats.eager_continued, 0, "{policy}: {stats:?}");
        }
    });
}

/// Launch-first eager binding: Throughput places each pair's fresh first kernel from its
/// memoized plan, so it is launched before it is recorded; the other policies have no direct
/// answer and bind it eagerly the usual way; never under strict readiness.
#[test]
fn launch_first_takes_fresh_kernels_the_policy_places_directly() {
    run_kernel_pairs(Submit::LaunchFirst, |policy, lane_continuation, stats| {
        if !lane_continuation {
            assert_eq!(stats.eager + stats.launched_first, 0, "{policy}: {stats:?}");
            return;
        }
        assert_eq!(stats.eager, 6, "{policy}: {stats:?}");
        if policy == PolicyKind::Throughput {
            // The first pair's kernel has no memoized plan yet: the policy plans it in a round.
            assert_eq!(stats.launched_first, 5, "{policy}: {stats:?}");
        } else {
            assert_eq!(stats.launched_first, 0, "{policy}: {stats:?}");
        }
    });
}

/// Every construct of the model at once, on a fixed program: the legacy stream between blocking
/// streams, a non-blocking stream that must not be ordered by it, an event re-recorded after a
/// wait (the wait keeps the old generation) and host functions in between.
#[test]
fn fixed_program_with_legacy_stream_events_and_host_functions() {
    use Step::*;
    let op = |stream, work| Op { client: 0, stream, work };
    let steps = vec![
        op(1, kernel(20_000)),
        op(2, kernel(5_000)),
        op(3, kernel(1_000)),
        op(0, kernel(2_000)), // legacy: after streams 1 and 2 (blocking), not 3 (non-blocking)
        op(1, Work::Host),    // after the legacy op
        Record { client: 0, event: 0, stream: 3 },
        Wait { client: 0, stream: 2, event: 0 },
        op(3, kernel(30_000)), // recorded after the event: the wait must not cover it
        Record { client: 0, event: 0, stream: 3 },
        op(2, Work::Copy { bytes: 4096, to_host: false }),
        Pump { rounds: 3 },
        op(0, Work::Fill { count: 1024 }),
        op(2, kernel(500)),
    ];
    for policy in PolicyKind::ALL {
        for lane_continuation in [true, false] {
            let case = Case {
                clients: vec![single_client(vec![SKind::Blocking, SKind::Blocking, SKind::NonBlocking], 1)],
                steps: steps.clone(),
                lane_continuation,
                lanes_per_node: 2,
                max_continuation_depth: 2,
                submit: Submit::Rounds,
                seed: 3,
            };
            let out = run_and_check(&case, policy).unwrap_or_else(|e| panic!("{e}"));
            let ops = &out.ops;
            // The model itself: the legacy op (3) follows 0 and 1 but not 2.
            assert_eq!(ops[3].preds, BTreeSet::from([0, 1]));
            // The copy (6) on stream 2 follows the first generation of the event (op 2) and the
            // legacy op, but not the kernel recorded after that generation (op 5).
            assert!(ops[6].preds.contains(&2) && ops[6].preds.contains(&3) && !ops[6].preds.contains(&5));
            // The fill on the legacy stream follows everything on blocking streams so far.
            assert_eq!(ops[7].preds, BTreeSet::from([0, 1, 2, 3, 4, 6]));
        }
    }
}

/// Regression: the timeline's start of an op on the service partition (copies, fills, host
/// functions) was computed from the previous completion of lane `lane % lanes_per_node`, so with
/// fewer lanes per node than clients one client's copy "started" when another client's ended.
#[test]
fn service_partition_spans_start_on_their_own_lane() {
    let case = Case {
        clients: vec![single_client(vec![], 0); 3],
        steps: (0..3)
            .map(|client| Step::Op { client, stream: 0, work: Work::Copy { bytes: 64, to_host: false } })
            .collect(),
        lane_continuation: true,
        lanes_per_node: 1,
        max_continuation_depth: 2,
        submit: Submit::Rounds,
        seed: 0,
    };
    let out = run_and_check(&case, PolicyKind::Throughput).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.spans.len(), 3);
    for s in &out.spans {
        assert_eq!(s.node, u16::MAX, "copies run on the service partition");
        assert_eq!(s.start_ns, 0, "{s:?}: three copies on three service lanes all start at once");
    }
}

/// Regression (was a bug): under Static, two clients each own a half of the H200 (64 or 68 SMs, room for 256 or 272 co-resident
/// `busy` blocks). A cooperative launch of 300 blocks cannot run unchanged on the client's half,
/// so every round Static proposes that half, validation rejects it, and the op stays ready for
/// ever. Now the dispatcher offers cooperative/cluster launches only nodes that can run them, and
/// Static runs such a launch on the smallest node that can (as MPS would). The same launch
/// completes under every other policy.
#[test]
fn static_policy_runs_a_cooperative_launch_larger_than_its_partition_elsewhere() {
    let case = Case {
        clients: vec![single_client(vec![], 0); 2],
        steps: vec![Step::Op {
            client: 0,
            stream: 0,
            work: Work::Kernel { grid: 300, threads: 128, block_ns: 1_000, cooperative: true },
        }],
        lane_continuation: true,
        lanes_per_node: 4,
        max_continuation_depth: 2,
        submit: Submit::Rounds,
        seed: 1,
    };
    for policy in [PolicyKind::Throughput, PolicyKind::Tpot, PolicyKind::Exclusive, PolicyKind::Chaos] {
        run_and_check(&case, policy).unwrap_or_else(|e| panic!("{e}"));
    }
    match run_case(&case, PolicyKind::Static) {
        Ok(_) => {}
        Err(e) if e.contains("asynchronous error") => {}
        Err(e) => panic!("static: {e}"),
    }
}
