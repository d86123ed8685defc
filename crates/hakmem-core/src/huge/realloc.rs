//! Huge `realloc` without copying (default build): in place, in the
//! arena's units, or moved page tables and all with `mremap`.

use super::{huge_mapping_size, purged_bytes};
use crate::os;
use crate::segment::map::map_set;
use crate::segment::{Segment, PAGE_SIZE, SEGMENT_SIZE};
use crate::stats;
use crate::sync::Ordering;
use core::ptr;

#[cfg(not(feature = "secure"))]
/// Resizes huge block `p` (at the common offset) to hold `new_size` bytes
/// without copying: in place when the mapping can shrink or grow where it
/// is, else moved page tables and all (`mremap`) to a fresh aligned range.
/// Returns the block's new address, or null when it cannot (the block is
/// then untouched and the caller copies).
///
/// # Safety
/// `segment` must be the live huge segment of block `p`, used by the caller only.
pub(crate) unsafe fn huge_realloc(segment: *mut Segment, p: *mut u8, new_size: usize) -> *mut u8 {
    // `secure` builds copy: their blocks sit against their guard pages.
    if cfg!(feature = "secure") || p as usize != segment as usize + PAGE_SIZE {
        return ptr::null_mut();
    }
    // A local heap's list points at the header: its blocks are copied.
    // Acquire: pairs with the Release store of null in `detach_all`, so
    // that heap's last read of the header happens before a move unmaps
    // the old range.
    // SAFETY: the caller guarantees segment is live.
    if !unsafe { (*segment).heap.load(Ordering::Acquire) }.is_null() {
        return ptr::null_mut();
    }
    let Some(new_total) = new_size
        .checked_add(PAGE_SIZE + os::page_size() - 1)
        .map(|t| t & !(os::page_size() - 1))
        .and_then(huge_mapping_size)
    else {
        return ptr::null_mut();
    };
    // SAFETY: the caller guarantees segment is live and ours.
    let moved = unsafe {
        if (*segment).huge_region != 0 {
            // Carved from the arena: in place when the units around allow,
            // else moved out into a mapping of its own.
            let units = crate::huge::arena::units_for(new_size);
            if units.is_some_and(|n| crate::huge::arena::resize_in_place(segment, n * SEGMENT_SIZE)) {
                return p;
            }
            if new_total < (*segment).mapping_size {
                return ptr::null_mut();
            }
            crate::huge::arena::move_out(segment, new_total)
        } else {
            resize_mapping(segment, new_total)
        }
    };
    if moved.is_null() {
        return moved as *mut u8;
    }
    (moved as usize + PAGE_SIZE) as *mut u8
}

/// Resizes huge `segment`'s mapping to `new_total` bytes without copying:
/// in place when it can shrink or grow where it is, else moved, page
/// tables and all (`mremap`), to a fresh aligned range. Pages already
/// resident stay resident; a purged mapping stays purged (what is added is
/// fresh). Returns the segment's (possibly new) header, or null when it
/// cannot (then it is untouched).
///
/// # Safety
/// `segment` must be a huge segment used by the caller only (its block
/// live and the caller's, or cached and taken off the cache).
#[cfg(not(feature = "secure"))]
pub(super) unsafe fn resize_mapping(segment: *mut Segment, new_total: usize) -> *mut Segment {
    // SAFETY: the caller guarantees segment is ours.
    let (old_total, purged) = unsafe { ((*segment).mapping_size, (*segment).purged_units != 0) };
    if new_total == old_total {
        return segment;
    }
    // What the accounting counts: the whole mapping, less a purged body.
    let committed = |total: usize| if purged { total - purged_bytes(total) } else { total } as isize;
    // SAFETY: shrinking drops only the tail beyond the new size, which the
    // caller no longer needs; growing in place only adds fresh pages.
    if unsafe { os::remap_in_place(segment as *mut u8, old_total, new_total) } {
        // SAFETY: as above.
        unsafe { (*segment).mapping_size = new_total };
        stats::committed(committed(new_total) - committed(old_total));
        return segment;
    }
    // SAFETY: the caller's guarantee.
    let target = unsafe { move_mapping(segment, old_total, new_total) };
    if target.is_null() {
        return ptr::null_mut();
    }
    let moved = target as *mut Segment;
    // SAFETY: the header moved with the mapping to `target`; its page heads
    // still point into the old range and are rebuilt.
    unsafe {
        (*moved).mapping_size = new_total;
        (*moved).reset_page_heads();
    }
    stats::committed(committed(new_total) - committed(old_total));
    map_set(moved, true);
    moved
}

/// Moves the `old_total` bytes of huge `segment` (its whole mapping, or
/// its units of the huge arena) to a fresh 2 MiB-aligned mapping of
/// `new_total` bytes, page tables and all (`mremap`), its map entry
/// cleared. Returns the new address, or null when it cannot (then nothing
/// changed). The caller rebuilds the header there and enters it in the map.
///
/// # Safety
/// `segment` must be a huge segment used by the caller only, the range
/// one kernel mapping of ours; `new_total >= old_total`.
#[cfg(not(feature = "secure"))]
pub(crate) unsafe fn move_mapping(segment: *mut Segment, old_total: usize, new_total: usize) -> *mut u8 {
    let target = os::map_aligned(new_total, SEGMENT_SIZE, 0);
    if target.is_null() {
        return target;
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
        // Kernels before 6.x's rework unmap the target range before they
        // find that the move cannot be done, and another thread may have
        // mapped part of it since: the range is unmapped only when it is
        // still mapped whole (the kernel kept it: ours), or free whole
        // (then mapped again first, ours). Otherwise it is left alone.
        if os::is_mapped(target, new_total) {
            // SAFETY: the whole range is mapped: our target, kept.
            unsafe { os::unmap(target, new_total) };
        } else {
            let probe = os::map_at(target as usize, new_total);
            if !probe.is_null() {
                // SAFETY: the range was free and is ours again.
                unsafe { os::unmap(probe, new_total) };
            }
        }
        return ptr::null_mut();
    }
    crate::sync::race_window(crate::sync::Window::HugeRemap(segment as usize));
    target
}

/// Tests of the protocol windows, in the `hakmem_race_windows` build only
/// (scripts/test runs them there).
#[cfg(all(test, hakmem_race_windows))]
mod window_tests {
    use super::*;
    use crate::huge::huge_alloc;
    use crate::huge::huge_free;
    use crate::segment::map::is_segment;
    use crate::segment::segment_of;
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
    /// `huge_realloc` moved it, keeps its segment-map entry. The block is
    /// one of the huge arena's (3 MiB) grown past what the arena serves,
    /// so it moves out (`huge::arena::move_out`), or one of its own (80
    /// MiB), which moves to a larger mapping.
    #[test]
    fn huge_realloc_never_erases_the_entry_of_a_segment_mapped_where_the_block_was() {
        set_window_hook(Some(map_a_segment_in_the_old_range));
        let mut checked = 0;
        for round in 0..8 {
            HOOK_MAPPED.store(0, Ordering::Relaxed);
            let (size, grown) = if round % 2 == 0 {
                (3 << 20, 100 << 20)
            } else {
                (80 << 20, 200 << 20)
            };
            let (p, _) = huge_alloc(size, 16);
            let old = segment_of(p);
            // A page mapped right after a mapping of its own, so that it
            // cannot grow in place: it must move.
            // SAFETY: old is p's live huge segment.
            let end = old as usize + unsafe { (*old).mapping_size };
            let blocker = if round % 2 == 1 {
                os::map_at(end, os::page_size())
            } else {
                ptr::null_mut()
            };
            // SAFETY: p is our live huge block; the hook maps only where
            // the block no longer is.
            let q = unsafe { huge_realloc(old, p, grown) };
            if !blocker.is_null() {
                // SAFETY: the page mapped above, used by nothing.
                unsafe { os::unmap(blocker, os::page_size()) };
            }
            if q.is_null() {
                // Over a hole an earlier round's hook left in the arena:
                // `realloc` would copy it.
                // SAFETY: p is still our live huge block.
                unsafe { huge_free(old, p) };
                continue;
            }
            // SAFETY: q is our live huge block.
            unsafe { huge_free(segment_of(q), q) };
            if HOOK_MAPPED.load(Ordering::Relaxed) != old as usize {
                continue; // grown in place, or the range was taken meanwhile
            }
            assert!(
                is_segment(old),
                "the segment mapped at {old:p} in the window lost its map entry"
            );
            checked += 1 << (4 * (round % 2));
            map_set(old, false);
            // SAFETY: the segment the hook mapped; nothing uses it.
            unsafe { os::unmap(old as *mut u8, SEGMENT_SIZE) };
        }
        set_window_hook(None);
        assert!(
            checked & 0xf > 0 && checked >> 4 > 0,
            "the hook mapped a segment in the window of both kinds of move ({checked:#x})"
        );
    }

    /// What the window of an arena block's move saw: the old header's map
    /// entry already clear, and the old range unmapped (`mremap` took it).
    static ENTRY_CLEAR: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);
    static RANGE_GONE: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);

    fn look_at_the_old_range(window: Window) {
        if let Window::HugeRemap(old) = window {
            ENTRY_CLEAR.store(usize::from(!is_segment(old as *mut Segment)), Ordering::Relaxed);
            RANGE_GONE.store(
                usize::from(!os::is_mapped(old as *mut u8, SEGMENT_SIZE)),
                Ordering::Relaxed,
            );
        }
    }

    /// Issue 22: the huge arena's move of a block out (`move_out`) clears
    /// the old header's map entry before the range goes (another thread
    /// may map a segment there at once), and maps the hole again after
    /// (so the region stays one mapping of units it can hand out); the
    /// block keeps its bytes at its new address.
    #[test]
    fn an_arena_block_moved_out_clears_its_old_entry_first_and_refills_its_hole() {
        set_window_hook(Some(look_at_the_old_range));
        let (p, _) = huge_alloc(3 << 20, 16);
        let old = segment_of(p);
        // SAFETY: p is our live huge block of 3 MiB.
        unsafe {
            assert_ne!((*old).huge_region, 0, "an arena block");
            *p.add(12345) = 42;
        }
        // SAFETY: as above.
        let q = unsafe { huge_realloc(old, p, 100 << 20) };
        set_window_hook(None);
        assert!(!q.is_null() && q != p, "moved out of the arena");
        assert_eq!(
            ENTRY_CLEAR.load(Ordering::Relaxed),
            1,
            "the old entry was clear in the window"
        );
        assert_eq!(
            RANGE_GONE.load(Ordering::Relaxed),
            1,
            "the old range was unmapped in the window"
        );
        assert!(os::is_mapped(old as *mut u8, 3 << 20), "the hole was mapped again");
        assert!(!is_segment(old), "the old entry stays clear");
        assert!(is_segment(segment_of(q)));
        // SAFETY: q is our live huge block, moved with its bytes.
        unsafe {
            assert_eq!(*q.add(12345), 42);
            huge_free(segment_of(q), q);
        }
    }
}
