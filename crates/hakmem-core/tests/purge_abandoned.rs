//! Segments of an exited thread that nobody reclaims still give their free
//! pages back: a thread fills 128 MiB, frees all but one block per segment
//! and exits; light allocation elsewhere then lets RSS fall back. Its heap
//! is first retired (kept whole for a new thread, its free pages purged at
//! once); no thread comes, so within about a second the global purge pass
//! abandons it, and its segments wait for reclaim with their pages purged.

use hakmem_core::Hakmem;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

mod common;
use common::rss_mib;

#[test]
fn free_pages_of_abandoned_segments_are_purged() {
    let start = rss_mib();
    let kept: Vec<usize> = std::thread::spawn(|| {
        let blocks: Vec<usize> = (0..128 * 1024)
            .map(|i| {
                let p = hakmem_core::malloc(1000);
                // SAFETY: p is a live 1000-byte block.
                unsafe { std::ptr::write_bytes(p, i as u8, 1000) };
                p as usize
            })
            .collect();
        let mut kept = Vec::new();
        for (i, p) in blocks.into_iter().enumerate() {
            if i % 2048 == 0 {
                kept.push(p);
            } else {
                // SAFETY: p is a live block of this thread, freed once.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        }
        kept
    })
    .join()
    .unwrap();
    let peak = rss_mib();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut rss = peak;
    while Instant::now() < deadline && rss >= start + 32 {
        for i in 0..2000 {
            std::hint::black_box(vec![i as u8; 16 + i % 1000]);
        }
        std::thread::sleep(Duration::from_millis(5));
        rss = rss_mib();
    }
    eprintln!("rss: start {start} MiB, after the thread {peak} MiB, later {rss} MiB");
    assert!(
        rss < start + 32,
        "rss: start {start} MiB, after the thread {peak} MiB, later {rss} MiB"
    );
    // The retired heap is abandoned once it has waited its time.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline && hakmem_core::stats().heaps_retired > 0 {
        for i in 0..2000 {
            std::hint::black_box(vec![i as u8; 16 + i % 1000]);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        hakmem_core::stats().heaps_retired,
        0,
        "no new thread took the heap over"
    );
    assert!(
        hakmem_core::abandoned_count() > 0,
        "the kept blocks hold abandoned segments"
    );
    let rss = rss_mib();
    assert!(rss < start + 32, "rss: start {start} MiB, abandoned {rss} MiB");
    for p in kept {
        // SAFETY: p is a live block whose thread has exited.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
}
