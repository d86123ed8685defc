//! Issue 22, hole 8: exited threads' heaps wait whole for the next threads.
//!
//! A heap whose thread exits is *retired*: tidied and kept (up to 16, for
//! up to a second) so that a new thread takes it over with its pages
//! warm. Eight threads that exit together must leave eight retired heaps,
//! and so must the next eight, which take them over. (Before the fix each exit's tidying ran a forced global purge
//! pass, which abandoned every heap retired before it: one was left.)

use hakmem_core::Hakmem;
use std::sync::{Arc, Barrier};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

const THREADS: usize = 8;

/// Runs `THREADS` threads that each allocate a little and keep a block
/// until all of them have, then exit together.
fn threads_that_exit_together() {
    let barrier = Arc::new(Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let v: Vec<u64> = (0..1000 + i as u64).collect();
                barrier.wait();
                std::hint::black_box(v);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn threads_that_exit_together_are_all_retired_and_taken_over() {
    // SAFETY: a block of this allocator, freed once (the main thread's heap).
    unsafe { hakmem_core::free(hakmem_core::malloc(16)) };
    let before = hakmem_core::stats();
    assert_eq!(before.heaps_retired, 0);
    threads_that_exit_together();
    let after = hakmem_core::stats();
    assert_eq!(
        after.heaps_retired, THREADS,
        "every exited thread's heap waits for the next thread"
    );
    threads_that_exit_together();
    let again = hakmem_core::stats();
    assert_eq!(
        again.heaps_retired, THREADS,
        "the second group took the first group's heaps over and retired them again"
    );
}
