//! Diagnostic: device memory held across create/close cycles of green contexts, in several
//! variants (lanes, launches, waiting after close). Prints one line per cycle; needs a GPU.
//!
//! Run: `cargo run --release -p vitamin-hal-cuda --example gc_memory` (on the GPU machine, the
//! built binary).

use std::sync::Arc;
use std::time::Duration;

use vitamin_hal::{Backend, Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition};
use vitamin_hal_cuda::CudaBackend;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let b = match CudaBackend::new() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("SKIPPED: no CUDA GPU ({e})");
            return Ok(());
        }
    };
    let leaves = b.topology().leaves().to_vec();
    let empty = b.kernel("empty_kernel")?;
    let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        empty,
        Dim3::x(1),
        Dim3::x(32),
        0,
        KernelArgs::empty(),
        LaunchAttributes::none(),
    )));
    let mib = |x: u64| x as f64 / 1048576.0;
    let (f0, _) = b.memory_info()?;
    println!("start: free {:.0} MiB", mib(f0));
    for (name, lanes, launch, wait_ms) in [
        ("1 lane, no launch", 1usize, false, 0u64),
        ("2 lanes, no launch", 2, false, 0),
        ("2 lanes, launch+poll", 2, true, 0),
        ("2 lanes, launch+poll, 200 ms after close", 2, true, 200),
    ] {
        for cycle in 0..4 {
            let (before, _) = b.memory_info()?;
            let parts = leaves.iter().map(|l| b.create_partition(l, lanes)).collect::<Result<Vec<_>, _>>()?;
            let (live, _) = b.memory_info()?;
            if launch {
                for p in &parts {
                    let f = p.submit(0, &op)?;
                    p.wait_for(f)?;
                }
            }
            for p in parts {
                p.close()?;
            }
            std::thread::sleep(Duration::from_millis(wait_ms));
            let (after, _) = b.memory_info()?;
            println!(
                "{name:<42} cycle {cycle}: 16 contexts took {:>6.1} MiB; after close {:>6.1} MiB still held; \
                 {:>7.1} MiB held since start",
                mib(before) - mib(live),
                mib(before) - mib(after),
                mib(f0) - mib(after)
            );
        }
    }
    Ok(())
}
