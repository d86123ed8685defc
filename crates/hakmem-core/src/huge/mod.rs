//! **Layer: huge blocks** — blocks larger than a segment's pages hold, or
//! aligned to more than 64 KiB: a mapping each with a segment header
//! (this file), the cache of freed mappings (`cache`), the arena of 2 MiB
//! units for blocks up to 64 MiB (`arena`, default build), `realloc` by
//! `mremap` (`realloc`), local heaps' lists of their huge blocks
//! (`local`), and the secure build's guarded blocks and quarantine
//! (`quarantine`).
//!
//! Calls down: `segment` (the header type, the segment map, the purge
//! deadline hint), `os`, the `check` hooks. Up: only the type of a local
//! heap (`thread::heap::Heap`), whose list holds its huge blocks, and the
//! page type for a block's freed mark (`small::page`).
//!
//! Huge blocks: larger than a segment's pages can hold, or aligned to more
//! than 64 KiB. Each is one dedicated mapping with a segment header at a
//! 2 MiB boundary (kind `Huge`, no owner heap, so every free of it takes
//! the slow path, from any thread). Mappings whose block sits at the
//! common offset (alignments up to 64 KiB) are cached for reuse after free
//! (at most `HUGE_CACHE_SLOTS` of them, and bytes up to the limit policy.rs
//! chooses) and purged after the delay; `realloc` resizes them with `mremap`.
//!
//! A cached mapping serves any huge request, not only one of its own size:
//! the closest fit is taken (the smallest that is large enough, else the
//! largest) and resized with `mremap` — shrunk in place, which gives the
//! tail back, or grown in place or moved page tables and all. Its resident
//! pages are reused as they are: a program that cycles through buffers of
//! varying multi-MiB sizes takes page faults only for what a buffer has
//! beyond the one it replaces, not for every byte of every buffer (mimalloc
//! and tcmalloc reuse freed ranges for smaller requests the same way).
//!
//! **Huge blocks of local heaps.** A local heap (thread/local.rs) must be able to
//! free all its blocks at once, huge ones included, but a huge segment has
//! no owner whose pages it could walk. So a local heap's huge segments are
//! linked into a list in the heap (`Heap::huge`, through `Segment::next`
//! and `prev`) and name the heap in `Segment::heap`. Any thread may free
//! one, so the lists are changed under one lock for all local heaps
//! (`LOCAL_HUGE`), held for a few instructions: huge allocations are rare
//! and make a system call or a cache lookup anyway. A free unlinks its
//! segment (`huge_free`); deleting the heap detaches every segment (they
//! become ordinary huge blocks); destroying it detaches and frees them. A
//! listed segment is never moved by `huge_realloc` (the list would point
//! at the old address): its `realloc` copies.
//!
//! The `secure` build (`secure_alloc`) serves every block too large for
//! one unit of its spans here, placed against a guard page after it, with
//! guard pages before it, zero (fresh from the OS, or zeroed as it leaves
//! quarantine), never resized with `mremap`. Freed, its mapping waits in
//! quarantine in the huge cache's slots, `PROT_NONE`, for reuse after 8
//! more huge frees (`quarantine_put`, `quarantine_take`).

#[cfg(not(feature = "secure"))]
pub(crate) mod arena;
mod cache;
mod local;
#[cfg(feature = "secure")]
mod quarantine;
#[cfg(not(feature = "secure"))]
mod realloc;

use cache::{cache_freed, HUGE_CACHE};
#[cfg(not(feature = "secure"))]
use cache::{huge_cache_take, huge_mapping_size, SHRINK_FACTOR};
pub(crate) use cache::{purge_huge_cache, unmap_cached};
pub(crate) use local::{attach_to_local, detach_all};
use local::{detach_from_local, LOCAL_HUGE};
#[cfg(feature = "secure")]
pub(crate) use quarantine::huge_check;
#[cfg(feature = "secure")]
use quarantine::{keep_freed, secure_alloc};
#[cfg(not(feature = "secure"))]
use realloc::resize_mapping;
#[cfg(not(feature = "secure"))]
pub(crate) use realloc::{huge_realloc, move_mapping};

use crate::os;
#[cfg(not(feature = "secure"))]
use crate::segment::arena::{advise_thp, NO_CACHES};
use crate::segment::map::map_set;
use crate::segment::{Segment, SegmentKind, PAGE_SIZE, SEGMENT_SIZE};
use crate::stats;
#[cfg(not(feature = "secure"))]
use core::ptr;

/// Offset of a huge block from its segment header for alignment `align`.
fn huge_offset(align: usize) -> usize {
    align.clamp(PAGE_SIZE, SEGMENT_SIZE)
}

/// `fork` prepare: hold the huge cache's lock and the local heaps' list
/// lock across the fork.
pub(crate) fn lock_cache() {
    LOCAL_HUGE.lock();
    HUGE_CACHE.lock.lock();
    #[cfg(not(feature = "secure"))]
    crate::huge::arena::lock();
}

/// `fork` parent/child: release what `lock_cache` took.
pub(crate) fn unlock_cache() {
    #[cfg(not(feature = "secure"))]
    crate::huge::arena::unlock();
    HUGE_CACHE.lock.unlock();
    LOCAL_HUGE.unlock();
}

/// A dedicated segment for a block of `size` bytes aligned to `align` (a
/// power of two): reused from the huge cache or freshly mapped. Returns the
/// block (null when the OS refuses or the size overflows) and whether it is
/// known to be zeroed.
pub(crate) fn huge_alloc(size: usize, align: usize) -> (*mut u8, bool) {
    #[cfg(feature = "secure")]
    return secure_alloc(size, align);
    #[cfg(not(feature = "secure"))]
    common_alloc(size, align)
}

/// `huge_alloc` of the default build: the block at the offset of its
/// alignment, the mapping's size rounded so that freed mappings can be
/// reused from the cache.
#[cfg(not(feature = "secure"))]
fn common_alloc(size: usize, align: usize) -> (*mut u8, bool) {
    // Every block has room for its free-list link and freed mark, also a
    // zero-sized one placed at the end of a 2 MiB-aligned mapping.
    let size = size.max(crate::small::page::MIN_BLOCK_SIZE);
    let offset = huge_offset(align);
    let Some(total) = size
        .checked_add(offset)
        .and_then(|t| t.checked_add(os::page_size() - 1))
        .map(|t| t & !(os::page_size() - 1))
        .and_then(huge_mapping_size)
    else {
        return (ptr::null_mut(), false);
    };
    if total > isize::MAX as usize {
        return (ptr::null_mut(), false);
    }
    // The arena serves the race-window build too (its freed units are
    // purged at once there, and an emptied region unmapped, so that a
    // late touch faults), so that its moves have window tests; loom does
    // not model it.
    if offset == PAGE_SIZE && !cfg!(hakmem_loom) {
        if let Some(n) = crate::huge::arena::units_for(size) {
            if let Some(served) = crate::huge::arena::alloc(n) {
                return served;
            }
        }
    }
    if offset == PAGE_SIZE {
        let cached = huge_cache_take(total);
        // SAFETY: a segment taken from the huge cache is exclusively ours;
        // resizing it keeps its header (moved with it, or in place).
        let reused = if cached.is_null() {
            cached
        } else {
            // SAFETY: as above.
            let have = unsafe { (*cached).mapping_size };
            if have >= total && have <= total.saturating_mul(SHRINK_FACTOR) {
                cached
            } else {
                // SAFETY: as above.
                unsafe { resize_mapping(cached, total) }
            }
        };
        if !reused.is_null() {
            let p = (reused as usize + offset) as *mut u8;
            // SAFETY: reused is exclusively ours; its block is mapped and at
            // least a page long.
            let zero = unsafe {
                crate::check::valgrind::header_access(p);
                (*(p as *mut crate::small::page::Block)).freed = 0;
                let bytes = (*reused).mapping_size;
                if (*reused).purged_units != 0 {
                    (*reused).purged_units = 0;
                    stats::committed(purged_bytes(bytes) as isize);
                    crate::policy::recommitted(purged_bytes(bytes));
                }
                crate::policy::huge_hit(bytes);
                (*reused).dirty_units == 0
            };
            stats::huge_in_use(1);
            return (p, zero);
        }
        if !cached.is_null() {
            // The resize failed (out of address space): give it back.
            // SAFETY: cached is an unused huge segment no list refers to.
            unsafe { huge_unmap(cached) };
        }
    }
    // The header must be 2 MiB-aligned; for alignments above 2 MiB the block
    // (at header + 2 MiB) carries the alignment.
    let map = || {
        if align > SEGMENT_SIZE {
            os::map_aligned(total, align, SEGMENT_SIZE)
        } else {
            os::map_aligned(total, SEGMENT_SIZE, 0)
        }
    } as *mut Segment;
    let mut segment = map();
    if segment.is_null() && crate::segment::purge::unmap_cached(total) {
        // The OS refused: once more, with what hakmem kept mapped of freed
        // memory given back (the cache, the arena's empty regions).
        segment = map();
    }
    if segment.is_null() {
        return (ptr::null_mut(), false);
    }
    crate::policy::huge_mapped(total);
    crate::policy::tick(os::now_ms());
    advise_thp(segment as *mut u8, total);
    // SAFETY: segment is a fresh, zeroed mapping of `total >= PAGE_SIZE` bytes.
    unsafe { publish(segment, total, offset) };
    ((segment as usize + offset) as *mut u8, true)
}

/// Makes the fresh mapping `segment` of `total` bytes a huge segment whose
/// block lies `offset` bytes past its header, and enters it in the map.
///
/// # Safety
/// `segment` must be a fresh, zeroed mapping of `total` bytes, the caller's.
unsafe fn publish(segment: *mut Segment, total: usize, offset: usize) {
    stats::committed(total as isize);
    stats::huge_in_use(1);
    // SAFETY: the caller's guarantee; the header fits the first page.
    unsafe {
        Segment::construct(segment);
        (*segment).kind = SegmentKind::Huge;
        (*segment).mapping_size = total;
        (*segment).huge_block_offset = offset;
        (*segment).reset_page_heads();
    }
    map_set(segment, true);
}

/// The size huge block of `segment` was asked for (`secure`; 0 otherwise).
///
/// # Safety
/// `segment` must be a live huge segment.
#[inline(always)]
unsafe fn requested_size(_segment: *const Segment) -> usize {
    #[cfg(feature = "secure")]
    // SAFETY: the caller's guarantee.
    return unsafe { (*_segment).huge_size };
    #[cfg(not(feature = "secure"))]
    0
}

/// What `free` does to huge block `p` before writing its freed mark
/// (`secure`: checks its canaries; nothing otherwise).
///
/// # Safety
/// `segment` must be the live huge segment of block `p`.
#[inline]
pub(crate) unsafe fn on_free(_segment: *const Segment, _p: *const u8) {
    #[cfg(feature = "secure")]
    // SAFETY: the caller's guarantee.
    unsafe {
        huge_check(_segment, _p, "free()");
    }
}

/// Bytes a purge of the huge mapping of `size` bytes gives back: all but
/// the header unit and, in the default build, the first OS page of the
/// block, where the purge writes its freed mark again, so that a double
/// free after the purge is still caught (the `secure` build's quarantine
/// takes the mapping out of the segment map instead).
fn purged_bytes(size: usize) -> usize {
    if cfg!(feature = "secure") {
        size - PAGE_SIZE
    } else {
        size - PAGE_SIZE - os::page_size()
    }
}

/// Usable bytes of huge block `p` in `segment`.
///
/// # Safety
/// `segment` must be the huge segment holding `p`.
pub(crate) unsafe fn huge_usable_size(segment: *const Segment, p: *const u8) -> usize {
    // SAFETY: the caller guarantees segment is a live huge segment.
    let (mapping_size, _requested) = unsafe { ((*segment).mapping_size, requested_size(segment)) };
    if cfg!(feature = "secure") {
        _requested
    } else {
        segment as usize + mapping_size - p as usize
    }
}

/// Frees huge block `p` of `segment`: into the huge cache when its layout
/// is the common one (`secure`: into quarantine), else (or when it
/// displaces an older entry) unmapped.
///
/// # Safety
/// `segment` must be the live huge segment of block `p`, no longer used.
pub(crate) unsafe fn huge_free(segment: *mut Segment, p: *const u8) {
    // Before the mapping can be reused by another thread (the cache).
    crate::check::valgrind::header_done(p as *mut u8);
    // SAFETY: the caller's guarantee.
    unsafe { detach_from_local(segment) };
    stats::huge_in_use(-1);
    let delay = crate::policy::purge_delay_ms();
    // SAFETY: the caller's guarantee.
    let victim = unsafe { keep_freed(segment, p, delay) };
    if !victim.is_null() {
        // SAFETY: victim is an unused huge segment no list refers to.
        unsafe { huge_unmap(victim) };
    }
}

/// Keeps the mapping of freed huge block `p` for reuse when its layout is
/// the common one; returns the segment to unmap instead (this one, or an
/// older one it displaced), or null.
///
/// # Safety
/// `segment` must be the huge segment of block `p`, just freed, in no list.
#[cfg(not(feature = "secure"))]
unsafe fn keep_freed(segment: *mut Segment, p: *const u8, delay: i64) -> *mut Segment {
    // SAFETY: the caller guarantees segment is an unused huge segment.
    if unsafe { (*segment).huge_region } != 0 {
        // SAFETY: as above.
        unsafe { crate::huge::arena::free(segment, delay) };
        return ptr::null_mut();
    }
    let cacheable = p as usize == segment as usize + PAGE_SIZE;
    if !cacheable || delay == 0 || NO_CACHES {
        return segment;
    }
    let deadline = if delay > 0 { os::now_ms() + delay as u64 } else { 0 };
    // SAFETY: the caller guarantees segment is an unused huge segment.
    unsafe {
        (*segment).dirty_units = 1;
        (*segment).purge_at_ms = deadline;
    }
    cache_freed(segment, deadline)
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
            purged_bytes(size)
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

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    use crate::segment::map::is_segment;
    use crate::segment::segment_of;

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
    #[cfg(not(feature = "secure"))]
    fn huge_realloc_moves_without_copying() {
        let (p, _) = huge_alloc(3 << 20, 16);
        // SAFETY: p is a live huge block of 3 MiB; each step keeps it live.
        unsafe {
            *p.add(12345) = 42;
            let before = os::os_counters();
            let q = huge_realloc(segment_of(p), p, 40 << 20);
            assert!(!q.is_null());
            assert_eq!(*q.add(12345), 42);
            // Grown in place (the arena's units after it were free), or
            // moved by mremap: never copied.
            assert!(q == p || os::os_counters().mremap > before.mremap);
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
    fn zero_sized_huge_blocks_have_room_for_their_links() {
        for align in [16, 2 << 20, 4 << 20] {
            let (p, _) = huge_alloc(0, align);
            // SAFETY: p is a live huge block; its first 16 bytes are
            // mapped (what free writes there).
            unsafe {
                if cfg!(feature = "secure") {
                    assert_eq!(huge_usable_size(segment_of(p), p), 0);
                    on_free(segment_of(p), p);
                } else {
                    assert!(huge_usable_size(segment_of(p), p) >= 16);
                }
                *p.add(15) = 1;
                huge_free(segment_of(p), p);
            }
        }
    }

    /// `secure`: the block ends against the guard page (sizes that are
    /// multiples of 16), its canary after it starts with a zero (a C
    /// string filling the block ends there), and the guard pages
    /// before and after it are inaccessible.
    #[test]
    #[cfg(feature = "secure")]
    fn secure_huge_blocks_sit_between_guard_pages() {
        extern crate std;
        let page = os::page_size();
        for (size, align) in [
            (1 << 20, 16),
            ((1 << 20) + 5, 16),
            (100_000, 64),
            (3 << 20, 1 << 20),
            (70_000, 8192),
        ] {
            let (p, zero) = huge_alloc(size, align);
            assert!(!p.is_null() && zero);
            assert_eq!(p as usize % align, 0);
            let s = segment_of(p);
            // SAFETY: s is p's live huge segment; only its mapped, accessible
            // bytes are read.
            unsafe {
                assert_eq!(huge_usable_size(s, p), size);
                let guard = s as usize + (*s).mapping_size - page;
                if align <= page {
                    assert!(
                        guard - (p as usize + size) < align.max(16),
                        "{size}: the block ends at its guard"
                    );
                    assert!(p as usize - (s as usize + PAGE_SIZE) < page);
                } else {
                    assert!(guard - (p as usize + size) < page);
                    assert_eq!(p as usize % page, 0);
                }
                assert_eq!(huge_check(s, p, "test"), size);
                assert_eq!(*p.add(size - 1), 0, "fresh memory");
                if guard > p as usize + size {
                    assert_eq!(*p.add(size), 0, "{size}: the canary's first byte");
                }
                huge_free(s, p);
            }
        }
    }

    #[test]
    #[cfg(not(feature = "secure"))]
    fn huge_mapping_sizes_have_four_steps_per_doubling() {
        assert_eq!(huge_mapping_size(1), Some(SEGMENT_SIZE));
        assert_eq!(
            huge_mapping_size(SEGMENT_SIZE + 1),
            Some(SEGMENT_SIZE + SEGMENT_SIZE / 4)
        );
        assert_eq!(huge_mapping_size(4 << 20), Some(4 << 20));
        assert_eq!(huge_mapping_size((4 << 20) + 1), Some(5 << 20));
    }
}
