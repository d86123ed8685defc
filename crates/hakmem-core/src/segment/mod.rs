//! **Layer: segments** — the 2 MiB regions every normal block lives in:
//! the header and its arithmetic (this file), the segment map ("is this a
//! hakmem segment?", `map`), where segments come from and wait (the OS,
//! the segment cache, the abandoned list: `arena`), and time-driven
//! purging with the global purge pass (`purge`).
//!
//! Calls down: `os`, `arch` (the map's one-compare test), the `check`
//! hooks (the secure build's guard pages).
//!
//! Up, and why: the header holds the page metadata (`small::page::Page`)
//! and names its owner heap (`thread::heap::Heap`), so the notification
//! of a parked page's first remote free (`Segment::notify`) writes the
//! heap's flag. The global purge pass (`purge`) is the process's one clock
//! for what waits on time, wherever it lives: a heap's periodic sweep of
//! its queued pages (`small::page_queue`, `small::refill`), the huge cache
//! and arena (`huge`), retired heaps and threads gone without their exit
//! hook (`thread::abandon`, `thread::live`); `arena` takes the huge locks
//! in `fork`'s order.
//!
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
//! A *normal* segment belongs to one heap (`heap`), which carves spans of
//! pages from it without locks: a thread heap, or a local heap (thread/local.rs),
//! whose segments also name the thread that made it (`local_parent`). A
//! free is local exactly when the segment's `heap` is the calling thread's
//! heap or its `local_parent` is (one of the calling thread's local
//! heaps). A *huge* segment is one dedicated mapping holding a single block
//! (huge/); its `heap` is null, or the local heap that allocated it, and
//! every free of it takes the slow path, from any thread.
//!
//! Free memory goes back to the OS after `HAKMEM_PURGE_DELAY` ms: freed spans
//! of an owned segment are marked in `purge_units` and purged by the owner's
//! slow path once due (`purge_pending`); cached segments and cached huge
//! mappings are purged by whichever thread's slow path finds the global
//! deadline passed (purge.rs).
//!
//! Elsewhere: the segment map ("is this a hakmem segment header?", O(1),
//! segment_map.rs), the cache of empty segments and the abandoned list
//! (arena.rs), huge blocks (huge/).
//!
//! Invariants: `free_units` never has bit 0; `used_pages` is the number of
//! span heads with `in_use`; a normal segment is in exactly one of: its
//! owner heap's list, the abandoned list, the cache.

pub(crate) mod arena;
pub(crate) mod map;
pub(crate) mod purge;

use crate::os;
use crate::small::page::Page;
use crate::stats;
use crate::sync::{AtomicPtr, AtomicU32, Ordering};
use crate::thread::heap::Heap;
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
/// Largest block placed inside a segment (31 pages); larger ones are huge.
/// `secure` builds, where no block straddles two units, place only what a
/// size class serves (a request up to one byte less than its largest class,
/// for the canary) inside segments.
pub const LARGE_SIZE_MAX: usize = if cfg!(feature = "secure") {
    crate::check::secure::CLASS_SIZE_MAX - 1
} else {
    (PAGES_PER_SEGMENT - 1) * PAGE_SIZE
};

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
    /// A huge segment: the local heap whose list holds it (null: none; see
    /// huge/mod.rs, "Huge blocks of local heaps").
    pub(crate) heap: AtomicPtr<Heap>,
    /// A normal segment owned by a local heap: the thread heap of the
    /// thread that made that local heap (`Heap::parent`), the only thread
    /// that may use it; null otherwise. A free by that thread is local (it
    /// goes to the local heap's page without an atomic), and a free by any
    /// other thread is pushed at once instead of batched, so that no block
    /// of a local heap waits in a batch when the heap is destroyed
    /// (remote.rs). Written by the owner with `heap` (`adopt`), cleared when
    /// the local heap lets the segment go.
    pub(crate) local_parent: AtomicPtr<Heap>,
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
    /// An abandoned segment: the small classes (bit per class) of its
    /// pages that had a free block when it was last tidied
    /// (`abandon::release_empty_pages`, before each time it is put on the
    /// abandoned list). Remote frees only add room, so it is a lower
    /// bound; read and added to under the list's lock by a thread looking
    /// for a segment to reclaim (`abandon::serves`). Holder only otherwise.
    pub(crate) room_classes: u64,
    /// An abandoned segment: the pages (bit per span head index) a block
    /// may have been freed into since it was last tidied or looked at
    /// (`abandon::serves`). Set by the freeing thread before its push
    /// (after it, the segment may be gone), cleared by the tidying and
    /// the look: a hint. A push that lands after a look that cleared it is
    /// not seen by the next look; it waits for a tidying (the purge pass
    /// its free makes due; none with purging off; the tidying before a
    /// fresh segment is mapped, `abandon::segment_acquire`) or a reclaim.
    pub(crate) late_frees: AtomicU32,
    /// An abandoned segment: units of pages that the blocks waiting on
    /// their remote stacks empty, as last seen by a thread looking for a
    /// segment to reclaim (`abandon::serves`, under the list's lock); 0
    /// after a tidying, which gives such pages back.
    pub(crate) late_free_units: u32,
    /// Bytes mapped from the segment start (huge segments; `SEGMENT_SIZE` otherwise).
    pub(crate) mapping_size: usize,
    /// Huge segments: the block's offset from the header (`huge_offset` of
    /// its alignment; `secure`: where `huge::secure_alloc` placed it), the
    /// one pointer `free` may be given for it.
    pub(crate) huge_block_offset: usize,
    /// Huge segments carved from the huge arena (huge_arena.rs): their
    /// region's index plus one; 0 for a mapping of its own.
    pub(crate) huge_region: u32,
    /// `secure` huge segments: the size the block was asked for.
    #[cfg(feature = "secure")]
    pub(crate) huge_size: usize,
    /// `secure` huge segments in quarantine (huge/): the count of huge
    /// frees when this one was freed.
    #[cfg(feature = "secure")]
    pub(crate) quarantined_at: u64,
    /// `secure` normal segments: the units whose guard page (their last
    /// OS page) is in place (`arena::place_guards`, as spans are carved).
    /// Owner only; kept while the segment waits in the cache, since a purge
    /// leaves protections as they are.
    #[cfg(feature = "secure")]
    pub(crate) guarded_units: u32,
    /// Links in the owner heap's list, the cache or the abandoned list.
    pub(crate) next: *mut Segment,
    pub(crate) prev: *mut Segment,
    /// The global list (the cache or the abandoned list) the segment is on,
    /// null when none: written only by that list, under its lock (list.rs).
    pub(crate) listed: *const (),
    /// Page metadata by page index (entry 0, the header page's, is never
    /// in use).
    pub(crate) pages: [Page; PAGES_PER_SEGMENT],
    /// Loom only: whether the mapping exists. `segment_unmap` writes it and
    /// every access a remote thread makes reads it (`touch`), so loom
    /// reports any access that is not ordered before the unmap.
    #[cfg(hakmem_loom)]
    pub(crate) mapped: loom::cell::UnsafeCell<bool>,
}

// The header fits its unit (`secure`: before the unit's guard page, of up
// to 16 KiB).
const _: () =
    assert!(core::mem::size_of::<Segment>() <= PAGE_SIZE - if cfg!(feature = "secure") { 16 << 10 } else { 0 });

/// The segment holding block `p` (a hakmem pointer).
#[inline(always)]
pub(crate) fn segment_of(p: *const u8) -> *mut Segment {
    ((p as usize).wrapping_sub(1) & !SEGMENT_MASK) as *mut Segment
}

impl Segment {
    /// Notes that a block of `page`, a span head of this abandoned
    /// segment, is being freed into it (`late_frees`), before the block is
    /// pushed.
    #[inline]
    pub(crate) fn note_late_free(&self, page: *const Page) {
        let bit = 1u32 << self.page_index(page);
        // Relaxed: a hint for a thread looking for a segment to reclaim,
        // which reads the page's remote word itself; nothing is published
        // through it. Loaded first: the line is written only when the bit
        // is new. A note lost to a look that swaps the word to 0 between
        // the load and here (the load saw an older set bit) only delays
        // the block's return: the purge pass, and the tidying before a
        // fresh segment, tidy a segment whatever its hints
        // (`abandon::tidy_abandoned`). Driven in loom through `free_slow`
        // into an abandoned segment.
        if self.late_frees.load(Ordering::Relaxed) & bit == 0 {
            self.late_frees.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Makes the fresh, zeroed memory at `segment` a segment header. Zeroed
    /// memory already is one (atomics 0, pointers null, kind `Normal`), so
    /// normally nothing is written; loom's atomics must be constructed.
    ///
    /// # Safety
    /// `segment` must be fresh, zeroed, writable memory of a header's size.
    #[inline(always)]
    pub(crate) unsafe fn construct(segment: *mut Segment) {
        #[cfg(hakmem_loom)]
        // SAFETY: the caller guarantees the memory is ours to initialise.
        unsafe {
            ptr::write(
                segment,
                Segment {
                    heap: AtomicPtr::new(ptr::null_mut()),
                    local_parent: AtomicPtr::new(ptr::null_mut()),
                    notify_bits: AtomicU32::new(0),
                    kind: SegmentKind::Normal,
                    free_units: 0,
                    dirty_units: 0,
                    used_pages: 0,
                    purge_units: 0,
                    purged_units: 0,
                    purge_at_ms: 0,
                    room_classes: 0,
                    late_frees: AtomicU32::new(0),
                    late_free_units: 0,
                    mapping_size: 0,
                    huge_block_offset: 0,
                    huge_region: 0,
                    #[cfg(feature = "secure")]
                    huge_size: 0,
                    #[cfg(feature = "secure")]
                    quarantined_at: 0,
                    #[cfg(feature = "secure")]
                    guarded_units: 0,
                    next: ptr::null_mut(),
                    prev: ptr::null_mut(),
                    listed: ptr::null(),
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
            let bytes = recommitted.count_ones() as usize * PAGE_SIZE;
            stats::committed(bytes as isize);
            crate::policy::recommitted(bytes);
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
        let delay = crate::policy::purge_delay_ms();
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
    ///
    /// A run the OS refuses to purge (locked memory, a sandbox) stays
    /// dirty: its pages keep their bytes, so they are never handed out as
    /// zero (`mark_dirty`), and they are not tried again until they have
    /// been used and freed once more (a refusal is usually for good, and a
    /// retry per purge delay would be a system call that achieves nothing).
    pub(crate) fn purge_pending(&mut self) {
        let pending = self.purge_units & self.free_units;
        let mut bits = pending;
        let mut refused = 0u32;
        while bits != 0 {
            let start = bits.trailing_zeros() as usize;
            let len = (bits >> start).trailing_ones() as usize;
            // SAFETY: pages start..start+len are free pages of this segment:
            // mapped, and holding no live block.
            if !unsafe { os::purge(self.page_start(start), len * PAGE_SIZE) } {
                refused |= span_mask(start, len);
            }
            bits &= !span_mask(start, len);
        }
        let given_back = pending & !refused;
        let purged = given_back & self.dirty_units;
        let bytes = purged.count_ones() as usize * PAGE_SIZE;
        stats::committed(-(bytes as isize));
        crate::policy::purged(bytes);
        self.purged_units |= purged;
        self.dirty_units &= !given_back;
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
            // `process_notified` (publishes the bit above). A swap, not a
            // store: an RMW continues the release sequence of an earlier
            // notifier's swap, so an owner whose swap reads this value sees
            // that notifier's bit too; a plain store would end the sequence
            // and that bit could go unseen with the flag cleared
            // (loom: `two_notifiers_on_two_segments_of_one_heap_are_both_seen`).
            unsafe { (*heap).notified.swap(true, Ordering::Release) };
        }
    }

    /// Resets the header of a segment that is about to be (re)used as normal.
    pub(crate) fn init_normal(&mut self, fresh: bool) {
        debug_assert!(self.listed.is_null(), "a listed segment reused");
        // Relaxed: the segment is exclusively ours (fresh or from the
        // cache); the adopting heap publishes it (see `adopt`).
        self.heap.store(ptr::null_mut(), Ordering::Relaxed);
        self.local_parent.store(ptr::null_mut(), Ordering::Relaxed);
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
    pub(crate) fn reset_page_heads(&mut self) {
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

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    use crate::segment::arena::{segment_alloc, segment_free};
    use crate::segment::map::is_segment;

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
    fn freed_pages_are_purged_when_due() {
        let s = segment_alloc();
        // SAFETY: s is a fresh segment exclusively owned by this test.
        unsafe {
            let first = (*s).take_span(4).unwrap();
            (*s).mark_dirty(first, 4);
            for unit in first..first + 4 {
                // Up to the unit's guard page (`secure`).
                core::ptr::write_bytes(
                    (*s).page_start(unit),
                    1,
                    PAGE_SIZE - crate::check::secure::guard_bytes(),
                );
            }
            (*s).return_span(first, 4);
            let before = os::os_counters().madvise;
            (*s).schedule_purge(first, 4);
            if crate::policy::purge_delay_ms() > 0 {
                assert_eq!((*s).purge_units.count_ones(), 4);
                (*s).purge_pending();
            }
            assert!(os::os_counters().madvise > before);
            assert_eq!((*s).dirty_units & (0b1111 << first), 0);
            assert_eq!(*(*s).page_start(first), 0, "purged memory reads as zero");
            segment_free(s);
        }
    }
}
