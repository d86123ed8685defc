//! The `secure` build's layout constants and its checks of block contents:
//! canaries after every block, the zeroing of freed memory, and the
//! reports (`hakmem: heap overflow`, `heap underflow`, `write after free`).
//!
//! Without the feature everything here is a constant that makes the
//! callers' code vanish (`padded(size) == size`, `CLASS_SIZE_MAX ==
//! MEDIUM_SIZE_MAX`); the byte-level helpers are compiled only with it.
//!
//! # The secure layout (docs/DESIGN.md, "The secure build")
//!
//! * Every 64 KiB unit of a segment ends with a guard page (`PROT_NONE`, the
//!   OS page size), the header's unit included, so a write running off a
//!   block hits one within 64 KiB.
//! * A unit holding blocks starts with a 4 KiB table (`UNIT_TABLE_BYTES`):
//!   the size each live block was asked for, a `u16` per block (`CANARY`
//!   bytes for a block never handed out), its last byte zero. Blocks
//!   follow from `unit + 4 KiB`, so a linear overflow of one block never
//!   reaches a table without crossing a guard first.
//!   A span of several units (the classes above 8 KiB,
//!   `class::span_pages`) repeats that layout in each: no block straddles
//!   two units, so the largest class is still what one unit holds beside
//!   its table and guard page. Larger blocks are huge (their own mapping,
//!   the block placed against a guard page after it, a guard page before).
//! * The last byte of every slot is zero from carving on and never
//!   written by hakmem (the table's last byte, in front of the first block,
//!   too), so `free(p)` checks the byte before `p` for underflows without
//!   racing the previous block's holder, who writes only the bytes before.
//! * A block of `bs` bytes asked for `r` has `r + 1 <= bs` (`padded`):
//!   bytes `[r, bs)` are its canary, checked on `free` and `realloc`: a
//!   zero at `r` (a C string that fills the block ends there, as one that
//!   fills a block of exactly its size would in any other allocator), then
//!   `CANARY` bytes, then the slot's last byte, zero (for a block above
//!   `WHOLE_ZERO_MAX`: `CANARY` bytes up to `r + EDGE_BYTES` only, and the
//!   slot's last byte).
//! * A free block of at most `WHOLE_ZERO_MAX` bytes is `[link][freed
//!   mark][0 ...]`: `free` zeroes `[16, bs - 1)` (old data never survives
//!   a `free`), `malloc` checks the mark and that `[16, bs)` is still zero
//!   before handing the block out, zeroes the link and the mark and writes
//!   the canary, so a block reads as zero up to its requested size
//!   (`calloc` has nothing left to clear). A larger one holds zeroes only
//!   at its edges, `[16, EDGE_BYTES)` and `[bs - EDGE_BYTES, bs)`, and its
//!   canary is `EDGE_BYTES` long (plus the slot's last byte): its middle
//!   keeps old data, which `calloc` clears (`zero_ranges`,
//!   `canary_end`). Blocks carved from fresh OS memory are zero already;
//!   others get their zeroes as carved.

#[cfg(feature = "secure")]
use crate::os;

/// The byte of canaries after a block's first canary byte (which is
/// zero), and of the unit tables' size slots never handed out (`secure`).
#[cfg(feature = "secure")]
pub(crate) const CANARY: u8 = 0xDE;

/// The smallest block of the secure build: a free block holds its link,
/// its freed mark, and at least one zero byte at its end.
#[cfg(feature = "secure")]
const SECURE_MIN_BLOCK: usize = 32;

/// Bytes at the start of every unit holding blocks (`secure`): the table
/// of requested sizes (a `u16` per block: at most 1792 blocks of 32 bytes
/// fit the 56 KiB behind it) and `CANARY` padding up to the first block.
pub(crate) const UNIT_TABLE_BYTES: usize = if cfg!(feature = "secure") { 4096 } else { 0 };

/// Largest block size served from a size class. `secure`: the largest class
/// that fits a unit beside its table and a guard page of up to 16 KiB (the
/// OS page sizes in use; larger ones are refused at start-up).
pub(crate) const CLASS_SIZE_MAX: usize = if cfg!(feature = "secure") {
    40 * 1024
} else {
    crate::small::class::MEDIUM_SIZE_MAX
};

/// Largest alignment served from a size class (`secure`: blocks start 4
/// KiB into their unit, so larger alignments get a huge block).
pub(crate) const CLASS_ALIGN_MAX: usize = if cfg!(feature = "secure") {
    4096
} else {
    crate::segment::PAGE_SIZE
};

/// Bytes a request of `size` needs from a size class: `size` itself, or
/// (`secure`) one canary byte more, and never a 16-byte block.
#[inline(always)]
pub(crate) fn padded(size: usize) -> usize {
    #[cfg(feature = "secure")]
    return size.saturating_add(1).max(SECURE_MIN_BLOCK - 15);
    #[cfg(not(feature = "secure"))]
    size
}

/// Bytes of the guard page at the end of every unit (`secure`: the OS
/// page; 0 otherwise).
#[inline]
pub(crate) fn guard_bytes() -> usize {
    #[cfg(feature = "secure")]
    return os::page_size();
    #[cfg(not(feature = "secure"))]
    0
}

/// Bytes of blocks a unit holds (`secure`): all but its table and its
/// guard page (the whole unit otherwise). Every span of several units
/// holds `unit_block_bytes() / block_size` blocks in each
/// (`class::span_pages`, `refill::page_alloc`).
#[inline]
pub(crate) fn unit_block_bytes() -> usize {
    crate::segment::PAGE_SIZE - UNIT_TABLE_BYTES - guard_bytes()
}

/// Refuses to run where the layout does not fit (`secure`, at start-up): a
/// unit must hold its table, a guard page and a block of `CLASS_SIZE_MAX`.
#[cfg(feature = "secure")]
pub(crate) fn check_page_size() {
    let page = os::page_size();
    if UNIT_TABLE_BYTES + page + CLASS_SIZE_MAX > crate::segment::PAGE_SIZE {
        let mut line = os::Line::new();
        line.push(b"hakmem: the secure build needs OS pages of at most 16 KiB (this system's: ");
        line.push_usize(page);
        line.push(b" bytes)\n");
        line.write();
        os::abort();
    }
}

/// At exit (`secure`, registered with `atexit`): checks the free blocks of
/// the exiting thread's pages (`Page::check_free_blocks`), so a write after
/// free is reported even when no block is handed out again and no page
/// given back after it.
#[cfg(all(feature = "secure", not(hakmem_loom)))]
pub(crate) extern "C" fn check_at_exit() {
    let heap = crate::thread::heap();
    if crate::thread::heap::is_static_heap(heap) {
        return;
    }
    // SAFETY: heap is the calling thread's own; its segments, their pages
    // in use and those pages' free lists are its alone.
    unsafe {
        let mut seg = (*heap).segments;
        while !seg.is_null() {
            for page in (*seg).pages.iter().filter(|page| page.in_use) {
                page.check_free_blocks("exit()");
            }
            seg = (*seg).next;
        }
    }
}

/// Bytes to compare blocks with: zeroes (`is_zero`) and `CANARY` bytes.
#[cfg(feature = "secure")]
static ZEROES: [u8; 4096] = [0; 4096];
#[cfg(feature = "secure")]
static CANARIES: [u8; 4096] = [CANARY; 4096];

/// Whether the `len` bytes at `p` all equal the bytes of `pattern`:
/// compared a page at a time by the C library's `memcmp`/`bcmp`
/// (vectorised for the machine it runs on: twice as fast as the portable
/// word loop on a block of a few hundred bytes).
///
/// # Safety
/// `[p, p + len)` must be readable.
#[cfg(feature = "secure")]
#[inline]
unsafe fn holds(p: *const u8, len: usize, pattern: &[u8; 4096]) -> bool {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(pattern.len());
        // SAFETY: the caller's guarantee; n bytes from done lie inside.
        let bytes = unsafe { core::slice::from_raw_parts(p.add(done), n) };
        if bytes != &pattern[..n] {
            return false;
        }
        done += n;
    }
    true
}

/// Whether the `len` bytes at `p` are all zero (a free block's body).
///
/// # Safety
/// `[p, p + len)` must be readable.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn is_zero(p: *const u8, len: usize) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { holds(p, len, &ZEROES) }
}

/// Whether the `len` bytes at `p` all hold `CANARY` (the canary in front
/// of a huge block).
///
/// # Safety
/// `[p, p + len)` must be readable.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn is_canary_fill(p: *const u8, len: usize) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { holds(p, len, &CANARIES) }
}

/// The offset of the first byte of `[p, p + len)` that is not zero.
///
/// # Safety
/// `[p, p + len)` must be readable.
#[cfg(feature = "secure")]
#[cold]
pub(crate) unsafe fn first_nonzero(p: *const u8, len: usize) -> Option<usize> {
    // SAFETY: the caller's guarantee.
    (0..len).find(|&i| unsafe { *p.add(i) } != 0)
}

/// Whether the canary `[p, p + len)` is intact: a zero byte, `CANARY`
/// bytes, and a zero as its last byte (the slot's, never written after
/// carving); true for `len == 0`.
///
/// # Safety
/// `[p, p + len)` must be readable.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn canary_intact(p: *const u8, len: usize) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { len == 0 || (*p == 0 && *p.add(len - 1) == 0 && holds(p.add(1), len.saturating_sub(2), &CANARIES)) }
}

/// The offset of the first byte of the canary `[p, p + len)` that is not
/// what `write_canary` wrote there.
///
/// # Safety
/// `[p, p + len)` must be readable.
#[cfg(feature = "secure")]
#[cold]
pub(crate) unsafe fn first_bad_canary(p: *const u8, len: usize) -> Option<usize> {
    // SAFETY: the caller's guarantee.
    (0..len).find(|&i| unsafe { *p.add(i) } != if i == 0 || i == len - 1 { 0 } else { CANARY })
}

/// Writes a canary over `[p, p + len)` whose last byte is zero already
/// (a slot's last byte: zero from carving on, and never written, since
/// `free` of the next block reads it without synchronisation): a zero
/// byte, then `CANARY` bytes up to the last, which is left alone.
///
/// # Safety
/// `[p, p + len - 1)` must be writable and the caller's; `p[len - 1]`
/// readable and zero.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn write_canary(p: *mut u8, len: usize) {
    if len > 1 {
        // SAFETY: the caller's guarantee.
        unsafe {
            *p = 0;
            fill(p.add(1), len - 2);
        }
    }
}

/// Where the canary of a live slot of `bs` bytes asked for `size` (`size
/// < bs`) is checked (`secure`): `[size, end)` and the slot's last byte,
/// with `end = bs` for a slot of at most `WHOLE_ZERO_MAX` bytes (the
/// whole slack), else at most `EDGE_BYTES` past `size` (a linear overflow
/// crosses them first; writing and checking the whole slack of a large
/// block costs as much as zeroing it).
#[cfg(feature = "secure")]
#[inline(always)]
pub(crate) fn canary_end(size: usize, bs: usize) -> usize {
    if bs <= WHOLE_ZERO_MAX {
        bs
    } else {
        (size + EDGE_BYTES).min(bs)
    }
}

/// Whether the canary of the live slot `p` of `bs` bytes asked for `size`
/// is intact (`canary_end`): a zero at `size`, `CANARY` bytes up to `end`
/// (or to the slot's last byte, when `end == bs`), and the slot's last
/// byte zero.
///
/// # Safety
/// `[p, p + bs)` must be readable; `size < bs`.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn slot_canary_intact(p: *const u8, size: usize, bs: usize) -> bool {
    let end = canary_end(size, bs);
    if end == bs {
        // SAFETY: the caller's guarantee.
        return unsafe { canary_intact(p.add(size), bs - size) };
    }
    // SAFETY: the caller's guarantee: size < end < bs.
    unsafe { *p.add(size) == 0 && *p.add(bs - 1) == 0 && holds(p.add(size + 1), end - size - 1, &CANARIES) }
}

/// The offset in the slot of the first byte of `p`'s canary that is not
/// what `write_slot_canary` wrote there.
///
/// # Safety
/// As for `slot_canary_intact`.
#[cfg(feature = "secure")]
#[cold]
pub(crate) unsafe fn first_bad_slot_canary(p: *const u8, size: usize, bs: usize) -> Option<usize> {
    let end = canary_end(size, bs);
    if end == bs {
        // SAFETY: the caller's guarantee.
        return unsafe { first_bad_canary(p.add(size), bs - size) }.map(|i| size + i);
    }
    // SAFETY: the caller's guarantee: the offsets lie in the slot.
    let bad = |i: usize| unsafe { *p.add(i) } != if i == size || i == bs - 1 { 0 } else { CANARY };
    (size..end).chain(core::iter::once(bs - 1)).find(|&i| bad(i))
}

/// Writes the canary of the live slot `p` of `bs` bytes asked for `size`
/// (`canary_end`); the slot's last byte is zero already and left alone.
///
/// # Safety
/// `[p + size, p + bs - 1)` must be writable and the caller's, `p[bs - 1]`
/// zero; `size < bs`.
#[cfg(feature = "secure")]
#[inline(always)]
pub(crate) unsafe fn write_slot_canary(p: *mut u8, size: usize, bs: usize) {
    let end = canary_end(size, bs);
    if end == bs {
        // SAFETY: the caller's guarantee.
        unsafe { write_canary(p.add(size), bs - size) };
    } else {
        // SAFETY: the caller's guarantee: size < end < bs.
        unsafe {
            *p.add(size) = 0;
            fill(p.add(size + 1), end - size - 1);
        }
    }
}

/// Writes `CANARY` over `[p, p + len)`.
///
/// # Safety
/// `[p, p + len)` must be writable and the caller's.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn fill(p: *mut u8, len: usize) {
    // SAFETY: the caller's guarantee.
    unsafe { core::ptr::write_bytes(p, CANARY, len) };
}

/// Fills a unit's table (`UNIT_TABLE_BYTES` at `table`) for a page whose
/// `blocks` blocks in the unit are taking it: their size slots read
/// 0xDEDE (never handed out), and the table's last byte, the one in front
/// of the unit's first block, is zero (see the module doc: it is never
/// written again while blocks live there). The bytes between are never
/// read.
///
/// # Safety
/// The table must be writable, and the unit hold no live block; `blocks`
/// slots fit in front of its last byte.
#[cfg(feature = "secure")]
pub(crate) unsafe fn fill_table(table: *mut u8, blocks: usize) {
    debug_assert!(2 * blocks < UNIT_TABLE_BYTES);
    // SAFETY: the caller's guarantee.
    unsafe {
        fill(table, 2 * blocks);
        *table.add(UNIT_TABLE_BYTES - 1) = 0;
    }
}

/// Largest block size (`secure`) whose whole body `free` zeroes and
/// `malloc` checks (and whose whole slack is canary); larger blocks get
/// only their edges: `EDGE_BYTES` of zeroes at each end while free, and a
/// canary of `EDGE_BYTES` past the requested size while live. Zeroing and
/// checking every byte of a 4–40 KiB block costs more than the rest of
/// `malloc` and `free` together (docs/BENCHMARKS.md, "Secure build:
/// whole blocks or their edges").
#[cfg(feature = "secure")]
pub(crate) const WHOLE_ZERO_MAX: usize = 4096;

/// Bytes at each end of a slot larger than `WHOLE_ZERO_MAX` that hold
/// zeroes while the block is free (the first 16 excepted: link and mark),
/// and the length of such a block's canary: a cache line's worth, where a
/// dangling pointer's writes to a header or to the first fields of a
/// struct, and a linear overflow's first bytes, land.
#[cfg(feature = "secure")]
pub(crate) const EDGE_BYTES: usize = 64;

/// The byte ranges of a free slot of `bs` bytes that hold zeroes (`secure`,
/// both checked by `malloc`): `[16, bs)` for a slot of at most
/// `WHOLE_ZERO_MAX` bytes (the second range empty), else `[16,
/// EDGE_BYTES)` and `[bs - EDGE_BYTES, bs)`. The slot's last byte is in
/// the last range: zero from carving on, never written.
#[cfg(feature = "secure")]
#[inline(always)]
pub(crate) fn zero_ranges(bs: usize) -> [(usize, usize); 2] {
    if bs <= WHOLE_ZERO_MAX {
        [(16, bs), (bs, bs)]
    } else {
        [(16, EDGE_BYTES), (bs - EDGE_BYTES, bs)]
    }
}

/// Zeroes what a free slot of `bs` bytes at `p` holds as zeroes
/// (`zero_ranges`) but its last byte (`free`).
///
/// # Safety
/// `[p + 16, p + bs - 1)` must be writable and the caller's.
#[cfg(feature = "secure")]
#[inline(always)]
pub(crate) unsafe fn zero_free_body(p: *mut u8, bs: usize) {
    for (start, end) in zero_ranges(bs) {
        let end = end.min(bs - 1);
        if start < end {
            // SAFETY: the caller's guarantee; [start, end) lies inside it.
            unsafe { zero(p.add(start), end - start) };
        }
    }
}

/// Whether a free slot of `bs` bytes at `p` holds zeroes where free slots
/// do (`zero_ranges`).
///
/// # Safety
/// `[p, p + bs)` must be readable.
#[cfg(feature = "secure")]
#[inline(always)]
pub(crate) unsafe fn free_body_is_zero(p: *const u8, bs: usize) -> bool {
    zero_ranges(bs)
        .iter()
        // SAFETY: the caller's guarantee; the ranges lie inside the slot.
        .all(|&(start, end)| unsafe { is_zero(p.add(start), end - start) })
}

/// The offset of the first byte of a free slot of `bs` bytes at `p` that
/// should hold a zero and does not (`zero_ranges`).
///
/// # Safety
/// `[p, p + bs)` must be readable.
#[cfg(feature = "secure")]
#[cold]
pub(crate) unsafe fn first_nonzero_in_body(p: *const u8, bs: usize) -> Option<usize> {
    zero_ranges(bs)
        .iter()
        // SAFETY: the caller's guarantee; the ranges lie inside the slot.
        .find_map(|&(start, end)| unsafe { first_nonzero(p.add(start), end - start) }.map(|i| start + i))
}

/// Zeroes what must read as zero in `n` contiguous slots of `bs` bytes
/// at `p` being carved from memory that held other data (`zero_ranges`,
/// their last bytes included: no block lives there yet).
///
/// # Safety
/// `[p, p + n * bs)` must be writable, the caller's, and hold no live block.
#[cfg(feature = "secure")]
pub(crate) unsafe fn zero_carved(p: *mut u8, n: usize, bs: usize) {
    if bs <= WHOLE_ZERO_MAX {
        // SAFETY: the caller's guarantee.
        unsafe { zero(p, n * bs) };
        return;
    }
    for i in 0..n {
        for (start, end) in zero_ranges(bs) {
            // SAFETY: the caller's guarantee; slot i's range lies inside.
            unsafe { zero(p.add(i * bs + start), end - start) };
        }
    }
}

/// Writes zeroes over `[p, p + len)`.
///
/// # Safety
/// `[p, p + len)` must be writable and the caller's.
#[cfg(feature = "secure")]
#[inline]
pub(crate) unsafe fn zero(p: *mut u8, len: usize) {
    // SAFETY: the caller's guarantee.
    unsafe { core::ptr::write_bytes(p, 0, len) };
}

/// Zeroes the two words of a block that hold its link and its freed mark
/// while it is free (`malloc`, handing the block out).
///
/// # Safety
/// `block` must be a block of at least 16 bytes the caller holds.
#[cfg(feature = "secure")]
#[inline(always)]
pub(crate) unsafe fn clear_header(block: *mut u8) {
    // SAFETY: the caller's guarantee; blocks are 16-byte aligned.
    unsafe {
        (block as *mut u64).write(0);
        (block as *mut u64).add(1).write(0);
    }
}

/// What was found wrong with a block.
#[cfg(feature = "secure")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Corruption {
    /// A byte past the requested size was written.
    Overflow,
    /// The byte before the block was written.
    Underflow,
    /// The block was written while free.
    WriteAfterFree,
}

/// Reports a corrupted block and aborts (always: the heap can no longer be
/// trusted, whatever `HAKMEM_ON_ERROR` says about bad pointers):
///
/// `hakmem: heap overflow: block 0x... of size 32: first corrupted byte at
/// offset 32 (0x...), found by free()`
///
/// `size` is the size the block was asked for (for a write after free:
/// when it was last handed out; `None` when never); `offset` is from the
/// block's start (negative before it); `found_by` names the call or the
/// moment that looked.
#[cfg(feature = "secure")]
#[cold]
#[inline(never)]
pub(crate) fn report(what: Corruption, block: *const u8, size: Option<usize>, offset: isize, found_by: &str) -> ! {
    let mut line = os::Line::new();
    line.push(match what {
        Corruption::Overflow => b"hakmem: heap overflow: block ".as_slice(),
        Corruption::Underflow => b"hakmem: heap underflow: block ",
        Corruption::WriteAfterFree => b"hakmem: write after free: block ",
    });
    line.push_hex(block as usize);
    match size {
        Some(size) => {
            line.push(b" of size ");
            line.push_usize(size);
        }
        None => line.push(b" (never handed out)"),
    }
    line.push(match what {
        Corruption::Underflow => b": corrupted byte at offset ".as_slice(),
        _ => b": first corrupted byte at offset ",
    });
    line.push_i64(offset as i64);
    line.push(b" (");
    line.push_hex((block as usize).wrapping_add_signed(offset));
    line.push(b"), found by ");
    line.push(found_by.as_bytes());
    line.push(b"\n");
    line.write();
    os::abort()
}

#[cfg(all(test, feature = "secure", not(hakmem_loom)))]
mod tests {
    use super::*;
    extern crate std;

    #[test]
    fn zero_and_canary_checks_find_any_other_byte_at_any_offset_and_alignment() {
        let mut zeroes = [0u8; 200];
        for start in 0..16 {
            for len in 0..(200 - start) {
                // A canary of len bytes at start: 0, CANARY..., 0.
                let mut canary = [0x77u8; 200];
                for (i, b) in canary[start..start + len].iter_mut().enumerate() {
                    *b = if i == 0 || i == len - 1 { 0 } else { CANARY };
                }
                // SAFETY: the ranges lie inside the buffers.
                unsafe {
                    assert!(is_zero(zeroes.as_ptr().add(start), len));
                    assert!(canary_intact(canary.as_ptr().add(start), len));
                }
                for bad in [start, start + len / 2, start + len.saturating_sub(1)] {
                    if len == 0 {
                        continue;
                    }
                    zeroes[bad] = CANARY;
                    let was = canary[bad];
                    canary[bad] = if was == 0 { CANARY } else { 0 };
                    // SAFETY: as above.
                    unsafe {
                        assert!(!is_zero(zeroes.as_ptr().add(start), len), "{start} {len} {bad}");
                        assert_eq!(first_nonzero(zeroes.as_ptr().add(start), len), Some(bad - start));
                        assert!(!canary_intact(canary.as_ptr().add(start), len), "{start} {len} {bad}");
                        assert_eq!(first_bad_canary(canary.as_ptr().add(start), len), Some(bad - start));
                    }
                    zeroes[bad] = 0;
                    canary[bad] = was;
                }
            }
        }
    }

    #[test]
    fn write_canary_writes_what_canary_intact_accepts_and_never_the_last_byte() {
        for len in 0..40 {
            let mut buf = [0x55u8; 48];
            if len > 0 {
                buf[3 + len] = 0;
            }
            // SAFETY: len < 48 bytes of buf.
            unsafe {
                write_canary(buf.as_mut_ptr().add(4), len);
                assert!(canary_intact(buf.as_ptr().add(4), len), "{len}");
            }
            assert_eq!(buf[3], 0x55);
            assert_eq!(buf[4 + len], 0x55);
            if len > 0 {
                assert_eq!(buf[4], 0);
                assert_eq!(buf[3 + len], 0, "the last byte is left as it was");
                buf[3 + len] = CANARY;
                // SAFETY: as above.
                let intact = unsafe { canary_intact(buf.as_ptr().add(4), len) };
                assert!(!intact, "a written last byte is an overflow");
            }
        }
    }

    #[test]
    fn padded_sizes_leave_a_canary_byte_and_skip_the_16_byte_class() {
        assert_eq!(padded(0), 17);
        assert_eq!(padded(16), 17);
        assert_eq!(padded(31), 32);
        assert_eq!(padded(32), 33);
        assert_eq!(padded(usize::MAX), usize::MAX);
        assert_eq!(
            crate::small::class::BLOCK_SIZE[crate::small::class::class_of(padded(0))],
            32
        );
    }
}
