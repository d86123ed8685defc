//! The `secure` build's huge blocks: placed between guard pages, and
//! freed into quarantine (`PROT_NONE`, out of the segment map) for reuse
//! only after more huge frees (see the module doc of `huge`).

use super::cache::HUGE_CACHE_SLOTS;
use super::{cache_freed, huge_offset, huge_unmap, publish, HUGE_CACHE};
use crate::check::secure;
use crate::os;
use crate::segment::arena::{advise_thp, NO_CACHES};
use crate::segment::map::map_set;
use crate::segment::{Segment, PAGE_SIZE, SEGMENT_SIZE};
use crate::stats;
use core::ptr;

/// `huge_alloc` of the `secure` build. The mapping is `[header unit | guard
/// pages | the block | guard page]`:
///
/// * alignments up to an OS page: the block ends against the last guard
///   page, at a multiple of 16 (a 1-byte overflow of a block whose size is
///   a multiple of 16 faults at once), and starts in the first page after
///   the guards before it, whose bytes in front of it are canary (`CANARY`);
/// * larger alignments: the block at the offset of its alignment (a page
///   boundary, so the guard is right before it), the bytes between its end
///   and the last guard page canary.
///
/// The guard before the block is the header unit's last page, extended to
/// the block's first page. Every byte of a linear overflow or underflow
/// beyond the canaries faults; the canaries are checked on `free` and
/// `realloc` (`huge_check`). The block is zero: fresh from the OS, or
/// zeroed as its mapping leaves quarantine.
#[cfg(feature = "secure")]
pub(super) fn secure_alloc(size: usize, align: usize) -> (*mut u8, bool) {
    let page = os::page_size();
    let round = |n: usize, to: usize| n.checked_add(to - 1).map(|n| n & !(to - 1));
    // Room for the freed mark that `free` writes (a zero-sized block too).
    let room = size.max(crate::small::page::MIN_BLOCK_SIZE);
    let (offset, data) = if align <= page {
        let Some(data) = round(room, page) else {
            return (ptr::null_mut(), false);
        };
        let Some(placed) = round(room, align.max(crate::MIN_ALIGN)) else {
            return (ptr::null_mut(), false);
        };
        // placed <= data: the block ends against the last guard page; the
        // sum cannot overflow (data alone may come within a page of
        // usize::MAX: `total` below refuses it).
        (PAGE_SIZE + (data - placed), data)
    } else {
        let Some(data) = round(room, page) else {
            return (ptr::null_mut(), false);
        };
        (huge_offset(align), data)
    };
    let block_pages_at = (offset - PAGE_SIZE) & !(page - 1);
    let Some(total) = (PAGE_SIZE + block_pages_at)
        .checked_add(data)
        .and_then(|t| t.checked_add(page))
        .filter(|&t| t <= isize::MAX as usize)
    else {
        return (ptr::null_mut(), false);
    };
    // The layout that ends the block against the last guard page, which
    // a larger quarantined mapping can take by moving the block up whole
    // OS pages.
    if align <= page {
        let reused = quarantine_take(total);
        if !reused.is_null() {
            // `quarantine_take` bounds its size to `quarantine_reuse`'s needs.
            // SAFETY: off the quarantine, unused and ours; align <= page.
            if let Some(p) = unsafe { quarantine_reuse(reused, total, offset, size) } {
                return (p, true);
            }
            // SAFETY: as above; the kernel refused to open it again.
            unsafe { huge_unmap(reused) };
        }
    }
    let map = || {
        let p = if align > SEGMENT_SIZE {
            os::map_aligned(total, align, SEGMENT_SIZE)
        } else {
            os::map_aligned(total, SEGMENT_SIZE, 0)
        };
        p as *mut Segment
    };
    let mut segment = map();
    // Non-short-circuit `|`: both give back what they hold.
    if segment.is_null() && (quarantine_release(total) | crate::segment::purge::unmap_cached(total)) {
        // Out of address space (or memory): what waits in quarantine goes
        // first, as a cache would, and the cached segments.
        segment = map();
    }
    if segment.is_null() {
        return (ptr::null_mut(), false);
    }
    crate::policy::huge_mapped(total);
    advise_thp(segment as *mut u8, total);
    let base = segment as *mut u8;
    let p = (segment as usize + offset) as *mut u8;
    // SAFETY: the ranges lie inside the fresh mapping: the guards (the
    // header unit's last page up to the block's first page, and the last
    // page) and the canaries around the block, which is not handed out yet.
    unsafe {
        if !os::protect_none(base.add(PAGE_SIZE - page), page + block_pages_at)
            || !os::protect_none(base.add(total - page), page)
        {
            // No huge block without its guards (the kernel is out of
            // mapping records): the caller sees no memory.
            os::unmap(base, total);
            return (ptr::null_mut(), false);
        }
        let first = base.add(PAGE_SIZE + block_pages_at);
        secure::fill(first, p as usize - first as usize);
        let end = p.add(size);
        huge_tail_canary(end, base.add(total - page) as usize - end as usize);
        publish(segment, total, offset);
        (*segment).huge_size = size;
    }
    (p, true)
}

/// Huge frees a quarantined mapping waits at least before it is handed
/// out again (`secure`): a dangling pointer to a freed huge block faults
/// (its pages are `PROT_NONE` in quarantine) for that long at least, and
/// then meets a block of a randomly chosen later owner.
#[cfg(feature = "secure")]
pub(super) const QUARANTINE_FREES: u64 = 8;

/// Largest quarantined mapping (`secure`, bytes after the header unit)
/// kept resident, to be zeroed when handed out again; larger ones are
/// purged as they go in (the next owner faults in only what it touches).
#[cfg(feature = "secure")]
pub(super) const QUARANTINE_RESIDENT_MAX: usize = 256 << 10;

/// Takes a mapping of `total` to `2 * total` bytes (at most 1.875 MiB
/// more) out of quarantine (`secure`): one chosen at random among those
/// freed at least `QUARANTINE_FREES` huge frees ago, or null.
#[cfg(feature = "secure")]
pub(super) fn quarantine_take(total: usize) -> *mut Segment {
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; cached segments are unused huge segments.
    let found = unsafe {
        let slots = &mut *HUGE_CACHE.slots.get();
        let now = *HUGE_CACHE.frees.get();
        let ready = |s: *mut Segment| {
            // The block moves up by the difference: it must still start
            // in the mapping's first segment (`segment_of`).
            !s.is_null()
                && (*s).mapping_size >= total
                && (*s).mapping_size - total <= total.min(SEGMENT_SIZE - 2 * PAGE_SIZE)
                && now - (*s).quarantined_at >= QUARANTINE_FREES
        };
        let count = slots.iter().filter(|&&s| ready(s)).count();
        if count == 0 {
            ptr::null_mut()
        } else {
            let rng = &mut *HUGE_CACHE.rng.get();
            if *rng == 0 {
                *rng = os::random_usize() as u64 | 1;
            }
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            let pick = (*rng % count as u64) as usize;
            let i = (0..HUGE_CACHE_SLOTS)
                .filter(|&i| ready(slots[i]))
                .nth(pick)
                .unwrap_or(0);
            let s = slots[i];
            slots[i] = ptr::null_mut();
            *HUGE_CACHE.bytes.get() -= (*s).mapping_size;
            s
        }
    };
    HUGE_CACHE.lock.unlock();
    found
}

/// Unmaps every quarantined mapping (`secure`, when the OS refuses a new
/// one of `needed` bytes), but only when they hold at least that much:
/// a request no release could serve (`malloc` of a terabyte) must not
/// cut every dangling pointer's quarantine short. Returns whether it did.
#[cfg(feature = "secure")]
pub(super) fn quarantine_release(needed: usize) -> bool {
    super::cache::unmap_slots(needed)
}

/// Hands quarantined mapping `segment` out again for a block of `size`
/// bytes (`secure`): the layout `secure_alloc` gives a mapping of `total`
/// bytes and `offset`, moved up by however much larger `segment` is, so
/// that the block still ends against the last guard page and the pages
/// before it stay `PROT_NONE` (the guard before it). Opens the block's
/// pages, zeroes the block (no old data shows), writes the canaries and
/// enters the segment in the map. Returns the block (zero), or None when
/// the kernel refuses to open the pages.
///
/// # Safety
/// `segment` must be a huge mapping taken off the quarantine of at least
/// `total` and at most `total + SEGMENT_SIZE - 2 * PAGE_SIZE` bytes (so
/// that the moved block still starts in the first segment: `segment_of`),
/// and `offset` the layout of `secure_alloc` for `total` and an alignment
/// of at most an OS page.
#[cfg(feature = "secure")]
pub(super) unsafe fn quarantine_reuse(
    segment: *mut Segment,
    total: usize,
    offset: usize,
    size: usize,
) -> Option<*mut u8> {
    let page = os::page_size();
    let base = segment as *mut u8;
    // SAFETY: the caller's guarantee: the mapping holds the header unit,
    // then at least `total - PAGE_SIZE` bytes ending in the guard page.
    unsafe {
        let mapping = (*segment).mapping_size;
        let offset = offset + (mapping - total);
        let first = base.add(mapping - total + PAGE_SIZE);
        let guard = base.add(mapping - page);
        if !os::protect_rw(first, guard as usize - first as usize) {
            return None;
        }
        let p = base.add(offset);
        if (*segment).purged_units != 0 {
            // Purged in quarantine: the pages read as zero already.
            (*segment).purged_units = 0;
            stats::committed((mapping - PAGE_SIZE) as isize);
            if mapping - PAGE_SIZE <= QUARANTINE_RESIDENT_MAX {
                // Purged by the delay (larger ones are purged as they go
                // in, which is no decision of the policy's to weigh).
                crate::policy::recommitted(mapping - PAGE_SIZE);
            }
        } else {
            core::ptr::write_bytes(p, 0, size);
        }
        secure::fill(first, p as usize - first as usize);
        let end = p.add(size);
        huge_tail_canary(end, guard as usize - end as usize);
        (*segment).huge_block_offset = offset;
        (*segment).huge_size = size;
        crate::policy::huge_hit(mapping);
        stats::huge_in_use(1);
        map_set(segment, true);
        Some(p)
    }
}

/// Puts the mapping of freed huge block `segment` in quarantine (`secure`):
/// out of the map first (a pointer into it is foreign from then on, its
/// double free reported as such), then every page after its header unit
/// made `PROT_NONE` (a write or read after free faults), whatever the
/// layout it had. Returns the segment to unmap instead (this one, or one it
/// displaced), or null.
///
/// # Safety
/// `segment` must be a huge segment whose block was just freed, in no list.
#[cfg(feature = "secure")]
pub(super) unsafe fn quarantine_put(segment: *mut Segment, delay: i64) -> *mut Segment {
    let page = os::page_size();
    // The quarantine's clock is only touched with its lock held; the
    // segment is read only before it goes into the cache (another thread
    // may take it from there at once).
    // SAFETY: the caller's guarantee (an unused huge segment, ours).
    unsafe {
        let total = (*segment).mapping_size;
        if delay == 0 || NO_CACHES {
            return segment;
        }
        map_set(segment, false);
        let first = (segment as *mut u8).add(PAGE_SIZE);
        if total - PAGE_SIZE > QUARANTINE_RESIDENT_MAX && os::purge(first, total - PAGE_SIZE) {
            // Zeroing it on reuse would cost more than the faults of the
            // pages the next owner touches.
            stats::committed(-((total - PAGE_SIZE) as isize));
            (*segment).purged_units = 1;
            (*segment).dirty_units = 0;
            (*segment).purge_at_ms = 0;
        } else {
            // Kept resident, or the purge was refused (locked memory, a
            // sandbox): dirty, zeroed when handed out again.
            (*segment).dirty_units = 1;
            (*segment).purge_at_ms = if delay > 0 { os::now_ms() + delay as u64 } else { 0 };
        }
        if !os::protect_none(first, total - PAGE_SIZE - page) {
            // A mapping that cannot be closed does not wait in quarantine
            // (a dangling pointer would reach it): it is unmapped.
            return segment;
        }
        HUGE_CACHE.lock.lock();
        *HUGE_CACHE.frees.get() += 1;
        (*segment).quarantined_at = *HUGE_CACHE.frees.get();
        HUGE_CACHE.lock.unlock();
        let deadline = (*segment).purge_at_ms;
        cache_freed(segment, deadline)
    }
}

/// Checks the canaries around huge block `p` of `segment` (`secure`): the
/// bytes between the guard before it and its start hold `CANARY`, those
/// between its end and the guard after it a zero, `CANARY` bytes and a
/// zero as the last (else
/// `hakmem: heap overflow` or
/// `underflow ... found by <found_by>`). Returns the block's size.
///
/// # Safety
/// `segment` must be the live huge segment of block `p`.
#[cfg(feature = "secure")]
pub(crate) unsafe fn huge_check(segment: *const Segment, p: *const u8, found_by: &str) -> usize {
    let page = os::page_size();
    // SAFETY: the caller's guarantee: the canaries lie in the mapping,
    // outside its guard pages.
    unsafe {
        let size = (*segment).huge_size;
        let first = (p as usize & !(page - 1)) as *const u8;
        let end = p.add(size);
        let guard = (segment as *const u8).add((*segment).mapping_size - page);
        let tail = guard as usize - end as usize;
        if !secure::canary_intact(end, tail) {
            let at = secure::first_bad_canary(end, tail).unwrap_or(0);
            secure::report(
                secure::Corruption::Overflow,
                p,
                Some(size),
                (size + at) as isize,
                found_by,
            );
        }
        let head = p as usize - first as usize;
        if !secure::is_canary_fill(first, head) {
            secure::report(secure::Corruption::Underflow, p, Some(size), -1, found_by);
        }
        size
    }
}

/// Writes the canary between a huge block's end and the guard after it,
/// its last byte included (no other block's `free` reads it; the bytes may
/// hold an earlier block's data).
///
/// # Safety
/// `[end, end + len)` must be writable and belong to the caller's block's
/// mapping.
#[cfg(feature = "secure")]
unsafe fn huge_tail_canary(end: *mut u8, len: usize) {
    // The last byte is zeroed first, as write_canary requires.
    // SAFETY: the caller's guarantee: [end, end + len) is writable.
    unsafe {
        if len > 0 {
            *end.add(len - 1) = 0;
        }
        secure::write_canary(end, len);
    }
}

/// `keep_freed` of the `secure` build: the mapping goes into quarantine,
/// so a dangling pointer faults until it is handed out again.
///
/// # Safety
/// As `keep_freed`.
#[cfg(feature = "secure")]
pub(super) unsafe fn keep_freed(segment: *mut Segment, _p: *const u8, delay: i64) -> *mut Segment {
    // SAFETY: the caller's guarantee.
    unsafe { quarantine_put(segment, delay) }
}
