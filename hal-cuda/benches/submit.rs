//! Host cost of submitting a kernel launch through `hal-cuda` vs a raw `cuLaunchKernelEx` on the
//! same green-context stream, with the same function, grid, block and arguments.
//!
//! Needs a GPU: without one it prints `SKIPPED: ...` and measures nothing. Each timed batch holds
//! at most 2048 launches and the stream is drained between batches, outside the timed region, so
//! the numbers are the host's submission cost, not queue back-pressure.
//!
//! Two measurements: first a **paired** one (raw and hal batches alternate, the order swapping
//! every round, so clock and cache drift hit both alike; it prints the median per-call cost of each
//! and the median and 10th/90th percentiles of the per-round difference, and writes them as JSON
//! to `$VITAMIN_BENCH_JSON` when set), then the same cases as criterion benchmarks.
//!
//! Run: `cargo bench -p vitamin-hal-cuda --bench submit` (on the GPU machine: the built binary
//! with `--bench`; see bench/gpu/run_gpu_check.sh).

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use cudarc::driver::sys;
use vitamin_hal::{Backend, Dim3, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition};
use vitamin_hal_cuda::{CudaBackend, CudaPartition};

const BATCH: u64 = 2048;

/// Times `iters` calls of `launch` in batches, draining `part` between batches (untimed).
fn timed(part: &CudaPartition, iters: u64, mut launch: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(BATCH);
        let t0 = Instant::now();
        for _ in 0..n {
            launch();
        }
        total += t0.elapsed();
        part.synchronize().expect("drain");
        let mut done = Vec::new();
        part.poll(&mut done).expect("poll");
        left -= n;
    }
    total
}

/// Rounds of the paired measurement, and launches per batch.
const ROUNDS: usize = 300;
const PAIRED_BATCH: u64 = 1024;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Per-call ns of `raw` and `hal` over alternating batches; returns a JSON summary.
fn paired(part: &CudaPartition, name: &str, mut raw: impl FnMut(), mut hal: impl FnMut()) -> serde_json::Value {
    let (mut r, mut h, mut d) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS + 20 {
        let per_call = |t: Duration| t.as_secs_f64() * 1e9 / PAIRED_BATCH as f64;
        let (tr, th) = if round % 2 == 0 {
            let a = per_call(timed(part, PAIRED_BATCH, &mut raw));
            (a, per_call(timed(part, PAIRED_BATCH, &mut hal)))
        } else {
            let b = per_call(timed(part, PAIRED_BATCH, &mut hal));
            (per_call(timed(part, PAIRED_BATCH, &mut raw)), b)
        };
        if round >= 20 {
            r.push(tr);
            h.push(th);
            d.push(th - tr);
        }
    }
    for v in [&mut r, &mut h, &mut d] {
        v.sort_by(f64::total_cmp);
    }
    let (mr, mh, md) = (percentile(&r, 0.5), percentile(&h, 0.5), percentile(&d, 0.5));
    println!(
        "paired {name}: raw cuLaunchKernelEx {mr:.0} ns/call, hal submit {mh:.0} ns/call, hal - raw median {md:.0} ns \
         (p10 {:.0}, p90 {:.0}) over {ROUNDS} rounds of {PAIRED_BATCH}",
        percentile(&d, 0.1),
        percentile(&d, 0.9)
    );
    serde_json::json!({
        "kernel": name, "rounds": ROUNDS, "batch": PAIRED_BATCH,
        "raw_ns_median": mr, "hal_ns_median": mh,
        "diff_ns_median": md, "diff_ns_p10": percentile(&d, 0.1), "diff_ns_p90": percentile(&d, 0.9),
    })
}

fn bench_case(
    c: &mut Criterion,
    part: &CudaPartition,
    f: FunctionRef,
    args: KernelArgs,
    summary: &mut Vec<serde_json::Value>,
) {
    let name = f.name().to_owned();
    let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        f.clone(),
        Dim3::x(1),
        Dim3::x(32),
        0,
        args.clone(),
        LaunchAttributes::none(),
    )));
    let stream = part.raw_stream(0).expect("lane 0") as sys::CUstream;
    let bytes = args.bytes().to_vec();
    let mut ptrs: Vec<*mut c_void> =
        args.params().iter().map(|p| bytes.as_ptr().wrapping_add(p.offset as usize).cast_mut().cast()).collect();
    let cfg = sys::CUlaunchConfig {
        gridDimX: 1,
        gridDimY: 1,
        gridDimZ: 1,
        blockDimX: 32,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: stream,
        attrs: std::ptr::null_mut(),
        numAttrs: 0,
    };
    let handle = f.handle() as sys::CUfunction;
    let params = if ptrs.is_empty() { std::ptr::null_mut() } else { ptrs.as_mut_ptr() };
    let raw_launch = || {
        // SAFETY: the kernel handle, stream and parameter pointers are live for the whole
        // benchmark; the thread's current context was set by the backend.
        let r = unsafe { sys::cuLaunchKernelEx(&cfg, handle, params, std::ptr::null_mut()) };
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
    };
    let hal_launch = || {
        part.submit(0, &op).expect("submit");
    };
    summary.push(paired(part, &name, raw_launch, hal_launch));
    let mut g = c.benchmark_group(format!("launch/{name}"));
    g.sample_size(50).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    g.bench_function("raw_cuLaunchKernelEx", |b| b.iter_custom(|iters| timed(part, iters, raw_launch)));
    g.bench_function("hal_submit", |b| b.iter_custom(|iters| timed(part, iters, hal_launch)));
    g.bench_function("hal_submit_and_poll_every_64", |b| {
        b.iter_custom(|iters| {
            let mut done = Vec::with_capacity(256);
            let mut i = 0u64;
            timed(part, iters, || {
                part.submit(0, &op).expect("submit");
                i += 1;
                if i.is_multiple_of(64) {
                    done.clear();
                    part.poll(&mut done).expect("poll");
                }
            })
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    let backend = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIPPED: no CUDA GPU ({e})");
            return;
        }
    };
    let leaf = backend.topology().leaves()[0];
    let part = backend.create_partition(&leaf, 1).expect("leaf partition");
    let mut summary = Vec::new();
    let empty = backend.kernel("empty_kernel").expect("kernel library");
    bench_case(c, &part, empty, KernelArgs::empty(), &mut summary);
    let noop3 = backend.kernel("noop3").expect("kernel library");
    let args = KernelArgs::pack(&[&0u64.to_le_bytes(), &7u32.to_le_bytes(), &0u64.to_le_bytes()]);
    bench_case(c, &part, noop3, args, &mut summary);
    if let Ok(path) = std::env::var("VITAMIN_BENCH_JSON") {
        let v = serde_json::json!({ "schema": "vitamin.bench.submit.v1", "device": backend.topology().device_name(),
            "driver": backend.capabilities().driver_version_string(), "paired": summary });
        std::fs::write(&path, serde_json::to_string_pretty(&v).expect("json")).expect("write VITAMIN_BENCH_JSON");
    }
}

criterion_group!(submit, benches);
criterion_main!(submit);
