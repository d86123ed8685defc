//! Segments of an exited thread that nobody reclaims still give their free
//! pages back (the global purge pass's look at the abandoned list).
//!
//! A thread allocates about 5 MiB of blocks, hands them all to the main
//! thread and exits: its heap is retired whole (nothing of it is free, so
//! its tidying purges nothing) and waits for a new thread, which never
//! comes. The main thread frees all but one block per segment: remote
//! frees, which wait on the pages' remote stacks, since no thread owns
//! the retired heap. About a second later the global purge pass abandons
//! the heap: the pages it finds empty are released with a purge deadline,
//! and the segments — each still holding its one block — go on the
//! abandoned list. Only that list's purge gives those pages back: the
//! committed bytes must fall by most of what was freed. (The test used
//! before, a thread freeing its own blocks before it exited, passed with
//! the abandoned list's purge deleted: the exit had purged it all.)

use hakmem_core::Hakmem;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

const BLOCKS: usize = 5000;
const SIZE: usize = 1000;

#[test]
fn free_pages_of_abandoned_segments_are_purged() {
    let blocks: Vec<usize> = std::thread::spawn(|| {
        (0..BLOCKS)
            .map(|i| {
                let p = hakmem_core::malloc(SIZE);
                // SAFETY: p is a live block of SIZE bytes.
                unsafe { std::ptr::write_bytes(p, i as u8, SIZE) };
                p as usize
            })
            .collect()
    })
    .join()
    .unwrap();
    assert_eq!(hakmem_core::stats().heaps_retired, 1, "the thread's heap waits");
    // One block kept per segment, so each is abandoned, not freed.
    let mut kept: BTreeMap<usize, usize> = BTreeMap::new();
    let mut freed = 0;
    for p in blocks {
        let segment = p & !(hakmem_core::SEGMENT_SIZE - 1);
        if let std::collections::btree_map::Entry::Vacant(e) = kept.entry(segment) {
            e.insert(p);
        } else {
            // SAFETY: a live block of the exited thread, freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
            freed += SIZE;
        }
    }
    assert!(kept.len() >= 2, "the blocks span several segments");
    let full = hakmem_core::stats().committed_bytes;
    // Light allocation, so that slow paths run the global purge pass
    // (and push this thread's batches of remote frees).
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut committed = full;
    while Instant::now() < deadline && committed + freed / 2 > full {
        for i in 0..2000 {
            std::hint::black_box(vec![i as u8; 16 + i % 1000]);
        }
        std::thread::sleep(Duration::from_millis(5));
        committed = hakmem_core::stats().committed_bytes;
    }
    let s = hakmem_core::stats();
    eprintln!(
        "committed: {} KiB with the blocks, {} KiB later ({} KiB freed); retired {}, abandoned {}",
        full >> 10,
        committed >> 10,
        freed >> 10,
        s.heaps_retired,
        hakmem_core::abandoned_count()
    );
    assert_eq!(s.heaps_retired, 0, "the retired heap was abandoned after its wait");
    assert!(
        hakmem_core::abandoned_count() >= kept.len(),
        "the kept blocks hold abandoned segments"
    );
    assert!(
        committed + freed / 2 <= full,
        "the freed pages of the abandoned segments were purged: {} KiB committed, {} KiB before",
        committed >> 10,
        full >> 10
    );
    for p in kept.into_values() {
        // SAFETY: p is a live block whose thread has exited.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
}
