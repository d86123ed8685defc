//! Segments: 2 MiB, 2 MiB-aligned regions of 32 pages of 64 KiB, with the
//! page metadata in a header in the first page.
//!
//! `ptr -> segment` is a mask and `ptr -> page` a shift (`segment_of`,
//! `Segment::page_of`): free needs no lookup table, hash or system call. The
//! mask is applied to `ptr - 1`, so a huge block that starts exactly on a
//! 2 MiB boundary (alignments of 2 MiB and more) still finds the header just
//! below it; every other block starts at least one page past its header.
//!
//! The first page holds only the header; blocks live in pages 1..32, so every
//! page start is 64 KiB-aligned (aligned allocation relies on this). The
//! header's untouched tail is never faulted in.
//!
//! A *normal* segment belongs to one thread heap (`heap`), which carves
//! spans of pages from it without locks; a free is local exactly when the
//! segment's `heap` is the calling thread's heap. A *huge* segment is one
//! dedicated mapping holding a single block; its `heap` is null, so every
//! free of it takes the slow path, from any thread.
//!
//! Free memory goes back to the OS after `HAKMEM_PURGE_DELAY` ms: freed spans
//! of an owned segment are marked in `purge_units` and purged by the owner's
//! slow path once due (`purge_pending`); cached segments and cached huge
//! mappings are purged by whichever thread's slow path finds the global
//! deadline passed (`purge_global`).
//!
//! Also here: the segment map (one byte per 2 MiB of address space: "is this a
//! hakmem segment header?", answered in O(1) without a system call), the
//! global cache of empty segments, and the list of abandoned segments.
//!
//! Invariants: `free_units` never has bit 0; `used_pages` is the number of
//! span heads with `in_use`; a normal segment is in exactly one of: its
//! owner heap's list, the abandoned list, the cache.

use crate::config::config;
use crate::heap::Heap;
use crate::list::{Linked, LockedList};
use crate::os;
use crate::page::{Page, GUARD_BYTES};
use crate::stats;
use crate::sync::{global, plain::AtomicU64, AtomicPtr, AtomicU32, MapEntry, Ordering, SpinLock};
use core::cell::UnsafeCell;
use core::ptr;

/// log2 of the segment size.
pub const SEGMENT_SHIFT: usize = 21;
/// 2 MiB: large enough to amortise a mapping over many pages, small enough to
/// keep a thread's first segment cheap.
pub const SEGMENT_SIZE: usize = 1 << SEGMENT_SHIFT;
const SEGMENT_MASK: usize = SEGMENT_SIZE - 1;
/// log2 of the page size.
pub const PAGE_SHIFT: usize = 16;
/// 64 KiB pages: the research line's winning shape.
pub const PAGE_SIZE: usize = 1 << PAGE_SHIFT;
/// Pages per segment; page 0 holds the header.
pub const PAGES_PER_SEGMENT: usize = SEGMENT_SIZE / PAGE_SIZE;
/// Bitmap of the pages a fresh segment can hand out (all but the header's).
const ALL_BLOCK_PAGES: u32 = !1;
/// Largest block placed inside a segment (31 pages, less the guard page of
/// `secure` builds); larger ones are huge.
pub const LARGE_SIZE_MAX: usize = (PAGES_PER_SEGMENT - 1) * PAGE_SIZE - GUARD_BYTES;
/// The test builds that hunt races (`hakmem_race_windows`, loom) keep no
/// segment and no huge mapping for reuse: every one freed is unmapped, so a
/// thread that touches one too late faults (or loom reports it) instead of
/// reading a cached header.
const NO_CACHES: bool = cfg!(any(hakmem_race_windows, hakmem_loom));
/// Empty segments kept for reuse before the rest go back to the OS.
const SEGMENT_CACHE_MAX: usize = if NO_CACHES { 0 } else { 32 };

/// Whether a segment is a heap's (normal) or a single huge block's.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum SegmentKind {
    Normal,
    Huge,
}

#[repr(C)]
pub(crate) struct Segment {
    /// Owner heap (null when not owned); read by remote frees to notify.
    pub(crate) heap: AtomicPtr<Heap>,
    /// Pages (by head index) whose parked-full state a remote free ended.
    pub(crate) notify_bits: AtomicU32,
    pub(crate) kind: SegmentKind,
    /// Free pages (bit i = page i free). Owner only.
    pub(crate) free_units: u32,
    /// Pages ever handed out since the OS gave them zeroed. Owner only.
    pub(crate) dirty_units: u32,
    /// Span heads in use. Owner only.
    pub(crate) used_pages: u32,
    /// Free, dirty pages waiting to be purged. Owner only.
    pub(crate) purge_units: u32,
    /// Pages purged and not handed out since (not committed). For a huge
    /// segment: 1 when its block area is purged.
    pub(crate) purged_units: u32,
    /// When `purge_units` is due (ms, monotonic; 0 = nothing scheduled).
    /// For cached segments and huge mappings: when the whole is due.
    pub(crate) purge_at_ms: u64,
    /// Bytes mapped from the segment start (huge segments; `SEGMENT_SIZE` otherwise).
    pub(crate) mapping_size: usize,
    /// Huge segments: the block's offset from the header (`huge_offset` of
    /// its alignment), the one pointer `free` may be given for it.
    pub(crate) huge_block_offset: usize,
    /// Links in the owner heap's list, the cache or the abandoned list.
    pub(crate) next: *mut Segment,
    pub(crate) prev: *mut Segment,
    /// Page metadata by page index (entry 0, the header page's, is never
    /// in use).
    pub(crate) pages: [Page; PAGES_PER_SEGMENT],
    /// Loom only: whether the mapping exists. `segment_unmap` writes it and
    /// every access a remote thread makes reads it (`touch`), so loom
    /// reports any access that is not ordered before the unmap.
    #[cfg(hakmem_loom)]
    mapped: loom::cell::UnsafeCell<bool>,
}

const _: () = assert!(core::mem::size_of::<Segment>() <= PAGE_SIZE);

/// The segment holding block `p` (a hakmem pointer).
#[inline(always)]
pub(crate) fn segment_of(p: *const u8) -> *mut Segment {
    ((p as usize).wrapping_sub(1) & !SEGMENT_MASK) as *mut Segment
}

impl Segment {
    /// Makes the fresh, zeroed memory at `segment` a segment header. Zeroed
    /// memory already is one (atomics 0, pointers null, kind `Normal`), so
    /// normally nothing is written; loom's atomics must be constructed.
    ///
    /// # Safety
    /// `segment` must be fresh, zeroed, writable memory of a header's size.
    #[inline(always)]
    unsafe fn construct(segment: *mut Segment) {
        #[cfg(hakmem_loom)]
        // SAFETY: the caller guarantees the memory is ours to initialise.
        unsafe {
            ptr::write(
                segment,
                Segment {
                    heap: AtomicPtr::new(ptr::null_mut()),
                    notify_bits: AtomicU32::new(0),
                    kind: SegmentKind::Normal,
                    free_units: 0,
                    dirty_units: 0,
                    used_pages: 0,
                    purge_units: 0,
                    purged_units: 0,
                    purge_at_ms: 0,
                    mapping_size: 0,
                    huge_block_offset: 0,
                    next: ptr::null_mut(),
                    prev: ptr::null_mut(),
                    pages: core::array::from_fn(|_| Page::empty()),
                    mapped: loom::cell::UnsafeCell::new(true),
                },
            )
        };
        let _ = segment;
    }

    /// Asserts, under loom, that the header is still mapped: a read loom
    /// checks against the write of `segment_unmap`. Nothing otherwise.
    #[inline(always)]
    pub(crate) fn touch(&self) {
        #[cfg(hakmem_loom)]
        // SAFETY: a read of the flag through loom's cell.
        self.mapped
            .with(|mapped| assert!(unsafe { *mapped }, "segment header used after its unmap"));
    }

    /// Loom only: whether `segment_unmap` has not run on this header.
    #[cfg(hakmem_loom)]
    pub(crate) fn is_mapped(&self) -> bool {
        // SAFETY: a read of the flag through loom's cell.
        self.mapped.with(|mapped| unsafe { *mapped })
    }

    /// The page (span head) holding block `p` of this segment. For a huge
    /// segment the result is a page with nothing carved.
    ///
    /// The index is taken from `p`'s own bits (the segment is 2 MiB
    /// aligned), which saves subtracting the segment address; a huge block
    /// exactly 2 MiB past its header maps to index 0, the header page's
    /// entry, which is never in use.
    ///
    /// # Safety
    /// `p` must point into the segment's first 2 MiB past its header page,
    /// or be its huge block.
    #[inline(always)]
    pub(crate) unsafe fn page_of(&self, p: *const u8) -> *mut Page {
        let index = (p as usize >> PAGE_SHIFT) % PAGES_PER_SEGMENT;
        // SAFETY: index < PAGES_PER_SEGMENT, the length of `pages`.
        unsafe { (*self.pages.as_ptr().add(index)).head }
    }

    /// Index of a page (span head) in `pages`.
    pub(crate) fn page_index(&self, page: *const Page) -> usize {
        (page as usize - self.pages.as_ptr() as usize) / core::mem::size_of::<Page>()
    }

    /// Start address of page `index`.
    pub(crate) fn page_start(&self, index: usize) -> *mut u8 {
        (self as *const Self as usize + index * PAGE_SIZE) as *mut u8
    }

    /// Takes `units` contiguous free pages, returning the index of the first.
    pub(crate) fn take_span(&mut self, units: usize) -> Option<usize> {
        let mut runs = self.free_units;
        for _ in 1..units {
            runs &= runs >> 1;
        }
        if runs == 0 {
            return None;
        }
        let first = runs.trailing_zeros() as usize;
        let mask = span_mask(first, units);
        self.free_units &= !mask;
        self.purge_units &= !mask;
        Some(first)
    }

    /// Whether the pages of a span were all fresh (zeroed) memory; marks them used.
    pub(crate) fn mark_dirty(&mut self, first: usize, units: usize) -> bool {
        let mask = span_mask(first, units);
        let fresh = self.dirty_units & mask == 0;
        self.dirty_units |= mask;
        let recommitted = self.purged_units & mask;
        if recommitted != 0 {
            self.purged_units &= !mask;
            stats::committed((recommitted.count_ones() as usize * PAGE_SIZE) as isize);
        }
        fresh
    }

    /// Returns a span's pages to the segment.
    pub(crate) fn return_span(&mut self, first: usize, units: usize) {
        let mask = span_mask(first, units);
        debug_assert!(self.free_units & mask == 0);
        self.free_units |= mask;
    }

    /// Schedules the dirty pages of a freed span for purging; returns the
    /// segment's purge deadline (0 when nothing is scheduled). Owner only.
    pub(crate) fn schedule_purge(&mut self, first: usize, units: usize) -> u64 {
        let delay = config().purge_delay_ms;
        let mask = span_mask(first, units) & self.dirty_units;
        if delay < 0 || mask == 0 {
            return self.purge_at_ms;
        }
        self.purge_units |= mask;
        if delay == 0 {
            self.purge_pending();
        } else if self.purge_at_ms == 0 {
            self.purge_at_ms = os::now_ms() + delay as u64;
        }
        self.purge_at_ms
    }

    /// Gives the pending pages back to the OS now. Owner (or exclusive holder) only.
    pub(crate) fn purge_pending(&mut self) {
        let mut bits = self.purge_units & self.free_units;
        while bits != 0 {
            let start = bits.trailing_zeros() as usize;
            let len = (bits >> start).trailing_ones() as usize;
            // SAFETY: pages start..start+len are free pages of this segment:
            // mapped, and holding no live block.
            unsafe { os::purge(self.page_start(start), len * PAGE_SIZE) };
            bits &= !span_mask(start, len);
        }
        let purged = self.purge_units & self.free_units & self.dirty_units;
        stats::committed(-((purged.count_ones() as usize * PAGE_SIZE) as isize));
        self.purged_units |= purged;
        self.dirty_units &= !(self.purge_units & self.free_units);
        self.purge_units = 0;
        self.purge_at_ms = 0;
    }

    /// Tells the owner that `page`'s parked-full state ended: called by the
    /// remote pusher whose push found `FULL_NOTIFY` (`Page::push_remote`),
    /// before its `end_notify`, while `NOTIFYING` keeps the segment alive.
    ///
    /// The owner it finds in `heap` is the one that parked the page (or set
    /// `FULL_NOTIFY` again on reclaim): the pusher's Acquire fence after
    /// reading that Release RMW makes the parker's `heap` store visible. A
    /// heap that has exited since (or a null one, for an abandoned segment,
    /// whose reclaimer takes every page in anyway) only costs a spurious
    /// scan.
    pub(crate) fn notify(&self, page: *const Page) {
        self.touch();
        let bit = 1u32 << self.page_index(page);
        // Release: with the Release store of `notified` below, pairs with
        // the owner's Acquire RMW of `notified` in `process_notified`, after
        // which its loads of `notify_bits` see this bit.
        self.notify_bits.fetch_or(bit, Ordering::Release);
        // Relaxed: ordered after the parker's store by the fence in
        // `push_remote` (see above).
        let heap = self.heap.load(Ordering::Relaxed);
        if !heap.is_null() {
            // SAFETY: heaps live in the heap pool and are never unmapped, so
            // even a heap that has since been abandoned is valid memory; a
            // spurious notification only costs its owner a scan.
            // Release: pairs with the owner's Acquire swap in
            // `process_notified` (publishes the bit above).
            unsafe { (*heap).notified.store(true, Ordering::Release) };
        }
    }

    /// Resets the header of a segment that is about to be (re)used as normal.
    fn init_normal(&mut self, fresh: bool) {
        // Relaxed: the segment is exclusively ours (fresh or from the
        // cache); the adopting heap publishes it (see `adopt`).
        self.heap.store(ptr::null_mut(), Ordering::Relaxed);
        self.notify_bits.store(0, Ordering::Relaxed);
        self.kind = SegmentKind::Normal;
        self.free_units = ALL_BLOCK_PAGES;
        if fresh {
            self.dirty_units = 0;
            self.purged_units = 0;
        }
        self.used_pages = 0;
        self.purge_units = 0;
        self.purge_at_ms = 0;
        self.mapping_size = SEGMENT_SIZE;
        self.next = ptr::null_mut();
        self.prev = ptr::null_mut();
        self.reset_page_heads();
    }

    /// Makes every page its own, empty head: a pointer into a page that is
    /// not in use finds a page with nothing carved.
    fn reset_page_heads(&mut self) {
        for page in self.pages.iter_mut() {
            page.in_use = false;
            page.set_carved(0);
            page.units = 0;
            page.head = page;
        }
    }
}

fn span_mask(first: usize, units: usize) -> u32 {
    (((1u64 << units) - 1) << first) as u32
}

// ---------------------------------------------------------------------------
// The segment map: one byte per 2 MiB of the 47-bit user address space
// (64 MiB of zero-initialised address space that is only faulted in where
// used: one 4 KiB page of it covers 8 GiB). A byte, not a bit: the checked
// `free` tests it with one load and compare, where a bit map needs two more
// shifts and a bit test (docs/BENCHMARKS.md, "Cost of the checks").

const ADDRESS_BITS: usize = 47;
const MAP_LEN: usize = 1 << (ADDRESS_BITS - SEGMENT_SHIFT);

static SEGMENT_MAP: [MapEntry; MAP_LEN] = [const { MapEntry::new(0) }; MAP_LEN];

fn map_index(segment: usize) -> Option<usize> {
    let index = segment >> SEGMENT_SHIFT;
    // The last slot is never a segment: the user address space ends one
    // 4 KiB page below 2^47, so no 2 MiB segment fits there. `map_slot`
    // relies on it: a null pointer lands in that slot.
    (index < MAP_LEN - 1).then_some(index)
}

fn map_set(segment: *mut Segment, present: bool) {
    if let Some(index) = map_index(segment as usize) {
        // Release/Acquire with `is_segment`: a thread that sees the entry
        // sees the initialised header.
        SEGMENT_MAP[index].store(u8::from(present), Ordering::Release);
    }
}

/// Whether `segment` is the start of a hakmem segment (O(1), no system call).
#[inline]
pub(crate) fn is_segment(segment: *const Segment) -> bool {
    map_index(segment as usize).is_some_and(slot_is_segment)
}

/// The segment-map slot of block pointer `p`: the slot of `segment_of(p)`
/// for any pointer into the user address space, and always in range (the
/// bits above the address space are masked off, not tested: one `and`
/// instead of a shift and a branch on the checked `free` path). Null lands
/// in the last slot, which is never a segment (`map_index`).
///
/// A pointer outside the user address space (bits 47 and up set) shares a
/// slot with one inside: `slot_segment` then names a real segment that
/// does not contain `p`, and callers must not trust `p` until a test that
/// involves `p`'s full value has passed (`Page::is_block_start` fails for
/// such a `p`: its offset from any block is at least 2^47 - 4 MiB).
#[inline(always)]
pub(crate) fn map_slot(p: *const u8) -> usize {
    ((p as usize).wrapping_sub(1) >> SEGMENT_SHIFT) & (MAP_LEN - 1)
}

/// Whether map slot `slot` (from `map_slot`) is a live hakmem segment.
///
/// One compare of the map byte against memory and a branch. An atomic
/// load in Rust would be a load, a test and the branch (the compiler does
/// not fold atomic loads into other instructions); on the checked `free`
/// path that instruction is worth saving.
#[inline(always)]
pub(crate) fn slot_is_segment(slot: usize) -> bool {
    // Ordering: an x86 byte load is atomic and has acquire ordering in
    // hardware, like the Acquire load it replaces (pairs with map_set's
    // Release store); the asm is not `readonly`, so the compiler moves no
    // later load above it.
    // SAFETY: slot < MAP_LEN (map_slot masks it): the byte is SEGMENT_MAP's.
    unsafe {
        core::arch::asm!(
            "cmp byte ptr [{map} + {slot}], 0",
            "je {absent}",
            map = in(reg) SEGMENT_MAP.as_ptr(),
            slot = in(reg) slot,
            absent = label { return false; },
            options(nostack),
        );
    }
    true
}

/// The segment header of map slot `slot`.
#[inline(always)]
pub(crate) fn slot_segment(slot: usize) -> *mut Segment {
    (slot << SEGMENT_SHIFT) as *mut Segment
}

// ---------------------------------------------------------------------------
// Global lists: empty segments (cache) and segments of exited threads
// (abandoned). Both are intrusive stacks through `Segment::next`, under a
// spin lock held for a few instructions; `fork` takes the locks first.

type SegmentList = LockedList<Segment>;

// SAFETY: `next` is the segment's list link, used by exactly one list at a
// time (owner list, cache or abandoned list: see the module invariants).
unsafe impl Linked for Segment {
    fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: this is a valid segment (the trait's contract).
        unsafe { &raw mut (*this).next }
    }
}

global! { static SEGMENT_CACHE: SegmentList = SegmentList::new(); }
global! { static ABANDONED: SegmentList = SegmentList::new(); }

/// A normal segment for a heap: from the cache, else fresh from the OS.
/// Returns null when the OS refuses. The caller sets ownership.
pub(crate) fn segment_alloc() -> *mut Segment {
    let cached = SEGMENT_CACHE.pop();
    if !cached.is_null() {
        // SAFETY: a cached segment is an unowned, mapped segment.
        unsafe { (*cached).init_normal(false) };
        return cached;
    }
    let p = os::map_aligned(SEGMENT_SIZE, SEGMENT_SIZE, 0) as *mut Segment;
    if p.is_null() {
        return p;
    }
    advise_thp(p as *mut u8, SEGMENT_SIZE);
    if cfg!(feature = "secure") {
        // SAFETY: the last bytes of the fresh segment; never handed out.
        unsafe { os::protect_none((p as *mut u8).add(SEGMENT_SIZE - GUARD_BYTES), GUARD_BYTES) };
    }
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

/// Transparent huge pages: on when asked (`HAKMEM_THP=1`); otherwise opted
/// out where the system would force them (a 2 MiB-aligned segment would get
/// a huge page on first touch, multiplying RSS for small heaps).
fn advise_thp(p: *mut u8, size: usize) {
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
        // Relaxed: no page is in use, so no remote free can read it.
        (*segment).heap.store(ptr::null_mut(), Ordering::Relaxed);
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
unsafe fn segment_unmap(segment: *mut Segment) {
    // SAFETY: the caller guarantees the segment is ours and unreferenced.
    unsafe {
        let purged = (*segment).purged_units.count_ones() as usize * PAGE_SIZE;
        stats::committed(-((SEGMENT_SIZE - purged) as isize));
        stats::segment_mapped(-1);
        map_set(segment, false);
        #[cfg(hakmem_loom)]
        (*segment).mapped.with_mut(|mapped| *mapped = false);
        os::unmap(segment as *mut u8, SEGMENT_SIZE);
    }
}

/// Earliest deadline of a cached segment or huge mapping awaiting purge
/// (`u64::MAX` = none). A hint: checked cheaply by slow paths. Every access
/// is Relaxed: it orders nothing (the lists it points at have their locks),
/// and a stale value only moves a purge pass earlier or later.
static GLOBAL_PURGE_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Whether some cached memory may be due for purging at `now`.
#[inline]
pub(crate) fn global_purge_due(now: u64) -> bool {
    now >= GLOBAL_PURGE_AT.load(Ordering::Relaxed)
}

/// Purges cached segments and huge mappings that are due at `now` (all of
/// them when `force`). One thread at a time does the pass; entries are
/// taken off their list for the system calls so no lock is held across them.
pub(crate) fn purge_global(now: u64, force: bool) {
    let due = GLOBAL_PURGE_AT.load(Ordering::Relaxed);
    if !force && now < due {
        return;
    }
    // Claim the pass (a concurrent caller sees MAX and leaves).
    if !force
        && GLOBAL_PURGE_AT
            .compare_exchange(due, u64::MAX, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    if force {
        GLOBAL_PURGE_AT.store(u64::MAX, Ordering::Relaxed);
    }
    // Cached and abandoned segments: take each list whole, purge the due
    // pages, put the segments back (no lock is held across the calls).
    let mut next = purge_list(&SEGMENT_CACHE, SEGMENT_CACHE_MAX, now, force);
    next = next.min(purge_list(&ABANDONED, usize::MAX, now, force));
    next = next.min(purge_huge_cache(now, force));
    if next != u64::MAX {
        GLOBAL_PURGE_AT.fetch_min(next, Ordering::Relaxed);
    }
}

/// Publishes a segment of an exited thread for reclaim by another; its
/// free pages are purged when due even if nobody reclaims it.
pub(crate) fn abandoned_push(segment: *mut Segment) {
    // SAFETY: the caller hands over an exclusively held segment.
    let deadline = unsafe { (*segment).purge_at_ms };
    ABANDONED.push(segment, usize::MAX);
    if deadline != 0 {
        GLOBAL_PURGE_AT.fetch_min(deadline, Ordering::Relaxed);
    }
}

/// Takes an abandoned segment (null when none).
pub(crate) fn abandoned_pop() -> *mut Segment {
    ABANDONED.pop()
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
    HUGE_CACHE.lock.lock();
}

/// `fork` parent/child: release what `lock_all` took.
pub(crate) fn unlock_all() {
    HUGE_CACHE.lock.unlock();
    ABANDONED.unlock();
    SEGMENT_CACHE.unlock();
}

// ---------------------------------------------------------------------------
// Huge blocks: one mapping each, with a segment header at a 2 MiB boundary.

/// Offset of a huge block from its segment header for alignment `align`.
fn huge_offset(align: usize) -> usize {
    align.clamp(PAGE_SIZE, SEGMENT_SIZE)
}

/// Huge mappings kept for reuse after free, so that a program cycling
/// through multi-MiB buffers does not mmap/munmap per allocation.
const HUGE_CACHE_SLOTS: usize = 64;
/// Bytes the huge cache may hold at most.
const HUGE_CACHE_BYTES_MAX: usize = 256 << 20;

struct HugeCache {
    lock: SpinLock,
    slots: UnsafeCell<[*mut Segment; HUGE_CACHE_SLOTS]>,
    bytes: UnsafeCell<usize>,
}

// SAFETY: slots and bytes are only accessed with `lock` held.
unsafe impl Sync for HugeCache {}

global! {
    static HUGE_CACHE: HugeCache = HugeCache {
        lock: SpinLock::new(),
        slots: UnsafeCell::new([ptr::null_mut(); HUGE_CACHE_SLOTS]),
        bytes: UnsafeCell::new(0),
    };
}

/// Rounds a huge mapping size up to one of four steps per power of two, so
/// freed mappings are reused by requests of similar size (at most 25 %
/// virtual overhead; untouched tails cost no memory).
fn huge_mapping_size(total: usize) -> Option<usize> {
    if total <= SEGMENT_SIZE {
        return Some(SEGMENT_SIZE);
    }
    let b = usize::BITS - 1 - (total - 1).leading_zeros();
    let step = 1usize << (b - 2);
    total.checked_add(step - 1).map(|t| t & !(step - 1))
}

fn huge_cache_take(mapping_size: usize) -> *mut Segment {
    HUGE_CACHE.lock.lock();
    let mut found = ptr::null_mut();
    // SAFETY: the lock is held; cached segments are unused huge segments.
    unsafe {
        for slot in (*HUGE_CACHE.slots.get()).iter_mut() {
            if !slot.is_null() && (**slot).mapping_size == mapping_size {
                found = *slot;
                *slot = ptr::null_mut();
                *HUGE_CACHE.bytes.get() -= mapping_size;
                break;
            }
        }
    }
    HUGE_CACHE.lock.unlock();
    found
}

/// Keeps `segment` for reuse; returns the segment to unmap instead (the
/// one given, or the largest older one it displaced), or null.
fn huge_cache_put(segment: *mut Segment) -> *mut Segment {
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; segment and the cached segments are unused
    // huge segments.
    let victim = unsafe {
        let size = (*segment).mapping_size;
        let slots = &mut *HUGE_CACHE.slots.get();
        let bytes = &mut *HUGE_CACHE.bytes.get();
        let free_slot = slots.iter().position(|s| s.is_null());
        let largest = (0..HUGE_CACHE_SLOTS)
            .filter(|&i| !slots[i].is_null())
            .max_by_key(|&i| (*slots[i]).mapping_size);
        match (free_slot, largest) {
            (Some(i), _) if *bytes + size <= HUGE_CACHE_BYTES_MAX => {
                slots[i] = segment;
                *bytes += size;
                ptr::null_mut()
            }
            (_, Some(i)) if *bytes - (*slots[i]).mapping_size + size <= HUGE_CACHE_BYTES_MAX => {
                let old = slots[i];
                *bytes = *bytes - (*old).mapping_size + size;
                slots[i] = segment;
                old
            }
            _ => segment,
        }
    };
    HUGE_CACHE.lock.unlock();
    victim
}

/// A dedicated segment for a block of `size` bytes aligned to `align` (a
/// power of two): reused from the huge cache or freshly mapped. Returns the
/// block (null when the OS refuses or the size overflows) and whether it is
/// known to be zeroed.
pub(crate) fn huge_alloc(size: usize, align: usize) -> (*mut u8, bool) {
    // Every block has room for its free-list link and freed mark, also a
    // zero-sized one placed at the end of a 2 MiB-aligned mapping.
    let size = size.max(crate::page::MIN_BLOCK_SIZE);
    let offset = huge_offset(align);
    let Some(total) = size
        .checked_add(offset + GUARD_BYTES)
        .and_then(|t| t.checked_add(os::OS_PAGE_SIZE - 1))
        .map(|t| t & !(os::OS_PAGE_SIZE - 1))
        .and_then(huge_mapping_size)
    else {
        return (ptr::null_mut(), false);
    };
    if total > isize::MAX as usize {
        return (ptr::null_mut(), false);
    }
    if offset == PAGE_SIZE {
        let cached = huge_cache_take(total);
        if !cached.is_null() {
            let p = (cached as usize + offset) as *mut u8;
            // SAFETY: a segment taken from the huge cache is exclusively
            // ours; its block is mapped and at least a page long.
            let zero = unsafe {
                (*(p as *mut crate::page::Block)).freed = 0;
                if (*cached).purged_units != 0 {
                    (*cached).purged_units = 0;
                    stats::committed(((*cached).mapping_size - PAGE_SIZE) as isize);
                }
                (*cached).dirty_units == 0
            };
            stats::huge_in_use(1);
            return (p, zero);
        }
    }
    // The header must be 2 MiB-aligned; for alignments above 2 MiB the block
    // (at header + 2 MiB) carries the alignment.
    let segment = if align > SEGMENT_SIZE {
        os::map_aligned(total, align, SEGMENT_SIZE)
    } else {
        os::map_aligned(total, SEGMENT_SIZE, 0)
    } as *mut Segment;
    if segment.is_null() {
        return (ptr::null_mut(), false);
    }
    advise_thp(segment as *mut u8, total);
    if cfg!(feature = "secure") {
        // SAFETY: the last bytes of the fresh mapping, past the block.
        unsafe { os::protect_none((segment as *mut u8).add(total - GUARD_BYTES), GUARD_BYTES) };
    }
    stats::committed(total as isize);
    stats::huge_in_use(1);
    // SAFETY: segment is a fresh, zeroed mapping of `total >= PAGE_SIZE` bytes.
    unsafe {
        Segment::construct(segment);
        (*segment).kind = SegmentKind::Huge;
        (*segment).mapping_size = total;
        (*segment).huge_block_offset = offset;
        (*segment).reset_page_heads();
    }
    map_set(segment, true);
    ((segment as usize + offset) as *mut u8, true)
}

/// Takes every segment off `list`, purges its due pages (all when `force`)
/// and puts it back (unmapping what no longer fits under `limit`). Returns
/// the earliest remaining deadline (`u64::MAX` when none).
fn purge_list(list: &SegmentList, limit: usize, now: u64, force: bool) -> u64 {
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
    while !taken.is_null() {
        // SAFETY: taken was popped above: exclusively ours; its free pages
        // hold no live block (remote frees only touch in-use pages).
        unsafe {
            let seg = taken;
            taken = (*seg).next;
            if (*seg).purge_units != 0 {
                if force || (*seg).purge_at_ms <= now {
                    (*seg).purge_pending();
                } else {
                    next = next.min((*seg).purge_at_ms);
                }
            }
            if !list.push(seg, limit) {
                segment_unmap(seg);
            }
        }
    }
    next
}

/// Purges the huge mappings in the cache that are due (all when `force`);
/// returns the earliest remaining deadline (`u64::MAX` when none).
fn purge_huge_cache(now: u64, force: bool) -> u64 {
    let mut due = [ptr::null_mut::<Segment>(); HUGE_CACHE_SLOTS];
    let mut next = u64::MAX;
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; cached segments are unused huge segments.
    unsafe {
        for (slot, d) in (*HUGE_CACHE.slots.get()).iter_mut().zip(due.iter_mut()) {
            let s = *slot;
            if s.is_null() || (*s).dirty_units == 0 || (*s).purge_at_ms == 0 {
                continue;
            }
            if force || (*s).purge_at_ms <= now {
                *d = s;
                *slot = ptr::null_mut();
                *HUGE_CACHE.bytes.get() -= (*s).mapping_size;
            } else {
                next = next.min((*s).purge_at_ms);
            }
        }
    }
    HUGE_CACHE.lock.unlock();
    for &s in due.iter().filter(|s| !s.is_null()) {
        // SAFETY: s was taken off the cache above: exclusively ours; its
        // block area holds no live data.
        unsafe {
            os::purge((s as *mut u8).add(PAGE_SIZE), (*s).mapping_size - PAGE_SIZE);
            stats::committed(-(((*s).mapping_size - PAGE_SIZE) as isize));
            (*s).purged_units = 1;
            (*s).dirty_units = 0;
            (*s).purge_at_ms = 0;
        }
        let victim = huge_cache_put(s);
        if !victim.is_null() {
            // SAFETY: victim is an unused huge segment no list refers to.
            unsafe { huge_unmap(victim) };
        }
    }
    next
}

/// Resizes huge block `p` (at the common offset) to hold `new_size` bytes
/// without copying: in place when the mapping can shrink or grow where it
/// is, else moved page tables and all (`mremap`) to a fresh aligned range.
/// Returns the block's new address, or null when it cannot (the block is
/// then untouched and the caller copies).
///
/// # Safety
/// `segment` must be the live huge segment of block `p`, used by the caller only.
pub(crate) unsafe fn huge_realloc(segment: *mut Segment, p: *mut u8, new_size: usize) -> *mut u8 {
    // A guard page would end up inside the block: `secure` builds copy.
    if cfg!(feature = "secure") || p as usize != segment as usize + PAGE_SIZE {
        return ptr::null_mut();
    }
    let Some(new_total) = new_size
        .checked_add(PAGE_SIZE + os::OS_PAGE_SIZE - 1)
        .map(|t| t & !(os::OS_PAGE_SIZE - 1))
        .and_then(huge_mapping_size)
    else {
        return ptr::null_mut();
    };
    // SAFETY: the caller guarantees segment is live and ours.
    let old_total = unsafe { (*segment).mapping_size };
    if new_total == old_total {
        return p;
    }
    // SAFETY: shrinking drops only the tail beyond the new size, which the
    // caller no longer needs; growing in place only adds fresh pages.
    if unsafe { os::remap_in_place(segment as *mut u8, old_total, new_total) } {
        // SAFETY: as above.
        unsafe { (*segment).mapping_size = new_total };
        stats::committed(new_total as isize - old_total as isize);
        return p;
    }
    let target = os::map_aligned(new_total, SEGMENT_SIZE, 0);
    if target.is_null() {
        return ptr::null_mut();
    }
    // The map entry goes before the range does: once `mremap` has moved
    // the block, another thread may map a segment at the old address and
    // set its own entry, which a later clear would erase. While the entry
    // is clear, the old range holds only this block, which the caller
    // alone uses.
    map_set(segment, false);
    // SAFETY: both ranges are ours; the block is used by the caller only.
    if !unsafe { os::remap_to(segment as *mut u8, old_total, new_total, target) } {
        map_set(segment, true);
        // SAFETY: target was just mapped and is unused.
        unsafe { os::unmap(target, new_total) };
        return ptr::null_mut();
    }
    crate::sync::race_window(crate::sync::Window::HugeRemap(segment as usize));
    let moved = target as *mut Segment;
    // SAFETY: the header moved with the mapping to `target`; its page heads
    // still point into the old range and are rebuilt.
    unsafe {
        (*moved).mapping_size = new_total;
        (*moved).reset_page_heads();
    }
    stats::committed(new_total as isize - old_total as isize);
    map_set(moved, true);
    (target as usize + PAGE_SIZE) as *mut u8
}

/// Usable bytes of huge block `p` in `segment`.
///
/// # Safety
/// `segment` must be the huge segment holding `p`.
pub(crate) unsafe fn huge_usable_size(segment: *const Segment, p: *const u8) -> usize {
    // SAFETY: the caller guarantees segment is a live huge segment.
    unsafe { segment as usize + (*segment).mapping_size - GUARD_BYTES - p as usize }
}

/// Frees huge block `p` of `segment`: into the huge cache when its layout
/// is the common one, else (or when it displaces an older entry) unmapped.
///
/// # Safety
/// `segment` must be the live huge segment of block `p`, no longer used.
pub(crate) unsafe fn huge_free(segment: *mut Segment, p: *const u8) {
    stats::huge_in_use(-1);
    let delay = config().purge_delay_ms;
    let victim = if p as usize == segment as usize + PAGE_SIZE && delay != 0 && !NO_CACHES {
        // SAFETY: the caller guarantees segment is an unused huge segment.
        unsafe {
            (*segment).dirty_units = 1;
            (*segment).purge_at_ms = if delay > 0 { os::now_ms() + delay as u64 } else { 0 };
        }
        let victim = huge_cache_put(segment);
        if victim != segment && delay > 0 {
            // SAFETY: as above; the deadline was just written.
            GLOBAL_PURGE_AT.fetch_min(unsafe { (*segment).purge_at_ms }, Ordering::Relaxed);
        }
        victim
    } else {
        segment
    };
    if !victim.is_null() {
        // SAFETY: victim is an unused huge segment no list refers to.
        unsafe { huge_unmap(victim) };
    }
}

/// Returns an unreferenced huge segment to the OS.
///
/// # Safety
/// `segment` must be a mapped huge segment no list refers to.
unsafe fn huge_unmap(segment: *mut Segment) {
    // SAFETY: the caller guarantees the segment is ours and unreferenced.
    unsafe {
        let size = (*segment).mapping_size;
        let purged = if (*segment).purged_units != 0 {
            size - PAGE_SIZE
        } else {
            0
        };
        stats::committed(-((size - purged) as isize));
        map_set(segment, false);
        #[cfg(hakmem_loom)]
        (*segment).mapped.with_mut(|mapped| *mapped = false);
        os::unmap(segment as *mut u8, size);
    }
}

/// Tests of the protocol windows, in the `hakmem_race_windows` build only
/// (scripts/test runs them there).
#[cfg(all(test, hakmem_race_windows))]
mod window_tests {
    use super::*;
    use crate::sync::{set_window_hook, Window};

    /// Where the hook mapped a segment (0: nowhere yet).
    static HOOK_MAPPED: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);

    /// In the window, another thread's new segment lands where the huge
    /// block was: map a header there, as `segment_alloc` would.
    fn map_a_segment_in_the_old_range(window: Window) {
        if let Window::HugeRemap(old) = window {
            let p = os::map_at(old, SEGMENT_SIZE) as *mut Segment;
            if !p.is_null() {
                // SAFETY: p is a fresh, zeroed mapping of a segment's size.
                unsafe {
                    Segment::construct(p);
                    (*p).init_normal(true);
                }
                map_set(p, true);
                HOOK_MAPPED.store(old, Ordering::Relaxed);
            }
        }
    }

    /// Issue 14, hole 2: a segment mapped where a huge block was, while
    /// `huge_realloc` moved it, keeps its segment-map entry.
    #[test]
    fn huge_realloc_never_erases_the_entry_of_a_segment_mapped_where_the_block_was() {
        set_window_hook(Some(map_a_segment_in_the_old_range));
        let mut checked = 0;
        for _ in 0..8 {
            HOOK_MAPPED.store(0, Ordering::Relaxed);
            let (p, _) = huge_alloc(3 << 20, 16);
            let old = segment_of(p);
            // SAFETY: p is our live huge block; the hook maps only where
            // the block no longer is.
            let q = unsafe { huge_realloc(old, p, 40 << 20) };
            assert!(!q.is_null());
            // SAFETY: q is our live huge block.
            unsafe { huge_free(segment_of(q), q) };
            if HOOK_MAPPED.load(Ordering::Relaxed) != old as usize {
                continue; // grown in place, or the range was taken meanwhile
            }
            assert!(
                is_segment(old),
                "the segment mapped at {old:p} in the window lost its map entry"
            );
            checked += 1;
            map_set(old, false);
            // SAFETY: the segment the hook mapped; nothing uses it.
            unsafe { os::unmap(old as *mut u8, SEGMENT_SIZE) };
        }
        set_window_hook(None);
        assert!(checked > 0, "the hook mapped a segment in the window at least once");
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    #[test]
    fn segment_and_page_follow_by_mask_and_shift() {
        let s = segment_alloc();
        assert!(!s.is_null());
        assert_eq!(s as usize % SEGMENT_SIZE, 0);
        assert!(is_segment(s));
        // SAFETY: s is a fresh segment exclusively owned by this test.
        unsafe {
            let first = (*s).take_span(1).unwrap();
            assert_eq!(first, 1);
            let span = (*s).take_span(3).unwrap();
            assert_eq!(span, 2);
            for k in 1..3 {
                (*s).pages[span + k].head = &mut (*s).pages[span];
            }
            let p = (*s).page_start(span).add(2 * PAGE_SIZE + 100);
            assert_eq!(segment_of(p), s);
            assert_eq!((*s).page_of(p), &mut (*s).pages[span] as *mut Page);
            let q = (*s).page_start(first);
            assert_eq!(segment_of(q.add(1)), s);
            assert_eq!((*s).page_of(q), &mut (*s).pages[first] as *mut Page);
            (*s).return_span(span, 3);
            (*s).return_span(first, 1);
            assert_eq!((*s).free_units, ALL_BLOCK_PAGES);
            segment_free(s);
        }
    }

    #[test]
    fn spans_are_first_fit_and_never_include_the_header() {
        let s = segment_alloc();
        // SAFETY: s is a fresh segment exclusively owned by this test.
        unsafe {
            assert_eq!((*s).take_span(31), Some(1));
            assert_eq!((*s).take_span(1), None);
            (*s).return_span(1, 31);
            assert_eq!((*s).take_span(32), None);
            assert!((*s).mark_dirty(1, 2));
            assert!(!(*s).mark_dirty(2, 1));
            segment_free(s);
        }
    }

    #[test]
    fn huge_blocks_find_their_header_at_every_alignment() {
        let mut align = 16;
        while align <= 8 << 20 {
            let (p, _) = huge_alloc(3 << 20, align);
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "align {align}");
            let s = segment_of(p);
            assert!(is_segment(s));
            // SAFETY: s is the huge segment just created for p.
            unsafe {
                assert_eq!((*s).kind, SegmentKind::Huge);
                assert!(huge_usable_size(s, p) >= 3 << 20);
                *p.add((3 << 20) - 1) = 7;
                huge_free(s, p);
            }
            align *= 4;
        }
    }

    #[test]
    fn huge_mappings_are_reused_by_similar_sizes() {
        let (p, zero) = huge_alloc(5 << 20, 16);
        assert!(zero);
        // SAFETY: p is a live huge block of 5 MiB.
        unsafe { huge_free(segment_of(p), p) };
        let (q, zero) = huge_alloc((5 << 20) - 1000, 16);
        assert_eq!(p, q, "the freed mapping is reused");
        assert_eq!(zero, config().purge_delay_ms == 0);
        // SAFETY: q is a live huge block.
        unsafe { huge_free(segment_of(q), q) };
    }

    #[test]
    #[cfg_attr(
        feature = "secure",
        ignore = "secure builds copy (the guard page would move into the block)"
    )]
    fn huge_realloc_moves_without_copying() {
        let (p, _) = huge_alloc(3 << 20, 16);
        // SAFETY: p is a live huge block of 3 MiB; each step keeps it live.
        unsafe {
            *p.add(12345) = 42;
            let before = os::os_counters();
            let q = huge_realloc(segment_of(p), p, 40 << 20);
            assert!(!q.is_null());
            assert_eq!(*q.add(12345), 42);
            assert!(os::os_counters().mremap > before.mremap);
            assert!(is_segment(segment_of(q)));
            *q.add((40 << 20) - 1) = 1;
            let r = huge_realloc(segment_of(q), q, 3 << 20);
            assert_eq!(r, q, "shrinking stays in place");
            assert_eq!(*r.add(12345), 42);
            assert!(huge_usable_size(segment_of(r), r) < 4 << 20);
            huge_free(segment_of(r), r);
        }
    }

    #[test]
    fn freed_pages_are_purged_when_due() {
        let s = segment_alloc();
        // SAFETY: s is a fresh segment exclusively owned by this test.
        unsafe {
            let first = (*s).take_span(4).unwrap();
            (*s).mark_dirty(first, 4);
            core::ptr::write_bytes((*s).page_start(first), 1, 4 * PAGE_SIZE);
            (*s).return_span(first, 4);
            let before = os::os_counters().madvise;
            (*s).schedule_purge(first, 4);
            if config().purge_delay_ms > 0 {
                assert_eq!((*s).purge_units.count_ones(), 4);
                (*s).purge_pending();
            }
            assert!(os::os_counters().madvise > before);
            assert_eq!((*s).dirty_units & (0b1111 << first), 0);
            assert_eq!(*(*s).page_start(first), 0, "purged memory reads as zero");
            segment_free(s);
        }
    }

    #[test]
    fn zero_sized_huge_blocks_have_room_for_their_links() {
        for align in [2 << 20, 4 << 20] {
            let (p, _) = huge_alloc(0, align);
            // SAFETY: p is a live huge block.
            unsafe {
                assert!(huge_usable_size(segment_of(p), p) >= 16);
                *p.add(15) = 1;
                huge_free(segment_of(p), p);
            }
        }
    }

    #[test]
    fn huge_mapping_sizes_have_four_steps_per_doubling() {
        assert_eq!(huge_mapping_size(1), Some(SEGMENT_SIZE));
        assert_eq!(
            huge_mapping_size(SEGMENT_SIZE + 1),
            Some(SEGMENT_SIZE + SEGMENT_SIZE / 4)
        );
        assert_eq!(huge_mapping_size(4 << 20), Some(4 << 20));
        assert_eq!(huge_mapping_size((4 << 20) + 1), Some(5 << 20));
    }

    #[test]
    fn foreign_addresses_are_not_segments() {
        let x = 0u64;
        assert!(!is_segment(segment_of(&x as *const u64 as *const u8)));
        assert!(!is_segment(usize::MAX as *const Segment));
        assert!(!is_segment(ptr::null()));
    }
}
