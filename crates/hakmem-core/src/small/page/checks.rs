//! The `secure` build's per-page state at work: decoding and checking
//! free-list links, the table of requested sizes, the canary and fill
//! checks of live and free blocks and their reports, and the page's random
//! state (the byte-level helpers are in `check/secure.rs`).

use super::{freed_mark, Block, Page, MAP_WORDS};
use crate::check::secure;
use crate::sync::Ordering;

impl Page {
    /// `next_of`, naming `found_by` in the report of a bad link.
    #[inline(always)]
    pub(super) fn next_checked(&self, block: *mut Block, found_by: &str) -> *mut Block {
        // SAFETY: block is a free block of this page (callers walk its lists).
        let raw = unsafe { (*block).next };
        let next = (raw as usize ^ self.key) as *mut Block;
        if !next.is_null() && !self.is_block_start(next as *const u8) {
            self.report_write_after_free(block as *const u8, found_by);
        }
        next
    }

    pub(super) fn map_slot(&self, block: *const u8) -> (usize, u64) {
        let index = self.block_index(block) as usize;
        ((index / 64) % MAP_WORDS, 1u64 << (index % 64))
    }

    /// `secure`: checks live block `p` of this page — its canary (`[size,
    /// canary_end)`: a zero, `CANARY` bytes, and the slot's last byte,
    /// zero; else `hakmem: heap overflow`) and the byte before it (the previous slot's last byte, or
    /// the table's: zero in every state; else `hakmem: heap underflow`) —
    /// and returns the size it was asked for. `found_by` names the caller
    /// in a report.
    pub(crate) fn check_live(&self, p: *const u8, found_by: &str) -> usize {
        let size = self.requested_size(p);
        let bs = self.block_size;
        // SAFETY: p is a live block of this page: its slot and the byte
        // before it (the previous slot's, or the unit table's) are mapped.
        unsafe {
            if size >= bs || !secure::slot_canary_intact(p, size, bs) {
                self.report_overflow(p, size, found_by);
            }
            if *p.sub(1) != 0 {
                secure::report(secure::Corruption::Underflow, p, Some(size), -1, found_by);
            }
        }
        size
    }

    #[cold]
    #[inline(never)]
    pub(super) fn report_overflow(&self, p: *const u8, size: usize, found_by: &str) -> ! {
        let bs = self.block_size;
        let offset = if size < bs {
            // SAFETY: p is a live block of this page (see `check_live`).
            unsafe { secure::first_bad_slot_canary(p, size, bs) }.unwrap_or(bs)
        } else {
            bs
        };
        secure::report(secure::Corruption::Overflow, p, Some(size), offset as isize, found_by)
    }

    /// `secure`: reports free block `p` as written after its free: the
    /// first byte that differs from what a free block holds (its link is
    /// checked by the caller).
    #[cold]
    #[inline(never)]
    pub(super) fn report_write_after_free(&self, p: *const u8, found_by: &str) -> ! {
        let bs = self.block_size;
        let mark = freed_mark(self).to_ne_bytes();
        // SAFETY: p is a block of this page: its bs bytes are mapped.
        let offset = unsafe {
            match (0..8).find(|&i| *p.add(8 + i) != mark[i]) {
                Some(i) => 8 + i,
                None => secure::first_nonzero_in_body(p, bs).unwrap_or(0),
            }
        };
        let size = self.requested_size(p);
        let size = (size < bs).then_some(size);
        secure::report(secure::Corruption::WriteAfterFree, p, size, offset as isize, found_by)
    }

    /// `secure`: the slot of block `p` (a block of this span, whose
    /// `block_index` is `index`) in the table of requested sizes at the
    /// start of its unit.
    #[inline(always)]
    pub(super) fn size_slot(&self, p: *const u8, index: u64) -> &crate::sync::plain::AtomicU16 {
        debug_assert!(index < u64::from(self.reserved));
        let mut table = self.start().wrapping_sub(secure::UNIT_TABLE_BYTES);
        let mut slot = index as usize;
        if self.units > 1 {
            // The unit's own table, and the block's index in that unit.
            let unit = (p as usize).wrapping_sub(self.start() as usize) >> crate::segment::PAGE_SHIFT;
            table = table.wrapping_add(unit * crate::segment::PAGE_SIZE);
            slot -= unit * self.unit_blocks as usize;
        }
        debug_assert!(slot * 2 < secure::UNIT_TABLE_BYTES);
        // SAFETY: each unit's table lies in front of its blocks (secure.rs),
        // mapped as long as the page is in use, and holds a slot per block.
        unsafe { &*(table as *const crate::sync::plain::AtomicU16).add(slot) }
    }

    /// `secure`: the size live block `p` of this page was asked for (for a
    /// free block: when it was last handed out).
    pub(crate) fn requested_size(&self, p: *const u8) -> usize {
        // Relaxed: see `on_alloc`.
        self.size_slot(p, self.block_index(p)).load(Ordering::Relaxed) as usize
    }

    /// `secure`: gives live block `p` of this page the requested size
    /// `size` (`realloc` in place; `padded(size) <= block_size`): its
    /// canary moves to `size` (bytes it no longer covers become canary;
    /// bytes it covers anew keep what the canary held, as `realloc` leaves
    /// them undefined; a block above `WHOLE_ZERO_MAX` gets its bounded
    /// canary written anew at `size` when it grows).
    pub(crate) fn set_requested_size(&self, p: *mut u8, size: usize) {
        debug_assert!(secure::padded(size) <= self.block_size);
        let old = self.requested_size(p);
        let bs = self.block_size;
        // [size, bs - 1) are the holder's bytes to write (size < bs); the
        // slot's last byte is zero and stays unwritten (check/secure.rs).
        // SAFETY: p is the caller's live block of this page, bs bytes.
        unsafe {
            if size < old || secure::canary_end(size, bs) > secure::canary_end(old, bs) {
                secure::write_slot_canary(p, size, bs);
            } else if size > old && size < bs - 1 {
                *p.add(size) = 0;
            }
        }
        // Relaxed: see `on_alloc`.
        self.size_slot(p, self.block_index(p))
            .store(size as u16, Ordering::Relaxed);
    }

    /// `secure`: checks the block on top of `local_free` (the one the owner
    /// freed last, if no reuse came between) as `malloc` would, but only in
    /// its first cache line: its freed mark, its link, and zeroes up to
    /// `EDGE_BYTES`. Run by each `free` into the page, so a write through
    /// a pointer just freed is reported at the next `free` of the page
    /// (`found by free()`), not only when the block is handed out again
    /// (which delayed reuse may put off to exit): the line is in the cache
    /// still, a few instructions.
    #[inline(always)]
    pub(crate) fn check_last_freed(&self) {
        let b = self.local_free;
        if b.is_null() {
            return;
        }
        let p = b as *const u8;
        // Block sizes are multiples of 16 of at least 32: words 2 and 3,
        // 4 and 5 from 48 bytes, 6 and 7 from 64 (`EDGE_BYTES`), OR-ed.
        const _: () = assert!(secure::EDGE_BYTES == 64);
        let bs = self.block_size;
        // b is a free block of this page, and the caller (pushing) is its
        // owner: no one else writes it; blocks are 16-byte aligned.
        // SAFETY: b's first min(bs, 64) bytes are mapped and aligned (above).
        let intact = unsafe {
            let w = p as *const u64;
            let mut acc = w.add(2).read() | w.add(3).read();
            if bs >= 48 {
                acc |= w.add(4).read() | w.add(5).read();
            }
            if bs >= 64 {
                acc |= w.add(6).read() | w.add(7).read();
            }
            (*b).freed == freed_mark(self) && acc == 0
        };
        if !intact {
            self.report_write_after_free(p, "free()");
        }
        self.next_checked(b, "free()");
    }

    /// `secure`: checks that every block on the page's free lists holds
    /// what a free block holds (`hakmem: write after free` otherwise).
    /// Called when the page's span is released (all its blocks are free
    /// then) and at exit, so a write after free is found even when the
    /// block is never handed out again.
    pub(crate) fn check_free_blocks(&self, found_by: &str) {
        let bs = self.block_size;
        let mut budget = self.capacity;
        for list in [self.free, self.local_free] {
            let mut b = list;
            while !b.is_null() && budget > 0 {
                let p = b as *const u8;
                // SAFETY: b is a free block of this page (its lists hold
                // only block starts: next_checked checks every link).
                unsafe {
                    if (*b).freed != freed_mark(self) || !secure::free_body_is_zero(p, bs) {
                        self.report_write_after_free(p, found_by);
                    }
                }
                b = self.next_checked(b, found_by);
                budget -= 1;
            }
        }
    }

    /// A random word from the page's state (`secure`; xorshift).
    pub(super) fn next_random(&mut self) -> usize {
        let mut x = self.rng | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}
