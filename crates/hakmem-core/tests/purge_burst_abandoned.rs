//! A burst left behind by exited threads and freed by others goes back
//! without waiting for some thread to reclaim it (issue 15): two threads
//! allocate 280 MiB of 64 B - 6.4 KB blocks and exit; two other threads
//! free all of it (remote frees into the exited threads' segments) and
//! exit; the main thread goes on with a few small allocations. Within 2 s
//! resident memory is back near where it started.

use hakmem_core::Hakmem;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

mod common;
use common::{rss_mib, xorshift};

const BURST: usize = 280 << 20;

#[test]
fn a_burst_freed_into_exited_threads_segments_goes_back() {
    let start = rss_mib();
    let allocators: Vec<_> = (0..2u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9 ^ (t + 1);
                let mut total = 0;
                let mut blocks = Vec::new();
                while total < BURST / 2 {
                    let size = 64 + (xorshift(&mut rng) % 6336) as usize;
                    let p = hakmem_core::malloc(size);
                    assert!(!p.is_null());
                    // SAFETY: p is a live block of `size` bytes.
                    unsafe { p.write_bytes(t as u8, size) };
                    blocks.push(p as usize);
                    total += size;
                }
                blocks
            })
        })
        .collect();
    let blocks: Vec<Vec<usize>> = allocators.into_iter().map(|h| h.join().unwrap()).collect();
    let peak = rss_mib();
    let freers: Vec<_> = blocks
        .into_iter()
        .map(|mine| {
            std::thread::spawn(move || {
                for p in mine {
                    // SAFETY: a live block of an exited thread, freed once.
                    unsafe { hakmem_core::free(p as *mut u8) };
                }
            })
        })
        .collect();
    for f in freers {
        f.join().unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut rss = rss_mib();
    while Instant::now() < deadline && rss > start + 32 {
        // A few small allocations now and then.
        for i in 0..10 {
            std::hint::black_box(vec![i as u8; 100]);
        }
        std::thread::sleep(Duration::from_millis(10));
        rss = rss_mib();
    }
    eprintln!("rss: start {start} MiB, burst {peak} MiB, after {rss} MiB");
    assert!(peak > start + 200, "the burst was resident: {peak} MiB");
    assert!(
        rss <= start + 32,
        "rss: start {start} MiB, burst {peak} MiB, 2 s after the frees {rss} MiB"
    );
}
