//! A thread that needs a segment reclaims abandoned segments only up to
//! the first with room for its request; the others wait for the next
//! thread (`thread::abandon::segment_acquire`). Taking them all would make
//! one thread of a burst the owner of everything its predecessors left,
//! while the others map fresh segments (docs/BENCHMARKS.md, "Threads that
//! come and go").
//!
//! One test in its own binary: the abandoned list is global, and no other
//! thread may take from it while this one counts.

use hakmem_core::Hakmem;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// Segments the exiting thread leaves, each holding one live block.
const LEFT: usize = 8;

#[test]
#[cfg_attr(
    feature = "secure",
    ignore = "secure builds: blocks this large are huge mappings, not segments"
)]
fn a_new_thread_reclaims_one_abandoned_segment_with_room_not_all() {
    // 1 MiB blocks: 16 of a segment's 31 units, so one per segment, and
    // each segment keeps 15 units free.
    let size = 1 << 20;
    let before = hakmem_core::abandoned_count();
    let left: Vec<usize> = std::thread::spawn(move || {
        (0..LEFT)
            .map(|_| {
                let p = hakmem_core::malloc(size);
                assert!(!p.is_null());
                p as usize
            })
            .collect()
    })
    .join()
    .unwrap();
    // More than a retired heap may own: the exited heap was abandoned,
    // its segments published one by one.
    let abandoned = hakmem_core::abandoned_count();
    assert!(
        abandoned >= before + LEFT,
        "{abandoned} abandoned after the exit, {before} before"
    );
    // A new thread asks for 512 KiB (8 units): the first abandoned segment
    // it looks at has room.
    let (p, during) = std::thread::spawn(move || {
        let p = hakmem_core::malloc(512 << 10) as usize;
        (p, hakmem_core::abandoned_count())
    })
    .join()
    .unwrap();
    assert!(p != 0);
    assert_eq!(
        during,
        abandoned - 1,
        "the new thread reclaimed {} abandoned segments for one request",
        abandoned - during
    );
    // The block went into the segment it reclaimed, not a fresh one: it
    // shares a segment with one of the blocks left behind.
    let segment = |a: usize| a & !(hakmem_core::SEGMENT_SIZE - 1);
    assert!(
        left.iter().any(|&q| segment(q) == segment(p)),
        "the request was served from a segment other than the reclaimed one"
    );
    // SAFETY: blocks of this allocator, each freed once.
    unsafe {
        hakmem_core::free(p as *mut u8);
        for q in left {
            hakmem_core::free(q as *mut u8);
        }
    }
}
