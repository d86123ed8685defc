//! Thread exit and reclaim.
//!
//! An exiting thread's heap is *retired* (`heap_retire`): tidied (remote
//! batches pushed, notifications taken, empty pages given back, what is
//! due purged; the rest keeps its deadline) and kept whole — segments, queues, pages — on a short list
//! for the next new thread, which takes it over as it is
//! (`heap_for_thread`): no segment changes hands, its first allocation is
//! a fast-path hit, and the blocks the dead thread left behind (handed to
//! other threads, freed by them later) are its own again. glibc reuses a
//! dead thread's arena for a new thread for the same reason; it is what
//! makes a thread-per-task program cheap (the `churn` workload).
//!
//! A heap that cannot wait there (the list is full) or has waited too long
//! (`RETIRED_MAX_AGE_MS`, checked by the global purge pass) is *abandoned*
//! (`heap_abandon`): its empty pages and segments are freed, every other
//! segment is published on the abandoned list with its owner cleared — its
//! pages keep their lists, and remote frees keep arriving on their atomic
//! stacks. A thread that needs a segment first reclaims waiting abandoned
//! ones (`segment_acquire`, `reclaim`): it becomes their owner and settles
//! every page they hold. A thread that frees a block of an abandoned
//! segment takes the segment over too, unless it owns more than
//! `TAKE_OVER_SEGMENTS_MAX` already: then the block waits on its page's
//! remote stack, taken in by the next thread that reclaims or tidies the
//! segment, or by the next purge pass (`tidy_abandoned_segment`).

use crate::segment::arena;
use crate::segment::{Segment, PAGES_PER_SEGMENT};
use crate::small::class::CLASS_COUNT;
use crate::small::page::Page;
use crate::small::page_queue::settle;
use crate::small::refill::release_span;
use crate::stats;
use crate::sync::{global, Ordering, SpinLock};
use crate::thread::heap::{adopt, heap_new, pool_put, Heap, EXITED_HEAP};
use crate::thread::remote::flush_remote;
use core::cell::UnsafeCell;
use core::ptr;

/// Abandoned segments looked at per reclaim at most (`serves`, under the
/// list's lock): bounds the pause when many of them have no room for the
/// request.
const RECLAIM_MAX: usize = 64;
/// Reclaims per segment acquisition at most: one is enough but when a
/// free lands between the look and the reclaim, or the look was wrong.
const RECLAIM_TRIES: usize = 4;
/// Abandoned segments tidied after an acquisition that reclaimed one: a
/// look at the top of the list, not the whole of it. Each tidied segment
/// is off the list meanwhile, where a thread that needs room cannot find
/// it; with up to 64, `rethread` took 6–16 % longer at 4 and 16 threads
/// per round (docs/BENCHMARKS.md, "The tidying after a reclaim"). The
/// rest of what late frees left in abandoned segments goes back at the
/// purge pass those frees make due (`purge::note_abandoned_free`), which
/// tidies them all — unless purging is off (`HAKMEM_PURGE_DELAY=-1`):
/// then at the reclaims and tidyings of later acquisitions only.
const TIDY_MAX: usize = 4;

/// A segment with room for `units` pages. Reclaims an abandoned segment
/// that serves the request first (`serves`: the first such of the
/// `RECLAIM_MAX` most recently abandoned), then takes one from the cache
/// or the OS. Null when out of memory, and also when the reclaimed
/// segment queued a page of `class` (a small class; `CLASS_COUNT` or more:
/// none) with free blocks: the caller, which found its queue empty, takes a
/// block there rather than a span. Segments that serve neither stay on
/// the list: a thread that reclaimed every segment it looked at (up to 64,
/// each with every unit in use) exited with too many to be retired, and
/// still mapped a fresh one: a segment per thread, and every thread's
/// reclaim walking the growing list.
///
/// Up to `TIDY_MAX` more abandoned segments are then tidied, not
/// reclaimed (`tidy_abandoned`, when no purge pass holds the purge lock):
/// the blocks freed into them since their thread exited (pushed on their
/// pages' remote stacks, which no owner collects; the purge pass does too,
/// `tidy_abandoned_segment`) are taken in, the
/// pages that emptied given back, the segments that emptied freed, and the
/// rest stay on the list for the next thread that needs one. Taking them
/// all would give one of a burst of new threads every segment its
/// predecessors left, and the others fresh segments from the OS: on
/// `rethread` (4 threads at a time that hand blocks to each other and
/// exit) that costs 19 % more segments at the peak, 24 % more page faults
/// and 8 % more peak RSS (docs/BENCHMARKS.md, "Threads that come and go").
///
/// A local heap reclaims nothing: destroying it frees every page it holds,
/// and the pages of a reclaimed segment hold blocks the program got from
/// other heaps. It takes empty segments only — and none once its thread
/// has exited (an orphaned local heap, local.rs).
pub(crate) unsafe fn segment_acquire(heap: *mut Heap, units: usize, class: usize) -> *mut Segment {
    // SAFETY: heap is the caller's own heap. For `sweep_for_locals`: a
    // live local heap's parent is the calling thread's heap (local.rs),
    // and a local heap's slow path, which called this, never runs inside
    // one of its thread heap's own paths (local heaps are reached only
    // from the program's calls).
    unsafe {
        if (*heap).is_local() {
            if (*heap).parent == EXITED_HEAP.get() {
                return ptr::null_mut();
            }
            // The thread heap's pages that other threads emptied (those of
            // the local heaps deleted) go back first, paced: their segments
            // may be what this acquisition takes from the cache.
            crate::segment::purge::sweep_for_locals((*heap).parent);
            let seg = arena::segment_alloc();
            if !seg.is_null() {
                adopt(heap, seg);
            }
            return seg;
        }
        // Pages `settle` queues for `class` go to the back of its queue.
        let watched = class < CLASS_COUNT;
        let last = if watched {
            (*heap).queues[class].last
        } else {
            ptr::null_mut()
        };
        let mut found: *mut Segment = ptr::null_mut();
        let mut queued = false;
        for _ in 0..RECLAIM_TRIES {
            // `serves` runs under the list's lock, on segments of the list:
            // its requirement.
            let seg = arena::abandoned_take_first(RECLAIM_MAX, |seg| serves(seg, units, class));
            if seg.is_null() {
                break;
            }
            reclaim(heap, seg);
            if has_run((*seg).free_units, units) {
                found = seg;
                break;
            }
            if watched && (*heap).queues[class].last != last {
                queued = true;
                break;
            }
        }
        if queued {
            crate::segment::purge::try_purge_now(|| tidy_abandoned(false));
            return ptr::null_mut();
        }
        if !found.is_null() {
            // Under the purge lock, which `fork` takes first: the segments
            // the tidying holds off the list are back on it before a child
            // is made (`tidy_abandoned`'s requirement). Skipped when a
            // pass holds the lock.
            crate::segment::purge::try_purge_now(|| tidy_abandoned(false));
            return found;
        }
        // Nothing served: before a fresh segment, the top of the list is
        // tidied whatever its hints say, and goes behind the rest (a
        // segment it empties goes to the cache, which serves this very
        // acquisition). Blocks no hint recorded — pushed by a thread that
        // read the owner just before its exit, or just after a look —
        // are found so by later acquisitions, also with purging off, where
        // no pass comes (found by review: segments emptied so stayed
        // abandoned for good).
        crate::segment::purge::try_purge_now(|| tidy_abandoned(true));
        let seg = arena::segment_alloc();
        if seg.is_null() {
            return seg;
        }
        adopt(heap, seg);
        seg
    }
}

/// Whether abandoned segment `seg`, as it lies on the list, would serve a
/// request for a span of `units` pages of `class` (`CLASS_COUNT` or more:
/// a span only): it has a run of that many free units, or had a page of
/// `class` with a free block when last tidied (`Segment::room_classes`),
/// or — looked at only when blocks were freed into it since the last look
/// (`Segment::late_frees`) — it has them now, counting the blocks waiting
/// on the pages' remote stacks (and as free the pages they empty). What
/// the look finds is noted in the segment for the next one
/// (`room_classes`, `late_free_units`): the list's lock makes the caller
/// the only one to write them. A hint: a free that lands while it looks is
/// missed until the segment is tidied or looked at again. Without the look
/// at late frees `rethread` (threads that free each other's blocks after
/// their exit) took 1.6–1.8× the time and 2× the memory; looking at every
/// page of every segment (two cache lines a page, under the list's lock)
/// cost it 5–9 % of its time.
///
/// Reclaiming every segment looked at, as hakmem did before, gave a thread
/// whose predecessors each left a few blocks of many classes behind up to
/// 64 segments it had no use for: it then exited with too many to be
/// retired, abandoned them all, and the next thread did the same, mapping
/// a fresh segment each time (docs/BENCHMARKS.md, "Threads that each leave
/// a few blocks behind").
///
/// # Safety
/// `seg` must be on the abandoned list, whose lock the caller holds: every
/// thread that changes an abandoned segment's pages takes it off the list
/// first (under that lock), and remote frees change only the pages'
/// atomic stacks. (`room_classes` and `late_free_units`, left as they were
/// by an earlier abandonment while the segment was owned, are set anew by
/// `release_empty_pages` when its owner abandons it, before the push.)
unsafe fn serves(seg: *mut Segment, units: usize, class: usize) -> bool {
    // SAFETY: the caller's guarantee: the fields read are stable, and the
    // lock orders them after the writes of whoever pushed the segment.
    unsafe {
        let mut free = (*seg).free_units | (*seg).late_free_units;
        if has_run(free, units) || (class < CLASS_COUNT && (*seg).room_classes & (1 << class) != 0) {
            return true;
        }
        // Relaxed: a hint; the pages' remote words are read below anyway.
        // Cleared for the look, whose findings are noted for the next one
        // (a free that set it meanwhile may be missed until the tidying).
        let mut late = (*seg).late_frees.swap(0, Ordering::Relaxed);
        if late == 0 {
            return false;
        }
        let mut room = 0u64;
        // Only the pages blocks were freed into (span heads; a bit of a
        // page released since names one not in use).
        while late != 0 {
            let i = late.trailing_zeros() as usize;
            late &= late - 1;
            let page = &(*seg).pages[i];
            if !page.in_use {
                continue;
            }
            let span = page.units as usize;
            let waiting = page.remote_waiting();
            if waiting >= page.used {
                free |= (((1u64 << span) - 1) << i) as u32;
            } else if waiting + page.reserved > page.used && usize::from(page.class) < CLASS_COUNT {
                room |= 1 << page.class;
            }
        }
        (*seg).late_free_units = free & !(*seg).free_units;
        (*seg).room_classes |= room;
        has_run(free, units) || (class < CLASS_COUNT && room & (1 << class) != 0)
    }
}

// `room_classes` has a bit for each small class.
const _: () = assert!(CLASS_COUNT <= 64);

fn has_run(free_units: u32, units: usize) -> bool {
    let mut runs = free_units;
    for _ in 1..units {
        runs &= runs >> 1;
    }
    runs != 0
}

/// Takes over an abandoned segment: collects every page, frees the empty
/// ones, queues those with free blocks, parks the full ones. Also how a
/// thread heap takes in the segments of a local heap being deleted
/// (local.rs), whose pages have been let go the same way.
///
/// # Safety
/// `heap` must be the caller's thread heap; `seg` a normal segment nobody
/// owns, whose in-use pages are in no queue and name no heap in
/// `local_owner`.
pub(crate) unsafe fn reclaim(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg came off the abandoned list (or a deleted local heap),
    // so nobody else owns it; remote frees may still push onto its pages'
    // atomic lists.
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

/// Gives up a heap whose thread is exiting: takes in the memory of the
/// thread's local heaps that are still alive (local.rs), frees what is
/// empty, abandons the rest for reclaim, returns the heap struct to the
/// pool.
///
/// # Safety
/// `heap` must be a thread heap no thread uses any more.
pub(crate) unsafe fn heap_abandon(heap: *mut Heap) {
    stats::heap_in_use(-1);
    // SAFETY: the caller's guarantee.
    unsafe {
        crate::thread::local::orphan_locals(heap);
        abandon_segments(heap);
    }
}

/// `heap_abandon` but for the count of heaps in use (a retired heap no
/// longer counts).
///
/// # Safety
/// `heap` must be a heap no thread uses any more.
unsafe fn abandon_segments(heap: *mut Heap) {
    // SAFETY: heap is unused; its segments are owned by it.
    unsafe {
        (*heap).counts.flush();
        // First, so that blocks of our own pages among them (a segment we
        // reclaimed while holding them) are collected below.
        flush_remote(heap);
        let mut seg = (*heap).segments;
        (*heap).segments = ptr::null_mut();
        let mut published = false;
        while !seg.is_null() {
            let next = (*seg).next;
            (*seg).next = ptr::null_mut();
            (*seg).prev = ptr::null_mut();
            // Relaxed: the bits name pages of this heap's; whoever reclaims
            // the segment takes every page in anyway.
            (*seg).notify_bits.store(0, Ordering::Relaxed);
            if release_empty_pages(seg) {
                arena::segment_free(seg);
            } else {
                // Relaxed: a notifier may still read this heap (a stale,
                // harmless notification); the segment's pages are taken in
                // by whoever reclaims it (`reclaim`'s full pass).
                (*seg).heap.store(ptr::null_mut(), Ordering::Relaxed);
                arena::abandoned_push(seg);
                published = true;
            }
            seg = next;
        }
        // A thread that read this heap as the owner before the store above
        // may push blocks after `release_empty_pages` collected: nothing
        // would make a pass due for them (`free::free_slow` and
        // `remote::flush_batch` note only what they see abandoned). The
        // pass this makes due takes them in when it comes after the push.
        if published {
            crate::segment::purge::note_abandoned_free();
        }
        pool_put(heap);
    }
}

/// Looks at up to `TIDY_MAX` abandoned segments: gives back what has
/// been freed into them since their thread exited (blocks pushed on their
/// pages' remote stacks, which no owner collects), frees the segments that
/// emptied, and puts the rest back on the list in their order, for the
/// next thread that needs a segment. A segment with no block freed into
/// it since its last tidying, or none that empties a page since a look at
/// it (`serves`), is put back untouched: tidying them all took `rethread`
/// twice the instructions of the tidying before `serves` (which makes a
/// thread reclaim fewer segments, so acquire and tidy more often). Frees
/// the hints missed wait for the purge pass, which tidies every segment,
/// or for a tidying with `all`: every segment popped is tidied, and put
/// back behind the others, so that the next such tidying looks at the next
/// ones (`segment_acquire`, before it maps a fresh segment).
///
/// # Safety
/// The purge lock must be held (`fork` must not copy the process while the
/// segments are off the list).
unsafe fn tidy_abandoned(all: bool) {
    // In the order popped, each with whether its tidying set it a new
    // purge deadline.
    let mut kept = [(ptr::null_mut::<Segment>(), false); TIDY_MAX];
    let mut n = 0;
    for _ in 0..TIDY_MAX {
        let seg = arena::abandoned_pop();
        if seg.is_null() {
            break;
        }
        // SAFETY: popped off the abandoned list: ours alone until pushed.
        unsafe {
            // Relaxed: a hint, as everywhere (`Segment::late_frees`).
            if !all && (*seg).late_frees.load(Ordering::Relaxed) == 0 && (*seg).late_free_units == 0 {
                // Nothing freed into it since it was last tidied, or
                // nothing that empties a page since a look at it: nothing
                // to give back.
                kept[n] = (seg, false);
                n += 1;
                continue;
            }
            let due = (*seg).purge_at_ms;
            if release_empty_pages(seg) {
                arena::segment_free(seg);
            } else {
                kept[n] = (seg, (*seg).purge_at_ms != due);
                n += 1;
            }
        }
    }
    if all {
        for &(seg, _) in &kept[..n] {
            arena::abandoned_push_last(seg);
        }
        return;
    }
    // Back in their order: the first popped pushed last, on top.
    for &(seg, new_deadline) in kept[..n].iter().rev() {
        if new_deadline {
            // The pages it gave back are due later than the hint may say:
            // published (found by review).
            arena::abandoned_push(seg);
        } else {
            // SAFETY: the caller holds the purge lock, under which seg was
            // taken off the list above.
            unsafe { arena::abandoned_push_back(seg) };
        }
    }
}

/// A heap that owns more segments than this frees into an abandoned
/// segment without taking it over (`free::take_over_abandoned`): it has
/// room of its own, and a segment it took would hold the room the block
/// leaves where other threads cannot use it.
pub(crate) const TAKE_OVER_SEGMENTS_MAX: usize = 8;

/// The purge pass's look at an abandoned segment it holds: takes in what
/// was freed into it since its thread exited and gives back the pages
/// that emptied; returns whether the segment is now empty.
///
/// # Safety
/// `seg` must be a normal segment popped off the abandoned list by the
/// caller, who holds the purge lock.
pub(crate) unsafe fn tidy_abandoned_segment(seg: *mut Segment) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { release_empty_pages(seg) }
}

/// Takes in the remote frees of every in-use page of `seg`, gives back
/// the pages they emptied and notes the classes of those with room left
/// (`Segment::room_classes`); returns whether the segment is now empty.
/// Leaves every other page in no queue, naming no heap (`local_owner` 0):
/// whoever reclaims the segment takes each in (`reclaim`).
///
/// # Safety
/// `seg` must be a normal segment held exclusively by the caller: owned by
/// a heap no thread uses any more, or popped off the abandoned list.
unsafe fn release_empty_pages(seg: *mut Segment) -> bool {
    // Remote frees only push onto the pages' atomic stacks.
    // SAFETY: the caller's guarantee: the segment's pages are ours to change.
    unsafe {
        // Relaxed: a hint (`Segment::late_frees`); cleared before the look.
        (*seg).late_frees.store(0, Ordering::Relaxed);
        (*seg).late_free_units = 0;
        let mut room = 0u64;
        for i in 1..PAGES_PER_SEGMENT {
            if (*seg).used_pages == 0 {
                break;
            }
            let page = &mut (*seg).pages[i] as *mut Page;
            if !(*page).in_use {
                continue;
            }
            // Nobody's queue holds it any more (an abandoned heap's struct
            // will be reused: no page may still name it).
            (*page).local_owner.store(0, Ordering::Relaxed);
            (*page).collect_remote();
            if (*page).used == 0 {
                release_span(seg, page);
            } else if (*page).used < (*page).reserved && usize::from((*page).class) < CLASS_COUNT {
                room |= 1 << (*page).class;
            }
        }
        (*seg).room_classes = room;
        (*seg).used_pages == 0
    }
}

// ---------------------------------------------------------------------------
// Retired heaps: exited threads' heaps kept whole for the next new thread.

/// Retired heaps kept at most: a program's threads come and go by the
/// handful; more than this waiting means they are not coming back soon.
const RETIRED_MAX: usize = 16;
/// A heap that owns more segments than this is abandoned at its thread's
/// exit, not retired: what it holds is most likely blocks handed to other
/// threads (a burst a producer left behind), which those threads take over
/// as they free them (`free::free_slow`; a thread that owns more than
/// `TAKE_OVER_SEGMENTS_MAX` leaves them to the purge pass), rather than a
/// working set the next thread will want.
const RETIRE_SEGMENTS_MAX: usize = 4;
/// A retired heap no new thread has taken over within this long is
/// abandoned (its segments become reclaimable piece by piece).
const RETIRED_MAX_AGE_MS: u64 = 1000;

struct Retired {
    lock: SpinLock,
    /// Linked through `Heap::pool_next`.
    head: UnsafeCell<*mut Heap>,
    count: UnsafeCell<usize>,
}

// SAFETY: head and count are only accessed with `lock` held; the heaps on
// the list are used by no thread.
unsafe impl Sync for Retired {}

global! {
    static RETIRED: Retired = Retired {
        lock: SpinLock::new(),
        head: UnsafeCell::new(ptr::null_mut()),
        count: UnsafeCell::new(0),
    };
}

/// Gives up the heap of an exiting thread: tidies it and keeps it whole
/// for the next new thread, or abandons it when `RETIRED_MAX` wait already
/// (or it owns nothing, when the struct simply goes back to the pool).
///
/// The thread's local heaps still alive are taken in first (local.rs,
/// `orphan_locals`): a retired heap may become another thread's, and a
/// segment naming it in `local_parent` would then make that thread's frees
/// into a local heap it does not own look local (`free::free_slow`).
///
/// # Safety
/// `heap` must be a thread heap no thread uses any more.
pub(crate) unsafe fn heap_retire(heap: *mut Heap) {
    stats::heap_in_use(-1);
    // SAFETY: heap is unused; its segments are owned by it.
    unsafe {
        crate::thread::local::orphan_locals(heap);
        (*heap).counts.flush();
        flush_remote(heap);
        crate::thread::remote::take_notifications(heap);
        crate::segment::purge::tidy_for_retire(heap);
        if (*heap).segments.is_null() {
            pool_put(heap);
            return;
        }
        let mut segments = 0;
        let mut seg = (*heap).segments;
        while !seg.is_null() && segments <= RETIRE_SEGMENTS_MAX {
            segments += 1;
            seg = (*seg).next;
        }
        (*heap).retired_at_ms = crate::os::now_ms();
        RETIRED.lock.lock();
        let kept = *RETIRED.count.get() < RETIRED_MAX && segments <= RETIRE_SEGMENTS_MAX;
        if kept {
            (*heap).pool_next = *RETIRED.head.get();
            *RETIRED.head.get() = heap;
            *RETIRED.count.get() += 1;
            // Counted with the lock held, as the takings are: counted
            // after it, a thread taking the heap at once brought the
            // count below zero for a moment (read as 2^64 - 1 in the
            // statistics).
            stats::heap_retired(1);
        }
        RETIRED.lock.unlock();
        if kept {
            crate::segment::purge::note_retired();
        } else {
            abandon_segments(heap);
        }
    }
}

/// A heap for a thread that has none: the most recently retired heap, taken
/// over as it is, else a fresh one (null when out of memory).
pub(crate) fn heap_for_thread() -> *mut Heap {
    RETIRED.lock.lock();
    // SAFETY: the lock is held.
    let heap = unsafe {
        let heap = *RETIRED.head.get();
        if !heap.is_null() {
            *RETIRED.head.get() = (*heap).pool_next;
            *RETIRED.count.get() -= 1;
            stats::heap_retired(-1);
        }
        heap
    };
    RETIRED.lock.unlock();
    if heap.is_null() {
        return heap_new();
    }
    // SAFETY: taken off the list: ours alone now.
    unsafe {
        (*heap).pool_next = ptr::null_mut();
        (*heap).retired_at_ms = 0;
        (*heap).exit_deferred = false;
    }
    stats::heap_in_use(1);
    heap
}

/// The global purge pass's look at the retired heaps: abandons those that
/// waited longer than `RETIRED_MAX_AGE_MS` (all with `force`). Returns when
/// to look again (`u64::MAX`: nothing waits).
pub(crate) fn age_retired(now: u64, force: bool) -> u64 {
    RETIRED.lock.lock();
    let mut old: *mut Heap = ptr::null_mut();
    let mut next = u64::MAX;
    // SAFETY: the lock is held; listed heaps are used by no thread.
    unsafe {
        let mut link: *mut *mut Heap = RETIRED.head.get();
        while !(*link).is_null() {
            let heap = *link;
            let due = (*heap).retired_at_ms + RETIRED_MAX_AGE_MS;
            if force || due <= now {
                *link = (*heap).pool_next;
                *RETIRED.count.get() -= 1;
                stats::heap_retired(-1);
                (*heap).pool_next = old;
                old = heap;
            } else {
                next = next.min(due);
                link = &raw mut (*heap).pool_next;
            }
        }
    }
    RETIRED.lock.unlock();
    while !old.is_null() {
        // SAFETY: taken off the list above: ours alone.
        unsafe {
            let heap = old;
            old = (*heap).pool_next;
            abandon_segments(heap);
        }
    }
    next
}

/// Calls `f` on every retired heap (fork's child, which is alone).
pub(crate) fn retired_for_each(mut f: impl FnMut(*mut Heap)) {
    RETIRED.lock.lock();
    // SAFETY: the lock is held; listed heaps are used by no thread.
    unsafe {
        let mut heap = *RETIRED.head.get();
        while !heap.is_null() {
            f(heap);
            heap = (*heap).pool_next;
        }
    }
    RETIRED.lock.unlock();
}

/// `fork` prepare: hold the retired list's lock across the fork.
pub(crate) fn lock_retired() {
    RETIRED.lock.lock();
}

/// `fork` parent/child: release what `lock_retired` took.
pub(crate) fn unlock_retired() {
    RETIRED.lock.unlock();
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
