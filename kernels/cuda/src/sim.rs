//! The suite on the simulated device: [`register`] adds every suite kernel to a
//! [`SimBackend`] with the [`crate::cpu`] reference as its block function, so the same
//! descriptors that run on a GPU run there (through `PhysicalPartition::submit`, on any
//! partition, blocks in a partition-dependent order).

use std::sync::Arc;

use vitamin_hal::sim::{SimBackend, SimKernel, SimMemory, SimPartition};
use vitamin_hal::{Copy, Endpoint, FunctionRef, HalError, KernelLaunch, OpDesc, PhysicalPartition};

use crate::cpu::{self, BlockLaunch, Memory};

struct SimMem<'a>(&'a mut SimMemory);

impl Memory for SimMem<'_> {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        self.0.read(addr, len).map(<[u8]>::to_vec)
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        self.0.write(addr, data)
    }
}

/// The launch's parameters as the reference reads them (8-byte values whole, 4-byte values
/// zero-extended).
fn params(k: &KernelLaunch) -> Result<Vec<u64>, String> {
    (0..k.args().params().len())
        .map(|i| match k.args().param(i).map(<[u8]>::len) {
            Some(8) => Ok(k.args().param_u64(i).unwrap_or_default()),
            Some(4) => Ok(u64::from(k.args().param_u32(i).unwrap_or_default())),
            other => Err(format!("{}: parameter {i} has {other:?} bytes", k.function().name())),
        })
        .collect()
}

fn sim_kernel(name: &'static str) -> SimKernel {
    SimKernel {
        name: name.into(),
        resident_blocks_per_unit: 8,
        // Timing is not what the suite measures on the simulator: a flat cost per block.
        block_ns: Arc::new(|_| 1_000.0),
        fixed_ns: 2_000.0,
        saturation_units: None,
        exec: Some(Arc::new(move |k, b, mem| {
            let p = params(k)?;
            let g = k.grid();
            let bl = k.block();
            let l = BlockLaunch { kernel: name, grid: [g.x, g.y, g.z], block: [bl.x, bl.y, bl.z], params: &p };
            cpu::run_block(&l, b, &mut SimMem(mem))
        })),
    }
}

/// Registers every suite kernel that `sim` does not know yet (`reduce_final` is built in, with
/// the same semantics) and returns the function references of all of them by name.
pub fn register(sim: &SimBackend) -> Vec<(&'static str, FunctionRef)> {
    crate::source::suite_kernel_names()
        .into_iter()
        .map(|name| (name, sim.kernel(name).unwrap_or_else(|| sim.register_kernel(sim_kernel(name)))))
        .collect()
}

/// Copies host bytes to device memory at `addr` through `part` (a staged copy on lane 0, the
/// path a host-to-device copy takes) and waits for it.
pub fn upload(part: &SimPartition, addr: u64, bytes: &[u8]) -> Result<(), HalError> {
    let copy = Copy::new(Endpoint::Device(addr), Endpoint::Staged(bytes.into()), bytes.len() as u64)
        .map_err(HalError::InvalidPartition)?;
    part.submit(0, &Arc::new(OpDesc::Copy(copy)))?;
    part.synchronize()?;
    let mut done = Vec::new();
    part.poll(&mut done)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{fixed, inputs, Arg, Buf, DType, Problem, SuiteKernel};
    use vitamin_hal::{Backend, Dim3, KernelArgs, LaunchAttributes, UnitSet};

    /// Runs `p` on partition `units` of the simulated H200 and returns the output bytes.
    fn run_on(sim: &SimBackend, units: UnitSet, problem: &Problem, d: DType, pl: &crate::plan::Plan) -> Vec<u8> {
        let refs: std::collections::HashMap<_, _> = register(sim).into_iter().collect();
        let x = inputs(problem, d, 5);
        let part = sim.create_partition(&units, 1).expect("partition");
        let ins: Vec<u64> = x
            .iter()
            .map(|v| {
                let a = sim.alloc(v.len() * d.size());
                upload(&part, a, &d.encode(v)).expect("upload");
                a
            })
            .collect();
        let out_bytes = problem.output_elems() * problem.output_dtype(d).size();
        let out = sim.alloc(out_bytes);
        let ws = sim.alloc(pl.workspace_bytes.max(4) as usize);
        for l in &pl.launches {
            let vals: Vec<Vec<u8>> = l
                .args
                .iter()
                .map(|a| match *a {
                    Arg::Ptr(Buf::Input(i)) => ins[i].to_le_bytes().to_vec(),
                    Arg::Ptr(Buf::Output) => out.to_le_bytes().to_vec(),
                    Arg::Ptr(Buf::Workspace) => ws.to_le_bytes().to_vec(),
                    Arg::U32(v) => v.to_le_bytes().to_vec(),
                    Arg::F32(v) => v.to_le_bytes().to_vec(),
                })
                .collect();
            let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
                refs[l.kernel].clone(),
                Dim3::new(l.grid[0], l.grid[1], l.grid[2]),
                Dim3::new(l.block[0], l.block[1], l.block[2]),
                0,
                KernelArgs::pack(&vals.iter().map(Vec::as_slice).collect::<Vec<_>>()),
                LaunchAttributes::none(),
            )));
            part.submit(0, &op).expect("submit");
        }
        part.synchronize().expect("sync");
        sim.read_bytes(out, out_bytes).expect("read")
    }

    /// The simulated device gives the host reference's bits on every partition for the fixed
    /// plan, whatever order its blocks run in.
    #[test]
    fn fixed_launches_give_the_reference_bits_on_every_partition() {
        let sim = SimBackend::preset("h200").unwrap();
        let leaves = sim.topology().leaves().to_vec();
        for k in SuiteKernel::ALL {
            let p = match k {
                SuiteKernel::Reduction => Problem::Reduction { n: 3000 },
                SuiteKernel::SplitKGemm => Problem::Gemm { m: 20, n: 18, k: 100 },
                SuiteKernel::LayerNorm => Problem::LayerNorm { rows: 6, cols: 200 },
                SuiteKernel::Gemv => Problem::Gemv { m: 30, k: 200 },
                SuiteKernel::Softmax => Problem::Softmax { rows: 6, cols: 200 },
                SuiteKernel::Attention => Problem::Attention { len: 12, dim: 8 },
            };
            let d = DType::F16;
            let pl = fixed(&p, d);
            let host = crate::cpu::run_plan(&pl, &p, d, &inputs(&p, d, 5)).expect("host run");
            for units in [leaves[0], leaves[3] | leaves[15], sim.topology().all_units()] {
                assert_eq!(run_on(&sim, units, &p, d, &pl), host, "{k} on {} units", units.len());
            }
        }
    }
}
