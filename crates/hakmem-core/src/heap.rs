//! The thread heap: for each size class the page to allocate from, the
//! class's page queue, the segments the thread owns, and the slow paths.
//!
//! Fast paths (`alloc` here, `free` in lib.rs) touch only the owner's heap
//! and page: no lock, no atomic read-modify-write. Everything rare —
//! refilling a page, finding or carving another, parking a full page,
//! acting on notifications, thread set-up and exit — is out of line.
//!
//! Invariants:
//! * `direct[c]` is the first page of `queues[c]`, or the static empty page
//!   when the queue is empty; so is `direct_small[i]` for every small index
//!   `i` of class `c`;
//! * pages in a queue are in use, of that class, not `PAGE_IN_FULL`, and
//!   name this heap in `local_owner`; every other page has `local_owner` 0;
//! * a page of this heap that is not in a queue is parked (`PAGE_IN_FULL`,
//!   with `FULL_NOTIFY` requested or remote blocks waiting) or large;
//! * `segments` lists exactly the normal segments whose `heap` is this heap.
//!
//! A heap whose thread exits is abandoned: its empty pages and segments are
//! freed, the rest published for reclaim (`heap_abandon`); the heap struct
//! goes back to a pool and is never unmapped, because a remote free may still
//! hold its address to notify it (a stale notification only costs a scan).

use crate::class::{self, CLASS_COUNT, LARGE_CLASS, SMALL_CLASS_COUNT, SMALL_DIRECT_LEN};
use crate::os;
use crate::page::{Block, Page, PAGE_IN_FULL};
use crate::segment::{self, Segment, PAGES_PER_SEGMENT, PAGE_SIZE};
use crate::stats;
use crate::sync::{global, race_window, AtomicBool, Ordering, SpinLock, Window};
use crate::thread;
use core::cell::UnsafeCell;
use core::ptr;
use crossbeam_utils::CachePadded;

#[derive(Clone, Copy)]
struct PageQueue {
    first: *mut Page,
    last: *mut Page,
}

/// Aligned so that two threads' heaps never share a cache line (they sit
/// side by side in the heap pool).
#[repr(C, align(128))]
pub(crate) struct Heap {
    /// Fast-path allocations left before the next forced slow path (the
    /// heartbeat; see `HEARTBEAT_ALLOCS`).
    heartbeat: u32,
    /// The page each size up to 1 KiB allocates from, by `small_index(size)`
    /// (mimalloc's `pages_free_direct`): the small fast path needs no class.
    direct_small: [*mut Page; SMALL_DIRECT_LEN],
    /// The page each class allocates from (fast path).
    direct: [*mut Page; CLASS_COUNT],
    queues: [PageQueue; CLASS_COUNT],
    /// Owned normal segments (doubly linked through `Segment::next/prev`).
    segments: *mut Segment,
    /// Earliest purge deadline among our segments (ms; 0 = none).
    purge_at_ms: u64,
    /// When to next sweep every queued page for remote frees and emptiness.
    sweep_at_ms: u64,
    /// Slow-path calls, to look at the clock only every `CLOCK_CHECK_INTERVAL`.
    slow_ticks: u32,
    /// Per-class counts (empty without the `stats` feature).
    pub(crate) counts: stats::HeapCounts,
    /// Blocks this thread freed into other threads' pages, gathered per
    /// page and pushed there one chain at a time (see `remote_free`).
    remote: [RemoteBatch; REMOTE_BATCHES],
    /// Next heap in the pool's free list.
    pool_next: *mut Heap,
    /// Set by a remote free that ended a parked-full state in one of our
    /// segments. The one field other threads write: on a line of its own,
    /// so those writes never evict the direct tables.
    pub(crate) notified: CachePadded<AtomicBool>,
}

/// A static with interior mutability that is never written (the empty page
/// and heap are only read: their free lists are empty, so every fast path
/// misses before it would write).
#[repr(transparent)]
pub(crate) struct ReadOnlyStatic<T>(UnsafeCell<T>);

// SAFETY: the wrapped value is never written after construction (see above).
unsafe impl<T> Sync for ReadOnlyStatic<T> {}

impl<T> ReadOnlyStatic<T> {
    pub(crate) const fn get(&self) -> *mut T {
        self.0.get()
    }
}

global! {
    static EMPTY_PAGE: ReadOnlyStatic<Page> = ReadOnlyStatic(UnsafeCell::new(Page::empty()));
}

global! {
    /// The heap every thread starts with: all its pages are the empty page.
    pub(crate) static EMPTY_HEAP: ReadOnlyStatic<Heap> = ReadOnlyStatic(UnsafeCell::new(Heap::empty(EMPTY_PAGE.get())));
}

global! {
    /// The heap of a thread whose heap was abandoned at exit: like the
    /// empty heap, every fast path misses on it; the slow paths serve it
    /// with `alloc_after_exit` instead of giving the thread a heap again.
    pub(crate) static EXITED_HEAP: ReadOnlyStatic<Heap> = ReadOnlyStatic(UnsafeCell::new(Heap::empty(EMPTY_PAGE.get())));
}

/// Whether `heap` is one of the two static heaps, which own nothing and
/// are never written (a thread that has not allocated yet, or has exited).
#[inline]
fn is_static_heap(heap: *mut Heap) -> bool {
    heap == EMPTY_HEAP.get() || heap == EXITED_HEAP.get()
}

impl Heap {
    /// A heap with no pages: every class allocates from `empty_page`.
    #[cfg(not(hakmem_loom))]
    const fn empty(empty_page: *mut Page) -> Self {
        Self::with_notified(empty_page, CachePadded::new(AtomicBool::new(false)))
    }

    /// A heap with no pages (loom's atomics have no const constructor).
    #[cfg(hakmem_loom)]
    fn empty(empty_page: *mut Page) -> Self {
        Self::with_notified(empty_page, CachePadded::new(AtomicBool::new(false)))
    }

    const fn with_notified(empty_page: *mut Page, notified: CachePadded<AtomicBool>) -> Self {
        Heap {
            heartbeat: HEARTBEAT_ALLOCS,
            direct_small: [empty_page; SMALL_DIRECT_LEN],
            direct: [empty_page; CLASS_COUNT],
            queues: [PageQueue {
                first: ptr::null_mut(),
                last: ptr::null_mut(),
            }; CLASS_COUNT],
            segments: ptr::null_mut(),
            purge_at_ms: 0,
            sweep_at_ms: 0,
            slow_ticks: 0,
            counts: stats::HeapCounts::ZERO,
            remote: [RemoteBatch::EMPTY; REMOTE_BATCHES],
            pool_next: ptr::null_mut(),
            notified,
        }
    }
}

/// Fast-path allocations between two forced slow-path calls. Owner frees
/// refill the page they came from (LIFO), so a thread in a steady state may
/// never run dry and reach the slow path by itself; this countdown makes
/// sure its slow-path duties (remote-free notifications, the clock, delayed
/// purges) still run. One decrement per malloc; at 1024 the forced slow
/// path costs well under one instruction per allocation.
const HEARTBEAT_ALLOCS: u32 = 1024;

/// Slow-path calls between two looks at the clock (a vDSO call of ~20 ns;
/// the fast path never looks).
const CLOCK_CHECK_INTERVAL: u32 = 16;
/// Sweep interval when purging is off or immediate.
const SWEEP_INTERVAL_MS: u64 = 250;

/// Allocates a block of `size <= SMALL_SIZE_MAX` bytes from `heap`: one
/// table load less than `alloc` (the direct page is indexed by size).
///
/// # Safety
/// `heap` must be the calling thread's heap.
#[inline(always)]
pub(crate) unsafe fn alloc_small(heap: *mut Heap, size: usize) -> *mut u8 {
    debug_assert!(size <= class::SMALL_SIZE_MAX);
    // SAFETY: heap is this thread's heap; small_index(size) < SMALL_DIRECT_LEN;
    // direct pages are valid (ours or the static empty page); a page with a
    // block is never the empty page, so heap is a real one when written.
    unsafe {
        let page = *(*heap).direct_small.get_unchecked(class::small_index(size));
        let block = (*page).free;
        if !block.is_null() && heartbeat(heap) {
            (*page).free = (*page).next_of(block);
            (*block).freed = 0;
            (*page).on_alloc(block as *const u8);
            (*page).used += 1;
            (*heap).counts.count_alloc(class::class_of(size));
            return block as *mut u8;
        }
        alloc_small_slow(heap, size)
    }
}

#[cold]
#[inline(never)]
unsafe fn alloc_small_slow(heap: *mut Heap, size: usize) -> *mut u8 {
    // SAFETY: forwarded from alloc_small.
    unsafe { alloc_slow(heap, class::class_of(size)) }
}

/// Allocates a block of `class` from `heap`.
///
/// The fast path is a load of the direct page, a load of its free head, a
/// test, and two stores (about 10 instructions with the class lookup).
///
/// # Safety
/// `heap` must be the calling thread's heap.
#[inline(always)]
pub(crate) unsafe fn alloc(heap: *mut Heap, class: usize) -> *mut u8 {
    debug_assert!(class < CLASS_COUNT);
    // SAFETY: heap is this thread's heap; class < CLASS_COUNT (it comes from
    // the class table); direct pages are valid (a page of this heap or the
    // static empty page, whose free list is null: so heap is a real one
    // when `heartbeat` writes it).
    unsafe {
        let page = *(*heap).direct.get_unchecked(class);
        let block = (*page).free;
        if !block.is_null() && heartbeat(heap) {
            (*page).free = (*page).next_of(block);
            (*block).freed = 0;
            (*page).on_alloc(block as *const u8);
            (*page).used += 1;
            (*heap).counts.count_alloc(class);
            return block as *mut u8;
        }
    }
    // SAFETY: as above.
    unsafe { alloc_slow(heap, class) }
}

/// Counts down one fast-path allocation; false when the heartbeat is due
/// (the caller then takes the slow path, which restarts the countdown).
///
/// # Safety
/// `heap` must be the calling thread's heap, not the static empty heap.
#[inline(always)]
unsafe fn heartbeat(heap: *mut Heap) -> bool {
    // SAFETY: the caller guarantees heap is its own, writable heap.
    unsafe {
        (*heap).heartbeat = (*heap).heartbeat.wrapping_sub(1);
        (*heap).heartbeat != 0
    }
}

/// Allocates `size <= MEDIUM_SIZE_MAX` bytes of `class`, zeroed. A block
/// carved from fresh OS memory and never handed out is known to be zero
/// but for its link word (`Page::pop_fresh`), so only that word is cleared.
///
/// # Safety
/// `heap` must be the calling thread's heap; `class` is `size`'s class (or
/// a larger one).
pub(crate) unsafe fn alloc_zeroed(heap: *mut Heap, class: usize, size: usize) -> *mut u8 {
    debug_assert!(class < CLASS_COUNT && size <= class::BLOCK_SIZE[class]);
    // SAFETY: as in `alloc`: the direct page is valid; the heartbeat counts
    // calloc's hits too (a page with a block is never the empty page, so
    // heap is a real one when written).
    unsafe {
        let page = *(*heap).direct.get_unchecked(class);
        if (*page).free.is_null() || !heartbeat(heap) {
            return alloc_zeroed_slow(heap, class, size);
        }
        zeroed_from(heap, page, class, size)
    }
}

#[cold]
#[inline(never)]
unsafe fn alloc_zeroed_slow(heap: *mut Heap, class: usize, size: usize) -> *mut u8 {
    if heap == EXITED_HEAP.get() {
        // SAFETY: inside, thread::heap() is the heap made for this call.
        return alloc_after_exit(|| unsafe { alloc_zeroed(thread::heap(), class, size) }, ptr::null_mut());
    }
    // SAFETY: forwarded from alloc_zeroed; refill returns this thread's
    // heap and a page of it with a free block (checked for null).
    unsafe {
        let (heap, page) = refill(heap, class);
        if page.is_null() {
            return ptr::null_mut();
        }
        zeroed_from(heap, page, class, size)
    }
}

/// Pops a block of `page` (which has one) for `calloc` and clears what may
/// not be zero: only the link word of a block fresh from the OS.
///
/// # Safety
/// `page` must be a page of `heap`, the calling thread's, with a free block.
#[inline(always)]
unsafe fn zeroed_from(heap: *mut Heap, page: *mut Page, class: usize, size: usize) -> *mut u8 {
    // SAFETY: the caller's guarantee.
    unsafe {
        (*heap).counts.count_alloc(class);
        let (p, fresh) = (*page).pop_fresh();
        let dirty = if fresh {
            size.min(core::mem::size_of::<usize>())
        } else {
            size
        };
        ptr::write_bytes(p, 0, dirty);
        p
    }
}

/// An allocation by a thread whose heap was abandoned when it exited (a
/// later pthread-key destructor of another library called malloc): served
/// by a heap made for this one allocation and abandoned right after it, so
/// nothing stays owned by a thread that is gone (glibc runs no destructor
/// round after its last, so a heap registered with our key then would never
/// be given up). `fail` is what to return when no heap can be had.
#[cold]
#[inline(never)]
fn alloc_after_exit<T>(alloc: impl FnOnce() -> T, fail: T) -> T {
    let heap = heap_new();
    if heap.is_null() {
        os::set_errno(libc::ENOMEM);
        return fail;
    }
    thread::set_heap(heap);
    let result = alloc();
    thread::set_heap(EXITED_HEAP.get());
    // SAFETY: the heap was made above for this call alone, and the thread's
    // slot no longer names it.
    unsafe { heap_abandon(heap) };
    result
}

/// The calling thread's per-class counts.
pub(crate) fn own_counts() -> stats::HeapCounts {
    // SAFETY: the TLS heap is this thread's (or the never-written empty heap).
    unsafe { (*thread::heap()).counts }
}

/// Returns the calling thread's heap, creating it on first use (null when
/// no memory can be had; the exited heap after the thread's exit).
#[inline]
pub(crate) fn current_or_init() -> *mut Heap {
    let heap = thread::heap();
    if heap == EMPTY_HEAP.get() {
        thread::init_heap()
    } else {
        heap
    }
}

#[cold]
#[inline(never)]
unsafe fn alloc_slow(heap: *mut Heap, class: usize) -> *mut u8 {
    if heap == EXITED_HEAP.get() {
        // SAFETY: inside, thread::heap() is the heap made for this call.
        return alloc_after_exit(|| unsafe { alloc_slow(thread::heap(), class) }, ptr::null_mut());
    }
    // refill returns this thread's heap and a page of it with a free block.
    // SAFETY: the caller's guarantee; the page is checked for null before use.
    unsafe {
        let (heap, page) = refill(heap, class);
        if page.is_null() {
            return ptr::null_mut();
        }
        (*heap).counts.count_alloc(class);
        (*page).pop()
    }
}

/// The slow path's work: sets the thread up on its first allocation, does
/// the heap's duties (notifications, the clock, purges), restarts the
/// heartbeat, and finds a page of `class` with a free block. Returns the
/// thread's heap and that page; the page is null (and `errno = ENOMEM`)
/// when no memory can be had.
///
/// # Safety
/// `heap` must be the calling thread's heap (possibly the empty heap).
unsafe fn refill(heap: *mut Heap, class: usize) -> (*mut Heap, *mut Page) {
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
        os::set_errno(libc::ENOMEM);
        return (heap, ptr::null_mut());
    }
    // SAFETY: heap is this thread's (freshly created or passed by the caller).
    unsafe {
        (*heap).heartbeat = HEARTBEAT_ALLOCS;
        take_notifications(heap);
        (*heap).slow_ticks = (*heap).slow_ticks.wrapping_add(1);
        if (*heap).slow_ticks % CLOCK_CHECK_INTERVAL == 0 {
            periodic(heap);
        }
        let page = find_page(heap, class);
        if page.is_null() {
            os::set_errno(libc::ENOMEM);
        }
        (heap, page)
    }
}

/// A page of `class` with a free block, moved to the queue front; null when
/// no memory can be had.
unsafe fn find_page(heap: *mut Heap, class: usize) -> *mut Page {
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
            if !(*page).free.is_null() {
                debug_assert!((*page).is_valid());
                queue_move_to_front(heap, page);
                return page;
            }
            queue_remove(heap, page);
            let seg = segment::segment_of((*page).start.add(1));
            settle(heap, seg, page);
            if (*page).in_use && (*page).flags == 0 {
                // Remote frees arrived while parking: settle requeued it.
                if (*page).free.is_null() {
                    (*page).collect_remote();
                }
                if !(*page).free.is_null() {
                    queue_move_to_front(heap, page);
                    return page;
                }
            }
            maybe_free_segment(heap, seg);
            page = next;
        }
        let block_size = class::BLOCK_SIZE[class];
        let page = page_alloc(heap, class as u8, class::span_pages(class), block_size);
        if page.is_null() {
            return page;
        }
        (*page).extend();
        queue_push_front(heap, page);
        page
    }
}

/// Allocates a large block (`MEDIUM_SIZE_MAX < size <= LARGE_SIZE_MAX`, or
/// any size up to that with alignment up to `PAGE_SIZE`): a span of whole
/// pages holding one block. Returns the block and whether it is zeroed.
pub(crate) fn alloc_large(size: usize) -> (*mut u8, bool) {
    let heap = current_or_init();
    if heap.is_null() {
        return (ptr::null_mut(), false);
    }
    if heap == EXITED_HEAP.get() {
        return alloc_after_exit(|| alloc_large(size), (ptr::null_mut(), false));
    }
    let units = (size + crate::page::GUARD_BYTES).div_ceil(PAGE_SIZE).max(1);
    // SAFETY: heap is this thread's heap.
    unsafe {
        let page = page_alloc(heap, LARGE_CLASS, units, units * PAGE_SIZE);
        if page.is_null() {
            return (ptr::null_mut(), false);
        }
        (*page).capacity = 1;
        (*page).set_carved(1);
        (*page).used = 1;
        (*page).flags = PAGE_IN_FULL;
        (*((*page).start as *mut Block)).freed = 0;
        (*heap).counts.count_alloc(stats::LARGE_ROW);
        stats::large_alloc();
        let parked = (*page).try_set_full_notify();
        debug_assert!(parked);
        ((*page).start, (*page).zero_init)
    }
}

/// Takes a span of `units` pages from one of the heap's segments (acquiring
/// a segment if none has room) and initialises it for `block_size`.
unsafe fn page_alloc(heap: *mut Heap, class: u8, units: usize, block_size: usize) -> *mut Page {
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
                let seg = segment_acquire(heap, units);
                if seg.is_null() {
                    return ptr::null_mut();
                }
                match (*seg).take_span(units) {
                    Some(i) => (seg, i),
                    None => return ptr::null_mut(),
                }
            }
        };
        let fresh = (*seg).mark_dirty(first, units);
        let page = &mut (*seg).pages[first] as *mut Page;
        let guard = if first + units == PAGES_PER_SEGMENT {
            crate::page::GUARD_BYTES
        } else {
            0
        };
        let bytes = units * PAGE_SIZE - guard;
        let block_size = if class == LARGE_CLASS { bytes } else { block_size };
        (*page).init(class, block_size, (*seg).page_start(first), units as u32, bytes, fresh);
        for k in 1..units {
            (*seg).pages[first + k].head = page;
        }
        (*seg).used_pages += 1;
        stats::page_in_use(1);
        page
    }
}

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
            let seg = segment::abandoned_pop();
            if seg.is_null() {
                break;
            }
            reclaim(heap, seg);
            if found.is_null() && has_run((*seg).free_units, units) {
                found = seg;
            } else if (*seg).used_pages == 0 {
                unlink_segment(heap, seg);
                segment::segment_free(seg);
            }
        }
        if !found.is_null() {
            return found;
        }
        let seg = segment::segment_alloc();
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

/// Makes `heap` the owner of `seg` and links it into the heap's list.
unsafe fn adopt(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg is exclusively ours (fresh, cached or popped from the abandoned list).
    unsafe {
        // Relaxed: a notifier reads it only after reading a `FULL_NOTIFY`
        // this heap sets later with a Release RMW (`settle`, which every
        // reclaimed page goes through), which orders it; frees test it only
        // against their own heap (see `free_slow`).
        (*seg).heap.store(heap, Ordering::Relaxed);
        (*seg).prev = ptr::null_mut();
        (*seg).next = (*heap).segments;
        if !(*seg).next.is_null() {
            (*(*seg).next).prev = seg;
        }
        (*heap).segments = seg;
    }
}

unsafe fn unlink_segment(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg is in heap's list.
    unsafe {
        if (*seg).prev.is_null() {
            (*heap).segments = (*seg).next;
        } else {
            (*(*seg).prev).next = (*seg).next;
        }
        if !(*seg).next.is_null() {
            (*(*seg).next).prev = (*seg).prev;
        }
        (*seg).next = ptr::null_mut();
        (*seg).prev = ptr::null_mut();
    }
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

/// Puts an in-use page that is in no queue where it belongs: its span
/// returned to the segment when empty, queued when it has blocks to give,
/// else parked as full. Never frees the segment (callers may still be
/// walking it): they call `maybe_free_segment` when done with it.
unsafe fn settle(heap: *mut Heap, seg: *mut Segment, page: *mut Page) {
    // SAFETY: page is an in-use page of seg, owned by heap, in no queue.
    unsafe {
        loop {
            if (*page).used == 0 {
                release_page(heap, seg, page);
                return;
            }
            let large = (*page).class == LARGE_CLASS;
            if !large && (!(*page).free.is_null() || (*page).capacity < (*page).reserved) {
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

/// Acts on remote frees that ended parked-full states in our segments.
#[cold]
unsafe fn process_notified(heap: *mut Heap) {
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

/// Frees `seg` when it has no page in use, unless it is the heap's only
/// segment (kept to avoid churn).
unsafe fn maybe_free_segment(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg is a segment of heap's list and nobody is walking it.
    unsafe {
        if (*seg).used_pages == 0 && !((*heap).segments == seg && (*seg).next.is_null()) {
            unlink_segment(heap, seg);
            segment::segment_free(seg);
        }
    }
}

/// Returns a page's span to its segment and schedules it for purging.
/// Returns the segment's purge deadline (0 = none).
unsafe fn release_span(seg: *mut Segment, page: *mut Page) -> u64 {
    // SAFETY: page is an in-use span head of seg, owned by the caller.
    unsafe {
        // A pusher still telling us about this page would touch the
        // segment after we free it (see `page.rs`, parking).
        (*page).wait_notifier();
        (*page).in_use = false;
        (*page).set_carved(0);
        (*page).flags = 0;
        (*page).free = ptr::null_mut();
        let first = (*seg).page_index(page);
        let units = (*page).units as usize;
        (*seg).return_span(first, units);
        (*seg).used_pages -= 1;
        stats::page_in_use(-1);
        (*seg).schedule_purge(first, units)
    }
}

/// Releases `page`'s span on behalf of `heap` and notes the purge deadline.
unsafe fn release_page(heap: *mut Heap, seg: *mut Segment, page: *mut Page) {
    // SAFETY: forwarded from the caller: page is an in-use page of seg owned by heap.
    unsafe {
        let at = release_span(seg, page);
        if at != 0 && ((*heap).purge_at_ms == 0 || at < (*heap).purge_at_ms) {
            (*heap).purge_at_ms = at;
        }
    }
}

/// Time-driven slow-path work: every sweep interval, take in remote frees
/// of every queued page and give back empty pages (so the memory of classes
/// the thread stopped using is returned); purge what is due, ours and global.
#[cold]
#[inline(never)]
unsafe fn periodic(heap: *mut Heap) {
    let now = os::now_ms();
    // SAFETY: heap is the caller's own heap.
    unsafe {
        flush_remote(heap);
        if now >= (*heap).sweep_at_ms {
            let delay = crate::config::config().purge_delay_ms;
            let interval = if delay > 0 { delay as u64 } else { SWEEP_INTERVAL_MS };
            if (*heap).sweep_at_ms != 0 {
                sweep(heap, true);
            }
            (*heap).sweep_at_ms = now + interval;
        }
        if (*heap).purge_at_ms != 0 && now >= (*heap).purge_at_ms {
            heap_purge(heap, now, false);
        }
    }
    if segment::global_purge_due(now) {
        segment::purge_global(now, false);
    }
}

/// Takes in remote frees of every queued page and gives back the empty
/// ones — all of them with `release_all`, else all but a class's only page.
unsafe fn sweep(heap: *mut Heap, release_all: bool) {
    // SAFETY: heap is the caller's own heap; queued pages belong to it.
    unsafe {
        for class in 0..CLASS_COUNT {
            let mut page = (*heap).queues[class].first;
            while !page.is_null() {
                let next = (*page).next;
                (*page).collect_remote();
                let only = (*heap).queues[class].first == page && next.is_null();
                if (*page).used == 0 && (release_all || !only) {
                    let seg = segment::segment_of((*page).start.add(1));
                    queue_remove(heap, page);
                    release_page(heap, seg, page);
                    maybe_free_segment(heap, seg);
                }
                page = next;
            }
        }
    }
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
    segment::purge_global(now, force);
}

/// The owner freed the last used block of a queued page.
#[cold]
#[inline(never)]
pub(crate) unsafe fn page_retire(heap: *mut Heap, seg: *mut Segment, page: *mut Page) {
    // SAFETY: page is a queued page of heap (flags == 0) with used == 0.
    unsafe {
        let q = &(*heap).queues[(*page).class as usize];
        if q.first == page && (*page).next.is_null() {
            return; // the class's only page: keep it to avoid churn
        }
        queue_remove(heap, page);
        release_page(heap, seg, page);
        maybe_free_segment(heap, seg);
    }
}

/// Free of a block that is huge, in a parked/large page, or owned by
/// another thread (or by no thread).
///
/// # Safety
/// `p` must be a live block of hakmem and `seg == segment_of(p)`.
#[cold]
#[inline(never)]
pub(crate) unsafe fn free_slow(seg: *mut Segment, p: *mut u8) {
    // SAFETY: the caller guarantees p is a live hakmem block in seg.
    unsafe {
        let block = p as *mut Block;
        let page = (*seg).page_of(p);
        let mark = crate::page::freed_mark(page);
        if (*block).freed == mark {
            crate::os::report_pointer("free", "double free of", p);
            return;
        }
        (*block).freed = mark;
        if (*seg).kind == segment::SegmentKind::Huge {
            segment::huge_free(seg, p);
            return;
        }
        let heap = thread::heap();
        // Relaxed: only the owner writes its own heap here, so reading our
        // heap means we wrote it (program order). A heap struct reused from
        // the pool was abandoned first, which stored null in every segment
        // it owned before the pool's lock handed the struct over (lock
        // release → acquire), so a new thread never reads a predecessor's
        // value as its own.
        if (*seg).heap.load(Ordering::Relaxed) == heap {
            if (*page).on_free_was_free(p) {
                crate::os::report_pointer("free", "double free of", p);
                return;
            }
            (*page).push(block);
            if (*page).flags & PAGE_IN_FULL != 0 {
                settle(heap, seg, page);
                maybe_free_segment(heap, seg);
            } else if (*page).used == 0 {
                page_retire(heap, seg, page);
            }
        } else if (*page).on_free_was_free(p) {
            crate::os::report_pointer("free", "double free of", p);
        } else {
            remote_free(heap, page, block);
        }
    }
}

// ---------------------------------------------------------------------------
// Remote frees, batched per page (freeing thread only).
//
// A block freed into another thread's page is not pushed on that page's
// atomic stack at once: it is prepended to a chain this heap keeps for the
// page, and the chain is pushed whole with one CAS (`flush_batch`) when it
// holds `REMOTE_BATCH_BYTES`, when a block of another page needs its slot,
// and on the heap's periodic slow path, `collect` and thread exit. Every
// remote push steals the cache line the owner's malloc writes; batching
// makes that one steal per chain instead of one per block (jemalloc's and
// tcmalloc's thread caches and snmalloc's remote queues batch for the same
// reason). A batched block is still counted in its page's `used`, so the
// page stays in use, of its class, until the chain arrives; it already
// carries its freed mark, so a double free is still caught. What a thread
// can hold back is bounded: `REMOTE_BATCHES * REMOTE_BATCH_BYTES` (64 KiB),
// also while it sleeps.

/// Chains a heap keeps open at a time (one per page, by a hash of the page).
const REMOTE_BATCHES: usize = 16;
/// Bytes of blocks after which a chain is pushed. A block this size or
/// larger is pushed alone, at once.
const REMOTE_BATCH_BYTES: usize = 4096;

/// One open chain of blocks freed into `page`: `head ..= tail`, linked
/// with the page's encoding; `tail`'s link is written by the push.
#[derive(Clone, Copy)]
struct RemoteBatch {
    /// The page the chain's blocks belong to; null when the slot is free.
    page: *mut Page,
    head: *mut Block,
    tail: *mut Block,
    /// Blocks in the chain (their bytes: `count` times the page's block size).
    count: u32,
}

impl RemoteBatch {
    const EMPTY: Self = Self {
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
/// is written): into the page's open chain, pushed when it is full.
///
/// # Safety
/// `heap` must be the calling thread's heap (possibly the empty heap);
/// `block` a live block of `page` that the caller is freeing.
unsafe fn remote_free(heap: *mut Heap, page: *mut Page, block: *mut Block) {
    // SAFETY: the caller's guarantees; the batch slots are this thread's.
    unsafe {
        let size = (*page).block_size;
        if is_static_heap(heap) || size >= REMOTE_BATCH_BYTES {
            // No heap of its own to gather in (a thread that never
            // allocated, or one that has exited), or a block worth a push.
            push_chain(page, block, block, 1);
            return;
        }
        let batch = &mut (*heap).remote[batch_slot(page)];
        if batch.page == page {
            (*block).next = (*page).encode(batch.head);
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
        // SAFETY: the chain's blocks are blocks of batch.page this thread
        // freed; the page stays in use while they are counted in `used`.
        unsafe { push_chain(batch.page, batch.head, batch.tail, batch.count) };
        *batch = RemoteBatch::EMPTY;
    }
}

/// Pushes every open chain of `heap` to its page.
///
/// # Safety
/// `heap` must be the calling thread's heap (or an exiting thread's).
unsafe fn flush_remote(heap: *mut Heap) {
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

// ---------------------------------------------------------------------------
// Page queues (owner only).

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

unsafe fn queue_push_front(heap: *mut Heap, page: *mut Page) {
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

unsafe fn queue_remove(heap: *mut Heap, page: *mut Page) {
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

unsafe fn queue_move_to_front(heap: *mut Heap, page: *mut Page) {
    // SAFETY: page is in heap's queue for its class.
    unsafe {
        if (*heap).queues[(*page).class as usize].first != page {
            queue_remove(heap, page);
            queue_push_front(heap, page);
        }
    }
}

// ---------------------------------------------------------------------------
// Heap life cycle: a pool of heap structs (never unmapped), creation, abandon.

struct HeapPool {
    lock: SpinLock,
    free: UnsafeCell<*mut Heap>,
}

// SAFETY: `free` is only accessed with `lock` held.
unsafe impl Sync for HeapPool {}

global! {
    static HEAP_POOL: HeapPool = HeapPool {
        lock: SpinLock::new(),
        free: UnsafeCell::new(ptr::null_mut()),
    };
}

/// Heap structs mapped at a time when the pool runs dry.
const HEAP_CHUNK: usize = 64 * 1024;

pub(crate) fn pool_lock() {
    HEAP_POOL.lock.lock();
}

pub(crate) fn pool_unlock() {
    HEAP_POOL.lock.unlock();
}

/// A fresh heap for the calling thread (null when out of memory).
pub(crate) fn heap_new() -> *mut Heap {
    pool_lock();
    // SAFETY: the pool lock is held.
    let mut heap = unsafe { *HEAP_POOL.free.get() };
    if !heap.is_null() {
        // SAFETY: the lock is held; heap is on the pool list.
        unsafe { *HEAP_POOL.free.get() = (*heap).pool_next };
    }
    pool_unlock();
    if heap.is_null() {
        let chunk = os::map(HEAP_CHUNK) as *mut Heap;
        if chunk.is_null() {
            return chunk;
        }
        let n = HEAP_CHUNK / core::mem::size_of::<Heap>();
        // SAFETY: the chunk is fresh, exclusively ours, and holds n heaps:
        // each is written whole once, here, before any thread can know it.
        unsafe {
            for i in 0..n {
                ptr::write(chunk.add(i), Heap::empty(EMPTY_PAGE.get()));
            }
        }
        heap = chunk;
        pool_lock();
        // SAFETY: the heaps are initialised; the lock is held.
        unsafe {
            for i in 1..n {
                let h = chunk.add(i);
                (*h).pool_next = *HEAP_POOL.free.get();
                *HEAP_POOL.free.get() = h;
            }
        }
        pool_unlock();
    } else {
        // SAFETY: heap came off the pool: exclusively ours.
        unsafe { (*heap).reset() };
    }
    stats::heap_in_use(1);
    heap
}

impl Heap {
    /// Makes a heap from the pool empty again. Field by field, not by
    /// writing a whole new `Heap`: a remote free may still hold this
    /// struct's address from its previous thread and store to `notified`
    /// at any time (a stale, harmless notification), and a plain write of
    /// that atomic would race with it.
    ///
    /// # Safety
    /// The heap must be exclusively the caller's (just taken off the pool).
    unsafe fn reset(&mut self) {
        let empty_page = EMPTY_PAGE.get();
        self.heartbeat = HEARTBEAT_ALLOCS;
        self.direct_small = [empty_page; SMALL_DIRECT_LEN];
        self.direct = [empty_page; CLASS_COUNT];
        self.queues = [PageQueue {
            first: ptr::null_mut(),
            last: ptr::null_mut(),
        }; CLASS_COUNT];
        self.segments = ptr::null_mut();
        self.purge_at_ms = 0;
        self.sweep_at_ms = 0;
        self.slow_ticks = 0;
        self.counts = stats::HeapCounts::ZERO;
        self.remote = [RemoteBatch::EMPTY; REMOTE_BATCHES];
        self.pool_next = ptr::null_mut();
        // Relaxed: a stale notification that lands after this only costs
        // a scan.
        self.notified.store(false, Ordering::Relaxed);
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
                segment::segment_free(seg);
            } else {
                // Relaxed: a notifier may still read this heap (a stale,
                // harmless notification); the segment's pages are taken in
                // by whoever reclaims it (`reclaim`'s full pass).
                (*seg).heap.store(ptr::null_mut(), Ordering::Relaxed);
                segment::abandoned_push(seg);
            }
            seg = next;
        }
        pool_lock();
        (*heap).pool_next = *HEAP_POOL.free.get();
        *HEAP_POOL.free.get() = heap;
        pool_unlock();
    }
}

/// `fork` child: a thread that was telling an owner about a page (between
/// its push and `end_notify`) does not exist in the child, so its page
/// would stay `NOTIFYING` and every release of it would wait forever. The
/// child is alone: clear the bit on the pages it can reach — its own
/// heap's and the abandoned segments' — and redo the notification the
/// lost thread may not have finished (the page's bit and the heap's flag;
/// a reclaimer takes every page of an abandoned segment in anyway).
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
    if !is_static_heap(heap) {
        // SAFETY: the heap is this (the only) thread's.
        let mut seg = unsafe { (*heap).segments };
        while !seg.is_null() {
            repair(seg, heap);
            // SAFETY: as above.
            seg = unsafe { (*seg).next };
        }
    }
    segment::abandoned_for_each(|seg| repair(seg, ptr::null_mut()));
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    #[test]
    fn empty_heap_points_every_class_at_the_empty_page() {
        let heap = EMPTY_HEAP.get();
        for c in 0..CLASS_COUNT {
            // SAFETY: EMPTY_HEAP and EMPTY_PAGE are valid statics.
            unsafe {
                assert_eq!((*heap).direct[c], EMPTY_PAGE.get());
                assert!((*(*heap).direct[c]).free.is_null());
            }
        }
    }

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

    #[test]
    fn has_run_finds_contiguous_free_pages() {
        assert!(has_run(0b1110, 3));
        assert!(!has_run(0b1010, 2));
        assert!(!has_run(0, 1));
    }
}
