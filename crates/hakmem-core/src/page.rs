//! Page metadata: a run of equal-sized blocks and its three free lists.
//!
//! A page is one or more contiguous 64 KiB units of a segment (a *span*),
//! described by the `Page` at the index of its first unit in the segment
//! header. It owns:
//!
//! * `free` — blocks the owner allocates from (the fast path pops here);
//! * `local_free` — blocks the owner freed; moved to `free` only when `free`
//!   runs dry, so the slow path runs regularly (mimalloc's heartbeat);
//! * `remote_free` — an atomic stack of blocks other threads freed, taken
//!   whole by the owner with one swap. Its low bit is `FULL_NOTIFY`: set by
//!   the owner when it parks the page as full, cleared by the first remote
//!   push, which then tells the owner (see `Segment::notify`).
//!
//! Blocks are carved lazily (`extend`), a few KiB at a time, so memory that
//! is never allocated is never touched.
//!
//! Invariant (owner's view, checked by `is_valid`):
//! `used == capacity - |free| - |local_free|`, where blocks sitting in
//! `remote_free` still count as used until the owner collects them.

#[cfg(feature = "secure")]
use crate::sync::AtomicU64;
use crate::sync::{AtomicUsize, Ordering};
use core::ptr;

/// A free block: its first word links to the next free block; its second
/// word holds `freed_mark(page)` from the moment it is freed until it is
/// allocated again (every block has at least 16 bytes). A free that finds
/// its mark already there is a double free: caught with one load and a
/// compare, whether the block was freed just before or many frees ago.
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

/// Low bit of `remote_free`: the owner parked the page as full and wants to
/// hear about the first remote free.
pub(crate) const FULL_NOTIFY: usize = 1;

/// `flags` bit: the page is parked as full (not in its class queue) or holds
/// a large block; any free into it takes the slow path.
pub(crate) const PAGE_IN_FULL: u8 = 1;

/// Process-wide secret mixed into every page's list key (`secure` feature),
/// drawn from `getrandom` once at start-up.
#[cfg(feature = "secure")]
pub(crate) static SECRET: AtomicUsize = AtomicUsize::new(0x2545_f491_4f6c_dd1d);

/// Bytes at the end of every segment and huge mapping made inaccessible in
/// `secure` builds (a guard page between neighbours).
pub(crate) const GUARD_BYTES: usize = if cfg!(feature = "secure") { 4096 } else { 0 };

/// Blocks per page tracked by the `secure` free bitmap (64 KiB / 16 B).
#[cfg(feature = "secure")]
const MAP_WORDS: usize = 64;

// The layout the comments above rely on (without the secure extras).
#[cfg(not(feature = "secure"))]
const _: () = assert!(core::mem::size_of::<Page>() == 128 && core::mem::offset_of!(Page, free) == 64);

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
    /// Address of the first block.
    pub(crate) start: *mut u8,
    /// `ceil(2^64 / block_size)`: `off` is a multiple of the block size iff
    /// `off * divisor_magic < divisor_magic` (Lemire's divisibility test), so
    /// the C shim checks "is this a block start?" without a division.
    pub(crate) divisor_magic: u64,
    pub(crate) block_size: usize,
    /// `capacity * block_size` while the page is in use, 0 otherwise: the
    /// bound of `is_block_start` in one compare.
    pub(crate) carved_bytes: u32,
    /// `PAGE_IN_FULL` or 0.
    pub(crate) flags: u8,
    /// Size class, or `LARGE_CLASS`.
    pub(crate) class: u8,
    /// Whether the page is allocated (a span head in use).
    pub(crate) in_use: bool,
    /// Every block on `free` is untouched fresh OS memory except its link word.
    pub(crate) free_is_zero: bool,
    /// Units in the span (head only).
    pub(crate) units: u32,
    _line_pad: [u8; 12],
    // Second cache line: the owner's per-block state, and the remote stack
    // other threads push on (one line moves per remote free, as in mimalloc).
    /// Blocks to allocate from (fast path).
    pub(crate) free: *mut Block,
    /// Blocks freed by the owner.
    pub(crate) local_free: *mut Block,
    /// Blocks handed out and not yet known (to the owner) to be free.
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
}

impl Page {
    /// A page with no blocks (the static empty page and fresh headers).
    #[cfg(not(hakmem_loom))]
    pub(crate) const fn empty() -> Self {
        Self::with_atomics(AtomicUsize::new(0), AtomicUsize::new(0))
    }

    /// A page with no blocks (loom's atomics have no const constructor).
    #[cfg(hakmem_loom)]
    pub(crate) fn empty() -> Self {
        Self::with_atomics(AtomicUsize::new(0), AtomicUsize::new(0))
    }

    const fn with_atomics(remote_free: AtomicUsize, local_owner: AtomicUsize) -> Self {
        Self {
            free: ptr::null_mut(),
            local_free: ptr::null_mut(),
            used: 0,
            flags: 0,
            class: 0,
            in_use: false,
            free_is_zero: false,
            capacity: 0,
            carved_bytes: 0,
            reserved: 0,
            block_size: 0,
            divisor_magic: 0,
            remote_free,
            local_owner,
            start: ptr::null_mut(),
            next: ptr::null_mut(),
            prev: ptr::null_mut(),
            units: 0,
            _line_pad: [0; 12],
            head: ptr::null_mut(),
            #[cfg(feature = "secure")]
            key: 0,
            #[cfg(feature = "secure")]
            free_map: [const { AtomicU64::new(0) }; MAP_WORDS],
        }
    }

    /// Prepares an unused span head of `units` pages (`bytes` in all) for
    /// blocks of `block_size`.
    pub(crate) fn init(&mut self, class: u8, block_size: usize, start: *mut u8, units: u32, bytes: usize, zero: bool) {
        self.free = ptr::null_mut();
        self.local_free = ptr::null_mut();
        self.used = 0;
        self.flags = 0;
        self.class = class;
        self.in_use = true;
        self.free_is_zero = zero;
        self.capacity = 0;
        self.carved_bytes = 0;
        self.reserved = (bytes / block_size) as u32;
        self.block_size = block_size;
        self.divisor_magic = u64::MAX / block_size as u64 + 1;
        self.remote_free.store(0, Ordering::Relaxed);
        self.local_owner.store(0, Ordering::Relaxed);
        self.start = start;
        self.next = ptr::null_mut();
        self.prev = ptr::null_mut();
        self.units = units;
        self.head = self;
        #[cfg(feature = "secure")]
        {
            let secret = SECRET.load(Ordering::Relaxed);
            self.key = (start as usize ^ secret)
                .rotate_left(17)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                | 1;
            for w in self.free_map.iter() {
                w.store(0, Ordering::Relaxed);
            }
        }
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
    /// a block of this page, so a corrupted free list is reported instead of
    /// handing out foreign memory).
    #[inline(always)]
    pub(crate) fn next_of(&self, block: *mut Block) -> *mut Block {
        // SAFETY: block is a free block of this page (callers walk its lists).
        let raw = unsafe { (*block).next };
        #[cfg(feature = "secure")]
        {
            let next = (raw as usize ^ self.key) as *mut Block;
            if !next.is_null() && !self.is_block_start(next as *const u8) {
                crate::os::fatal_pointer(
                    "malloc",
                    "free list corrupted (write after free?) at block",
                    block as *const u8,
                );
            }
            next
        }
        #[cfg(not(feature = "secure"))]
        raw
    }

    /// `secure`: notes that `block` was handed out.
    #[inline(always)]
    pub(crate) fn on_alloc(&self, _block: *const u8) {
        #[cfg(feature = "secure")]
        {
            let (word, bit) = self.map_slot(_block);
            self.free_map[word].fetch_and(!bit, Ordering::Relaxed);
        }
    }

    /// `secure`: notes that `block` is being freed; true when it already was
    /// (a double free the freed mark missed, e.g. after a write after free).
    #[inline(always)]
    pub(crate) fn on_free_was_free(&self, _block: *const u8) -> bool {
        #[cfg(feature = "secure")]
        let was_free = {
            let (word, bit) = self.map_slot(_block);
            self.free_map[word].fetch_or(bit, Ordering::Relaxed) & bit != 0
        };
        #[cfg(not(feature = "secure"))]
        let was_free = false;
        was_free
    }

    #[cfg(feature = "secure")]
    fn map_slot(&self, block: *const u8) -> (usize, u64) {
        let off = (block as usize - self.start as usize) as u128;
        let index = ((off * self.divisor_magic as u128) >> 64) as usize;
        ((index / 64) % MAP_WORDS, 1u64 << (index % 64))
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
            let block = |i: u16| self.start.add((base + i as usize) * bs) as *mut Block;
            for w in order[..n].windows(2) {
                (*block(w[0])).next = self.encode(block(w[1]));
                self.on_free_was_free(block(w[0]) as *const u8);
            }
            (*block(order[n - 1])).next = self.encode(ptr::null_mut());
            self.on_free_was_free(block(order[n - 1]) as *const u8);
            self.free = block(order[0]);
        }
        self.capacity += n as u32;
        self.carved_bytes = self.capacity * bs as u32;
        true
    }

    /// Pops a block from `free`; `free` must be non-empty.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> *mut u8 {
        let b = self.free;
        debug_assert!(!b.is_null());
        self.free = self.next_of(b);
        // SAFETY: b is a free block of this page, now handed out.
        unsafe { (*b).freed = 0 };
        self.on_alloc(b as *const u8);
        self.used += 1;
        b as *mut u8
    }

    /// Whether `p` is the start of a carved block of this page (false for
    /// any pointer when the page is not in use).
    pub(crate) fn is_block_start(&self, p: *const u8) -> bool {
        let off = (p as usize).wrapping_sub(self.start as usize) as u64;
        off < self.carved_bytes as u64 && off.wrapping_mul(self.divisor_magic) < self.divisor_magic
    }

    /// Moves `local_free` and the remote frees into `free`, which must be
    /// empty. Leaves `FULL_NOTIFY` alone when no remote block was waiting.
    pub(crate) fn collect(&mut self) {
        debug_assert!(self.free.is_null());
        if !self.local_free.is_null() {
            self.free = self.local_free;
            self.local_free = ptr::null_mut();
            self.free_is_zero = false;
        }
        self.collect_remote();
    }

    /// Takes every remotely freed block into `free` (prepending).
    pub(crate) fn collect_remote(&mut self) {
        if self.remote_free.load(Ordering::Relaxed) & !FULL_NOTIFY == 0 {
            return;
        }
        // Acquire: pairs with the Release CAS in `push_remote`, making the
        // pushers' link writes (and the user's last writes) visible.
        let head = (self.remote_free.swap(0, Ordering::Acquire) & !FULL_NOTIFY) as *mut Block;
        if head.is_null() {
            return;
        }
        let mut count = 1u32;
        let mut tail = head;
        // SAFETY: every block on the remote stack is a block of this page
        // pushed by `push_remote`; the swap gave this thread the whole stack.
        unsafe {
            loop {
                let next = self.next_of(tail);
                if next.is_null() {
                    break;
                }
                tail = next;
                count += 1;
            }
            (*tail).next = self.encode(self.free);
        }
        self.free = head;
        self.free_is_zero = false;
        debug_assert!(count <= self.used);
        self.used -= count;
    }

    /// Pushes `block` onto the remote stack (any thread). Returns true when
    /// the owner had parked the page as full and must be told.
    pub(crate) fn push_remote(&self, block: *mut Block) -> bool {
        let mut old = self.remote_free.load(Ordering::Relaxed);
        loop {
            // SAFETY: block is a block of this page being freed by the
            // caller, who owns it until the CAS publishes it.
            unsafe { (*block).next = self.encode((old & !FULL_NOTIFY) as *mut Block) };
            // Release: publishes the link write above (and the user's writes
            // to the block) to the owner's Acquire swap in `collect_remote`.
            match self
                .remote_free
                .compare_exchange_weak(old, block as usize, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return old & FULL_NOTIFY != 0,
                Err(current) => old = current,
            }
        }
    }

    /// Asks to be told of the next remote free. Fails (returns false) when
    /// remote blocks are already waiting: the caller should collect them.
    pub(crate) fn try_set_full_notify(&self) -> bool {
        // Relaxed on success: nothing is published; the pusher that later
        // clears the bit publishes its block with Release.
        self.remote_free
            .compare_exchange(0, FULL_NOTIFY, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Withdraws a `FULL_NOTIFY` request (the owner found the page useful
    /// again by itself). A pusher racing with this may still notify; the
    /// notification handler tolerates pages that are no longer parked.
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    pub(crate) fn clear_full_notify(&self) {
        self.remote_free.fetch_and(!FULL_NOTIFY, Ordering::Relaxed);
    }

    /// Whether the block list `list` has `n` distinct entries inside the page.
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    fn list_len(&self, mut list: *mut Block) -> Option<u32> {
        let mut n = 0u32;
        let end = self.start as usize + self.capacity as usize * self.block_size;
        while !list.is_null() {
            let a = list as usize;
            if a < self.start as usize || a >= end || (a - self.start as usize) % self.block_size != 0 {
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
        let (Some(f), Some(l)) = (self.list_len(self.free), self.list_len(self.local_free)) else {
            return false;
        };
        self.capacity <= self.reserved && self.used + f + l == self.capacity
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    extern crate std;
    use std::vec::Vec;

    fn page_over(buf: &mut [u8], block_size: usize) -> Page {
        let mut p = Page::empty();
        p.init(0, block_size, buf.as_mut_ptr(), 1, buf.len(), false);
        p.reserved = (buf.len() / block_size) as u32;
        p
    }

    #[test]
    fn carving_is_lazy_and_yields_every_block_once() {
        let mut buf = std::vec![0u8; 64 * 1024];
        let mut page = page_over(&mut buf, 64);
        assert_eq!(page.capacity, 0);
        let mut seen = Vec::new();
        loop {
            if page.free.is_null() && !page.extend() {
                break;
            }
            assert!(page.capacity <= 4096 / 64 * (seen.len() as u32 / 64 + 1));
            seen.push(page.pop() as usize);
            assert!(page.is_valid());
        }
        assert_eq!(seen.len(), 1024);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1024);
    }

    #[test]
    fn local_frees_come_back_only_after_free_runs_dry() {
        let mut buf = std::vec![0u8; 4096];
        let mut page = page_over(&mut buf, 512);
        assert!(page.extend());
        let a = page.pop();
        let b = page.pop();
        let b_block = b as *mut Block;
        // SAFETY: b is a block of the page just popped.
        unsafe { (*b_block).next = page.encode(page.local_free) };
        page.local_free = b_block;
        page.used -= 1;
        assert!(page.is_valid());
        // Drain free; b must not reappear before that.
        while !page.free.is_null() {
            assert_ne!(page.pop(), b);
        }
        page.collect();
        assert_eq!(page.pop(), b);
        assert_ne!(a, b);
        assert!(page.is_valid());
    }

    #[test]
    fn remote_free_is_collected_by_owner() {
        let mut buf = std::vec![0u8; 4096];
        let mut page = page_over(&mut buf, 256);
        assert!(page.extend());
        let blocks: Vec<*mut u8> = (0..4).map(|_| page.pop()).collect();
        for &b in &blocks {
            assert!(!page.push_remote(b as *mut Block));
        }
        assert_eq!(page.used, 4);
        while !page.free.is_null() {
            page.pop();
        }
        let used_before = page.used;
        page.collect();
        assert_eq!(page.used, used_before - 4);
        assert!(page.is_valid());
    }

    #[test]
    fn block_starts_are_recognised_without_division() {
        for bs in [16usize, 48, 80, 1024, 1280, 3584, 57344] {
            let mut buf = std::vec![0u8; 512 * 1024];
            let mut page = page_over(&mut buf, bs);
            while page.extend() {
                while !page.free.is_null() {
                    page.pop();
                }
            }
            let start = page.start as usize;
            let end = start + page.capacity as usize * bs;
            for off in (0..(end - start + 2 * bs)).step_by(8) {
                let expect = off % bs == 0 && start + off < end;
                assert_eq!(
                    page.is_block_start((start + off) as *const u8),
                    expect,
                    "bs {bs} off {off}"
                );
            }
        }
    }

    #[test]
    fn full_notify_is_reported_once_to_the_first_remote_pusher() {
        let mut buf = std::vec![0u8; 1024];
        let mut page = page_over(&mut buf, 256);
        assert!(page.extend());
        let blocks: Vec<*mut u8> = (0..4).map(|_| page.pop()).collect();
        assert!(page.try_set_full_notify());
        assert!(page.push_remote(blocks[0] as *mut Block));
        assert!(!page.push_remote(blocks[1] as *mut Block));
        assert!(!page.try_set_full_notify(), "blocks are waiting");
        page.collect();
        assert_eq!(page.used, 2);
        assert_eq!(page.remote_free.load(Ordering::Relaxed), 0);
    }
}
