//! Host cost of submitting a kernel launch through `hal-cuda` vs a raw `cuLaunchKernelEx` on the
//! same green-context stream, with the same function, grid, block and arguments.
//!
//! Needs a GPU: without one it prints `SKIPPED: ...` and measures nothing. Each timed batch holds
//! at most 2048 launches and the stream is drained between batches, outside the timed region, so
//! the numbers are the host's submission cost, not queue back-pressure.
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

fn bench_case(c: &mut Criterion, part: &CudaPartition, f: FunctionRef, args: KernelArgs) {
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
    let mut g = c.benchmark_group(format!("launch/{name}"));
    g.sample_size(50).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    g.bench_function("raw_cuLaunchKernelEx", |b| {
        b.iter_custom(|iters| {
            timed(part, iters, || {
                // SAFETY: the kernel handle, stream and parameter pointers are live for the whole
                // benchmark; the thread's current context was set by the backend.
                let r = unsafe { sys::cuLaunchKernelEx(&cfg, handle, params, std::ptr::null_mut()) };
                assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
            })
        })
    });
    g.bench_function("hal_submit", |b| {
        b.iter_custom(|iters| {
            timed(part, iters, || {
                part.submit(0, &op).expect("submit");
            })
        })
    });
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
    let empty = backend.kernel("empty_kernel").expect("kernel library");
    bench_case(c, &part, empty, KernelArgs::empty());
    let noop3 = backend.kernel("noop3").expect("kernel library");
    let args = KernelArgs::pack(&[&0u64.to_le_bytes(), &7u32.to_le_bytes(), &0u64.to_le_bytes()]);
    bench_case(c, &part, noop3, args);
}

criterion_group!(submit, benches);
criterion_main!(submit);
