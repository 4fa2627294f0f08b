//! A driver-API application (cudarc) for the shim's GPU check (`bench/gpu/shim/run.sh`).
//!
//! cudarc loads libcuda with `dlopen` and resolves every driver function with `dlsym`, so under
//! `vitamin run --observe` all of its calls take the shim's `dlsym` route. The program compiles
//! two fixed-structure kernels with NVRTC, runs them on two streams ordered by events, copies
//! results back and prints deterministic checksums on stdout (timings go to stderr), so a run with
//! the shim can be compared byte for byte with a run without it. It also makes one invalid launch
//! (2048 threads per block) and prints the driver's error code.
//!
//! Build here (`cargo build --release -p vitamin-shim-cuda --example cudarc_app`), run on the GPU
//! machine. Without a GPU it exits with status 2 and says why.

use cudarc::driver::{sys, CudaContext, DriverError, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::compile_ptx;

const SRC: &str = r#"
extern "C" __global__ void saxpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
// Fixed structure: 256 threads per block, one partial sum per block, tree order fixed.
extern "C" __global__ void block_sum(float *out, const float *x, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int w = 128; w > 0; w >>= 1) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}
"#;

fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // SAFETY: only tries to dlopen libcuda; no other precondition.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("cudarc_app: no libcuda on this machine; nothing to run");
        std::process::exit(2);
    }
    let ctx = CudaContext::new(0)?;
    let ptx = compile_ptx(SRC)?;
    let module = ctx.load_module(ptx)?;
    let saxpy = module.load_function("saxpy")?;
    let block_sum = module.load_function("block_sum")?;

    let n: i32 = 1 << 20;
    let blocks = (n as u32).div_ceil(256);
    let x_host: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32) * 0.001 - 0.5).collect();
    let y_host: Vec<f32> = (0..n).map(|i| ((i % 777) as f32) * 0.002).collect();

    let s1 = ctx.default_stream();
    let s2 = s1.fork()?;
    let x = s1.clone_htod(&x_host)?;
    let mut y = s2.clone_htod(&y_host)?;
    let mut partial = s2.alloc_zeros::<f32>(blocks as usize)?;
    let start = s2.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    s2.join(&s1)?; // s2 waits for the copy of x on s1 (event record + wait)
    let cfg = LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    for round in 0..10 {
        let a = 0.5f32 + round as f32 * 0.125;
        let mut b = s2.launch_builder(&saxpy);
        b.arg(&mut y).arg(&x).arg(&a).arg(&n);
        // SAFETY: y and x hold n floats; the kernel reads/writes indices < n only.
        unsafe { b.launch(cfg) }?;
    }
    let mut b = s2.launch_builder(&block_sum);
    b.arg(&mut partial).arg(&y).arg(&n);
    // SAFETY: partial holds `blocks` floats, y holds n floats.
    unsafe { b.launch(cfg) }?;
    let end = s2.record_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    s1.join(&s2)?;
    let y_out = s1.clone_dtoh(&y)?;
    let partial_out = s1.clone_dtoh(&partial)?;
    s1.synchronize()?;
    let ms = start.elapsed_ms(&end)?;

    let sum: f64 = partial_out.iter().map(|&v| v as f64).sum();
    println!("y_fnv1a={:016x}", fnv1a(y_out.iter().flat_map(|v| v.to_le_bytes())));
    println!("partial_fnv1a={:016x}", fnv1a(partial_out.iter().flat_map(|v| v.to_le_bytes())));
    println!("sum={sum:.6}");

    // Invalid launch: 2048 threads per block exceeds the device limit (1024).
    let bad = LaunchConfig { grid_dim: (1, 1, 1), block_dim: (2048, 1, 1), shared_mem_bytes: 0 };
    let mut b = s1.launch_builder(&saxpy);
    b.arg(&mut y).arg(&x).arg(&1.0f32).arg(&n);
    // SAFETY: never executes (the driver rejects the configuration).
    let err = unsafe { b.launch(bad) }.err().map(|e: DriverError| e.0 as i32);
    println!("invalid_launch_error={}", err.map_or("none".to_string(), |c| c.to_string()));
    eprintln!("cudarc_app: 11 launches in {ms:.3} ms");
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("cudarc_app: {e}");
        std::process::exit(1);
    }
}
