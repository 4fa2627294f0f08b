//! The CPU reference: every suite kernel computed block by block with the **same** structure as
//! the device code (same per-thread strides, same shared-memory trees, same split-K chunks, same
//! in-order loops), in FP32, each operation rounded as written in the source (no contraction).
//!
//! It is the simulated device's stand-in for a second vendor: [`crate::sim`] registers it with
//! `vitamin_hal::sim`, whose partitions run the blocks in a partition-dependent order. Where it
//! matches a GPU bit for bit and where it cannot (FMA contraction, `expf`) is in
//! `docs/determinism.md`: in short, `+ - * /` and `sqrt` are correctly rounded everywhere (without
//! fast math), so kernels made only of them match a build without contraction exactly; `expf` is
//! the host's libm here and each vendor's own approximation on the GPU.
//!
//! [`run_block`] executes one block of a launch over a [`Memory`]; [`run_plan`] executes a whole
//! [`Plan`] over host buffers (tests, and callers without a simulated device).

use crate::plan::{Arg, Buf, DType, Plan, Problem, GEMM_TILE};

/// Byte-addressed device memory the reference reads and writes.
pub trait Memory {
    /// `len` bytes at `addr`.
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Writes `data` at `addr`.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String>;
}

/// One launch as the reference sees it.
#[derive(Debug, Clone, Copy)]
pub struct BlockLaunch<'a> {
    /// `extern "C"` kernel name.
    pub kernel: &'a str,
    /// Grid in blocks.
    pub grid: [u32; 3],
    /// Block in threads.
    pub block: [u32; 3],
    /// Parameters in order: pointers as `u64`, 4-byte scalars as their bits zero-extended.
    pub params: &'a [u64],
}

impl BlockLaunch<'_> {
    fn threads(&self) -> usize {
        self.block.iter().map(|&b| b as usize).product()
    }
    fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }
    fn ptr(&self, i: usize) -> Result<u64, String> {
        self.params.get(i).copied().ok_or_else(|| format!("{}: missing parameter {i}", self.kernel))
    }
    fn u32(&self, i: usize) -> Result<u32, String> {
        let v = self.ptr(i)?;
        u32::try_from(v).map_err(|_| format!("{}: parameter {i} is not a 4-byte value", self.kernel))
    }
    fn f32(&self, i: usize) -> Result<f32, String> {
        self.u32(i).map(f32::from_bits)
    }
    fn tree_threads(&self) -> Result<usize, String> {
        let t = self.threads();
        if t == 0 || !t.is_power_of_two() || t > 1024 || self.block[1] != 1 || self.block[2] != 1 {
            return Err(format!(
                "{} needs a 1-D power-of-two block of at most 1024 threads, got {:?}",
                self.kernel, self.block
            ));
        }
        Ok(t)
    }
}

/// The most negative finite float: the kernels' start value of running maxima (`VT_NEG_MAX`).
const NEG_MAX: f32 = -f32::MAX;

fn read_vals(mem: &dyn Memory, dtype: DType, ptr: u64, start: u64, count: usize) -> Result<Vec<f32>, String> {
    let size = dtype.size() as u64;
    Ok(dtype.decode(&mem.read(ptr + start * size, count * dtype.size())?))
}

fn write_vals(mem: &mut dyn Memory, dtype: DType, ptr: u64, start: u64, vals: &[f32]) -> Result<(), String> {
    mem.write(ptr + start * dtype.size() as u64, &dtype.encode(vals))
}

/// `s[t] += s[t + k]` for `k = T/2 .. 1` (the device's shared-memory tree).
fn tree_sum(s: &mut [f32]) -> f32 {
    let mut k = s.len() / 2;
    while k > 0 {
        for t in 0..k {
            s[t] += s[t + k];
        }
        k /= 2;
    }
    s[0]
}

/// The same tree with `fmaxf`.
fn tree_max(s: &mut [f32]) -> f32 {
    let mut k = s.len() / 2;
    while k > 0 {
        for t in 0..k {
            s[t] = s[t].max(s[t + k]);
        }
        k /= 2;
    }
    s[0]
}

/// Splits a kernel name into its operation and dtype suffix (`gemv_bf16` -> `("gemv", Bf16)`).
fn split_name(kernel: &str) -> Option<(&str, DType)> {
    let (op, d) = kernel.rsplit_once('_')?;
    Some((op, DType::from_name(d)?))
}

/// Runs block `b` (linear index, x fastest) of `l` over `mem`.
pub fn run_block(l: &BlockLaunch<'_>, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    if l.kernel == "reduce_final" {
        return reduce_final(l, b, mem);
    }
    match split_name(l.kernel) {
        Some(("reduce_partial", d)) => reduce_partial(l, d, b, mem),
        Some(("gemm_splitk_partial", d)) => gemm_splitk_partial(l, d, b, mem),
        Some(("splitk_reduce", d)) => splitk_reduce(l, d, b, mem),
        Some(("layernorm", d)) => layernorm(l, d, b, mem),
        Some(("gemv", d)) => gemv(l, d, b, mem),
        Some(("softmax", d)) => softmax(l, d, b, mem),
        Some(("attention", d)) => attention(l, d, b, mem),
        _ => Err(format!("{} is not a suite kernel", l.kernel)),
    }
}

fn reduce_partial(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (x, n, partial) = (l.ptr(0)?, u64::from(l.u32(1)?), l.ptr(2)?);
    let t = l.tree_threads()?;
    let stride = l.blocks() * t as u64;
    let mut s = vec![0f32; t];
    let mut start = b * t as u64;
    while start < n {
        let count = (n - start).min(t as u64) as usize;
        for (acc, v) in s.iter_mut().zip(read_vals(mem, d, x, start, count)?) {
            *acc += v;
        }
        start += stride;
    }
    let sum = tree_sum(&mut s);
    write_vals(mem, DType::F32, partial, b, &[sum])
}

fn reduce_final(l: &BlockLaunch<'_>, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    if b != 0 {
        return Ok(());
    }
    let (p, m, out) = (l.ptr(0)?, l.u32(1)? as usize, l.ptr(2)?);
    let sum = read_vals(mem, DType::F32, p, 0, m)?.iter().fold(0f32, |a, v| a + v);
    write_vals(mem, DType::F32, out, 0, &[sum])
}

fn gemm_splitk_partial(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (a, bm, ws) = (l.ptr(0)?, l.ptr(1)?, l.ptr(2)?);
    let (m, n, k) = (l.u32(3)? as usize, l.u32(4)? as usize, l.u32(5)? as usize);
    let tile = GEMM_TILE as usize;
    if l.block != [GEMM_TILE, GEMM_TILE, 1] {
        return Err(format!("{} needs a {tile}x{tile} block, got {:?}", l.kernel, l.block));
    }
    let [gx, gy, gz] = l.grid.map(u64::from);
    let (bx, by, s) = ((b % gx) as usize, ((b / gx) % gy) as usize, (b / (gx * gy)) as u32);
    let kt = k.div_ceil(tile) as u32;
    let (t0, t1) = crate::plan::split_k_chunk(k as u32, gz as u32, s);
    debug_assert!(t1 <= kt);
    let (k0, k1) = (t0 as usize * tile, (t1 as usize * tile).min(k));
    let (row0, col0) = (by * tile, bx * tile);
    let rows = m.saturating_sub(row0).min(tile);
    let cols = n.saturating_sub(col0).min(tile);
    // The slices of A and B this block's k-range touches (the rest is the kernel's zero padding).
    let a_rows: Vec<Vec<f32>> =
        (0..rows).map(|r| read_vals(mem, d, a, ((row0 + r) * k + k0) as u64, k1 - k0)).collect::<Result<_, _>>()?;
    let b_rows: Vec<Vec<f32>> =
        (k0..k1).map(|kk| read_vals(mem, d, bm, (kk * n + col0) as u64, cols)).collect::<Result<_, _>>()?;
    for (r, a_row) in a_rows.iter().enumerate() {
        let mut out = vec![0f32; cols];
        for (c, o) in out.iter_mut().enumerate() {
            let mut acc = 0f32;
            for t in t0 as usize..t1 as usize {
                for kk in t * tile..(t + 1) * tile {
                    let (av, bv) = if kk < k { (a_row[kk - k0], b_rows[kk - k0][c]) } else { (0.0, 0.0) };
                    acc += av * bv;
                }
            }
            *o = acc;
        }
        write_vals(mem, DType::F32, ws, ((s as usize * m + row0 + r) * n + col0) as u64, &out)?;
    }
    Ok(())
}

fn splitk_reduce(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (ws, splits, count, c) = (l.ptr(0)?, u64::from(l.u32(1)?), u64::from(l.u32(2)?), l.ptr(3)?);
    let t = l.threads() as u64;
    let stride = l.blocks() * t;
    let mut start = b * t;
    while start < count {
        let len = (count - start).min(t) as usize;
        let mut acc = vec![0f32; len];
        for s in 0..splits {
            for (a, v) in acc.iter_mut().zip(read_vals(mem, DType::F32, ws, s * count + start, len)?) {
                *a += v;
            }
        }
        write_vals(mem, d, c, start, &acc)?;
        start += stride;
    }
    Ok(())
}

/// Rows `b, b + G, ...` of a row-parallel kernel with `rows` rows.
fn my_rows(l: &BlockLaunch<'_>, b: u64, rows: u32) -> impl Iterator<Item = u64> {
    (b..u64::from(rows)).step_by(l.blocks().max(1) as usize)
}

fn layernorm(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (x, gamma, beta, y) = (l.ptr(0)?, l.ptr(1)?, l.ptr(2)?, l.ptr(3)?);
    let (rows, cols, eps) = (l.u32(4)?, l.u32(5)? as usize, l.f32(6)?);
    let t = l.tree_threads()?;
    let g = read_vals(mem, d, gamma, 0, cols)?;
    let be = read_vals(mem, d, beta, 0, cols)?;
    for r in my_rows(l, b, rows) {
        let row = read_vals(mem, d, x, r * cols as u64, cols)?;
        let mut s = vec![0f32; t];
        for (c, &v) in row.iter().enumerate() {
            s[c % t] += v;
        }
        let mean = tree_sum(&mut s) / cols as f32;
        let mut s = vec![0f32; t];
        for (c, &v) in row.iter().enumerate() {
            let dv = v - mean;
            s[c % t] += dv * dv;
        }
        let rstd = 1.0 / (tree_sum(&mut s) / cols as f32 + eps).sqrt();
        let out: Vec<f32> = row.iter().enumerate().map(|(c, &v)| (v - mean) * rstd * g[c] + be[c]).collect();
        write_vals(mem, d, y, r * cols as u64, &out)?;
    }
    Ok(())
}

fn gemv(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (a, x, y, m, k) = (l.ptr(0)?, l.ptr(1)?, l.ptr(2)?, l.u32(3)?, l.u32(4)? as usize);
    let t = l.tree_threads()?;
    let xv = read_vals(mem, d, x, 0, k)?;
    for r in my_rows(l, b, m) {
        let row = read_vals(mem, d, a, r * k as u64, k)?;
        let mut s = vec![0f32; t];
        for (c, (&av, &xc)) in row.iter().zip(&xv).enumerate() {
            s[c % t] += av * xc;
        }
        write_vals(mem, d, y, r, &[tree_sum(&mut s)])?;
    }
    Ok(())
}

fn softmax(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (x, y, rows, cols) = (l.ptr(0)?, l.ptr(1)?, l.u32(2)?, l.u32(3)? as usize);
    let t = l.tree_threads()?;
    for r in my_rows(l, b, rows) {
        let row = read_vals(mem, d, x, r * cols as u64, cols)?;
        let mut s = vec![NEG_MAX; t];
        for (c, &v) in row.iter().enumerate() {
            s[c % t] = s[c % t].max(v);
        }
        let rmax = tree_max(&mut s);
        let mut s = vec![0f32; t];
        for (c, &v) in row.iter().enumerate() {
            s[c % t] += (v - rmax).exp();
        }
        let sum = tree_sum(&mut s);
        let out: Vec<f32> = row.iter().map(|&v| (v - rmax).exp() / sum).collect();
        write_vals(mem, d, y, r * cols as u64, &out)?;
    }
    Ok(())
}

fn attention(l: &BlockLaunch<'_>, d: DType, b: u64, mem: &mut dyn Memory) -> Result<(), String> {
    let (q, k, v, o) = (l.ptr(0)?, l.ptr(1)?, l.ptr(2)?, l.ptr(3)?);
    let (len, dim, scale) = (l.u32(4)?, l.u32(5)? as usize, l.f32(6)?);
    let t = l.tree_threads()?;
    let n = len as usize;
    let kv = read_vals(mem, d, k, 0, n * dim)?;
    let vv = read_vals(mem, d, v, 0, n * dim)?;
    for i in my_rows(l, b, len) {
        let qv = read_vals(mem, d, q, i * dim as u64, dim)?;
        let mut p = vec![0f32; n];
        let mut s = vec![NEG_MAX; t];
        for (j, pj) in p.iter_mut().enumerate() {
            let mut dot = 0f32;
            for (dd, &qd) in qv.iter().enumerate() {
                dot += qd * kv[j * dim + dd];
            }
            *pj = dot * scale;
            s[j % t] = s[j % t].max(*pj);
        }
        let rmax = tree_max(&mut s);
        let mut s = vec![0f32; t];
        for (j, pj) in p.iter_mut().enumerate() {
            *pj = (*pj - rmax).exp();
            s[j % t] += *pj;
        }
        let sum = tree_sum(&mut s);
        let out: Vec<f32> = (0..dim)
            .map(|c| {
                let mut acc = 0f32;
                for (j, &pj) in p.iter().enumerate() {
                    acc += pj * vv[j * dim + c];
                }
                acc / sum
            })
            .collect();
        write_vals(mem, d, o, i * dim as u64, &out)?;
    }
    Ok(())
}

/// Host buffers at fake device addresses.
#[derive(Debug, Default)]
pub struct HostMemory {
    buffers: Vec<(u64, Vec<u8>)>,
}

impl HostMemory {
    /// Allocates `bytes` zeroed bytes and returns their address.
    pub fn alloc(&mut self, bytes: usize) -> u64 {
        let addr = self.buffers.last().map_or(0x1000, |(a, v)| (a + v.len() as u64).div_ceil(256) * 256 + 256);
        self.buffers.push((addr, vec![0; bytes]));
        addr
    }

    fn locate(&self, addr: u64, len: usize) -> Result<(usize, usize), String> {
        self.buffers
            .iter()
            .position(|(a, v)| addr >= *a && addr + len as u64 <= a + v.len() as u64)
            .map(|i| (i, (addr - self.buffers[i].0) as usize))
            .ok_or_else(|| format!("{len} bytes at {addr:#x} outside every buffer"))
    }
}

impl Memory for HostMemory {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        let (i, off) = self.locate(addr, len)?;
        Ok(self.buffers[i].1[off..off + len].to_vec())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), String> {
        let (i, off) = self.locate(addr, data.len())?;
        self.buffers[i].1[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// Runs `plan` for `problem` over host copies of `inputs` (already in `dtype`) and returns the
/// output's bytes (in [`Problem::output_dtype`]). Blocks run in index order.
pub fn run_plan(plan: &Plan, problem: &Problem, dtype: DType, inputs: &[Vec<f32>]) -> Result<Vec<u8>, String> {
    problem.validate()?;
    let mut mem = HostMemory::default();
    let ins: Vec<u64> = inputs
        .iter()
        .map(|v| {
            let a = mem.alloc(v.len() * dtype.size());
            mem.write(a, &dtype.encode(v)).map(|()| a)
        })
        .collect::<Result<_, _>>()?;
    let out_bytes = problem.output_elems() * problem.output_dtype(dtype).size();
    let out = mem.alloc(out_bytes);
    let ws = mem.alloc(plan.workspace_bytes.max(4) as usize);
    for launch in &plan.launches {
        let params: Vec<u64> = launch
            .args
            .iter()
            .map(|a| match *a {
                Arg::Ptr(Buf::Input(i)) => ins.get(i).copied().ok_or_else(|| format!("no input {i}")),
                Arg::Ptr(Buf::Output) => Ok(out),
                Arg::Ptr(Buf::Workspace) => Ok(ws),
                Arg::U32(v) => Ok(u64::from(v)),
                Arg::F32(v) => Ok(u64::from(v.to_bits())),
            })
            .collect::<Result<_, String>>()?;
        let l = BlockLaunch { kernel: launch.kernel, grid: launch.grid, block: launch.block, params: &params };
        for b in 0..l.blocks() {
            run_block(&l, b, &mut mem)?;
        }
    }
    mem.read(out, out_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{fixed, inputs, plan, SuiteKernel};
    use crate::reference;
    use proptest::prelude::*;

    fn small(kernel: SuiteKernel) -> Problem {
        match kernel {
            SuiteKernel::Reduction => Problem::Reduction { n: 5000 },
            SuiteKernel::SplitKGemm => Problem::Gemm { m: 20, n: 18, k: 100 },
            SuiteKernel::LayerNorm => Problem::LayerNorm { rows: 3, cols: 300 },
            SuiteKernel::Gemv => Problem::Gemv { m: 7, k: 300 },
            SuiteKernel::Softmax => Problem::Softmax { rows: 3, cols: 300 },
            SuiteKernel::Attention => Problem::Attention { len: 20, dim: 16 },
        }
    }

    /// Tolerance of [`reference::conditioned_error`] against FP64 for an output type.
    fn tolerance(d: DType) -> f64 {
        match d {
            DType::F32 => 1e-5,
            DType::Bf16 => 1e-2,
            DType::F16 => 2e-3,
        }
    }

    #[test]
    fn every_kernel_computes_its_function() {
        for k in SuiteKernel::ALL {
            for d in DType::ALL {
                let p = small(k);
                let x = inputs(&p, d, 11);
                let out = run_plan(&fixed(&p, d), &p, d, &x).expect("runs");
                let vals = p.output_dtype(d).decode(&out);
                let err = reference::relative_error(&vals, &reference::compute(&p, &x));
                assert!(err < tolerance(p.output_dtype(d)), "{k}/{d}: relative error {err:e}");
            }
        }
    }

    #[test]
    fn trees_by_hand() {
        assert_eq!(tree_sum(&mut [1.0, 2.0, 3.0, 4.0]), 10.0);
        // (1e8 + 1) + (-1e8 + 1): the tree pairs t with t + T/2.
        assert_eq!(tree_sum(&mut [1e8, -1e8, 1.0, 1.0]), 1e8 + 1.0 + (-1e8 + 1.0));
        assert_eq!(tree_max(&mut [NEG_MAX, 3.0, -1.0, 2.0]), 3.0);
    }

    #[test]
    fn bad_launches_are_errors() {
        let p = [0u64; 7];
        let l = BlockLaunch { kernel: "layernorm_f32", grid: [1, 1, 1], block: [100, 1, 1], params: &p };
        assert!(run_block(&l, 0, &mut HostMemory::default()).unwrap_err().contains("power-of-two"));
        let l = BlockLaunch { kernel: "nope_f32", grid: [1, 1, 1], block: [32, 1, 1], params: &p };
        assert!(run_block(&l, 0, &mut HostMemory::default()).is_err());
        let l = BlockLaunch { kernel: "gemv_f32", grid: [1, 1, 1], block: [32, 1, 1], params: &p[..2] };
        assert!(run_block(&l, 0, &mut HostMemory::default()).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any decomposition (the plan for any unit count) computes the same function, within
        /// the output type's rounding.
        #[test]
        fn decompositions_agree_within_rounding(ki in 0usize..6, di in 0usize..3, units in 1usize..300, seed in any::<u64>()) {
            let (k, d) = (SuiteKernel::ALL[ki], DType::ALL[di]);
            let p = small(k);
            let x = inputs(&p, d, seed);
            let od = p.output_dtype(d);
            let a = od.decode(&run_plan(&plan(&p, d, units), &p, d, &x).expect("runs"));
            prop_assert_eq!(a.len(), p.output_elems());
            let err = reference::conditioned_error(&p, &x, &a);
            prop_assert!(err < tolerance(od), "{}/{}: error {:e}", k, d, err);
        }
    }
}
