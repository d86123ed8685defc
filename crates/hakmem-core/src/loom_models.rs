//! loom models of hakmem's lock-free protocols, built with
//! `RUSTFLAGS="--cfg hakmem_loom"` (see docs/TESTING.md). Each model builds
//! its state inside `loom::model` and drives the real `Page` and `LockedList`
//! code; hakmem is never the global allocator here (loom allocates).

extern crate std;

use crate::list::{Linked, LockedList};
use crate::page::{Block, Page, PAGE_IN_FULL};
use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, Ordering};
use loom::sync::Arc;
use loom::thread;
use std::boxed::Box;
use std::vec::Vec;

const BLOCK: usize = 64;

/// A page over a leaked buffer of `blocks` blocks, all carved.
fn carved_page(blocks: usize) -> *mut Page {
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
            let b = (*page).pop() as usize;
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
        let blocks: Vec<usize> = unsafe { (0..4).map(|_| (*page.0).pop() as usize).collect() };
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
            let b = (0..2).map(|_| (*page.0).pop() as usize).collect();
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

struct ModelHeap {
    notified: AtomicBool,
}

struct ModelSegment {
    heap: AtomicPtr<ModelHeap>,
    notify_bits: AtomicU32,
    page: *mut Page,
    next: *mut ModelSegment,
}

// SAFETY: `next` is used by the one list the model has.
unsafe impl Linked for ModelSegment {
    fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: this is a valid ModelSegment.
        unsafe { &raw mut (*this).next }
    }
}

/// Thread exit: the owner abandons its segment while another thread frees
/// into it and a third reclaims it. Every block is freed exactly once and
/// the segment ends up owned by exactly one heap.
#[test]
fn abandoned_segment_is_reclaimed_by_exactly_one_heap() {
    loom::model(|| {
        let heap_a = Box::into_raw(Box::new(ModelHeap {
            notified: AtomicBool::new(false),
        }));
        let heap_c = Box::into_raw(Box::new(ModelHeap {
            notified: AtomicBool::new(false),
        }));
        let heap_main = Box::into_raw(Box::new(ModelHeap {
            notified: AtomicBool::new(false),
        }));
        let page = carved_page(2);
        let seg = Box::into_raw(Box::new(ModelSegment {
            heap: AtomicPtr::new(heap_a),
            notify_bits: AtomicU32::new(0),
            page,
            next: core::ptr::null_mut(),
        }));
        // SAFETY: the owner (A) allocates both blocks and parks the page.
        let blocks: Vec<usize> = unsafe {
            let b = (0..2).map(|_| (*page).pop() as usize).collect();
            (*page).flags = PAGE_IN_FULL;
            assert!((*page).try_set_full_notify());
            b
        };
        let abandoned = Arc::new(LockedList::<ModelSegment>::new());
        let s = SendPtr(seg);

        // A exits: abandon.
        let list = abandoned.clone();
        let a = thread::spawn(move || {
            // SAFETY: s is A's segment until it is pushed.
            unsafe { (*s.0).heap.store(core::ptr::null_mut(), Ordering::SeqCst) };
            list.push(s.0, usize::MAX);
        });
        // B frees both blocks remotely, notifying as `Segment::notify` does.
        let b = thread::spawn(move || {
            for &blk in &blocks {
                // SAFETY: blk is live and freed by this thread only.
                unsafe {
                    if (*(*s.0).page).push_remote(blk as *mut Block, blk as *mut Block, 1) {
                        (*s.0).notify_bits.fetch_or(1, Ordering::SeqCst);
                        let h = (*s.0).heap.load(Ordering::SeqCst);
                        if !h.is_null() {
                            (*h).notified.store(true, Ordering::SeqCst);
                        }
                    }
                }
            }
        });
        // C tries once to reclaim.
        let list = abandoned.clone();
        let hc = SendPtr(heap_c);
        let c = thread::spawn(move || {
            let got = list.pop();
            if !got.is_null() {
                // SAFETY: popping made C the segment's only owner.
                unsafe {
                    (*got).heap.store(hc.0, Ordering::SeqCst);
                    (*got).notify_bits.swap(0, Ordering::SeqCst);
                    (*(*got).page).collect_remote();
                }
            }
        });
        a.join().unwrap();
        b.join().unwrap();
        c.join().unwrap();
        // If C found nothing, main reclaims now.
        let left = abandoned.pop();
        // SAFETY: all threads have finished; seg and the heaps are valid.
        unsafe {
            if left.is_null() {
                assert_eq!((*seg).heap.load(Ordering::SeqCst), heap_c);
            } else {
                assert_eq!(left, seg);
                (*seg).heap.store(heap_main, Ordering::SeqCst);
            }
            assert!(abandoned.pop().is_null(), "the segment was on the list once");
            let owner = (*seg).heap.load(Ordering::SeqCst);
            assert!(owner == heap_c || owner == heap_main);
            (*page).collect_remote();
            assert_eq!((*page).used, 0, "both blocks freed exactly once");
            assert_eq!(drain_distinct(page), 2);
        }
    });
}

struct Node {
    next: *mut Node,
}

// SAFETY: `next` is used by the one list the model has.
unsafe impl Linked for Node {
    fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: this is a valid Node.
        unsafe { &raw mut (*this).next }
    }
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
                    let node = Box::into_raw(Box::new(Node {
                        next: core::ptr::null_mut(),
                    }));
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
