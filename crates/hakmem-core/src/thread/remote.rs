//! Frees into another thread's page, and the owner's side of them.
//!
//! The freeing thread: blocks are gathered per page in its heap's batches
//! and pushed as one chain on the page's atomic remote stack
//! (`remote_free`, `push_chain`); the push that finds the page parked tells
//! the owner (`Segment::notify`). The owner: its slow path looks at its
//! heap's notification flag and takes in the pages named in its segments'
//! notification bits (`take_notifications`, `process_notified`). And
//! `fork`'s child repairs notifications a vanished thread left half done.
//!
//! **Batching** (the freeing thread).
//!
//! A block freed into another thread's page is not pushed on that page's
//! atomic stack at once: it is prepended to a chain this heap keeps for the
//! page, and the chain is pushed whole with one CAS (`flush_batch`) when it
//! holds `REMOTE_BATCH_BYTES`, when a block of another page needs its slot,
//! and on the heap's periodic slow path, `collect` and thread exit (a
//! block of a segment left on the abandoned list is pushed at once: the
//! purge pass that takes it in looks only at what is on the page). Every
//! remote push steals the cache line the owner's malloc writes; batching
//! makes that one steal per chain instead of one per block (jemalloc's and
//! tcmalloc's thread caches and snmalloc's remote queues batch for the same
//! reason). A batched block is still counted in its page's `used`, so the
//! page stays in use, of its class, until the chain arrives; it already
//! carries its freed mark, so a double free is still caught. What a thread
//! can hold back is bounded: `REMOTE_BATCHES * REMOTE_BATCH_BYTES` (64 KiB),
//! also while it sleeps.

use crate::segment::arena;
use crate::segment::{self, Segment, PAGES_PER_SEGMENT};
use crate::small::page::{Block, Page, PAGE_IN_FULL};
use crate::small::page_queue::settle;
use crate::small::refill::maybe_free_segment;
use crate::sync::{race_window, Ordering, Window};
use crate::thread;
use crate::thread::heap::{is_static_heap, Heap};
use core::ptr;

/// Chains a heap keeps open at a time (one per page, by a hash of the page).
pub(crate) const REMOTE_BATCHES: usize = 16;
/// Bytes of blocks after which a chain is pushed. A block this size or
/// larger is pushed alone, at once.
const REMOTE_BATCH_BYTES: usize = 4096;

/// One open chain of blocks freed into `page`: `head ..= tail`, linked
/// with the page's encoding; `tail`'s link is written by the push.
#[derive(Clone, Copy)]
pub(crate) struct RemoteBatch {
    /// The page the chain's blocks belong to; null when the slot is free.
    page: *mut Page,
    head: *mut Block,
    tail: *mut Block,
    /// Blocks in the chain (their bytes: `count` times the page's block size).
    count: u32,
}

impl RemoteBatch {
    pub(crate) const EMPTY: Self = Self {
        page: ptr::null_mut(),
        head: ptr::null_mut(),
        tail: ptr::null_mut(),
        count: 0,
    };
}

/// The batch slot of `page`: page metadata sits 128 bytes apart in its
/// segment header, so bits 7.. tell the pages of a segment apart, and the
/// segment's own bits are mixed in.
fn batch_slot(page: *const Page) -> usize {
    let a = page as usize;
    ((a >> 7) ^ (a >> segment::SEGMENT_SHIFT)) % REMOTE_BATCHES
}

/// Frees `block` of `page`, a page this thread does not own (its freed mark
/// is written): into the page's open chain, pushed when it is full — or
/// at once when `batch` is false (a local heap's page, which may be
/// destroyed as soon as this free returns: see `Segment::local_parent`).
///
/// # Safety
/// `heap` must be the calling thread's heap (possibly the empty heap);
/// `block` a live block of `page` that the caller is freeing.
pub(crate) unsafe fn remote_free(heap: *mut Heap, page: *mut Page, block: *mut Block, batch: bool) {
    // SAFETY: the caller's guarantees; the batch slots are this thread's.
    unsafe {
        let size = (*page).block_size;
        if !batch || is_static_heap(heap) || size >= REMOTE_BATCH_BYTES {
            // A local heap's block, no heap of its own to gather in (a
            // thread that never allocated, or one that has exited), or a
            // block worth a push.
            push_chain(page, block, block, 1);
            return;
        }
        let batch = &mut (*heap).remote[batch_slot(page)];
        if batch.page == page {
            (*block).next = (*page).encode(batch.head);
            crate::check::valgrind::header_done(block);
            batch.head = block;
            batch.count += 1;
        } else {
            flush_batch(batch);
            *batch = RemoteBatch {
                page,
                head: block,
                tail: block,
                count: 1,
            };
            // Its link is written when the batch is pushed (`push_remote`).
            crate::check::valgrind::header_done(block);
        }
        if batch.count as usize * size >= REMOTE_BATCH_BYTES {
            flush_batch(batch);
        }
    }
}

/// Pushes an open chain to its page (nothing when the slot is free).
///
/// # Safety
/// `batch` must be a slot of the calling thread's heap.
unsafe fn flush_batch(batch: &mut RemoteBatch) {
    if !batch.page.is_null() {
        // A chain pushed into an abandoned segment (its thread exited while
        // the chain waited here) makes a purge pass due, as a free into one
        // does (`free::free_slow`): otherwise its blocks would wait for a
        // thread that reclaims or tidies that very segment. Read before the
        // push, while the blocks keep the page in use and the segment
        // mapped (nothing of it is touched after the push). An owner that
        // exits between this read and the push has made a pass due itself
        // (`abandon::abandon_segments`). Relaxed: a hint for the note, which
        // is what orders the push for the pass (`note_abandoned_free`).
        let seg = segment::segment_of(batch.page as *const u8);
        // SAFETY: the batch's blocks keep batch.page in use, so its segment is mapped.
        let abandoned = unsafe {
            (*seg).touch();
            (*seg).heap.load(Ordering::Relaxed)
        }
        .is_null();
        if abandoned {
            // SAFETY: as above: the segment is mapped until the push.
            unsafe { (*seg).note_late_free(batch.page) };
        }
        // SAFETY: the chain's blocks are blocks of batch.page this thread
        // freed; the page stays in use while they are counted in `used`.
        unsafe { push_chain(batch.page, batch.head, batch.tail, batch.count) };
        *batch = RemoteBatch::EMPTY;
        if abandoned {
            crate::segment::purge::note_abandoned_free();
        }
    }
}

/// Pushes every open chain of `heap` to its page.
///
/// # Safety
/// `heap` must be the calling thread's heap (or an exiting thread's).
pub(crate) unsafe fn flush_remote(heap: *mut Heap) {
    // SAFETY: forwarded from the caller.
    unsafe {
        for batch in (*heap).remote.iter_mut() {
            flush_batch(batch);
        }
    }
}

/// Pushes the chain `head ..= tail` of `count` of `page`'s blocks on its
/// remote stack and tells the owner when the page was parked full.
///
/// # Safety
/// The chain must be blocks of `page`, linked with its encoding, that the
/// caller freed and owns until this push.
unsafe fn push_chain(page: *mut Page, head: *mut Block, tail: *mut Block, count: u32) {
    // SAFETY: the caller's guarantee; a page's metadata lies in its
    // segment's header, so segment_of finds the segment from it. Once the
    // push has published the blocks, the owner may take them in and
    // release the page at any time: only `NOTIFYING` (set by the push
    // when it found the page parked) keeps the segment mapped for the
    // notification, and after `end_notify` nothing of it is touched.
    unsafe {
        if (*page).push_remote(head, tail, count) {
            race_window(Window::RemoteNotify);
            (*segment::segment_of(page as *const u8)).notify(page);
            race_window(Window::RemoteNotify);
            (*page).end_notify();
        }
    }
}

/// The slow path's look at the heap's notification flag.
///
/// # Safety
/// `heap` must be the calling thread's heap (not a static one).
#[inline]
pub(crate) unsafe fn take_notifications(heap: *mut Heap) {
    // Relaxed: a hint; process_notified's Acquire RMW is what orders. A
    // notification this misses is seen on a later slow path (the
    // notifier's store stays until the owner's swap takes it).
    // SAFETY: the caller's guarantee.
    if unsafe { (*heap).notified.load(Ordering::Relaxed) } {
        // SAFETY: as above.
        unsafe { process_notified(heap) };
    }
}

/// `take_notifications` of `heap` and, for a live local heap, of its
/// thread heap too: a thread that allocates only through local heaps runs
/// no slow path of its thread heap, which holds the pages of the local
/// heaps it deleted, parked full until the frees other threads make into
/// them are taken in here.
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps (not
/// a static one).
#[inline]
pub(crate) unsafe fn take_notifications_with_parent(heap: *mut Heap) {
    // SAFETY: the caller's guarantee; a live local heap's parent is the
    // calling thread's heap (local.rs).
    unsafe {
        take_notifications(heap);
        if let Some(parent) = (*heap).live_parent() {
            take_notifications(parent);
        }
    }
}

/// Acts on remote frees that ended parked-full states in our segments.
#[cold]
pub(crate) unsafe fn process_notified(heap: *mut Heap) {
    // SAFETY: heap is the caller's own heap; its segments are owned by it.
    unsafe {
        // Acquire: pairs with the notifiers' Release store of `notified`,
        // so their `notify_bits` bits are visible below. A swap, not a
        // store: it reads the latest value, so a notification that lands
        // after it leaves the flag set for the next slow path.
        if !(*heap).notified.swap(false, Ordering::Acquire) {
            return;
        }
        let mut seg = (*heap).segments;
        while !seg.is_null() {
            let next = (*seg).next;
            // Relaxed: a notifier whose flag the swap above read happens
            // before this load, which therefore sees its bit (or a later
            // value); bits from notifiers not yet seen are found next time.
            if (*seg).notify_bits.load(Ordering::Relaxed) != 0 {
                // Acquire: pairs with the notifiers' Release fetch_or (the
                // blocks themselves are ordered by `collect_remote`).
                let bits = (*seg).notify_bits.swap(0, Ordering::Acquire);
                for i in 0..PAGES_PER_SEGMENT {
                    if bits & (1 << i) == 0 {
                        continue;
                    }
                    let page = &mut (*seg).pages[i] as *mut Page;
                    if !(*page).in_use || (*page).flags & PAGE_IN_FULL == 0 {
                        continue; // no longer parked: its blocks are collected normally
                    }
                    (*page).collect_remote();
                    settle(heap, seg, page);
                }
                maybe_free_segment(heap, seg);
            }
            seg = next;
        }
    }
}

/// `fork` child: a thread that was telling an owner about a page (between
/// its push and `end_notify`) does not exist in the child, so its page
/// would stay `NOTIFYING` and every release of it would wait forever. The
/// child is alone: clear the bit on the pages it can reach — its own
/// heap's, its local heaps', the retired heaps' and the abandoned
/// segments' — and redo the notification the lost thread may not have
/// finished (the page's bit and the heap's flag; a reclaimer takes every
/// page of an abandoned segment in anyway).
#[cfg(not(hakmem_loom))]
pub(crate) fn fork_child_repair() {
    let heap = thread::heap();
    let repair = |seg: *mut Segment, owner: *mut Heap| {
        for i in 1..PAGES_PER_SEGMENT {
            // SAFETY: seg is a live segment the child alone uses now.
            unsafe {
                let page = &mut (*seg).pages[i] as *mut Page;
                if (*page).in_use && (*page).is_notifying() {
                    (*page).end_notify();
                    if !owner.is_null() {
                        // Relaxed: the child is alone.
                        (*seg).notify_bits.fetch_or(1 << i, Ordering::Relaxed);
                        (*owner).notified.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
    };
    let repair_heap = |owner: *mut Heap| {
        // SAFETY: the heap is this (the only) thread's, or one of its
        // local heaps (also its alone).
        let mut seg = unsafe { (*owner).segments };
        while !seg.is_null() {
            repair(seg, owner);
            // SAFETY: as above.
            seg = unsafe { (*seg).next };
        }
    };
    if !is_static_heap(heap) {
        repair_heap(heap);
        // SAFETY: as above: the thread heap's list of its local heaps.
        let mut local = unsafe { (*heap).locals };
        while !local.is_null() {
            repair_heap(local);
            // SAFETY: as above.
            local = unsafe { (*local).local_next };
        }
    }
    arena::abandoned_for_each(|seg| repair(seg, ptr::null_mut()));
    crate::thread::abandon::retired_for_each(|retired| {
        // SAFETY: a retired heap no thread uses; the child is alone.
        let mut seg = unsafe { (*retired).segments };
        while !seg.is_null() {
            repair(seg, retired);
            // SAFETY: as above.
            seg = unsafe { (*seg).next };
        }
    });
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    /// How the two remote-batch tests below end the freeing thread's part.
    #[derive(Clone, Copy)]
    enum Flush {
        ThreadExit,
        Collect,
    }

    /// 1000 blocks of 256 bytes over four pages: a batch holds 16 of them,
    /// so the last page's 232 leave a partial batch behind.
    const BLOCK: usize = 256;
    const BLOCKS: usize = 1000;

    fn page_of(p: usize) -> *mut Page {
        // SAFETY: p is a live small block of this allocator.
        unsafe { (*segment::segment_of(p as *const u8)).page_of(p as *const u8) }
    }

    /// Blocks of `pages` still counted as used by their owner minus those
    /// waiting on the pages' remote stacks: those another thread holds back.
    fn held_back(pages: &[usize]) -> u32 {
        pages
            .iter()
            // SAFETY: the pages are in use; their owner (the test's thread)
            // is blocked while this reads them.
            .map(|&p| unsafe { (*(p as *mut Page)).used - (*(p as *mut Page)).remote_waiting() })
            .sum()
    }

    /// Allocates on this thread, frees every block on another (batched
    /// there), and checks that some are held back until that thread
    /// flushes by `flush`, and none after; then the owner gets every page
    /// back.
    fn remote_frees_reach_their_pages(flush: Flush) {
        use std::sync::mpsc::channel;
        extern crate std;
        let blocks: std::vec::Vec<usize> = (0..BLOCKS).map(|_| crate::alloc(BLOCK, 16) as usize).collect();
        let mut pages: std::vec::Vec<usize> = blocks.iter().map(|&b| page_of(b) as usize).collect();
        pages.sort_unstable();
        pages.dedup();
        assert!(pages.len() >= 4);
        assert_eq!(held_back(&pages), BLOCKS as u32);
        let (freed_tx, freed_rx) = channel::<()>();
        let (go_tx, go_rx) = channel::<()>();
        let (flushed_tx, flushed_rx) = channel::<()>();
        let freer = std::thread::spawn(move || {
            // A heap of its own to gather batches in.
            let own = crate::alloc(16, 16);
            // SAFETY: own and every block are live blocks of this allocator,
            // freed once.
            unsafe {
                crate::free(own);
                for &b in &blocks {
                    crate::free(b as *mut u8);
                }
            }
            freed_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            if let Flush::Collect = flush {
                crate::collect(false);
                flushed_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            }
        });
        freed_rx.recv().unwrap();
        let before = held_back(&pages);
        assert!(
            before > 0 && before < BLOCKS as u32,
            "{before} blocks held back in batches"
        );
        go_tx.send(()).unwrap();
        if let Flush::Collect = flush {
            flushed_rx.recv().unwrap();
            assert_eq!(held_back(&pages), 0, "collect flushed every batch");
            go_tx.send(()).unwrap();
        }
        freer.join().unwrap();
        assert_eq!(held_back(&pages), 0, "every batch was flushed");
        crate::collect(true);
        for &p in &pages {
            // SAFETY: the page metadata stays mapped (its segment is ours).
            assert!(!unsafe { (*(p as *mut Page)).in_use }, "page {p:#x} was given back");
        }
    }

    #[test]
    fn batched_remote_frees_reach_their_pages_when_the_freeing_thread_exits() {
        remote_frees_reach_their_pages(Flush::ThreadExit);
    }

    #[test]
    fn batched_remote_frees_reach_their_pages_when_the_freeing_thread_collects() {
        remote_frees_reach_their_pages(Flush::Collect);
    }
}

/// Tests of the protocol windows, in the `hakmem_race_windows` build only
/// (scripts/test runs them there).
#[cfg(all(test, hakmem_race_windows))]
mod window_tests {
    extern crate std;
    use crate::sync::{set_window_hook, Window};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    static NOTIFYING: AtomicBool = AtomicBool::new(false);

    /// Stays a while between a remote push into a parked page and the end
    /// of its notification (the page `NOTIFYING`), so that the page's
    /// owner forks meanwhile.
    fn linger_while_notifying(window: Window) {
        if window == Window::RemoteNotify && !NOTIFYING.swap(true, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Issue 22, hole 6: a fork while another thread is telling a local
    /// heap's owner about its large block (its page `NOTIFYING`): in the
    /// child, where that thread does not exist, destroying the local heap
    /// releases the page — which waits for the notifier to finish. The
    /// child's repair must clear the bit on local heaps' pages too (before,
    /// the child waited forever).
    #[test]
    fn a_fork_while_a_local_heap_page_is_notifying_leaves_the_child_able_to_release_it() {
        let _serial = crate::sync::serial_window_tests();
        let heap = crate::LocalHeap::new();
        // A large block: its page is parked at once, so the first remote
        // free notifies.
        let p = heap.alloc(300_000, 16) as usize;
        assert!(p != 0);
        let freer = std::thread::spawn(move || {
            set_window_hook(Some(linger_while_notifying));
            // SAFETY: a live block of the local heap, freed once.
            unsafe { crate::free(p as *mut u8) };
            set_window_hook(None);
        });
        while !NOTIFYING.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // SAFETY: the child destroys the heap and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: the block was freed (by the thread the child lacks);
            // nothing of the heap is used after this.
            unsafe { heap.destroy() };
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(0) };
        }
        assert!(pid > 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut status = 0;
        let done = loop {
            // SAFETY: pid is our child.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break true;
            }
            if Instant::now() > deadline {
                // SAFETY: our child, stuck.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        freer.join().unwrap();
        assert!(
            done,
            "the child hung releasing a page left NOTIFYING by a thread it lacks"
        );
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child status {status:#x}"
        );
        // SAFETY: nothing of the heap is used after this.
        unsafe { heap.destroy() };
    }
}
