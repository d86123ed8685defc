//! fork() while other threads are mid-allocation: the child can allocate
//! and free (including blocks the other threads allocated before the fork)
//! and start a thread; the parent carries on. Every child must exit 0.
//!
//! Also (issue 22, hole 6): the forking thread has a local heap whose
//! blocks — large ones, whose pages are parked at once, so the first
//! remote free of each notifies — the other threads free, and a purger
//! thread runs forced purge passes, huge blocks and the statistics (the
//! policy's lock) meanwhile. The child destroys that local heap (releasing
//! every page, which waits for a notifier a vanished thread may have left
//! half done), purges and reads the statistics: it must finish, in time.

use hakmem_core::{Hakmem, LocalHeap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

fn churn(stop: &AtomicBool, shared: &Mutex<Vec<usize>>, seed: u64) {
    let mut x = seed;
    let mut mine: Vec<usize> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = 1 + (x as usize % 3000) + if x.is_multiple_of(97) { 300_000 } else { 0 };
        let p = hakmem_core::malloc(size);
        // SAFETY: p is a live block of at least one byte.
        unsafe { *p = 0x5a };
        if x.is_multiple_of(3) {
            shared.lock().unwrap().push(p as usize);
        } else {
            mine.push(p as usize);
        }
        if mine.len() > 200 {
            for q in mine.drain(..150) {
                // SAFETY: q is a live block of this thread.
                unsafe { hakmem_core::free(q as *mut u8) };
            }
        }
        let theirs: Vec<usize> = {
            let mut s = shared.lock().unwrap();
            if s.len() > 300 {
                s.drain(..200).collect()
            } else {
                Vec::new()
            }
        };
        for q in theirs {
            // SAFETY: q is a live block handed over through `shared`.
            unsafe { hakmem_core::free(q as *mut u8) };
        }
    }
    for q in mine {
        // SAFETY: q is a live block of this thread.
        unsafe { hakmem_core::free(q as *mut u8) };
    }
}

/// Runs in the forked child: only the allocator, a thread, and _exit.
fn child_work(shared: &Mutex<Vec<usize>>) -> i32 {
    // The mutex may have been held by a thread that does not exist here.
    let inherited: Vec<usize> = match shared.try_lock() {
        Ok(s) => s.clone(),
        Err(_) => Vec::new(),
    };
    for q in inherited.iter().take(50) {
        // SAFETY: blocks in `shared` were live at the fork; the child has its
        // own copy of them and frees each once.
        unsafe {
            if *(*q as *const u8) != 0x5a {
                return 3;
            }
            hakmem_core::free(*q as *mut u8);
        }
    }
    let mut blocks = Vec::with_capacity(1000);
    for i in 0..1000 {
        let p = hakmem_core::malloc(16 + i % 2000);
        if p.is_null() {
            return 4;
        }
        // SAFETY: p is a live block of at least 16 bytes.
        unsafe { *p = i as u8 };
        blocks.push(p as usize);
    }
    let t = std::thread::spawn(move || {
        for (i, q) in blocks.into_iter().enumerate() {
            // SAFETY: q is a live block handed to this thread; freed once.
            unsafe {
                if *(q as *const u8) != i as u8 {
                    return false;
                }
                hakmem_core::free(q as *mut u8);
            }
        }
        true
    });
    if !t.join().unwrap_or(false) {
        return 5;
    }
    0
}

/// Forced purge passes, huge blocks (the huge arena's units) and the
/// statistics (the policy's lock), over and over.
fn purge(stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        hakmem_core::collect(true);
        let p = hakmem_core::malloc(5 << 20);
        assert!(!p.is_null());
        // SAFETY: a live block, freed once.
        unsafe { hakmem_core::free(p) };
        std::hint::black_box(hakmem_core::stats());
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Waits for child `pid` for at most `limit`; its wait status, or None
/// when it did not finish (it is killed).
fn wait_for(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    let mut status = 0;
    loop {
        // SAFETY: pid is our child; status is a valid out-pointer.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            return Some(status);
        }
        if Instant::now() > deadline {
            // SAFETY: our child, stuck: killed and reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn fork_while_threads_allocate() {
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(Mutex::new(Vec::new()));
    let mut workers: Vec<_> = (0..3)
        .map(|i| {
            let (stop, shared) = (stop.clone(), shared.clone());
            std::thread::spawn(move || churn(&stop, &shared, 0x9e37_79b9 + i))
        })
        .collect();
    workers.push({
        let stop = stop.clone();
        std::thread::spawn(move || purge(&stop))
    });
    let local = LocalHeap::new();
    for round in 0..20 {
        // Blocks of this thread's local heap for the others to free.
        for i in 0..8 {
            let size = if i % 2 == 0 { 200_000 } else { 100 };
            let p = local.alloc(size, 16);
            assert!(!p.is_null());
            // SAFETY: p is a live block of at least one byte.
            unsafe { *p = 0x5a };
            shared.lock().unwrap().push(p as usize);
        }
        std::thread::sleep(Duration::from_millis(5));
        // SAFETY: fork in a multi-threaded process; the child only runs
        // child_work (the allocator, one thread, _exit).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let mut code = child_work(&shared);
            if code == 0 {
                // Every page of the local heap released (the blocks the
                // child did not free are not used again here).
                // SAFETY: the child is alone; nothing of the heap is used
                // after this.
                unsafe { LocalHeap::from_raw(local.into_raw()).destroy() };
                hakmem_core::collect(true);
                if hakmem_core::stats().heaps_in_use == 0 {
                    code = 6;
                }
            }
            // SAFETY: leaves the child at once, without running the parent's
            // atexit handlers or test harness.
            unsafe { libc::_exit(code) };
        }
        let status = wait_for(pid, Duration::from_secs(20));
        let Some(status) = status else {
            panic!("round {round}: the child hung");
        };
        assert!(libc::WIFEXITED(status), "round {round}: child died: status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0, "round {round}");
        // The parent allocates on after each fork.
        let v: Vec<u8> = vec![round as u8; 10_000];
        assert_eq!(v[9_999], round as u8);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    drop(local);
    for q in shared.lock().unwrap().drain(..) {
        // SAFETY: q is a live block left in `shared`.
        unsafe { hakmem_core::free(q as *mut u8) };
    }
}
