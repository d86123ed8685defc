//! Every free: the fast path (the owner freeing into a queued page: a push
//! on the page's `free` stack), the C shim's checked `free` and the pointer
//! checks behind `check_block`, and the slow path (`free_slow`: huge
//! blocks, parked and large pages, blocks of other threads' pages, double
//! frees). A free into another thread's page ends in `remote::remote_free`;
//! a page whose last block comes back is retired here (`page_retire`).
//! (mimalloc keeps the same in free.c.)

use crate::arch;
use crate::huge;
use crate::os;
use crate::segment::map as segment_map;
use crate::segment::{segment_of, Segment, SegmentKind};
use crate::small::page::{self, Block, Page, PAGE_IN_FULL};
use crate::small::page_queue::{queue_remove, settle};
use crate::small::refill::{maybe_free_segment, release_page};
use crate::sync::Ordering;
use crate::thread;
use crate::thread::abandon::TAKE_OVER_SEGMENTS_MAX;
use crate::thread::heap::Heap;
use crate::thread::remote::remote_free;

/// Frees block `p`.
///
/// Fast path: segment by mask, owner check against the thread heap, page by
/// shift, push on the page's free stack (no lock, no atomic
/// read-modify-write). Anything else goes to `free_slow`. (`secure`: every
/// pointer is checked, as the C `free` checks it: [`free_checked`].)
///
/// # Safety
/// `p` must be a live block returned by this allocator (not null).
#[inline(always)]
pub unsafe fn free(p: *mut u8) {
    // SAFETY: the caller's guarantee; thread::heap() is the caller's heap.
    unsafe { free_in(thread::heap(), p) }
}

/// Frees block `p` through `heap`: the fast path when `p`'s page is queued
/// in `heap`, else `free_slow` (which also takes a block of one of the
/// calling thread's other heaps locally). (`secure`: `p` is checked first,
/// as the C `free` checks it: [`free_checked_in`].)
///
/// # Safety
/// `p` must be a live block returned by this allocator (not null); `heap`
/// the calling thread's heap or one of its local heaps.
#[inline(always)]
pub(crate) unsafe fn free_in(heap: *mut Heap, p: *mut u8) {
    if cfg!(feature = "secure") {
        // SAFETY: free_checked_in accepts any pointer; the caller's
        // guarantee for heap.
        return unsafe { free_checked_in(heap, p) };
    }
    crate::check::valgrind::on_free(p);
    let seg = segment_of(p);
    // SAFETY: p is a live hakmem block, so seg is its segment header and
    // page_of finds its page (an empty one for a huge block).
    unsafe { free_owned(heap, seg, (*seg).page_of(p), p) }
}

/// Frees block `p` of `page` in `seg`: pushed on the page's `free` when the
/// page is queued in `heap` (the caller's: so it is ours and not parked)
/// and the block does not carry the freed mark; anything else — another
/// thread's page, a parked or large page, a huge block, a double free —
/// goes to the slow path.
///
/// # Safety
/// `p` must be a live block of `seg`, `page` its page (or, for a huge
/// block, the empty page `page_of` gives), `heap` the caller's heap.
#[inline(always)]
unsafe fn free_owned(heap: *mut Heap, seg: *mut Segment, page: *mut Page, p: *mut u8) {
    let block = p as *mut Block;
    // SAFETY: the caller guarantees page, seg and heap are the block's
    // and the caller's own.
    unsafe {
        if arch::owned_by(page, heap) && (*block).freed != page::freed_mark(page) && !(*page).on_free_was_free(p) {
            (*page).on_free(p);
            (*block).freed = page::freed_mark(page);
            (*heap).counts.count_free((*page).class as usize);
            (*page).push(block);
            if (*page).used == 0 {
                page_retire(heap, seg, page);
            }
        } else {
            free_slow(seg, p)
        }
    }
}

/// Checks that `p` is a live hakmem block before `function` (a C entry
/// point such as `"realloc"`) uses it: that it lies in a hakmem segment
/// (segment map, O(1)), starts a block, and is not already free. On a bad
/// pointer prints `hakmem: <function>(): <reason> 0x...` and aborts, or
/// returns false under `HAKMEM_ON_ERROR=warn` (the caller then ignores
/// the call). Never touches memory that is not a hakmem segment header.
///
/// # Safety
/// `p` must not be null.
pub unsafe fn check_block(p: *const u8, function: &str) -> bool {
    let seg = segment_of(p);
    if !segment_map::is_segment(seg) {
        #[cfg(feature = "secure")]
        if crate::check::zero::contains(p) {
            return crate::check::zero::check(p, function);
        }
        os::report_pointer(function, "invalid pointer (not allocated by hakmem)", p);
        return false;
    }
    // SAFETY: the segment map says seg is a live segment header.
    unsafe {
        if !is_block_start(seg, p) {
            os::report_pointer(function, "invalid pointer (not the start of a hakmem block)", p);
            return false;
        }
        if (*(p as *const Block)).freed == page::freed_mark((*seg).page_of(p)) {
            os::report_pointer(function, "pointer already freed", p);
            return false;
        }
    }
    true
}

/// Whether `p` starts a block of `seg`: a carved block of an in-use page,
/// or a huge segment's block, at the offset `huge_alloc` placed it.
///
/// # Safety
/// `seg` must be a live segment header (the segment map says so).
unsafe fn is_block_start(seg: *mut Segment, p: *const u8) -> bool {
    let off = (p as usize).wrapping_sub(seg as usize);
    // SAFETY: the caller guarantees seg is live; page_of stays inside
    // the header for any p in the segment's 2 MiB.
    unsafe {
        if (*seg).kind == SegmentKind::Huge {
            off == (*seg).huge_block_offset
        } else {
            (*(*seg).page_of(p)).is_block_start(p)
        }
    }
}

/// `free` for the C shim: [`check_block`], then [`free`]; `free(NULL)`
/// does nothing (null fails the segment-map test, off the fast path).
///
/// The budget: 32 instructions on the fast path, `ret` included, no stack
/// frame (libhakmem.so's `free`, disassembled): the map slot and its byte
/// (6), the segment and the page (5), the block-start test (8), the heap
/// from TLS and the owner test (4), the freed-mark test (2), the push and
/// `used -= 1` with its test for zero (6).
///
/// # Safety
/// None beyond `free`'s contract: `p` may be any value.
#[inline]
pub unsafe fn free_checked(p: *mut u8) {
    // SAFETY: thread::heap() is the caller's heap.
    unsafe { free_checked_in(thread::heap(), p) }
}

/// [`free_checked`] through `heap` (see [`free_in`]).
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps; `p`
/// may be any value.
#[inline(always)]
pub(crate) unsafe fn free_checked_in(heap: *mut Heap, p: *mut u8) {
    let slot = segment_map::map_slot(p);
    if !segment_map::slot_is_segment(slot) {
        return free_invalid(p);
    }
    let seg = segment_map::slot_segment(slot);
    // Only when the block-start test has passed is p known to lie in seg
    // (map_slot: a p outside the address space fails that test).
    // SAFETY: seg is a live segment header (the map says so); page_of
    // takes the index from p's low bits, so it stays in the header.
    unsafe {
        let page = (*seg).page_of(p);
        if !(*page).is_block_start(p) {
            return free_checked_cold(seg, p);
        }
        // p starts a carved block of a live page; the freed mark (checked
        // by free_owned/free_slow) catches a double free.
        crate::check::valgrind::on_free(p);
        free_owned(heap, seg, page, p)
    }
}

#[cold]
#[inline(never)]
fn free_invalid(p: *mut u8) {
    #[cfg(feature = "secure")]
    if crate::check::zero::contains(p) {
        return crate::check::zero::free(p, "free");
    }
    if !p.is_null() {
        os::report_pointer("free", "invalid pointer (not allocated by hakmem)", p);
    }
}

/// `free_checked` of a huge block, or of a pointer that starts no block.
///
/// # Safety
/// `seg` must be a live segment header (the segment map says so).
#[cold]
#[inline(never)]
unsafe fn free_checked_cold(seg: *mut Segment, p: *mut u8) {
    // SAFETY: the caller guarantees seg is live.
    unsafe {
        if segment_of(p) != seg {
            // Outside the user address space (see segment_map::map_slot).
            os::report_pointer("free", "invalid pointer (not allocated by hakmem)", p);
        } else if (*seg).kind == SegmentKind::Huge && is_block_start(seg, p) {
            crate::check::valgrind::on_free(p);
            free_slow(seg, p)
        } else {
            os::report_pointer("free", "invalid pointer (not the start of a hakmem block)", p);
        }
    }
}

/// The owner freed the last used block of a queued page.
#[cold]
#[inline(never)]
pub(crate) unsafe fn page_retire(heap: *mut Heap, seg: *mut Segment, page: *mut Page) {
    // SAFETY: page is a queued page of heap (flags == 0) with used == 0.
    unsafe {
        let q = &(*heap).queues[(*page).class as usize];
        if q.first == page && (*page).next.is_null() {
            return; // the class's only page: keep it to avoid churn
        }
        queue_remove(heap, page);
        release_page(heap, seg, page);
        maybe_free_segment(heap, seg);
        crate::segment::purge::release_duty(heap);
    }
}

/// A free into a segment nobody owns (abandoned by an exited thread):
/// the freeing thread takes the segment over when it is still on the
/// abandoned list, so that this and its later frees into it are its own —
/// pages given back as they empty, purged by its duties — instead of
/// blocks piling up on remote stacks nobody collects until some thread
/// happens to need a segment. A thread that owns more than
/// `TAKE_OVER_SEGMENTS_MAX` segments already leaves the segment on the
/// list and frees the block remotely: a segment it took would keep the
/// room the block leaves where only it can use it, while the threads
/// beside it map fresh segments; on the list, the room goes to the next
/// thread that needs some (`abandon::segment_acquire`), or back to the OS
/// at the next purge pass, which takes in what was freed into abandoned
/// segments (`purge::note_abandoned_free`). Returns the heap to free with
/// — the calling thread's, made now if it had none (a thread that only
/// frees); the static heap it had when it has exited or no heap can be
/// had — and whether the segment was not taken over (the caller then
/// pushes the block at once and makes a purge pass due).
///
/// # Safety
/// `seg` must be a live normal segment of a block the caller is freeing.
#[cold]
#[inline(never)]
unsafe fn take_over_abandoned(heap: *mut Heap, seg: *mut Segment) -> (*mut Heap, bool) {
    let heap = if heap == crate::thread::heap::EMPTY_HEAP.get() {
        crate::thread::heap::current_or_init()
    } else {
        heap
    };
    if heap.is_null() || crate::thread::heap::is_static_heap(heap) {
        return (thread::heap(), true);
    }
    // SAFETY: heap is the calling thread's; its segment list is its own.
    if unsafe { (*heap).owns_more_segments_than(TAKE_OVER_SEGMENTS_MAX) } {
        return (heap, true);
    }
    // SAFETY: seg holds the block being freed, still counted in use: mapped, and never in the cache.
    if unsafe { crate::segment::arena::abandoned_take(seg) } {
        // SAFETY: taking it off the list made the segment exclusively
        // ours; heap is the calling thread's.
        unsafe { crate::thread::abandon::reclaim(heap, seg) };
        return (heap, false);
    }
    // Reclaimed by another thread meanwhile, or off the list in a purge
    // pass's hands (which puts it back).
    (heap, true)
}

/// Free of a block that is huge, in a parked/large page, in a page of
/// another of the calling thread's heaps (its thread heap or a local
/// heap), or owned by another thread (or by no thread).
///
/// # Safety
/// `p` must be a live block of hakmem and `seg == segment_of(p)`.
#[cold]
#[inline(never)]
pub(crate) unsafe fn free_slow(seg: *mut Segment, p: *mut u8) {
    // SAFETY: the caller guarantees p is a live hakmem block in seg.
    unsafe {
        let block = p as *mut Block;
        let page = (*seg).page_of(p);
        let mark = page::freed_mark(page);
        if (*block).freed == mark {
            os::report_pointer("free", "double free of", p);
            return;
        }
        #[cfg(not(hakmem_loom))]
        if (*page).sampled {
            crate::profile::on_free(page, p);
        }
        if (*seg).kind == SegmentKind::Huge {
            huge::on_free(seg, p);
            (*block).freed = mark;
            huge::huge_free(seg, p);
            return;
        }
        if (*page).on_free_was_free(p) {
            os::report_pointer("free", "double free of", p);
            return;
        }
        (*page).on_free(p);
        (*block).freed = mark;
        let mut heap = thread::heap();
        // Whether the block goes to a segment left on the abandoned list.
        let mut left_abandoned = false;
        if (*seg).heap.load(Ordering::Relaxed).is_null() {
            (heap, left_abandoned) = take_over_abandoned(heap, seg);
        }
        // Relaxed: only the owner writes its own heap here, so reading our
        // heap means we wrote it (program order), or the thread whose heap
        // we took over did (`heap_for_thread`: the retired list's lock
        // orders its writes before ours). A heap struct reused from the
        // pool was abandoned first, which stored null in every segment it
        // owned before the pool's lock handed the struct over (lock release
        // → acquire), so a new thread never reads a predecessor's value as
        // its own.
        let owner = (*seg).heap.load(Ordering::Relaxed);
        if owner == heap {
            return free_local(heap, seg, page, block);
        }
        // Relaxed, by the same argument: only this thread stores its heap
        // there (`adopt`, for a local heap of its own), and it clears it
        // before the segment changes hands; so reading our heap means the
        // segment is one of our local heaps', and `owner` that heap (our
        // own store, read after it). Another thread reads null or its
        // creator's heap: see `Segment::local_parent`.
        let local_parent = (*seg).local_parent.load(Ordering::Relaxed);
        if local_parent == heap {
            free_local(owner, seg, page, block)
        } else {
            // A block of a local heap is pushed at once, not batched: the
            // heap may be destroyed as soon as this free returns. So is one
            // of a segment left abandoned, then a purge pass made due: the
            // pass takes in only what is on the page when it looks.
            if left_abandoned {
                // Before the push, while the block keeps the segment mapped.
                (*seg).note_late_free(page);
            }
            remote_free(heap, page, block, local_parent.is_null() && !left_abandoned);
            if left_abandoned {
                crate::segment::purge::note_abandoned_free();
            }
        }
    }
}

/// Frees `block` of `page` in `seg` into `heap`, which owns the segment
/// and is the calling thread's (its thread heap or one of its local heaps):
/// pushed on the page's `free`, and the page settled when it was parked or
/// retired when it is empty. The block carries its freed mark already (and
/// `free_slow` has checked it against the page's free bitmap).
///
/// # Safety
/// As stated: `heap` owns `seg` and belongs to the calling thread; `block`
/// is a block of `page` being freed.
unsafe fn free_local(heap: *mut Heap, seg: *mut Segment, page: *mut Page, block: *mut Block) {
    // SAFETY: the caller's guarantee: the page's owner fields are ours.
    unsafe {
        (*page).push(block);
        if (*page).flags & PAGE_IN_FULL != 0 {
            settle(heap, seg, page);
            maybe_free_segment(heap, seg);
            crate::segment::purge::release_duty(heap);
        } else if (*page).used == 0 {
            page_retire(heap, seg, page);
        }
    }
}
