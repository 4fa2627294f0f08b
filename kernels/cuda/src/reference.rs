//! FP64 CPU references of the suite kernels, to check that the GPU computes the right function.
//!
//! These are *not* bitwise references (the GPU rounds in FP32 in a decomposition-dependent order);
//! the determinism suite's bitwise reference is the fixed-structure launch on the whole device.
//! Use [`relative_error`] (`max |out - ref| / max |ref|`) against them: FP32 results land far under
//! 1e-4, BF16 outputs within BF16's rounding (about 4e-3).

use crate::plan::{Problem, LAYERNORM_EPS};

/// The exact (FP64) output of `problem` for `inputs` (as produced by [`crate::plan::inputs`]).
///
/// # Panics
/// If `inputs` does not match [`Problem::input_elems`].
pub fn compute(problem: &Problem, inputs: &[Vec<f32>]) -> Vec<f64> {
    let lens: Vec<usize> = inputs.iter().map(Vec::len).collect();
    assert_eq!(lens, problem.input_elems(), "inputs do not match {problem:?}");
    let f = |v: &Vec<f32>, i: usize| f64::from(v[i]);
    match *problem {
        Problem::Reduction { .. } => vec![inputs[0].iter().map(|&v| f64::from(v)).sum()],
        Problem::Gemm { m, n, k } => {
            let (m, n, k) = (m as usize, n as usize, k as usize);
            let (a, b) = (&inputs[0], &inputs[1]);
            let mut c = vec![0f64; m * n];
            for i in 0..m {
                for kk in 0..k {
                    let av = f(a, i * k + kk);
                    let row = &mut c[i * n..(i + 1) * n];
                    for (j, cv) in row.iter_mut().enumerate() {
                        *cv += av * f(b, kk * n + j);
                    }
                }
            }
            c
        }
        Problem::LayerNorm { rows, cols } => {
            let (rows, cols) = (rows as usize, cols as usize);
            let (x, gamma, beta) = (&inputs[0], &inputs[1], &inputs[2]);
            let mut y = Vec::with_capacity(rows * cols);
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / cols as f64;
                let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / cols as f64;
                let rstd = 1.0 / (var + f64::from(LAYERNORM_EPS)).sqrt();
                y.extend(row.iter().enumerate().map(|(c, &v)| (f64::from(v) - mean) * rstd * f(gamma, c) + f(beta, c)));
            }
            y
        }
        Problem::Gemv { m, k } => {
            let (m, k) = (m as usize, k as usize);
            (0..m).map(|r| (0..k).map(|c| f(&inputs[0], r * k + c) * f(&inputs[1], c)).sum()).collect()
        }
        Problem::Softmax { rows, cols } => {
            let cols = cols as usize;
            inputs[0]
                .chunks(cols)
                .take(rows as usize)
                .flat_map(|row| softmax(row.iter().map(|&v| f64::from(v))))
                .collect()
        }
        Problem::Attention { len, dim } => {
            let (n, d) = (len as usize, dim as usize);
            let (q, k, v) = (&inputs[0], &inputs[1], &inputs[2]);
            let scale = f64::from(crate::plan::attention_scale(dim));
            let mut o = Vec::with_capacity(n * d);
            for i in 0..n {
                let scores = (0..n).map(|j| (0..d).map(|c| f(q, i * d + c) * f(k, j * d + c)).sum::<f64>() * scale);
                let p = softmax(scores);
                o.extend((0..d).map(|c| (0..n).map(|j| p[j] * f(v, j * d + c)).sum::<f64>()));
            }
            o
        }
    }
}

fn softmax(row: impl Iterator<Item = f64>) -> Vec<f64> {
    let row: Vec<f64> = row.collect();
    let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f64> = row.iter().map(|&v| (v - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|v| v / s).collect()
}

/// `max |out - ref| / max |ref|` (infinite when `out` has a NaN or the lengths differ).
pub fn relative_error(out: &[f32], reference: &[f64]) -> f64 {
    if out.len() != reference.len() {
        return f64::INFINITY;
    }
    let scale = reference.iter().fold(0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    let mut worst = 0f64;
    for (&o, &r) in out.iter().zip(reference) {
        let d = (f64::from(o) - r).abs();
        if d.is_nan() {
            return f64::INFINITY;
        }
        worst = worst.max(d);
    }
    worst / scale
}

/// The error of `out` against the exact output of `problem` for `inputs`, relative to what bounds
/// a correct result's rounding: for the reduction, the sum of the terms' magnitudes (a sum that
/// cancels to near zero has no small error relative to itself, in any summation order); for the
/// other problems, [`relative_error`].
pub fn conditioned_error(problem: &Problem, inputs: &[Vec<f32>], out: &[f32]) -> f64 {
    let exact = compute(problem, inputs);
    match problem {
        Problem::Reduction { .. } if out.len() == 1 => {
            let magnitude: f64 = inputs[0].iter().map(|v| f64::from(v.abs())).sum();
            let d = (f64::from(out[0]) - exact[0]).abs();
            if d.is_nan() {
                return f64::INFINITY;
            }
            d / magnitude.max(f64::MIN_POSITIVE)
        }
        _ => relative_error(out, &exact),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{inputs, DType};

    #[test]
    fn small_cases_by_hand() {
        let p = Problem::Gemm { m: 1, n: 2, k: 2 };
        assert_eq!(compute(&p, &[vec![1.0, 2.0], vec![3.0, 4.0, 5.0, 6.0]]), vec![13.0, 16.0]);
        let p = Problem::Gemv { m: 2, k: 2 };
        assert_eq!(compute(&p, &[vec![1.0, 2.0, 3.0, 4.0], vec![1.0, -1.0]]), vec![-1.0, -1.0]);
        let p = Problem::Reduction { n: 3 };
        assert_eq!(compute(&p, &[vec![1.0, 2.0, 3.5]]), vec![6.5]);
        let p = Problem::LayerNorm { rows: 1, cols: 2 };
        let y = compute(&p, &[vec![1.0, 3.0], vec![1.0, 1.0], vec![0.0, 0.5]]);
        assert!((y[0] + 1.0).abs() < 1e-4 && (y[1] - 1.5).abs() < 1e-4, "{y:?}");
        let p = Problem::Softmax { rows: 1, cols: 2 };
        let y = compute(&p, &[vec![0.0, 2f32.ln()]]);
        assert!((y[0] - 1.0 / 3.0).abs() < 1e-7 && (y[1] - 2.0 / 3.0).abs() < 1e-7, "{y:?}");
        // Two keys with equal scores: the output is the mean of the values.
        let p = Problem::Attention { len: 2, dim: 1 };
        let y = compute(&p, &[vec![1.0, 1.0], vec![1.0, 1.0], vec![2.0, 4.0]]);
        assert!(y.iter().all(|v| (v - 3.0).abs() < 1e-12), "{y:?}");
    }

    #[test]
    fn relative_error_flags_nan_and_length() {
        assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((relative_error(&[1.0, 2.5], &[1.0, 2.0]) - 0.25).abs() < 1e-12);
        assert!(relative_error(&[f32::NAN], &[1.0]).is_infinite());
        assert!(relative_error(&[1.0], &[1.0, 2.0]).is_infinite());
    }

    /// A straightforward FP32 evaluation of the small problems lands within FP32 rounding of FP64.
    #[test]
    fn fp32_evaluation_is_close() {
        let p = Problem::Gemv { m: 8, k: 300 };
        let x = inputs(&p, DType::F32, 3);
        let out: Vec<f32> = (0..8).map(|r| (0..300).map(|c| x[0][r * 300 + c] * x[1][c]).sum()).collect();
        assert!(relative_error(&out, &compute(&p, &x)) < 1e-5);
    }
}
