//! Building blocks of simulated tenants: timing kernels with realistic scaling, and the
//! deterministic data path used to check that outputs do not depend on bindings.

use std::sync::Arc;

use vitamin_hal::sim::{SimBackend, SimKernel};
use vitamin_hal::{Dim3, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};

/// A kernel shape of a tenant: `grid` blocks of `block` threads, each block taking `block_ns` on
/// one unit at full speed.
#[derive(Debug, Clone)]
pub struct KernelShape {
    /// Function (registered on the simulated device).
    pub function: FunctionRef,
    /// Blocks.
    pub grid: u32,
    /// Threads per block.
    pub block: u32,
    /// ns per block (per wave) at full speed.
    pub block_ns: u32,
}

impl KernelShape {
    /// The launch descriptor (argument 0: `block_ns`).
    pub fn launch(&self) -> Arc<OpDesc> {
        Arc::new(OpDesc::Kernel(KernelLaunch::new(
            self.function.clone(),
            Dim3::x(self.grid),
            Dim3::x(self.block),
            0,
            KernelArgs::pack(&[&self.block_ns.to_le_bytes()]),
            LaunchAttributes::none(),
        )))
    }
}

/// Registers (once per device) a timing-only kernel whose blocks take argument 0 ns each and
/// that stops scaling past `saturation_units` (memory-bound kernels), if given.
pub fn timing_kernel(
    sim: &SimBackend,
    name: &str,
    resident_blocks_per_unit: u32,
    saturation_units: Option<u32>,
) -> FunctionRef {
    if let Some(f) = sim.kernel(name) {
        return f;
    }
    sim.register_kernel(SimKernel {
        name: name.to_owned(),
        resident_blocks_per_unit,
        block_ns: Arc::new(|k| f64::from(k.args().param_u32(0).unwrap_or(1_000))),
        fixed_ns: 3_000.0,
        saturation_units,
        exec: None,
    })
}

/// A tenant's data: `y <- a*x + y` then a block-partitioned reduction of `y` into `out[i]`, once
/// per step. The reduction's result depends on float association, so any reordering of
/// dependent ops or change of the launch structure would change the bits.
#[derive(Debug, Clone)]
pub struct DataPath {
    x: u64,
    y: u64,
    partial: u64,
    out: u64,
    n: u32,
    steps: u32,
    reduce_grid: u32,
    axpy: FunctionRef,
    partial_fn: FunctionRef,
    final_fn: FunctionRef,
}

/// Blocks of the data path's reduction.
const REDUCE_GRID: u32 = 64;

impl DataPath {
    /// Allocates and seeds buffers for `steps` steps over `n` floats.
    pub fn new(sim: &SimBackend, seed: u32, n: u32, steps: u32) -> Self {
        Self::with_reduce_grid(sim, seed, n, steps, REDUCE_GRID)
    }

    /// The same data (same `seed`, `n`, `steps`) reduced with `reduce_grid` blocks instead of
    /// the default 64: a **reshaped** variant, what vitamin itself never does. Exists so tests can
    /// show that the digest detects a change of launch structure.
    pub fn with_reduce_grid(sim: &SimBackend, seed: u32, n: u32, steps: u32, reduce_grid: u32) -> Self {
        let reduce_grid = reduce_grid.max(1);
        let mut s = 0x9e37_79b9u32 ^ seed.wrapping_mul(0x85eb_ca6b);
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        let xs: Vec<f32> = (0..n).map(|i| next() * (1 + i % 31) as f32).collect();
        let ys: Vec<f32> = (0..n).map(|_| next()).collect();
        let alloc = |v: &[f32]| {
            let a = sim.alloc(v.len() * 4);
            sim.write_f32s(a, v).expect("fresh allocation");
            a
        };
        DataPath {
            x: alloc(&xs),
            y: alloc(&ys),
            partial: sim.alloc(reduce_grid as usize * 4),
            out: sim.alloc(steps.max(1) as usize * 4),
            n,
            steps: steps.max(1),
            reduce_grid,
            axpy: sim.kernel("axpy").expect("builtin"),
            partial_fn: sim.kernel("reduce_partial").expect("builtin"),
            final_fn: sim.kernel("reduce_final").expect("builtin"),
        }
    }

    /// Blocks of this data path's reduction (64 unless built by [`DataPath::with_reduce_grid`]).
    pub fn reduce_grid(&self) -> u32 {
        self.reduce_grid
    }

    /// The ops of step `i` (in stream order).
    pub fn step_ops(&self, i: u32) -> [Arc<OpDesc>; 3] {
        let a = 1.0f32 + (i % 7) as f32 * 0.125;
        let slot = i % self.steps;
        let k = |f: &FunctionRef, grid: u32, block: u32, args: KernelArgs| {
            Arc::new(OpDesc::Kernel(KernelLaunch::new(
                f.clone(),
                Dim3::x(grid),
                Dim3::x(block),
                0,
                args,
                LaunchAttributes::none(),
            )))
        };
        [
            k(
                &self.axpy,
                32,
                128,
                KernelArgs::pack(&[
                    &a.to_le_bytes(),
                    &self.x.to_le_bytes(),
                    &self.y.to_le_bytes(),
                    &self.n.to_le_bytes(),
                ]),
            ),
            k(
                &self.partial_fn,
                self.reduce_grid,
                128,
                KernelArgs::pack(&[&self.y.to_le_bytes(), &self.n.to_le_bytes(), &self.partial.to_le_bytes()]),
            ),
            k(
                &self.final_fn,
                1,
                32,
                KernelArgs::pack(&[
                    &self.partial.to_le_bytes(),
                    &self.reduce_grid.to_le_bytes(),
                    &(self.out + 4 * u64::from(slot)).to_le_bytes(),
                ]),
            ),
        ]
    }

    /// The output bits: every step's reduction result and the final `y`, hashed (FNV-1a).
    pub fn digest(&self, sim: &SimBackend) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        let mut eat = |bytes: &[u8]| {
            for &b in bytes {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x1000_0000_01b3);
            }
        };
        eat(&sim.read_bytes(self.out, self.steps as usize * 4).expect("allocated"));
        eat(&sim.read_bytes(self.y, self.n as usize * 4).expect("allocated"));
        h
    }
}
