//! Memory goes back: after a 256 MiB burst across two threads (half of it
//! freed by the other thread) is freed, light allocation for a little longer
//! than the purge delay brings RSS back close to where it started.

use hakmem_core::Hakmem;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

mod common;
use common::rss_mib;

fn light_work(iters: usize) {
    for i in 0..iters {
        let v = vec![i as u8; 16 + i % 1000];
        std::hint::black_box(&v);
    }
}

#[test]
fn rss_falls_back_after_a_burst_is_freed() {
    light_work(10_000);
    let start = rss_mib();
    const BURST: usize = 256 << 20;
    let (to_b, from_a) = mpsc::channel::<Vec<Vec<u8>>>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    // Thread B: allocates its half, frees its own and A's half, then works lightly.
    let b = std::thread::spawn(move || {
        let mut mine: Vec<Vec<u8>> = (0..BURST / 2 / 4096).map(|i| vec![i as u8; 100 + i % 8000]).collect();
        let theirs = from_a.recv().unwrap();
        drop(theirs); // remote frees into A's pages
        mine.clear();
        mine.shrink_to_fit();
        done_rx.recv().unwrap();
        light_work(10_000);
    });
    let mut ours: Vec<Vec<u8>> = Vec::new();
    let mut total = 0;
    let mut i = 0usize;
    while total < BURST / 2 {
        let size = 16 + (i * 7919) % 20_000;
        ours.push(vec![i as u8; size]);
        total += size;
        i += 1;
    }
    let peak = rss_mib();
    assert!(
        peak >= start + 120,
        "the burst was resident: start {start} MiB, peak {peak} MiB"
    );
    to_b.send(ours).unwrap();
    let deadline = Instant::now() + Duration::from_millis(2500);
    let mut rss = rss_mib();
    while Instant::now() < deadline {
        light_work(2_000);
        std::thread::sleep(Duration::from_millis(5));
        rss = rss_mib();
        if rss < start + 32 && Instant::now() > deadline - Duration::from_millis(2000) {
            break;
        }
    }
    done_tx.send(()).unwrap();
    b.join().unwrap();
    // B has exited (its segments were handed back); a few more light calls let
    // this thread's slow path purge what B returned.
    let deadline = Instant::now() + Duration::from_millis(1000);
    while Instant::now() < deadline && rss >= start + 32 {
        light_work(2_000);
        std::thread::sleep(Duration::from_millis(5));
        rss = rss_mib();
    }
    eprintln!(
        "rss: start {start} MiB, peak {peak} MiB, after {rss} MiB; cached {} abandoned {} {:?}",
        hakmem_core::cached_count(),
        hakmem_core::abandoned_count(),
        hakmem_core::os_counters()
    );
    assert!(
        rss < start + 32,
        "rss: start {start} MiB, peak {peak} MiB, after {rss} MiB"
    );
}
