//! Thread exit when another library's pthread-key destructor runs after
//! hakmem's and allocates (issue 14, hole 7).
//!
//! glibc runs key destructors in rounds (at most four), each round in key
//! order; hakmem's key is made at the first allocation, before the test's,
//! so its destructor runs first in each round. The test's destructor sets
//! its key again (asking for another round) and allocates, in every round
//! including the last, after which glibc stops: whatever hakmem set up then
//! is never handed to a destructor. Nothing may leak or crash: every heap
//! made after the thread's exit is given up again.

use hakmem_core::Hakmem;
use std::sync::atomic::{AtomicUsize, Ordering};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

static mut KEY: libc::pthread_key_t = 0;
/// Destructor calls, all threads.
static ROUNDS: AtomicUsize = AtomicUsize::new(0);
/// Blocks the destructors allocated and left for the main thread to free.
static LEFT: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

extern "C" fn allocate_late(value: *mut libc::c_void) {
    ROUNDS.fetch_add(1, Ordering::Relaxed);
    let round = value as usize;
    // Frees after hakmem's exit (a block of the thread's, now a remote
    // free), then allocations of every kind: small, calloc, large.
    // SAFETY: blocks of this allocator, each freed once.
    unsafe {
        let p = hakmem_core::malloc(100);
        assert!(!p.is_null());
        p.write_bytes(7, 100);
        hakmem_core::free(p);
        let z = hakmem_core::alloc_zeroed(5000, 16);
        assert!(!z.is_null() && *z.add(4999) == 0);
        hakmem_core::free(z);
    }
    let large = hakmem_core::malloc(300_000);
    assert!(!large.is_null());
    LEFT.lock().unwrap().push(large as usize);
    // SAFETY: KEY was created before any thread started.
    unsafe { libc::pthread_setspecific(KEY, (round + 1) as *const libc::c_void) };
}

#[test]
fn allocations_in_destructors_after_hakmems_leave_no_heap_behind() {
    // SAFETY: made once, before the threads; the destructor is valid for
    // the whole process.
    unsafe { assert_eq!(libc::pthread_key_create(&raw mut KEY, Some(allocate_late)), 0) };
    // The main thread's heap, and the count of heaps, before.
    // SAFETY: a block of this allocator, freed once.
    unsafe { hakmem_core::free(hakmem_core::malloc(16)) };
    // Segments owned by live heaps: neither abandoned (for reclaim) nor
    // cached. A heap left behind by a thread that is gone keeps its
    // segments owned forever.
    let owned = |s: &hakmem_core::Stats| s.segments_mapped - s.segments_abandoned - s.segments_cached;
    let before = hakmem_core::stats();
    const THREADS: usize = 200;
    for _ in 0..THREADS {
        std::thread::spawn(|| {
            let v: Vec<u64> = (0..1000).collect();
            std::hint::black_box(&v);
            // SAFETY: KEY was created above.
            unsafe { libc::pthread_setspecific(KEY, std::ptr::dangling::<libc::c_void>()) };
        })
        .join()
        .unwrap();
    }
    let rounds = ROUNDS.load(Ordering::Relaxed);
    assert!(
        rounds >= THREADS * 2,
        "destructors ran {rounds} times: later rounds happened"
    );
    for p in LEFT.lock().unwrap().drain(..) {
        // SAFETY: a live block a destructor allocated.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
    hakmem_core::collect(true);
    let s = hakmem_core::stats();
    assert_eq!(
        s.heaps_in_use, before.heaps_in_use,
        "heaps made after their thread's exit were given up"
    );
    assert!(
        owned(&s) <= owned(&before) + 2,
        "{} segments owned after {THREADS} threads (was {}): none stays with a dead heap",
        owned(&s),
        owned(&before)
    );
}
