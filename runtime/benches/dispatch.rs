//! Dispatcher overhead per op on the simulated H200 (issue 5). Target: under 1 us per op.
//!
//! One iteration records a batch of [`BATCH`] tiny kernels (the sim's `busy` kernel, 1 block of
//! 32 threads) on one vCtx and calls `Dispatcher::run_until_idle`: intake, lane continuation,
//! pick + select + validate, lease, submit, batched completion polling, token satisfaction. The
//! simulated device's virtual time is free; what is measured is host CPU time, **including the
//! simulator's own bookkeeping** (its engine scans every partition's lanes at each submission and
//! completion). Divide the reported time by [`BATCH`] for the time per op (criterion also prints
//! the throughput in ops per second).
//!
//! Shapes, each with lane continuation on (`lc_on`) and off (`lc_off`):
//! - `chain_1_stream`: every op depends on the previous one (one non-blocking stream);
//! - `spread_8_streams`: ops round-robin over 8 non-blocking streams (8 independent chains).
//!
//! Policies: `throughput` (the default) and `exclusive` (the cheapest policy: oldest op, root
//! node), to separate the policy's share. Baselines `sim_only/{leaves,root}`: the same ops
//! submitted directly on the same realized pool's partitions (8-SM leaves, as Throughput-Oriented
//! binds these kernels, or the whole-device node, as Exclusive does) with a minimal host loop
//! (submit, step, poll), no vCtx, no dispatcher: the simulator's share.
//!
//! Every benchmark runs twice: `wall/...` (criterion's default clock) and `cpu/...` (the
//! benchmarking thread's CPU time, robust to other processes sharing the cores). Before the
//! criterion runs, a breakdown is printed per configuration: pump rounds and device steps per op
//! and the share of time inside `pump` vs the simulator's `wait_for_progress`.
//!
//! Run: `cargo bench -p vitamin-runtime --bench dispatch`. Results: docs/results/dispatch-bench.md.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use vitamin_hal::sim::{SimBackend, SimPartition};
use vitamin_hal::{Backend, Dim3, Fence, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher};
use vitamin_runtime::policy::{AnyPolicy, ClientClass, PolicyKind};
use vitamin_runtime::pool::Realized;
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::{StreamId, StreamKind, VctxId, VirtualContext};

#[path = "support/cpu_time.rs"]
mod cpu_time;
use cpu_time::ThreadCpuTime;

/// Ops per iteration.
const BATCH: usize = 256;

fn tiny_kernel(sim: &SimBackend) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        sim.kernel("busy").expect("built-in kernel"),
        Dim3::x(1),
        Dim3::x(32),
        0,
        KernelArgs::pack(&[&100u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )))
}

/// A dispatcher with one client, kept across iterations (the pool is realized once).
struct Setup {
    disp: Dispatcher<SimBackend, AnyPolicy>,
    vctx: Arc<VirtualContext>,
    streams: Vec<StreamId>,
    desc: Arc<OpDesc>,
}

impl Setup {
    fn new(policy: PolicyKind, lane_continuation: bool, streams: usize) -> Self {
        let sim = SimBackend::preset("h200").unwrap();
        let desc = tiny_kernel(&sim);
        let config = DispatchConfig { lane_continuation, ..DispatchConfig::default() };
        let mut disp = Dispatcher::new(sim, policy.build(0), Profiles::new("simulated H200"), config)
            .expect("dispatcher on the simulated H200");
        let vctx = Arc::new(VirtualContext::new(VctxId(0)));
        disp.register(vctx.clone(), "bench", ClientClass::BestEffort);
        let streams = (0..streams).map(|_| vctx.create_stream(StreamKind::NonBlocking, 0)).collect();
        Setup { disp, vctx, streams, desc }
    }

    fn record_batch(&self) {
        for i in 0..BATCH {
            self.vctx.record_op(self.streams[i % self.streams.len()], Arc::clone(&self.desc)).expect("record");
        }
    }

    /// One iteration: record the batch and run it to completion.
    fn batch(&mut self) {
        self.record_batch();
        self.disp.run_until_idle().expect("run");
        debug_assert_eq!(self.vctx.outstanding(), 0);
    }

    /// The same as [`Setup::batch`] with `run_until_idle`'s loop spelled out and instrumented:
    /// (pump rounds, device steps, time in pump, time in the device wait).
    fn batch_counted(&mut self) -> (u64, u64, Duration, Duration) {
        self.record_batch();
        let (mut pumps, mut steps, mut in_pump, mut in_wait) = (0, 0, Duration::ZERO, Duration::ZERO);
        loop {
            let t = Instant::now();
            let progress = self.disp.pump().expect("pump");
            in_pump += t.elapsed();
            pumps += 1;
            if self.vctx.outstanding() == 0 && self.disp.is_idle() {
                break;
            }
            if progress == 0 {
                let t = Instant::now();
                let busy = self.disp.backend().wait_for_progress(Duration::from_micros(20)).expect("wait");
                in_wait += t.elapsed();
                steps += 1;
                assert!(busy || !self.disp.is_idle(), "stuck");
            }
        }
        (pumps, steps, in_pump, in_wait)
    }
}

/// The simulator alone: the same ops on the same realized pool, no vCtx or dispatcher. Chain
/// `c` goes to lane 0 of the `c`-th 8-SM leaf (where Throughput-Oriented puts such tiny kernels),
/// or, with `root`, to lane `c % 4` of the whole-device node (where Exclusive puts them).
struct SimOnly {
    sim: SimBackend,
    /// One (partition index, lane) per chain.
    targets: Vec<(usize, u32)>,
    /// Distinct partitions among the targets (polled after each step).
    polled: Vec<usize>,
    parts: Vec<SimPartition>,
    desc: Arc<OpDesc>,
    fences: Vec<Fence>,
}

impl SimOnly {
    fn new(chains: usize, root: bool) -> Self {
        let sim = SimBackend::preset("h200").unwrap();
        let desc = tiny_kernel(&sim);
        let lanes = DispatchConfig::default().lanes_per_node;
        let (pool, parts) = Realized::create(&sim, lanes).expect("pool").into_parts();
        let _service = sim.create_partition(&sim.topology().all_units(), 8).expect("service partition");
        let targets: Vec<(usize, u32)> = if root {
            (0..chains).map(|c| (pool.root().0 as usize, (c % lanes) as u32)).collect()
        } else {
            let leaves = pool.nodes().iter().filter(|n| n.size() == 8).map(|n| n.id.0 as usize);
            leaves.take(chains).map(|p| (p, 0)).collect()
        };
        let mut polled: Vec<usize> = targets.iter().map(|t| t.0).collect();
        polled.dedup();
        SimOnly { sim, targets, polled, parts, desc, fences: Vec::with_capacity(64) }
    }

    fn batch(&mut self) -> usize {
        for i in 0..BATCH {
            let (p, lane) = self.targets[i % self.targets.len()];
            self.parts[p].submit(lane, &self.desc).expect("submit");
        }
        let mut done = 0;
        while done < BATCH {
            self.sim.wait_for_progress(Duration::ZERO).expect("step");
            for &p in &self.polled {
                self.fences.clear();
                done += self.parts[p].poll(&mut self.fences).expect("poll");
            }
        }
        done
    }
}

const BASELINES: [(&str, bool); 2] = [("leaves", false), ("root", true)];
const SHAPES: [(&str, usize); 2] = [("chain_1_stream", 1), ("spread_8_streams", 8)];

fn breakdown() {
    eprintln!("breakdown per op ({BATCH} ops per batch, 200 batches after 20 warm-up batches):");
    for policy in [PolicyKind::Throughput, PolicyKind::Exclusive] {
        for (shape, streams) in SHAPES {
            for lc in [true, false] {
                let mut s = Setup::new(policy, lc, streams);
                for _ in 0..20 {
                    s.batch();
                }
                let before = s.disp.stats().clone();
                let (mut p, mut st, mut tp, mut tw) = (0, 0, Duration::ZERO, Duration::ZERO);
                let t = Instant::now();
                for _ in 0..200 {
                    let (a, b, c, d) = s.batch_counted();
                    (p, st, tp, tw) = (p + a, st + b, tp + c, tw + d);
                }
                let total = t.elapsed();
                let after = s.disp.stats();
                let ops = (200 * BATCH) as f64;
                assert_eq!(after.completed - before.completed, 200 * BATCH as u64, "every op completed");
                eprintln!(
                    "  {policy:<10} {shape:<16} lc_{:<3}: {:>7.0} ns/op total, {:>6.0} in pump, {:>6.0} in device wait; \
                     {:.2} pumps/op, {:.2} device steps/op; bound {:.2}/op, continued {:.2}/op",
                    if lc { "on" } else { "off" },
                    total.as_nanos() as f64 / ops,
                    tp.as_nanos() as f64 / ops,
                    tw.as_nanos() as f64 / ops,
                    p as f64 / ops,
                    st as f64 / ops,
                    (after.bound - before.bound) as f64 / ops,
                    (after.continued - before.continued) as f64 / ops,
                );
            }
        }
    }
    for (on, root) in BASELINES {
        for (shape, chains) in SHAPES {
            let mut s = SimOnly::new(chains, root);
            let t = Instant::now();
            for _ in 0..200 {
                assert_eq!(s.batch(), BATCH);
            }
            let per_op = t.elapsed().as_nanos() as f64 / (200 * BATCH) as f64;
            eprintln!("  sim_only   {shape:<16} {on:<6}: {per_op:>7.0} ns/op");
        }
    }
}

fn dispatch_benches<M: Measurement>(g: &mut BenchmarkGroup<'_, M>) {
    for policy in [PolicyKind::Throughput, PolicyKind::Exclusive] {
        for (shape, streams) in SHAPES {
            for lc in [true, false] {
                let name = format!("{policy}/{shape}/lc_{}", if lc { "on" } else { "off" });
                g.bench_function(name, |b| {
                    let mut s = Setup::new(policy, lc, streams);
                    b.iter(|| s.batch());
                    assert_eq!(s.vctx.outstanding(), 0);
                });
            }
        }
    }
    for (on, root) in BASELINES {
        for (shape, chains) in SHAPES {
            g.bench_function(format!("sim_only/{on}/{shape}"), |b| {
                let mut s = SimOnly::new(chains, root);
                b.iter(|| black_box(s.batch()));
            });
        }
    }
}

fn run<M: Measurement>(c: &mut Criterion<M>, clock: &str) {
    let mut g = c.benchmark_group(format!("{clock}/dispatch_batch{BATCH}"));
    g.throughput(Throughput::Elements(BATCH as u64));
    dispatch_benches(&mut g);
    g.finish();
}

fn main() {
    // `cargo test --benches` / `--all-targets` runs bench binaries with `--test`: keep that quick;
    // `--profile-time` (for an external profiler) runs only the selected benchmark.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list" || a == "--profile-time");
    if !quick {
        breakdown();
    }
    let mut wall = Criterion::default().configure_from_args();
    run(&mut wall, "wall");
    let mut cpu = Criterion::default().with_measurement(ThreadCpuTime).configure_from_args();
    run(&mut cpu, "cpu");
    Criterion::default().configure_from_args().final_summary();
}
