//! The allocation slow path's work (`refill`): the heap's duties
//! (notifications, the clock, purges), then a page of the class with a free
//! block — from the class queue (taking in remote frees, carving more of
//! a page), else a new span carved from one of the heap's segments, else a
//! new segment (`abandon::segment_acquire`).
//!
//! And the way back: a page's span returned to its segment (`release_span`,
//! `release_page`, scheduling the purge of its memory) and an empty
//! segment given up (`maybe_free_segment`).

use crate::check::secure;
use crate::os;
use crate::segment::arena;
use crate::segment::purge::periodic;
use crate::segment::{self, Segment};
use crate::small::class::{self, LARGE_CLASS};
use crate::small::page::Page;
use crate::small::page_queue::{queue_move_to_front, queue_push_front, queue_remove, settle};
use crate::stats;
use crate::thread;
use crate::thread::abandon::segment_acquire;
use crate::thread::heap::{unlink_segment, Heap, EMPTY_HEAP, EXITED_HEAP};
use crate::thread::remote::take_notifications_with_parent;
use core::ptr;

/// Slow-path calls between two looks at the clock (a vDSO call of ~20 ns;
/// the fast path never looks).
const CLOCK_CHECK_INTERVAL: u32 = 16;

/// The slow path's work: sets the thread up on its first allocation, does
/// the heap's duties (notifications, the clock, purges), restarts the
/// heartbeat, and finds a page of `class` with a free block. Returns the
/// thread's heap and that page; the page is null (and `errno = ENOMEM`)
/// when no memory can be had.
///
/// # Safety
/// `heap` must be the calling thread's heap (possibly the empty heap).
pub(crate) unsafe fn refill(heap: *mut Heap, class: usize) -> (*mut Heap, *mut Page) {
    debug_assert!(
        heap != EXITED_HEAP.get(),
        "callers serve an exited thread with alloc_after_exit"
    );
    let heap = if heap == EMPTY_HEAP.get() {
        thread::init_heap()
    } else {
        heap
    };
    if heap.is_null() {
        os::set_errno(os::ENOMEM);
        return (heap, ptr::null_mut());
    }
    // SAFETY: heap is this thread's (freshly created or passed by the caller).
    unsafe {
        // The heartbeat ran out (about every `HEARTBEAT_ALLOCS` fast-path
        // allocations), rather than a page: look at the clock now. A thread
        // whose allocations all hit warm pages reaches the slow path only
        // through its heartbeat, and may be the only one left to run the
        // purges of threads that exited (their memory waits for it).
        duties(heap);
        let page = find_page(heap, class);
        if page.is_null() {
            os::set_errno(os::ENOMEM);
        }
        (heap, page)
    }
}

/// The heap's duties on a slow path: notifications, and the clock (and
/// what is due by it: purges, the sweep, the policy) when the heartbeat
/// ran out or every `CLOCK_CHECK_INTERVAL` slow paths (and on a local
/// heap's first); then the heartbeat re-armed. A live local heap's duties
/// include its thread heap's (`take_notifications_with_parent`,
/// `periodic`).
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps, not
/// a static one.
pub(crate) unsafe fn duties(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe {
        // The heartbeat ran out (about every `HEARTBEAT_ALLOCS` fast-path
        // allocations), rather than a page: look at the clock now. A thread
        // whose allocations all hit warm pages reaches the slow path only
        // through its heartbeat, and may be the only one left to run the
        // purges of threads that exited (their memory waits for it).
        let beat = ((*heap).heartbeat as i32) < 0;
        crate::profile::rearm_own(heap);
        chores(heap, beat);
    }
}

/// [`duties`] for a large or huge allocation, and for a heap profiler's
/// sample (which skips `refill` and re-arms the heartbeat itself): all
/// but the re-arming. These allocations do not count the heartbeat down,
/// so re-arming it would put off the duties it brings: a thread whose
/// small allocations hit warm pages between large ones would look at the
/// clock only every 16th large one. A thread that goes on with large or
/// huge blocks alone reaches no other slow path: without these its
/// purges, its sweep (the frees other threads make into its queued pages)
/// and the global purges would wait for its next small one.
///
/// # Safety
/// As for [`duties`].
pub(crate) unsafe fn large_duties(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe { chores(heap, ((*heap).heartbeat as i32) < 0) }
}

/// The duties but the heartbeat: notifications, then the clock when `beat`
/// (the heartbeat ran out), every `CLOCK_CHECK_INTERVAL` calls, and on a
/// local heap's first.
///
/// # Safety
/// As for [`duties`].
unsafe fn chores(heap: *mut Heap, beat: bool) {
    // SAFETY: the caller's guarantee.
    unsafe {
        take_notifications_with_parent(heap);
        (*heap).slow_ticks = (*heap).slow_ticks.wrapping_add(1);
        let ticks = (*heap).slow_ticks;
        // A local heap also looks at the clock on its first slow path: a
        // program that makes a local heap per request may run fewer than
        // `CLOCK_CHECK_INTERVAL` in each, and a local heap's `periodic`
        // also sweeps its thread heap, which holds the pages of the local
        // heaps deleted (the frees into its queued pages are taken in by
        // that sweep alone) and which such a thread never runs itself.
        if beat || ticks.is_multiple_of(CLOCK_CHECK_INTERVAL) || (ticks == 1 && (*heap).is_local()) {
            periodic(heap);
        }
    }
}

/// A page of `class` with a free block, moved to the queue front; null when
/// no memory can be had.
unsafe fn find_page(heap: *mut Heap, class: usize) -> *mut Page {
    // SAFETY: heap is the caller's own heap; queue pages belong to it.
    unsafe {
        let page = queued_page(heap, class);
        if !page.is_null() {
            return page;
        }
        let block_size = class::BLOCK_SIZE[class];
        let page = page_alloc(heap, class as u8, class::span_pages(class), block_size);
        if page.is_null() {
            // Out of memory, or the segments reclaimed on the way queued
            // pages of this class (`segment_acquire`).
            return queued_page(heap, class);
        }
        (*page).extend();
        queue_push_front(heap, page);
        page
    }
}

/// A page of `class`'s queue with a free block, moved to the queue front;
/// pages without one are settled on the way. Null when none has one.
unsafe fn queued_page(heap: *mut Heap, class: usize) -> *mut Page {
    // SAFETY: heap is the caller's own heap; queue pages belong to it.
    unsafe {
        let mut page = (*heap).queues[class].first;
        while !page.is_null() {
            let next = (*page).next;
            if (*page).free.is_null() {
                (*page).collect_remote();
            }
            if (*page).free.is_null() {
                (*page).extend();
            }
            if (*page).free.is_null() {
                // `secure`: the owner's frees come back only now (delayed reuse).
                (*page).collect_local();
            }
            if !(*page).free.is_null() {
                debug_assert!((*page).is_valid());
                queue_move_to_front(heap, page);
                return page;
            }
            queue_remove(heap, page);
            let seg = segment::segment_of((*page).start().add(1));
            settle(heap, seg, page);
            if (*page).in_use && (*page).flags == 0 {
                // Remote frees arrived while parking: settle requeued it.
                if (*page).free.is_null() {
                    (*page).collect_remote();
                }
                if (*page).free.is_null() {
                    (*page).collect_local();
                }
                if !(*page).free.is_null() {
                    queue_move_to_front(heap, page);
                    return page;
                }
            }
            maybe_free_segment(heap, seg);
            page = next;
        }
        ptr::null_mut()
    }
}

/// Takes a span of `units` pages from one of the heap's segments (acquiring
/// a segment if none has room) and initialises it for `block_size`.
pub(crate) unsafe fn page_alloc(heap: *mut Heap, class: u8, units: usize, block_size: usize) -> *mut Page {
    // SAFETY: heap is the caller's own heap; its segments are owned by it.
    unsafe {
        let mut seg = (*heap).segments;
        let mut found = None;
        while !seg.is_null() {
            if let Some(i) = (*seg).take_span(units) {
                found = Some((seg, i));
                break;
            }
            seg = (*seg).next;
        }
        let (seg, first) = match found {
            Some(f) => f,
            None => {
                let seg = segment_acquire(heap, units, class as usize);
                if seg.is_null() {
                    return ptr::null_mut();
                }
                match (*seg).take_span(units) {
                    Some(i) => (seg, i),
                    None => return ptr::null_mut(),
                }
            }
        };
        #[cfg(feature = "secure")]
        if !arena::place_guards(seg, first, units) {
            // No span without its guards: the caller sees no memory.
            (*seg).return_span(first, units);
            let at = (*seg).schedule_purge(first, units);
            if at != 0 && ((*heap).purge_at_ms == 0 || at < (*heap).purge_at_ms) {
                (*heap).purge_at_ms = at;
            }
            return ptr::null_mut();
        }
        let fresh = (*seg).mark_dirty(first, units);
        let page = &mut (*seg).pages[first] as *mut Page;
        // `secure`: each unit's table first (filled as `extend` carves
        // the unit), its guard page last, the blocks between (secure.rs);
        // `bytes` is then per unit. Its large blocks are huge.
        debug_assert!(!cfg!(feature = "secure") || class != LARGE_CLASS);
        let start = (*seg).page_start(first).add(secure::UNIT_TABLE_BYTES);
        #[cfg(not(feature = "secure"))]
        let bytes = units * segment::PAGE_SIZE;
        #[cfg(feature = "secure")]
        let bytes = secure::unit_block_bytes();
        let block_size = if class == LARGE_CLASS { bytes } else { block_size };
        (*page).init(class, block_size, start, units as u32, bytes, fresh);
        for k in 1..units {
            (*seg).pages[first + k].head = page;
        }
        (*seg).used_pages += 1;
        stats::page_in_use(1);
        page
    }
}

/// Frees `seg` when it has no page in use, unless it is the heap's only
/// segment (kept to avoid churn).
pub(crate) unsafe fn maybe_free_segment(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg is a segment of heap's list and nobody is walking it.
    unsafe {
        if (*seg).used_pages == 0 && !((*heap).segments == seg && (*seg).next.is_null()) {
            unlink_segment(heap, seg);
            arena::segment_free(seg);
        }
    }
}

/// Returns a page's span to its segment and schedules it for purging.
/// Returns the segment's purge deadline (0 = none).
pub(crate) unsafe fn release_span(seg: *mut Segment, page: *mut Page) -> u64 {
    // SAFETY: page is an in-use span head of seg, owned by the caller.
    unsafe {
        // A pusher still telling us about this page would touch the
        // segment after we free it (see `page.rs`, parking).
        (*page).wait_notifier();
        (*page).release_blocks();
        (*page).in_use = false;
        (*page).set_carved(0);
        (*page).flags = 0;
        let first = (*seg).page_index(page);
        let units = (*page).units as usize;
        (*seg).return_span(first, units);
        (*seg).used_pages -= 1;
        stats::page_in_use(-1);
        (*seg).schedule_purge(first, units)
    }
}

/// Releases `page`'s span on behalf of `heap` and notes the purge deadline.
pub(crate) unsafe fn release_page(heap: *mut Heap, seg: *mut Segment, page: *mut Page) {
    // SAFETY: forwarded from the caller: page is an in-use page of seg owned by heap.
    unsafe {
        let at = release_span(seg, page);
        if at != 0 && ((*heap).purge_at_ms == 0 || at < (*heap).purge_at_ms) {
            (*heap).purge_at_ms = at;
        }
    }
}
