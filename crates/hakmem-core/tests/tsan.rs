//! Data races under the Rust memory model, found by ThreadSanitizer.
//!
//! Built only with `--cfg hakmem_tsan` together with nightly's
//! `-Zsanitizer=thread` (scripts/test does, when a nightly toolchain is
//! installed). hakmem is called directly, not installed as the global
//! allocator: TSan intercepts libc's malloc, not ours.
//!
//! The race pinned down here (issue 14, hole 5): the checked free of a
//! legitimately handed-over block reads its page's `carved` bound while
//! the owner keeps carving the same page, which writes it. A plain field
//! there is a data race even though x86 reads it whole; an atomic (relaxed
//! is enough, see `Page::carved`) is not. A second scenario runs the whole
//! cross-thread life cycle — blocks of every size handed over, owners
//! exiting, freeing threads freeing into abandoned segments, a thread
//! reclaiming them — so any other plain field one thread writes while
//! another reads is reported too.
//!
//! A plain `main` (no libtest harness: the harness's own channels are not
//! instrumented and would be reported).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const BLOCKS: usize = 4000;

fn main() {
    if cfg!(hakmem_tsan) {
        the_checked_free_of_a_handed_over_block_races_with_nothing_the_owner_writes();
        blocks_handed_over_by_exiting_threads_race_with_nothing();
        println!("tsan: ok");
    } else {
        println!("tsan: SKIPPED (build with nightly, -Zsanitizer=thread and --cfg hakmem_tsan: scripts/test)");
    }
}

fn the_checked_free_of_a_handed_over_block_races_with_nothing_the_owner_writes() {
    let slot = Arc::new(AtomicUsize::new(0));
    let freer = {
        let slot = slot.clone();
        std::thread::spawn(move || {
            // A heap of its own: its remote frees are batched, so the owner
            // does not take them in (and synchronise with this thread)
            // before it carves more of the page.
            // SAFETY: a block of this allocator, freed once.
            unsafe { hakmem_core::free(hakmem_core::malloc(16)) };
            for _ in 0..BLOCKS {
                let p = loop {
                    // Acquire: pairs with the owner's Release store below,
                    // so the block (and its page's set-up) happen before.
                    let p = slot.swap(0, Ordering::Acquire);
                    if p != 0 {
                        break p;
                    }
                    std::hint::spin_loop();
                };
                // SAFETY: p is a live hakmem block handed to this thread.
                unsafe { hakmem_core::free_checked(p as *mut u8) };
            }
        })
    };
    // The owner allocates 64-byte blocks one after another: its pages are
    // carved a few KiB at a time while the freer checks blocks of them.
    for _ in 0..BLOCKS {
        let p = hakmem_core::malloc(64);
        assert!(!p.is_null());
        // Release: publishes the block to the freer's Acquire swap.
        while slot
            .compare_exchange(0, p as usize, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
    }
    freer.join().unwrap();
}

fn blocks_handed_over_by_exiting_threads_race_with_nothing() {
    const SLOTS: usize = 512;
    const ROUNDS: usize = 40;
    let slots: Arc<Vec<AtomicUsize>> = Arc::new((0..SLOTS).map(|_| AtomicUsize::new(0)).collect());
    let stop = Arc::new(AtomicUsize::new(0));
    let freers: Vec<_> = (0..2)
        .map(|k| {
            let (slots, stop) = (slots.clone(), stop.clone());
            std::thread::spawn(move || {
                if k == 1 {
                    // This one has a heap: it batches its remote frees.
                    // SAFETY: a block of this allocator, freed once.
                    unsafe { hakmem_core::free(hakmem_core::malloc(16)) };
                }
                loop {
                    let done = stop.load(Ordering::Acquire) != 0;
                    let mut freed = 0;
                    for slot in slots.iter() {
                        // Acquire: pairs with the owners' Release stores.
                        let p = slot.swap(0, Ordering::Acquire);
                        if p != 0 {
                            // SAFETY: p is a live block handed to this thread.
                            unsafe { hakmem_core::free_checked(p as *mut u8) };
                            freed += 1;
                        }
                    }
                    if done && freed == 0 {
                        break;
                    }
                }
            })
        })
        .collect();
    let reclaimer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut live = Vec::new();
            let mut i = 0usize;
            while stop.load(Ordering::Acquire) == 0 {
                i += 1;
                live.push(hakmem_core::malloc(16 + (i * 7919) % 100_000) as usize);
                if live.len() > 32 {
                    for p in live.drain(..) {
                        // SAFETY: our own live blocks.
                        unsafe { hakmem_core::free(p as *mut u8) };
                    }
                }
            }
            for p in live {
                // SAFETY: our own live blocks.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        })
    };
    for round in 0..ROUNDS {
        let owners: Vec<_> = (0..3)
            .map(|o| {
                let slots = slots.clone();
                std::thread::spawn(move || {
                    for k in 0..300 {
                        let size = match (k + o) % 10 {
                            0 => 70_000 + k * 100,
                            1..=3 => 2000 + k,
                            _ => 16 + (k * 13 + round) % 1000,
                        };
                        let p = hakmem_core::malloc(size);
                        assert!(!p.is_null());
                        // SAFETY: p is a live block of `size` bytes.
                        unsafe { p.write_bytes(k as u8, size) };
                        let slot = &slots[(k * 31 + o * 7 + round) % SLOTS];
                        // Release: publishes the block to the freers.
                        while slot
                            .compare_exchange(0, p as usize, Ordering::Release, Ordering::Relaxed)
                            .is_err()
                        {
                            std::hint::spin_loop();
                        }
                    }
                })
            })
            .collect();
        for o in owners {
            o.join().unwrap();
        }
    }
    stop.store(1, Ordering::Release);
    for f in freers {
        f.join().unwrap();
    }
    reclaimer.join().unwrap();
}
