//! The segment map: "is this a hakmem segment header?", answered in O(1)
//! without a system call.
//!
//! One byte per 2 MiB of a 48-bit address space (128 MiB of
//! zero-initialised address space that is only faulted in where used: one
//! 4 KiB page of it covers 8 GiB). 48 bits cover the user address space of
//! x86-64 (47 bits with 4-level paging; 5-level paging maps above 2^47 only
//! for a program that asks with a hint there, which hakmem never does) and
//! of aarch64 Linux with 48-bit virtual addresses (its usual configuration).
//! A byte, not a bit: the checked `free` tests it with one load and
//! compare, where a bit map needs two more shifts and a bit test
//! (docs/BENCHMARKS.md, "Cost of the checks").

use crate::arch;
use crate::segment::{Segment, SEGMENT_SHIFT};
use crate::sync::{MapEntry, Ordering};

/// Bits of the address spaces the map covers (see the module doc).
const ADDRESS_BITS: usize = 48;
const MAP_LEN: usize = 1 << (ADDRESS_BITS - SEGMENT_SHIFT);

static SEGMENT_MAP: [MapEntry; MAP_LEN] = [const { MapEntry::new(0) }; MAP_LEN];

fn map_index(segment: usize) -> Option<usize> {
    let index = segment >> SEGMENT_SHIFT;
    // The last slot, the top 2 MiB below 2^48, is never a segment: on
    // x86-64 it lies outside the user address space (which ends one 4 KiB
    // page below 2^47); on 48-bit aarch64 the kernel keeps the main
    // thread's stack at the top and places mappings below it. `map_slot`
    // relies on it: a null pointer lands in that slot.
    (index < MAP_LEN - 1).then_some(index)
}

pub(crate) fn map_set(segment: *mut Segment, present: bool) {
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
/// A pointer outside the address space the map covers (bits 48 and up
/// set) shares a slot with one inside: `slot_segment` then names a real
/// segment that does not contain `p`, and callers must not trust `p` until
/// a test that involves `p`'s full value has passed (`Page::is_block_start`
/// fails for such a `p`: its offset from any block of that segment is at
/// least 2^48 - 4 MiB, which is more blocks than a span holds, and the
/// test is exact for every 64-bit offset).
#[inline(always)]
pub(crate) fn map_slot(p: *const u8) -> usize {
    ((p as usize).wrapping_sub(1) >> SEGMENT_SHIFT) & (MAP_LEN - 1)
}

/// Whether map slot `slot` (from `map_slot`) is a live hakmem segment: on
/// x86-64 one compare of the map byte against memory and a branch
/// (`arch::map_entry_is_set`; Acquire, pairing with `map_set`).
#[inline(always)]
pub(crate) fn slot_is_segment(slot: usize) -> bool {
    // SAFETY: slot < MAP_LEN (map_slot masks it): the entry is SEGMENT_MAP's.
    unsafe { arch::map_entry_is_set(SEGMENT_MAP.as_ptr(), slot) }
}

/// The segment header of map slot `slot`.
#[inline(always)]
pub(crate) fn slot_segment(slot: usize) -> *mut Segment {
    (slot << SEGMENT_SHIFT) as *mut Segment
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    use crate::segment::segment_of;
    use core::ptr;

    #[test]
    fn foreign_addresses_are_not_segments() {
        let x = 0u64;
        assert!(!is_segment(segment_of(&x as *const u64 as *const u8)));
        assert!(!is_segment(usize::MAX as *const Segment));
        assert!(!is_segment(ptr::null()));
    }
}
