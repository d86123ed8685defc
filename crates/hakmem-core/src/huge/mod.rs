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
//! **Huge blocks of local heaps.** A local heap (local.rs) must be able to
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
//! its single-unit spans here, placed against a guard page after it, with
//! guard pages before it, zero (fresh from the OS, or zeroed as it leaves
//! quarantine), never resized with `mremap`. Freed, its mapping waits in
//! quarantine in the huge cache's slots, `PROT_NONE`, for reuse after 8
//! more huge frees (`quarantine_put`, `quarantine_take`).

#[cfg(not(feature = "secure"))]
pub(crate) mod arena;

use crate::arena::{advise_thp, NO_CACHES};
use crate::heap::Heap;
use crate::os;
use crate::purge::GLOBAL_PURGE_AT;
#[cfg(feature = "secure")]
use crate::secure;
use crate::segment::{Segment, SegmentKind, PAGE_SIZE, SEGMENT_SIZE};
use crate::segment_map::map_set;
use crate::stats;
use crate::sync::{global, Ordering, SpinLock};
use core::cell::UnsafeCell;
use core::ptr;

/// Offset of a huge block from its segment header for alignment `align`.
fn huge_offset(align: usize) -> usize {
    align.clamp(PAGE_SIZE, SEGMENT_SIZE)
}

/// Huge mappings kept for reuse after free, so that a program cycling
/// through multi-MiB buffers does not mmap/munmap per allocation.
const HUGE_CACHE_SLOTS: usize = 64;
/// A cached mapping up to this many times larger than a request serves it
/// as it is (its tail stays, resident or not); a larger one is shrunk.
#[cfg(not(feature = "secure"))]
const SHRINK_FACTOR: usize = 4;

struct HugeCache {
    lock: SpinLock,
    slots: UnsafeCell<[*mut Segment; HUGE_CACHE_SLOTS]>,
    bytes: UnsafeCell<usize>,
    /// `secure`: huge blocks freed so far (the quarantine's clock).
    #[cfg(feature = "secure")]
    frees: UnsafeCell<u64>,
    /// `secure`: xorshift state choosing among reusable mappings (0 until
    /// seeded from the kernel).
    #[cfg(feature = "secure")]
    rng: UnsafeCell<u64>,
}

// SAFETY: slots, bytes, frees and rng are only accessed with `lock` held.
unsafe impl Sync for HugeCache {}

global! {
    static HUGE_CACHE: HugeCache = HugeCache {
        lock: SpinLock::new(),
        slots: UnsafeCell::new([ptr::null_mut(); HUGE_CACHE_SLOTS]),
        bytes: UnsafeCell::new(0),
        #[cfg(feature = "secure")]
        frees: UnsafeCell::new(0),
        #[cfg(feature = "secure")]
        rng: UnsafeCell::new(0),
    };
}

global! {
    /// The lock of every local heap's list of huge segments (`Heap::huge`).
    static LOCAL_HUGE: SpinLock = SpinLock::new();
}

/// `fork` prepare: hold the huge cache's lock and the local heaps' list
/// lock across the fork.
pub(crate) fn lock_cache() {
    LOCAL_HUGE.lock();
    HUGE_CACHE.lock.lock();
    #[cfg(not(feature = "secure"))]
    crate::huge_arena::lock();
}

/// `fork` parent/child: release what `lock_cache` took.
pub(crate) fn unlock_cache() {
    #[cfg(not(feature = "secure"))]
    crate::huge_arena::unlock();
    HUGE_CACHE.lock.unlock();
    LOCAL_HUGE.unlock();
}

/// Links huge segment `segment`, just allocated by local heap `heap`, into
/// the heap's list.
///
/// # Safety
/// `heap` must be a live local heap of the calling thread; `segment` the
/// huge segment of a block it just allocated, in no list.
pub(crate) unsafe fn attach_to_local(heap: *mut Heap, segment: *mut Segment) {
    LOCAL_HUGE.lock();
    // SAFETY: the lock is held; the caller's guarantees.
    unsafe {
        // Relaxed: read by a free of the block, which got the block after
        // this (through whatever handed it over), or under the lock.
        (*segment).heap.store(heap, Ordering::Relaxed);
        (*segment).prev = ptr::null_mut();
        (*segment).next = (*heap).huge;
        if !(*heap).huge.is_null() {
            (*(*heap).huge).prev = segment;
        }
        (*heap).huge = segment;
    }
    LOCAL_HUGE.unlock();
}

/// Unlinks huge segment `segment` from the local heap's list that holds
/// it, if any (its block is being freed).
///
/// # Safety
/// `segment` must be a live huge segment whose block the caller is freeing.
unsafe fn detach_from_local(segment: *mut Segment) {
    // Acquire: pairs with the Release store of null in `detach_all`, so
    // that heap's last read of this header happens before the caller
    // frees (and perhaps unmaps) it.
    // SAFETY: the caller's guarantee: the header is mapped.
    let heap = unsafe { (*segment).heap.load(Ordering::Acquire) };
    if heap.is_null() {
        return;
    }
    LOCAL_HUGE.lock();
    // SAFETY: the lock is held; a segment still naming the heap under the
    // lock is in its list (`detach_all` clears the name under the lock).
    unsafe {
        // Relaxed: under the lock, which orders every store of it to a
        // non-null value and every list change.
        if (*segment).heap.load(Ordering::Relaxed) == heap {
            let (prev, next) = ((*segment).prev, (*segment).next);
            if prev.is_null() {
                (*heap).huge = next;
            } else {
                (*prev).next = next;
            }
            if !next.is_null() {
                (*next).prev = prev;
            }
            (*segment).heap.store(ptr::null_mut(), Ordering::Relaxed);
        }
    }
    LOCAL_HUGE.unlock();
}

/// Takes every huge segment off local heap `heap`'s list, each left
/// naming no heap, and returns the first (the rest follow through
/// `Segment::next`, which only the caller may still read: a segment is
/// freed by any thread as soon as it names no heap).
///
/// # Safety
/// `heap` must be a local heap of the calling thread being deleted or
/// destroyed.
pub(crate) unsafe fn detach_all(heap: *mut Heap) -> *mut Segment {
    LOCAL_HUGE.lock();
    // SAFETY: the lock is held; the list's segments are live (a free
    // unlinks under the lock before freeing).
    let first = unsafe {
        let first = (*heap).huge;
        (*heap).huge = ptr::null_mut();
        let mut segment = first;
        while !segment.is_null() {
            let next = (*segment).next;
            // Release: pairs with the Acquire load in `detach_from_local`:
            // this thread's read of `next` above happens before a freer
            // that sees null frees the segment.
            (*segment).heap.store(ptr::null_mut(), Ordering::Release);
            segment = next;
        }
        first
    };
    LOCAL_HUGE.unlock();
    first
}

#[cfg(not(feature = "secure"))]
/// Rounds a huge mapping size up to one of four steps per power of two, so
/// freed mappings are reused by requests of similar size (at most 25 %
/// virtual overhead; untouched tails cost no memory).
fn huge_mapping_size(total: usize) -> Option<usize> {
    if total <= SEGMENT_SIZE {
        return Some(SEGMENT_SIZE);
    }
    let b = usize::BITS - 1 - (total - 1).leading_zeros();
    let step = 1usize << (b - 2);
    total.checked_add(step - 1).map(|t| t & !(step - 1))
}

/// Takes the cached mapping that serves a request for `mapping_size` bytes
/// best: among those whose pages are still resident (not purged) if any,
/// the smallest at least that large, else the largest. Null when the cache
/// is empty. (`secure` builds take from the cache, their quarantine,
/// with `quarantine_take`.)
#[cfg(not(feature = "secure"))]
fn huge_cache_take(mapping_size: usize) -> *mut Segment {
    HUGE_CACHE.lock.lock();
    let mut best: Option<usize> = None;
    // SAFETY: the lock is held; cached segments are unused huge segments.
    let found = unsafe {
        let slots = &mut *HUGE_CACHE.slots.get();
        // Ordered by: resident first, then large enough, then closest size.
        let rank = |s: *mut Segment| {
            let size = (*s).mapping_size;
            let fits = size >= mapping_size;
            let gap = if fits { size - mapping_size } else { mapping_size - size };
            ((*s).purged_units != 0, !fits, gap)
        };
        for (i, &slot) in slots.iter().enumerate() {
            if slot.is_null() {
                continue;
            }
            if best.is_none_or(|b| rank(slot) < rank(slots[b])) {
                best = Some(i);
            }
        }
        match best {
            Some(i) => {
                let s = slots[i];
                slots[i] = ptr::null_mut();
                *HUGE_CACHE.bytes.get() -= (*s).mapping_size;
                s
            }
            None => ptr::null_mut(),
        }
    };
    HUGE_CACHE.lock.unlock();
    found
}

/// Keeps `segment` for reuse; returns the segment to unmap instead (the
/// one given, or the largest older one it displaced), or null.
fn huge_cache_put(segment: *mut Segment) -> *mut Segment {
    let cap = crate::policy::huge_cache_cap();
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; segment and the cached segments are unused
    // huge segments.
    let victim = unsafe {
        let size = (*segment).mapping_size;
        let slots = &mut *HUGE_CACHE.slots.get();
        let bytes = &mut *HUGE_CACHE.bytes.get();
        let free_slot = slots.iter().position(|s| s.is_null());
        let largest = (0..HUGE_CACHE_SLOTS)
            .filter(|&i| !slots[i].is_null())
            .max_by_key(|&i| (*slots[i]).mapping_size);
        match (free_slot, largest) {
            (Some(i), _) if *bytes + size <= cap => {
                slots[i] = segment;
                *bytes += size;
                ptr::null_mut()
            }
            (_, Some(i)) if *bytes - (*slots[i]).mapping_size + size <= cap => {
                let old = slots[i];
                *bytes = *bytes - (*old).mapping_size + size;
                slots[i] = segment;
                old
            }
            _ => segment,
        }
    };
    HUGE_CACHE.lock.unlock();
    victim
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
    let size = size.max(crate::page::MIN_BLOCK_SIZE);
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
        if let Some(n) = crate::huge_arena::units_for(size) {
            if let Some(served) = crate::huge_arena::alloc(n) {
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
                crate::valgrind::header_access(p);
                (*(p as *mut crate::page::Block)).freed = 0;
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
    let segment = if align > SEGMENT_SIZE {
        os::map_aligned(total, align, SEGMENT_SIZE)
    } else {
        os::map_aligned(total, SEGMENT_SIZE, 0)
    } as *mut Segment;
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

/// `huge_alloc` of the `secure` build. The mapping is `[header unit | guard
/// pages | the block | guard page]`:
///
/// * alignments up to an OS page: the block ends against the last guard
///   page, at a multiple of 16 (a 1-byte overflow of a block whose size is
///   a multiple of 16 faults at once), and starts in the first page after
///   the guards before it, whose bytes in front of it are canary (`FILL`);
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
fn secure_alloc(size: usize, align: usize) -> (*mut u8, bool) {
    let page = os::page_size();
    let round = |n: usize, to: usize| n.checked_add(to - 1).map(|n| n & !(to - 1));
    // Room for the freed mark that `free` writes (a zero-sized block too).
    let room = size.max(crate::page::MIN_BLOCK_SIZE);
    let (offset, data) = if align <= page {
        let Some(data) = round(room, page) else {
            return (ptr::null_mut(), false);
        };
        let Some(placed) = round(room, align.max(crate::MIN_ALIGN)) else {
            return (ptr::null_mut(), false);
        };
        (PAGE_SIZE + data - placed, data)
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
    if segment.is_null() && quarantine_release(total) {
        // Out of address space (or memory): what waits in quarantine goes
        // first, as a cache would.
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
        os::protect_none(base.add(PAGE_SIZE - page), page + block_pages_at);
        os::protect_none(base.add(total - page), page);
        let first = base.add(PAGE_SIZE + block_pages_at);
        secure::fill(first, p as usize - first as usize);
        let end = p.add(size);
        secure::fill(end, base.add(total - page) as usize - end as usize);
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
const QUARANTINE_FREES: u64 = 8;

/// Largest quarantined mapping (`secure`, bytes after the header unit)
/// kept resident, to be zeroed when handed out again; larger ones are
/// purged as they go in (the next owner faults in only what it touches).
#[cfg(feature = "secure")]
const QUARANTINE_RESIDENT_MAX: usize = 256 << 10;

/// Takes a mapping of `total` to `2 * total` bytes (at most 1.875 MiB
/// more) out of quarantine (`secure`): one chosen at random among those
/// freed at least `QUARANTINE_FREES` huge frees ago, or null.
#[cfg(feature = "secure")]
fn quarantine_take(total: usize) -> *mut Segment {
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
fn quarantine_release(needed: usize) -> bool {
    let mut taken = [ptr::null_mut::<Segment>(); HUGE_CACHE_SLOTS];
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held.
    unsafe {
        if *HUGE_CACHE.bytes.get() >= needed {
            core::ptr::swap(HUGE_CACHE.slots.get(), &mut taken);
            *HUGE_CACHE.bytes.get() = 0;
        }
    }
    HUGE_CACHE.lock.unlock();
    let mut any = false;
    for &s in taken.iter().filter(|s| !s.is_null()) {
        // SAFETY: taken off the quarantine: an unused huge segment no list
        // refers to.
        unsafe { huge_unmap(s) };
        any = true;
    }
    any
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
unsafe fn quarantine_reuse(segment: *mut Segment, total: usize, offset: usize, size: usize) -> Option<*mut u8> {
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
        secure::fill(end, guard as usize - end as usize);
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
unsafe fn quarantine_put(segment: *mut Segment, delay: i64) -> *mut Segment {
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
        os::protect_none(first, total - PAGE_SIZE - page);
        HUGE_CACHE.lock.lock();
        *HUGE_CACHE.frees.get() += 1;
        (*segment).quarantined_at = *HUGE_CACHE.frees.get();
        HUGE_CACHE.lock.unlock();
        let deadline = (*segment).purge_at_ms;
        cache_freed(segment, deadline)
    }
}

/// Checks the canaries around huge block `p` of `segment` (`secure`): the
/// bytes between the guard before it and its start, and between its end
/// and the guard after it, hold `FILL` (else `hakmem: heap overflow` or
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
        if !secure::is_filled(end, tail) {
            let at = secure::first_unfilled(end, tail).unwrap_or(0);
            secure::report(
                secure::Corruption::Overflow,
                p,
                Some(size),
                (size + at) as isize,
                found_by,
            );
        }
        let head = p as usize - first as usize;
        if !secure::is_filled(first, head) {
            secure::report(secure::Corruption::Underflow, p, Some(size), -1, found_by);
        }
        size
    }
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

/// Purges the huge mappings in the cache that are due (all when `force`);
/// returns the earliest remaining deadline (`u64::MAX` when none).
pub(crate) fn purge_huge_cache(now: u64, force: bool) -> u64 {
    let mut due = [ptr::null_mut::<Segment>(); HUGE_CACHE_SLOTS];
    let mut next = u64::MAX;
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; cached segments are unused huge segments.
    unsafe {
        for (slot, d) in (*HUGE_CACHE.slots.get()).iter_mut().zip(due.iter_mut()) {
            let s = *slot;
            if s.is_null() || (*s).dirty_units == 0 || (*s).purge_at_ms == 0 {
                continue;
            }
            if force || (*s).purge_at_ms <= now {
                *d = s;
                *slot = ptr::null_mut();
                *HUGE_CACHE.bytes.get() -= (*s).mapping_size;
            } else {
                next = next.min((*s).purge_at_ms);
            }
        }
    }
    HUGE_CACHE.lock.unlock();
    #[cfg(not(feature = "secure"))]
    {
        next = next.min(crate::huge_arena::purge_due(now, force));
    }
    for &s in due.iter().filter(|s| !s.is_null()) {
        // SAFETY: s was taken off the cache above: exclusively ours; its
        // block area holds no live data.
        unsafe {
            let block = (s as *mut u8).add(PAGE_SIZE);
            if os::purge(block, (*s).mapping_size - PAGE_SIZE) {
                // The freed mark back (its page faulted in again, zero but
                // for the mark), so that a double free after the purge is
                // still caught. (`secure`: the mapping is in quarantine,
                // `PROT_NONE` and out of the segment map.)
                #[cfg(not(feature = "secure"))]
                {
                    crate::valgrind::header_access(block);
                    (*(block as *mut crate::page::Block)).freed = crate::page::freed_mark((*s).page_of(block));
                    crate::valgrind::header_done(block);
                }
                let bytes = purged_bytes((*s).mapping_size);
                stats::committed(-(bytes as isize));
                crate::policy::purged(bytes);
                (*s).purged_units = 1;
                (*s).dirty_units = 0;
            }
            // Refused (locked memory, a sandbox): the mapping keeps its
            // bytes and stays dirty — handed out again, it is not zero —
            // and is not tried again (it goes when the cache evicts it).
            (*s).purge_at_ms = 0;
        }
        let victim = huge_cache_put(s);
        if !victim.is_null() {
            // SAFETY: victim is an unused huge segment no list refers to.
            unsafe { huge_unmap(victim) };
        }
    }
    next
}

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
            let units = crate::huge_arena::units_for(new_size);
            if units.is_some_and(|n| crate::huge_arena::resize_in_place(segment, n * SEGMENT_SIZE)) {
                return p;
            }
            if new_total < (*segment).mapping_size {
                return ptr::null_mut();
            }
            crate::huge_arena::move_out(segment, new_total)
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
unsafe fn resize_mapping(segment: *mut Segment, new_total: usize) -> *mut Segment {
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
    crate::valgrind::header_done(p as *mut u8);
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
        unsafe { crate::huge_arena::free(segment, delay) };
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

/// Puts freed huge `segment`, its purge state written (`deadline`: its
/// `purge_at_ms`, 0 for none), into the cache (`secure`: the quarantine);
/// returns the segment to unmap instead (this one, or an older one it
/// displaced), or null. From the put on, another thread may take the
/// segment out of the cache: it is not read again unless it comes back
/// as the victim, hence the deadline passed in.
fn cache_freed(segment: *mut Segment, deadline: u64) -> *mut Segment {
    let victim = huge_cache_put(segment);
    if !victim.is_null() {
        // SAFETY: victim is an unused huge segment no list refers to.
        crate::policy::huge_evicted(unsafe { (*victim).mapping_size });
    }
    if victim != segment && deadline != 0 {
        GLOBAL_PURGE_AT.fetch_min(deadline, Ordering::Relaxed);
    }
    victim
}

/// `keep_freed` of the `secure` build: the mapping goes into quarantine,
/// so a dangling pointer faults until it is handed out again.
///
/// # Safety
/// As `keep_freed`.
#[cfg(feature = "secure")]
unsafe fn keep_freed(segment: *mut Segment, _p: *const u8, delay: i64) -> *mut Segment {
    // SAFETY: the caller's guarantee.
    unsafe { quarantine_put(segment, delay) }
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

/// Tests of the protocol windows, in the `hakmem_race_windows` build only
/// (scripts/test runs them there).
#[cfg(all(test, hakmem_race_windows))]
mod window_tests {
    use super::*;
    use crate::segment::segment_of;
    use crate::segment_map::is_segment;
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
    /// so it moves out (`huge_arena::move_out`), or one of its own (80
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
            // SAFETY: p is our live huge block; the hook maps only where
            // the block no longer is.
            let q = unsafe { huge_realloc(old, p, grown) };
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

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;
    use crate::segment::segment_of;
    use crate::segment_map::is_segment;

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
    /// multiples of 16), its canaries hold `FILL`, and the guard pages
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
