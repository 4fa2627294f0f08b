//! Launch plans of the determinism suite: the **fixed** structure and the **reshaped** one.
//!
//! A kernel-reshaping system picks a kernel's decomposition from the resources it is given: more
//! blocks on more SMs, a larger split-K factor when the output tiles cannot fill the allocation,
//! more threads per row when few rows share many SMs. [`plan`] is that choice for an allocation of
//! `units` SMs. The fixed structure ([`fixed`]) is the same rule evaluated once for the whole H200
//! ([`REFERENCE_UNITS`]) and then kept whatever partition the launch is bound to: what vitamin
//! guarantees. Both compute the same function; only the order of floating-point additions differs.
//!
//! Invariants (property-tested below): every launch has 1..=1024 threads per block (a power of two
//! where a shared-memory tree needs one) and a non-empty grid; split-K chunks tile the k-range
//! exactly once; buffers referenced by a launch exist; `plan(.., REFERENCE_UNITS) == fixed(..)`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{bf16, f16};

/// SM count the fixed structures are tuned for (the whole H200).
pub const REFERENCE_UNITS: usize = 132;

/// Blocks of 256 threads a reshaping system plans per SM (reduction).
const REDUCTION_BLOCKS_PER_SM: usize = 8;
/// Output tiles per SM a split-K GEMM aims for before splitting K.
const GEMM_BLOCKS_PER_SM: usize = 4;
/// Threads per SM LayerNorm aims to keep busy (rows are long and few).
const LAYERNORM_THREADS_PER_SM: usize = 2048;
/// Threads per SM GEMV aims to keep busy (memory-bound: more loads in flight).
const GEMV_THREADS_PER_SM: usize = 8192;
/// Threads per SM softmax aims to keep busy (like LayerNorm: few long rows).
const SOFTMAX_THREADS_PER_SM: usize = 2048;
/// Threads per SM the attention block aims to keep busy (one block per query row).
const ATTENTION_THREADS_PER_SM: usize = 4096;
/// Longest sequence the attention kernel holds in shared memory (the source's `ATTN_MAX_L`).
pub const ATTENTION_MAX_LEN: u32 = 1024;
/// Side of a GEMM output tile (the CUDA kernel's `GEMM_TILE`).
pub const GEMM_TILE: u32 = 16;

/// The determinism suite's kernels.
/// Serialized as [`SuiteKernel::name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SuiteKernel {
    /// Block-partitioned sum of a vector (FP32 partials and result).
    #[serde(rename = "reduction")]
    Reduction,
    /// Split-K GEMM: partial products per K-chunk, then an in-order sum of the chunks.
    #[serde(rename = "splitk_gemm")]
    SplitKGemm,
    /// LayerNorm over rows (mean, variance, affine).
    #[serde(rename = "layernorm")]
    LayerNorm,
    /// Matrix-vector product.
    #[serde(rename = "gemv")]
    Gemv,
    /// Row softmax (max, sum of exponentials, division).
    #[serde(rename = "softmax")]
    Softmax,
    /// One attention head: softmax(Q K^T * scale) V.
    #[serde(rename = "attention")]
    Attention,
}

impl SuiteKernel {
    /// All suite kernels, in report order.
    pub const ALL: [SuiteKernel; 6] = [
        SuiteKernel::Reduction,
        SuiteKernel::SplitKGemm,
        SuiteKernel::LayerNorm,
        SuiteKernel::Gemv,
        SuiteKernel::Softmax,
        SuiteKernel::Attention,
    ];

    /// Stable short name (JSON, CLI).
    pub fn name(self) -> &'static str {
        match self {
            SuiteKernel::Reduction => "reduction",
            SuiteKernel::SplitKGemm => "splitk_gemm",
            SuiteKernel::LayerNorm => "layernorm",
            SuiteKernel::Gemv => "gemv",
            SuiteKernel::Softmax => "softmax",
            SuiteKernel::Attention => "attention",
        }
    }

    /// Parses [`SuiteKernel::name`].
    pub fn from_name(s: &str) -> Option<SuiteKernel> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

impl fmt::Display for SuiteKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Element type of a kernel's inputs and outputs (arithmetic is FP32 either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DType {
    /// IEEE single precision.
    F32,
    /// bfloat16 (stored as 16 bits, widened to FP32 for arithmetic).
    Bf16,
    /// IEEE half precision (stored as 16 bits, widened to FP32 for arithmetic).
    F16,
}

impl DType {
    /// Every type, in report order.
    pub const ALL: [DType; 3] = [DType::F32, DType::Bf16, DType::F16];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }

    /// Stable short name (JSON, CLI, kernel-name suffix).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
        }
    }

    /// Parses [`DType::name`].
    pub fn from_name(s: &str) -> Option<DType> {
        Self::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Rounds `v` to this type and back (the value the device sees).
    pub fn round(self, v: f32) -> f32 {
        match self {
            DType::F32 => v,
            DType::Bf16 => bf16::to_f32(bf16::from_f32(v)),
            DType::F16 => f16::to_f32(f16::from_f32(v)),
        }
    }

    /// Encodes values (already representable or not) as device bytes of this type.
    pub fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DType::Bf16 => values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect(),
            DType::F16 => values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
        }
    }

    /// Decodes device bytes of this type to `f32` (a trailing partial element is ignored).
    pub fn decode(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            DType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            DType::Bf16 => bytes.chunks_exact(2).map(|c| bf16::to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::F16 => bytes.chunks_exact(2).map(|c| f16::to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Problem sizes of a suite kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// Sum of `n` elements.
    Reduction {
        /// Elements.
        n: u32,
    },
    /// `C[m,n] = A[m,k] * B[k,n]`.
    Gemm {
        /// Rows of A and C.
        m: u32,
        /// Columns of B and C.
        n: u32,
        /// Inner dimension.
        k: u32,
    },
    /// LayerNorm of `rows` rows of `cols` elements.
    LayerNorm {
        /// Rows.
        rows: u32,
        /// Row length.
        cols: u32,
    },
    /// `y[m] = A[m,k] * x[k]`.
    Gemv {
        /// Rows.
        m: u32,
        /// Columns.
        k: u32,
    },
    /// Softmax of `rows` rows of `cols` elements.
    Softmax {
        /// Rows.
        rows: u32,
        /// Row length.
        cols: u32,
    },
    /// `O = softmax(Q K^T / sqrt(dim)) V`, `Q`, `K`, `V`, `O` of `[len, dim]`.
    Attention {
        /// Sequence length (at most [`ATTENTION_MAX_LEN`]).
        len: u32,
        /// Head dimension.
        dim: u32,
    },
}

impl Problem {
    /// The suite's default size for `kernel`: large enough that decompositions matter, small
    /// enough that 1000 trials on an 8-SM partition take seconds.
    pub fn default_for(kernel: SuiteKernel) -> Problem {
        match kernel {
            SuiteKernel::Reduction => Problem::Reduction { n: 1 << 22 },
            SuiteKernel::SplitKGemm => Problem::Gemm { m: 128, n: 128, k: 4096 },
            SuiteKernel::LayerNorm => Problem::LayerNorm { rows: 512, cols: 2048 },
            SuiteKernel::Gemv => Problem::Gemv { m: 4096, k: 4096 },
            SuiteKernel::Softmax => Problem::Softmax { rows: 512, cols: 2048 },
            SuiteKernel::Attention => Problem::Attention { len: 256, dim: 64 },
        }
    }

    /// The size `vitamin determinism --record` uses for `kernel`: the same structure at a size
    /// whose outputs stay small in a record (tens of KiB compressed) and that the simulated
    /// device's CPU reference runs in milliseconds.
    pub fn record_for(kernel: SuiteKernel) -> Problem {
        match kernel {
            SuiteKernel::Reduction => Problem::Reduction { n: 1 << 18 },
            SuiteKernel::SplitKGemm => Problem::Gemm { m: 64, n: 64, k: 1024 },
            SuiteKernel::LayerNorm => Problem::LayerNorm { rows: 4, cols: 1024 },
            SuiteKernel::Gemv => Problem::Gemv { m: 1024, k: 1024 },
            SuiteKernel::Softmax => Problem::Softmax { rows: 4, cols: 1024 },
            SuiteKernel::Attention => Problem::Attention { len: 64, dim: 64 },
        }
    }

    /// The kernel this problem belongs to.
    pub fn kernel(&self) -> SuiteKernel {
        match self {
            Problem::Reduction { .. } => SuiteKernel::Reduction,
            Problem::Gemm { .. } => SuiteKernel::SplitKGemm,
            Problem::LayerNorm { .. } => SuiteKernel::LayerNorm,
            Problem::Gemv { .. } => SuiteKernel::Gemv,
            Problem::Softmax { .. } => SuiteKernel::Softmax,
            Problem::Attention { .. } => SuiteKernel::Attention,
        }
    }

    /// Element counts of the inputs, in kernel-argument order.
    pub fn input_elems(&self) -> Vec<usize> {
        match *self {
            Problem::Reduction { n } => vec![n as usize],
            Problem::Gemm { m, n, k } => vec![m as usize * k as usize, k as usize * n as usize],
            Problem::LayerNorm { rows, cols } => vec![rows as usize * cols as usize, cols as usize, cols as usize],
            Problem::Gemv { m, k } => vec![m as usize * k as usize, k as usize],
            Problem::Softmax { rows, cols } => vec![rows as usize * cols as usize],
            Problem::Attention { len, dim } => vec![len as usize * dim as usize; 3],
        }
    }

    /// Element count of the output.
    pub fn output_elems(&self) -> usize {
        match *self {
            Problem::Reduction { .. } => 1,
            Problem::Gemm { m, n, .. } => m as usize * n as usize,
            Problem::LayerNorm { rows, cols } => rows as usize * cols as usize,
            Problem::Gemv { m, .. } => m as usize,
            Problem::Softmax { rows, cols } => rows as usize * cols as usize,
            Problem::Attention { len, dim } => len as usize * dim as usize,
        }
    }

    /// Element type of the output for inputs of `dtype` (the reduction always returns FP32).
    pub fn output_dtype(&self, dtype: DType) -> DType {
        match self {
            Problem::Reduction { .. } => DType::F32,
            _ => dtype,
        }
    }

    /// Checks the sizes the kernels assume (non-empty, 32-bit indexable).
    pub fn validate(&self) -> Result<(), String> {
        let dims: Vec<u32> = match *self {
            Problem::Reduction { n } => vec![n],
            Problem::Gemm { m, n, k } => vec![m, n, k],
            Problem::LayerNorm { rows, cols } => vec![rows, cols],
            Problem::Gemv { m, k } => vec![m, k],
            Problem::Softmax { rows, cols } => vec![rows, cols],
            Problem::Attention { len, dim } => vec![len, dim],
        };
        if dims.contains(&0) {
            return Err(format!("{self:?}: every dimension must be positive"));
        }
        if let Problem::Attention { len, .. } = *self {
            if len > ATTENTION_MAX_LEN {
                return Err(format!("{self:?}: the attention kernel holds at most {ATTENTION_MAX_LEN} keys"));
            }
        }
        if self.output_elems() > u32::MAX as usize {
            return Err(format!("{self:?}: output exceeds 2^32 elements"));
        }
        Ok(())
    }
}

/// A device buffer a launch argument refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Buf {
    /// Input `i` (see [`Problem::input_elems`]).
    Input(usize),
    /// The output.
    Output,
    /// Scratch space of [`Plan::workspace_bytes`].
    Workspace,
}

/// One kernel argument.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Arg {
    /// A device pointer (8 bytes).
    Ptr(Buf),
    /// `unsigned int`.
    U32(u32),
    /// `float`.
    F32(f32),
}

/// One kernel launch of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Launch {
    /// `extern "C"` kernel name in [`crate::SOURCE`].
    pub kernel: &'static str,
    /// Grid in blocks.
    pub grid: [u32; 3],
    /// Block in threads.
    pub block: [u32; 3],
    /// Arguments in order.
    pub args: Vec<Arg>,
}

impl Launch {
    /// Threads per block.
    pub fn threads(&self) -> u32 {
        self.block.iter().product()
    }
    /// Blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }
}

/// A kernel's launches, in stream order, for one decomposition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Launches, executed in order on one stream.
    pub launches: Vec<Launch>,
    /// Scratch bytes the launches need.
    pub workspace_bytes: u64,
    /// Human-readable decomposition (`grid 1056`, `split-K 9`, `256 threads/row`).
    pub decomposition: String,
}

/// The kernels a suite kernel uses for `dtype`.
pub fn kernel_names(kernel: SuiteKernel, dtype: DType) -> Vec<&'static str> {
    use DType::{Bf16, F16, F32};
    use SuiteKernel::*;
    match (kernel, dtype) {
        (Reduction, F32) => vec!["reduce_partial_f32", "reduce_final"],
        (Reduction, Bf16) => vec!["reduce_partial_bf16", "reduce_final"],
        (Reduction, F16) => vec!["reduce_partial_f16", "reduce_final"],
        (SplitKGemm, F32) => vec!["gemm_splitk_partial_f32", "splitk_reduce_f32"],
        (SplitKGemm, Bf16) => vec!["gemm_splitk_partial_bf16", "splitk_reduce_bf16"],
        (SplitKGemm, F16) => vec!["gemm_splitk_partial_f16", "splitk_reduce_f16"],
        (LayerNorm, F32) => vec!["layernorm_f32"],
        (LayerNorm, Bf16) => vec!["layernorm_bf16"],
        (LayerNorm, F16) => vec!["layernorm_f16"],
        (Gemv, F32) => vec!["gemv_f32"],
        (Gemv, Bf16) => vec!["gemv_bf16"],
        (Gemv, F16) => vec!["gemv_f16"],
        (Softmax, F32) => vec!["softmax_f32"],
        (Softmax, Bf16) => vec!["softmax_bf16"],
        (Softmax, F16) => vec!["softmax_f16"],
        (Attention, F32) => vec!["attention_f32"],
        (Attention, Bf16) => vec!["attention_bf16"],
        (Attention, F16) => vec!["attention_f16"],
    }
}

/// Largest power of two `<= x` (`x >= 1`).
fn floor_pow2(x: usize) -> usize {
    1 << (usize::BITS - 1 - x.max(1).leading_zeros())
}

/// Threads per row a reshaping system gives a row-parallel kernel of `rows` rows on `units` SMs
/// when it aims for `threads_per_sm` threads on each SM.
pub fn threads_per_row(rows: u32, units: usize, threads_per_sm: usize) -> u32 {
    let want = units.max(1) * threads_per_sm / (rows.max(1) as usize);
    floor_pow2(want).clamp(32, 1024) as u32
}

/// Split-K factor for an `m x n` output on `units` SMs: split K until tiles x split fill the SMs.
pub fn split_k(m: u32, n: u32, k: u32, units: usize) -> u32 {
    let tiles = (m.div_ceil(GEMM_TILE) as usize) * (n.div_ceil(GEMM_TILE) as usize);
    let want = (units.max(1) * GEMM_BLOCKS_PER_SM).div_ceil(tiles);
    want.clamp(1, k.div_ceil(GEMM_TILE) as usize) as u32
}

/// The k-tiles `[t0, t1)` that chunk `s` of `split` covers (the CUDA kernel's formula).
pub fn split_k_chunk(k: u32, split: u32, s: u32) -> (u32, u32) {
    let kt = u64::from(k.div_ceil(GEMM_TILE));
    let (s, split) = (u64::from(s), u64::from(split));
    ((s * kt / split) as u32, ((s + 1) * kt / split) as u32)
}

/// Reduction grid on `units` SMs.
pub fn reduction_grid(n: u32, units: usize) -> u32 {
    let want = units.max(1) * REDUCTION_BLOCKS_PER_SM;
    want.min(n.div_ceil(256) as usize).max(1) as u32
}

/// The decomposition a reshaping system picks for `problem` on `units` SMs.
pub fn plan(problem: &Problem, dtype: DType, units: usize) -> Plan {
    let [first, second] = match kernel_names(problem.kernel(), dtype)[..] {
        [a, b] => [a, b],
        [a] => [a, ""],
        _ => unreachable!("suite kernels use one or two launches"),
    };
    match *problem {
        Problem::Reduction { n } => {
            let grid = reduction_grid(n, units);
            Plan {
                launches: vec![
                    Launch {
                        kernel: first,
                        grid: [grid, 1, 1],
                        block: [256, 1, 1],
                        args: vec![Arg::Ptr(Buf::Input(0)), Arg::U32(n), Arg::Ptr(Buf::Workspace)],
                    },
                    Launch {
                        kernel: second,
                        grid: [1, 1, 1],
                        block: [32, 1, 1],
                        args: vec![Arg::Ptr(Buf::Workspace), Arg::U32(grid), Arg::Ptr(Buf::Output)],
                    },
                ],
                workspace_bytes: 4 * u64::from(grid),
                decomposition: format!("grid {grid}"),
            }
        }
        Problem::Gemm { m, n, k } => {
            let split = split_k(m, n, k, units);
            let count = m * n;
            Plan {
                launches: vec![
                    Launch {
                        kernel: first,
                        grid: [n.div_ceil(GEMM_TILE), m.div_ceil(GEMM_TILE), split],
                        block: [GEMM_TILE, GEMM_TILE, 1],
                        args: vec![
                            Arg::Ptr(Buf::Input(0)),
                            Arg::Ptr(Buf::Input(1)),
                            Arg::Ptr(Buf::Workspace),
                            Arg::U32(m),
                            Arg::U32(n),
                            Arg::U32(k),
                        ],
                    },
                    Launch {
                        kernel: second,
                        grid: [count.div_ceil(256), 1, 1],
                        block: [256, 1, 1],
                        args: vec![Arg::Ptr(Buf::Workspace), Arg::U32(split), Arg::U32(count), Arg::Ptr(Buf::Output)],
                    },
                ],
                workspace_bytes: 4 * u64::from(split) * u64::from(count),
                decomposition: format!("split-K {split}"),
            }
        }
        Problem::LayerNorm { rows, cols } => {
            let t = threads_per_row(rows, units, LAYERNORM_THREADS_PER_SM);
            Plan {
                launches: vec![Launch {
                    kernel: first,
                    grid: [rows, 1, 1],
                    block: [t, 1, 1],
                    args: vec![
                        Arg::Ptr(Buf::Input(0)),
                        Arg::Ptr(Buf::Input(1)),
                        Arg::Ptr(Buf::Input(2)),
                        Arg::Ptr(Buf::Output),
                        Arg::U32(rows),
                        Arg::U32(cols),
                        Arg::F32(LAYERNORM_EPS),
                    ],
                }],
                workspace_bytes: 0,
                decomposition: format!("{t} threads/row"),
            }
        }
        Problem::Gemv { m, k } => {
            let t = threads_per_row(m, units, GEMV_THREADS_PER_SM);
            Plan {
                launches: vec![Launch {
                    kernel: first,
                    grid: [m, 1, 1],
                    block: [t, 1, 1],
                    args: vec![
                        Arg::Ptr(Buf::Input(0)),
                        Arg::Ptr(Buf::Input(1)),
                        Arg::Ptr(Buf::Output),
                        Arg::U32(m),
                        Arg::U32(k),
                    ],
                }],
                workspace_bytes: 0,
                decomposition: format!("{t} threads/row"),
            }
        }
        Problem::Softmax { rows, cols } => {
            let t = threads_per_row(rows, units, SOFTMAX_THREADS_PER_SM);
            Plan {
                launches: vec![Launch {
                    kernel: first,
                    grid: [rows, 1, 1],
                    block: [t, 1, 1],
                    args: vec![Arg::Ptr(Buf::Input(0)), Arg::Ptr(Buf::Output), Arg::U32(rows), Arg::U32(cols)],
                }],
                workspace_bytes: 0,
                decomposition: format!("{t} threads/row"),
            }
        }
        Problem::Attention { len, dim } => {
            let t = threads_per_row(len, units, ATTENTION_THREADS_PER_SM);
            Plan {
                launches: vec![Launch {
                    kernel: first,
                    grid: [len, 1, 1],
                    block: [t, 1, 1],
                    args: vec![
                        Arg::Ptr(Buf::Input(0)),
                        Arg::Ptr(Buf::Input(1)),
                        Arg::Ptr(Buf::Input(2)),
                        Arg::Ptr(Buf::Output),
                        Arg::U32(len),
                        Arg::U32(dim),
                        Arg::F32(attention_scale(dim)),
                    ],
                }],
                workspace_bytes: 0,
                decomposition: format!("{t} threads/row"),
            }
        }
    }
}

/// The attention kernel's score scale, `1 / sqrt(dim)` rounded to FP32 on the host.
pub fn attention_scale(dim: u32) -> f32 {
    (1.0 / f64::from(dim.max(1)).sqrt()) as f32
}

/// LayerNorm's epsilon.
pub const LAYERNORM_EPS: f32 = 1e-5;

/// The fixed structure: the plan for the whole H200, kept on every partition.
pub fn fixed(problem: &Problem, dtype: DType) -> Plan {
    plan(problem, dtype, REFERENCE_UNITS)
}

/// Deterministic inputs (already representable in `dtype`), in kernel-argument order.
///
/// Wide dynamic range where additions dominate (the reduction), unit scale elsewhere; zeros only
/// where FP16 rounds a tiny value away.
pub fn inputs(problem: &Problem, dtype: DType, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = XorShift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    problem
        .input_elems()
        .iter()
        .enumerate()
        .map(|(which, &len)| {
            (0..len)
                .map(|i| {
                    let u = rng.unit() - 0.5;
                    let v = match (problem, which) {
                        (Problem::Reduction { .. }, _) => u * (1 + i % 97) as f32,
                        (Problem::LayerNorm { .. }, 0) => 4.0 * u + 1.0,
                        (Problem::LayerNorm { .. }, 1) => 1.0 + 0.2 * u,
                        (Problem::LayerNorm { .. }, _) => 0.2 * u,
                        (Problem::Softmax { .. }, _) => 8.0 * u,
                        _ => 2.0 * u,
                    };
                    dtype.round(v)
                })
                .collect()
        })
        .collect()
}

/// xorshift64: small, seeded, good enough for test inputs.
struct XorShift(u64);

impl XorShift {
    /// Uniform in `[0, 1)`, never exactly representable zero-width.
    fn unit(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_problem() -> impl Strategy<Value = Problem> {
        prop_oneof![
            (1u32..1 << 24).prop_map(|n| Problem::Reduction { n }),
            (1u32..600, 1u32..600, 1u32..9000).prop_map(|(m, n, k)| Problem::Gemm { m, n, k }),
            (1u32..5000, 1u32..9000).prop_map(|(rows, cols)| Problem::LayerNorm { rows, cols }),
            (1u32..9000, 1u32..9000).prop_map(|(m, k)| Problem::Gemv { m, k }),
            (1u32..5000, 1u32..9000).prop_map(|(rows, cols)| Problem::Softmax { rows, cols }),
            (1u32..=ATTENTION_MAX_LEN, 1u32..300).prop_map(|(len, dim)| Problem::Attention { len, dim }),
        ]
    }

    fn check_plan(p: &Problem, plan: &Plan) -> Result<(), TestCaseError> {
        prop_assert!(!plan.launches.is_empty());
        let inputs = p.input_elems().len();
        for l in &plan.launches {
            let t = l.threads();
            prop_assert!((1..=1024).contains(&t), "{} threads", t);
            prop_assert!(l.grid.iter().all(|&g| g >= 1), "empty grid {:?}", l.grid);
            prop_assert!(l.grid[0] < 1 << 31 && l.grid[1] < 1 << 16 && l.grid[2] < 1 << 16);
            if l.block[1] == 1 {
                prop_assert!(t.is_power_of_two(), "shared-memory trees need a power-of-two block, got {}", t);
            }
            for a in &l.args {
                match a {
                    Arg::Ptr(Buf::Input(i)) => prop_assert!(*i < inputs),
                    Arg::Ptr(Buf::Workspace) => prop_assert!(plan.workspace_bytes > 0),
                    _ => {}
                }
            }
            prop_assert!(kernel_names(p.kernel(), DType::F32).contains(&l.kernel) || l.kernel == "reduce_final");
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn plans_are_valid_launches(p in arb_problem(), units in 1usize..=512) {
            check_plan(&p, &plan(&p, DType::F32, units))?;
            check_plan(&p, &fixed(&p, DType::F32))?;
        }

        #[test]
        fn the_fixed_plan_is_the_reference_device_plan(p in arb_problem()) {
            prop_assert_eq!(plan(&p, DType::Bf16, REFERENCE_UNITS), fixed(&p, DType::Bf16));
        }

        #[test]
        fn split_k_chunks_tile_the_k_range_once(k in 1u32..100_000, split in 1u32..64) {
            let kt = k.div_ceil(GEMM_TILE);
            prop_assume!(split <= kt);
            let mut next = 0;
            for s in 0..split {
                let (t0, t1) = split_k_chunk(k, split, s);
                prop_assert_eq!(t0, next);
                prop_assert!(t1 > t0, "chunk {} of {} is empty", s, split);
                next = t1;
            }
            prop_assert_eq!(next, kt);
        }

        #[test]
        fn split_k_never_exceeds_the_k_tiles(m in 1u32..600, n in 1u32..600, k in 1u32..9000, units in 1usize..512) {
            let s = split_k(m, n, k, units);
            prop_assert!(s >= 1 && s <= k.div_ceil(GEMM_TILE));
        }

        #[test]
        fn workspace_holds_every_partial(p in arb_problem(), units in 1usize..=512) {
            let pl = plan(&p, DType::F32, units);
            match p {
                Problem::Reduction { .. } => prop_assert_eq!(pl.workspace_bytes, 4 * pl.launches[0].blocks()),
                Problem::Gemm { m, n, .. } => {
                    prop_assert_eq!(pl.workspace_bytes, 4 * u64::from(pl.launches[0].grid[2]) * u64::from(m * n))
                }
                _ => prop_assert_eq!(pl.workspace_bytes, 0),
            }
        }
    }

    #[test]
    fn reshaping_changes_the_default_problems_on_a_leaf() {
        for k in SuiteKernel::ALL {
            let p = Problem::default_for(k);
            p.validate().expect("valid default");
            assert_ne!(plan(&p, DType::F32, 8), fixed(&p, DType::F32), "{k}: a leaf must reshape");
        }
    }

    #[test]
    fn default_decompositions() {
        let d = |k| fixed(&Problem::default_for(k), DType::F32).decomposition;
        assert_eq!(d(SuiteKernel::Reduction), "grid 1056");
        assert_eq!(d(SuiteKernel::SplitKGemm), "split-K 9");
        assert_eq!(d(SuiteKernel::LayerNorm), "512 threads/row");
        assert_eq!(d(SuiteKernel::Gemv), "256 threads/row");
        assert_eq!(d(SuiteKernel::Softmax), "512 threads/row");
        assert_eq!(d(SuiteKernel::Attention), "1024 threads/row");
    }

    #[test]
    fn inputs_are_seeded_nonzero_and_representable() {
        for k in SuiteKernel::ALL {
            let p = Problem::default_for(k);
            for d in [DType::Bf16, DType::F16] {
                let a = inputs(&p, d, 7);
                assert_eq!(a, inputs(&p, d, 7));
                assert_ne!(a, inputs(&p, d, 8));
                assert_eq!(a.iter().map(Vec::len).collect::<Vec<_>>(), p.input_elems());
                for v in a.iter().flatten() {
                    assert_eq!(d.round(*v), *v);
                }
                assert!(
                    a.iter().flatten().filter(|v| **v == 0.0).count() * 1000 < p.input_elems().iter().sum::<usize>()
                );
            }
        }
    }

    #[test]
    fn serialized_names_are_the_cli_names() {
        for k in SuiteKernel::ALL {
            assert_eq!(serde_json::to_string(&k).expect("json"), format!("\"{}\"", k.name()));
        }
        for d in DType::ALL {
            assert_eq!(serde_json::to_string(&d).expect("json"), format!("\"{}\"", d.name()));
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let v = [1.5f32, -2.25, 3.0e-3];
        assert_eq!(DType::F32.decode(&DType::F32.encode(&v)), v);
        let r: Vec<f32> = v.iter().map(|&x| DType::Bf16.round(x)).collect();
        assert_eq!(DType::Bf16.decode(&DType::Bf16.encode(&v)), r);
    }
}
