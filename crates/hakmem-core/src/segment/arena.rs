//! Where normal segments come from and where they wait: fresh mappings
//! from the OS (`segment_alloc`), the cache of empty segments
//! (`segment_free`), and the list of segments abandoned by exited threads
//! (`abandoned_push`/`abandoned_pop`; reclaim is in abandon.rs).
//!
//! Both lists are intrusive stacks through `Segment::next` and `prev`
//! (`list::LockedList`: a segment is taken out of the middle in O(1)),
//! under a spin lock held for a few instructions, never across a system
//! call; `fork`
//! takes the locks first (`lock_all`). A normal segment is in exactly one
//! of: its owner heap's list, the abandoned list, the cache — or, for a
//! moment, held off a list by the thread that popped it (a reclaim, a
//! purge pass or a tidying of the abandoned list, the last two under the
//! purge lock, which `fork` takes before these).

use crate::config::config;
use crate::list::{Linked, LockedList};
use crate::os;
use crate::segment::map::map_set;
use crate::segment::purge::GLOBAL_PURGE_AT;
use crate::segment::{Segment, PAGES_PER_SEGMENT, PAGE_SIZE, SEGMENT_SIZE};
use crate::stats;
use crate::sync::{global, Ordering};
use core::ptr;

/// The test builds that hunt races (`hakmem_race_windows`, loom) keep no
/// segment and no huge mapping for reuse: every one freed is unmapped, so a
/// thread that touches one too late faults (or loom reports it) instead of
/// reading a cached header.
pub(crate) const NO_CACHES: bool = cfg!(any(hakmem_race_windows, hakmem_loom));
/// Empty segments kept for reuse before the rest go back to the OS.
pub(crate) const SEGMENT_CACHE_MAX: usize = if NO_CACHES { 0 } else { 32 };

pub(crate) type SegmentList = LockedList<Segment>;

// SAFETY: `next` and `prev` are the segment's list links, used by exactly
// one list at a time (owner list, cache or abandoned list: see the module
// invariants); `listed` is written only by the cache and the abandoned
// list, under their locks, and is null in a fresh (zeroed) header.
unsafe impl Linked for Segment {
    fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: this is a valid segment (the trait's contract).
        unsafe { &raw mut (*this).next }
    }
    fn prev_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: as above.
        unsafe { &raw mut (*this).prev }
    }
    fn list_link(this: *mut Self) -> *mut *const () {
        // SAFETY: as above.
        unsafe { &raw mut (*this).listed }
    }
}

global! { pub(crate) static SEGMENT_CACHE: SegmentList = SegmentList::new(); }
global! { pub(crate) static ABANDONED: SegmentList = SegmentList::new(); }

/// A normal segment for a heap: from the cache, else fresh from the OS.
/// Returns null when the OS refuses. The caller sets ownership.
pub(crate) fn segment_alloc() -> *mut Segment {
    let cached = SEGMENT_CACHE.pop();
    if !cached.is_null() {
        // SAFETY: a cached segment is an unowned, mapped segment.
        unsafe { (*cached).init_normal(false) };
        return cached;
    }
    let map = || os::map_aligned(SEGMENT_SIZE, SEGMENT_SIZE, 0) as *mut Segment;
    let mut p = map();
    if p.is_null() && crate::segment::purge::unmap_cached(SEGMENT_SIZE) {
        // The OS refused: once more, with what hakmem kept mapped of freed
        // memory given back.
        p = map();
    }
    if p.is_null() {
        return p;
    }
    advise_thp(p as *mut u8, SEGMENT_SIZE);
    // `secure`: no guard page yet; each unit gets its own when a span
    // first takes it (`place_guards`).
    stats::segment_mapped(1);
    stats::committed(SEGMENT_SIZE as isize);
    // SAFETY: p is a fresh, zeroed, exclusive 2 MiB mapping.
    unsafe {
        Segment::construct(p);
        (*p).init_normal(true);
    }
    map_set(p, true);
    p
}

/// `secure`: puts in place the guard pages a span of `units` pages from
/// `first` needs, those not already there: one at the end of each of its
/// units (a write running off a block faults within 64 KiB, secure.rs)
/// and one at the end of the unit before it (the header's, for the first
/// span), so that an underflow off its first block faults too. A guard
/// stays for the segment's life. Placed as spans are carved rather than
/// for all 32 units at once, since each splits the mapping: the kernel
/// holds at most `vm.max_map_count` (65 530 by default) mapping records
/// per process, which 32 guards a segment used up at about 1 000
/// segments (a pool of 1 000 threads that each allocated once; found by
/// review). False when the kernel refuses, after one more try with what
/// hakmem keeps mapped of freed memory given back.
///
/// # Safety
/// `seg` must be a normal segment owned by the caller, and the span's
/// units (with `first >= 1`) hand out nothing but what `page_alloc`
/// places before each unit's guard page.
#[cfg(feature = "secure")]
#[cold]
pub(crate) unsafe fn place_guards(seg: *mut Segment, first: usize, units: usize) -> bool {
    debug_assert!(first >= 1 && first + units <= PAGES_PER_SEGMENT);
    let guard = crate::check::secure::guard_bytes();
    let mut retried = false;
    for unit in first - 1..first + units {
        // SAFETY: the caller owns seg.
        if unsafe { (*seg).guarded_units } & (1 << unit) != 0 {
            continue;
        }
        loop {
            // SAFETY: the last OS page of a unit of seg: never handed out
            // (spans end before it: refill::page_alloc) and never part of
            // the header (it fits before the header unit's guard).
            let at = unsafe { (*seg).page_start(unit).add(PAGE_SIZE - guard) };
            // SAFETY: as above.
            if unsafe { os::protect_none(at, guard) } {
                break;
            }
            if retried || !crate::segment::purge::unmap_cached(guard) {
                return false;
            }
            retried = true;
        }
        // SAFETY: the caller owns seg.
        unsafe { (*seg).guarded_units |= 1 << unit };
    }
    true
}

/// Transparent huge pages: on when asked (`HAKMEM_THP=1`); otherwise opted
/// out where the system would force them (a 2 MiB-aligned segment would get
/// a huge page on first touch, multiplying RSS for small heaps).
///
/// Every fresh mapping that will hold blocks comes through here before it
/// is set up, so the configuration (and with it the freed mark's key,
/// `small::page::freed_mark`) is read before any block exists: keep it so.
pub(crate) fn advise_thp(p: *mut u8, size: usize) {
    let cfg = config();
    if cfg.thp {
        os::advise_huge_pages(p, size, true);
    } else if cfg.system_thp_always {
        os::advise_huge_pages(p, size, false);
    }
}

/// Gives back an empty, unowned normal segment: to the cache (purged after
/// the delay), or to the OS when the cache is full.
///
/// # Safety
/// `segment` must be an empty normal segment no heap or list refers to.
pub(crate) unsafe fn segment_free(segment: *mut Segment) {
    // SAFETY: the caller guarantees exclusivity.
    let deadline = unsafe {
        debug_assert_eq!((*segment).used_pages, 0);
        // Relaxed: no page is in use, so no remote free can read them.
        (*segment).heap.store(ptr::null_mut(), Ordering::Relaxed);
        (*segment).local_parent.store(ptr::null_mut(), Ordering::Relaxed);
        let seg = &mut *segment;
        seg.schedule_purge(1, PAGES_PER_SEGMENT - 1)
    };
    if !SEGMENT_CACHE.push(segment, SEGMENT_CACHE_MAX) {
        // SAFETY: the segment is unreferenced and was mapped with this size.
        unsafe { segment_unmap(segment) };
    } else if deadline != 0 {
        GLOBAL_PURGE_AT.fetch_min(deadline, Ordering::Relaxed);
    }
}

/// Returns an unreferenced normal segment to the OS.
///
/// # Safety
/// `segment` must be a mapped normal segment no heap or list refers to.
pub(crate) unsafe fn segment_unmap(segment: *mut Segment) {
    // SAFETY: the caller guarantees the segment is ours and unreferenced.
    unsafe {
        debug_assert!((*segment).listed.is_null(), "a listed segment unmapped");
        let purged = (*segment).purged_units.count_ones() as usize * PAGE_SIZE;
        stats::committed(-((SEGMENT_SIZE - purged) as isize));
        stats::segment_mapped(-1);
        map_set(segment, false);
        #[cfg(hakmem_loom)]
        (*segment).mapped.with_mut(|mapped| *mapped = false);
        os::unmap(segment as *mut u8, SEGMENT_SIZE);
    }
}

/// Publishes a segment of an exited thread for reclaim by another; its
/// free pages are purged when due even if nobody reclaims it.
pub(crate) fn abandoned_push(segment: *mut Segment) {
    abandoned_publish(segment, false);
}

/// `abandoned_push`, on top (most recently abandoned) or behind every
/// other abandoned segment (`last`: the last a thread looking for room
/// looks at), then the segment's purge deadline given to the global hint.
fn abandoned_publish(segment: *mut Segment, last: bool) {
    // SAFETY: the caller hands over an exclusively held segment.
    let deadline = unsafe { (*segment).purge_at_ms };
    if last {
        ABANDONED.push_last(segment);
    } else {
        ABANDONED.push(segment, usize::MAX);
    }
    if deadline != 0 {
        GLOBAL_PURGE_AT.fetch_min(deadline, Ordering::Relaxed);
    }
}

/// Puts back an abandoned segment the caller took off the list under the
/// purge lock (`abandon::tidy_abandoned`) and whose purge deadline it has
/// not changed, leaving the global deadline as it is: the segment's
/// deadline was no earlier than it when the segment was taken, and no
/// pass can have run meanwhile (a pass that claimed the deadline waits for
/// the lock, then finds the segment listed). The hint may be later than
/// the segment's deadline by the passes' gap (`purge::pass_gap_ms` moves
/// it to the gap's end): the purge is then that much late, as any. Lowering
/// the hint again for a deadline already past made every tidying run a
/// pass over the whole list at once (docs/BENCHMARKS.md, "Threads that
/// each leave a few blocks behind").
///
/// # Safety
/// The caller must hold the purge lock, and have taken `segment` off the
/// abandoned list while holding it (and left its deadline as it was).
pub(crate) unsafe fn abandoned_push_back(segment: *mut Segment) {
    ABANDONED.push(segment, usize::MAX);
}

/// Takes off the abandoned list the first of its `max` most recently
/// abandoned segments for which `pred` holds (null when none does).
/// `pred` runs with the list's lock held: it may read the segments' pages,
/// which no thread changes while they are listed.
pub(crate) fn abandoned_take_first(max: usize, pred: impl FnMut(*mut Segment) -> bool) -> *mut Segment {
    ABANDONED.take_first(max, pred)
}

/// `abandoned_push`, behind every other abandoned segment: the last a
/// thread looking for room looks at.
pub(crate) fn abandoned_push_last(segment: *mut Segment) {
    abandoned_publish(segment, true);
}

/// Takes an abandoned segment (null when none).
pub(crate) fn abandoned_pop() -> *mut Segment {
    ABANDONED.pop()
}

/// Takes `segment` off the abandoned list if it is still there (nobody has
/// reclaimed it meanwhile); returns whether it was.
///
/// # Safety
/// `segment` must be a mapped normal segment that cannot be going onto or
/// off the cache meanwhile (one with a block in use, which an empty
/// segment in the cache never has).
pub(crate) unsafe fn abandoned_take(segment: *mut Segment) -> bool {
    // SAFETY: the caller's guarantee; the abandoned list's own pushes and pops are under its lock.
    unsafe { ABANDONED.remove(segment) }
}

/// Calls `f` on every abandoned segment (fork's child, which is alone).
pub(crate) fn abandoned_for_each(f: impl FnMut(*mut Segment)) {
    ABANDONED.for_each(f);
}

/// Number of abandoned segments waiting for reclaim.
pub fn abandoned_count() -> usize {
    ABANDONED.len()
}

/// Number of empty segments in the cache.
pub fn cached_count() -> usize {
    SEGMENT_CACHE.len()
}

/// `fork` prepare: hold every global segment lock across the fork.
pub(crate) fn lock_all() {
    SEGMENT_CACHE.lock();
    ABANDONED.lock();
    crate::huge::lock_cache();
}

/// `fork` parent/child: release what `lock_all` took.
pub(crate) fn unlock_all() {
    crate::huge::unlock_cache();
    ABANDONED.unlock();
    SEGMENT_CACHE.unlock();
}
