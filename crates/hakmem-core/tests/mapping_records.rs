//! The kernel keeps at most `vm.max_map_count` (65 530 by default) mapping
//! records per process, and every guard page of the `secure` build splits
//! its segment's mapping. A thread heap takes a segment of its own, so with
//! a guard at the end of all 32 units of each segment, 1 000 threads that
//! each allocated once used up the limit: `malloc` returned null with
//! gigabytes free, and `pthread_create` failed (found by review). Guards
//! now come as spans take their units (`arena::place_guards`). Runs in
//! both builds; the default one has no guards.

use hakmem_core::Hakmem;
use std::sync::{Arc, Barrier, Mutex};

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// The two tests one at a time: each counts the process's records.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Lines of /proc/self/maps: the process's mapping records.
fn mapping_records() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .count()
}

/// `threads` threads alive at once, each with one small block of its own
/// heap; returns the blocks that could not be had and the mapping records
/// added while all were alive.
fn threads_holding_one_block(threads: usize) -> (usize, usize) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let before = mapping_records();
    let all_in = Arc::new(Barrier::new(threads + 1));
    let counted = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (all_in, counted) = (all_in.clone(), counted.clone());
            std::thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || {
                    let p = hakmem_core::malloc(48 + i % 64);
                    if !p.is_null() {
                        // SAFETY: p is a live block of at least 48 bytes.
                        unsafe { p.write_bytes(0x5a, 48) };
                    }
                    all_in.wait();
                    counted.wait();
                    // SAFETY: p is null or the live block above.
                    unsafe { hakmem_core::free(p) };
                    p.is_null()
                })
                .expect("thread")
        })
        .collect();
    all_in.wait();
    let added = mapping_records().saturating_sub(before);
    counted.wait();
    let failed = handles.into_iter().map(|h| h.join().unwrap()).filter(|&f| f).count();
    (failed, added)
}

#[test]
fn a_thread_with_one_small_block_costs_a_few_mapping_records() {
    const THREADS: usize = 200;
    let (failed, added) = threads_holding_one_block(THREADS);
    assert_eq!(failed, 0);
    // A thread's stack is two records (stack, guard page); its segment a
    // few (secure: the header unit's guard and the first span's); with a
    // guard in every unit it was 65 or more.
    assert!(
        added < THREADS * 12,
        "{added} mapping records for {THREADS} threads holding one block each"
    );
}

/// How many more threads this process may start, as far as the cgroup's
/// `pids.max` and `RLIMIT_NPROC` say (each counts every thread).
fn threads_allowed() -> usize {
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/pids.max")
        .ok()
        .and_then(|max| {
            let current = std::fs::read_to_string("/sys/fs/cgroup/pids.current").ok()?;
            Some(
                max.trim()
                    .parse::<usize>()
                    .ok()?
                    .saturating_sub(current.trim().parse().ok()?),
            )
        })
        .unwrap_or(usize::MAX);
    // SAFETY: getrlimit writes the struct it is given.
    let nproc = unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NPROC, &mut limit);
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    };
    cgroup.min(nproc)
}

#[test]
fn twelve_hundred_threads_each_allocate_once() {
    const THREADS: usize = 1200;
    if threads_allowed() < THREADS + 100 {
        eprintln!("SKIPPED: fewer than {} threads allowed here", THREADS + 100);
        return;
    }
    let (failed, added) = threads_holding_one_block(THREADS);
    assert_eq!(
        failed, 0,
        "{failed} of {THREADS} threads got no block ({added} mapping records added)"
    );
}
