//! A thread that needs a page of one class, and finds an abandoned segment
//! with no free run but with a page of that class holding free blocks,
//! takes its block there (`thread::abandon::segment_acquire` stops
//! reclaiming once the class has a page). Before, it went on reclaiming
//! up to 64 segments and then took a fresh one: a program whose threads
//! each leave a few blocks of many classes behind got a segment per
//! thread (5 000 such threads: 1.3 GB where mimalloc3 needed 690 MB).
//!
//! Alone in its binary: the abandoned list and the segment cache are
//! global.

use hakmem_core::{Hakmem, SEGMENT_SIZE};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// A class whose pages span several 64 KiB units: the units that the
/// thread's other pages (std's own small allocations) free at its exit
/// leave runs too short for one.
const SIZE: usize = 12 * 1024;
/// Blocks the first thread allocates: more than a segment holds.
const COUNT: usize = 2 * hakmem_core::SEGMENT_SIZE / SIZE;

fn segment(p: usize) -> usize {
    p & !(SEGMENT_SIZE - 1)
}

#[test]
#[cfg_attr(
    feature = "secure",
    ignore = "secure builds: a page's blocks and guards are laid out per unit, and delayed reuse hands out a page's fresh blocks first"
)]
fn a_reclaimed_page_of_the_class_serves_before_a_fresh_segment() {
    // A thread fills its first segment with pages of one class, keeps one
    // block in each 64 KiB unit and frees the rest: no run left for a
    // page of the class, every page with free blocks. The blocks are
    // listed on the stack, so that no page of another class empties.
    let (kept, n) = std::thread::spawn(|| {
        let mut blocks = [0usize; COUNT];
        for b in blocks.iter_mut() {
            let p = hakmem_core::malloc(SIZE);
            assert!(!p.is_null());
            *b = p as usize;
        }
        let first = segment(blocks[0]);
        let mut kept = [0usize; 32];
        let mut n = 0;
        let mut unit = usize::MAX;
        for &p in &blocks {
            if segment(p) == first && p / hakmem_core::PAGE_SIZE != unit {
                unit = p / hakmem_core::PAGE_SIZE;
                kept[n] = p;
                n += 1;
            } else {
                // SAFETY: p is a live block, freed once.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        }
        (kept, n)
    })
    .join()
    .unwrap();
    assert!(n >= 16, "{n} units of {SIZE}-byte blocks in the first segment");
    let kept = &kept[..n];
    // Its heap, retired at the exit, is abandoned: the segment goes on
    // the abandoned list (and the empty second one to the cache).
    hakmem_core::collect(true);
    assert!(hakmem_core::abandoned_count() >= 1, "the segment was abandoned");
    let full = segment(kept[0]);
    let got = std::thread::spawn(|| hakmem_core::malloc(SIZE) as usize)
        .join()
        .unwrap();
    assert_eq!(
        segment(got),
        full,
        "a new thread's {SIZE}-byte block came from {:#x}, not the abandoned segment {full:#x} with free blocks of that size",
        segment(got)
    );
    for &p in kept.iter().chain([&got]) {
        // SAFETY: live blocks, freed once each.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
}
