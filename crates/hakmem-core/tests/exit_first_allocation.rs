//! Issue 22, hole 4: a thread whose *first* allocation comes in glibc's
//! last round of pthread-key destructors leaves nothing behind.
//!
//! glibc calls key destructors in rounds, in key order, and stops after
//! the fourth. The test's key is newer than hakmem's (which is made at the
//! process's first allocation), so in the last round hakmem's turn has
//! passed when the test's destructor allocates for the first time: the
//! heap made then registers hakmem's exit hook too late for any round to
//! run it. Such heaps — and the segments they took — must still be given
//! up: hakmem finds heaps whose thread is gone (the kernel no longer knows
//! its thread id) and abandons them. Before the fix, 50 threads left 50
//! heaps and 50 segments owned by dead threads.

use hakmem_core::Hakmem;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

static mut KEY: libc::pthread_key_t = 0;
/// Destructor calls in the last round (the value set in the third).
static LAST_ROUNDS: AtomicUsize = AtomicUsize::new(0);

/// glibc's `PTHREAD_DESTRUCTOR_ITERATIONS`.
const ROUNDS: usize = 4;
const THREADS: usize = 50;

/// The test's key destructor: sets its key again in the first rounds (so
/// glibc runs another), and in the last one allocates, for the first time
/// on this thread.
extern "C" fn first_allocation_in_the_last_round(value: *mut libc::c_void) {
    let round = value as usize;
    if round < ROUNDS {
        // SAFETY: KEY was created before the threads.
        unsafe { libc::pthread_setspecific(KEY, (round + 1) as *const libc::c_void) };
        return;
    }
    LAST_ROUNDS.fetch_add(1, Ordering::Relaxed);
    let p = hakmem_core::malloc(100);
    assert!(!p.is_null());
    // SAFETY: a live block of 100 bytes, freed once.
    unsafe {
        p.write_bytes(1, 100);
        hakmem_core::free(p);
    }
}

/// A thread that allocates nothing: it only sets the key (raw pthreads,
/// since std's threads allocate as they start).
extern "C" fn set_the_key(_: *mut libc::c_void) -> *mut libc::c_void {
    // The value is the round: 1, the address `dangling` gives.
    // SAFETY: KEY was created before the threads.
    unsafe { libc::pthread_setspecific(KEY, std::ptr::dangling::<libc::c_void>()) };
    std::ptr::null_mut()
}

/// The tests compare counts of heaps: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_first_allocation_in_the_last_destructor_round_leaves_no_heap_behind() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // hakmem's key first (the main thread's heap), then the test's.
    // SAFETY: a block of this allocator, freed once.
    unsafe { hakmem_core::free(hakmem_core::malloc(16)) };
    // SAFETY: made once, before the threads; the destructor lives as long
    // as the process.
    unsafe {
        assert_eq!(
            libc::pthread_key_create(&raw mut KEY, Some(first_allocation_in_the_last_round)),
            0
        )
    };
    let owned = |s: &hakmem_core::Stats| s.segments_mapped - s.segments_abandoned - s.segments_cached;
    hakmem_core::collect(true);
    let before = hakmem_core::stats();
    for _ in 0..THREADS {
        let mut thread: libc::pthread_t = 0;
        // SAFETY: a plain thread running `set_the_key`, joined below.
        unsafe {
            assert_eq!(
                libc::pthread_create(&mut thread, std::ptr::null(), set_the_key, std::ptr::null_mut()),
                0
            );
            assert_eq!(libc::pthread_join(thread, std::ptr::null_mut()), 0);
        }
    }
    assert_eq!(
        LAST_ROUNDS.load(Ordering::Relaxed),
        THREADS,
        "every thread's first allocation came in the last round"
    );
    // The threads are joined; the kernel may take a moment more to forget
    // the last one. `collect(true)` (C's `malloc_trim`) looks for heaps of
    // threads that are gone.
    // Every heap in use must belong to a live thread: at most one per
    // thread of the process (the harness's threads come and go meanwhile,
    // so no count from before is exact).
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut s = hakmem_core::stats();
    while Instant::now() < deadline && s.heaps_in_use > threads() {
        hakmem_core::collect(true);
        s = hakmem_core::stats();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        s.heaps_in_use <= threads(),
        "the heaps of threads that are gone were given up: {} in use, {} threads, {} in use before",
        s.heaps_in_use,
        threads(),
        before.heaps_in_use
    );
    assert!(
        owned(&s) <= owned(&before) + 1,
        "{} segments owned after {THREADS} threads (was {}): none stays with a dead heap",
        owned(&s),
        owned(&before)
    );
}

/// The look for heaps of threads that are gone never takes a live
/// thread's heap: a thread keeps allocating and freeing its own blocks
/// while another forces the look (`collect(true)`) again and again.
#[test]
fn live_threads_keep_their_heaps_through_the_look() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) || rounds < 10 {
                let blocks: Vec<Vec<u8>> = (0..200).map(|i| vec![i as u8; 16 + i * 7]).collect();
                for (i, b) in blocks.iter().enumerate() {
                    assert!(b.iter().all(|&x| x == i as u8), "block {i} changed");
                }
                rounds += 1;
            }
            rounds
        })
    };
    // Other threads of this process may exit meanwhile (the test
    // harness's thread that ran the other test, with its heap): a count
    // that falls when the threads do is theirs. The thread leaves
    // /proc/self/task after its exit hook has given its heap up, so a
    // fall is looked at again once the task list has had time to follow.
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let mut heaps = hakmem_core::stats().heaps_in_use;
    let mut alive = threads();
    let deadline = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < deadline {
        hakmem_core::collect(true);
        let now = hakmem_core::stats().heaps_in_use;
        if now < heaps {
            std::thread::sleep(Duration::from_millis(200));
            let alive_now = threads();
            assert!(
                alive_now < alive,
                "a live thread's heap was taken ({now} heaps in use, {heaps} before; {alive_now} threads, {alive} before)"
            );
            (heaps, alive) = (hakmem_core::stats().heaps_in_use, alive_now);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    assert!(worker.join().unwrap() >= 10);
}
