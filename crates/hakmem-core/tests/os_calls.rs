//! Steady state makes no system calls: 10 M operations of the random-mixed
//! workload make a handful of OS memory calls at start and none per operation.

use hakmem_core::Hakmem;
use std::alloc::{GlobalAlloc, Layout};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

fn calls() -> usize {
    let c = hakmem_core::os_counters();
    c.mmap + c.munmap + c.madvise + c.mremap
}

#[test]
fn steady_random_mixed_makes_no_os_calls_per_operation() {
    const WS: usize = 400;
    let mut slots: Vec<(*mut u8, usize)> = vec![(std::ptr::null_mut(), 0); WS];
    let mut x = 1u64;
    let before = calls();
    for _ in 0..10_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = &mut slots[x as usize % WS];
        // SAFETY: each slot holds null or a live block of its recorded size.
        unsafe {
            if slot.0.is_null() {
                let size = 16 + (x >> 32) as usize % 1009;
                let p = GLOBAL.alloc(Layout::from_size_align_unchecked(size, 8));
                *p = 1;
                *slot = (p, size);
            } else {
                GLOBAL.dealloc(slot.0, Layout::from_size_align_unchecked(slot.1, 8));
                slot.0 = std::ptr::null_mut();
            }
        }
    }
    let made = calls() - before;
    eprintln!(
        "OS memory calls for 10 M operations: {made} ({:?})",
        hakmem_core::os_counters()
    );
    assert!(made <= 50, "{made} OS memory calls");
}
