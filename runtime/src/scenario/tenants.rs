//! Simulated tenants: programs that record ops on their vCtx over virtual time.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Copy, Endpoint, OpDesc};

use super::trace::TraceRequest;
use super::workload::{DataPath, KernelShape};
use crate::policy::ClientClass;
use crate::vctx::{EventId, StreamId, StreamKind, VirtualContext};

/// What a tenant sees when it runs.
#[derive(Debug)]
pub struct TenantCtx<'a> {
    /// Now, ns.
    pub now: u64,
    /// The tenant's virtual context.
    pub vctx: &'a VirtualContext,
    /// The simulated device (memory set-up and read-back).
    pub sim: &'a SimBackend,
    /// Set to advise the dispatcher of the next step's deadline.
    pub advise_deadline: Option<Option<u64>>,
}

/// Per-tenant results.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TenantMetrics {
    /// Tenant name.
    pub name: String,
    /// Completed iterations / requests.
    pub completed: u64,
    /// Latencies (requests), ns.
    #[serde(skip)]
    pub latencies_ns: Vec<u64>,
    /// Time per output token per request, ns (serving decode).
    #[serde(skip)]
    pub tpot_ns: Vec<u64>,
    /// Time to first token per request, ns (serving).
    #[serde(skip)]
    pub ttft_ns: Vec<u64>,
    /// Digest of the tenant's output data, if it has a data path.
    pub output_digest: Option<u64>,
}

/// A simulated program.
pub trait Tenant {
    /// Name.
    fn name(&self) -> &str;
    /// Scheduling class.
    fn class(&self) -> ClientClass;
    /// Runs at `ctx.now`: records ops, observes completions. Returns the next time it must run
    /// again regardless of completions (None: only when work completes).
    fn step(&mut self, ctx: &mut TenantCtx<'_>) -> Option<u64>;
    /// Whether it has finished (and all its work completed).
    fn done(&self) -> bool;
    /// Results so far.
    fn metrics(&self, sim: &SimBackend) -> TenantMetrics;
    /// The recurring launch configurations this tenant submits (what a profiling pass measures).
    fn kernel_shapes(&self) -> Vec<KernelShape>;
}

fn stream(ctx: &TenantCtx<'_>, s: &mut Option<StreamId>) -> StreamId {
    *s.get_or_insert_with(|| ctx.vctx.create_stream(StreamKind::NonBlocking, 0))
}

fn record(ctx: &TenantCtx<'_>, s: StreamId, op: Arc<OpDesc>) {
    ctx.vctx.record_op(s, op).expect("recording on the tenant's own stream");
}

/// A training-like tenant: iterations of kernels followed by an idle gap (communication or
/// offload), until a time or an iteration count.
#[derive(Debug)]
pub struct Training {
    name: String,
    kernels: Vec<KernelShape>,
    gap_ns: u64,
    until_ns: Option<u64>,
    max_iters: Option<u32>,
    data: Option<DataPath>,
    stream: Option<StreamId>,
    running: bool,
    wake_at: u64,
    iters: u32,
    finished: bool,
}

impl Training {
    /// A training tenant.
    pub fn new(name: impl Into<String>, kernels: Vec<KernelShape>, gap_ns: u64, start_ns: u64) -> Self {
        Training {
            name: name.into(),
            kernels,
            gap_ns,
            until_ns: None,
            max_iters: None,
            data: None,
            stream: None,
            running: false,
            wake_at: start_ns,
            iters: 0,
            finished: false,
        }
    }
    /// Stop starting iterations at `t`.
    pub fn until(mut self, t: u64) -> Self {
        self.until_ns = Some(t);
        self
    }
    /// Stop after `n` iterations.
    pub fn iterations(mut self, n: u32) -> Self {
        self.max_iters = Some(n);
        self
    }
    /// Run a data path (deterministic output) in every iteration.
    pub fn with_data(mut self, d: DataPath) -> Self {
        self.data = Some(d);
        self
    }
}

impl Tenant for Training {
    fn name(&self) -> &str {
        &self.name
    }
    fn class(&self) -> ClientClass {
        ClientClass::BestEffort
    }
    fn step(&mut self, ctx: &mut TenantCtx<'_>) -> Option<u64> {
        if self.finished {
            return None;
        }
        let s = stream(ctx, &mut self.stream);
        if self.running {
            if !ctx.vctx.stream_query(s).expect("own stream") {
                return None;
            }
            self.running = false;
            self.iters += 1;
            self.wake_at = ctx.now + self.gap_ns;
        }
        let out_of_time = self.until_ns.is_some_and(|t| self.wake_at >= t);
        let out_of_iters = self.max_iters.is_some_and(|n| self.iters >= n);
        if out_of_time || out_of_iters {
            self.finished = true;
            return None;
        }
        if ctx.now < self.wake_at {
            return Some(self.wake_at);
        }
        for k in &self.kernels {
            record(ctx, s, k.launch());
        }
        if let Some(d) = &self.data {
            for op in d.step_ops(self.iters) {
                record(ctx, s, op);
            }
        }
        self.running = true;
        None
    }
    fn done(&self) -> bool {
        self.finished
    }
    fn metrics(&self, sim: &SimBackend) -> TenantMetrics {
        TenantMetrics {
            name: self.name.clone(),
            completed: u64::from(self.iters),
            output_digest: self.data.as_ref().map(|d| d.digest(sim)),
            ..Default::default()
        }
    }
    fn kernel_shapes(&self) -> Vec<KernelShape> {
        self.kernels.clone()
    }
}

/// A latency-critical inference tenant: requests arrive as a Poisson process; each request is a
/// fixed sequence of kernels; latency = completion observed - arrival.
#[derive(Debug)]
pub struct Inference {
    name: String,
    kernels: Vec<KernelShape>,
    mean_gap_ns: f64,
    until_ns: u64,
    target_ns: u64,
    rng: ChaCha8Rng,
    next_arrival: u64,
    pending: VecDeque<(u64, EventId)>,
    stream: Option<StreamId>,
    latencies: Vec<u64>,
}

impl Inference {
    /// Requests with exponential inter-arrival times of mean `mean_gap_ns`, until `until_ns`.
    pub fn new(name: impl Into<String>, kernels: Vec<KernelShape>, mean_gap_ns: f64, until_ns: u64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let first = exp_sample(&mut rng, mean_gap_ns);
        Inference {
            name: name.into(),
            kernels,
            mean_gap_ns,
            until_ns,
            target_ns: 0,
            rng,
            next_arrival: first,
            pending: VecDeque::new(),
            stream: None,
            latencies: Vec::new(),
        }
    }
    /// Latency target used by TPOT-First as a per-request deadline budget.
    pub fn target(mut self, ns: u64) -> Self {
        self.target_ns = ns;
        self
    }
}

fn exp_sample(rng: &mut ChaCha8Rng, mean: f64) -> u64 {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    (-u.ln() * mean) as u64
}

impl Tenant for Inference {
    fn name(&self) -> &str {
        &self.name
    }
    fn class(&self) -> ClientClass {
        ClientClass::LatencyCritical { tpot_target_ns: self.target_ns.max(1) }
    }
    fn step(&mut self, ctx: &mut TenantCtx<'_>) -> Option<u64> {
        let s = stream(ctx, &mut self.stream);
        while let Some(&(arrival, e)) = self.pending.front() {
            if !ctx.vctx.event_query(e).expect("own event") {
                break;
            }
            self.latencies.push(ctx.now - arrival);
            ctx.vctx.destroy_event(e).expect("own event");
            self.pending.pop_front();
        }
        while self.next_arrival <= ctx.now && self.next_arrival < self.until_ns {
            if self.pending.is_empty() {
                ctx.advise_deadline = Some(Some(self.next_arrival + self.target_ns));
            }
            for k in &self.kernels {
                record(ctx, s, k.launch());
            }
            let e = ctx.vctx.create_event();
            ctx.vctx.record_event(e, s).expect("own event");
            self.pending.push_back((self.next_arrival, e));
            self.next_arrival += exp_sample(&mut self.rng, self.mean_gap_ns).max(1);
        }
        (self.next_arrival < self.until_ns).then_some(self.next_arrival)
    }
    fn done(&self) -> bool {
        self.next_arrival >= self.until_ns && self.pending.is_empty()
    }
    fn metrics(&self, _sim: &SimBackend) -> TenantMetrics {
        TenantMetrics {
            name: self.name.clone(),
            completed: self.latencies.len() as u64,
            latencies_ns: self.latencies.clone(),
            ..Default::default()
        }
    }
    fn kernel_shapes(&self) -> Vec<KernelShape> {
        self.kernels.clone()
    }
}

/// State shared by the prefill and decode halves of a serving instance.
#[derive(Debug, Default)]
pub struct Serving {
    reqs: Vec<TraceRequest>,
    next: usize,
    prefill_queue: VecDeque<usize>,
    decode_ready: VecDeque<usize>,
    first_token: Vec<Option<u64>>,
    last_token: Vec<Option<u64>>,
    tokens: Vec<u32>,
    finished: usize,
}

impl Serving {
    /// Shared state over a list of trace requests.
    pub fn new(reqs: Vec<TraceRequest>) -> Rc<RefCell<Serving>> {
        let n = reqs.len();
        Rc::new(RefCell::new(Serving {
            reqs,
            first_token: vec![None; n],
            last_token: vec![None; n],
            tokens: vec![0; n],
            ..Default::default()
        }))
    }
    fn all_done(&self) -> bool {
        self.finished == self.reqs.len()
    }
}

/// The prefill half: one prompt at a time, kernel grid proportional to the prompt length.
#[derive(Debug)]
pub struct Prefill {
    state: Rc<RefCell<Serving>>,
    shape: KernelShape,
    stream: Option<StreamId>,
    running: Option<(usize, EventId)>,
}

impl Prefill {
    /// The prefill tenant; `shape.grid` is scaled by the prompt length / 64.
    pub fn new(state: Rc<RefCell<Serving>>, shape: KernelShape) -> Self {
        Prefill { state, shape, stream: None, running: None }
    }
}

impl Tenant for Prefill {
    fn name(&self) -> &str {
        "prefill"
    }
    fn class(&self) -> ClientClass {
        ClientClass::BestEffort
    }
    fn step(&mut self, ctx: &mut TenantCtx<'_>) -> Option<u64> {
        let s = stream(ctx, &mut self.stream);
        let mut st = self.state.borrow_mut();
        while st.next < st.reqs.len() && st.reqs[st.next].arrival_ns <= ctx.now {
            let i = st.next;
            st.prefill_queue.push_back(i);
            st.next += 1;
        }
        if let Some((r, e)) = self.running {
            if ctx.vctx.event_query(e).expect("own event") {
                ctx.vctx.destroy_event(e).expect("own event");
                st.decode_ready.push_back(r);
                self.running = None;
            }
        }
        if self.running.is_none() {
            if let Some(r) = st.prefill_queue.pop_front() {
                let mut k = self.shape.clone();
                k.grid = (k.grid * st.reqs[r].prompt_tokens.div_ceil(64)).clamp(8, 8192);
                record(ctx, s, k.launch());
                let e = ctx.vctx.create_event();
                ctx.vctx.record_event(e, s).expect("own event");
                self.running = Some((r, e));
            }
        }
        st.reqs.get(st.next).map(|r| r.arrival_ns)
    }
    fn done(&self) -> bool {
        let st = self.state.borrow();
        st.next == st.reqs.len() && st.prefill_queue.is_empty() && self.running.is_none()
    }
    fn metrics(&self, _sim: &SimBackend) -> TenantMetrics {
        let st = self.state.borrow();
        let ttft = (0..st.reqs.len()).filter_map(|i| Some(st.first_token[i]? - st.reqs[i].arrival_ns)).collect();
        TenantMetrics { name: "prefill".into(), completed: st.next as u64, ttft_ns: ttft, ..Default::default() }
    }
    fn kernel_shapes(&self) -> Vec<KernelShape> {
        (0..8).map(|i| KernelShape { grid: (self.shape.grid << i).clamp(8, 8192), ..self.shape.clone() }).collect()
    }
}

/// The decode half: continuous batching. Each iteration copies the KV of newly joined requests
/// (a copy recorded before the decode kernel: the lookahead pattern) and runs one decode kernel
/// whose grid grows with the batch; every request in the batch gains a token.
#[derive(Debug)]
pub struct Decode {
    state: Rc<RefCell<Serving>>,
    shape: KernelShape,
    tpot_target_ns: u64,
    max_batch: usize,
    kv_buffer: Option<u64>,
    stream: Option<StreamId>,
    batch: Vec<usize>,
    running: bool,
}

/// KV bytes per prompt token moved by the simulated KV transfer.
pub const KV_BYTES_PER_TOKEN: u64 = 2 << 10;

impl Decode {
    /// The decode tenant.
    pub fn new(state: Rc<RefCell<Serving>>, shape: KernelShape, tpot_target_ns: u64, max_batch: usize) -> Self {
        Decode {
            state,
            shape,
            tpot_target_ns,
            max_batch,
            kv_buffer: None,
            stream: None,
            batch: Vec::new(),
            running: false,
        }
    }
}

impl Tenant for Decode {
    fn name(&self) -> &str {
        "decode"
    }
    fn class(&self) -> ClientClass {
        ClientClass::LatencyCritical { tpot_target_ns: self.tpot_target_ns }
    }
    fn step(&mut self, ctx: &mut TenantCtx<'_>) -> Option<u64> {
        let s = stream(ctx, &mut self.stream);
        let kv = *self.kv_buffer.get_or_insert_with(|| ctx.sim.alloc(4096));
        let mut st = self.state.borrow_mut();
        if self.running {
            if !ctx.vctx.stream_query(s).expect("own stream") {
                return None;
            }
            self.running = false;
            let now = ctx.now;
            for &r in &self.batch {
                st.tokens[r] += 1;
                st.first_token[r].get_or_insert(now);
                st.last_token[r] = Some(now);
            }
            let before = self.batch.len();
            let tokens = &st.tokens;
            let reqs = &st.reqs;
            self.batch.retain(|&r| tokens[r] < reqs[r].output_tokens.max(1));
            st.finished += before - self.batch.len();
            ctx.advise_deadline = Some(Some(now + self.tpot_target_ns));
        }
        let mut joined_tokens = 0u64;
        while self.batch.len() < self.max_batch {
            let Some(r) = st.decode_ready.pop_front() else { break };
            joined_tokens += u64::from(st.reqs[r].prompt_tokens);
            self.batch.push(r);
        }
        if self.batch.is_empty() {
            ctx.advise_deadline = Some(None);
            return None;
        }
        if joined_tokens > 0 {
            // KV transfer of the joined prompts (timing only: host side is not dereferenced).
            let copy = Copy::new(Endpoint::Device(kv), Endpoint::Host(0x1000), joined_tokens * KV_BYTES_PER_TOKEN)
                .expect("valid copy");
            record(ctx, s, Arc::new(OpDesc::Copy(copy)));
        }
        let mut k = self.shape.clone();
        k.grid += 2 * self.batch.len() as u32;
        record(ctx, s, k.launch());
        self.running = true;
        None
    }
    fn done(&self) -> bool {
        self.state.borrow().all_done()
    }
    fn metrics(&self, _sim: &SimBackend) -> TenantMetrics {
        let st = self.state.borrow();
        let tpot = (0..st.reqs.len())
            .filter_map(|i| {
                let (f, l) = (st.first_token[i]?, st.last_token[i]?);
                (st.tokens[i] > 1).then(|| (l - f) / u64::from(st.tokens[i] - 1))
            })
            .collect();
        TenantMetrics { name: "decode".into(), completed: st.finished as u64, tpot_ns: tpot, ..Default::default() }
    }
    fn kernel_shapes(&self) -> Vec<KernelShape> {
        (0..=6).map(|i| KernelShape { grid: self.shape.grid + 2 * (1 << i), ..self.shape.clone() }).collect()
    }
}
