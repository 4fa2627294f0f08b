//! FP16 on the host: the same conversions as `f32_to_f16` / `f16_to_f32` in the shared kernel
//! source (`kernels/common/suite.cu`), bit for bit (round to nearest even, subnormals kept).

/// Rounds an `f32` to the nearest IEEE half (ties to even); NaN stays a quiet NaN.
pub fn from_f32(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = (x >> 16) & 0x8000;
    let ax = x & 0x7fff_ffff;
    let bits = if ax > 0x7f80_0000 {
        sign | 0x7e00 | ((ax >> 13) & 0x3ff)
    } else if ax >= 0x477f_f000 {
        // 65520 and above round to infinity (65504 is the largest half).
        sign | 0x7c00
    } else if ax >= 0x3880_0000 {
        // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to even.
        sign | ((ax - 0x3800_0000 + 0xfff + ((ax >> 13) & 1)) >> 13)
    } else if ax < 0x3300_0000 {
        // Below 2^-25 (half the smallest subnormal; exactly 2^-25 ties to zero): zero.
        sign
    } else {
        // Subnormal half: count units of 2^-24, rounding to even.
        let m = (ax & 0x7f_ffff) | 0x80_0000;
        let shift = 126 - (ax >> 23);
        let (mut q, rem, half) = (m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
        if rem > half || (rem == half && q & 1 == 1) {
            q += 1;
        }
        sign | q
    };
    bits as u16
}

/// Widens a half to `f32` (exact).
pub fn to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let (e, m) = ((h >> 10) & 0x1f, h & 0x3ff);
    if e == 0x1f {
        return f32::from_bits(sign | 0x7f80_0000 | (m << 13));
    }
    if e == 0 {
        let v = m as f32 * 5.960_464_5e-8;
        return if sign != 0 { -v } else { v };
    }
    f32::from_bits(sign | ((e + 112) << 23) | (m << 13))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn specials() {
        assert_eq!(from_f32(0.0), 0);
        assert_eq!(from_f32(-0.0), 0x8000);
        assert_eq!(from_f32(1.0), 0x3c00);
        assert_eq!(from_f32(65504.0), 0x7bff);
        assert_eq!(from_f32(65519.0), 0x7bff);
        assert_eq!(from_f32(65520.0), 0x7c00);
        assert_eq!(from_f32(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(from_f32(2f32.powi(-24)), 1);
        assert_eq!(from_f32(2f32.powi(-25)), 0, "a tie at half the smallest subnormal goes to even (zero)");
        assert_eq!(from_f32(1.5 * 2f32.powi(-24)), 2, "1.5 units ties to even (2)");
        assert!(to_f32(from_f32(f32::NAN)).is_nan());
        assert_eq!(to_f32(1), 2f32.powi(-24));
        assert_eq!(to_f32(0x8001), -(2f32.powi(-24)));
    }

    proptest! {
        /// The `half` crate's conversion (round to nearest even) is the reference model.
        #[test]
        fn rounds_like_the_reference(bits in any::<u32>()) {
            let f = f32::from_bits(bits);
            prop_assume!(!f.is_nan());
            prop_assert_eq!(from_f32(f), half::f16::from_f32(f).to_bits());
        }

        #[test]
        fn widens_like_the_reference(h in any::<u16>()) {
            let r = half::f16::from_bits(h).to_f32();
            if r.is_nan() {
                prop_assert!(to_f32(h).is_nan());
            } else {
                prop_assert_eq!(to_f32(h).to_bits(), r.to_bits());
            }
        }

        #[test]
        fn widening_then_rounding_is_identity(h in any::<u16>()) {
            prop_assume!(!to_f32(h).is_nan());
            prop_assert_eq!(from_f32(to_f32(h)), h);
        }
    }
}
