//! Local heaps: a heap a thread makes beside its thread heap, allocates
//! from with the same fast paths, and then either *destroys* — every block
//! in it freed at once, in O(pages) — or *deletes* (drops), after which its
//! blocks stay valid and are freed normally (mimalloc's `mi_heap_destroy`
//! and `mi_heap_delete`). `LocalHeap` is the public handle; the C API
//! (hakmem-ffi) wraps the same calls.
//!
//! A local heap is a `Heap` from the pool like any thread heap, so its own
//! fast paths are the thread heap's run with its address: its pages name
//! it in `local_owner`, and `alloc_small(heap, size)` and the free fast
//! path's owner test work unchanged. What makes it local:
//!
//! * `Heap::parent` names the thread heap of the thread that made it, and
//!   that thread heap lists it (`Heap::locals`). The thread is the only
//!   one that may use it: the fast paths are unsynchronised (`LocalHeap`
//!   is neither `Send` nor `Sync`).
//! * Its segments name that thread heap in `Segment::local_parent`. A free
//!   of one of its blocks by the same thread through the thread heap (C's
//!   `free`, `Hakmem::dealloc`) misses the fast path (the owner test is per
//!   heap) and `free_slow` then takes it locally, into the local heap's
//!   page, without an atomic. Any other thread frees it remotely, pushed
//!   at once rather than held in a batch (remote.rs), so that no block of
//!   the heap is still on its way when the heap is destroyed.
//! * It only takes empty segments (from the cache or the OS), never an
//!   abandoned one: destroying it frees every page it holds, and the pages
//!   of a reclaimed segment hold other heaps' blocks (abandon.rs).
//! * Its huge blocks are listed in it (huge/), so destroying it frees
//!   them too.
//!
//! **Delete** (`local_delete`, `Drop for LocalHeap`): the thread heap takes
//! the local heap's segments in, as a reclaim of abandoned segments does
//! (`abandon::reclaim`: every page collected, empty ones released, the rest
//! queued or parked in the thread heap), and its huge blocks become
//! ordinary huge blocks. Blocks stay valid; remote frees into them keep
//! working (a notification may reach the deleted heap, whose struct stays
//! mapped in the pool: the reclaim's full pass does not need it); later
//! frees by the thread take its own fast path. Chosen over abandoning the
//! segments for any thread to reclaim (what a thread's exit does) because
//! the thread that deleted the heap is the one most likely to allocate
//! next: its free pages serve it at once, with no trip through the
//! abandoned list. A thread that allocates only through local heaps never
//! runs its thread heap's slow path, so a live local heap's slow paths
//! (`refill::duties`, also run by its large and huge allocations) do the
//! thread heap's duties as well (`remote::take_notifications_with_parent`,
//! `purge::periodic`, which a local heap also runs on its first slow
//! path): the pages of deleted heaps that other threads free into come
//! back at the thread's next slow path (parked pages) or its next sweep
//! (queued pages), while it allocates through local heaps. That sweep
//! also runs when a local heap takes a segment, paced by the pages the
//! deleted heaps handed over (`purge::sweep_for_locals`): a producer that
//! hands every block to other threads otherwise took fresh segments for a
//! whole purge delay while the thread heap's emptied pages waited (1 GB
//! held for 32 MB live).
//!
//! **Destroy** (`local_destroy`, unsafe): every page of every segment is
//! released and the segments go to the cache (or the OS); huge blocks are
//! freed. No block is touched. No block of the heap may be used or freed
//! afterwards, nor concurrently by another thread.
//!
//! **Thread exit.** A local heap still alive when its thread exits (a C
//! program that never deleted it; a leaked `LocalHeap`) is deleted into the
//! thread heap before that is abandoned (`orphan_locals`), so no memory
//! stays behind with a dead owner, and left *orphaned*: its struct is not
//! returned to the pool (a handle may still refer to it), `parent` is the
//! exited heap, it can allocate nothing (`segment_acquire` gives it no
//! segment), and deleting or destroying it only returns the struct.

use crate::huge;
use crate::segment::arena;
use crate::segment::{Segment, PAGES_PER_SEGMENT};
use crate::small::page::{self, Block, Page};
use crate::small::refill::{maybe_free_segment, release_span};
use crate::stats;
use crate::sync::Ordering;
use crate::thread::abandon::reclaim;
use crate::thread::heap::{current_or_init, heap_new, pool_put, Heap, EXITED_HEAP};
use core::ptr;

/// A new local heap of the calling thread (null when no memory can be had,
/// or the thread has exited).
pub(crate) fn local_new() -> *mut Heap {
    let parent = current_or_init();
    if parent.is_null() || parent == EXITED_HEAP.get() {
        return ptr::null_mut();
    }
    let heap = heap_new();
    if heap.is_null() {
        return heap;
    }
    // SAFETY: heap is fresh from the pool, and parent is this thread's
    // heap: both are this thread's alone.
    unsafe {
        (*heap).parent = parent;
        (*heap).local_next = (*parent).locals;
        if !(*parent).locals.is_null() {
            (*(*parent).locals).local_prev = heap;
        }
        (*parent).locals = heap;
    }
    heap
}

/// Whether `heap`'s thread has exited and given its memory up.
///
/// # Safety
/// `heap` must be a local heap.
unsafe fn is_orphaned(heap: *mut Heap) -> bool {
    // SAFETY: the caller's guarantee.
    unsafe { (*heap).is_orphaned() }
}

/// Takes `heap` off its thread heap's list of local heaps.
///
/// # Safety
/// `heap` must be a live (not orphaned) local heap of the calling thread.
unsafe fn unlink(heap: *mut Heap) {
    // SAFETY: the caller's guarantee: heap and its parent are this thread's.
    unsafe {
        let (prev, next) = ((*heap).local_prev, (*heap).local_next);
        if prev.is_null() {
            (*(*heap).parent).locals = next;
        } else {
            (*prev).local_next = next;
        }
        if !next.is_null() {
            (*next).local_prev = prev;
        }
        (*heap).local_prev = ptr::null_mut();
        (*heap).local_next = ptr::null_mut();
    }
}

/// Deletes local heap `heap`: its blocks stay valid, its memory goes to
/// the thread heap (see the module doc); the struct goes back to the pool.
///
/// # Safety
/// `heap` must be a local heap of the calling thread (live or orphaned),
/// not used afterwards.
pub(crate) unsafe fn local_delete(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe {
        if !is_orphaned(heap) {
            let parent = (*heap).parent;
            unlink(heap);
            absorb(parent, heap);
            stats::heap_in_use(-1);
        }
        pool_put(heap);
    }
}

/// Moves everything local heap `heap` holds into thread heap `into`: its
/// huge blocks are let go, its segments reclaimed by `into`. Leaves `heap`
/// owning nothing (its direct pages still name pages that are `into`'s
/// now: the caller resets it or returns it to the pool).
///
/// # Safety
/// `heap` must be a live local heap of the calling thread and `into` its
/// thread heap.
unsafe fn absorb(into: *mut Heap, heap: *mut Heap) {
    // SAFETY: the caller's guarantee; the segments are heap's, and heap is
    // this thread's.
    unsafe {
        (*heap).counts.flush();
        huge::detach_all(heap);
        let mut seg = (*heap).segments;
        (*heap).segments = ptr::null_mut();
        let mut pages = 0u32;
        while !seg.is_null() {
            let next = (*seg).next;
            for i in 1..PAGES_PER_SEGMENT {
                let page = &mut (*seg).pages[i] as *mut Page;
                if (*page).in_use {
                    // Out of the local heap's queues, which are dropped
                    // whole; `reclaim` queues or parks it in `into`.
                    (*page).local_owner.store(0, Ordering::Relaxed);
                    pages += 1;
                }
            }
            // Takes the segment (and clears `local_parent`: `adopt`).
            reclaim(into, seg);
            maybe_free_segment(into, seg);
            seg = next;
        }
        // What the thread heap's paced sweep waits for (purge.rs,
        // `sweep_for_locals`).
        (*into).absorbed_pages = (*into).absorbed_pages.saturating_add(pages);
    }
}

/// Destroys local heap `heap`: every block in it is freed at once (see
/// the module doc); the struct goes back to the pool. An orphaned heap
/// owns nothing any more: only its struct is returned.
///
/// # Safety
/// `heap` must be a local heap of the calling thread (live or orphaned),
/// not used afterwards; no block allocated from it may be used or freed
/// afterwards, nor be being freed by another thread.
pub(crate) unsafe fn local_destroy(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe {
        if !is_orphaned(heap) {
            unlink(heap);
            (*heap).counts.flush();
            destroy_huge(huge::detach_all(heap));
            let mut seg = (*heap).segments;
            (*heap).segments = ptr::null_mut();
            while !seg.is_null() {
                let next = (*seg).next;
                (*seg).next = ptr::null_mut();
                (*seg).prev = ptr::null_mut();
                // Relaxed: no thread frees into the segment any more (the
                // caller's guarantee); notifications of the dead pages are
                // not wanted.
                (*seg).notify_bits.store(0, Ordering::Relaxed);
                for i in 1..PAGES_PER_SEGMENT {
                    let page = &mut (*seg).pages[i] as *mut Page;
                    if !(*page).in_use {
                        continue;
                    }
                    if crate::check::valgrind::ENABLED {
                        blocks_destroyed(page);
                    }
                    // Relaxed: as above; the page is free from here on.
                    (*page).local_owner.store(0, Ordering::Relaxed);
                    release_span(seg, page);
                }
                arena::segment_free(seg);
                seg = next;
            }
            stats::heap_in_use(-1);
        }
        pool_put(heap);
    }
}

/// Tells valgrind (the `valgrind` feature) that every block of `page` the
/// program has not freed is freed now: the carved blocks that are on none
/// of the page's free lists. O(blocks), only with the feature.
///
/// # Safety
/// `page` must be an in-use page of a local heap being destroyed.
#[cold]
unsafe fn blocks_destroyed(page: *mut Page) {
    // 64 Ki blocks: more than a page's 16-bit count can hold.
    let mut free = [0u64; 1024];
    // SAFETY: the caller's guarantee: the page is ours, its lists too.
    unsafe {
        (*page).collect_remote();
        let mut block = (*page).free;
        while !block.is_null() {
            let i = (*page).block_index(block as *const u8) as usize;
            free[i / 64] |= 1 << (i % 64);
            block = (*page).next_of(block);
        }
        for i in 0..(*page).capacity as usize {
            if free[i / 64] & (1 << (i % 64)) == 0 {
                crate::check::valgrind::on_destroy((*page).block_addr(i));
            }
        }
    }
}

/// Frees the huge blocks of a destroyed local heap (`first` and those
/// after it through `Segment::next`, as `huge::detach_all` returned them).
///
/// # Safety
/// The segments must be a destroyed heap's: no thread uses their blocks.
unsafe fn destroy_huge(first: *mut Segment) {
    let mut seg = first;
    while !seg.is_null() {
        // SAFETY: the caller's guarantee: the segment is live and its
        // block ours to free.
        unsafe {
            let next = (*seg).next;
            let p = (seg as *mut u8).add((*seg).huge_block_offset);
            // The freed mark, as `free_slow` writes it: a later free of the
            // block while its mapping waits in the cache is reported.
            (*(p as *mut Block)).freed = page::freed_mark((*seg).page_of(p));
            crate::check::valgrind::on_destroy(p);
            huge::huge_free(seg, p);
            seg = next;
        }
    }
}

/// At the exit of the thread of `thread_heap`: deletes every local heap it
/// still has into it, leaving each orphaned (see the module doc).
///
/// # Safety
/// `thread_heap` must be the exiting thread's heap, not yet abandoned.
pub(crate) unsafe fn orphan_locals(thread_heap: *mut Heap) {
    // SAFETY: the caller's guarantee: the thread heap and its local heaps
    // are this thread's.
    unsafe {
        let mut heap = (*thread_heap).locals;
        (*thread_heap).locals = ptr::null_mut();
        while !heap.is_null() {
            let next = (*heap).local_next;
            absorb(thread_heap, heap);
            stats::heap_in_use(-1);
            // Nothing of its own, every fast path missing, and no segment
            // to be had: an allocation from it gets null.
            (*heap).reset();
            (*heap).parent = EXITED_HEAP.get();
            heap = next;
        }
    }
}

#[cfg(not(hakmem_loom))]
pub use handle::LocalHeap;

#[cfg(not(hakmem_loom))]
mod handle {
    use super::{local_delete, local_destroy, local_new};
    use crate::thread::heap::Heap;
    use crate::{alloc_in, alloc_zeroed_in, realloc_in};
    use core::alloc::Layout;
    use core::ffi::c_void;
    use core::marker::PhantomData;
    use core::ptr::{self, NonNull};

    /// A heap of the calling thread's own: allocate from it with the same
    /// fast path as the thread heap, then drop it — its blocks stay valid
    /// and are freed normally later — or [`destroy`](LocalHeap::destroy)
    /// it, which frees every block in it at once, in time proportional to
    /// the pages it holds (arena-style phases: a request, a compiler pass,
    /// a parse).
    ///
    /// ```
    /// let heap = hakmem_core::LocalHeap::new();
    /// let p = heap.alloc(100, 8);
    /// assert!(!p.is_null());
    /// // SAFETY: nothing allocated from the heap is used after this.
    /// unsafe { heap.destroy() };
    /// ```
    ///
    /// With the `allocator-api2` feature, `&LocalHeap` is an
    /// `allocator_api2::alloc::Allocator` (hashbrown's and allocator-api2's
    /// collections take it); with `nightly`, a `core::alloc::Allocator`.
    ///
    /// Blocks of a local heap can be freed from any thread, by
    /// [`crate::free`], `Hakmem`'s `dealloc` or [`LocalHeap::free`] — also
    /// after the heap was dropped (not after it was destroyed). The heap
    /// itself may be used only by the thread that made it, so it is neither
    /// `Send` nor `Sync`: its fast paths write its pages' lists without
    /// synchronisation, that thread's frees of its blocks through the
    /// thread heap do too (they are taken locally), and that thread's exit
    /// gives the heap's memory up. A heap still alive when its thread exits
    /// is emptied then (as if dropped) and can allocate nothing more.
    pub struct LocalHeap {
        heap: NonNull<Heap>,
        /// Neither `Send` nor `Sync` (see above).
        _thread_bound: PhantomData<*mut ()>,
    }

    impl LocalHeap {
        /// A new local heap of the calling thread.
        ///
        /// # Panics
        /// When no memory can be had for it, or the thread has exited
        /// (see [`LocalHeap::try_new`]).
        pub fn new() -> Self {
            Self::try_new().expect("hakmem: no memory for a local heap")
        }

        /// A new local heap of the calling thread; `None` when no memory
        /// can be had for it, or the thread has exited (an allocation from
        /// another library's thread-exit destructor).
        pub fn try_new() -> Option<Self> {
            NonNull::new(local_new()).map(|heap| Self {
                heap,
                _thread_bound: PhantomData,
            })
        }

        #[inline(always)]
        fn heap(&self) -> *mut Heap {
            self.heap.as_ptr()
        }

        /// Allocates `size` bytes aligned to `align` from this heap; null
        /// with `errno = ENOMEM` when no memory can be had, and null with
        /// `errno = EINVAL` when `align` is not a power of two (as
        /// [`crate::alloc`]).
        #[inline(always)]
        pub fn alloc(&self, size: usize, align: usize) -> *mut u8 {
            if !align.is_power_of_two() {
                return crate::alloc(size, align);
            }
            // SAFETY: the heap is a live local heap of this thread (the
            // type is neither Send nor Sync).
            unsafe { alloc_in(self.heap(), size, align) }
        }

        /// Like [`LocalHeap::alloc`], with the block's bytes zeroed.
        #[inline]
        pub fn alloc_zeroed(&self, size: usize, align: usize) -> *mut u8 {
            if !align.is_power_of_two() {
                return crate::alloc(size, align);
            }
            // SAFETY: as in `alloc`.
            unsafe { alloc_zeroed_in(self.heap(), size, align) }
        }

        /// Resizes block `p` as [`crate::realloc`] does; a block that must
        /// move is allocated from this heap.
        ///
        /// # Safety
        /// `p` must be null or a live block of this allocator (of any
        /// heap) allocated with `align`.
        #[inline]
        pub unsafe fn realloc(&self, p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
            // SAFETY: the caller's guarantee; the heap as in `alloc`.
            unsafe { realloc_in(self.heap(), p, new_size, align) }
        }

        /// Frees block `p` (of this heap or any other: the fast path when
        /// it is this heap's).
        ///
        /// # Safety
        /// `p` must be a live block returned by this allocator.
        #[inline(always)]
        pub unsafe fn free(&self, p: *mut u8) {
            // SAFETY: the caller's guarantee; the heap as in `alloc`.
            unsafe { crate::small::free::free_in(self.heap(), p) }
        }

        /// Frees every block allocated from this heap and not freed yet, at
        /// once: each page and segment goes back whole (to the segment
        /// cache, or the OS), each huge block to the huge cache or the OS.
        /// Time proportional to the pages the heap holds, not its blocks.
        ///
        /// # Safety
        /// No block allocated from this heap may be used or freed after
        /// this, nor be being freed by another thread while it runs.
        pub unsafe fn destroy(self) {
            let heap = self.heap();
            core::mem::forget(self);
            // SAFETY: the heap is this thread's and no longer referred to
            // (forgotten above); the caller's guarantee for its blocks.
            unsafe { local_destroy(heap) };
        }

        /// The heap as a pointer for C (`hakmem_heap_new`); the heap lives
        /// on until [`LocalHeap::from_raw`] takes it back.
        pub fn into_raw(self) -> *mut c_void {
            let raw = self.heap().cast();
            core::mem::forget(self);
            raw
        }

        /// Takes back a heap given away with [`LocalHeap::into_raw`].
        ///
        /// # Safety
        /// `raw` must come from `into_raw` on the calling thread and not
        /// have been taken back yet (or, to use the heap without taking
        /// it, the result must be forgotten, e.g. in a `ManuallyDrop`).
        pub unsafe fn from_raw(raw: *mut c_void) -> Self {
            Self {
                // SAFETY: the caller's guarantee: raw is a live local heap.
                heap: unsafe { NonNull::new_unchecked(raw.cast()) },
                _thread_bound: PhantomData,
            }
        }

        /// The block for `layout`, as allocators return it (the slice is
        /// exactly the size asked for).
        #[cfg_attr(not(any(feature = "allocator-api2", feature = "nightly")), allow(dead_code))]
        #[inline(always)]
        fn allocate_layout(&self, layout: Layout, zeroed: bool) -> Option<NonNull<[u8]>> {
            // SAFETY: as in `alloc` (a Layout's alignment is a power of two).
            let p = unsafe {
                if zeroed {
                    alloc_zeroed_in(self.heap(), layout.size(), layout.align())
                } else {
                    alloc_in(self.heap(), layout.size(), layout.align())
                }
            };
            NonNull::new(p).map(|p| NonNull::slice_from_raw_parts(p, layout.size()))
        }

        /// `Allocator::grow`/`shrink`: block `p` of `old` resized to `new`
        /// (in place when it fits, with the alignment it has).
        ///
        /// # Safety
        /// `p` must be a live block allocated with `old` (from any heap).
        #[cfg_attr(not(any(feature = "allocator-api2", feature = "nightly")), allow(dead_code))]
        unsafe fn resize(&self, p: NonNull<u8>, old: Layout, new: Layout) -> Option<NonNull<[u8]>> {
            let p = p.as_ptr();
            let q = if new.align() <= old.align() {
                // SAFETY: the caller's guarantee: p was allocated with
                // old.align(), which also serves the new layout.
                unsafe { self.realloc(p, new.size(), old.align()) }
            } else {
                let q = self.alloc(new.size(), new.align());
                if !q.is_null() {
                    // SAFETY: both blocks are live and disjoint; p holds
                    // old.size() bytes, q new.size().
                    unsafe {
                        ptr::copy_nonoverlapping(p, q, old.size().min(new.size()));
                        self.free(p);
                    }
                }
                q
            };
            NonNull::new(q).map(|q| NonNull::slice_from_raw_parts(q, new.size()))
        }
    }

    impl Default for LocalHeap {
        fn default() -> Self {
            Self::new()
        }
    }

    impl core::fmt::Debug for LocalHeap {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.debug_struct("LocalHeap").field("heap", &self.heap).finish()
        }
    }

    /// Dropping the heap deletes it: its blocks stay valid and are freed
    /// normally later (by any thread); its free memory serves the thread
    /// heap.
    impl Drop for LocalHeap {
        fn drop(&mut self) {
            // SAFETY: the heap is this thread's and no longer used.
            unsafe { local_delete(self.heap()) };
        }
    }

    /// The `Allocator` impl for `allocator_api2` and (nightly) `core`: the
    /// same bodies, the trait's own `AllocError`.
    #[cfg_attr(not(any(feature = "allocator-api2", feature = "nightly")), allow(unused_macros))]
    macro_rules! allocator_impl {
        ($allocator:path, $error:path) => {
            // SAFETY: blocks are valid for their layout's size and aligned
            // to its alignment, disjoint from every other live block, and
            // stay valid until they are deallocated — also after the heap
            // is dropped (deleting keeps them) and when the heap is moved
            // (it is a pointer); `destroy`, which ends them, is unsafe and
            // takes the heap by value, so no `&LocalHeap` borrow (a
            // collection's) can outlive it. Blocks of any heap can be
            // deallocated through any heap.
            unsafe impl $allocator for LocalHeap {
                #[inline(always)]
                fn allocate(&self, layout: Layout) -> Result<NonNull<[u8]>, $error> {
                    self.allocate_layout(layout, false).ok_or($error)
                }

                #[inline]
                fn allocate_zeroed(&self, layout: Layout) -> Result<NonNull<[u8]>, $error> {
                    self.allocate_layout(layout, true).ok_or($error)
                }

                #[inline(always)]
                unsafe fn deallocate(&self, ptr: NonNull<u8>, _layout: Layout) {
                    // SAFETY: the trait's contract: ptr is a live block of ours.
                    unsafe { self.free(ptr.as_ptr()) }
                }

                #[inline]
                unsafe fn grow(&self, ptr: NonNull<u8>, old: Layout, new: Layout) -> Result<NonNull<[u8]>, $error> {
                    // SAFETY: the trait's contract: ptr is a live block of old.
                    unsafe { self.resize(ptr, old, new) }.ok_or($error)
                }

                #[inline]
                unsafe fn grow_zeroed(
                    &self,
                    ptr: NonNull<u8>,
                    old: Layout,
                    new: Layout,
                ) -> Result<NonNull<[u8]>, $error> {
                    // SAFETY: the trait's contract: ptr is a live block of
                    // old, and new is no smaller.
                    let block = unsafe { self.resize(ptr, old, new) }.ok_or($error)?;
                    // SAFETY: the block holds new.size() >= old.size() bytes.
                    unsafe {
                        let p = block.cast::<u8>().as_ptr();
                        ptr::write_bytes(p.add(old.size()), 0, new.size() - old.size());
                    }
                    Ok(block)
                }

                #[inline]
                unsafe fn shrink(&self, ptr: NonNull<u8>, old: Layout, new: Layout) -> Result<NonNull<[u8]>, $error> {
                    // SAFETY: the trait's contract: ptr is a live block of old.
                    unsafe { self.resize(ptr, old, new) }.ok_or($error)
                }
            }
        };
    }

    #[cfg(feature = "allocator-api2")]
    allocator_impl!(allocator_api2::alloc::Allocator, allocator_api2::alloc::AllocError);

    #[cfg(feature = "nightly")]
    allocator_impl!(core::alloc::Allocator, core::alloc::AllocError);
}
