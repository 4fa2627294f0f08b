//! Element-wise differences between two outputs: ULP distances (in the output's own type),
//! absolute and relative errors, and a ULP-distance histogram drawn as a PNG bar chart (no text:
//! the reports print the bucket labels and counts next to it, so no font is needed).

use std::io::Write;

use anyhow::{bail, Result};
use serde::Serialize;

/// A floating-point element type the comparison understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Float {
    /// IEEE double.
    F64,
    /// IEEE single.
    F32,
    /// bfloat16.
    Bf16,
    /// IEEE half.
    F16,
}

impl Float {
    /// The type of a record's dtype name (`float32`/`torch.float32` spellings too).
    pub fn from_name(name: &str) -> Option<Float> {
        match name.trim_start_matches("torch.") {
            "f64" | "float64" | "double" => Some(Float::F64),
            "f32" | "float32" | "float" => Some(Float::F32),
            "bf16" | "bfloat16" => Some(Float::Bf16),
            "f16" | "float16" | "half" => Some(Float::F16),
            _ => None,
        }
    }

    fn size(self) -> usize {
        match self {
            Float::F64 => 8,
            Float::F32 => 4,
            Float::Bf16 | Float::F16 => 2,
        }
    }

    /// `(value, ordered key)` of each element: the key orders values like the reals and
    /// consecutive representable values differ by 1 (sign-magnitude folded around 0, so +0 and
    /// -0 share key 0). NaN gets `None`.
    fn decode(self, bytes: &[u8]) -> Vec<(f64, Option<i64>)> {
        let fold = |bits: u64, sign_bit: u32| -> i64 {
            let mag = (bits & ((1u64 << sign_bit) - 1)) as i64;
            if bits >> sign_bit & 1 == 1 {
                -mag
            } else {
                mag
            }
        };
        bytes
            .chunks_exact(self.size())
            .map(|c| {
                let (v, bits, sign) = match self {
                    Float::F64 => {
                        let b = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                        (f64::from_bits(b), b, 63)
                    }
                    Float::F32 => {
                        let b = u32::from_le_bytes(c.try_into().expect("4 bytes"));
                        (f64::from(f32::from_bits(b)), u64::from(b), 31)
                    }
                    Float::Bf16 => {
                        let b = u16::from_le_bytes([c[0], c[1]]);
                        (f64::from(vitamin_kernels_cuda::bf16::to_f32(b)), u64::from(b), 15)
                    }
                    Float::F16 => {
                        let b = u16::from_le_bytes([c[0], c[1]]);
                        (f64::from(vitamin_kernels_cuda::f16::to_f32(b)), u64::from(b), 15)
                    }
                };
                (v, (!v.is_nan()).then(|| fold(bits, sign)))
            })
            .collect()
    }
}

/// Labels of the histogram buckets: `0`, `1`, `2`, `3-4`, `5-8`, ... `2^k+1 - 2^(k+1)`, then NaN.
pub fn bucket_label(i: usize) -> String {
    match i {
        0 => "0".into(),
        1 => "1".into(),
        2 => "2".into(),
        NAN_BUCKET => "NaN vs number".into(),
        i => format!("{}-{}", (1u64 << (i - 2)) + 1, 1u64 << (i - 1)),
    }
}

/// Bucket of NaN-against-number elements.
pub const NAN_BUCKET: usize = 66;

fn bucket(ulps: u64) -> usize {
    match ulps {
        0 => 0,
        1 => 1,
        u => (64 - (u - 1).leading_zeros()) as usize + 1,
    }
}

/// How two outputs differ.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    /// Elements compared.
    pub elems: usize,
    /// Elements whose bits differ.
    pub differing: usize,
    /// Index of the first element whose bits differ.
    pub first_differing_index: Option<usize>,
    /// Largest `|a - b|` (infinite where one side is NaN or infinite and the other is not).
    pub max_abs_error: f64,
    /// `max_abs_error / max |a|` (relative to A's largest magnitude).
    pub max_rel_error: f64,
    /// Largest ULP distance among numeric pairs.
    pub max_ulp: u64,
    /// `(bucket label, elements)` for every bucket up to the largest non-empty one (and NaN when
    /// non-empty).
    pub ulp_histogram: Vec<(String, usize)>,
}

/// Compares `a` and `b` element by element as `dtype` (a float type: ULPs and errors), or bytewise
/// for other dtypes (then `max_ulp` is 0 and the errors are NaN).
pub fn diff(dtype: &str, a: &[u8], b: &[u8]) -> Result<Diff> {
    if a.len() != b.len() {
        bail!("outputs differ in length ({} vs {} bytes)", a.len(), b.len());
    }
    let Some(f) = Float::from_name(dtype) else {
        let size = match dtype {
            "i64" | "u64" | "int64" => 8,
            "i32" | "u32" | "int32" => 4,
            "i16" | "int16" => 2,
            _ => 1,
        };
        let first = a.chunks(size).zip(b.chunks(size)).position(|(x, y)| x != y);
        let differing = a.chunks(size).zip(b.chunks(size)).filter(|(x, y)| x != y).count();
        return Ok(Diff {
            elems: a.len() / size,
            differing,
            first_differing_index: first,
            max_abs_error: f64::NAN,
            max_rel_error: f64::NAN,
            max_ulp: 0,
            ulp_histogram: Vec::new(),
        });
    };
    let (va, vb) = (f.decode(a), f.decode(b));
    let mut counts = vec![0usize; NAN_BUCKET + 1];
    let (mut differing, mut first, mut max_abs, mut max_ulp, mut scale) = (0, None, 0f64, 0u64, 0f64);
    for (i, ((ya, ka), (yb, kb))) in va.iter().zip(&vb).enumerate() {
        let size = f.size();
        if a[i * size..(i + 1) * size] != b[i * size..(i + 1) * size] {
            differing += 1;
            first.get_or_insert(i);
        }
        if ya.is_finite() {
            scale = scale.max(ya.abs());
        }
        match (ka, kb) {
            (Some(x), Some(y)) => {
                let u = x.abs_diff(*y);
                max_ulp = max_ulp.max(u);
                counts[bucket(u)] += 1;
                let d = (ya - yb).abs();
                max_abs = max_abs.max(if d.is_nan() { f64::INFINITY } else { d });
            }
            (None, None) => counts[0] += 1,
            _ => {
                counts[NAN_BUCKET] += 1;
                max_abs = f64::INFINITY;
            }
        }
    }
    let top = counts[..NAN_BUCKET].iter().rposition(|&c| c > 0).unwrap_or(0);
    let mut ulp_histogram: Vec<(String, usize)> = (0..=top).map(|i| (bucket_label(i), counts[i])).collect();
    if counts[NAN_BUCKET] > 0 {
        ulp_histogram.push((bucket_label(NAN_BUCKET), counts[NAN_BUCKET]));
    }
    Ok(Diff {
        elems: va.len(),
        differing,
        first_differing_index: first,
        max_abs_error: max_abs,
        max_rel_error: max_abs / scale.max(f64::MIN_POSITIVE),
        max_ulp,
        ulp_histogram,
    })
}

/// The histogram as a PNG bar chart: one bar per bucket (grey for 0 ULP, blue for the others,
/// red for NaN), heights on a log scale (`log10(1 + count)`), a baseline, no text.
pub fn histogram_png(hist: &[(String, usize)]) -> Result<Vec<u8>> {
    const BAR: u32 = 24;
    const GAP: u32 = 6;
    const H: u32 = 160;
    const PAD: u32 = 10;
    let n = hist.len().max(1) as u32;
    let (w, h) = (PAD * 2 + n * (BAR + GAP) - GAP, H + PAD * 2);
    let mut px = vec![255u8; (w * h * 3) as usize];
    let mut put = |x: u32, y: u32, rgb: [u8; 3]| {
        let i = ((y * w + x) * 3) as usize;
        px[i..i + 3].copy_from_slice(&rgb);
    };
    let top = hist.iter().map(|(_, c)| (1.0 + *c as f64).log10()).fold(0f64, f64::max).max(1e-9);
    for (i, (label, count)) in hist.iter().enumerate() {
        let bar_h = ((1.0 + *count as f64).log10() / top * f64::from(H)).round() as u32;
        let color = if label == "0" {
            [150, 150, 150]
        } else if label.starts_with("NaN") {
            [200, 40, 40]
        } else {
            [40, 90, 200]
        };
        let x0 = PAD + i as u32 * (BAR + GAP);
        for x in x0..x0 + BAR {
            for y in (PAD + H - bar_h)..(PAD + H) {
                put(x, y, color);
            }
        }
    }
    for x in PAD / 2..w - PAD / 2 {
        put(x, PAD + H, [0, 0, 0]);
    }
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&px)?;
        writer.finish()?;
    }
    out.flush()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn buckets_and_labels() {
        assert_eq!([0, 1, 2, 3, 4, 5, 8, 9].map(bucket), [0, 1, 2, 3, 3, 4, 4, 5]);
        assert_eq!(bucket_label(3), "3-4");
        assert_eq!(bucket_label(5), "9-16");
        assert_eq!(bucket(u64::MAX), 65);
    }

    #[test]
    fn f32_diff_by_hand() {
        let one_up = f32::from_bits(1f32.to_bits() + 1);
        let a = f32s(&[1.0, 2.0, -0.0, 4.0, f32::NAN]);
        let b = f32s(&[one_up, 2.0, 0.0, 4.0 + 8.0 * f32::EPSILON, 1.0]);
        let d = diff("f32", &a, &b).expect("diff");
        assert_eq!(d.elems, 5);
        assert_eq!(d.differing, 4, "-0 vs +0 differ in bits");
        assert_eq!(d.first_differing_index, Some(0));
        assert_eq!(d.max_ulp, 2);
        assert!(d.max_abs_error.is_infinite(), "NaN vs number");
        assert_eq!(d.ulp_histogram, [("0".into(), 2), ("1".into(), 1), ("2".into(), 1), ("NaN vs number".into(), 1)]);
        assert!(diff("f32", &a, &a[..4]).is_err());
    }

    #[test]
    fn half_types_count_their_own_ulps() {
        let a: Vec<u8> = [0x3c00u16, 0x3c00].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [0x3c03u16, 0xbc00].iter().flat_map(|x| x.to_le_bytes()).collect();
        let d = diff("f16", &a, &b).expect("diff");
        assert_eq!(d.max_ulp, 2 * 0x3c00, "1.0 to -1.0 crosses zero");
        assert_eq!(d.ulp_histogram[3], ("3-4".into(), 1));
        assert!((d.max_abs_error - 2.0).abs() < 1e-12 && (d.max_rel_error - 2.0).abs() < 1e-12);
    }

    #[test]
    fn other_dtypes_compare_bytewise() {
        let d = diff("int64", &[0; 16], &[0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]).expect("diff");
        assert_eq!((d.elems, d.differing, d.first_differing_index), (2, 1, Some(1)));
    }

    #[test]
    fn the_png_is_a_png() {
        let png = histogram_png(&[("0".into(), 100), ("1".into(), 3), ("NaN vs number".into(), 1)]).expect("png");
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let decoder = png::Decoder::new(&png[..]);
        let reader = decoder.read_info().expect("decodes");
        assert_eq!(reader.info().width, 10 * 2 + 3 * 30 - 6);
    }

    proptest! {
        /// Against a reference: the ULP distance of two finite f32 equals the number of
        /// representable values stepped over (computed by walking `next_up` on small gaps).
        #[test]
        fn ulp_distance_counts_representable_steps(x in -1e6f32..1e6, steps in 0u32..50) {
            let mut y = x;
            for _ in 0..steps {
                y = f32::from_bits(if y >= 0.0 && y.to_bits() >> 31 == 0 { y.to_bits() + 1 } else if y == 0.0 { 1 } else { y.to_bits() - 1 });
            }
            let d = diff("f32", &f32s(&[x]), &f32s(&[y])).expect("diff");
            prop_assert_eq!(d.max_ulp, u64::from(steps));
        }
    }
}
