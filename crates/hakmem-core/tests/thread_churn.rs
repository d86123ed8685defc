//! 100 000 short-lived threads must keep a bounded footprint: segments of
//! exited threads are reclaimed, not stranded.

use hakmem_core::Hakmem;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

mod common;
use common::rss_bytes;

#[test]
fn many_short_lived_threads_keep_a_bounded_footprint() {
    const THREADS: usize = 100_000;
    const BATCH: usize = 8;
    let mut kept: Vec<usize> = Vec::new();
    let mut baseline = 0;
    for i in 0..THREADS / BATCH {
        let handles: Vec<_> = (0..BATCH)
            .map(|j| {
                std::thread::spawn(move || {
                    // Some garbage freed locally, one block left for main to free.
                    let v: Vec<Vec<u8>> = (0..20).map(|k| vec![k as u8; 16 + (j * 97 + k * 13) % 2000]).collect();
                    drop(v);
                    let p = hakmem_core::malloc(64 + j * 8);
                    // SAFETY: p is a live 64+ byte block.
                    unsafe { *p = 1 };
                    p as usize
                })
            })
            .collect();
        for h in handles {
            kept.push(h.join().unwrap());
        }
        if kept.len() > 1000 {
            for p in kept.drain(..) {
                // SAFETY: p is a live block whose thread has exited.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        }
        if i == 100 {
            baseline = rss_bytes();
        }
    }
    let rss = rss_bytes();
    assert!(
        rss < baseline + (64 << 20),
        "rss grew from {} to {} MiB",
        baseline >> 20,
        rss >> 20
    );
    // While blocks of exited threads are alive, their segments may wait on
    // the abandoned list (the hardened build abandons more heaps: its
    // delayed reuse spreads a heap over more segments). Once the last of
    // them is freed, the freeing thread (which owns few segments) takes
    // each segment over and gives it back: none may stay stranded.
    let before = hakmem_core::abandoned_count();
    for p in kept.drain(..) {
        // SAFETY: p is a live block whose thread has exited.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
    let after = hakmem_core::abandoned_count();
    eprintln!("abandoned segments: {before} with blocks alive, {after} after they were freed");
    assert!(
        after < 8,
        "{after} abandoned segments stranded ({before} before the last frees)"
    );
}
