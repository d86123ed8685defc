//! Delayed purging and the heap's time-driven duties.
//!
//! A heap's slow path (a large or huge allocation among them) looks at the
//! clock every `CLOCK_CHECK_INTERVAL`th call (and a local heap's at its
//! first; refill.rs) and runs `periodic`
//! (a live local heap's also does its thread heap's part): once per purge
//! delay it sweeps its queued pages (remote frees taken in, empty pages
//! given back, also of classes the thread stopped using) and purges the
//! due spans of its segments. Cached segments, abandoned segments and cached huge mappings
//! are purged by a global pass that any thread's slow path runs when the
//! global deadline hint (`GLOBAL_PURGE_AT`) has passed, one thread at a
//! time, off the lists' locks; it first tidies the abandoned segments (the
//! blocks freed into them taken in, emptied pages and segments given
//! back). `collect` does all of it now.

use crate::huge;
use crate::os;
use crate::segment::arena::{self, SegmentList, ABANDONED, SEGMENT_CACHE, SEGMENT_CACHE_MAX};
use crate::segment::{self, Segment};
use crate::small::class::CLASS_COUNT;
use crate::small::page_queue::queue_remove;
use crate::small::refill::{maybe_free_segment, release_page};
use crate::sync::{global, AtomicU64, Ordering, SpinLock};
use crate::thread;
use crate::thread::heap::{is_static_heap, Heap};
use crate::thread::remote::{flush_remote, process_notified};
use core::ptr;

/// Sweep interval when purging is off or immediate.
const SWEEP_INTERVAL_MS: u64 = 250;

/// Time-driven slow-path work: every sweep interval, take in remote frees
/// of every queued page and give back empty pages (so the memory of classes
/// the thread stopped using is returned); purge what is due, ours and global.
#[cold]
#[inline(never)]
pub(crate) unsafe fn periodic(heap: *mut Heap) {
    let now = os::now_ms();
    // SAFETY: heap is the caller's own heap, and a live local heap's
    // parent is the calling thread's heap (local.rs).
    unsafe {
        heap_periodic(heap, now);
        // A live local heap's slow paths may be the only ones its thread
        // runs (a thread that allocates only through local heaps), and its
        // thread heap holds the pages of the local heaps it deleted: their
        // remote frees are taken in by the thread heap's sweep.
        if let Some(parent) = (*heap).live_parent() {
            heap_periodic(parent, now);
        }
    }
    if global_purge_due(now) {
        purge_global(now, false);
    }
    crate::policy::tick(now);
}

/// `periodic`'s work on one heap: its remote batches flushed, its sweep
/// and its purges when due.
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps.
unsafe fn heap_periodic(heap: *mut Heap, now: u64) {
    // SAFETY: the caller's guarantee.
    unsafe {
        flush_remote(heap);
        if now >= (*heap).sweep_at_ms {
            let delay = crate::policy::purge_delay_ms();
            let interval = if delay > 0 { delay as u64 } else { SWEEP_INTERVAL_MS };
            if (*heap).sweep_at_ms != 0 {
                timed_sweep(heap);
            }
            (*heap).sweep_at_ms = now + interval;
        }
        if (*heap).purge_at_ms != 0 && now >= (*heap).purge_at_ms {
            heap_purge(heap, now, false);
        }
    }
}

/// Takes in remote frees of every queued page and gives back the empty
/// ones — all of them with `release_all`, else all but a class's only page.
/// Returns how many pages it left queued.
///
/// # Safety
/// `heap` must be the calling thread's heap (or one of its local heaps),
/// with none of its own paths running: its queues and pages are changed
/// without a lock.
unsafe fn sweep(heap: *mut Heap, release_all: bool) -> u32 {
    let mut kept = 0u32;
    // SAFETY: heap is the caller's own heap; queued pages belong to it.
    unsafe {
        for class in 0..CLASS_COUNT {
            let mut page = (*heap).queues[class].first;
            while !page.is_null() {
                let next = (*page).next;
                (*page).collect_remote();
                let only = (*heap).queues[class].first == page && next.is_null();
                if (*page).used == 0 && (release_all || !only) {
                    let seg = segment::segment_of((*page).start().add(1));
                    queue_remove(heap, page);
                    release_page(heap, seg, page);
                    maybe_free_segment(heap, seg);
                } else {
                    kept = kept.saturating_add(1);
                }
                page = next;
            }
        }
    }
    kept
}

/// The sweep of `heap` on its timed round (`heap_periodic`), which also
/// starts the count of `sweep_for_locals` anew.
///
/// # Safety
/// As for `sweep`.
unsafe fn timed_sweep(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe {
        (*heap).queued_after_sweep = sweep(heap, true);
        (*heap).absorbed_pages = 0;
    }
}

/// Called by a live local heap about to take a segment, with its thread
/// heap `parent`: sweeps `parent` (its queued pages' remote frees taken
/// in, the empty pages given back, the segments they empty freed to the
/// cache, where this very acquisition finds them) once the local heaps it
/// deleted since its last sweep have handed it at least as many in-use
/// pages as that sweep left queued, and at least a segment's worth. A
/// class's only page stays, empty or not, as in `collect(false)`: the
/// thread heap may be allocating from it (giving it back at each such
/// sweep made a thread that also deletes small local heaps take those
/// pages again: 17–28 % more instructions, and twice the `madvise` calls
/// with a purge delay of 0); the timed sweep gives it back.
///
/// A deleted local heap's segments go to the thread heap, and a local heap
/// takes empty segments only (local.rs). A thread that allocates only
/// through local heaps and hands the blocks to other threads never reuses
/// those pages itself, so only a sweep finds them emptied; with the timed
/// sweep alone (once per purge delay) such a producer held about 1 GB for
/// 32 MB live. Paced so: a sweep looks at about what was left queued and
/// what was handed over since, so each is paid for by the pages handed
/// over (a thread heap that holds many pages of its own, or local heaps
/// destroyed rather than deleted — which hand over nothing — bring no
/// sweep); and what the deleted heaps hand over waits unswept only until
/// it matches what the last sweep left queued, or a segment's worth.
/// (Counting the segments the local heaps take,
/// and the pages a sweep looked at, swept large thread heaps for local
/// heaps that were destroyed, and after a burst put the next sweep as far
/// off as the burst was large: docs/HISTORY.md.)
///
/// # Safety
/// `parent` must be the calling thread's heap, with a live local heap
/// in a slow path (not in the middle of one of its own).
pub(crate) unsafe fn sweep_for_locals(parent: *mut Heap) {
    // SAFETY: the caller's guarantee: parent is this thread's heap, and
    // none of its own paths is running.
    unsafe {
        let wait = (*parent).queued_after_sweep.max(segment::PAGES_PER_SEGMENT as u32);
        if (*parent).absorbed_pages < wait {
            return;
        }
        (*parent).absorbed_pages = 0;
        (*parent).queued_after_sweep = sweep(parent, false);
    }
}

/// Tidies the heap of an exiting thread before it is retired: takes in
/// remote frees, gives back every empty page, and purges what is due.
///
/// What is not yet due stays committed, on purpose: a thread that exits is
/// most often followed by another (a pool, a fan-out, a request per
/// thread), which takes this heap over with its pages still warm. Purging
/// everything at each exit cost a thread-churning program one `madvise`
/// per page and a page fault per page reused (issue 27: 34 000 `madvise`
/// calls and 160 000 faults in 1 200 short threads, where mimalloc made
/// none). The memory still goes back: a heap no thread takes over within
/// `RETIRED_MAX_AGE_MS` is abandoned by the global pass (`age_retired`,
/// whose deadline `note_retired` sets), which then purges its segments'
/// free pages when due, as it does the emptied segments in the cache.
///
/// # Safety
/// `heap` must be a heap no thread uses any more.
pub(crate) unsafe fn tidy_for_retire(heap: *mut Heap) {
    let now = os::now_ms();
    // SAFETY: the caller's guarantee: heap is ours alone.
    unsafe {
        sweep(heap, true);
        heap_purge(heap, now, false);
    }
    if global_purge_due(now) {
        purge_pass(now, false, false);
    }
}

/// Slow-path releases (a page given back by a free) run the heap's due
/// purges: a thread that only frees — one that took over segments of an
/// exited thread by freeing into them — never reaches the allocation slow
/// path where `periodic` runs. Looks at the clock every
/// `RELEASES_PER_CLOCK_CHECK`th release.
///
/// # Safety
/// `heap` must be the calling thread's heap.
pub(crate) unsafe fn release_duty(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe {
        (*heap).release_ticks = (*heap).release_ticks.wrapping_add(1);
        if !(*heap).release_ticks.is_multiple_of(RELEASES_PER_CLOCK_CHECK) {
            return;
        }
        let now = os::now_ms();
        if (*heap).purge_at_ms != 0 && now >= (*heap).purge_at_ms {
            heap_purge(heap, now, false);
        }
        if global_purge_due(now) {
            purge_global(now, false);
        }
        crate::policy::tick(now);
    }
}

/// See `release_duty`.
const RELEASES_PER_CLOCK_CHECK: u32 = 8;

/// The duties of a thread with no heap of its own (one that has exited,
/// or one no heap could be made for), at each of its huge allocations:
/// the global purges when due (the huge arena's and cache's among them)
/// and the policy's clock.
pub(crate) fn heapless_duties() {
    let now = os::now_ms();
    if global_purge_due(now) {
        purge_global(now, false);
    }
    crate::policy::tick(now);
}

/// Purges the pending pages of our segments that are due (all when `force`).
unsafe fn heap_purge(heap: *mut Heap, now: u64, force: bool) {
    // SAFETY: heap is the caller's own heap; its segments are owned by it.
    unsafe {
        let mut next = 0u64;
        let mut seg = (*heap).segments;
        while !seg.is_null() {
            if (*seg).purge_units != 0 {
                if force || (*seg).purge_at_ms <= now {
                    (*seg).purge_pending();
                } else if next == 0 || (*seg).purge_at_ms < next {
                    next = (*seg).purge_at_ms;
                }
            }
            seg = (*seg).next;
        }
        (*heap).purge_at_ms = next;
    }
}

/// Collects the calling thread's heap: takes in remote frees, gives back
/// empty pages (with `force`, also the ones kept to avoid churn), and purges
/// what is due (with `force`, everything free, also in the global caches).
pub(crate) fn collect(force: bool) {
    let heap = thread::heap();
    let now = os::now_ms();
    if !is_static_heap(heap) {
        // SAFETY: heap is this thread's heap.
        unsafe {
            flush_remote(heap);
            process_notified(heap);
            sweep(heap, force);
            heap_purge(heap, now, force);
        }
    }
    purge_global(now, force);
}

global! {
    /// Earliest deadline of a cached or abandoned segment or huge mapping
    /// awaiting purge, of a retired heap's wait, or of a block pushed into an
    /// abandoned segment awaiting the pass's tidying (`u64::MAX` = none). A
    /// hint: checked cheaply by slow paths. Relaxed but for one pair: it orders
    /// nothing else (the lists it points at have their locks), and a stale
    /// value only moves a purge pass earlier or later. The pair: a push into
    /// an abandoned segment's page, then `note_abandoned_free`'s Release RMW,
    /// read by the pass's Acquire claim, so that the pass's tidying sees it
    /// (a modelled atomic under loom, for
    /// `pass_claiming_an_abandoned_free_deadline_takes_the_block_in` and
    /// `pass_already_due_tidies_beside_a_notifying_free_into_an_abandoned_segment`).
    pub(crate) static GLOBAL_PURGE_AT: AtomicU64 = AtomicU64::new(u64::MAX);
}

/// A heap was retired: the global purge pass must come by to abandon it
/// if no new thread takes it over in time.
pub(crate) fn note_retired() {
    GLOBAL_PURGE_AT.fetch_min(os::now_ms() + 1000, Ordering::Relaxed);
}

/// A block was pushed on a page of an abandoned segment (`free::free_slow`,
/// after `take_over_abandoned` left the segment on the list; a batch
/// flushed after the owner's exit, `remote::flush_batch`), or may be by a
/// thread that read the owner before its exit (`abandon::abandon_segments`,
/// after publishing segments with blocks in use): a purge pass
/// must come by within the purge delay to take it in (`purge_list`), if
/// no thread that looks for room does first; at least `DELAY_MIN_MS` on,
/// so that with an immediate purge (`HAKMEM_PURGE_DELAY=0`) a stream of
/// such frees does not make every slow path run a pass. None with purging
/// off (`HAKMEM_PURGE_DELAY=-1`): such memory then waits for a reclaim.
pub(crate) fn note_abandoned_free() {
    let delay = crate::policy::purge_delay_ms();
    if delay < 0 {
        return;
    }
    let delay = (delay as u64).max(crate::policy::DELAY_MIN_MS);
    // Release, after the caller's push: the pass whose claim (an Acquire
    // RMW) reads this value or a later one sees the push when it tidies
    // the segment. An RMW even when the deadline stays: a claim reading a
    // later value still continues this release sequence.
    GLOBAL_PURGE_AT.fetch_min(os::now_ms() + delay, Ordering::Release);
}

/// Whether some cached memory may be due for purging at `now`.
#[inline]
pub(crate) fn global_purge_due(now: u64) -> bool {
    now >= GLOBAL_PURGE_AT.load(Ordering::Relaxed)
}

/// Purges cached segments and huge mappings that are due at `now` (all of
/// them when `force`), and abandons the retired heaps that waited their
/// time (all of them when `force`: `collect(true)` gives back everything
/// it can). One thread at a time does the pass; entries are taken off
/// their list for the system calls so no lock is held across them.
pub(crate) fn purge_global(now: u64, force: bool) {
    purge_pass(now, force, force);
}

/// `purge_global`, with the forced work on threads apart: with
/// `abandon_retired` it abandons every retired heap and looks for every
/// thread not yet seen alive (`thread::live::reap_exited`), else only for what
/// is due. The heaps go first: what abandoning them frees or abandons is
/// then on the lists this pass purges (with `force`, at once: `collect(true)`
/// gives back every free page, also the retired heaps').
fn purge_pass(now: u64, force: bool, abandon_retired: bool) {
    let due = GLOBAL_PURGE_AT.load(Ordering::Relaxed);
    if !force && now < due {
        return;
    }
    // None from another library's `fork` handler run while hakmem's hold
    // every lock (sync.rs, `FORK_OWNER`): in the child, before hakmem's
    // child handler has listed its one thread anew, a pass would take the
    // parent's threads, gone there, for exited ones and abandon heaps that
    // may have been in use at the fork. The work waits for the next pass.
    if crate::sync::holds_locks_for_fork() {
        return;
    }
    // Too soon after the last pass: the deadline moves to the gap's end
    // (an RMW, so a later claim still continues `note_abandoned_free`'s
    // release sequence; one that fails left it where another put it).
    if !force {
        let earliest = NEXT_PASS_EARLIEST.load(Ordering::Relaxed);
        if now < earliest {
            let _ = GLOBAL_PURGE_AT.compare_exchange(due, earliest, Ordering::Relaxed, Ordering::Relaxed);
            return;
        }
    }
    // Claim the pass (a concurrent caller sees MAX and leaves). Acquire:
    // pairs with `note_abandoned_free`'s Release RMW.
    if !force
        && GLOBAL_PURGE_AT
            .compare_exchange(due, u64::MAX, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    if force {
        // Acquire, an RMW: as the claim above (`note_abandoned_free`).
        GLOBAL_PURGE_AT.swap(u64::MAX, Ordering::Acquire);
    }
    // Relaxed: a hint, as the deadline; the pass itself is ordered by
    // the purge lock.
    NEXT_PASS_EARLIEST.store(now.saturating_add(pass_gap_ms()), Ordering::Relaxed);
    crate::stats::purge_pass();
    PURGE_LOCK.lock();
    let mut next = crate::thread::abandon::age_retired(now, abandon_retired);
    #[cfg(not(hakmem_loom))]
    {
        next = next.min(crate::thread::live::reap_exited(now, abandon_retired));
    }
    // Abandoned and cached segments: take each list whole, purge the due
    // pages, put the segments back (no lock is held across the calls).
    // The abandoned first: the segments its tidying empties go to the
    // cache, purged in the same pass when `force`.
    next = next.min(purge_list(&ABANDONED, usize::MAX, now, force, true));
    next = next.min(purge_list(&SEGMENT_CACHE, SEGMENT_CACHE_MAX, now, force, false));
    next = next.min(huge::purge_huge_cache(now, force));
    PURGE_LOCK.unlock();
    if next != u64::MAX {
        GLOBAL_PURGE_AT.fetch_min(next, Ordering::Relaxed);
    }
}

global! {
    /// When the next pass may start at the earliest, unless forced
    /// (`pass_gap_ms`). A hint; 0 at first.
    static NEXT_PASS_EARLIEST: AtomicU64 = AtomicU64::new(0);
}

/// Longest gap between passes that a list's own deadlines can force.
const PASS_GAP_MAX_MS: u64 = 25;

/// The least time from one pass to the next that the lists' deadlines ask
/// for: half the purge delay, at most `PASS_GAP_MAX_MS` (none with an
/// immediate purge or purging off, nor under loom). A pass visits every
/// abandoned and cached segment, so its cost grows with the lists; their
/// deadlines, one per segment, come as often as segments are abandoned or
/// freed. Without a gap a program whose threads each left a segment behind
/// ran a pass per thread exit over the whole list: 5 694 passes over up to
/// 3 700 segments, 85 % of its samples (docs/BENCHMARKS.md, "Threads that
/// each leave a few blocks behind"). A purge is then up to the gap late. The notes that make a pass
/// due (`note_abandoned_free`, `note_retired`) ask for at least the delay.
fn pass_gap_ms() -> u64 {
    let delay = crate::policy::purge_delay_ms();
    // Loom's models run passes one after another at one fixed time.
    if delay <= 0 || cfg!(hakmem_loom) {
        return 0;
    }
    (delay as u64 / 2).min(PASS_GAP_MAX_MS)
}

global! {
    /// Held by a global purge pass from start to end (and by the huge
    /// arena's immediate purges): what a pass takes off a list for its
    /// system calls is back on it before anyone else holds the lock. `fork`
    /// takes it first, so a child never starts with segments or arena
    /// units a vanished purger had taken off their lists (issue 22: they
    /// were lost to the child). Held across system calls: waiters yield.
    static PURGE_LOCK: SpinLock = SpinLock::new();
}

/// `fork` prepare: wait for a purge in progress, and hold off the next.
pub(crate) fn lock_purges() {
    PURGE_LOCK.lock();
}

/// `fork` parent/child: release what `lock_purges` took.
pub(crate) fn unlock_purges() {
    PURGE_LOCK.unlock();
}

/// `fork` child: the purge deadline made due. A thread of the parent that
/// had claimed a pass (the deadline set to `u64::MAX`) and waited for the
/// purge lock across the fork does not exist here, and would have left
/// the child's deadline at `u64::MAX` for good: nothing inherited would be
/// purged or aged until something else lowered it. The child's first due
/// look runs a pass, which sets the real deadline.
#[cfg(not(hakmem_loom))]
pub(crate) fn fork_child_purge_due() {
    // Relaxed: the child has one thread.
    GLOBAL_PURGE_AT.store(0, Ordering::Relaxed);
}

/// Runs `purge` under the purge lock if no pass holds it; false (nothing
/// run) otherwise — the caller leaves the work due for that pass or the
/// next (never waits: a pass may be what called it).
pub(crate) fn try_purge_now(purge: impl FnOnce()) -> bool {
    if !PURGE_LOCK.try_lock() {
        return false;
    }
    purge();
    PURGE_LOCK.unlock();
    true
}

/// The OS refused a mapping (address space, `RLIMIT_AS`, strict
/// overcommit): gives it back what hakmem keeps mapped without a live
/// block, so that the caller can try once more — the retired heaps
/// abandoned and the abandoned segments tidied (what they emptied goes to
/// the segment cache), then every cached segment and cached huge mapping
/// unmapped, and the huge arena's regions left without a block (`secure`:
/// its quarantine keeps its own rule, `quarantine_release`). Purging is
/// not enough: a purged mapping still holds its address space (and, under
/// strict accounting, its commit charge). Returns whether anything was
/// unmapped. Nothing when a purge pass holds the lock (its lists are off
/// their lists; it is not waited for: the caller may hold what the pass
/// waits for) — nor, so, inside `fork`'s window, where its owner holds it
/// — and nothing for a mapping of `needed` bytes larger than memory and
/// swap together under the default overcommit heuristic
/// (`os::refused_above`): the kernel refuses that whatever hakmem gives
/// back, and a program probing for the largest block it can have
/// (halving on failure) would lose every cache at each probe.
#[cold]
pub(crate) fn unmap_cached(needed: usize) -> bool {
    if needed > os::refused_above() || !PURGE_LOCK.try_lock() {
        return false;
    }
    let now = os::now_ms();
    crate::thread::abandon::age_retired(now, true);
    purge_list(&ABANDONED, usize::MAX, now, false, true);
    let mut any = false;
    loop {
        let seg = SEGMENT_CACHE.pop();
        if seg.is_null() {
            break;
        }
        // SAFETY: a cached segment is an empty, unowned normal segment, and
        // popped it is referred to by nothing.
        unsafe { arena::segment_unmap(seg) };
        any = true;
    }
    any |= huge::unmap_cached();
    PURGE_LOCK.unlock();
    any
}

/// Takes every segment off `list`, purges its due pages (all when `force`)
/// and puts it back (unmapping what no longer fits under `limit`). Returns
/// the earliest remaining deadline (`u64::MAX` when none). With `tidy`
/// (the abandoned list) each segment's remote frees are taken in first,
/// the pages they emptied given back, and an emptied segment freed
/// (`abandon::tidy_abandoned_segment`).
fn purge_list(list: &SegmentList, limit: usize, now: u64, force: bool, tidy: bool) -> u64 {
    let mut next = u64::MAX;
    let mut taken: *mut Segment = ptr::null_mut();
    loop {
        let seg = list.pop();
        if seg.is_null() {
            break;
        }
        // SAFETY: a popped segment is exclusively ours until pushed back.
        unsafe { (*seg).next = taken };
        taken = seg;
    }
    crate::sync::race_window(crate::sync::Window::PurgeTaken);
    while !taken.is_null() {
        // SAFETY: taken was popped above: exclusively ours; its free pages
        // hold no live block (remote frees only touch in-use pages).
        unsafe {
            let seg = taken;
            taken = (*seg).next;
            (*seg).next = ptr::null_mut();
            if tidy && crate::thread::abandon::tidy_abandoned_segment(seg) {
                arena::segment_free(seg);
                continue;
            }
            if (*seg).purge_units != 0 {
                if force || (*seg).purge_at_ms <= now {
                    (*seg).purge_pending();
                } else {
                    next = next.min((*seg).purge_at_ms);
                }
            }
            if !list.push(seg, limit) {
                arena::segment_unmap(seg);
            }
        }
    }
    next
}

/// Tests of the protocol windows, in the `hakmem_race_windows` build only
/// (scripts/test runs them there).
#[cfg(all(test, hakmem_race_windows))]
mod window_tests {
    extern crate std;
    use crate::sync::{set_window_hook, Window};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    static IN_WINDOW: AtomicBool = AtomicBool::new(false);

    /// Stays a while inside the window where a purge pass has its
    /// segments off their list, so that another thread forks meanwhile.
    fn linger_with_segments_taken(window: Window) {
        // The abandoned list's turn (taken whole: none left on it).
        let taken = crate::segment::arena::abandoned_count() == 0;
        if window == Window::PurgeTaken && taken && !IN_WINDOW.swap(true, Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Issue 22, hole 6: a fork while a purge pass has the abandoned
    /// segments off their list gives the child a list with all of them:
    /// `fork` waits for the pass (before, the child lost them).
    #[test]
    fn a_fork_during_a_purge_pass_loses_no_abandoned_segment() {
        let _serial = crate::sync::serial_window_tests();
        // An abandoned segment: a thread's block kept, its heap retired,
        // then abandoned by `collect(true)`.
        let kept = std::thread::spawn(|| crate::malloc(100) as usize).join().unwrap();
        crate::collect(true);
        let abandoned = crate::abandoned_count();
        assert!(abandoned >= 1, "the thread's segment was abandoned");
        let purger = std::thread::spawn(|| {
            set_window_hook(Some(linger_with_segments_taken));
            crate::collect(true);
            set_window_hook(None);
        });
        while !IN_WINDOW.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // SAFETY: the child only counts the list and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = if crate::abandoned_count() >= abandoned { 0 } else { 1 };
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(code) };
        }
        assert!(pid > 0);
        let mut status = 0;
        // SAFETY: pid is our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        purger.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's abandoned list lost segments the purge pass held at the fork (status {status:#x})"
        );
        // SAFETY: a live block of the exited thread, freed once.
        unsafe { crate::free(kept as *mut u8) };
    }
}
