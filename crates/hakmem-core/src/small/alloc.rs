//! Allocation from the thread heap: the fast paths (`alloc_small`, `alloc`,
//! `alloc_zeroed`, inlined into the front in lib.rs), their slow-path
//! entries, large blocks (a span of whole pages holding one block), and the
//! allocations of a thread that has exited.
//!
//! The fast path touches only the owner's heap and page: no lock, no atomic
//! read-modify-write. A miss — an empty page, the static empty or exited
//! heap, the heartbeat running out — goes to `refill` (refill.rs), which
//! does the heap's duties and finds a page with a free block.

use crate::os;
use crate::segment::PAGE_SIZE;
use crate::small::class::{self, CLASS_COUNT, LARGE_CLASS};
use crate::small::page::{Block, Page, PAGE_IN_FULL};
use crate::small::refill::{page_alloc, refill};
use crate::stats;
use crate::thread;
use crate::thread::abandon::{heap_for_thread, heap_retire};
use crate::thread::heap::{Heap, EMPTY_HEAP, EXITED_HEAP};
use core::ptr;

/// Fast-path allocations between two forced slow-path calls, about. Owner
/// frees refill the page they came from (LIFO), so a thread in a steady
/// state may never run dry and reach the slow path by itself; this
/// countdown makes sure its slow-path duties (remote-free notifications,
/// the clock, delayed purges) still run. The countdown is in bytes — one
/// subtraction of the requested size per malloc, the same two
/// instructions as counting allocations — so that the heap profiler
/// (profile/) can arm it with the bytes left to its next sample and cost
/// the fast paths nothing; the slow path arms it with this many times the
/// recent allocations' size (`profile::rearm_own`), so that it still comes
/// about every 1 024 allocations, well under one instruction each.
pub(crate) const HEARTBEAT_ALLOCS: u32 = 1024;

/// The heartbeat a heap starts with (bytes): 1 024 allocations of 64 bytes.
pub(crate) const HEARTBEAT_BYTES: u32 = HEARTBEAT_ALLOCS * 64;

/// Allocates a block for a request of `size` bytes that needs `need <=
/// SMALL_SIZE_MAX` bytes from a class (`need == size`, but for the `secure`
/// build's canary: `secure::padded`) from `heap`: one table load less than
/// `alloc` (the direct page is indexed by size).
///
/// The budget: the C `malloc` of a small size is 17 instructions on a hit,
/// `ret` included, no stack frame (libhakmem.so, disassembled): the size
/// test (2), the heap from TLS (2), the direct page by size (3), its free
/// head and a test (3), the heartbeat (2), the pop, the freed mark cleared
/// and `used += 1` (4).
///
/// # Safety
/// `heap` must be the calling thread's heap.
#[inline(always)]
pub(crate) unsafe fn alloc_small(heap: *mut Heap, need: usize, size: usize) -> *mut u8 {
    debug_assert!(need <= class::SMALL_SIZE_MAX && need >= size);
    // SAFETY: heap is this thread's heap; small_index(need) < SMALL_DIRECT_LEN;
    // direct pages are valid (ours or the static empty page); a page with a
    // block is never the empty page, so heap is a real one when written.
    unsafe {
        let page = *(*heap).direct_small.get_unchecked(class::small_index(need));
        let block = (*page).free;
        if !block.is_null() && heartbeat(heap, size) {
            (*page).free = (*page).next_of(block);
            crate::check::valgrind::header_access(block);
            (*page).on_alloc(block, size);
            (*page).used += 1;
            (*heap).counts.count_alloc(class::class_of(need));
            return block as *mut u8;
        }
        alloc_small_slow(need, size, heap)
    }
}

#[cold]
#[inline(never)]
#[link_section = "hakmem_text"]
// The heap last: the sizes stay in the registers malloc got them in (the
// fast path loads the heap into a register of its own).
unsafe fn alloc_small_slow(need: usize, size: usize, heap: *mut Heap) -> *mut u8 {
    // SAFETY: forwarded from alloc_small.
    unsafe { alloc_slow(heap, class::class_of(need), size) }
}

/// Allocates a block of `class` from `heap` for a request of `size` bytes.
///
/// The fast path is `alloc_small`'s with the class looked up in a table
/// first: 21 instructions for the C `malloc` of a medium size on a hit
/// (the class by table: 3 more, and a second size test).
///
/// # Safety
/// `heap` must be the calling thread's heap; `class` must hold
/// `secure::padded(size)` bytes.
#[inline(always)]
pub(crate) unsafe fn alloc(heap: *mut Heap, class: usize, size: usize) -> *mut u8 {
    debug_assert!(class < CLASS_COUNT);
    // SAFETY: heap is this thread's heap; class < CLASS_COUNT (it comes from
    // the class table); direct pages are valid (a page of this heap or the
    // static empty page, whose free list is null: so heap is a real one
    // when `heartbeat` writes it).
    unsafe {
        let page = *(*heap).direct.get_unchecked(class);
        let block = (*page).free;
        if !block.is_null() && heartbeat(heap, size) {
            (*page).free = (*page).next_of(block);
            crate::check::valgrind::header_access(block);
            (*page).on_alloc(block, size);
            (*page).used += 1;
            (*heap).counts.count_alloc(class);
            return block as *mut u8;
        }
    }
    // SAFETY: as above.
    unsafe { alloc_class_slow(size, class, heap) }
}

/// `alloc`'s miss: [`alloc_slow`] with the size first, where malloc got
/// it (the fast path then needs no copy of it: see `alloc_small_slow`).
#[cold]
#[inline(never)]
#[link_section = "hakmem_text"]
unsafe fn alloc_class_slow(size: usize, class: usize, heap: *mut Heap) -> *mut u8 {
    // SAFETY: forwarded from alloc.
    unsafe { alloc_slow(heap, class, size) }
}

/// Counts down the `size` bytes of one fast-path allocation; false when
/// the heartbeat is due: below zero, read as an `i32` (the caller then
/// takes the slow path, which restarts the countdown). The count is armed
/// with at most 1 GiB and a fast-path size is at most a class's, so it
/// stays far from `i32`'s limits; the sign test compiles
/// to the subtraction from memory and a branch on its sign flag, the two
/// instructions of a plain countdown.
///
/// # Safety
/// `heap` must be the calling thread's heap, not the static empty heap.
#[inline(always)]
unsafe fn heartbeat(heap: *mut Heap, size: usize) -> bool {
    // SAFETY: the caller guarantees heap is its own, writable heap.
    unsafe {
        (*heap).heartbeat = (*heap).heartbeat.wrapping_sub(size as u32);
        ((*heap).heartbeat as i32) >= 0
    }
}

/// Allocates `size` bytes of `class` (which holds `secure::padded(size)`), zeroed. A block
/// carved from fresh OS memory and never handed out is known to be zero
/// but for its link word (`Page::pop_fresh`), so only that word is cleared.
///
/// # Safety
/// `heap` must be the calling thread's heap; `class` is `size`'s class (or
/// a larger one).
#[link_section = "hakmem_text"]
pub(crate) unsafe fn alloc_zeroed(heap: *mut Heap, class: usize, size: usize) -> *mut u8 {
    debug_assert!(class < CLASS_COUNT && crate::check::secure::padded(size) <= class::BLOCK_SIZE[class]);
    // SAFETY: as in `alloc`: the direct page is valid; the heartbeat counts
    // calloc's hits too (a page with a block is never the empty page, so
    // heap is a real one when written).
    unsafe {
        let page = *(*heap).direct.get_unchecked(class);
        if (*page).free.is_null() || !heartbeat(heap, size) {
            return alloc_zeroed_slow(heap, class, size);
        }
        zeroed_from(heap, page, class, size)
    }
}

#[cold]
#[inline(never)]
#[link_section = "hakmem_text"]
unsafe fn alloc_zeroed_slow(heap: *mut Heap, class: usize, size: usize) -> *mut u8 {
    if heap == EXITED_HEAP.get() {
        // SAFETY: inside, thread::heap() is the heap made for this call.
        return alloc_after_exit(|| unsafe { alloc_zeroed(thread::heap(), class, size) }, ptr::null_mut());
    }
    // SAFETY: forwarded from alloc_zeroed; refill returns this thread's
    // heap and a page of it with a free block (checked for null).
    unsafe {
        crate::profile::note_size(heap, size);
        if crate::profile::active() && crate::profile::take(heap, size) {
            let p = crate::profile::alloc_sample(heap, size, true);
            if !p.is_null() {
                return p;
            }
        }
        let (heap, page) = refill(heap, class);
        if page.is_null() {
            return ptr::null_mut();
        }
        zeroed_from(heap, page, class, size)
    }
}

/// Pops a block of `page` (which has one) for `calloc` and clears what may
/// not be zero: only the link word of a block fresh from the OS (in the
/// `secure` build: the middle of a block above `WHOLE_ZERO_MAX`, nothing
/// for others).
///
/// # Safety
/// `page` must be a page of `heap`, the calling thread's, with a free block.
#[inline(always)]
unsafe fn zeroed_from(heap: *mut Heap, page: *mut Page, class: usize, size: usize) -> *mut u8 {
    // SAFETY: the caller's guarantee.
    unsafe {
        (*heap).counts.count_alloc(class);
        let (p, fresh) = (*page).pop_fresh(size);
        // `secure`: a block is handed out zero where its free body is
        // (its link and mark cleared, the rest checked zero), which is all
        // of it up to `size` but for blocks above `WHOLE_ZERO_MAX`: their
        // middle, between the edges, is cleared here (check/secure.rs).
        #[cfg(feature = "secure")]
        {
            let _ = fresh;
            let bs = (*page).block_size;
            if bs > crate::check::secure::WHOLE_ZERO_MAX {
                let edge = crate::check::secure::EDGE_BYTES;
                let end = size.min(bs - edge);
                if end > edge {
                    ptr::write_bytes(p.add(edge), 0, end - edge);
                }
            }
        }
        #[cfg(not(feature = "secure"))]
        {
            let dirty = if fresh {
                size.min(core::mem::size_of::<usize>())
            } else {
                size
            };
            ptr::write_bytes(p, 0, dirty);
        }
        p
    }
}

/// An allocation by a thread whose heap was retired when it exited (a
/// later pthread-key destructor of another library called malloc): served
/// by a heap taken for this one allocation and retired again right after
/// it, so nothing stays owned by a thread that is gone (glibc runs no
/// destructor round after its last, so a heap registered with our key then
/// would never be given up). `fail` is what to return when no heap can be
/// had.
#[cold]
#[inline(never)]
#[link_section = "hakmem_text"]
fn alloc_after_exit<T>(alloc: impl FnOnce() -> T, fail: T) -> T {
    let heap = heap_for_thread();
    if heap.is_null() {
        os::set_errno(os::ENOMEM);
        return fail;
    }
    thread::set_heap(heap);
    let result = alloc();
    thread::set_heap(EXITED_HEAP.get());
    // SAFETY: the heap was taken above for this call alone, and the
    // thread's slot no longer names it.
    unsafe { heap_retire(heap) };
    result
}

#[cold]
#[inline(never)]
#[link_section = "hakmem_text"]
unsafe fn alloc_slow(heap: *mut Heap, class: usize, size: usize) -> *mut u8 {
    if heap == EXITED_HEAP.get() {
        // SAFETY: inside, thread::heap() is the heap made for this call.
        return alloc_after_exit(|| unsafe { alloc_slow(thread::heap(), class, size) }, ptr::null_mut());
    }
    // refill returns this thread's heap and a page of it with a free block.
    // SAFETY: the caller's guarantee; the page is checked for null before use.
    unsafe {
        // The heartbeat's measure of this heap's sizes; with profiling,
        // this allocation may be the one that ends the countdown to the
        // next sample (refill re-arms it).
        crate::profile::note_size(heap, size);
        if crate::profile::active() && crate::profile::take(heap, size) {
            let p = crate::profile::alloc_sample(heap, size, false);
            if !p.is_null() {
                return p;
            }
            // No span for the sample: an ordinary block (not sampled).
        }
        let (heap, page) = refill(heap, class);
        if page.is_null() {
            return ptr::null_mut();
        }
        (*heap).counts.count_alloc(class);
        (*page).pop(size)
    }
}

/// Allocates a large block (`MEDIUM_SIZE_MAX < size <= LARGE_SIZE_MAX`, or
/// any size up to that with alignment up to `PAGE_SIZE`) from `heap`: a
/// span of whole pages holding one block. Returns the block and whether it
/// is zeroed. (Not in `secure` builds, whose blocks all fit one unit: their
/// large blocks are huge.)
///
/// # Safety
/// `heap` must be the calling thread's heap (possibly the empty or the
/// exited heap) or one of its local heaps.
#[link_section = "hakmem_text"]
pub(crate) unsafe fn alloc_large(heap: *mut Heap, size: usize) -> (*mut u8, bool) {
    let heap = if heap == EMPTY_HEAP.get() {
        thread::init_heap()
    } else {
        heap
    };
    if heap.is_null() {
        return (ptr::null_mut(), false);
    }
    if heap == EXITED_HEAP.get() {
        // SAFETY: inside, thread::heap() is the heap made for this call.
        return alloc_after_exit(
            || unsafe { alloc_large(thread::heap(), size) },
            (ptr::null_mut(), false),
        );
    }
    // SAFETY: heap is this thread's heap (or one of its local heaps).
    unsafe {
        if crate::profile::active() {
            let sample = crate::profile::take(heap, size);
            crate::profile::lower(heap);
            let (p, zeroed) = alloc_large_block(heap, size);
            if sample && !p.is_null() {
                crate::profile::record(heap, p, size);
            }
            return (p, zeroed);
        }
        alloc_large_block(heap, size)
    }
}

/// [`alloc_large`]'s block, for a heap that is a real one (not a static
/// heap), with no profiling: the profiler's samples are such blocks. Does
/// the heap's duties but the heartbeat's (`refill::large_duties`).
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps.
pub(crate) unsafe fn alloc_large_block(heap: *mut Heap, size: usize) -> (*mut u8, bool) {
    let units = size.div_ceil(PAGE_SIZE).max(1);
    // SAFETY: heap is this thread's heap.
    unsafe {
        // A large allocation is a slow path: the heap's duties are done
        // here. The large blocks other threads freed come back first
        // (notifications): their spans are the room `page_alloc` looks for.
        // Then the clock, now and then. A local heap's duties include its
        // thread heap's (where the pages of the local heaps the thread
        // deleted lie).
        crate::small::refill::large_duties(heap);
        let page = page_alloc(heap, LARGE_CLASS, units, units * PAGE_SIZE);
        if page.is_null() {
            return (ptr::null_mut(), false);
        }
        (*page).capacity = 1;
        (*page).set_carved(1);
        (*page).used = 1;
        (*page).flags = PAGE_IN_FULL;
        crate::check::valgrind::header_access((*page).start());
        (*((*page).start() as *mut Block)).freed = 0;
        (*heap).counts.count_alloc(stats::LARGE_ROW);
        stats::large_alloc();
        let parked = (*page).try_set_full_notify();
        debug_assert!(parked);
        ((*page).start(), (*page).zero_init)
    }
}
