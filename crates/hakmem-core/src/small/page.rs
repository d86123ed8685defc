//! Page metadata: a run of equal-sized blocks, its two free lists, and the
//! states a page goes through.
//!
//! A page is one or more contiguous 64 KiB units of a segment (a *span*),
//! described by the `Page` at the index of its first unit in the segment
//! header. It owns:
//!
//! * `free` — the owner's stack of free blocks: malloc pops, the owner's
//!   free pushes. LIFO on purpose: the block handed out next is the one
//!   freed last, whose cache lines are still warm (measured against
//!   mimalloc's separate `local_free` list, which cycles through every free
//!   block of the page: half the L1 data misses on the random-mixed loop,
//!   docs/BENCHMARKS.md). The slow path's regular run (mimalloc's
//!   "heartbeat") comes from the heap's allocation countdown instead;
//! * `remote_free` — an atomic stack of blocks other threads freed, taken
//!   whole by the owner with one atomic read-modify-write. Its top 16 bits
//!   count the blocks on the stack, added by each push, so the owner
//!   learns how many it took without walking them: the walk was a chain of
//!   cache misses on lines the freeing thread had just written, and with
//!   `free` empty (the usual case when the owner collects) the stack simply
//!   becomes `free`. Its two low bits are the parking protocol (below).
//!
//! Blocks are carved lazily (`extend`), a few KiB at a time, so memory that
//! is never allocated is never touched.
//!
//! # A page's states
//!
//! This is the one description of a page's life; the heap's modules
//! (`page_queue`, `refill`, `free`, `remote`, `abandon`, `purge`) move a
//! page between these states and name them in their comments. What tells
//! them apart is `in_use`, `flags` (`PAGE_IN_FULL`), `local_owner`, the two
//! low bits of `remote_free`, and whether the segment has an owner heap
//! (`Segment::heap`):
//!
//! | state | `in_use` | `flags` | `local_owner` | `remote_free` low bits | where it is |
//! | --- | --- | --- | --- | --- | --- |
//! | *free* | false | 0 | 0 | 0 | its units are free in the segment's `free_units`; `carved` is 0, so no pointer into it passes `is_block_start` |
//! | *queued* | true | 0 | the owner heap | 0, or `NOTIFYING` until the pusher that ended its parking has told the owner | in the owner's queue of its class; the fast paths allocate from it and free into it |
//! | *parked* | true | `PAGE_IN_FULL` | 0 | `FULL_NOTIFY`, then `NOTIFYING` while the first remote pusher tells the owner | in no queue: the owner found no free block in it; every free of its blocks takes the slow path |
//! | *large* | true | `PAGE_IN_FULL` | 0 | as parked | one block of `LARGE_CLASS`, parked from the start |
//! | *abandoned* | true | as it was | 0 | as it was | its segment's owner exited (`Segment::heap` null); on the abandoned list |
//!
//! ```text
//!   free ──page_alloc (refill::find_page)────────────────────▶ queued
//!   free ──page_alloc (alloc::alloc_large)───────────────────▶ large
//!   queued ──find_page finds no free block; settle───────────▶ parked
//!   parked ──first remote push; owner's process_notified; settle──▶ queued
//!   queued, parked, large ──used reaches 0: page_retire, settle,
//!       sweep; release_span waits for a NOTIFYING pusher first──▶ free
//!   queued, parked, large ──the owner exits: heap_abandon────▶ abandoned
//!   abandoned ──reclaim (another heap adopts the segment): settle──▶ queued, parked or free
//! ```
//!
//! `settle` (page_queue.rs) is the one place that decides between queued,
//! parked and free for an in-use page that is in no queue. The free fast
//! path's single test, `local_owner == my heap`, is true exactly for a
//! queued page of the caller's heap.
//!
//! `used` counts the blocks not known to the owner to be free: those the
//! program holds, those waiting on `remote_free`, and those another thread
//! has freed but still holds in one of its remote batches (remote.rs: they
//! carry their freed mark, and reach `remote_free` only with their chain).
//! So a page is empty for its owner only when every block has come back to
//! `free`, and a page with blocks in a batch stays in use, of its class.
//!
//! The low bits of `remote_free` (the parking protocol; block addresses
//! are 16-byte aligned, so they never use them):
//!
//! ```text
//!   0 ──owner parks the full page (try_set_full_notify)──▶ FULL_NOTIFY
//!   FULL_NOTIFY ──first remote push──▶ NOTIFYING (+ the pushed blocks)
//!   NOTIFYING ──that pusher, after telling the owner (end_notify)──▶ 0
//!   FULL_NOTIFY ──owner finds the page useful again (clear_full_notify)──▶ 0
//! ```
//!
//! The first push after parking tells the owner (`Segment::notify`: a bit
//! in the segment, a flag in the heap). It touches the segment header
//! *after* its blocks are published, when the owner may already have taken
//! them in; `NOTIFYING` is what keeps the page — and so its segment — from
//! being released until that pusher is done (`wait_notifier`, called by
//! every release), as mimalloc's `MI_DELAYED_FREEING` state does. At most
//! one notifier is at work per page: only `FULL_NOTIFY` starts one, and it
//! cannot be set again while `NOTIFYING` is. A pusher into an abandoned
//! parked page notifies the segment only (no heap); the reclaimer takes
//! every page in and sets `FULL_NOTIFY` again on those it parks.
//!
//! Invariant (owner's view, checked by `is_valid`):
//! `used == capacity - |free|`, `used` counting as above.
//!
//! Zeroed memory: a block that was carved and never handed out has its
//! `freed` word still 0 (every free writes the mark there), so when the
//! span was fresh OS memory (`zero_init`) such a block is all zero except
//! its link word; `pop_fresh` tells `calloc` so.

#[cfg(feature = "secure")]
use crate::secure;
use crate::sync::{fence, AtomicU64, AtomicUsize, Ordering};
use core::ptr;

/// A free block: its first word links to the next free block; its second
/// word holds `freed_mark(page)` from the moment it is freed until it is
/// allocated again (every block has at least 16 bytes), and 0 in a block
/// carved and never handed out. A free that finds its mark already there is
/// a double free: caught with one load and a compare, whether the block was
/// freed just before or many frees ago.
#[repr(C)]
pub(crate) struct Block {
    pub(crate) next: *mut Block,
    pub(crate) freed: usize,
}

/// The smallest block: a link and a freed mark.
pub(crate) const MIN_BLOCK_SIZE: usize = core::mem::size_of::<Block>();

/// The mark a freed block of `page` carries in its second word: the address
/// of the page's metadata, in the segment header. A program never holds a
/// pointer into hakmem's headers, so a live block's data cannot look freed
/// by accident; and the free path has the value in a register already.
#[inline(always)]
pub(crate) fn freed_mark(page: *const Page) -> usize {
    page as usize
}

/// What `Page::start_word` is XORed with: the top bit with the `valgrind`
/// feature (a value no pointer has: memcheck never takes it for one),
/// nothing otherwise.
const START_HIDE: usize = if crate::valgrind::ENABLED {
    1 << (usize::BITS - 1)
} else {
    0
};

/// Low bit of `remote_free`: the owner parked the page as full and wants to
/// hear about the first remote free.
pub(crate) const FULL_NOTIFY: usize = 1;

/// Bit 1 of `remote_free`: the pusher that cleared `FULL_NOTIFY` is still
/// telling the owner; the page must not be released until it is done.
const NOTIFYING: usize = 2;

/// `remote_free` bits from here up count the blocks on the stack. hakmem's
/// blocks lie below 2^48 (the address spaces the segment map covers:
/// segment_map.rs) and a span holds at most 4096 blocks (64 KiB of 16-byte
/// blocks; medium spans hold fewer), so neither field reaches the other.
const REMOTE_COUNT_SHIFT: u32 = 48;

/// The bits of `remote_free` that hold the stack's top block.
const REMOTE_HEAD_MASK: usize = ((1 << REMOTE_COUNT_SHIFT) - 1) & !(FULL_NOTIFY | NOTIFYING);

/// `flags` bit: the page is parked as full (not in its class queue) or holds
/// a large block; any free into it takes the slow path.
pub(crate) const PAGE_IN_FULL: u8 = 1;

/// Process-wide secret mixed into every page's list key (`secure` feature),
/// drawn from `getrandom` once at start-up.
#[cfg(feature = "secure")]
pub(crate) static SECRET: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0x2545_f491_4f6c_dd1d);

/// Blocks per page tracked by the `secure` free bitmap (64 KiB / 16 B).
#[cfg(feature = "secure")]
const MAP_WORDS: usize = 64;

// The layout the comments above rely on (without the secure extras).
#[cfg(not(any(feature = "secure", hakmem_loom)))]
const _: () = assert!(core::mem::size_of::<Page>() == 128 && core::mem::offset_of!(Page, free) == 64);

/// The inverse of odd `x` modulo 2^64 (Newton's iteration: each step
/// doubles the correct low bits, from 3 for `x` itself).
const fn odd_inverse(x: u64) -> u64 {
    debug_assert!(x % 2 == 1);
    let mut inverse = x;
    let mut i = 0;
    while i < 5 {
        inverse = inverse.wrapping_mul(2u64.wrapping_sub(x.wrapping_mul(inverse)));
        i += 1;
    }
    inverse
}

/// Minimum bytes carved per extension (blocks are carved lazily).
const EXTEND_BYTES: usize = 4096;
const EXTEND_MIN_BLOCKS: usize = 4;

#[repr(C, align(64))]
pub(crate) struct Page {
    // First cache line: read-mostly. Any thread reads it on free (owner
    // test, span head, the C shim's block-start check); the owner rewrites
    // it only when the page changes state. Keeping the owner's per-block
    // writes out of it means a remote free does not steal the line the
    // owner's next malloc needs.
    /// The span's head `Page` (itself for a head or an unused page): how a
    /// pointer into any page of a span finds the span's metadata.
    pub(crate) head: *mut Page,
    /// Address of the heap whose queue holds this page, else 0 (parked,
    /// large, abandoned or free pages). The free fast path's single test:
    /// `local_owner == my heap` means "mine, and not parked". Written only
    /// by the page's owner (relaxed), read by any freeing thread.
    pub(crate) local_owner: AtomicUsize,
    /// Address of the first block, as `Page::start` reads it: stored as
    /// is, or (the `valgrind` feature) with its top bit flipped, so that
    /// memcheck's leak scan, which reads hakmem's headers as it reads any
    /// memory, does not take it for a pointer to the page's first block —
    /// a leaked first block (a large block is the only one) would count as
    /// "still reachable" instead of "definitely lost".
    start_word: usize,
    /// The inverse, modulo 2^64, of the odd part of `block_size`
    /// (`block_size >> block_shift`): see `block_index`.
    pub(crate) block_inverse: u64,
    pub(crate) block_size: usize,
    /// `capacity` while the page is in use, 0 otherwise: the bound of
    /// `is_block_start`, on this read-mostly line. Atomic because any
    /// thread reads it (the C `free`'s block-start check) while the owner
    /// carves more of the page. Relaxed is enough: a thread checking a
    /// block it legitimately holds got the block through some
    /// synchronisation after the carve that made it, so it reads that
    /// carve's value or a later one — larger (more carving) or, once the
    /// page is released, 0, which cannot happen while the block is live.
    /// For a pointer that is not a live block the check is best effort.
    pub(crate) carved: AtomicU64,
    /// `PAGE_IN_FULL` (parked or large) or 0 (queued, free): see "A page's
    /// states" in the module doc.
    pub(crate) flags: u8,
    /// Size class, or `LARGE_CLASS`.
    pub(crate) class: u8,
    /// Whether the page is allocated (a span head in use; false: *free*).
    pub(crate) in_use: bool,
    /// The span was fresh (zeroed) OS memory when the page was initialised:
    /// a block never handed out since is zero but for its link word.
    pub(crate) zero_init: bool,
    /// `block_size.trailing_zeros()`.
    pub(crate) block_shift: u8,
    /// Units in the span (head only).
    pub(crate) units: u32,
    _line_pad: [u8; 4],
    // Second cache line: the owner's per-block state, and the remote stack
    // other threads push on (one line moves per remote free, as in mimalloc).
    /// Free blocks: malloc pops, the owner's free pushes (fast paths).
    pub(crate) free: *mut Block,
    /// Blocks handed out and not yet known (to the owner) to be free: also
    /// those on `remote_free` and in other threads' remote batches (see
    /// "A page's states" in the module doc).
    pub(crate) used: u32,
    /// Blocks carved so far.
    pub(crate) capacity: u32,
    /// Blocks the span can hold.
    pub(crate) reserved: u32,
    /// Blocks freed by other threads (atomic stack) | `FULL_NOTIFY`.
    pub(crate) remote_free: AtomicUsize,
    /// Links in the owner heap's queue for this class.
    pub(crate) next: *mut Page,
    pub(crate) prev: *mut Page,
    /// `secure`: key XORed into every free-list link of this page.
    #[cfg(feature = "secure")]
    key: usize,
    /// `secure`: one bit per block, set while the block is free.
    #[cfg(feature = "secure")]
    free_map: [AtomicU64; MAP_WORDS],
    /// `secure`: blocks the owner freed, handed out again only once `free`
    /// has run dry, and then in shuffled order (`collect_local`): a
    /// dangling pointer rarely meets a live block, and never predictably.
    #[cfg(feature = "secure")]
    local_free: *mut Block,
    /// `secure`: the page's random state (carving order, shuffles).
    #[cfg(feature = "secure")]
    rng: usize,
}

impl Page {
    /// A page with no blocks (the static empty page and fresh headers).
    #[cfg(not(hakmem_loom))]
    pub(crate) const fn empty() -> Self {
        Self::with_atomics(AtomicUsize::new(0), AtomicUsize::new(0), AtomicU64::new(0))
    }

    /// A page with no blocks (loom's atomics have no const constructor).
    #[cfg(hakmem_loom)]
    pub(crate) fn empty() -> Self {
        Self::with_atomics(AtomicUsize::new(0), AtomicUsize::new(0), AtomicU64::new(0))
    }

    const fn with_atomics(remote_free: AtomicUsize, local_owner: AtomicUsize, carved: AtomicU64) -> Self {
        Self {
            free: ptr::null_mut(),
            used: 0,
            flags: 0,
            class: 0,
            in_use: false,
            zero_init: false,
            capacity: 0,
            carved,
            reserved: 0,
            block_size: 0,
            block_inverse: 0,
            block_shift: 0,
            remote_free,
            local_owner,
            start_word: 0,
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            units: 0,
            _line_pad: [0; 4],
            head: ptr::null_mut(),
            #[cfg(feature = "secure")]
            key: 0,
            #[cfg(feature = "secure")]
            free_map: [const { AtomicU64::new(0) }; MAP_WORDS],
            #[cfg(feature = "secure")]
            local_free: ptr::null_mut(),
            #[cfg(feature = "secure")]
            rng: 0,
        }
    }

    /// Prepares an unused span head of `units` pages (`bytes` in all) for
    /// blocks of `block_size`.
    pub(crate) fn init(&mut self, class: u8, block_size: usize, start: *mut u8, units: u32, bytes: usize, zero: bool) {
        self.free = ptr::null_mut();
        self.used = 0;
        self.flags = 0;
        self.class = class;
        self.in_use = true;
        self.zero_init = zero;
        self.capacity = 0;
        self.set_carved(0);
        self.reserved = (bytes / block_size) as u32;
        debug_assert!((self.reserved as usize) < 1 << (usize::BITS - REMOTE_COUNT_SHIFT));
        self.block_size = block_size;
        self.block_shift = block_size.trailing_zeros() as u8;
        self.block_inverse = odd_inverse((block_size >> self.block_shift) as u64);
        // Relaxed: the page is not in use; nobody else can reach it until
        // the owner hands out its first block (which orders what follows).
        self.remote_free.store(0, Ordering::Relaxed);
        self.local_owner.store(0, Ordering::Relaxed);
        self.start_word = start as usize ^ START_HIDE;
        self.next = ptr::null_mut();
        self.prev = ptr::null_mut();
        self.units = units;
        self.head = self;
        #[cfg(feature = "secure")]
        {
            // Relaxed: written before PROCESS_INIT's Release store, which
            // this thread's `process_init` read with Acquire.
            let secret = SECRET.load(Ordering::Relaxed);
            self.key = (start as usize ^ secret)
                .rotate_left(17)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                | 1;
            for w in self.free_map.iter() {
                w.store(0, Ordering::Relaxed);
            }
            self.local_free = ptr::null_mut();
            self.rng = self.key ^ crate::os::now_ms() as usize;
        }
    }

    /// Address of the first block.
    #[inline(always)]
    pub(crate) fn start(&self) -> *mut u8 {
        (self.start_word ^ START_HIDE) as *mut u8
    }

    /// A free-list link as stored in a block (`secure`: XORed with the key).
    #[inline(always)]
    pub(crate) fn encode(&self, p: *mut Block) -> *mut Block {
        #[cfg(feature = "secure")]
        return (p as usize ^ self.key) as *mut Block;
        #[cfg(not(feature = "secure"))]
        p
    }

    /// The link stored in `block`, decoded (`secure`: and checked to point at
    /// a block of this page, so a link overwritten after free is reported
    /// instead of handing out foreign memory).
    #[inline(always)]
    pub(crate) fn next_of(&self, block: *mut Block) -> *mut Block {
        #[cfg(feature = "secure")]
        return self.next_checked(block, "malloc()");
        #[cfg(not(feature = "secure"))]
        {
            crate::valgrind::header_access(block);
            // SAFETY: block is a free block of this page (callers walk its lists).
            let next = unsafe { (*block).next };
            crate::valgrind::header_done(block);
            next
        }
    }

    /// `next_of`, naming `found_by` in the report of a bad link.
    #[cfg(feature = "secure")]
    #[inline(always)]
    fn next_checked(&self, block: *mut Block, found_by: &str) -> *mut Block {
        // SAFETY: block is a free block of this page (callers walk its lists).
        let raw = unsafe { (*block).next };
        let next = (raw as usize ^ self.key) as *mut Block;
        if !next.is_null() && !self.is_block_start(next as *const u8) {
            self.report_write_after_free(block as *const u8, found_by);
        }
        next
    }

    /// Hands `block`, just taken off `free`, to a caller who asked for
    /// `size` bytes: clears its freed mark. `secure`: first checks that
    /// nothing wrote to it while it was free (the mark, and `FILL` in
    /// `[16, block_size)`; else `hakmem: write after free`), then writes
    /// `FILL` over its link and mark (so the block reads as `FILL` up to its
    /// end), notes `size` in the unit's table and clears the block's bit in
    /// the free bitmap.
    #[inline(always)]
    pub(crate) fn on_alloc(&self, block: *mut Block, _size: usize) {
        #[cfg(not(feature = "secure"))]
        {
            // SAFETY: block is a free block of this page, now handed out.
            unsafe { (*block).freed = 0 };
        }
        #[cfg(feature = "secure")]
        {
            let p = block as *mut u8;
            let index = self.block_index(p) as usize;
            // SAFETY: block is a free block of this page (at least 32
            // bytes), now the caller's; its size slot is in the unit's table.
            unsafe {
                if (*block).freed != freed_mark(self) || !secure::is_filled(p.add(16), self.block_size - 16) {
                    self.report_write_after_free(p, "malloc()");
                }
                secure::fill_header(p);
                // Relaxed: the block's holder alone writes its slot; a
                // thread that frees it later got it through whatever
                // synchronisation handed the block over.
                self.size_slot(index).store(_size as u16, Ordering::Relaxed);
            }
            // Relaxed: a bit per block, each flipped by the one thread that
            // holds the block at that moment (its owner when handing it
            // out, its freer when freeing): the RMWs never lose another's.
            self.free_map[(index / 64) % MAP_WORDS].fetch_and(!(1u64 << (index % 64)), Ordering::Relaxed);
        }
    }

    /// `secure`: notes that `block` is being freed; true when it already was
    /// (a double free the freed mark missed, e.g. after a write after free).
    #[inline(always)]
    pub(crate) fn on_free_was_free(&self, _block: *const u8) -> bool {
        #[cfg(feature = "secure")]
        let was_free = {
            let (word, bit) = self.map_slot(_block);
            // Relaxed: as in `on_alloc`.
            self.free_map[word].fetch_or(bit, Ordering::Relaxed) & bit != 0
        };
        #[cfg(not(feature = "secure"))]
        let was_free = false;
        was_free
    }

    #[cfg(feature = "secure")]
    fn map_slot(&self, block: *const u8) -> (usize, u64) {
        let index = self.block_index(block) as usize;
        ((index / 64) % MAP_WORDS, 1u64 << (index % 64))
    }

    /// Checks live block `p`, about to be freed, for a heap overflow or
    /// underflow, then fills what it held with `FILL` (`secure`; nothing
    /// otherwise). The caller has ruled out a double free and writes the
    /// block's link and freed mark afterwards.
    #[inline(always)]
    pub(crate) fn on_free(&self, _p: *mut u8) {
        #[cfg(feature = "secure")]
        {
            let size = self.check_live(_p, "free()");
            if size > MIN_BLOCK_SIZE {
                // SAFETY: the block's first `size` bytes are the freeing
                // caller's; its first 16 receive the link and the mark.
                unsafe { secure::fill(_p.add(MIN_BLOCK_SIZE), size - MIN_BLOCK_SIZE) };
            }
        }
    }

    /// `secure`: checks live block `p` of this page — its canary (`[size,
    /// block_size)` all `FILL`, else `hakmem: heap overflow`) and the byte
    /// before it (the previous slot's last byte, or the table's, always
    /// `FILL`; else `hakmem: heap underflow`) — and returns the size it
    /// was asked for. `found_by` names the caller in a report.
    #[cfg(feature = "secure")]
    pub(crate) fn check_live(&self, p: *const u8, found_by: &str) -> usize {
        let size = self.requested_size(p);
        let bs = self.block_size;
        // SAFETY: p is a live block of this page: its slot and the byte
        // before it (the previous slot's, or the unit table's) are mapped.
        unsafe {
            if size >= bs || !secure::is_filled(p.add(size), bs - size) {
                self.report_overflow(p, size, found_by);
            }
            if *p.sub(1) != secure::FILL {
                secure::report(secure::Corruption::Underflow, p, Some(size), -1, found_by);
            }
        }
        size
    }

    #[cfg(feature = "secure")]
    #[cold]
    #[inline(never)]
    fn report_overflow(&self, p: *const u8, size: usize, found_by: &str) -> ! {
        let bs = self.block_size;
        // SAFETY: p is a live block of this page (see `check_live`).
        let offset = match unsafe { secure::first_unfilled(p.add(size.min(bs)), bs - size.min(bs)) } {
            Some(i) => size + i,
            None => bs,
        };
        secure::report(secure::Corruption::Overflow, p, Some(size), offset as isize, found_by)
    }

    /// `secure`: reports free block `p` as written after its free: the
    /// first byte that differs from what a free block holds (its link is
    /// checked by the caller).
    #[cfg(feature = "secure")]
    #[cold]
    #[inline(never)]
    fn report_write_after_free(&self, p: *const u8, found_by: &str) -> ! {
        let bs = self.block_size;
        let mark = freed_mark(self).to_ne_bytes();
        // SAFETY: p is a block of this page: its bs bytes are mapped.
        let offset = unsafe {
            match (0..8).find(|&i| *p.add(8 + i) != mark[i]) {
                Some(i) => 8 + i,
                None => secure::first_unfilled(p.add(16), bs - 16).map_or(0, |i| 16 + i),
            }
        };
        let size = self.requested_size(p);
        let size = (size < bs).then_some(size);
        secure::report(secure::Corruption::WriteAfterFree, p, size, offset as isize, found_by)
    }

    /// `secure`: the slot of block `index` in the table of requested sizes
    /// at the start of the page's unit.
    #[cfg(feature = "secure")]
    #[inline(always)]
    fn size_slot(&self, index: usize) -> &crate::sync::plain::AtomicU16 {
        debug_assert!(index * 2 < secure::UNIT_TABLE_BYTES);
        // SAFETY: the table lies in front of the blocks (secure.rs), mapped
        // as long as the page is in use, and holds a slot per block.
        unsafe { &*(self.start().sub(secure::UNIT_TABLE_BYTES) as *const crate::sync::plain::AtomicU16).add(index) }
    }

    /// `secure`: the size live block `p` of this page was asked for (for a
    /// free block: when it was last handed out).
    #[cfg(feature = "secure")]
    pub(crate) fn requested_size(&self, p: *const u8) -> usize {
        // Relaxed: see `on_alloc`.
        self.size_slot(self.block_index(p) as usize).load(Ordering::Relaxed) as usize
    }

    /// `secure`: gives live block `p` of this page the requested size
    /// `size` (`realloc` in place; `padded(size) <= block_size`): bytes it
    /// no longer covers become canary again.
    #[cfg(feature = "secure")]
    pub(crate) fn set_requested_size(&self, p: *mut u8, size: usize) {
        debug_assert!(secure::padded(size) <= self.block_size);
        let old = self.requested_size(p);
        if size < old {
            // SAFETY: p is the caller's live block; [size, old) was its data.
            unsafe { secure::fill(p.add(size), old - size) };
        }
        // Relaxed: see `on_alloc`.
        self.size_slot(self.block_index(p) as usize)
            .store(size as u16, Ordering::Relaxed);
    }

    /// `secure`: checks that every block on the page's free lists holds
    /// what a free block holds (`hakmem: write after free` otherwise).
    /// Called when the page's span is released (all its blocks are free
    /// then) and at exit, so a write after free is found even when the
    /// block is never handed out again.
    #[cfg(feature = "secure")]
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
                    if (*b).freed != freed_mark(self) || !secure::is_filled(p.add(16), bs - 16) {
                        self.report_write_after_free(p, found_by);
                    }
                }
                b = self.next_checked(b, found_by);
                budget -= 1;
            }
        }
    }

    /// A random word from the page's state (`secure`; xorshift).
    #[cfg(feature = "secure")]
    fn next_random(&mut self) -> usize {
        let mut x = self.rng | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Whether blocks the owner freed wait on `local_free` (`secure`;
    /// always false otherwise: the owner frees onto `free`).
    #[inline(always)]
    pub(crate) fn has_local_free(&self) -> bool {
        #[cfg(feature = "secure")]
        return !self.local_free.is_null();
        #[cfg(not(feature = "secure"))]
        false
    }

    /// Moves the blocks the owner freed onto `free`, which must be empty
    /// (`secure`; nothing otherwise). Dealt into two stacks by random bits,
    /// one then put on the other: blocks come back neither in the order they
    /// were freed nor in its reverse, and the block freed last is handed
    /// out last of its stack. O(1) per block, on the slow path.
    #[inline]
    pub(crate) fn collect_local(&mut self) {
        #[cfg(feature = "secure")]
        {
            debug_assert!(self.free.is_null());
            let mut list = self.local_free;
            self.local_free = ptr::null_mut();
            let (mut a, mut a_tail, mut b) = (ptr::null_mut::<Block>(), ptr::null_mut::<Block>(), ptr::null_mut());
            let (mut bits, mut left) = (0usize, 0u32);
            while !list.is_null() {
                let next = self.next_of(list);
                if left == 0 {
                    bits = self.next_random();
                    left = usize::BITS;
                }
                // SAFETY: list is a free block of this page, the owner's.
                unsafe {
                    if bits & 1 == 0 {
                        if a.is_null() {
                            a_tail = list;
                        }
                        (*list).next = self.encode(a);
                        a = list;
                    } else {
                        (*list).next = self.encode(b);
                        b = list;
                    }
                }
                bits >>= 1;
                left -= 1;
                list = next;
            }
            if a.is_null() {
                self.free = b;
            } else {
                // SAFETY: a_tail is the last block of stack a.
                unsafe { (*a_tail).next = self.encode(b) };
                self.free = a;
            }
        }
    }

    /// Forgets the page's free lists: its span is being released and every
    /// carved block is free (`secure`: checked first, see
    /// `check_free_blocks`).
    pub(crate) fn release_blocks(&mut self) {
        #[cfg(feature = "secure")]
        {
            self.check_free_blocks("the release of its page");
            self.local_free = ptr::null_mut();
        }
        self.free = ptr::null_mut();
    }

    /// Carves the next few blocks into `free` (which must be empty).
    /// Returns false when the span is fully carved.
    pub(crate) fn extend(&mut self) -> bool {
        debug_assert!(self.free.is_null());
        let remaining = (self.reserved - self.capacity) as usize;
        if remaining == 0 {
            return false;
        }
        let n = (EXTEND_BYTES / self.block_size).max(EXTEND_MIN_BLOCKS).min(remaining);
        let bs = self.block_size;
        let base = self.capacity as usize;
        // Carving order: ascending, or (`secure`) a random permutation so the
        // next block's address cannot be predicted from the last one's.
        let mut order = [0u16; EXTEND_BYTES / 16];
        for (i, o) in order.iter_mut().enumerate().take(n) {
            *o = i as u16;
        }
        #[cfg(feature = "secure")]
        {
            let mut x = (self.key ^ base).wrapping_add(crate::os::now_ms() as usize) | 1;
            for i in (1..n).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, x % (i + 1));
            }
        }
        // SAFETY: blocks base..base+n lie inside the span (n <= remaining),
        // which is mapped read-write and owned by this page's owner.
        unsafe {
            crate::valgrind::undefined(self.start().add(base * bs), n * bs);
            let block = |i: u16| self.start().add((base + i as usize) * bs) as *mut Block;
            // `secure`: the new blocks read as `FILL` and carry the freed
            // mark, as every free block does.
            #[cfg(feature = "secure")]
            {
                secure::fill(block(0) as *mut u8, n * bs);
                for i in 0..n {
                    (*block(i as u16)).freed = freed_mark(self);
                }
            }
            for w in order[..n].windows(2) {
                (*block(w[0])).next = self.encode(block(w[1]));
                self.on_free_was_free(block(w[0]) as *const u8);
            }
            (*block(order[n - 1])).next = self.encode(ptr::null_mut());
            self.on_free_was_free(block(order[n - 1]) as *const u8);
            self.free = block(order[0]);
            crate::valgrind::no_access(self.start().add(base * bs), n * bs);
        }
        self.capacity += n as u32;
        self.set_carved(self.capacity);
        true
    }

    /// Pops a block from `free` (which must be non-empty) for a caller who
    /// asked for `size` bytes.
    #[inline(always)]
    pub(crate) fn pop(&mut self, size: usize) -> *mut u8 {
        let b = self.free;
        debug_assert!(!b.is_null());
        self.free = self.next_of(b);
        crate::valgrind::header_access(b);
        self.on_alloc(b, size);
        self.used += 1;
        b as *mut u8
    }

    /// Pushes `block`, a block of this page the owner is freeing, on `free`
    /// (`secure`: on `local_free`, for delayed reuse). The caller has
    /// written its freed mark.
    #[inline(always)]
    pub(crate) fn push(&mut self, block: *mut Block) {
        #[cfg(not(feature = "secure"))]
        {
            // SAFETY: block is a handed-out block of this page, being freed
            // by its owner: its link word is ours to write.
            unsafe { (*block).next = self.encode(self.free) };
            crate::valgrind::header_done(block);
            self.free = block;
        }
        #[cfg(feature = "secure")]
        {
            // SAFETY: as above.
            unsafe { (*block).next = self.encode(self.local_free) };
            self.local_free = block;
        }
        debug_assert!(self.used > 0);
        self.used -= 1;
    }

    /// Pops a block from `free` (which must be non-empty) for `size` bytes
    /// and tells whether it is fresh: all zero but its first word (see the
    /// module docs; never in `secure` builds, which fill every block).
    pub(crate) fn pop_fresh(&mut self, size: usize) -> (*mut u8, bool) {
        debug_assert!(!self.free.is_null());
        crate::valgrind::header_access(self.free);
        // SAFETY: free is a free block of this page: both words are ours to read.
        let never_freed = unsafe { (*self.free).freed == 0 };
        crate::valgrind::header_done(self.free);
        (self.pop(size), self.zero_init && never_freed)
    }

    /// The index of block `p` when `p` is a block start of this span, and a
    /// number above `u64::MAX / block_size` (so above any block count) for
    /// any other pointer: with `block_size = odd << shift` and `off = p -
    /// start`, `off * inverse(odd)` rotated right by `shift` is `off /
    /// block_size` exactly when the block size divides `off` (the
    /// multiply-and-rotate divisibility test of Granlund and Montgomery).
    /// One multiply and one rotate, no division.
    #[inline(always)]
    pub(crate) fn block_index(&self, p: *const u8) -> u64 {
        let off = (p as usize).wrapping_sub(self.start() as usize) as u64;
        off.wrapping_mul(self.block_inverse)
            .rotate_right(u32::from(self.block_shift))
    }

    /// Whether `p` is the start of a carved block of this page (false for
    /// any pointer when the page is not in use): one compare on
    /// `block_index`, which checks the alignment and the bound together.
    #[inline(always)]
    pub(crate) fn is_block_start(&self, p: *const u8) -> bool {
        // Relaxed: see `carved`.
        self.block_index(p) < self.carved.load(Ordering::Relaxed)
    }

    /// Sets the bound of `is_block_start` (owner; Relaxed: see `carved`).
    #[inline]
    pub(crate) fn set_carved(&self, blocks: u32) {
        self.carved.store(u64::from(blocks), Ordering::Relaxed);
    }

    /// Takes every remotely freed block into `free` (prepending). Leaves
    /// `FULL_NOTIFY` alone when no remote block was waiting, and `NOTIFYING`
    /// always (its pusher clears it). Walks the taken blocks only when
    /// `free` is not empty (to link their tail).
    pub(crate) fn collect_remote(&mut self) {
        // Relaxed: a hint only; a push it misses is taken next time.
        if self.remote_free.load(Ordering::Relaxed) & REMOTE_HEAD_MASK == 0 {
            return;
        }
        // Acquire: pairs with the Release CAS in `push_remote`, making the
        // pushers' link writes (and the user's last writes) visible. An RMW
        // that keeps NOTIFYING: a swap to 0 would drop it, and with it the
        // owner's knowledge that a pusher is still at work.
        let word = self.remote_free.fetch_and(NOTIFYING, Ordering::Acquire);
        let head = (word & REMOTE_HEAD_MASK) as *mut Block;
        if head.is_null() {
            return;
        }
        let count = (word >> REMOTE_COUNT_SHIFT) as u32;
        if !self.free.is_null() {
            let mut tail = head;
            // SAFETY: the RMW gave this thread the whole stack, blocks of
            // this page linked by `push_remote`.
            unsafe {
                loop {
                    let next = self.next_of(tail);
                    if next.is_null() {
                        break;
                    }
                    tail = next;
                }
                crate::valgrind::header_access(tail);
                (*tail).next = self.encode(self.free);
                crate::valgrind::header_done(tail);
            }
        }
        self.free = head;
        debug_assert!(count >= 1 && count <= self.used);
        self.used -= count;
    }

    /// Blocks waiting on the remote stack (for tests).
    #[cfg(all(test, not(hakmem_loom)))]
    pub(crate) fn remote_waiting(&self) -> u32 {
        (self.remote_free.load(Ordering::Relaxed) >> REMOTE_COUNT_SHIFT) as u32
    }

    /// Pushes the chain `head ..= tail` of `count` blocks of this page onto
    /// the remote stack (any thread): one CAS for the whole chain. The
    /// chain's links, but for `tail`'s, are already written (encoded); a
    /// single block is the chain `block ..= block` of 1.
    ///
    /// Returns true when the owner had parked the page as full: the caller
    /// must then tell the owner (`Segment::notify`) and call `end_notify`,
    /// touching nothing of the page's segment after that. Until then the
    /// page stays `NOTIFYING`, which keeps it from being released.
    pub(crate) fn push_remote(&self, head: *mut Block, tail: *mut Block, count: u32) -> bool {
        debug_assert!(head as usize & !REMOTE_HEAD_MASK == 0);
        // Relaxed: the CAS below checks the value.
        let mut old = self.remote_free.load(Ordering::Relaxed);
        loop {
            // SAFETY: the chain's blocks are blocks of this page being freed
            // by the caller, who owns them until the CAS publishes them.
            unsafe {
                crate::valgrind::header_access(tail);
                (*tail).next = self.encode((old & REMOTE_HEAD_MASK) as *mut Block);
                crate::valgrind::header_done(tail);
            }
            let parked = old & FULL_NOTIFY != 0;
            let total = (old >> REMOTE_COUNT_SHIFT) + count as usize;
            let new =
                head as usize | total << REMOTE_COUNT_SHIFT | (old & NOTIFYING) | if parked { NOTIFYING } else { 0 };
            // Release: publishes the link writes (and the user's writes to
            // the blocks) to the owner's Acquire RMW in `collect_remote`.
            match self
                .remote_free
                .compare_exchange_weak(old, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => {
                    if parked {
                        // Acquire: pairs with the Release RMW that parked
                        // the page (`try_set_full_notify`), which this CAS
                        // read: what the parking owner wrote before it —
                        // its heap in `Segment::heap` — is visible to the
                        // notification that follows.
                        fence(Ordering::Acquire);
                    }
                    return parked;
                }
                Err(current) => old = current,
            }
        }
    }

    /// Ends the notification `push_remote` asked for: the pusher's last
    /// access to the page's segment.
    pub(crate) fn end_notify(&self) {
        // Release: pairs with the Acquire load in `wait_notifier`: the
        // notification's accesses to the segment happen before the release
        // of the page that the waiting owner goes on to.
        self.remote_free.fetch_and(!NOTIFYING, Ordering::Release);
    }

    /// Waits until no pusher is telling the owner about this page (owner,
    /// before releasing it). The wait is the notifier's few instructions,
    /// unless its thread was descheduled inside them.
    pub(crate) fn wait_notifier(&self) {
        let mut spins = 0u32;
        // Acquire: pairs with the Release RMW in `end_notify`.
        while self.remote_free.load(Ordering::Acquire) & NOTIFYING != 0 {
            spins += 1;
            if spins < 64 {
                crate::sync::spin_hint();
            } else {
                crate::os::yield_now();
            }
        }
    }

    /// Whether a pusher is telling the owner about this page right now.
    pub(crate) fn is_notifying(&self) -> bool {
        // Relaxed: a hint; `wait_notifier` is what orders.
        self.remote_free.load(Ordering::Relaxed) & NOTIFYING != 0
    }

    /// Whether the page is parked and waiting to hear of a remote free.
    pub(crate) fn wants_notify(&self) -> bool {
        // Relaxed: a hint for the owner, which alone sets the bit.
        self.remote_free.load(Ordering::Relaxed) & FULL_NOTIFY != 0
    }

    /// Asks to be told of the next remote free (owner, parking the page):
    /// sets `FULL_NOTIFY`, or sets it again when it is set already. Fails
    /// (returns false) when remote blocks are waiting — the caller should
    /// collect them — or a notifier is at work (`is_notifying`).
    pub(crate) fn try_set_full_notify(&self) -> bool {
        // Relaxed: the CAS checks the value.
        let current = self.remote_free.load(Ordering::Relaxed);
        if current & !FULL_NOTIFY != 0 {
            return false;
        }
        // Release, also when the bit is set already (a reclaiming heap sets
        // it again): pairs with the pusher's Acquire fence after the CAS
        // that reads it, so the notifier sees this owner in
        // `Segment::heap`. The CAS is a read-modify-write, so later pushes
        // read from this release sequence.
        self.remote_free
            .compare_exchange(current, FULL_NOTIFY, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Withdraws a `FULL_NOTIFY` request (the owner found the page useful
    /// again by itself). A pusher racing with this may still notify; the
    /// notification handler tolerates pages that are no longer parked.
    pub(crate) fn clear_full_notify(&self) {
        // Relaxed: publishes nothing; a racing pusher either sees the bit
        // (and notifies, harmlessly) or not.
        self.remote_free.fetch_and(!FULL_NOTIFY, Ordering::Relaxed);
    }

    /// Whether the block list `list` has `n` distinct entries inside the page.
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    fn list_len(&self, mut list: *mut Block) -> Option<u32> {
        let mut n = 0u32;
        let end = self.start() as usize + self.capacity as usize * self.block_size;
        while !list.is_null() {
            let a = list as usize;
            if a < self.start() as usize || a >= end || !(a - self.start() as usize).is_multiple_of(self.block_size) {
                return None;
            }
            n += 1;
            if n > self.capacity {
                return None;
            }
            list = self.next_of(list);
        }
        Some(n)
    }

    /// Checks the owner's invariant (expensive: walks the lists).
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    pub(crate) fn is_valid(&self) -> bool {
        let Some(f) = self.list_len(self.free) else {
            return false;
        };
        #[cfg(feature = "secure")]
        let Some(f) = self.list_len(self.local_free).map(|l| l + f) else {
            return false;
        };
        self.capacity <= self.reserved && self.used + f == self.capacity
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    /// Memory for a test span of `len` bytes, 16-byte aligned, with room
    /// in front for the `secure` build's table of requested sizes.
    struct Span(Vec<u128>);

    impl Span {
        fn new(len: usize) -> Self {
            // Written only to fill the `secure` build's table.
            #[cfg_attr(not(feature = "secure"), allow(unused_mut))]
            let mut span = Span(std::vec![0u128; (len + crate::secure::UNIT_TABLE_BYTES).div_ceil(16)]);
            #[cfg(feature = "secure")]
            // SAFETY: the table lies inside the span's memory.
            unsafe {
                crate::secure::fill(span.0.as_mut_ptr() as *mut u8, crate::secure::UNIT_TABLE_BYTES)
            };
            span
        }

        fn start(&mut self) -> *mut u8 {
            // SAFETY: the table's bytes lie inside the span's memory.
            unsafe { (self.0.as_mut_ptr() as *mut u8).add(crate::secure::UNIT_TABLE_BYTES) }
        }

        fn len(&self) -> usize {
            self.0.len() * 16 - crate::secure::UNIT_TABLE_BYTES
        }
    }

    fn page_over(span: &mut Span, block_size: usize) -> Page {
        let mut p = Page::empty();
        p.init(0, block_size, span.start(), 1, span.len(), false);
        p.reserved = (span.len() / block_size) as u32;
        p
    }

    /// Frees `block` of `page` as the owner's `free` does, but for the
    /// checks (the freed mark, then the push).
    fn free_local(page: &mut Page, block: *mut u8) {
        // SAFETY: block is a handed-out block of page.
        unsafe { (*(block as *mut Block)).freed = freed_mark(page) };
        page.push(block as *mut Block);
    }

    #[test]
    fn carving_is_lazy_and_yields_every_block_once() {
        let mut span = Span::new(64 * 1024);
        let mut page = page_over(&mut span, 64);
        assert_eq!(page.capacity, 0);
        let mut seen = Vec::new();
        loop {
            if page.free.is_null() && !page.extend() {
                break;
            }
            assert!(page.capacity <= 4096 / 64 * (seen.len() as u32 / 64 + 1));
            seen.push(page.pop(1) as usize);
            assert!(page.is_valid());
        }
        assert_eq!(seen.len(), 1024);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1024);
    }

    #[test]
    #[cfg(not(feature = "secure"))]
    fn the_block_freed_last_is_handed_out_first() {
        let mut span = Span::new(4096);
        let mut page = page_over(&mut span, 512);
        assert!(page.extend());
        let a = page.pop(1);
        let b = page.pop(1);
        let c = page.pop(1);
        free_local(&mut page, a);
        free_local(&mut page, c);
        assert_eq!(page.used, 1);
        assert!(page.is_valid());
        assert_eq!(page.pop(1), c);
        assert_eq!(page.pop(1), a);
        assert_ne!(page.pop(1), b);
        assert!(page.is_valid());
    }

    #[test]
    #[cfg(not(feature = "secure"))]
    fn only_never_handed_out_blocks_of_zeroed_spans_are_fresh() {
        let mut span = Span::new(4096);
        let mut page = Page::empty();
        page.init(0, 256, span.start(), 1, span.len(), true);
        assert!(page.extend());
        let (a, fresh) = page.pop_fresh(1);
        assert!(fresh);
        // SAFETY: a is a 256-byte block of the span, handed out.
        unsafe { a.write_bytes(0xAB, 256) };
        // SAFETY: as above; the second word is where free writes its mark.
        unsafe { (*(a as *mut Block)).freed = freed_mark(&page) };
        page.push(a as *mut Block);
        let (again, fresh) = page.pop_fresh(1);
        assert_eq!(again, a);
        assert!(!fresh, "a block handed out before is not fresh");
        let (_, fresh) = page.pop_fresh(1);
        assert!(fresh);
        // The same span, not known to be zero: nothing is fresh.
        let mut dirty = Page::empty();
        dirty.init(0, 256, span.start(), 1, span.len(), false);
        assert!(dirty.extend());
        assert!(!dirty.pop_fresh(1).1);
    }

    #[test]
    fn remote_free_is_collected_by_owner() {
        let mut span = Span::new(4096);
        let mut page = page_over(&mut span, 256);
        assert!(page.extend());
        let blocks: Vec<*mut u8> = (0..4).map(|_| page.pop(1)).collect();
        for &b in &blocks {
            assert!(!page.push_remote(b as *mut Block, b as *mut Block, 1));
        }
        assert_eq!(page.used, 4);
        while !page.free.is_null() {
            page.pop(1);
        }
        let used_before = page.used;
        page.collect_remote();
        assert_eq!(page.used, used_before - 4);
        assert!(page.is_valid());
    }

    #[test]
    fn every_span_fits_the_remote_count() {
        use crate::class::{span_pages, BLOCK_SIZE};
        for (class, block_size) in BLOCK_SIZE.iter().enumerate() {
            let blocks = span_pages(class) * crate::segment::PAGE_SIZE / block_size;
            assert!(blocks <= 4096, "class {class}: {blocks} blocks");
            assert!(blocks < 1 << (usize::BITS - REMOTE_COUNT_SHIFT));
        }
    }

    #[test]
    fn a_remote_chain_is_counted_and_joined_to_a_non_empty_free() {
        let mut span = Span::new(4096);
        let mut page = page_over(&mut span, 256);
        assert!(page.extend());
        let b: Vec<*mut Block> = (0..6).map(|_| page.pop(1) as *mut Block).collect();
        let (b0, b1, b2) = (b[0], b[1], b[2]);
        // SAFETY: b0..b2 are handed-out blocks of the page, linked into a
        // chain as a remote batch is.
        unsafe {
            (*b0).next = page.encode(b1);
            (*b1).next = page.encode(b2);
        }
        assert!(!page.push_remote(b[0], b[2], 3));
        assert!(!page.push_remote(b[3], b[3], 1));
        assert_eq!(page.remote_waiting(), 4);
        assert!(!page.free.is_null(), "the carved rest is still free");
        page.collect_remote();
        assert_eq!(page.used, 2);
        assert_eq!(page.remote_waiting(), 0);
        assert!(page.is_valid(), "every block is on free once");
    }

    #[test]
    fn odd_inverse_inverts() {
        for x in [1u64, 3, 5, 7, 9, 25, 63, 0x1234_5677, u64::MAX] {
            assert_eq!(x.wrapping_mul(odd_inverse(x)), 1, "{x}");
        }
    }

    #[test]
    fn block_starts_are_recognised_without_division() {
        for bs in [16usize, 48, 80, 1024, 1280, 3584, 57344] {
            let mut span = Span::new(512 * 1024);
            let mut page = page_over(&mut span, bs);
            while page.extend() {
                while !page.free.is_null() {
                    page.pop(1);
                }
            }
            let start = page.start() as usize;
            let end = start + page.capacity as usize * bs;
            for off in (0..(end - start + 2 * bs)).step_by(8) {
                let expect = off % bs == 0 && start + off < end;
                assert_eq!(
                    page.is_block_start((start + off) as *const u8),
                    expect,
                    "bs {bs} off {off}"
                );
            }
            // Below the start, far beyond, and at multiples of the block
            // size past the carved blocks: never a block start.
            for back in (8..4 * bs).step_by(8) {
                assert!(!page.is_block_start((start - back) as *const u8), "bs {bs} -{back}");
            }
            for k in [page.capacity as usize, page.capacity as usize + 1, 1 << 20, 1 << 40] {
                assert!(
                    !page.is_block_start(start.wrapping_add(k * bs) as *const u8),
                    "bs {bs} block {k}"
                );
            }
            assert!(!page.is_block_start(core::ptr::null()));
            assert!(!page.is_block_start(usize::MAX as *const u8));
        }
    }

    #[test]
    fn block_index_is_exact_for_every_class_and_bounded_by_what_is_carved() {
        let mut sizes: Vec<usize> = crate::class::BLOCK_SIZE.to_vec();
        sizes.extend([31 * 65536, 31 * 65536 - 4096, 65536, 3 * 65536]);
        for bs in sizes {
            let mut page = Page::empty();
            // A span address only: nothing is read or written through it.
            let start = 0x7f00_0001_0000usize;
            page.init(0, bs, start as *mut u8, 1, 64 * bs, false);
            page.set_carved(5);
            for k in 0..64usize {
                let p = (start + k * bs) as *const u8;
                assert_eq!(page.block_index(p), k as u64, "bs {bs} block {k}");
                assert_eq!(page.is_block_start(p), k < 5, "bs {bs} block {k}");
                for delta in [1usize, 8, 16, bs / 2] {
                    if delta % bs != 0 {
                        assert!(
                            !page.is_block_start((start + k * bs + delta) as *const u8),
                            "bs {bs} {k}+{delta}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn full_notify_is_reported_once_to_the_first_remote_pusher() {
        let mut span = Span::new(1024);
        let mut page = page_over(&mut span, 256);
        assert!(page.extend());
        let blocks: Vec<*mut u8> = (0..4).map(|_| page.pop(1)).collect();
        assert!(page.try_set_full_notify());
        assert!(page.push_remote(blocks[0] as *mut Block, blocks[0] as *mut Block, 1));
        assert!(!page.push_remote(blocks[1] as *mut Block, blocks[1] as *mut Block, 1));
        assert!(!page.try_set_full_notify(), "blocks are waiting");
        page.collect_remote();
        assert_eq!(page.used, 2);
        // The first pusher has not finished telling the owner: the page
        // cannot be parked again (nor released) until it has.
        assert!(page.is_notifying());
        assert!(!page.try_set_full_notify(), "a notifier is at work");
        page.end_notify();
        assert_eq!(page.remote_free.load(Ordering::Relaxed), 0);
        page.wait_notifier();
        assert!(page.try_set_full_notify());
        assert!(
            page.try_set_full_notify(),
            "setting it again (a reclaimer does) succeeds"
        );
    }

    /// `secure`: the owner's frees wait on `local_free` until `free` has
    /// run dry, then come back in an order that is neither theirs nor its
    /// reverse (over several pages' worth of tries).
    #[test]
    #[cfg(feature = "secure")]
    fn secure_reuse_is_delayed_and_shuffled() {
        let mut span = Span::new(4096);
        let mut page = page_over(&mut span, 64);
        assert!(page.extend());
        let span_start = page.start() as usize;
        let index = |p: *mut u8| (p as usize - span_start) / 64;
        let mut orders = std::collections::BTreeSet::new();
        for round in 0..8 {
            let blocks: Vec<*mut u8> = (0..64).map(|_| page.pop(10)).collect();
            assert!(page.free.is_null());
            let mut freed: Vec<usize> = blocks.iter().map(|&b| index(b)).collect();
            freed.sort_unstable();
            freed.truncate(32);
            for &i in &freed {
                free_local(&mut page, (span_start + i * 64) as *mut u8);
            }
            assert!(page.free.is_null() && page.has_local_free(), "round {round}");
            assert!(page.is_valid());
            // Nothing comes back before free runs dry; then all of them.
            page.collect_local();
            let again: Vec<usize> = (0..32).map(|_| index(page.pop(10))).collect();
            assert!(page.free.is_null() && !page.has_local_free());
            let mut sorted = again.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, freed, "every freed block comes back once");
            orders.insert(again);
            // Back to a page with every block free, for the next round.
            for &b in &blocks {
                if !freed.contains(&index(b)) {
                    free_local(&mut page, b);
                }
            }
            for &i in &freed {
                free_local(&mut page, (span_start + i * 64) as *mut u8);
            }
            page.collect_local();
        }
        let ascending: Vec<usize> = (0..32).collect();
        let descending: Vec<usize> = (0..32).rev().collect();
        orders.remove(&ascending);
        orders.remove(&descending);
        assert!(orders.len() > 1, "the order of reuse is random: {orders:?}");
    }

    /// `secure`: a block hands out as `FILL` from its first byte to its
    /// last, notes its requested size, and its canary is checked.
    #[test]
    #[cfg(feature = "secure")]
    fn secure_blocks_are_filled_and_sized() {
        let mut span = Span::new(4096);
        let mut page = page_over(&mut span, 48);
        assert!(page.extend());
        let p = page.pop(20);
        // SAFETY: p is a 48-byte block of the span, handed out.
        unsafe {
            assert!(crate::secure::is_filled(p, 48));
            assert_eq!(page.requested_size(p), 20);
            assert_eq!(page.check_live(p, "test"), 20);
            p.write_bytes(7, 20);
            page.set_requested_size(p, 8);
            assert!(
                crate::secure::is_filled(p.add(8), 40),
                "bytes past the new size are canary"
            );
            page.on_free(p);
            assert!(
                crate::secure::is_filled(p.add(16), 32),
                "free fills what the block held"
            );
        }
        free_local(&mut page, p);
        page.check_free_blocks("test");
    }
}
