//! Kernels of the simulated device: a cost model per kernel and, optionally, a CPU reference
//! implementation with a fixed block structure.

use std::fmt;
use std::sync::Arc;

use super::memory::SimMemory;
use crate::op::KernelLaunch;

/// Per-block CPU implementation: `(launch, linear block index, memory)`.
pub type BlockFn = Arc<dyn Fn(&KernelLaunch, u64, &mut SimMemory) -> Result<(), String> + Send + Sync>;
/// Nanoseconds one block takes on one unit at full speed, from the launch (its arguments).
pub type CostFn = Arc<dyn Fn(&KernelLaunch) -> f64 + Send + Sync>;

/// A kernel the simulated device knows.
#[derive(Clone)]
pub struct SimKernel {
    /// Kernel name (becomes the `FunctionRef` name).
    pub name: String,
    /// Blocks of this kernel one unit holds at once (occupancy).
    pub resident_blocks_per_unit: u32,
    /// Time one wave of blocks takes, in ns at full speed.
    pub block_ns: CostFn,
    /// Launch latency that does not scale with units, in ns.
    pub fixed_ns: f64,
    /// Units beyond which the kernel stops speeding up (a memory-bandwidth-bound kernel
    /// saturates HBM with a fraction of the SMs): on `m` units it runs as on
    /// `min(m, saturation_units)`. `None`: scales with every unit.
    pub saturation_units: Option<u32>,
    /// CPU implementation run block by block when the launch completes; `None` = timing only.
    pub exec: Option<BlockFn>,
}

impl fmt::Debug for SimKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimKernel")
            .field("name", &self.name)
            .field("resident_blocks_per_unit", &self.resident_blocks_per_unit)
            .field("fixed_ns", &self.fixed_ns)
            .field("saturation_units", &self.saturation_units)
            .field("exec", &self.exec.is_some())
            .finish()
    }
}

fn arg_u64(k: &KernelLaunch, i: usize) -> Result<u64, String> {
    k.args().param_u64(i).ok_or_else(|| format!("{}: parameter {i} is not 8 bytes", k.function().name()))
}
fn arg_u32(k: &KernelLaunch, i: usize) -> Result<u32, String> {
    k.args().param_u32(i).ok_or_else(|| format!("{}: parameter {i} is not 4 bytes", k.function().name()))
}

/// `reduce_partial(const float* x, u32 n, float* partial)`: block `b` of `G` blocks with `T`
/// threads; thread `t` sums `x[i]` for `i = b*T + t, +G*T, ...` in order, then the block combines
/// its threads by the usual shared-memory tree (`s[t] += s[t+k]`, `k = T/2 .. 1`) and writes
/// `partial[b]`. The same structure as the device kernel of the test-kernel crates, so the bits match too.
fn reduce_partial() -> SimKernel {
    SimKernel {
        name: "reduce_partial".into(),
        resident_blocks_per_unit: 8,
        block_ns: Arc::new(|k| {
            let threads = (k.blocks() * k.block().volume()).max(1) as f64;
            let n = f64::from(k.args().param_u32(1).unwrap_or(0));
            200.0 + 2.0 * (n / threads).ceil()
        }),
        fixed_ns: 2_000.0,
        saturation_units: None,
        exec: Some(Arc::new(|k, b, mem| {
            let (x, n, partial) = (arg_u64(k, 0)?, arg_u32(k, 1)? as u64, arg_u64(k, 2)?);
            let t = k.block().volume();
            if !t.is_power_of_two() {
                return Err(format!("reduce_partial needs a power-of-two block, got {}", t));
            }
            let stride = k.blocks() * t;
            let mut s = vec![0f32; t as usize];
            for (ti, acc) in s.iter_mut().enumerate() {
                let mut i = b * t + ti as u64;
                while i < n {
                    *acc += f32::from_le_bytes(mem.read(x + 4 * i, 4)?.try_into().expect("4 bytes"));
                    i += stride;
                }
            }
            let mut half = t as usize / 2;
            while half > 0 {
                for ti in 0..half {
                    s[ti] += s[ti + half];
                }
                half /= 2;
            }
            mem.write_f32s(partial + 4 * b, &s[..1])
        })),
    }
}

/// `reduce_final(const float* partial, u32 m, float* out)`: one thread sums `partial[0..m]` in
/// block order into `*out`.
fn reduce_final() -> SimKernel {
    SimKernel {
        name: "reduce_final".into(),
        resident_blocks_per_unit: 8,
        block_ns: Arc::new(|k| 100.0 + 2.0 * f64::from(k.args().param_u32(1).unwrap_or(0))),
        fixed_ns: 2_000.0,
        saturation_units: None,
        exec: Some(Arc::new(|k, b, mem| {
            if b != 0 {
                return Ok(());
            }
            let (p, m, out) = (arg_u64(k, 0)?, arg_u32(k, 1)? as usize, arg_u64(k, 2)?);
            let sum = mem.read_f32s(p, m)?.iter().fold(0f32, |a, v| a + v);
            mem.write_f32s(out, &[sum])
        })),
    }
}

/// `busy(u32 block_ns)`: a compute-only kernel whose blocks take `block_ns` each; no memory effect.
/// Workload generators use it for phases of known cost.
fn busy() -> SimKernel {
    SimKernel {
        name: "busy".into(),
        resident_blocks_per_unit: 4,
        block_ns: Arc::new(|k| f64::from(k.args().param_u32(0).unwrap_or(1_000))),
        fixed_ns: 2_000.0,
        saturation_units: None,
        exec: None,
    }
}

/// `axpy(float a, const float* x, float* y, u32 n)`: `y[i] = a*x[i] + y[i]`, grid-stride.
fn axpy() -> SimKernel {
    SimKernel {
        name: "axpy".into(),
        resident_blocks_per_unit: 8,
        block_ns: Arc::new(|k| {
            let threads = (k.blocks() * k.block().volume()).max(1) as f64;
            100.0 + 3.0 * (f64::from(k.args().param_u32(3).unwrap_or(0)) / threads).ceil()
        }),
        fixed_ns: 2_000.0,
        saturation_units: None,
        exec: Some(Arc::new(|k, b, mem| {
            let a = k.args().param_f32(0).ok_or("axpy: parameter 0 is not a float")?;
            let (x, y, n) = (arg_u64(k, 1)?, arg_u64(k, 2)?, arg_u32(k, 3)? as u64);
            let t = k.block().volume();
            let stride = k.blocks() * t;
            for ti in 0..t {
                let mut i = b * t + ti;
                while i < n {
                    let xv = mem.read_f32s(x + 4 * i, 1)?[0];
                    let yv = mem.read_f32s(y + 4 * i, 1)?[0];
                    mem.write_f32s(y + 4 * i, &[a * xv + yv])?;
                    i += stride;
                }
            }
            Ok(())
        })),
    }
}

/// The kernels every simulated device starts with.
pub fn builtin() -> Vec<SimKernel> {
    vec![reduce_partial(), reduce_final(), busy(), axpy()]
}
