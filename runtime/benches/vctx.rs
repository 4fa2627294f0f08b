//! Cost of the token DAG's hot path: recording an op and satisfying its token.
//!
//! Each iteration is one op through the dispatcher protocol on one thread (uncontended lock),
//! each call taking the context's lock once (no batching):
//! - `record_satisfy/one_stream`: record an op on a stream whose tail already retired, take it
//!   from the ready queue, satisfy it (the minimal record + satisfy cycle).
//! - `record_satisfy/eight_streams`: 8 blocking streams round-robin, one op in flight per
//!   stream: record an op behind its stream's unsatisfied tail, satisfy that tail (which makes
//!   the new op ready), take it from the ready queue.
//! - `lifecycle/one_stream_depth32`: a lane-continuation pipeline with 32 ops in flight on one
//!   stream; each iteration records one more op (depending on the tail), takes what became ready
//!   or continuable, marks it submitted, and satisfies the oldest in-flight op (FIFO, like a
//!   lane's completions).
//! - `lifecycle/eight_streams_depth64`: the same over 8 blocking streams round-robin (64 in
//!   flight), so ready ops come from several chains.
//! - `lifecycle/eight_streams_events_legacy`: as above, plus an event record + cross-stream wait
//!   every 4 ops and a legacy-default-stream op every 16 (multi-predecessor ops).
//!
//! Every benchmark runs twice: `wall/...` measures wall-clock time (criterion's default) and
//! `cpu/...` the benchmarking thread's CPU time, which is what "per op on one core" means when
//! other processes share the machine's cores.
//!
//! Run: `cargo bench -p vitamin-runtime --bench vctx`. Target: at most 200 ns per op.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;

use criterion::measurement::Measurement;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use vitamin_hal::{Marker, OpDesc};
use vitamin_runtime::{ContinuableOp, OpId, ReadyOp, StreamId, StreamKind, VctxId, VirtualContext};

#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::ThreadCpuTime;

fn desc() -> Arc<OpDesc> {
    Arc::new(OpDesc::Marker(Marker::Barrier))
}

fn record_satisfy<M: Measurement>(c: &mut Criterion<M>, clock: &str) {
    let mut g = c.benchmark_group(format!("{clock}/record_satisfy"));
    g.throughput(Throughput::Elements(1));
    g.bench_function("one_stream", |b| {
        let ctx = VirtualContext::new(VctxId(0));
        let s = ctx.create_stream(StreamKind::Blocking, 0);
        let d = desc();
        let mut ready: Vec<ReadyOp> = Vec::with_capacity(4);
        b.iter(|| {
            let r = ctx.record_op(s, Arc::clone(&d)).unwrap();
            ctx.take_ready(&mut ready);
            for op in ready.drain(..) {
                ctx.satisfy(op.op);
            }
            black_box(r.op)
        });
        assert_eq!(ctx.outstanding(), 0);
    });
    g.bench_function("eight_streams", |b| {
        let ctx = VirtualContext::new(VctxId(0));
        let streams: Vec<StreamId> = (0..8).map(|_| ctx.create_stream(StreamKind::Blocking, 0)).collect();
        let d = desc();
        let mut ready: Vec<ReadyOp> = Vec::with_capacity(4);
        // One op in flight per stream: each new op depends on its stream's unsatisfied tail.
        let mut tails: Vec<OpId> = streams.iter().map(|s| ctx.record_op(*s, Arc::clone(&d)).unwrap().op).collect();
        ctx.take_ready(&mut ready);
        ready.clear();
        let mut k = 0;
        b.iter(|| {
            let r = ctx.record_op(streams[k], Arc::clone(&d)).unwrap();
            debug_assert_eq!(r.preds.as_slice(), &[tails[k]]);
            ctx.satisfy(tails[k]);
            ctx.take_ready(&mut ready);
            debug_assert_eq!(ready.len(), 1);
            ready.clear();
            tails[k] = r.op;
            k = (k + 1) % streams.len();
            black_box(r.op)
        });
        assert_eq!(ctx.outstanding(), streams.len());
    });
    g.finish();
}

/// One op of a pipelined dispatcher loop: record on `streams[i % n]`, bind what became ready,
/// complete the oldest bound op once `depth` are in flight.
struct Pipeline {
    ctx: VirtualContext,
    streams: Vec<StreamId>,
    events: Vec<vitamin_runtime::EventId>,
    desc: Arc<OpDesc>,
    ready: Vec<ReadyOp>,
    continuable: Vec<ContinuableOp>,
    in_flight: VecDeque<OpId>,
    depth: usize,
    i: usize,
    with_events: bool,
}

impl Pipeline {
    fn new(streams: usize, depth: usize, with_events: bool) -> Self {
        let ctx = VirtualContext::new(VctxId(0));
        let streams: Vec<StreamId> = (0..streams).map(|_| ctx.create_stream(StreamKind::Blocking, 0)).collect();
        let events = streams.iter().map(|_| ctx.create_event()).collect();
        Pipeline {
            ctx,
            streams,
            events,
            desc: desc(),
            ready: Vec::with_capacity(64),
            continuable: Vec::with_capacity(64),
            in_flight: VecDeque::with_capacity(depth + 64),
            depth,
            i: 0,
            with_events,
        }
    }

    fn step(&mut self) -> OpId {
        let n = self.streams.len();
        let k = self.i % n;
        let s = if self.with_events && self.i % 16 == 15 { StreamId::LEGACY } else { self.streams[k] };
        if self.with_events && self.i % 4 == 3 {
            self.ctx.record_event(self.events[k], self.streams[k]).unwrap();
            self.ctx.wait_event(self.streams[(k + 1) % n], self.events[k]).unwrap();
        }
        self.i += 1;
        let r = self.ctx.record_op(s, Arc::clone(&self.desc)).unwrap();
        self.ctx.take_ready(&mut self.ready);
        for op in self.ready.drain(..) {
            self.ctx.mark_submitted(op.op);
            self.in_flight.push_back(op.op);
        }
        self.ctx.take_continuable(&mut self.continuable);
        for op in self.continuable.drain(..) {
            self.ctx.mark_submitted(op.op);
            self.in_flight.push_back(op.op);
        }
        while self.in_flight.len() >= self.depth {
            let done = self.in_flight.pop_front().unwrap();
            self.ctx.satisfy(done);
        }
        r.op
    }
}

fn lifecycle<M: Measurement>(c: &mut Criterion<M>, clock: &str) {
    let mut g = c.benchmark_group(format!("{clock}/lifecycle"));
    g.throughput(Throughput::Elements(1));
    for (name, streams, depth, events) in [
        ("one_stream_depth32", 1, 32, false),
        ("eight_streams_depth64", 8, 64, false),
        ("eight_streams_events_legacy", 8, 64, true),
    ] {
        g.bench_function(name, |b| {
            let mut p = Pipeline::new(streams, depth, events);
            b.iter(|| black_box(p.step()));
            assert!(p.ctx.outstanding() <= depth + 1, "pipeline must stay bounded: {}", p.ctx.outstanding());
        });
    }
    g.finish();
}

fn wall(c: &mut Criterion) {
    record_satisfy(c, "wall");
    lifecycle(c, "wall");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    record_satisfy(c, "cpu");
    lifecycle(c, "cpu");
}

criterion_group!(wall_clock, wall);
criterion_group! {
    name = thread_cpu;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = cpu
}
criterion_main!(wall_clock, thread_cpu);
