//! Local heaps as a program uses them: hashbrown and allocator-api2's
//! collections in a `LocalHeap`, destroy (every block freed at once) and
//! drop (blocks stay valid), blocks freed by `free`, `dealloc` or another
//! thread, a heap outliving its thread, and a stress of remote frees
//! racing deletes.
//!
//! The binary keeps `System` as its global allocator, so hakmem's counters
//! move only with what the tests do; the tests take a lock so that they do
//! not see each other's pages.

use allocator_api2::boxed::Box as ApiBox;
use allocator_api2::vec::Vec as ApiVec;
use hakmem_core::{Hakmem, LocalHeap};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod common;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `test` alone (one test at a time), on a thread of its own that has
/// exited — its heap given up — before the next test starts, and whose
/// own heap exists before `test` starts (so that the first local heap does
/// not count it).
fn serial(test: impl FnOnce() + Send + 'static) {
    let _guard: MutexGuard<'static, ()> = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let outcome = std::thread::spawn(|| {
        // SAFETY: a block just allocated, freed once.
        unsafe { hakmem_core::free(hakmem_core::malloc(1)) };
        test()
    })
    .join();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// Pages in use, huge blocks in use and heaps in use, after this thread
/// has given back every empty page it keeps.
fn in_use() -> (usize, usize, usize) {
    hakmem_core::collect(true);
    let s = hakmem_core::stats();
    (s.pages_in_use, s.huge_in_use, s.heaps_in_use)
}

/// Sizes of every kind: small, medium, large, huge.
const SIZES: [usize; 9] = [1, 16, 24, 100, 1024, 5000, 60_000, 300_000, 3 << 20];

/// The bytes `fill` writes in a block of `size` bytes: one per 4 KiB
/// (every page the block touches) and the last.
fn pattern_bytes(size: usize) -> impl Iterator<Item = usize> {
    (0..size).step_by(4096).chain([size - 1])
}

fn fill(p: *mut u8, size: usize, seed: usize) {
    for i in pattern_bytes(size) {
        // SAFETY: p is a live block of at least `size` bytes.
        unsafe { *p.add(i) = (seed + i) as u8 };
    }
}

/// Checks what `fill(p, size, seed)` wrote, below `upto`.
fn check_prefix(p: *const u8, size: usize, seed: usize, upto: usize) {
    for i in pattern_bytes(size).filter(|&i| i < upto) {
        // SAFETY: p is a live block of at least `upto` bytes.
        assert_eq!(unsafe { *p.add(i) }, (seed + i) as u8, "block {p:p} byte {i}");
    }
}

fn check(p: *const u8, size: usize, seed: usize) {
    check_prefix(p, size, seed, size);
}

#[test]
fn destroy_frees_every_block_at_once() {
    serial(|| {
        let before = in_use();
        let heap = LocalHeap::new();
        assert_eq!(hakmem_core::stats().heaps_in_use, before.2 + 1);
        let mut blocks = Vec::new();
        for round in 0..200 {
            for (k, &size) in SIZES.iter().enumerate() {
                if size > 100_000 && round % 50 != 0 {
                    continue;
                }
                let align = if k % 3 == 0 { 4096 } else { 16 };
                let p = heap.alloc(size, align);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0);
                fill(p, size, round + k);
                blocks.push((p as usize, size, round + k));
            }
        }
        for &(p, size, seed) in &blocks {
            check(p as *const u8, size, seed);
        }
        let during = hakmem_core::stats();
        assert!(during.pages_in_use > before.0 + 10);
        assert!(during.huge_in_use >= before.1 + 4);
        // SAFETY: no block of the heap is used after this.
        unsafe { heap.destroy() };
        assert_eq!(in_use(), before, "pages, huge blocks and the heap all went back");
    });
}

#[test]
fn collections_of_allocator_api2_and_hashbrown_live_in_the_heap() {
    serial(|| {
        let before = in_use();
        let heap = LocalHeap::new();
        let mut map = hashbrown::HashMap::new_in(&heap);
        let mut vec: ApiVec<u64, &LocalHeap> = ApiVec::new_in(&heap);
        let mut boxes = Vec::new();
        for i in 0..20_000u64 {
            map.insert(i, i * 3);
            vec.push(i ^ 0x55);
            if i % 1000 == 0 {
                boxes.push(ApiBox::new_in([i; 40], &heap));
            }
        }
        vec.shrink_to_fit();
        let mut strings: hashbrown::HashMap<String, ApiVec<u8, &LocalHeap>, _, &LocalHeap> =
            hashbrown::HashMap::with_capacity_in(10, &heap);
        for i in 0..1000 {
            let mut bytes = ApiVec::with_capacity_in(i % 300, &heap);
            bytes.extend((0..i % 300).map(|b| b as u8));
            strings.insert(format!("key{i}"), bytes);
        }
        for i in 0..20_000u64 {
            assert_eq!(map[&i], i * 3);
            assert_eq!(vec[i as usize], i ^ 0x55);
        }
        for (i, b) in boxes.iter().enumerate() {
            assert!(b.iter().all(|&x| x == i as u64 * 1000));
        }
        for i in 0..1000 {
            let bytes = &strings[&format!("key{i}")];
            assert!(bytes.iter().enumerate().all(|(b, &x)| x == b as u8));
        }
        // Every block is the heap's: destroying it with the collections
        // forgotten gives back all their memory.
        assert!(hakmem_core::stats().pages_in_use > before.0);
        std::mem::forget((map, vec, boxes, strings));
        // SAFETY: the forgotten collections are never used again.
        unsafe { heap.destroy() };
        assert_eq!(in_use(), before);
    });
}

#[test]
fn collections_dropped_before_the_heap_free_their_blocks_into_it() {
    serial(|| {
        let before = in_use();
        let heap = LocalHeap::new();
        {
            let mut map = hashbrown::HashMap::new_in(&heap);
            for i in 0..50_000u32 {
                map.insert(i, [i; 8]);
            }
            map.retain(|k, _| k % 7 == 0);
            map.shrink_to_fit();
            assert_eq!(map.len(), 50_000 / 7 + 1);
        }
        drop(heap);
        assert_eq!(in_use(), before);
    });
}

#[test]
fn blocks_of_a_dropped_heap_stay_valid_and_are_freed_by_any_thread() {
    serial(|| {
        let before = in_use();
        let heap = LocalHeap::new();
        let blocks: Vec<(usize, usize)> = (0..3000)
            .map(|i| {
                let size = SIZES[i % SIZES.len()].min(70_000);
                let p = heap.alloc(size, 16);
                fill(p, size, i);
                (p as usize, size)
            })
            .collect();
        let huge = heap.alloc(5 << 20, 16);
        fill(huge, 5 << 20, 7);
        drop(heap);
        for (i, &(p, size)) in blocks.iter().enumerate() {
            check(p as *const u8, size, i);
        }
        check(huge, 5 << 20, 7);
        let (mine, theirs) = blocks.split_at(blocks.len() / 2);
        let theirs = theirs.to_vec();
        let other = std::thread::spawn(move || {
            for (p, size) in theirs {
                // SAFETY: p is a live block of the dropped heap, freed once.
                unsafe { Hakmem.dealloc(p as *mut u8, Layout::from_size_align(size, 16).unwrap()) };
            }
        });
        for &(p, _) in mine {
            // SAFETY: p is a live block of the dropped heap, freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
        // SAFETY: huge is a live block of the dropped heap.
        unsafe { hakmem_core::free(huge) };
        other.join().unwrap();
        assert_eq!(in_use(), before);
    });
}

#[test]
#[cfg_attr(
    feature = "secure",
    ignore = "secure builds delay the reuse of freed blocks (local_free, random order): the same blocks do not come back at once"
)]
fn the_creating_thread_frees_a_local_heap_block_locally_through_free() {
    // Through the thread heap's `free`, a block of one of the thread's own
    // local heaps goes back to the local heap's page at once (no remote
    // stack, no batch): the heap's next allocations get the same blocks.
    serial(|| {
        let heap = LocalHeap::new();
        let first: HashSet<usize> = (0..64).map(|_| heap.alloc(48, 16) as usize).collect();
        for &p in &first {
            // SAFETY: p is a live block, freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
        let again: HashSet<usize> = (0..64).map(|_| heap.alloc(48, 16) as usize).collect();
        assert_eq!(first, again);
        // Through another local heap of the thread, and through Hakmem's
        // dealloc: the same.
        let other = LocalHeap::new();
        for &p in &again {
            // SAFETY: p is a live block, freed once.
            unsafe { other.free(p as *mut u8) };
        }
        let third: HashSet<usize> = (0..64).map(|_| heap.alloc(48, 16) as usize).collect();
        assert_eq!(first, third);
        drop(other);
        // SAFETY: nothing of the heap is used after this.
        unsafe { heap.destroy() };
    });
}

#[test]
fn remote_frees_reach_a_live_local_heap() {
    serial(|| {
        let before = in_use();
        let heap = LocalHeap::new();
        let mut pages_after_first = 0;
        for round in 0..8 {
            let blocks: Vec<usize> = (0..5000).map(|i| heap.alloc(16 + i % 700, 16) as usize).collect();
            let freer = std::thread::spawn(move || {
                for p in blocks {
                    // SAFETY: p is a live block, freed once, here.
                    unsafe { hakmem_core::free(p as *mut u8) };
                }
            });
            freer.join().unwrap();
            // The heap takes the blocks in (pushed at once, not held in the
            // freeing thread's batches) when its pages run dry: the pages it
            // holds do not grow round after round.
            let pages = hakmem_core::stats().pages_in_use;
            if round == 0 {
                pages_after_first = pages;
            } else {
                assert!(pages <= pages_after_first + 2, "round {round}: {pages} pages");
            }
        }
        drop(heap);
        assert_eq!(in_use(), before);
    });
}

/// The scenario of `a_local_heap_block_freed_by_another_thread_is_not_held_back`,
/// in a process of its own (a child's entry point: ignored in a normal
/// run), so that the destroyed heap's segment is the one the next
/// segment request gets.
#[test]
#[ignore = "run in a child process by a_local_heap_block_freed_by_another_thread_is_not_held_back"]
fn freed_block_not_held_back_child() {
    let heap = LocalHeap::new();
    let blocks: Vec<usize> = (0..16).map(|_| heap.alloc(64, 16) as usize).collect();
    let (freed_tx, freed_rx) = mpsc::channel();
    let (flush_tx, flush_rx) = mpsc::channel::<()>();
    let freer = std::thread::spawn(move || {
        // A heap of its own, to batch in.
        // SAFETY: a block just allocated, freed once.
        unsafe { hakmem_core::free(hakmem_core::malloc(64)) };
        for p in blocks {
            // SAFETY: a live block of the local heap, freed once.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
        freed_tx.send(()).unwrap();
        flush_rx.recv().unwrap();
        hakmem_core::collect(false);
    });
    freed_rx.recv().unwrap();
    // SAFETY: every block of the heap has been freed.
    unsafe { heap.destroy() };
    // Reuse the memory: past this thread's first segment, the next one is
    // the destroyed heap's, from the segment cache.
    let mine: Vec<usize> = (0..(6 << 20) / 64)
        .map(|i| {
            let p = hakmem_core::malloc(64);
            // SAFETY: p is a live block of 64 bytes.
            unsafe { p.write_bytes(0x80 | i as u8, 64) };
            p as usize
        })
        .collect();
    flush_tx.send(()).unwrap();
    freer.join().unwrap();
    for (i, &p) in mine.iter().enumerate() {
        // SAFETY: p is a live block of 64 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, 64) };
        assert!(
            bytes.iter().all(|&b| b == 0x80 | i as u8),
            "block {i} at {p:#x} was overwritten"
        );
        // SAFETY: p is a live block, freed once.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
}

#[test]
fn a_local_heap_block_freed_by_another_thread_is_not_held_back() {
    // Another thread's frees of a live local heap's blocks are pushed to
    // their pages at once, never held in that thread's batches: the heap
    // may be destroyed as soon as the frees return, and a batch flushed
    // later would write into whatever reuses the memory.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "freed_block_not_held_back_child",
            "--ignored",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn realloc_in_a_local_heap_keeps_contents_across_every_size() {
    serial(|| {
        let before = in_use();
        let heap = LocalHeap::new();
        let mut p = heap.alloc(8, 8);
        let mut size = 8;
        fill(p, size, 3);
        for next in [40, 700, 3000, 70_000, 900_000, 3 << 20, 9 << 20, 100, 10] {
            // SAFETY: p is a live block of the heap, allocated with align 8.
            p = unsafe { heap.realloc(p, next, 8) };
            assert!(!p.is_null());
            check_prefix(p, size, 3, next);
            size = next;
            fill(p, size, 3);
        }
        let mut v: ApiVec<u8, &LocalHeap> = ApiVec::new_in(&heap);
        for i in 0..(5 << 20) {
            v.push(i as u8);
        }
        assert!(v.iter().enumerate().all(|(i, &b)| b == i as u8));
        std::mem::forget(v);
        // SAFETY: neither p nor v's buffer is used after this.
        unsafe { heap.destroy() };
        assert_eq!(in_use(), before);
    });
}

#[test]
fn alignment_and_zeroing_in_a_local_heap() {
    serial(|| {
        let heap = LocalHeap::new();
        let mut align = 16;
        while align <= 4 << 20 {
            for size in [1, 100, 5000, 100_000] {
                let p = heap.alloc_zeroed(size, align);
                assert!(!p.is_null());
                assert_eq!(p as usize % align, 0, "size {size} align {align}");
                // SAFETY: p is a live zeroed block of `size` bytes.
                assert!(unsafe { std::slice::from_raw_parts(p, size) }.iter().all(|&b| b == 0));
                // SAFETY: as above.
                unsafe { p.write_bytes(0xAB, size) };
            }
            align *= 8;
        }
        hakmem_core::os_errno_reset();
        assert!(heap.alloc(10, 24).is_null());
        assert_eq!(hakmem_core::os_errno(), libc::EINVAL);
        assert!(heap.alloc(usize::MAX - 100, 16).is_null());
        assert_eq!(hakmem_core::os_errno(), libc::ENOMEM);
        // SAFETY: nothing of the heap is used after this.
        unsafe { heap.destroy() };
    });
}

#[test]
fn a_local_heap_outliving_its_thread_is_given_up_at_exit() {
    serial(|| {
        let before = in_use();
        let abandoned_before = hakmem_core::abandoned_count();
        let retired_before = hakmem_core::stats().heaps_retired;
        let (raw, blocks) = std::thread::spawn(|| {
            let heap = LocalHeap::new();
            let blocks: Vec<usize> = (0..2000)
                .map(|i| {
                    let p = heap.alloc(SIZES[i % SIZES.len()].min(70_000), 16);
                    fill(p, 1, i);
                    p as usize
                })
                .collect();
            // Never deleted: a C program that forgets hakmem_heap_delete.
            (heap.into_raw() as usize, blocks)
        })
        .join()
        .unwrap();
        // The exit gave the heap's memory up with the thread's own: no heap
        // in use is left behind (the struct itself stays reserved for its
        // handle), and the segments wait for reclaim instead of staying with
        // a dead owner: on the abandoned list, or — when the thread heap
        // has few segments, as in `secure` builds, whose blocks above 40 KiB
        // are huge mappings — in the thread heap retired whole for the next
        // new thread (abandon.rs, `RETIRE_SEGMENTS_MAX`).
        assert_eq!(hakmem_core::stats().heaps_in_use, before.2);
        assert!(
            hakmem_core::abandoned_count() > abandoned_before || hakmem_core::stats().heaps_retired > retired_before,
            "the segments went nowhere"
        );
        for (i, &p) in blocks.iter().enumerate() {
            check(p as *const u8, 1, i);
            // SAFETY: p is a live block of the orphaned heap.
            unsafe { hakmem_core::free(p as *mut u8) };
        }
        let _ = raw; // its thread is gone: the handle may not be used here
    });
}

/// A thread that leaves a small local heap alive exits with few segments,
/// so its thread heap is retired whole for the next new thread
/// (abandon.rs), not abandoned: the local heap's memory must have been
/// taken in first — no heap in use left behind — and the next thread,
/// which takes the retired heap over, frees the local heap's blocks as its
/// own, every page going back.
#[test]
fn a_local_heap_of_a_retired_thread_heap_is_taken_in_first() {
    serial(|| {
        let before = in_use();
        let blocks = std::thread::spawn(|| {
            let heap = LocalHeap::new();
            let blocks: Vec<usize> = (0..100)
                .map(|i| {
                    let p = heap.alloc(16 + i, 16);
                    fill(p, 1, i);
                    p as usize
                })
                .collect();
            std::mem::forget(heap);
            blocks
        })
        .join()
        .unwrap();
        assert_eq!(
            hakmem_core::stats().heaps_in_use,
            before.2,
            "the local heap was given up at exit"
        );
        std::thread::spawn(move || {
            for (i, &p) in blocks.iter().enumerate() {
                check(p as *const u8, 1, i);
                // SAFETY: p is a live block of the orphaned heap.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        })
        .join()
        .unwrap();
        assert_eq!(in_use(), before);
    });
}

#[test]
fn local_heaps_of_a_thread_delete_and_destroy_in_any_order() {
    serial(|| {
        let before = in_use();
        let heaps: Vec<LocalHeap> = (0..10).map(|_| LocalHeap::new()).collect();
        let mut kept = Vec::new();
        for (i, heap) in heaps.iter().enumerate() {
            for j in 0..100 {
                let p = heap.alloc(16 * (j % 20 + 1), 16);
                fill(p, 1, i + j);
                kept.push((p as usize, i + j, i));
            }
        }
        for (i, heap) in heaps.into_iter().enumerate() {
            if i % 2 == 0 {
                drop(heap);
            } else {
                // SAFETY: the blocks of odd heaps are dropped from `kept` below
                // and never used.
                unsafe { heap.destroy() };
            }
        }
        for &(p, seed, i) in &kept {
            if i % 2 == 0 {
                check(p as *const u8, 1, seed);
                // SAFETY: p is a live block of a dropped heap.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        }
        assert_eq!(in_use(), before);
    });
}

/// Pages and huge blocks in use (a `secure` build's blocks above 40 KiB
/// are huge).
fn pages() -> usize {
    let s = hakmem_core::stats();
    s.pages_in_use + s.huge_in_use
}

/// A thread that allocates only through local heaps, deleting each while
/// another thread frees its blocks, gets those pages back without calling
/// `collect`. A delete hands the heap's pages to the thread heap, which
/// this thread never allocates from: its local heaps' slow paths do the
/// thread heap's duties (taking in the frees that reach its parked pages,
/// and the time-driven sweep, which alone takes in the frees into its
/// queued pages), or every round's pages would stay in use until the
/// thread exits (and run a secure build out of mappings).
///
/// Each round makes a local heap, allocates `blocks` blocks of sizes from
/// `size`, deletes the heap and has the other thread free every block;
/// after `rounds` rounds and a pause past the longest purge delay, one
/// more round of sizes from `last`, and then at most twice the most pages
/// (and huge blocks) a round added, and 8 more, may be in use.
fn deleted_local_heaps_give_their_pages_back(
    rounds: usize,
    blocks: usize,
    size: fn(u64) -> usize,
    last: fn(u64) -> usize,
) {
    serial(move || {
        let (to_freer, freer) = common::spawn_freer();
        let before = pages();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        // Returns the pages the round added while its heap was full (net
        // of what its own slow paths gave back, floored at 0).
        let mut round = |size: fn(u64) -> usize| {
            let start = pages();
            let heap = LocalHeap::new();
            let blocks: Vec<usize> = (0..blocks)
                .map(|_| {
                    let p = heap.alloc(size(common::xorshift(&mut rng)), 16);
                    assert!(!p.is_null());
                    p as usize
                })
                .collect();
            let held = pages().saturating_sub(start);
            drop(heap);
            let (done_tx, done_rx) = mpsc::channel();
            to_freer.send((blocks, done_tx)).unwrap();
            done_rx.recv().unwrap();
            held
        };
        let mut most = 0;
        for _ in 0..rounds {
            most = most.max(round(size));
        }
        // Past the purge delay (the sweep's interval: at most 1000 ms,
        // policy.rs's `DELAY_MAX_MS`, under the adaptive policy, or what
        // `HAKMEM_PURGE_DELAY` sets), so that the next round's first slow
        // path sweeps the thread heap: only the pages of that round stay.
        let delay = hakmem_core::config().purge_delay_ms.max(1000) as u64;
        std::thread::sleep(Duration::from_millis(delay + 300));
        most = most.max(round(last));
        let kept = pages().saturating_sub(before);
        drop(to_freer);
        freer.join().unwrap();
        assert!(
            kept <= 2 * most + 8,
            "{kept} pages still in use after {} rounds of at most {most} pages each",
            rounds + 1
        );
    });
}

/// Local heaps of 1 000 small and medium blocks.
#[test]
fn pages_freed_after_their_local_heap_was_deleted_come_back_without_collect() {
    let size = |r| 16 + r as usize % 2000;
    deleted_local_heaps_give_their_pages_back(60, 1000, size, size);
}

/// A local heap per request, of a few blocks: fewer slow paths in each
/// heap than a heap's clock check waits for (a local heap looks at the
/// clock on its first).
#[test]
fn pages_of_short_lived_local_heaps_come_back_without_collect() {
    let size = |r| 16 + r as usize % 3000;
    deleted_local_heaps_give_their_pages_back(400, 12, size, size);
}

/// Short-lived local heaps of small and medium blocks, and then one of huge blocks
/// alone: its allocations, which reach no slow path of the segments, do
/// the thread heap's duties too.
#[test]
fn pages_of_deleted_local_heaps_come_back_when_the_thread_goes_on_with_huge_blocks() {
    deleted_local_heaps_give_their_pages_back(
        400,
        12,
        |r| 16 + r as usize % 3000,
        |r| hakmem_core::LARGE_SIZE_MAX + 1 + r as usize % (1 << 20),
    );
}

/// Local heaps of large blocks only (`MEDIUM_SIZE_MAX` to `LARGE_SIZE_MAX`:
/// no slow path of the small classes; their pages parked full, so their
/// frees notify). A `secure` build has no large blocks: there they are
/// huge (up to 1 MiB above `MEDIUM_SIZE_MAX`), which a delete lets go
/// and a free returns at once.
#[test]
fn pages_of_deleted_local_heaps_of_large_blocks_come_back_without_collect() {
    let size = |r| {
        let span = hakmem_core::LARGE_SIZE_MAX
            .saturating_sub(hakmem_core::MEDIUM_SIZE_MAX)
            .max(1 << 20);
        hakmem_core::MEDIUM_SIZE_MAX + 1 + r as usize % span
    };
    deleted_local_heaps_give_their_pages_back(100, 8, size, size);
}

/// A thread that allocates only through local heaps it deletes, while
/// another thread frees every block: the thread heap, which holds the
/// deleted heaps' pages, is swept as the local heaps take segments, so
/// what the frees empty comes back within a few rounds rather than at
/// the next timed sweep (once per purge delay). Before, such a producer
/// held about 780 MB for 32 MB live; here the rounds run well inside one
/// purge delay, and the pages in use after them would add up round after
/// round.
#[test]
fn pages_emptied_behind_a_thread_that_allocates_only_through_local_heaps_are_reused() {
    serial(|| {
        let (to_freer, freer) = common::spawn_freer();
        let before = pages();
        let mut rng = 0x0123_4567_89ab_cdefu64;
        let (mut most, mut peak) = (0, 0);
        let rounds = 120;
        for _ in 0..rounds {
            let start = pages();
            let heap = LocalHeap::new();
            let blocks: Vec<usize> = (0..1000)
                .map(|_| {
                    let p = heap.alloc(16 + common::xorshift(&mut rng) as usize % 8000, 16);
                    assert!(!p.is_null());
                    p as usize
                })
                .collect();
            most = most.max(pages().saturating_sub(start));
            drop(heap);
            let (done_tx, done_rx) = mpsc::channel();
            to_freer.send((blocks, done_tx)).unwrap();
            done_rx.recv().unwrap();
            peak = peak.max(pages().saturating_sub(before));
        }
        drop(to_freer);
        freer.join().unwrap();
        assert!(
            peak <= 3 * most + 8,
            "{peak} pages in use at most after rounds of at most {most} pages each ({rounds} rounds)"
        );
    });
}

/// The stress: owners make local heaps, allocate blocks of every size
/// (huge ones too), hand half to a freeing thread, and delete the heap
/// while that thread frees them (some heaps are destroyed instead, once
/// every handed-out block has been freed); each owner frees the blocks it
/// kept after the delete. Every block's contents are checked before it is
/// freed. `STRESS_SECONDS` sets the length (default 3 s).
#[test]
fn remote_frees_racing_local_heap_deletes() {
    serial(|| {
        let seconds: u64 = std::env::var("STRESS_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3);
        let before = in_use();
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let (to_freer, freer_rx) = mpsc::channel::<(Vec<(usize, usize, usize)>, mpsc::Sender<()>)>();
        let freer = std::thread::spawn(move || {
            for (blocks, done) in freer_rx {
                for (p, size, seed) in blocks {
                    check(p as *const u8, size, seed);
                    // SAFETY: p is a live block handed to this thread, freed once.
                    unsafe { hakmem_core::free(p as *mut u8) };
                }
                let _ = done.send(());
            }
        });
        let owners: Vec<_> = (0..2)
            .map(|t| {
                let to_freer = to_freer.clone();
                std::thread::spawn(move || {
                    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                    let mut rounds = 0u64;
                    while Instant::now() < deadline {
                        rounds += 1;
                        let heap = LocalHeap::new();
                        let mut mine = Vec::new();
                        let mut theirs = Vec::new();
                        for i in 0..400 {
                            let r = common::xorshift(&mut rng) as usize;
                            let size = match r % 100 {
                                0 => (2 << 20) | (r % 4096),
                                1..=3 => 70_000 + r % 500_000,
                                4..=20 => 1025 + r % 60_000,
                                _ => 1 + r % 1024,
                            };
                            let p = heap.alloc(size, 16);
                            assert!(!p.is_null());
                            let seed = i + rounds as usize;
                            fill(p, size, seed);
                            if i % 2 == 0 {
                                theirs.push((p as usize, size, seed));
                            } else {
                                mine.push((p as usize, size, seed));
                            }
                        }
                        let (done_tx, done_rx) = mpsc::channel();
                        to_freer.send((theirs, done_tx)).unwrap();
                        if rounds.is_multiple_of(4) {
                            // Destroy: only once every handed-out block is back.
                            done_rx.recv().unwrap();
                            // SAFETY: `mine` is dropped unused; the freer is done.
                            unsafe { heap.destroy() };
                        } else {
                            // Delete while the freer may still be freeing.
                            drop(heap);
                            for (p, size, seed) in mine {
                                check(p as *const u8, size, seed);
                                // SAFETY: p is a live block of the dropped heap.
                                unsafe { hakmem_core::free(p as *mut u8) };
                            }
                            done_rx.recv().unwrap();
                        }
                    }
                    rounds
                })
            })
            .collect();
        drop(to_freer);
        let rounds: u64 = owners.into_iter().map(|o| o.join().unwrap()).sum();
        freer.join().unwrap();
        assert!(rounds > 4, "{rounds} rounds");
        // The owners have exited (their memory abandoned, perhaps not yet
        // reclaimed): no page or huge block of theirs is still in use beyond
        // what the abandoned segments hold, and no heap is left.
        let after = in_use();
        assert_eq!(after.1, before.1, "huge blocks");
        assert_eq!(after.2, before.2, "heaps");
    });
}
