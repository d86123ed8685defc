//! hakmem-core: a fast, lean, thread-safe general-purpose memory allocator.
//!
//! Use it as Rust's global allocator:
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: hakmem_core::Hakmem = hakmem_core::Hakmem;
//! ```
//!
//! One module per job, top-down (docs/DESIGN.md has the whole picture):
//! this file (the `Hakmem` type, the C-style entry points, argument checks
//! and routing by size) → `class` (size classes) → `alloc` (allocation
//! from the thread heap) and `free` (every free) → `heap` (the thread heap
//! and its life cycle) and its jobs: `refill` (the allocation slow path),
//! `page_queue`, `remote` (frees into other threads' pages), `abandon`
//! (thread exit, reclaim), `purge` → `page` (a page's lists and states) →
//! `segment` (2 MiB segments and their spans), `segment_map`, `huge`,
//! `arena` (the segment cache and the abandoned list) → `os` (the only
//! code that calls the OS). `thread` binds heaps to threads.
//!
//! The crate is `no_std`; it needs `libc` (mmap, pthread keys) and runs on
//! x86-64 Linux.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// The loom build compiles only the protocols its models drive.
#![cfg_attr(hakmem_loom, allow(dead_code, unused_imports))]

// loom's macros (thread_local!, lazy_static!) name `std`.
#[cfg(hakmem_loom)]
extern crate std;

mod abandon;
mod alloc;
mod arch;
mod arena;
mod class;
mod config;
mod free;
mod heap;
mod huge;
mod list;
mod os;
mod page;
mod page_queue;
mod purge;
mod refill;
mod remote;
mod secure;
mod segment;
mod segment_map;
mod stats;
mod sync;
mod thread;

#[cfg(all(test, hakmem_loom))]
mod loom_models;

// Under `--cfg hakmem_loom` every layer below the front compiles with
// loom's atomics (sync.rs), and the models drive the real heap, segment and
// page code; the front (GlobalAlloc and the C-style entry points) is left
// out, as hakmem is never the global allocator under loom.
#[cfg(not(hakmem_loom))]
pub use front::*;

#[cfg(not(hakmem_loom))]
mod front {
    use crate::{class, huge, os, purge, secure, segment_map, thread};
    use core::alloc::{GlobalAlloc, Layout};
    use core::ptr;

    pub use crate::arena::{abandoned_count, cached_count};
    pub use crate::class::{MEDIUM_SIZE_MAX, SMALL_SIZE_MAX};
    pub use crate::config::{config, Config, OnError, DEFAULT_PURGE_DELAY_MS};
    pub use crate::free::{check_block, free, free_checked};
    pub use crate::os::{os_counters, page_size as os_page_size, Line, OsCounters, StackText};
    pub use crate::segment::{LARGE_SIZE_MAX, PAGE_SIZE, SEGMENT_SIZE};
    pub use crate::stats::{print_stats, stats, stats_json, Stats, HUGE_ROW, LARGE_ROW, ROWS};

    use crate::segment::{segment_of, SegmentKind};

    /// The alignment every allocation gets without asking (C's `max_align_t`).
    pub const MIN_ALIGN: usize = 16;

    /// The hakmem allocator. Zero-sized; all state is per thread and per segment.
    ///
    /// ```
    /// use core::alloc::{GlobalAlloc, Layout};
    /// let layout = Layout::from_size_align(100, 8).unwrap();
    /// // SAFETY: layout has a non-zero size; the block is freed with the same layout.
    /// unsafe {
    ///     let p = hakmem_core::Hakmem.alloc(layout);
    ///     assert!(!p.is_null());
    ///     hakmem_core::Hakmem.dealloc(p, layout);
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Hakmem;

    // SAFETY: every method returns blocks that are valid for the layout's size,
    // aligned to its alignment, and disjoint from every other live block; null
    // is returned on failure, never a misaligned pointer.
    unsafe impl GlobalAlloc for Hakmem {
        #[inline(always)]
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // A Layout's alignment is a power of two.
            alloc_aligned(layout.size(), layout.align())
        }

        #[inline(always)]
        unsafe fn dealloc(&self, p: *mut u8, _layout: Layout) {
            // SAFETY: GlobalAlloc's contract: p was allocated by this allocator.
            unsafe { free(p) }
        }

        #[inline]
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // A Layout's alignment is a power of two.
            alloc_zeroed_aligned(layout.size(), layout.align())
        }

        #[inline]
        unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: GlobalAlloc's contract: p is a live block of this allocator.
            unsafe { realloc(p, new_size, layout.align()) }
        }
    }

    /// Allocates `size` bytes aligned to `align`; null with `errno = ENOMEM`
    /// when no memory can be had, and null with `errno = EINVAL` when
    /// `align` is not a power of two. `size == 0` gives a unique minimal
    /// block.
    #[inline(always)]
    pub fn alloc(size: usize, align: usize) -> *mut u8 {
        if !align.is_power_of_two() {
            return invalid_alignment();
        }
        alloc_aligned(size, align)
    }

    /// Null with `errno = EINVAL`: what an alignment that is not a power of
    /// two gets (C's `aligned_alloc`/`posix_memalign` rule).
    #[cold]
    #[inline(never)]
    fn invalid_alignment() -> *mut u8 {
        os::set_errno(os::EINVAL);
        ptr::null_mut()
    }

    /// [`alloc`] for an `align` known to be a power of two (a `Layout`'s,
    /// or a constant).
    ///
    /// Fast path (size and alignment routed by one compare each): the thread
    /// heap from TLS (2 instructions), the class by table, then `alloc::alloc`.
    /// The `secure` build routes by the size with its canary byte
    /// (`secure::padded`; the same size otherwise).
    #[inline(always)]
    fn alloc_aligned(size: usize, align: usize) -> *mut u8 {
        debug_assert!(align.is_power_of_two());
        let need = secure::padded(size);
        if align <= MIN_ALIGN && need <= SMALL_SIZE_MAX {
            // SAFETY: thread::heap() is this thread's heap.
            unsafe { crate::alloc::alloc_small(thread::heap(), need, size) }
        } else if align <= MIN_ALIGN && need <= secure::CLASS_SIZE_MAX {
            // SAFETY: thread::heap() is this thread's heap; the class holds need.
            unsafe { crate::alloc::alloc(thread::heap(), class::class_of(need), size) }
        } else {
            alloc_other(size, align)
        }
    }

    /// [`alloc_generic`] without the zero flag: a tail call from `alloc`.
    #[inline(never)]
    fn alloc_other(size: usize, align: usize) -> *mut u8 {
        alloc_generic(size, align).0
    }

    /// `malloc`: `size` bytes aligned to `MIN_ALIGN`.
    #[inline(always)]
    pub fn malloc(size: usize) -> *mut u8 {
        alloc_aligned(size, MIN_ALIGN)
    }

    /// Large, huge and over-aligned requests. Returns the block and whether it
    /// is known to be zeroed.
    #[inline]
    fn alloc_generic(size: usize, align: usize) -> (*mut u8, bool) {
        debug_assert!(align.is_power_of_two());
        let need = secure::padded(size);
        debug_assert!(align > MIN_ALIGN || need > secure::CLASS_SIZE_MAX);
        let (p, zero) = if align <= secure::CLASS_ALIGN_MAX {
            match class::aligned_class(need, align) {
                Some(c) if align > MIN_ALIGN && class::BLOCK_SIZE[c] <= secure::CLASS_SIZE_MAX => {
                    // SAFETY: thread::heap() is this thread's heap; c holds need.
                    (unsafe { crate::alloc::alloc(thread::heap(), c, size) }, false)
                }
                _ if !cfg!(feature = "secure") && size <= LARGE_SIZE_MAX => crate::alloc::alloc_large(size),
                _ => huge::huge_alloc(size, align),
            }
        } else {
            huge::huge_alloc(size, align)
        };
        if p.is_null() {
            os::set_errno(os::ENOMEM);
        }
        (p, zero)
    }

    /// Like [`alloc`], with the block's bytes zeroed. Memory known to be fresh
    /// from the OS is not cleared again.
    pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
        if !align.is_power_of_two() {
            return invalid_alignment();
        }
        alloc_zeroed_aligned(size, align)
    }

    /// [`alloc_zeroed`] for an `align` known to be a power of two.
    fn alloc_zeroed_aligned(size: usize, align: usize) -> *mut u8 {
        debug_assert!(align.is_power_of_two());
        let need = secure::padded(size);
        if align <= MIN_ALIGN && need <= secure::CLASS_SIZE_MAX {
            // SAFETY: thread::heap() is this thread's heap; class_of(need)
            // holds need.
            return unsafe { crate::alloc::alloc_zeroed(thread::heap(), class::class_of(need), size) };
        }
        let (p, zero) = alloc_generic(size, align);
        if !p.is_null() && !zero {
            // SAFETY: p is a live block of at least `size` bytes just allocated here.
            unsafe { ptr::write_bytes(p, 0, size) };
        }
        p
    }

    /// Whether `p` lies in a segment hakmem mapped (O(1), no system call).
    /// A pointer that is not is certainly not a hakmem block.
    #[inline]
    pub fn is_hakmem_segment(p: *const u8) -> bool {
        segment_map::is_segment(segment_of(p))
    }

    /// Usable size of block `p`: at least what was asked for, exactly what can
    /// be used (`secure`: exactly what was asked for, as the bytes after it
    /// are the block's canary).
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator.
    pub unsafe fn usable_size(p: *const u8) -> usize {
        let seg = segment_of(p);
        // SAFETY: p is a live hakmem block, so seg is its segment header.
        unsafe {
            if (*seg).kind == SegmentKind::Huge {
                huge::huge_usable_size(seg, p)
            } else {
                #[cfg(feature = "secure")]
                return (*(*seg).page_of(p)).requested_size(p);
                #[cfg(not(feature = "secure"))]
                (*(*seg).page_of(p)).block_size
            }
        }
    }

    /// Resizes block `p` to `new_size` bytes with alignment `align` (the one it
    /// was allocated with). In place when the new size still fits the block and
    /// uses at least half of it; otherwise allocates, copies and frees. On
    /// failure returns null and leaves `p` untouched. (`secure`: the block is
    /// checked first, as `free` checks it.)
    ///
    /// # Safety
    /// `p` must be null or a live block returned by this allocator with `align`.
    pub unsafe fn realloc(p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        if p.is_null() {
            return alloc(new_size, align);
        }
        #[cfg(feature = "secure")]
        // SAFETY: p is a live hakmem block.
        return unsafe { realloc_secure(p, new_size, align) };
        #[cfg(not(feature = "secure"))]
        // SAFETY: p is a live hakmem block.
        unsafe {
            realloc_checked(p, new_size, align)
        }
    }

    /// [`realloc`] of a live block `p`.
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator with `align`.
    #[cfg(not(feature = "secure"))]
    unsafe fn realloc_checked(p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        // SAFETY: p is a live hakmem block.
        let usable = unsafe { usable_size(p) };
        if new_size <= usable && new_size >= usable / 2 {
            return p;
        }
        let seg = segment_of(p);
        // SAFETY: p is a live hakmem block, so seg is its header.
        if unsafe { (*seg).kind } == SegmentKind::Huge && new_size > LARGE_SIZE_MAX && align <= PAGE_SIZE {
            // SAFETY: p is the caller's live huge block.
            let q = unsafe { huge::huge_realloc(seg, p, new_size) };
            if !q.is_null() {
                return q;
            }
        }
        // SAFETY: forwarded.
        unsafe { realloc_by_copy(p, usable, new_size, align) }
    }

    /// [`realloc`] of a live block `p` in the `secure` build: the block's
    /// canaries are checked (as `free` checks them: `hakmem: heap
    /// overflow ... found by realloc()`); it is resized in place when
    /// `new_size` and its canary byte fit and use at least half of it; huge
    /// blocks are always copied (each sits against its guard page).
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator with `align`.
    #[cfg(feature = "secure")]
    unsafe fn realloc_secure(p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        let seg = segment_of(p);
        // SAFETY: p is a live hakmem block, so seg is its header and
        // page_of its page.
        unsafe {
            if (*seg).kind == SegmentKind::Huge {
                let old = huge::huge_check(seg, p, "realloc()");
                return realloc_by_copy(p, old, new_size, align);
            }
            let page = (*seg).page_of(p);
            let old = (*page).check_live(p, "realloc()");
            let bs = (*page).block_size;
            let need = secure::padded(new_size);
            if need <= bs && need > bs / 2 {
                (*page).set_requested_size(p, new_size);
                return p;
            }
            realloc_by_copy(p, old, new_size, align)
        }
    }

    /// Moves live block `p`, of which `used` bytes are data, into a new
    /// block of `new_size` bytes; null (and `p` untouched) when none can be
    /// had.
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator with `align`.
    unsafe fn realloc_by_copy(p: *mut u8, used: usize, new_size: usize, align: usize) -> *mut u8 {
        let q = alloc(new_size, align);
        if !q.is_null() {
            // SAFETY: both blocks are live and disjoint; p has `used` bytes
            // and q at least `new_size`.
            unsafe {
                ptr::copy_nonoverlapping(p, q, used.min(new_size));
                free(p);
            }
        }
        q
    }

    /// Returns free memory: collects the calling thread's heap (remote frees,
    /// empty pages) and purges what is due — with `force`, purges everything
    /// free now, in this thread's heap and in the global caches. This is
    /// `malloc_trim(0)` and `hakmem_collect(force)` in the C API.
    pub fn collect(force: bool) {
        purge::collect(force)
    }

    /// The calling thread's `errno` (for tests and the C shim).
    pub fn os_errno() -> i32 {
        os::errno()
    }

    /// Sets the calling thread's `errno` to 0 (for tests).
    pub fn os_errno_reset() {
        os::set_errno(0)
    }

    /// Reports a misused pointer (`hakmem: <function>(): <reason> 0x...`) on
    /// stderr and aborts. For the C shim.
    pub fn fatal_pointer(function: &str, reason: &str, p: *const u8) -> ! {
        os::fatal_pointer(function, reason, p)
    }
}
