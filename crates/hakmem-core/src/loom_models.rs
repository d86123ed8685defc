//! loom models of hakmem's lock-free protocols, built with
//! `RUSTFLAGS="--cfg hakmem_loom"` (see docs/TESTING.md). Each model builds
//! its state inside `loom::model` and drives the real code: `Page` and
//! `LockedList` directly, and the heap's own slow paths (`alloc_large`,
//! `free_slow`, `heap_abandon`, `segment_acquire`), which under loom run on
//! loom's atomics, a loom thread-local heap slot and real (deferred-unmap)
//! mappings; hakmem is never the global allocator here (loom allocates).

extern crate std;

use crate::list::LockedList;
use crate::segment;
use crate::small::page::{Block, Page, PAGE_IN_FULL};
use crate::sync::{AtomicU32, Ordering};
use crate::thread::heap::{self, Heap};
use loom::sync::Arc;
use loom::thread;
use std::boxed::Box;
use std::vec::Vec;

const BLOCK: usize = 64;

/// A page over a leaked buffer of `blocks` blocks, all carved.
fn carved_page(blocks: usize) -> *mut Page {
    // Draws the freed mark's key first, as a real segment's mapping does.
    crate::config::config();
    let buf = Box::leak(std::vec![0u8; blocks * BLOCK].into_boxed_slice());
    let page = Box::into_raw(Box::new(Page::empty()));
    // SAFETY: page was just allocated; buf outlives the model (leaked).
    unsafe {
        (*page).init(0, BLOCK, buf.as_mut_ptr(), 1, blocks * BLOCK, false);
        (*page).extend();
    }
    page
}

/// Drains `free` (after collecting remote frees), checking every block is
/// distinct.
fn drain_distinct(page: *mut Page) -> usize {
    let mut seen = Vec::new();
    // SAFETY: called by the only remaining thread, which owns the page.
    unsafe {
        (*page).collect_remote();
        while !(*page).free.is_null() {
            let b = (*page).pop(1) as usize;
            assert!(!seen.contains(&b), "block {b:#x} returned twice");
            seen.push(b);
        }
    }
    seen.len()
}

#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: the models hand raw pointers between threads exactly as the
// allocator does; every access follows the protocol under test.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// Remote free: one thread pushes a chain of two blocks (a flushed batch),
/// another a single block, while the owner collects (with `free` empty, so
/// the stack is taken without a walk, and then with `free` holding a block,
/// so the chain is walked to its tail); no block is lost or returned twice,
/// and `used` ends right (the count travels in the stack word).
#[test]
fn remote_frees_are_collected_exactly_once() {
    loom::model(|| {
        let page = SendPtr(carved_page(4));
        // SAFETY: the owner allocates all four blocks before sharing.
        let blocks: Vec<usize> = unsafe { (0..4).map(|_| (*page.0).pop(1) as usize).collect() };
        let (b0, b1, b2) = (
            blocks[0] as *mut Block,
            blocks[1] as *mut Block,
            blocks[2] as *mut Block,
        );
        let chain = (SendPtr(b0), SendPtr(b1));
        let chain_pusher = thread::spawn(move || {
            let (head, tail) = (chain.0 .0, chain.1 .0);
            // SAFETY: both blocks are live and freed by this thread only;
            // the chain is linked with the page's encoding, as a batch is.
            unsafe {
                (*head).next = (*page.0).encode(tail);
                (*page.0).push_remote(head, tail, 2);
            }
        });
        let single = SendPtr(b2);
        let single_pusher = thread::spawn(move || {
            let b = single.0;
            // SAFETY: block b is live and freed by this thread only.
            unsafe { (*page.0).push_remote(b, b, 1) };
        });
        // The owner collects concurrently, frees its fourth block locally,
        // and collects again.
        // SAFETY: the owner's fields are touched by this thread only.
        unsafe {
            (*page.0).collect_remote();
            (*page.0).push(blocks[3] as *mut Block);
            (*page.0).collect_remote();
        }
        chain_pusher.join().unwrap();
        single_pusher.join().unwrap();
        // SAFETY: all other threads have finished.
        unsafe { (*page.0).collect_remote() };
        // SAFETY: as above.
        assert_eq!(unsafe { (*page.0).used }, 0);
        assert_eq!(drain_distinct(page.0), 4);
    });
}

/// The owner parks a full page; the first remote free must notify it (no
/// lost wake-up), and only that one.
#[test]
fn parked_page_notifies_on_first_remote_free() {
    loom::model(|| {
        let page = SendPtr(carved_page(2));
        // SAFETY: the owner allocates both blocks and parks the page.
        let blocks: Vec<usize> = unsafe {
            let b = (0..2).map(|_| (*page.0).pop(1) as usize).collect();
            (*page.0).flags = PAGE_IN_FULL;
            assert!((*page.0).try_set_full_notify());
            b
        };
        let notified = Arc::new(AtomicU32::new(0));
        let pushers: Vec<_> = blocks
            .iter()
            .map(|&b| {
                let notified = notified.clone();
                thread::spawn(move || {
                    // SAFETY: block b is live and freed by this thread only.
                    if unsafe { (*page.0).push_remote(b as *mut Block, b as *mut Block, 1) } {
                        notified.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        assert_eq!(notified.load(Ordering::SeqCst), 1, "exactly one notification");
        assert_eq!(drain_distinct(page.0), 2);
    });
}

/// A large block of a thread that is the only one it has: its page is
/// parked with `FULL_NOTIFY` at once (as a full page of small blocks is),
/// so the remote free of it must tell the owner, and the owner's release of
/// it empties the segment, which is unmapped (no segment cache under loom).
fn large_block_of_this_thread() -> (*mut Heap, SendPtr<u8>) {
    let heap = crate::thread::init_heap();
    // SAFETY: heap is this thread's heap.
    let (p, _) = unsafe { crate::small::alloc::alloc_large(heap, 100_000) };
    assert!(!p.is_null());
    (heap, SendPtr(p))
}

/// Frees `p` from a thread without a heap (loom threads start on the
/// empty heap): the real `free_slow`, a remote push and its notification.
fn free_remotely(p: SendPtr<u8>) -> loom::thread::JoinHandle<()> {
    thread::spawn(move || {
        let p = p.0;
        // SAFETY: p is a live block of this allocator, freed once, here.
        unsafe { crate::small::free::free_slow(segment::segment_of(p), p) };
    })
}

/// After the model's threads are done: the segment of `p` is unmapped; or
/// the freeing thread took it over (it was abandoned when the block was
/// freed, `free::take_over_abandoned`) and released the page; or it waits
/// on the abandoned list with the block on its page's remote stack, in
/// which case a new heap reclaims it and finds it empty (the block came
/// back exactly once).
fn block_came_back(p: SendPtr<u8>) {
    let seg = segment::segment_of(p.0);
    // SAFETY: the other threads have finished (joined); the header is
    // still mapped under loom (unmaps are deferred to the execution's end).
    unsafe {
        if !(*seg).is_mapped() {
            return;
        }
        if crate::segment::arena::abandoned_count() == 0 {
            assert!(!(*seg).heap.load(Ordering::Relaxed).is_null(), "taken over");
            assert_eq!((*seg).used_pages, 0, "the block came back and its page was released");
            return;
        }
        assert_eq!(
            crate::segment::arena::abandoned_count(),
            1,
            "a mapped segment was abandoned"
        );
        let heap = crate::thread::init_heap();
        let found = crate::thread::abandon::segment_acquire(heap, 1, crate::small::class::CLASS_COUNT);
        assert_eq!(found, seg, "the abandoned segment is reclaimed");
        assert_eq!((*seg).used_pages, 0, "the block came back and its page was released");
    }
}

/// Hole 1 of issue 14, owner exit: a thread frees another thread's block
/// (the page's first remote free, so it notifies) while the owner exits.
/// The owner's abandon takes the block in, releases the page and unmaps the
/// empty segment: the freeing thread must touch nothing of it after the
/// owner can have done so (`Segment::touch` makes loom check every access).
#[test]
fn remote_free_notify_racing_owner_exit_touches_no_unmapped_segment() {
    loom::model(|| {
        let (owner, p) = large_block_of_this_thread();
        let freer = free_remotely(p);
        // This thread exits (as thread::thread_exit does).
        crate::thread::set_heap(heap::EXITED_HEAP.get());
        // SAFETY: owner is this thread's heap, no longer used by it.
        unsafe { crate::thread::abandon::heap_abandon(owner) };
        freer.join().unwrap();
        block_came_back(p);
    });
}

/// Hole 1 of issue 14, reclaim: the owner has exited; a thread frees its
/// block (notifying) while another reclaims the abandoned segment, takes
/// the block in, releases the page and, exiting, unmaps the empty segment.
#[test]
fn remote_free_notify_racing_reclaim_touches_no_unmapped_segment() {
    loom::model(|| {
        let (owner, p) = large_block_of_this_thread();
        crate::thread::set_heap(heap::EXITED_HEAP.get());
        // SAFETY: owner is this thread's heap, no longer used by it.
        unsafe { crate::thread::abandon::heap_abandon(owner) };
        assert_eq!(crate::segment::arena::abandoned_count(), 1);
        let freer = free_remotely(p);
        let reclaimer = thread::spawn(move || {
            let heap = crate::thread::init_heap();
            // SAFETY: heap is this thread's; it reclaims the abandoned
            // segment (the only one), then exits.
            unsafe {
                assert!(!crate::thread::abandon::segment_acquire(heap, 1, crate::small::class::CLASS_COUNT).is_null());
                crate::thread::set_heap(heap::EXITED_HEAP.get());
                crate::thread::abandon::heap_abandon(heap);
            }
        });
        freer.join().unwrap();
        reclaimer.join().unwrap();
        block_came_back(p);
    });
}

/// Whether `p`'s page has been released (its block came back and the
/// owner took it in).
fn page_released(p: SendPtr<u8>) -> bool {
    let seg = segment::segment_of(p.0);
    // SAFETY: called after the joins; the header stays mapped under loom.
    unsafe { !(*(*seg).page_of(p.0)).in_use }
}

/// Hole 6 of issue 14, live owner: the first remote free into a page its
/// owner parked always reaches the owner. The owner's slow path runs while
/// the block is freed; afterwards (the join) its next slow path must take
/// the block in — the notification is never consumed without its page
/// being seen. (A relaxed look at the segment's bits after clearing the
/// heap's flag lost it: the flag cleared, the bit unseen.)
#[test]
fn remote_free_into_a_parked_page_always_reaches_its_live_owner() {
    loom::model(|| {
        let (owner, p) = large_block_of_this_thread();
        let freer = free_remotely(p);
        // SAFETY: owner is this thread's heap.
        unsafe { crate::thread::remote::take_notifications(owner) };
        freer.join().unwrap();
        // SAFETY: as above.
        unsafe { crate::thread::remote::take_notifications(owner) };
        assert!(page_released(p), "the owner's slow path took the block in");
    });
}

/// Hole 6 of issue 14, reclaim: the owner has exited; a thread frees its
/// block while another reclaims the segment. The reclaimer takes the block
/// in itself, or hears of it: after the join its next slow path does.
#[test]
fn remote_free_into_a_reclaimed_parked_page_always_reaches_the_reclaimer() {
    loom::model(|| {
        let (owner, p) = large_block_of_this_thread();
        crate::thread::set_heap(heap::EXITED_HEAP.get());
        // SAFETY: owner is this thread's heap, no longer used by it.
        unsafe { crate::thread::abandon::heap_abandon(owner) };
        let freer = free_remotely(p);
        let reclaimer = thread::spawn(|| {
            let heap = crate::thread::init_heap();
            // SAFETY: heap is this thread's.
            unsafe {
                assert!(!crate::thread::abandon::segment_acquire(heap, 1, crate::small::class::CLASS_COUNT).is_null())
            };
            SendPtr(heap)
        });
        freer.join().unwrap();
        let heap = reclaimer.join().unwrap();
        // The reclaimer's next slow path (its thread is done: this thread
        // stands in for it, as a thread's heap is only ever its own).
        // SAFETY: the reclaimer's thread has finished; nobody else uses it.
        unsafe { crate::thread::remote::take_notifications(heap.0) };
        assert!(page_released(p), "the reclaimer took the block in");
    });
}

/// Issue 17: a block of a local heap is freed by another thread while the
/// heap's thread deletes the heap — its segment taken in by the thread
/// heap (`abandon::reclaim`). `large`: the heap's large block, its page
/// parked at once, so the free notifies (the notification may reach the
/// deleted heap or the thread heap); otherwise a small block of a queued
/// page, pushed without a notification. With `exit`, the thread then
/// exits, freeing and unmapping the segment once the block is back: the
/// freeing thread touches nothing of the segment after it can be
/// unmapped, and the block comes back exactly once. Without, the thread
/// heap's next slow path must take the block in (a notification that
/// reached only the deleted heap would be lost).
fn local_heap_block_freed_while_the_heap_is_deleted(large: bool, exit: bool) {
    loom::model(move || {
        let owner = crate::thread::init_heap();
        let local = crate::thread::local::local_new();
        assert!(!local.is_null());
        // SAFETY: local is this thread's live local heap.
        let p = unsafe {
            if large {
                crate::small::alloc::alloc_large(local, 100_000).0
            } else {
                crate::small::alloc::alloc_small(local, 64, 64)
            }
        };
        assert!(!p.is_null());
        let p = SendPtr(p);
        let freer = if large {
            free_remotely(p)
        } else {
            free_remotely_and_flush(p)
        };
        // SAFETY: local is this thread's, not used after this.
        unsafe { crate::thread::local::local_delete(local) };
        if exit {
            // As thread::thread_exit does.
            crate::thread::set_heap(heap::EXITED_HEAP.get());
            // SAFETY: owner is this thread's heap, no longer used by it.
            unsafe { crate::thread::abandon::heap_abandon(owner) };
            freer.join().unwrap();
            if large {
                block_came_back(p);
            } else {
                small_block_came_back(p);
            }
        } else {
            freer.join().unwrap();
            // SAFETY: owner is this thread's heap.
            unsafe { crate::thread::remote::take_notifications(owner) };
            assert!(page_released(p), "the thread heap took the block in");
        }
    });
}

/// `free_remotely`, then the freeing thread's batches pushed, as its exit
/// would: a freer that found the segment ownerless made itself a heap
/// (`free::take_over_abandoned`) and, when the segment was not on the
/// abandoned list yet, batched the small block there.
fn free_remotely_and_flush(p: SendPtr<u8>) -> loom::thread::JoinHandle<()> {
    thread::spawn(move || {
        let p = p.0;
        // SAFETY: p is a live block of this allocator, freed once, here;
        // thread::heap() is this thread's heap.
        unsafe {
            crate::small::free::free_slow(segment::segment_of(p), p);
            let heap = crate::thread::heap();
            if !heap::is_static_heap(heap) {
                crate::thread::remote::flush_remote(heap);
            }
        }
    })
}

/// `block_came_back` for a small block: a freeing thread that took the
/// segment over (`free::take_over_abandoned`) keeps the emptied page when
/// it is its class's only page (`free::page_retire`), so the page, not the
/// segment, must be empty — the block came back exactly once.
fn small_block_came_back(p: SendPtr<u8>) {
    let seg = segment::segment_of(p.0);
    // SAFETY: as in `block_came_back`: the other threads have finished.
    unsafe {
        if (*seg).is_mapped() && crate::segment::arena::abandoned_count() == 0 {
            assert!(!(*seg).heap.load(Ordering::Relaxed).is_null(), "taken over");
            let page = (*seg).page_of(p.0);
            assert!(!(*page).in_use || (*page).used == 0, "the block came back once");
            return;
        }
    }
    block_came_back(p);
}

#[test]
fn local_heap_large_block_freed_remotely_while_the_heap_is_deleted() {
    local_heap_block_freed_while_the_heap_is_deleted(true, false);
}

#[test]
fn local_heap_large_block_freed_remotely_while_the_heap_is_deleted_and_its_thread_exits() {
    local_heap_block_freed_while_the_heap_is_deleted(true, true);
}

#[test]
fn local_heap_small_block_freed_remotely_while_the_heap_is_deleted_and_its_thread_exits() {
    local_heap_block_freed_while_the_heap_is_deleted(false, true);
}

/// Issue 17: the thread of a live local heap frees one block of a parked
/// page of it through its thread heap (`free_slow` takes it locally, into
/// the local heap, without an atomic) while another thread frees the
/// page's other block (the push that notifies the local heap): no block is
/// lost or counted twice.
#[test]
fn local_heap_creator_free_racing_a_remote_free_of_the_same_page() {
    loom::model(|| {
        let _owner = crate::thread::init_heap();
        let local = crate::thread::local::local_new();
        // Two blocks of one small page, the page parked by hand as
        // `find_page` parks a page it finds without a free block.
        // SAFETY: local is this thread's live local heap; the page is
        // the local heap's, handled as its owner does.
        let (a, b, page) = unsafe {
            let a = crate::small::alloc::alloc_small(local, 1024, 1024);
            let b = crate::small::alloc::alloc_small(local, 1024, 1024);
            let seg = segment::segment_of(a);
            let page = (*seg).page_of(a);
            assert_eq!(page, (*seg).page_of(b));
            while !(*page).free.is_null() || (*page).extend() {
                (*page).pop(1024);
            }
            crate::small::page_queue::queue_remove(local, page);
            crate::small::page_queue::settle(local, seg, page);
            assert_eq!((*page).flags, PAGE_IN_FULL, "parked");
            (a, SendPtr(b), SendPtr(page))
        };
        let freer = free_remotely(b);
        // SAFETY: a is a live block of this thread's local heap.
        unsafe { crate::small::free::free_slow(segment::segment_of(a), a) };
        freer.join().unwrap();
        // SAFETY: the other thread has finished; the page is the local
        // heap's, this thread's.
        unsafe {
            let page = page.0;
            (*page).collect_remote();
            assert_eq!((*page).used, (*page).capacity - 2, "both blocks came back, once");
            assert!((*page).is_valid());
        }
    });
}

type Node = crate::list::TestNode;

/// A node of the models' own, freed by the model (`Box::from_raw`).
fn new_node() -> *mut Node {
    Box::into_raw(Box::new(Node::EMPTY))
}

/// The segment cache / abandoned list: concurrent push and pop lose and
/// duplicate nothing.
#[test]
fn locked_list_push_pop_loses_nothing() {
    loom::model(|| {
        let list = Arc::new(LockedList::<Node>::new());
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let list = list.clone();
                thread::spawn(move || {
                    let node = new_node();
                    assert!(list.push(node, usize::MAX));
                    SendPtr(list.pop())
                })
            })
            .collect();
        let mut popped: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap().0 as usize).collect();
        assert!(popped.iter().all(|&p| p != 0), "each pop follows a push");
        while let Some(p) = Some(list.pop()).filter(|p| !p.is_null()) {
            popped.push(p as usize);
        }
        popped.sort_unstable();
        popped.dedup();
        assert_eq!(popped.len(), 2);
        assert_eq!(list.len(), 0);
    });
}

/// A free into an abandoned segment takes it off the list (`remove`) while
/// another thread pops: the node is taken exactly once, by one or the
/// other, and the list stays whole. Both the head (the node the pop may
/// take) and the tail (whose back link the pop rewrites) are removed.
#[test]
fn locked_list_remove_beside_pop_takes_each_node_once() {
    for tail in [false, true] {
        locked_list_remove_beside_pop(tail);
    }
}

fn locked_list_remove_beside_pop(tail: bool) {
    loom::model(move || {
        let list = Arc::new(LockedList::<Node>::new());
        let (head, last) = (new_node(), new_node());
        assert!(list.push(last, usize::MAX));
        assert!(list.push(head, usize::MAX));
        let (x, y) = if tail { (last, head) } else { (head, last) };
        let remover = {
            let (list, x) = (list.clone(), SendPtr(x));
            // SAFETY: x is valid until the model frees it, and on this list or none.
            thread::spawn(move || unsafe { list.remove(x.0) })
        };
        let popper = {
            let list = list.clone();
            thread::spawn(move || SendPtr(list.pop()))
        };
        let removed = remover.join().unwrap();
        let mut popped = std::vec![popper.join().unwrap().0];
        while let Some(p) = Some(list.pop()).filter(|p| !p.is_null()) {
            popped.push(p);
        }
        let popped_x = popped.iter().filter(|&&p| p == x).count();
        assert_eq!(usize::from(removed) + popped_x, 1, "x taken once");
        assert_eq!(popped.iter().filter(|&&p| p == y).count(), 1, "y taken once");
        assert_eq!(list.len(), 0);
        // SAFETY: as above.
        assert!(!unsafe { list.remove(x) }, "x is on no list any more");
        // SAFETY: both nodes are off the list; made by new_node.
        unsafe {
            drop(Box::from_raw(x));
            drop(Box::from_raw(y));
        }
    });
}

/// Issue 22, hole 5: two threads free the large blocks of one owner, each
/// in a segment of its own, so each push finds its page parked and
/// notifies: a bit in its segment, then the heap's flag. The owner's slow
/// path runs meanwhile. Whichever notification its swap of the flag reads,
/// the other segment's bit must not be lost: seen now, or the flag left
/// set for the next slow path. With the flag set by a plain store, the
/// later store does not carry the earlier notifier's release sequence, so
/// the owner could clear the flag, miss the earlier bit, and leave that
/// page parked for good.
#[test]
fn two_notifiers_on_two_segments_of_one_heap_are_both_seen() {
    loom::model(|| {
        let heap = crate::thread::init_heap();
        // SAFETY: heap is this thread's heap.
        let blocks: Vec<SendPtr<u8>> = (0..2)
            .map(|_| unsafe { SendPtr(crate::small::alloc::alloc_large(heap, 1_500_000).0) })
            .collect();
        assert!(blocks.iter().all(|p| !p.0.is_null()));
        assert_ne!(
            segment::segment_of(blocks[0].0),
            segment::segment_of(blocks[1].0),
            "a segment each"
        );
        let freers: Vec<_> = blocks.iter().map(|&p| free_remotely(p)).collect();
        // SAFETY: heap is this thread's heap.
        unsafe { crate::thread::remote::take_notifications(heap) };
        for f in freers {
            f.join().unwrap();
        }
        // SAFETY: as above.
        unsafe { crate::thread::remote::take_notifications(heap) };
        for &p in &blocks {
            assert!(page_released(p), "the owner took the block in");
        }
    });
}

/// Issue 27: a thread frees a block into a dead thread's segment and
/// leaves the segment on the abandoned list (here the freeing thread is
/// exiting too, with only the static heap, as `take_over_abandoned` does
/// for a thread that owns many segments): it pushes the block at once,
/// notifying, then makes a purge pass due (`note_abandoned_free`, a
/// Release RMW of the deadline). Meanwhile a purge pass runs. With
/// `due_before` a deadline is already due when the threads start, so the
/// pass may tidy the segment while the push and its notification are under
/// way; without it only the note makes the pass due. A pass whose claim (an
/// Acquire CAS) reads the note's RMW must find the block when it tidies the
/// segment and give the emptied segment back, touching no header after its
/// unmap (`Segment::touch`); a pass that claims before the note leaves the
/// note's deadline for the next pass, which gives the segment back.
fn abandoned_free_beside_a_purge_pass(due_before: bool) {
    use crate::segment::purge::{purge_global, GLOBAL_PURGE_AT};
    // Any deadline is due: the pass runs when it finds one.
    const LATE: u64 = u64::MAX - 1;
    loom::model(move || {
        let (owner, p) = large_block_of_this_thread();
        let seg = SendPtr(segment::segment_of(p.0));
        crate::thread::set_heap(heap::EXITED_HEAP.get());
        // SAFETY: owner is this thread's heap, no longer used by it.
        unsafe { crate::thread::abandon::heap_abandon(owner) };
        assert_eq!(crate::segment::arena::abandoned_count(), 1);
        // What the set-up left due is replaced. A store by this thread
        // before the spawns, which also makes the lazy static here: its
        // first use in a spawned thread would add an ordering edge of its
        // own, which could hide a missing Release.
        GLOBAL_PURGE_AT.store(if due_before { 0 } else { u64::MAX }, Ordering::Relaxed);
        let freer = thread::spawn(move || {
            crate::thread::set_heap(heap::EXITED_HEAP.get());
            let p = p.0;
            // SAFETY: p is a live block of this allocator, freed once, here.
            unsafe { crate::small::free::free_slow(segment::segment_of(p), p) };
        });
        let purger = thread::spawn(|| purge_global(LATE, false));
        freer.join().unwrap();
        purger.join().unwrap();
        // The pass's claim came after the note (nothing is due any more:
        // the pass leaves nothing due of its own here, no retired heap, no
        // cache), so it read the note's RMW.
        let claimed = GLOBAL_PURGE_AT.load(Ordering::Relaxed) == u64::MAX;
        if !claimed {
            purge_global(LATE, false);
        }
        assert_eq!(
            crate::segment::arena::abandoned_count(),
            0,
            "the block was taken in and the segment given back (by the pass that claimed after the note: {claimed})"
        );
        // SAFETY: the threads are done; the header stays mapped under loom.
        assert!(!unsafe { (*seg.0).is_mapped() }, "the emptied segment was unmapped");
    });
}

/// `abandoned_free_beside_a_purge_pass`, the pass made due by the note
/// alone. With the note or the claim Relaxed, or the note before the push,
/// the tidying's look at the page's remote stack may miss the push: the
/// claimed pass leaves the segment abandoned and nothing makes another
/// pass due.
#[test]
fn pass_claiming_an_abandoned_free_deadline_takes_the_block_in() {
    abandoned_free_beside_a_purge_pass(false);
}

/// `abandoned_free_beside_a_purge_pass`, a pass already due: it may tidy
/// the segment while the free's push and notification are under way.
#[test]
fn pass_already_due_tidies_beside_a_notifying_free_into_an_abandoned_segment() {
    abandoned_free_beside_a_purge_pass(true);
}
