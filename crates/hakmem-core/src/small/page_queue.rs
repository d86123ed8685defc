//! The heap's page queues (owner only): for each class a doubly linked
//! queue of its pages that may have free blocks, the first of which the
//! fast path allocates from (`Heap::direct`, `Heap::direct_small`, kept in
//! step by `sync_direct`); and `settle`, which puts an in-use page that is
//! in no queue where its state says it belongs — its span released when it
//! is empty, queued when it has blocks to give, else parked as full (the
//! states are described in page.rs).

use crate::segment::Segment;
use crate::small::class::{self, LARGE_CLASS, SMALL_CLASS_COUNT};
use crate::small::page::{Page, PAGE_IN_FULL};
use crate::small::refill::release_page;
use crate::sync::Ordering;
use crate::thread::heap::{Heap, EMPTY_PAGE};
use core::ptr;

#[derive(Clone, Copy)]
pub(crate) struct PageQueue {
    pub(crate) first: *mut Page,
    pub(crate) last: *mut Page,
}

unsafe fn sync_direct(heap: *mut Heap, class: usize) {
    // SAFETY: heap is the caller's own heap.
    unsafe {
        let first = (*heap).queues[class].first;
        let page = if first.is_null() { EMPTY_PAGE.get() } else { first };
        (*heap).direct[class] = page;
        if class < SMALL_CLASS_COUNT {
            for i in class::small_indices(class) {
                (*heap).direct_small[i] = page;
            }
        }
    }
}

pub(crate) unsafe fn queue_push_front(heap: *mut Heap, page: *mut Page) {
    // SAFETY: page is an in-use page of heap in no queue.
    unsafe {
        let class = (*page).class as usize;
        // Relaxed (here and in the other queue operations): the free fast
        // path compares `local_owner` with the freeing thread's own heap,
        // a value only that thread stores; other threads only ever see
        // "not mine". A heap struct reused from the pool starts with every
        // page it had set back to 0 by `heap_abandon`, ordered before the
        // reuse by the pool lock.
        (*page).local_owner.store(heap as usize, Ordering::Relaxed);
        let q = &mut (*heap).queues[class];
        (*page).prev = ptr::null_mut();
        (*page).next = q.first;
        if q.first.is_null() {
            q.last = page;
        } else {
            (*q.first).prev = page;
        }
        q.first = page;
        sync_direct(heap, class);
    }
}

unsafe fn queue_push_back(heap: *mut Heap, page: *mut Page) {
    // SAFETY: page is an in-use page of heap in no queue.
    unsafe {
        let class = (*page).class as usize;
        (*page).local_owner.store(heap as usize, Ordering::Relaxed);
        let q = &mut (*heap).queues[class];
        (*page).next = ptr::null_mut();
        (*page).prev = q.last;
        if q.last.is_null() {
            q.first = page;
        } else {
            (*q.last).next = page;
        }
        q.last = page;
        sync_direct(heap, class);
    }
}

pub(crate) unsafe fn queue_remove(heap: *mut Heap, page: *mut Page) {
    // SAFETY: page is in heap's queue for its class.
    unsafe {
        let class = (*page).class as usize;
        (*page).local_owner.store(0, Ordering::Relaxed);
        let q = &mut (*heap).queues[class];
        if (*page).prev.is_null() {
            q.first = (*page).next;
        } else {
            (*(*page).prev).next = (*page).next;
        }
        if (*page).next.is_null() {
            q.last = (*page).prev;
        } else {
            (*(*page).next).prev = (*page).prev;
        }
        (*page).next = ptr::null_mut();
        (*page).prev = ptr::null_mut();
        sync_direct(heap, class);
    }
}

pub(crate) unsafe fn queue_move_to_front(heap: *mut Heap, page: *mut Page) {
    // SAFETY: page is in heap's queue for its class.
    unsafe {
        if (*heap).queues[(*page).class as usize].first != page {
            queue_remove(heap, page);
            queue_push_front(heap, page);
        }
    }
}

/// Puts an in-use page that is in no queue where it belongs: its span
/// returned to the segment when empty, queued when it has blocks to give,
/// else parked as full. Never frees the segment (callers may still be
/// walking it): they call `maybe_free_segment` when done with it.
pub(crate) unsafe fn settle(heap: *mut Heap, seg: *mut Segment, page: *mut Page) {
    // SAFETY: page is an in-use page of seg, owned by heap, in no queue.
    unsafe {
        loop {
            if (*page).used == 0 {
                release_page(heap, seg, page);
                return;
            }
            let large = (*page).class == LARGE_CLASS;
            if !large && (!(*page).free.is_null() || (*page).has_local_free() || (*page).capacity < (*page).reserved) {
                (*page).flags = 0;
                if (*page).wants_notify() {
                    (*page).clear_full_notify();
                }
                queue_push_back(heap, page);
                return;
            }
            (*page).flags = PAGE_IN_FULL;
            // Set (or set again, for a page parked by an exited owner) with
            // a Release RMW, so a notifier finds this heap.
            if (*page).try_set_full_notify() {
                return;
            }
            if (*page).is_notifying() {
                // The push that ended the last parking is still telling
                // the owner; its blocks may be the ones just taken in.
                (*page).wait_notifier();
            }
            (*page).collect_remote();
        }
    }
}
