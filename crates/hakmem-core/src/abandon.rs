//! Thread exit and reclaim. An exiting thread's heap is abandoned
//! (`heap_abandon`): its empty pages and segments are freed, every other
//! segment is published on the abandoned list with its owner cleared — its
//! pages keep their lists, and remote frees keep arriving on their atomic
//! stacks. A thread that needs a segment first reclaims waiting abandoned
//! ones (`segment_acquire`, `reclaim`): it becomes their owner and settles
//! every page they hold.

use crate::arena;
use crate::heap::{adopt, pool_put, unlink_segment, Heap};
use crate::page::Page;
use crate::page_queue::settle;
use crate::refill::release_span;
use crate::remote::flush_remote;
use crate::segment::{Segment, PAGES_PER_SEGMENT};
use crate::stats;
use crate::sync::Ordering;
use core::ptr;

/// Abandoned segments examined per segment acquisition: enough to drain
/// what exiting threads leave behind, few enough to bound the pause.
const RECLAIM_MAX: usize = 64;

/// A segment with room for `units` pages. Reclaims waiting abandoned
/// segments first (up to `RECLAIM_MAX`, handing empty ones to the cache),
/// then takes one from the cache or the OS. Null when out of memory.
pub(crate) unsafe fn segment_acquire(heap: *mut Heap, units: usize) -> *mut Segment {
    // SAFETY: heap is the caller's own heap.
    unsafe {
        let mut found: *mut Segment = ptr::null_mut();
        for _ in 0..RECLAIM_MAX {
            let seg = arena::abandoned_pop();
            if seg.is_null() {
                break;
            }
            reclaim(heap, seg);
            if found.is_null() && has_run((*seg).free_units, units) {
                found = seg;
            } else if (*seg).used_pages == 0 {
                unlink_segment(heap, seg);
                arena::segment_free(seg);
            }
        }
        if !found.is_null() {
            return found;
        }
        let seg = arena::segment_alloc();
        if seg.is_null() {
            return seg;
        }
        adopt(heap, seg);
        seg
    }
}

fn has_run(free_units: u32, units: usize) -> bool {
    let mut runs = free_units;
    for _ in 1..units {
        runs &= runs >> 1;
    }
    runs != 0
}

/// Takes over an abandoned segment: collects every page, frees the empty
/// ones, queues those with free blocks, parks the full ones.
unsafe fn reclaim(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg came off the abandoned list, so nobody else owns it;
    // remote frees may still push onto its pages' atomic lists.
    unsafe {
        adopt(heap, seg);
        // Relaxed: bits of notifications meant for the exited owner; the
        // full pass below takes every page in, whatever they say. Later
        // notifications reach this heap (see `Segment::notify`).
        (*seg).notify_bits.store(0, Ordering::Relaxed);
        let at = (*seg).purge_at_ms;
        if at != 0 && ((*heap).purge_at_ms == 0 || at < (*heap).purge_at_ms) {
            (*heap).purge_at_ms = at;
        }
        for i in 1..PAGES_PER_SEGMENT {
            let page = &mut (*seg).pages[i] as *mut Page;
            if !(*page).in_use {
                continue;
            }
            (*page).collect_remote();
            settle(heap, seg, page);
        }
        // An empty reclaimed segment is kept: the caller is acquiring one.
    }
}

/// Gives up a heap whose thread is exiting: frees what is empty, abandons
/// the rest for reclaim, returns the heap struct to the pool.
///
/// # Safety
/// `heap` must be a heap no thread uses any more.
pub(crate) unsafe fn heap_abandon(heap: *mut Heap) {
    stats::heap_in_use(-1);
    // SAFETY: heap is unused; its segments are owned by it.
    unsafe {
        (*heap).counts.flush();
        // First, so that blocks of our own pages among them (a segment we
        // reclaimed while holding them) are collected below.
        flush_remote(heap);
        let mut seg = (*heap).segments;
        (*heap).segments = ptr::null_mut();
        while !seg.is_null() {
            let next = (*seg).next;
            (*seg).next = ptr::null_mut();
            (*seg).prev = ptr::null_mut();
            // Relaxed: the bits name pages of this heap's; whoever reclaims
            // the segment takes every page in anyway.
            (*seg).notify_bits.store(0, Ordering::Relaxed);
            for i in 1..PAGES_PER_SEGMENT {
                let page = &mut (*seg).pages[i] as *mut Page;
                if !(*page).in_use {
                    continue;
                }
                // Nobody's queue holds it any more (the heap struct will be
                // reused: no page may still name it).
                (*page).local_owner.store(0, Ordering::Relaxed);
                (*page).collect_remote();
                if (*page).used == 0 {
                    release_span(seg, page);
                }
                if (*seg).used_pages == 0 {
                    break;
                }
            }
            if (*seg).used_pages == 0 {
                arena::segment_free(seg);
            } else {
                // Relaxed: a notifier may still read this heap (a stale,
                // harmless notification); the segment's pages are taken in
                // by whoever reclaims it (`reclaim`'s full pass).
                (*seg).heap.store(ptr::null_mut(), Ordering::Relaxed);
                arena::abandoned_push(seg);
            }
            seg = next;
        }
        pool_put(heap);
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    #[test]
    fn has_run_finds_contiguous_free_pages() {
        assert!(has_run(0b1110, 3));
        assert!(!has_run(0b1010, 2));
        assert!(!has_run(0, 1));
    }
}
