//! Stress that widens the windows of the cross-thread protocols (issue 14).
//!
//! Built only with `--cfg hakmem_race_windows` (scripts/test does, in its
//! own target directory): in that build the segment cache and the huge
//! cache are off, so every segment that empties is unmapped at once, and
//! every protocol window (`sync::race_window`) yields the CPU, so other
//! threads run inside it. A thread that touched a segment after another
//! thread could have released it faults here instead of reading a cached
//! header.
//!
//! Owners allocate blocks (large ones, whose page is parked waiting for its
//! first remote free at once, and small ones filling pages), hand them to
//! freeing threads and exit at once; the freeing threads free them — remote
//! frees into heaps that are being abandoned or already are — while other
//! threads allocate, reclaiming the abandoned segments and releasing them;
//! one thread moves huge blocks with `realloc` while the others map and
//! unmap segments and check that the segment map still knows theirs. Runs
//! 30 s; `STRESS_SECONDS=N` for longer.
#![cfg(hakmem_race_windows)]

use hakmem_core::Hakmem;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

mod common;

const OWNERS_PER_ROUND: usize = 6;
const FREERS: usize = 3;
const RECLAIMERS: usize = 2;

fn seconds() -> u64 {
    std::env::var("STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// A block handed to a freeing thread: its address, size and fill byte.
#[derive(Clone, Copy)]
struct Handed {
    p: usize,
    size: usize,
    fill: u8,
}

fn fill(p: *mut u8, size: usize, byte: u8) {
    // SAFETY: p is a live block of `size` bytes, ours.
    unsafe { std::ptr::write_bytes(p, byte, size) };
}

fn check_and_free(h: Handed) {
    let p = h.p as *mut u8;
    assert!(
        hakmem_core::is_hakmem_segment(p),
        "the segment map lost a live block's segment"
    );
    // SAFETY: p is a live block of h.size bytes handed to this thread.
    unsafe {
        assert_eq!(*p, h.fill, "block {:#x} corrupted at its start", h.p);
        assert_eq!(*p.add(h.size - 1), h.fill, "block {:#x} corrupted at its end", h.p);
        hakmem_core::free(p);
    }
}

/// An owner: allocates, hands every block over, exits at once (its heap is
/// abandoned while the freeing threads push into it).
fn owner(seed: u64, to: Vec<SyncSender<Handed>>) {
    let mut rng = seed | 1;
    let mut sizes = Vec::new();
    // Large blocks: each page is parked (full) as soon as it is made.
    for _ in 0..2 {
        sizes.push(70_000 + (common::xorshift(&mut rng) % 200_000) as usize);
    }
    // Small blocks: a page's worth, so it fills and is parked too.
    let small = 16 << (common::xorshift(&mut rng) % 8);
    sizes.extend(std::iter::repeat_n(small, 65536 / small + 8));
    for size in sizes {
        let p = hakmem_core::malloc(size);
        assert!(!p.is_null());
        let byte = (common::xorshift(&mut rng) | 1) as u8;
        fill(p, size, byte);
        let h = Handed {
            p: p as usize,
            size,
            fill: byte,
        };
        let _ = to[common::xorshift(&mut rng) as usize % to.len()].send(h);
    }
}

fn freer(from: Receiver<Handed>, done: Arc<AtomicUsize>) {
    for h in from {
        check_and_free(h);
        done.fetch_add(1, Ordering::Relaxed);
    }
}

/// Allocates and frees its own blocks, so it keeps needing segments: it
/// reclaims abandoned ones and releases them when they empty.
fn reclaimer(stop: Arc<AtomicBool>, seed: u64) {
    let mut rng = seed | 1;
    let mut live: Vec<Handed> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let r = common::xorshift(&mut rng);
        if live.len() < 64 && !r.is_multiple_of(3) {
            let size = if r.is_multiple_of(16) {
                70_000 + (r >> 8) as usize % 300_000
            } else {
                16 + (r >> 8) as usize % 4000
            };
            let p = hakmem_core::malloc(size);
            assert!(!p.is_null());
            fill(p, size, r as u8 | 1);
            live.push(Handed {
                p: p as usize,
                size,
                fill: r as u8 | 1,
            });
        } else if !live.is_empty() {
            let h = live.swap_remove((r >> 8) as usize % live.len());
            check_and_free(h);
        }
        if r.is_multiple_of(256) {
            hakmem_core::collect(false);
        }
    }
    for h in live {
        check_and_free(h);
    }
}

/// Moves huge blocks with realloc (grow and shrink: most grows move the
/// mapping with mremap) while the other threads map and unmap segments.
fn huge_mover(stop: Arc<AtomicBool>) {
    let mut size = 3 << 20;
    let mut p = hakmem_core::malloc(size);
    fill(p, size, 0x5a);
    let mut grow = true;
    while !stop.load(Ordering::Relaxed) {
        let next = if grow { 24 << 20 } else { 3 << 20 };
        // SAFETY: p is our live block.
        let q = unsafe { hakmem_core::realloc(p, next, 16) };
        assert!(!q.is_null());
        assert!(hakmem_core::is_hakmem_segment(q));
        // SAFETY: q is our live block of at least min(size, next) bytes.
        unsafe {
            assert_eq!(*q, 0x5a);
            assert_eq!(*q.add(size.min(next) - 1), 0x5a);
        }
        fill(q, next, 0x5a);
        p = q;
        size = next;
        grow = !grow;
    }
    // SAFETY: p is our live block.
    unsafe { hakmem_core::free(p) };
}

#[test]
fn cross_thread_frees_into_exiting_and_reclaimed_heaps_never_touch_a_released_segment() {
    let deadline = Instant::now() + Duration::from_secs(seconds());
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    let mut freers = Vec::new();
    for _ in 0..FREERS {
        let (tx, rx) = sync_channel::<Handed>(4096);
        senders.push(tx);
        let done = done.clone();
        freers.push(std::thread::spawn(move || freer(rx, done)));
    }
    let background: Vec<_> = (0..RECLAIMERS)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || reclaimer(stop, 0x9e37 + i as u64))
        })
        .chain(std::iter::once({
            let stop = stop.clone();
            std::thread::spawn(move || huge_mover(stop))
        }))
        .collect();
    let rounds = Mutex::new(0u64);
    let mut seed = 0x1234_5678u64;
    while Instant::now() < deadline {
        let owners: Vec<_> = (0..OWNERS_PER_ROUND)
            .map(|_| {
                let to = senders.clone();
                let s = common::xorshift(&mut seed);
                std::thread::spawn(move || owner(s, to))
            })
            .collect();
        for o in owners {
            o.join().unwrap();
        }
        *rounds.lock().unwrap() += 1;
    }
    stop.store(true, Ordering::Relaxed);
    drop(senders);
    for f in freers {
        f.join().unwrap();
    }
    for b in background {
        b.join().unwrap();
    }
    let rounds = *rounds.lock().unwrap();
    eprintln!(
        "race_windows: {rounds} rounds, {} blocks freed across threads",
        done.load(Ordering::Relaxed)
    );
    assert!(rounds > 0 && done.load(Ordering::Relaxed) > 0);
}
