//! Local heaps' lists of their huge blocks (see the module doc of
//! `huge`, "Huge blocks of local heaps"), under one lock.

use crate::segment::Segment;
use crate::sync::{global, Ordering, SpinLock};
use crate::thread::heap::Heap;
use core::ptr;

global! {
    /// The lock of every local heap's list of huge segments (`Heap::huge`).
    pub(crate) static LOCAL_HUGE: SpinLock = SpinLock::new();
}

/// Links huge segment `segment`, just allocated by local heap `heap`, into
/// the heap's list.
///
/// # Safety
/// `heap` must be a live local heap of the calling thread; `segment` the
/// huge segment of a block it just allocated, in no list.
pub(crate) unsafe fn attach_to_local(heap: *mut Heap, segment: *mut Segment) {
    LOCAL_HUGE.lock();
    // SAFETY: the lock is held; the caller's guarantees.
    unsafe {
        // Relaxed: read by a free of the block, which got the block after
        // this (through whatever handed it over), or under the lock.
        (*segment).heap.store(heap, Ordering::Relaxed);
        (*segment).prev = ptr::null_mut();
        (*segment).next = (*heap).huge;
        if !(*heap).huge.is_null() {
            (*(*heap).huge).prev = segment;
        }
        (*heap).huge = segment;
    }
    LOCAL_HUGE.unlock();
}

/// Unlinks huge segment `segment` from the local heap's list that holds
/// it, if any (its block is being freed).
///
/// # Safety
/// `segment` must be a live huge segment whose block the caller is freeing.
pub(super) unsafe fn detach_from_local(segment: *mut Segment) {
    // Acquire: pairs with the Release store of null in `detach_all`, so
    // that heap's last read of this header happens before the caller
    // frees (and perhaps unmaps) it.
    // SAFETY: the caller's guarantee: the header is mapped.
    let heap = unsafe { (*segment).heap.load(Ordering::Acquire) };
    if heap.is_null() {
        return;
    }
    LOCAL_HUGE.lock();
    // SAFETY: the lock is held; a segment still naming the heap under the
    // lock is in its list (`detach_all` clears the name under the lock).
    unsafe {
        // Relaxed: under the lock, which orders every store of it to a
        // non-null value and every list change.
        if (*segment).heap.load(Ordering::Relaxed) == heap {
            let (prev, next) = ((*segment).prev, (*segment).next);
            if prev.is_null() {
                (*heap).huge = next;
            } else {
                (*prev).next = next;
            }
            if !next.is_null() {
                (*next).prev = prev;
            }
            (*segment).heap.store(ptr::null_mut(), Ordering::Relaxed);
        }
    }
    LOCAL_HUGE.unlock();
}

/// Takes every huge segment off local heap `heap`'s list, each left
/// naming no heap, and returns the first (the rest follow through
/// `Segment::next`, which only the caller may still read: a segment is
/// freed by any thread as soon as it names no heap).
///
/// # Safety
/// `heap` must be a local heap of the calling thread being deleted or
/// destroyed.
pub(crate) unsafe fn detach_all(heap: *mut Heap) -> *mut Segment {
    LOCAL_HUGE.lock();
    // SAFETY: the lock is held; the list's segments are live (a free
    // unlinks under the lock before freeing).
    let first = unsafe {
        let first = (*heap).huge;
        (*heap).huge = ptr::null_mut();
        let mut segment = first;
        while !segment.is_null() {
            let next = (*segment).next;
            // Release: pairs with the Acquire load in `detach_from_local`:
            // this thread's read of `next` above happens before a freer
            // that sees null frees the segment.
            (*segment).heap.store(ptr::null_mut(), Ordering::Release);
            segment = next;
        }
        first
    };
    LOCAL_HUGE.unlock();
    first
}
