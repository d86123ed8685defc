//! The fuzzer's op interpreter (fuzz/src/lib.rs), driven by a seeded PRNG:
//! the same checks as `cargo fuzz run ops`, deterministic, in the normal suite.

#[path = "../../../fuzz/src/lib.rs"]
mod ops;

fn program(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn seeded_programs_keep_the_allocator_contract() {
    for seed in 0..2000 {
        ops::run(&program(seed, 3000));
    }
}

#[test]
fn regression_inputs() {
    // Zero-sized blocks at large alignments (found by the C edge-case test:
    // the block sat at the very end of its mapping).
    ops::run(&[0, 0, 0, 0, 255, 3, 0]);
    ops::run(&[0, 15, 0, 0, 254, 0, 0, 0, 0, 215, 5, 0, 15, 1, 0]);
}
