//! The thread heap: the `Heap` struct — for each size class the page to
//! allocate from and the class's page queue, the segments the thread owns,
//! its open remote-free batches — the two static heaps every fast path
//! misses on (*empty*, before a thread's first allocation, and *exited*,
//! after its exit), and the heap's life cycle: a pool of heap structs that
//! is never unmapped, creation and reset, the list of owned segments.
//!
//! The heap's jobs live in modules of their own: allocation in `alloc`
//! (the fast paths and their slow-path entries) and `refill` (finding or
//! carving a page with a free block), the class queues and where a page
//! sits in `page_queue`, every free in `free`, frees into other threads'
//! pages and the owner's notifications in `remote`, thread exit and reclaim
//! in `abandon`, time-driven work and `collect` in `purge`.
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
//! (page.rs describes a page's states and who moves it between them.)
//!
//! A heap whose thread exits is retired (`abandon::heap_retire`): tidied,
//! and kept whole for the next new thread to take over, or abandoned — its
//! empty pages and segments freed, the rest published for reclaim
//! (`abandon::heap_abandon`) — and the heap struct put back in the pool. A
//! heap struct is never unmapped, because a remote free may still hold its
//! address to notify it (a stale notification only costs a scan).
//!
//! A *local heap* (local.rs) is a `Heap` too, from the same pool, made by a
//! thread beside its thread heap and used by that thread only: the same
//! fast paths run on it with its address instead of the thread's. It names
//! its thread heap in `parent`, and the thread heap lists it in `locals`.

use crate::os;
use crate::segment::Segment;
use crate::small::alloc::HEARTBEAT_BYTES;
use crate::small::class::{CLASS_COUNT, SMALL_DIRECT_LEN};
use crate::small::page::Page;
use crate::small::page_queue::PageQueue;
use crate::stats;
use crate::sync::{global, AtomicBool, Ordering, SpinLock};
use crate::thread;
use crate::thread::remote::{RemoteBatch, REMOTE_BATCHES};
use core::cell::UnsafeCell;
use core::ptr;
use crossbeam_utils::CachePadded;

/// Aligned so that two threads' heaps never share a cache line (they sit
/// side by side in the heap pool).
#[repr(C, align(128))]
pub(crate) struct Heap {
    /// Bytes the fast paths may still hand out before the next forced slow
    /// path (the heartbeat; see `HEARTBEAT_BYTES`): read as an `i32`, due
    /// below zero.
    pub(crate) heartbeat: u32,
    /// The page each size up to 1 KiB allocates from, by `small_index(size)`
    /// (mimalloc's `pages_free_direct`): the small fast path needs no class.
    pub(crate) direct_small: [*mut Page; SMALL_DIRECT_LEN],
    /// The page each class allocates from (fast path).
    pub(crate) direct: [*mut Page; CLASS_COUNT],
    pub(crate) queues: [PageQueue; CLASS_COUNT],
    /// Owned normal segments (doubly linked through `Segment::next/prev`).
    pub(crate) segments: *mut Segment,
    /// Earliest purge deadline among our segments (ms; 0 = none).
    pub(crate) purge_at_ms: u64,
    /// When to next sweep every queued page for remote frees and emptiness.
    pub(crate) sweep_at_ms: u64,
    /// Slow-path calls, to look at the clock only every `CLOCK_CHECK_INTERVAL`.
    pub(crate) slow_ticks: u32,
    /// Pages given back by frees (`release_duty`), to look at the clock
    /// only every `RELEASES_PER_CLOCK_CHECK`. Apart from `slow_ticks`, so
    /// that neither count skips the other's multiples.
    pub(crate) release_ticks: u32,
    /// A thread heap: the in-use pages the local heaps it deleted handed
    /// it since its last sweep, and the pages that sweep left queued
    /// (`purge::sweep_for_locals`).
    pub(crate) absorbed_pages: u32,
    pub(crate) queued_after_sweep: u32,
    /// Per-class counts (empty without the `stats` feature).
    pub(crate) counts: stats::HeapCounts,
    /// Blocks this thread freed into other threads' pages, gathered per
    /// page and pushed there one chain at a time (see `remote_free`).
    pub(crate) remote: [RemoteBatch; REMOTE_BATCHES],
    /// Next heap in the pool's free list, or in the list of retired heaps.
    pub(crate) pool_next: *mut Heap,
    /// When the heap was retired (its thread exited; ms), while it waits on
    /// the retired list (`abandon::heap_retire`).
    pub(crate) retired_at_ms: u64,
    /// The thread's exit hook has put its work off by one destructor round
    /// (`thread::thread_exit`); the next call does it.
    pub(crate) exit_deferred: bool,
    /// A local heap: the thread heap of the thread that made it (the only
    /// thread that may use it), or `EXITED_HEAP` once that thread has
    /// exited and given the local heap's memory up (an *orphaned* local
    /// heap, local.rs). Null for a thread heap.
    pub(crate) parent: *mut Heap,
    /// A thread heap: its live local heaps, linked through `local_next` and
    /// `local_prev` (the thread gives them up at its exit).
    pub(crate) locals: *mut Heap,
    pub(crate) local_next: *mut Heap,
    pub(crate) local_prev: *mut Heap,
    /// A local heap: the huge segments of its live huge blocks, linked
    /// through `Segment::next/prev`; under huge/local.rs's lock, as any thread
    /// may free one of them.
    pub(crate) huge: *mut Segment,
    /// A thread heap in use by a live thread: its place on the list of
    /// such heaps (`thread::live`, under that list's lock), which finds
    /// the heaps of threads that are gone without having run their exit
    /// hook.
    pub(crate) live: LiveEntry,
    /// Set by a remote free that ended a parked-full state in one of our
    /// segments. The one field other threads write: on a line of its own,
    /// so those writes never evict the direct tables.
    pub(crate) notified: CachePadded<AtomicBool>,
    /// The heap profiler's state (profile/): the countdown to the next
    /// sample. Untouched while profiling is off.
    pub(crate) sampler: crate::profile::Sampler,
}

/// A heap's entry on the list of live thread heaps (thread/live.rs): the
/// thread's kernel ids, when the heap was given to it, whether it has been
/// seen alive since, and the links. All zero off the list.
#[derive(Clone, Copy)]
pub(crate) struct LiveEntry {
    /// The thread's kernel ids (process, thread); (0, 0) off the list.
    pub(crate) ids: (i32, i32),
    /// Bumped at every listing, so that a look that found the thread gone
    /// never acts on a later listing of the same heap.
    pub(crate) generation: u32,
    /// The thread was found alive once at least `live::LIVE_CHECK_MS`
    /// after the listing: it is not one that died at birth (see abandon.rs).
    pub(crate) checked: bool,
    /// The thread's exit hook has put its work off (`thread::thread_exit`):
    /// the thread is in its exit, and a look that finds it alive looks
    /// again later rather than ending the looks.
    pub(crate) exiting: bool,
    /// When the heap was listed, or its exit hook put off (ms).
    pub(crate) listed_ms: u64,
    pub(crate) next: *mut Heap,
    pub(crate) prev: *mut Heap,
}

impl LiveEntry {
    pub(crate) const NONE: Self = Self {
        ids: (0, 0),
        generation: 0,
        checked: false,
        exiting: false,
        listed_ms: 0,
        next: ptr::null_mut(),
        prev: ptr::null_mut(),
    };
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
    pub(crate) static EMPTY_PAGE: ReadOnlyStatic<Page> = ReadOnlyStatic(UnsafeCell::new(Page::empty()));
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
pub(crate) fn is_static_heap(heap: *mut Heap) -> bool {
    heap == EMPTY_HEAP.get() || heap == EXITED_HEAP.get()
}

impl Heap {
    /// Whether this is a local heap (local.rs), live or orphaned.
    #[inline]
    pub(crate) fn is_local(&self) -> bool {
        !self.parent.is_null()
    }

    /// Whether this heap owns more than `n` normal segments (walks at most
    /// `n + 1` of them).
    pub(crate) fn owns_more_segments_than(&self, n: usize) -> bool {
        let mut seg = self.segments;
        let mut count = 0;
        while !seg.is_null() {
            count += 1;
            if count > n {
                return true;
            }
            // The list holds the heap's live segments; only its owner, the
            // caller, changes it.
            // SAFETY: seg is a live segment of this heap's list.
            seg = unsafe { (*seg).next };
        }
        false
    }

    /// Whether this is an orphaned local heap: its thread has exited and
    /// given its memory up (local.rs); it allocates nothing.
    #[inline]
    pub(crate) fn is_orphaned(&self) -> bool {
        self.parent == EXITED_HEAP.get()
    }

    /// The thread heap of a live local heap (the calling thread's, since
    /// only that thread uses the local heap); `None` for a thread heap or
    /// an orphaned local heap.
    #[inline]
    pub(crate) fn live_parent(&self) -> Option<*mut Heap> {
        (!self.parent.is_null() && !self.is_orphaned()).then_some(self.parent)
    }

    /// Whether nothing is attached to the heap: no segment, no huge block,
    /// no local heap. Only such a heap may go back to the pool.
    fn owns_nothing(&self) -> bool {
        self.segments.is_null() && self.huge.is_null() && self.locals.is_null()
    }
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
            heartbeat: HEARTBEAT_BYTES,
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
            release_ticks: 0,
            absorbed_pages: 0,
            queued_after_sweep: 0,
            counts: stats::HeapCounts::ZERO,
            remote: [RemoteBatch::EMPTY; REMOTE_BATCHES],
            pool_next: ptr::null_mut(),
            retired_at_ms: 0,
            exit_deferred: false,
            parent: ptr::null_mut(),
            locals: ptr::null_mut(),
            local_next: ptr::null_mut(),
            local_prev: ptr::null_mut(),
            huge: ptr::null_mut(),
            live: LiveEntry::NONE,
            notified,
            sampler: crate::profile::Sampler::NEW,
        }
    }
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

// ---------------------------------------------------------------------------
// The owned segments (doubly linked through `Segment::next/prev`).

/// Makes `heap` the owner of `seg` and links it into the heap's list.
pub(crate) unsafe fn adopt(heap: *mut Heap, seg: *mut Segment) {
    // SAFETY: seg is exclusively ours (fresh, cached or popped from the abandoned list).
    unsafe {
        // Relaxed: a notifier reads it only after reading a `FULL_NOTIFY`
        // this heap sets later with a Release RMW (`settle`, which every
        // reclaimed page goes through), which orders it; frees test it only
        // against their own heap (see `free_slow`).
        (*seg).heap.store(heap, Ordering::Relaxed);
        // Relaxed: the thread it names reads back its own store (`free_slow`
        // tests it against its own heap, as `heap` above); any other thread
        // freeing a block of this segment got the block after this store
        // (through whatever handed it over), so it sees this value or the
        // null that comes when the local heap lets the segment go — after
        // that free, if the heap was destroyed (local.rs).
        (*seg).local_parent.store((*heap).parent, Ordering::Relaxed);
        (*seg).prev = ptr::null_mut();
        (*seg).next = (*heap).segments;
        if !(*seg).next.is_null() {
            (*(*seg).next).prev = seg;
        }
        (*heap).segments = seg;
    }
}

pub(crate) unsafe fn unlink_segment(heap: *mut Heap, seg: *mut Segment) {
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

// ---------------------------------------------------------------------------
// Heap life cycle: a pool of heap structs (never unmapped), creation, reset.

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

/// Returns a heap no thread uses any more to the pool (`heap_abandon`).
///
/// # Safety
/// `heap` must be a heap from `heap_new` that no thread uses and nothing
/// else refers to (but stale notifications: see `Heap::reset`).
pub(crate) unsafe fn pool_put(heap: *mut Heap) {
    // SAFETY: the caller hands the heap over: it is ours to read.
    if !unsafe { (*heap).owns_nothing() } {
        // A heap reused from the pool starts empty (`reset`): whatever is
        // still attached here would be forgotten, or worse, named by a
        // stale link that a later free follows into the new heap's lists.
        // Kept out of the pool instead (a few KiB leaked, never reused).
        debug_assert!(false, "a heap went back to the pool with memory attached");
        return;
    }
    pool_lock();
    // SAFETY: the pool lock is held; the caller hands the heap over.
    unsafe {
        (*heap).pool_next = *HEAP_POOL.free.get();
        *HEAP_POOL.free.get() = heap;
    }
    pool_unlock();
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
    pub(crate) unsafe fn reset(&mut self) {
        let empty_page = EMPTY_PAGE.get();
        self.heartbeat = HEARTBEAT_BYTES;
        self.sampler = crate::profile::Sampler::NEW;
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
        self.release_ticks = 0;
        self.absorbed_pages = 0;
        self.queued_after_sweep = 0;
        self.counts = stats::HeapCounts::ZERO;
        self.remote = [RemoteBatch::EMPTY; REMOTE_BATCHES];
        self.pool_next = ptr::null_mut();
        self.retired_at_ms = 0;
        self.exit_deferred = false;
        self.parent = ptr::null_mut();
        self.locals = ptr::null_mut();
        self.local_next = ptr::null_mut();
        self.local_prev = ptr::null_mut();
        self.huge = ptr::null_mut();
        // The generation goes on counting: it tells listings apart.
        self.live = LiveEntry {
            generation: self.live.generation,
            ..LiveEntry::NONE
        };
        // Relaxed: a stale notification that lands after this only costs
        // a scan.
        self.notified.store(false, Ordering::Relaxed);
    }
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
}
