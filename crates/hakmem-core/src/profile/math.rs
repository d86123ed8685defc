//! The two functions of `f64` the profiler needs and `core` lacks (no
//! libm in a `no_std` crate): the natural logarithm (the exponential
//! intervals) and `exp(-x)` (the samples' weights). Relative error below
//! 1e-9 on their domains (1e-12 away from `ln(1)`), far under the
//! sampling error.

const LN2: f64 = core::f64::consts::LN_2;

/// `ln(x)` for a finite `x > 0`.
pub(super) fn ln(x: f64) -> f64 {
    debug_assert!(x > 0.0 && x.is_finite());
    // x = m * 2^e with m in [1, 2) (x is normal here: at least 2^-53).
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    // ln(m) = 2 atanh(t), t = (m - 1) / (m + 1) in [0, 1/3).
    let t = (m - 1.0) / (m + 1.0);
    let t2 = t * t;
    let mut term = t;
    let mut sum = 0.0;
    let mut k = 1.0;
    while k < 40.0 {
        sum += term / k;
        term *= t2;
        k += 2.0;
    }
    e as f64 * LN2 + 2.0 * sum
}

/// `exp(-x)` for `x >= 0`.
pub(super) fn exp_neg(x: f64) -> f64 {
    debug_assert!(x >= 0.0);
    if x > 700.0 {
        return 0.0;
    }
    // x = k ln 2 + r, r in [0, ln 2): exp(-x) = 2^-k exp(-r).
    let k = (x / LN2) as i64;
    let r = x - k as f64 * LN2;
    let mut term = 1.0;
    let mut sum = 1.0;
    let mut n = 1.0;
    while n < 25.0 {
        term *= -r / n;
        sum += term;
        n += 1.0;
    }
    sum * f64::from_bits(((1023 - k) as u64) << 52)
}

/// The probability that a block of `size` bytes is sampled at a mean
/// interval of `rate` bytes: `1 - exp(-size / rate)` (never 0 for a
/// nonzero size; 1 for a block of zero bytes, which can only be sampled
/// when an interval ends exactly on it).
pub(super) fn sample_probability(size: usize, rate: usize) -> f64 {
    if size == 0 {
        return 1.0;
    }
    let x = size as f64 / rate as f64;
    if x < 1e-3 {
        // 1 - exp(-x) without the cancellation: x - x²/2 + x³/6.
        x - x * x / 2.0 + x * x * x / 6.0
    } else {
        1.0 - exp_neg(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_matches_known_values() {
        let cases = [
            (1.0, 0.0),
            (2.0, LN2),
            (0.5, -LN2),
            (core::f64::consts::E, 1.0),
            (10.0, core::f64::consts::LN_10),
            (1e-15, -34.538_776_394_910_684),
            (0.999_999, -1.000_000_500_029_089e-6),
        ];
        for (x, want) in cases {
            let got = ln(x);
            // Near 1 the exponent's ln 2 and the mantissa's cancel: 1e-9.
            assert!((got - want).abs() <= 1e-9 * want.abs(), "ln({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn exp_neg_matches_known_values() {
        let cases = [
            (0.0, 1.0),
            (1.0, 0.367_879_441_171_442_33),
            (LN2, 0.5),
            (10.0, 4.539_992_976_248_485e-5),
            (100.0, 3.720_075_976_020_836e-44),
        ];
        for (x, want) in cases {
            let got = exp_neg(x);
            assert!((got - want).abs() <= 1e-12 * want, "exp(-{x}) = {got}, want {want}");
        }
        assert_eq!(exp_neg(800.0), 0.0);
    }

    #[test]
    fn probability_is_continuous_across_the_series_switch() {
        let rate = 512 * 1024;
        let below = sample_probability(524, rate); // x just under 1e-3
        let above = sample_probability(525, rate);
        assert!(below < above && above - below < 3e-6, "{below} {above}");
        assert!((sample_probability(rate, rate) - (1.0 - 0.367_879_441_171_442_33)).abs() < 1e-12);
    }
}
