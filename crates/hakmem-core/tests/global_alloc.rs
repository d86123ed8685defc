//! The test harness itself runs on hakmem: every allocation below, and the
//! harness's own, goes through `Hakmem`.

use hakmem_core::Hakmem;
use std::alloc::{GlobalAlloc, Layout};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

fn fill(p: *mut u8, len: usize, seed: u8) {
    for i in 0..len {
        // SAFETY: p is a live block of at least len bytes.
        unsafe { *p.add(i) = seed.wrapping_add(i as u8) };
    }
}

fn check(p: *const u8, len: usize, seed: u8) -> bool {
    // SAFETY: p is a live block of at least len bytes.
    (0..len).all(|i| unsafe { *p.add(i) } == seed.wrapping_add(i as u8))
}

#[test]
fn every_power_of_two_alignment_up_to_4_mib_is_honoured() {
    let mut align = 1;
    while align <= 4 << 20 {
        for size in [1, 7, 16, 100, 1000, 4096, 70_000, 3 << 20] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let p = GLOBAL.alloc(layout);
                assert!(!p.is_null(), "size {size} align {align}");
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                assert!(hakmem_core::usable_size(p) >= size);
                fill(p, size.min(4096), 3);
                *p.add(size - 1) = 9;
                assert!(check(p, size.min(4096).min(size - 1), 3));
                GLOBAL.dealloc(p, layout);
            }
        }
        align *= 2;
    }
}

#[test]
fn alignments_beyond_4_mib_up_to_1_gib_are_honoured() {
    for shift in 23..=30 {
        let layout = Layout::from_size_align(100, 1 << shift).unwrap();
        // SAFETY: non-zero size; freed with the same layout.
        unsafe {
            let p = GLOBAL.alloc(layout);
            assert!(!p.is_null(), "align 2^{shift}: there is address space for it");
            assert_eq!(p as usize % (1 << shift), 0);
            p.write_bytes(0xa5, 100);
            assert!(hakmem_core::is_hakmem_segment(p));
            GLOBAL.dealloc(p, layout);
        }
    }
}

#[test]
fn alignments_that_are_not_powers_of_two_give_null_and_einval() {
    for align in [0, 3, 24, 48, 100, (1 << 21) + 1, 3 << 21, usize::MAX] {
        for size in [1, 100, 5000, 100_000, 3 << 20] {
            hakmem_core::os_errno_reset();
            let p = hakmem_core::alloc(size, align);
            assert!(p.is_null(), "size {size} align {align}");
            assert_eq!(hakmem_core::os_errno(), libc::EINVAL, "size {size} align {align}");
            let z = hakmem_core::alloc_zeroed(size, align);
            assert!(z.is_null(), "zeroed: size {size} align {align}");
        }
    }
    // realloc keeps the block and returns null when the alignment is bad.
    let p = hakmem_core::malloc(64);
    // SAFETY: p is a live block.
    unsafe {
        assert!(hakmem_core::realloc(p, 100_000, 3 << 21).is_null());
        hakmem_core::free(p);
    }
}

#[test]
fn alloc_zeroed_is_zero_also_after_reuse() {
    for size in [8, 24, 200, 1024, 4096, 5000, 20_000, 40_000, 300_000, 3 << 20] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        for round in 0..3 {
            // SAFETY: non-zero size; freed with the same layout.
            unsafe {
                let mut blocks = Vec::new();
                for _ in 0..20 {
                    let p = GLOBAL.alloc_zeroed(layout);
                    assert!(!p.is_null());
                    assert!((0..size).all(|i| *p.add(i) == 0), "size {size} round {round}");
                    std::ptr::write_bytes(p, 0xab, size);
                    blocks.push(p);
                }
                for p in blocks {
                    GLOBAL.dealloc(p, layout);
                }
            }
        }
    }
}

#[test]
fn realloc_keeps_contents_across_every_size_range() {
    let sizes = [
        1,
        15,
        16,
        17,
        100,
        1024,
        1025,
        8000,
        65536,
        65537,
        500_000,
        2 << 20,
        5 << 20,
        100,
        3,
    ];
    for align in [8, 64, 4096] {
        let mut size = sizes[0];
        // SAFETY: the block is live and resized with its current layout.
        unsafe {
            let mut p = GLOBAL.alloc(Layout::from_size_align(size, align).unwrap());
            fill(p, size, 7);
            for &new_size in &sizes[1..] {
                let q = GLOBAL.realloc(p, Layout::from_size_align(size, align).unwrap(), new_size);
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0);
                assert!(check(q, size.min(new_size), 7), "{size} -> {new_size}");
                fill(q, new_size, 7);
                p = q;
                size = new_size;
            }
            GLOBAL.dealloc(p, Layout::from_size_align(size, align).unwrap());
        }
    }
}

#[test]
#[cfg_attr(feature = "valgrind", ignore = "the valgrind feature's realloc always moves")]
fn realloc_within_the_block_stays_in_place() {
    let layout = Layout::from_size_align(1000, 8).unwrap();
    // SAFETY: the block is live and resized with its current layout.
    unsafe {
        let p = GLOBAL.alloc(layout);
        let usable = hakmem_core::usable_size(p);
        assert!(usable >= 1000);
        let q = GLOBAL.realloc(p, layout, usable);
        assert_eq!(p, q);
        GLOBAL.dealloc(q, Layout::from_size_align(usable, 8).unwrap());
    }
}

#[test]
fn live_blocks_never_overlap() {
    let mut blocks: Vec<(usize, usize)> = Vec::new();
    let mut x = 12345u64;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = 1 + (x as usize % 3000);
        let p = hakmem_core::malloc(size);
        blocks.push((p as usize, size));
    }
    let mut sorted = blocks.clone();
    sorted.sort_unstable();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "overlap {:x?}", w);
    }
    for (p, _) in blocks {
        // SAFETY: p is a live block from malloc above.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
}

#[test]
fn malloc_of_zero_gives_unique_pointers() {
    let a = hakmem_core::malloc(0);
    let b = hakmem_core::malloc(0);
    assert!(!a.is_null() && !b.is_null());
    assert_ne!(a, b);
    // SAFETY: both are live blocks.
    unsafe {
        hakmem_core::free(a);
        hakmem_core::free(b);
    }
}

#[test]
fn impossible_sizes_return_null_with_enomem() {
    for (size, align) in [
        (usize::MAX - 4096, 16),
        (isize::MAX as usize, 16),
        (1 << 47, 16),
        (1 << 47, 1 << 22),
    ] {
        hakmem_core::os_errno_reset();
        let p = hakmem_core::alloc(size, align);
        assert!(p.is_null(), "size {size}");
        assert_eq!(hakmem_core::os_errno(), libc::ENOMEM);
    }
}

#[test]
fn huge_realloc_growth_keeps_contents_without_copying() {
    let layout = Layout::from_size_align(3 << 20, 16).unwrap();
    // SAFETY: the block is live and resized with its current layout.
    unsafe {
        let mut p = GLOBAL.alloc(layout);
        let mut size = layout.size();
        for i in 0..size {
            *p.add(i) = (i % 251) as u8;
        }
        for step in 1..=6 {
            let new_size = size * 2;
            let before = hakmem_core::os_counters().mremap;
            let old = p;
            p = GLOBAL.realloc(p, Layout::from_size_align(size, 16).unwrap(), new_size);
            assert!(!p.is_null());
            assert!(
                (0..3 << 20).step_by(4093).all(|i| *p.add(i) == (i % 251) as u8),
                "step {step}"
            );
            // Grown in place (the huge arena's units after it were free)
            // or moved by mremap, never copied. (The valgrind feature's
            // realloc always moves, copying.)
            if !cfg!(feature = "secure") && !cfg!(feature = "valgrind") {
                let moved = hakmem_core::os_counters().mremap > before;
                assert!(p == old || moved, "step {step}: copied");
            }
            size = new_size;
        }
        GLOBAL.dealloc(p, Layout::from_size_align(size, 16).unwrap());
    }
}

#[test]
fn live_blocks_of_every_kind_pass_the_pointer_checks() {
    for (size, align) in [
        (1, 16),
        (100, 16),
        (5000, 16),
        (40_000, 16),
        (300_000, 16),
        (3 << 20, 16),
        (100, 4096),
    ] {
        let p = hakmem_core::alloc(size, align);
        // SAFETY: p is a live block; check_block only reads hakmem metadata.
        unsafe {
            assert!(hakmem_core::check_block(p, "test"), "size {size} align {align}");
            assert!(hakmem_core::usable_size(p) >= size);
            hakmem_core::free_checked(p);
        }
    }
}
