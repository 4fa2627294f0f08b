//! BF16 on the host: the same round-to-nearest-even conversion as `f32_to_bf16` in the CUDA source.

/// Rounds an `f32` to the nearest BF16 (ties to even); NaN stays a quiet NaN.
pub fn from_f32(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    let rounding = 0x7fff + ((u >> 16) & 1);
    (u.wrapping_add(rounding) >> 16) as u16
}

/// Widens a BF16 to `f32` (exact).
pub fn to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Reference: pick the nearer of the two BF16 neighbours in f64, ties to the even one.
    fn nearest(f: f32) -> u16 {
        let lo = (f.to_bits() >> 16) as u16;
        let hi = lo.wrapping_add(1);
        let (dl, dh) = ((f64::from(f) - f64::from(to_f32(lo))).abs(), (f64::from(to_f32(hi)) - f64::from(f)).abs());
        if dl < dh || (dl == dh && lo.is_multiple_of(2)) {
            lo
        } else {
            hi
        }
    }

    #[test]
    fn specials() {
        assert_eq!(from_f32(0.0), 0);
        assert_eq!(from_f32(-0.0), 0x8000);
        assert_eq!(from_f32(1.0), 0x3f80);
        assert_eq!(from_f32(f32::INFINITY), 0x7f80);
        assert!(to_f32(from_f32(f32::NAN)).is_nan());
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(from_f32(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(from_f32(1.0 + 3.0 / 256.0), 0x3f82);
    }

    proptest! {
        #[test]
        fn rounds_to_nearest_even(bits in any::<u32>()) {
            let f = f32::from_bits(bits);
            prop_assume!(f.is_finite() && f.abs() < 3.3e38);
            prop_assert_eq!(from_f32(f), nearest(f));
        }

        #[test]
        fn widening_then_rounding_is_identity(h in any::<u16>()) {
            let f = to_f32(h);
            prop_assume!(!f.is_nan());
            prop_assert_eq!(from_f32(f), h);
        }
    }
}
