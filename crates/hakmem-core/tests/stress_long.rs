//! A stress test in the spirit of mimalloc's test-stress: N threads
//! allocate random sizes (power-of-two biased, with occasional huge blocks),
//! fill them with a pattern, and swap them into a shared array of slots,
//! freeing (after checking) whatever they swap out — so most blocks are
//! freed by another thread than the one that allocated them. Every round
//! the threads end and new ones start while their blocks live on in the
//! slots. Runs about 20 s by default; `STRESS_SECONDS=3600 cargo test
//! --release -p hakmem-core --test stress_long -- --nocapture` runs an hour.

use hakmem_core::Hakmem;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

const THREADS: usize = 4;
const SLOTS: usize = 4096;
const OPS_PER_ROUND: usize = 20_000;

/// A block's header: its size and a key from which every byte is derived.
const HEADER: usize = 16;

mod common;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        common::xorshift(&mut self.0)
    }
    fn size(&mut self) -> usize {
        let r = self.next();
        let base = if r.is_multiple_of(4) {
            1usize << ((r >> 8) % 12)
        } else {
            1 + (r >> 8) as usize % 2048
        };
        match r % 1000 {
            0 => (4 << 20) + base, // huge
            1..=9 => base * 64,    // medium/large
            _ => base,
        }
    }
}

fn pattern(key: usize, i: usize) -> u8 {
    (key >> 3).wrapping_add(i.wrapping_mul(131)) as u8
}

fn make(rng: &mut Rng) -> usize {
    let size = HEADER + rng.size();
    let p = hakmem_core::malloc(size);
    assert!(!p.is_null());
    let key = p as usize ^ rng.next() as usize;
    // SAFETY: p is a live block of `size` bytes.
    unsafe {
        (p as *mut usize).write(size);
        (p as *mut usize).add(1).write(key);
        for i in (HEADER..size).step_by(97).chain([size - 1]) {
            *p.add(i) = pattern(key, i);
        }
    }
    p as usize
}

fn check_and_free(addr: usize) {
    let p = addr as *mut u8;
    // SAFETY: addr is a live block made by `make`, owned by the caller.
    unsafe {
        let size = (p as *const usize).read();
        let key = (p as *const usize).add(1).read();
        for i in (HEADER..size).step_by(97).chain([size - 1]) {
            assert_eq!(*p.add(i), pattern(key, i), "block {addr:#x} size {size} byte {i}");
        }
        hakmem_core::free(p);
    }
}

#[test]
fn threads_swap_blocks_through_shared_slots() {
    let seconds: u64 = std::env::var("STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let slots: &'static [AtomicUsize] = Box::leak((0..SLOTS).map(|_| AtomicUsize::new(0)).collect());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut round = 0u64;
    while Instant::now() < deadline {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                std::thread::spawn(move || {
                    let mut rng = Rng(round.wrapping_mul(1_000_003) + t as u64 * 7919 + 1);
                    for _ in 0..OPS_PER_ROUND {
                        let slot = &slots[rng.next() as usize % SLOTS];
                        let new = if rng.next().is_multiple_of(4) {
                            0
                        } else {
                            make(&mut rng)
                        };
                        let old = slot.swap(new, Ordering::AcqRel);
                        if old != 0 {
                            check_and_free(old);
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        round += 1;
    }
    for slot in slots {
        let old = slot.swap(0, Ordering::AcqRel);
        if old != 0 {
            check_and_free(old);
        }
    }
    eprintln!("{round} rounds of {THREADS} threads x {OPS_PER_ROUND} operations");
    assert!(round > 0);
    assert!(
        hakmem_core::abandoned_count() < 64,
        "abandoned {}",
        hakmem_core::abandoned_count()
    );
}
