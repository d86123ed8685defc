//! The benchmark's pseudo-random numbers: SplitMix64 (Steele, Lea and Flood,
//! "Fast splittable pseudorandom number generators", 2014).
//!
//! Chosen because it is a handful of instructions per draw (an add and three
//! xor-shift-multiply steps), accepts any 64-bit seed including 0, and is
//! trivial to mirror bit for bit in `c/bench.c`, so the Rust and the
//! `--preload` runs draw the same sizes and slots for the same seed. Ranges
//! use Lemire's multiply-shift (no division in the loop).
//!
//! Determinism is part of the contract: the same seed gives the same sequence
//! on every run and for every allocator, so all allocators see the identical
//! request stream.

/// SplitMix64's increment: the odd 64-bit golden-ratio constant.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// A SplitMix64 generator.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The generator for thread `index` of a multi-threaded workload: the
    /// `index`-th output of `Rng::new(seed)` as its seed. Outputs are well
    /// mixed, so the per-thread streams start far apart (seeding with
    /// `seed + index` would make them the same stream shifted by one draw).
    pub fn for_thread(seed: u64, index: usize) -> Rng {
        let mut seeder = Rng::new(seed);
        let mut thread_seed = seeder.next_u64();
        for _ in 0..index {
            thread_seed = seeder.next_u64();
        }
        Rng::new(thread_seed)
    }

    /// The next 64 random bits.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (`bound > 0`), by Lemire's multiply-shift.
    #[inline(always)]
    pub fn below(&mut self, bound: usize) -> usize {
        debug_assert!(bound > 0);
        ((u128::from(self.next_u64()) * bound as u128) >> 64) as usize
    }

    /// A value in `min..=max` (`min <= max`).
    #[inline(always)]
    pub fn in_range(&mut self, min: usize, max: usize) -> usize {
        debug_assert!(min <= max);
        min + self.below(max - min + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_same_sequence() {
        let a: Vec<u64> = {
            let mut r = Rng::new(42);
            (0..100).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Rng::new(42);
            (0..100).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
    }

    #[test]
    fn different_seeds_give_different_sequences() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(2);
        let same = (0..100).filter(|_| a.next_u64() == b.next_u64()).count();
        assert_eq!(same, 0);
    }

    /// Pins the algorithm: these are SplitMix64's published first outputs for
    /// seed 0, which `c/bench.c` must reproduce too.
    #[test]
    fn matches_reference_splitmix64_outputs() {
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.next_u64(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn in_range_stays_within_bounds_and_reaches_both_ends() {
        let mut r = Rng::new(7);
        let (mut saw_min, mut saw_max) = (false, false);
        for _ in 0..100_000 {
            let v = r.in_range(16, 40);
            assert!((16..=40).contains(&v), "{v} outside [16, 40]");
            saw_min |= v == 16;
            saw_max |= v == 40;
        }
        assert!(saw_min && saw_max);
    }

    #[test]
    fn in_range_of_one_value_is_that_value() {
        let mut r = Rng::new(3);
        assert!((0..1000).all(|_| r.in_range(1024, 1024) == 1024));
    }

    #[test]
    fn below_is_roughly_uniform() {
        let mut r = Rng::new(9);
        let mut counts = [0u32; 8];
        for _ in 0..80_000 {
            counts[r.below(8)] += 1;
        }
        for c in counts {
            assert!(
                (9_000..11_000).contains(&c),
                "bucket count {c} far from 10000: {counts:?}"
            );
        }
    }

    #[test]
    fn thread_streams_differ_and_are_deterministic() {
        let first = |seed, t| Rng::for_thread(seed, t).next_u64();
        assert_eq!(first(1, 0), first(1, 0));
        assert_ne!(first(1, 0), first(1, 1));
        assert_ne!(first(1, 1), first(2, 1));
    }
}
