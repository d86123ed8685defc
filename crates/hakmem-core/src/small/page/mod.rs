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
//! | *abandoned* | true | as it was | 0 | as it was, `FULL_NOTIFY` cleared once tidied (`collect_remote`) | its segment's owner exited (`Segment::heap` null); on the abandoned list |
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
//!   abandoned ──tidying (abandon::tidy_abandoned after another heap's
//!       reclaim, or the purge pass: abandon::tidy_abandoned_segment; under
//!       the purge lock): collect_remote; release_span when used reaches
//!       0──▶ free, or abandoned again (pushed back)
//! ```
//!
//! `settle` (page_queue.rs) is the one place that decides between queued,
//! parked and free for an in-use page that is in no queue. The free fast
//! path's single test, `local_owner == my heap`, is true exactly for a
//! queued page of the caller's heap.
//!
//! `used` counts the blocks not known to the owner to be free: those the
//! program holds, those waiting on `remote_free`, and those another thread
//! has freed but still holds in one of its remote batches (thread/remote.rs: they
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
use crate::check::secure;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};
use core::ptr;

#[cfg(feature = "secure")]
mod checks;
mod remote;

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
/// of the page's metadata, in the segment header, XORed with `MARK_KEY`.
///
/// The address alone was a value a live block could hold: a program that
/// stores a pointer mixed with a small number (`p ^ size`, a checksum, a
/// tag) in a block's second word can produce the address of the header
/// entry of its own page, and its next `free` was then reported as a
/// double free (hakmem-bench's `rethread`, which stores `size ^ p` there,
/// hit it once in a few runs on blocks of 64-256 KiB). With the key, a
/// mark has its top bit set (no pointer has it) and 63 random bits a
/// program cannot compute.
#[inline(always)]
pub(crate) fn freed_mark(page: *const Page) -> usize {
    // SAFETY: MARK_KEY is written once, by `set_mark_key`, before any
    // segment exists; whoever holds a page of one reads it after that write
    // (see `MarkKey`).
    page as usize ^ unsafe { *MARK_KEY.0.get() }
}

/// See `freed_mark`. Written once, by the thread that first reads the
/// configuration, before it publishes the configuration (Release) — and
/// every segment's mapping reads the configuration (Acquire) before the
/// segment holds a block, so every read of the key by a thread holding a
/// block happens after the write, and no mark is ever written with another
/// key. Not an atomic: the free path reads it with one memory operand, and
/// the compiler may reuse the value between the check and the store of a
/// mark. The initial value already keeps marks off every pointer.
struct MarkKey(core::cell::UnsafeCell<usize>);

// SAFETY: one write, ordered before every read (above).
unsafe impl Sync for MarkKey {}

static MARK_KEY: MarkKey = MarkKey(core::cell::UnsafeCell::new(MARK_TOP));

/// The bit every mark has (no user-space pointer has it).
const MARK_TOP: usize = 1 << (usize::BITS - 1);

/// Draws `MARK_KEY`.
///
/// # Safety
/// Called once, by the configuration's first reader, before any segment is
/// mapped (no other thread reads the key yet).
pub(crate) unsafe fn set_mark_key(random: usize) {
    // SAFETY: the caller's guarantee: no concurrent reader or writer.
    unsafe { *MARK_KEY.0.get() = random | MARK_TOP };
}

/// What `Page::start_word` is XORed with: the top bit with the `valgrind`
/// feature (a value no pointer has: memcheck never takes it for one),
/// nothing otherwise.
const START_HIDE: usize = if crate::check::valgrind::ENABLED {
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
// `secure`: the block-start check's fields share the first line too.
#[cfg(all(feature = "secure", not(hakmem_loom)))]
const _: () = assert!(core::mem::offset_of!(Page, unit_blocks) < 64 && core::mem::offset_of!(Page, free) == 64);

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
    /// `secure`: blocks in each unit of the span (each unit has its own
    /// table in front of its blocks and its guard page after them, so no
    /// block straddles two units: `block_index`, `block_addr`). On this
    /// line (in what is padding otherwise) because any freeing thread's
    /// block-start check reads it; written only by `init`, as the fields
    /// above.
    #[cfg(feature = "secure")]
    unit_blocks: u16,
    /// Units in the span (head only). Read by any thread (`block_index`,
    /// `secure`), written only by `init` and, for a segment not yet or no
    /// longer holding blocks, `Segment::reset_page_heads`.
    pub(crate) units: u32,
    /// The page's block is a live sample of the heap profiler (profile/):
    /// set by the allocating thread before the block is handed out,
    /// cleared by the thread that frees it (`free_slow`), so that no page
    /// is reused with it set.
    pub(crate) sampled: bool,
    _line_pad: [u8; 3],
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
            #[cfg(feature = "secure")]
            unit_blocks: 0,
            remote_free,
            local_owner,
            start_word: 0,
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            units: 0,
            sampled: false,
            _line_pad: [0; 3],
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

    /// Prepares an unused span head of `units` pages for blocks of
    /// `block_size`, the first at `start`: `bytes` of blocks in all, or
    /// (`secure`) in each unit, whose blocks start `PAGE_SIZE` after the
    /// previous unit's.
    pub(crate) fn init(&mut self, class: u8, block_size: usize, start: *mut u8, units: u32, bytes: usize, zero: bool) {
        self.free = ptr::null_mut();
        self.used = 0;
        self.flags = 0;
        self.class = class;
        self.in_use = true;
        self.zero_init = zero;
        // Cleared by the free of the page's last sample already; a page
        // being set up holds no block at all.
        self.sampled = false;
        self.capacity = 0;
        self.set_carved(0);
        #[cfg(not(feature = "secure"))]
        {
            self.reserved = (bytes / block_size) as u32;
        }
        #[cfg(feature = "secure")]
        {
            // A span of one unit may be any length (the tests' spans): its
            // `unit_blocks` is never read.
            let per_unit = bytes / block_size;
            debug_assert!(units == 1 || per_unit <= usize::from(u16::MAX));
            self.unit_blocks = per_unit as u16;
            self.reserved = (per_unit * units as usize) as u32;
        }
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
            crate::check::valgrind::header_access(block);
            // SAFETY: block is a free block of this page (callers walk its lists).
            let next = unsafe { (*block).next };
            crate::check::valgrind::header_done(block);
            next
        }
    }

    /// Hands `block`, just taken off `free`, to a caller who asked for
    /// `size` bytes: clears its freed mark. `secure`: first checks that
    /// nothing wrote to it while it was free (the mark, and zero where a
    /// free block holds zeroes, `secure::zero_ranges`; else `hakmem: write
    /// after free`), then zeroes its link and mark, writes its canary from
    /// `size` (`secure::canary_end`), notes `size` in the unit's table and
    /// clears the block's bit in the free bitmap.
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
                let bs = self.block_size;
                if (*block).freed != freed_mark(self) || !secure::free_body_is_zero(p, bs) {
                    self.report_write_after_free(p, "malloc()");
                }
                secure::clear_header(p);
                // `padded`: _size < bs.
                secure::write_slot_canary(p, _size, bs);
                // Relaxed: the block's holder alone writes its slot; a
                // thread that frees it later got it through whatever
                // synchronisation handed the block over.
                self.size_slot(p, index as u64).store(_size as u16, Ordering::Relaxed);
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

    /// Checks live block `p`, about to be freed, for a heap overflow or
    /// underflow, then zeroes it past the link and mark words (its edges
    /// only, above `secure::WHOLE_ZERO_MAX`) (`secure`; nothing otherwise). The caller has ruled out a double free and
    /// writes the block's link and freed mark afterwards.
    #[inline(always)]
    pub(crate) fn on_free(&self, _p: *mut u8) {
        #[cfg(feature = "secure")]
        {
            self.check_live(_p, "free()");
            // The first 16 bytes receive the link and the mark; the last
            // is zero and stays unwritten (check/secure.rs).
            // SAFETY: the block's slot is the freeing caller's, bs bytes.
            unsafe { secure::zero_free_body(_p, self.block_size) };
        }
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
        // which is mapped read-write and owned by this page's owner, and so
        // do the tables in front of its units (`secure`), whose units hold
        // no carved block before their first is carved here.
        unsafe {
            // Contiguous without `secure`, which excludes `valgrind`.
            crate::check::valgrind::undefined(self.start().add(base * bs), n * bs);
            let block = |i: u16| self.block_addr(base + i as usize) as *mut Block;
            // `secure`: a unit's table is filled as its first block is
            // carved (its slots read `CANARY` until their blocks are handed
            // out, 0xDEDE: never; its last byte, in front of that block,
            // zero: secure.rs), so a span's units are touched only as they
            // are carved. The new blocks hold zeroes where free blocks do
            // (all of fresh OS memory is zero) and carry the freed mark.
            #[cfg(feature = "secure")]
            {
                let per_unit = if self.units > 1 {
                    usize::from(self.unit_blocks)
                } else {
                    self.reserved as usize
                };
                let mut first = base.div_ceil(per_unit) * per_unit;
                while first < base + n {
                    secure::fill_table(self.block_addr(first).sub(secure::UNIT_TABLE_BYTES), per_unit);
                    first += per_unit;
                }
                if !self.zero_init {
                    if self.units == 1 {
                        secure::zero_carved(block(0) as *mut u8, n, bs);
                    } else {
                        for i in 0..n {
                            secure::zero_carved(block(i as u16) as *mut u8, 1, bs);
                        }
                    }
                }
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
            crate::check::valgrind::no_access(self.start().add(base * bs), n * bs);
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
        crate::check::valgrind::header_access(b);
        self.on_alloc(b, size);
        self.used += 1;
        b as *mut u8
    }

    /// Pushes `block`, a block of this page the owner is freeing, on `free`
    /// (`secure`: on `local_free`, for delayed reuse, after checking the
    /// first cache line of the block freed before it, `check_last_freed`).
    /// The caller has written its freed mark.
    #[inline(always)]
    pub(crate) fn push(&mut self, block: *mut Block) {
        #[cfg(not(feature = "secure"))]
        {
            // SAFETY: block is a handed-out block of this page, being freed
            // by its owner: its link word is ours to write.
            unsafe { (*block).next = self.encode(self.free) };
            crate::check::valgrind::header_done(block);
            self.free = block;
        }
        #[cfg(feature = "secure")]
        {
            self.check_last_freed();
            // SAFETY: as above.
            unsafe { (*block).next = self.encode(self.local_free) };
            self.local_free = block;
        }
        debug_assert!(self.used > 0);
        self.used -= 1;
    }

    /// Pops a block from `free` (which must be non-empty) for `size` bytes
    /// and tells whether it is fresh: all zero but its first word (see the
    /// module docs; never in `secure` builds, whose free blocks all carry
    /// the freed mark).
    pub(crate) fn pop_fresh(&mut self, size: usize) -> (*mut u8, bool) {
        debug_assert!(!self.free.is_null());
        crate::check::valgrind::header_access(self.free);
        // SAFETY: free is a free block of this page: both words are ours to read.
        let never_freed = unsafe { (*self.free).freed == 0 };
        crate::check::valgrind::header_done(self.free);
        (self.pop(size), self.zero_init && never_freed)
    }

    /// The index of block `p` when `p` is a block start of this span, and a
    /// number above `u64::MAX / block_size` (so above any block count) for
    /// any other pointer: with `block_size = odd << shift` and `off = p -
    /// start`, `off * inverse(odd)` rotated right by `shift` is `off /
    /// block_size` exactly when the block size divides `off` (the
    /// multiply-and-rotate divisibility test of Granlund and Montgomery).
    /// One multiply and one rotate, no division.
    ///
    /// `secure`, a span of several units: the offset is split into the
    /// unit and the offset in it, whose index must be below `unit_blocks`;
    /// the index is counted across units (`unit * unit_blocks + index in
    /// the unit`), and any other pointer gets `u64::MAX`.
    #[inline(always)]
    pub(crate) fn block_index(&self, p: *const u8) -> u64 {
        let off = (p as usize).wrapping_sub(self.start() as usize) as u64;
        #[cfg(feature = "secure")]
        if self.units > 1 {
            return self.unit_block_index(off);
        }
        off.wrapping_mul(self.block_inverse)
            .rotate_right(u32::from(self.block_shift))
    }

    /// `block_index` of offset `off` in a span of several units
    /// (`secure`; out of line: only the classes above 8 KiB have them):
    /// the offset is split into the unit and the offset in it, whose
    /// index must be below `unit_blocks`.
    #[cfg(feature = "secure")]
    #[cold]
    #[inline(never)]
    fn unit_block_index(&self, off: u64) -> u64 {
        use crate::segment::{PAGE_SHIFT, PAGE_SIZE};
        let unit = off >> PAGE_SHIFT;
        let in_unit = (off & (PAGE_SIZE as u64 - 1))
            .wrapping_mul(self.block_inverse)
            .rotate_right(u32::from(self.block_shift));
        if unit < u64::from(self.units) && in_unit < u64::from(self.unit_blocks) {
            unit * u64::from(self.unit_blocks) + in_unit
        } else {
            u64::MAX
        }
    }

    /// The address of block `index` of the span (`index < reserved`).
    #[inline]
    pub(crate) fn block_addr(&self, index: usize) -> *mut u8 {
        debug_assert!(index < self.reserved as usize);
        #[cfg(feature = "secure")]
        if self.units > 1 {
            let per_unit = self.unit_blocks as usize;
            let unit = index / per_unit;
            let in_unit = index - unit * per_unit;
            return self
                .start()
                .wrapping_add(unit * crate::segment::PAGE_SIZE + in_unit * self.block_size);
        }
        self.start().wrapping_add(index * self.block_size)
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

    /// Whether the block list `list` has `n` distinct entries inside the page.
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    fn list_len(&self, mut list: *mut Block) -> Option<u32> {
        let mut n = 0u32;
        while !list.is_null() {
            if self.block_index(list as *const u8) >= u64::from(self.capacity) {
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
mod tests;
