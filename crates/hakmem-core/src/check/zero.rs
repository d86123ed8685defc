//! `malloc(0)` of the `secure` build: a unique pointer into a region no
//! one can read or write (`PROT_NONE`), so a program that uses the bytes
//! of a zero-sized block faults in that very access.
//!
//! The region is reserved once, at the first `malloc(0)`: a whole 2 MiB
//! window of the segment map (aligned to 2 MiB, so no segment or huge
//! block can share the window: the map says "no segment" for every
//! pointer into it), address space only, of `SLOTS` slots of 16 bytes.
//! Slot 0 is never handed out: `segment_of` looks at `p - 1`, which for
//! the window's first byte lies in the window before. A bitmap beside it
//! (in this module's static data) says which slots are handed out; a
//! cursor that only moves forward picks the next free one, so a freed
//! slot comes back only after every other slot has been tried (a dangling
//! pointer to a zero-sized block stays unique for as long as possible).
//! `free`, `realloc` and `malloc_usable_size` know a slot by its address
//! (one range compare, on the paths where the segment map found no
//! segment) and check that it is handed out: a slot freed twice, or a
//! pointer inside one, is reported as any other bad pointer.
//!
//! When the region cannot be had (the kernel refuses the mapping or the
//! protection) or its slots run short, `malloc(0)` falls back to an
//! ordinary block of the smallest class (which the canary guards).

use crate::os;
use crate::sync::plain::{AtomicU64, AtomicUsize};
use crate::sync::Ordering;

/// Bytes of the region: one window of the segment map.
const REGION_BYTES: usize = crate::segment::SEGMENT_SIZE;
/// Slots in the region (each 16 bytes: the alignment `malloc` promises).
const SLOTS: usize = REGION_BYTES / 16;
/// Slots `alloc` tries before it gives up on the region.
const TRIES: usize = 64;

/// The region's address; 0 before the first `malloc(0)`, `FAILED` when it
/// could not be had.
static BASE: AtomicUsize = AtomicUsize::new(0);
const FAILED: usize = 1;
/// A bit per slot: handed out.
static LIVE: [AtomicU64; SLOTS / 64] = [const { AtomicU64::new(0) }; SLOTS / 64];
/// The slot the next `alloc` tries first (modulo `SLOTS`).
static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// The region, reserved at the first call (null when it cannot be had).
fn region() -> usize {
    // Acquire: pairs with the Release of the CAS below, so a thread that
    // sees the address also sees the protection done before it.
    let base = BASE.load(Ordering::Acquire);
    if base != 0 {
        return base;
    }
    let p = os::map_aligned(REGION_BYTES, REGION_BYTES, 0);
    // SAFETY: p is this call's own fresh mapping, nothing handed out.
    let ours = if !p.is_null() && unsafe { os::protect_none(p, REGION_BYTES) } {
        p as usize
    } else {
        if !p.is_null() {
            // SAFETY: as above: mapped here, nothing handed out.
            unsafe { os::unmap(p, REGION_BYTES) };
        }
        FAILED
    };
    // Release/Acquire: publishes the protected region (or the failure);
    // the loser of a race reads the winner's.
    match BASE.compare_exchange(0, ours, Ordering::Release, Ordering::Acquire) {
        Ok(_) => ours,
        Err(theirs) => {
            if ours != FAILED {
                // SAFETY: the mapping is this call's and was never published.
                unsafe { os::unmap(ours as *mut u8, REGION_BYTES) };
            }
            theirs
        }
    }
}

/// A unique pointer for `malloc(0)`, or null (the caller falls back to an
/// ordinary block) when the region cannot be had or no slot was free
/// among the next `TRIES`.
pub(crate) fn alloc() -> *mut u8 {
    let base = region();
    if base == FAILED {
        return core::ptr::null_mut();
    }
    for _ in 0..TRIES {
        // Relaxed: the cursor only spreads the slots; the bit decides.
        let slot = CURSOR.fetch_add(1, Ordering::Relaxed) % SLOTS;
        if slot == 0 {
            // Its segment_of is the window before (see the module doc).
            continue;
        }
        let bit = 1u64 << (slot % 64);
        // Relaxed: the slot's memory is never touched; the bit alone says
        // who holds it, and each RMW sees every earlier one on the word.
        if LIVE[slot / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            return (base + slot * 16) as *mut u8;
        }
    }
    core::ptr::null_mut()
}

/// A zero-sized block for a request of `size` bytes aligned to `align`
/// (`malloc`, `calloc`): `Some` only for `size == 0` with at most the
/// slots' alignment, and when `alloc` has one.
#[inline]
pub(crate) fn alloc_zero_sized(size: usize, align: usize) -> Option<*mut u8> {
    if size != 0 || align > 16 {
        return None;
    }
    let p = alloc();
    (!p.is_null()).then_some(p)
}

/// Whether `p` lies in the region (a zero-sized block, live or not, or a
/// pointer into one).
#[inline]
pub(crate) fn contains(p: *const u8) -> bool {
    // Relaxed: an address handed out by `alloc` was read there after
    // `region`'s Acquire; any other p is not in the region whatever this
    // load sees.
    let base = BASE.load(Ordering::Relaxed);
    base > FAILED && (p as usize).wrapping_sub(base) < REGION_BYTES
}

/// Whether `p`, in the region, is a zero-sized block handed out and not
/// freed since; reports it as `function`'s bad pointer otherwise (and
/// returns false under `HAKMEM_ON_ERROR=warn`).
pub(crate) fn check(p: *const u8, function: &str) -> bool {
    debug_assert!(contains(p));
    // Relaxed: see `contains`.
    let offset = p as usize - BASE.load(Ordering::Relaxed);
    if !offset.is_multiple_of(16) {
        os::report_pointer(function, "invalid pointer (inside a zero-sized block)", p);
        return false;
    }
    let slot = offset / 16;
    // Relaxed: see `alloc`.
    if LIVE[slot / 64].load(Ordering::Relaxed) & (1u64 << (slot % 64)) == 0 {
        os::report_pointer(
            function,
            "double free or invalid pointer (a zero-sized block not handed out)",
            p,
        );
        return false;
    }
    true
}

/// Frees zero-sized block `p` (in the region): checked as `check` does,
/// then its slot is free again.
pub(crate) fn free(p: *const u8, function: &str) {
    // Relaxed: see `contains`.
    let offset = (p as usize).wrapping_sub(BASE.load(Ordering::Relaxed));
    let slot = offset / 16;
    let bit = 1u64 << (slot % 64);
    // Relaxed: see `alloc`. The RMW makes two racing frees of one slot
    // see each other: only one finds the bit set.
    if !offset.is_multiple_of(16) || LIVE[slot / 64].fetch_and(!bit, Ordering::Relaxed) & bit == 0 {
        // Reported by `check`, which finds the same fault (the bit is clear
        // now in either case).
        check(p, function);
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    #[test]
    fn zero_sized_blocks_are_unique_and_come_back_last() {
        let blocks: Vec<*mut u8> = (0..1000).map(|_| alloc()).collect();
        assert!(blocks
            .iter()
            .all(|p| !p.is_null() && contains(*p) && (*p as usize).is_multiple_of(16)));
        let mut sorted = blocks.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), blocks.len(), "every pointer is unique");
        assert!(blocks.iter().all(|&p| check(p, "test")));
        let first = blocks[0];
        for &p in &blocks {
            free(p, "test");
        }
        let again: Vec<*mut u8> = (0..1000).map(|_| alloc()).collect();
        assert!(!again.contains(&first), "a freed slot is not handed out at once");
        for &p in &again {
            free(p, "test");
        }
        assert!(!contains(core::ptr::null()));
        assert!(!contains(&again as *const _ as *const u8));
        // The region is a window of the segment map of its own: every
        // slot's segment_of is the region's start, which no segment holds.
        // Relaxed: read after alloc's Acquire, in this thread.
        let base = BASE.load(Ordering::Relaxed);
        assert!(base.is_multiple_of(REGION_BYTES));
        for &p in blocks.iter().chain(&again) {
            assert_ne!(p as usize, base, "slot 0 is never handed out");
            assert_eq!(crate::segment::segment_of(p) as usize, base);
            assert!(!crate::segment::map::is_segment(crate::segment::segment_of(p)));
        }
    }
}
