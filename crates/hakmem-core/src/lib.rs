//! hakmem-core: a fast, lean, thread-safe general-purpose memory allocator.
//!
//! Use it as Rust's global allocator:
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: hakmem_core::Hakmem = hakmem_core::Hakmem;
//! ```
//!
//! The layers, top-down, a folder each (docs/DESIGN.md has the picture;
//! each folder's `mod.rs` says what the layer owns and what it calls):
//! this file (the `Hakmem` type, the C-style entry points, argument checks
//! and routing by size) → `thread` (the heap, binding threads to heaps,
//! thread exit, remote frees, local heaps) ⇄ `small` (size classes, pages,
//! page queues, allocation and free) → `huge` (huge blocks) → `segment`
//! (2 MiB segments, the segment map, the segment cache and abandoned list,
//! purging) → `arch` and `os` (the only processor- and system-specific
//! code). Beside them: `check` (the secure build's checks and valgrind's
//! requests, hooks that compile to nothing by default), `config`, `stats`,
//! `policy` (the adaptive purge delay and huge cache limit), `sync` (the
//! atomics shim for loom, the spin lock), `list` (locked intrusive lists).
//!
//! The crate is `no_std`; it needs `libc` (mmap, pthread keys) and runs on
//! x86-64 Linux.
#![no_std]
#![cfg_attr(feature = "nightly", feature(allocator_api))]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]
// The loom build compiles only the protocols its models drive.
#![cfg_attr(hakmem_loom, allow(dead_code, unused_imports))]

// loom's macros (thread_local!, lazy_static!) name `std`.
#[cfg(hakmem_loom)]
extern crate std;

mod arch;
mod check;
mod config;
mod huge;
mod list;
mod os;
mod policy;
pub mod profile;
mod segment;
mod small;
mod stats;
mod sync;
mod thread;

// The hardened build and the valgrind client requests do not go together:
// `secure` fills free blocks, keeps a canary after each and checks both
// (reads and writes memcheck would report as use of a freed or an
// out-of-bounds byte), and never caches huge mappings; valgrind's own
// checks cover what `secure` catches. docs/CONFIG.md says so.
#[cfg(all(feature = "secure", feature = "valgrind"))]
compile_error!("the `secure` and `valgrind` features are mutually exclusive");

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
    use crate::check::{secure, valgrind};
    use crate::segment::{map as segment_map, purge};
    use crate::small::class;
    use crate::{huge, os, thread};
    use core::alloc::{GlobalAlloc, Layout};
    use core::ptr;

    pub use crate::config::{config, Config, OnError, Policy, DEFAULT_PURGE_DELAY_MS};
    /// Failures injected at the OS calls: test builds under `--cfg
    /// hakmem_fault_injection` only (tests/fault_injection.rs).
    #[cfg(hakmem_fault_injection)]
    pub use crate::os::fault;
    pub use crate::os::{os_counters, page_size as os_page_size, Line, OsCounters, StackText};
    pub use crate::policy::{report as policy_report, Decision, PolicyReport};
    pub use crate::segment::arena::{abandoned_count, cached_count};
    pub use crate::segment::{LARGE_SIZE_MAX, PAGE_SIZE, SEGMENT_SIZE};
    pub use crate::small::class::{MEDIUM_SIZE_MAX, SMALL_SIZE_MAX};
    pub use crate::small::free::{check_block, free, free_checked};
    pub use crate::stats::{print_stats, stats, stats_json, Stats, HUGE_ROW, LARGE_ROW, ROWS};
    pub use crate::thread::local::LocalHeap;

    use crate::segment::{segment_of, SegmentKind};
    use crate::thread::heap::Heap;

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
            if valgrind::ENABLED {
                // SAFETY: GlobalAlloc's contract: p is a live block of this
                // allocator of layout; thread::heap() is this thread's heap.
                return unsafe { realloc_tracked(thread::heap(), p, Some(layout.size()), new_size, layout.align()) };
            }
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
        let p = if align <= MIN_ALIGN && need <= SMALL_SIZE_MAX {
            // SAFETY: thread::heap() is this thread's heap.
            unsafe { crate::small::alloc::alloc_small(thread::heap(), need, size) }
        } else if align <= MIN_ALIGN && need <= secure::CLASS_SIZE_MAX {
            // SAFETY: thread::heap() is this thread's heap; the class holds need.
            unsafe { crate::small::alloc::alloc(thread::heap(), class::class_of(need), size) }
        } else {
            alloc_other(size, align)
        };
        track_alloc(p, size);
        p
    }

    /// Tells valgrind (the `valgrind` feature; nothing otherwise) that `p`,
    /// when not null, was just handed out for `size` bytes.
    #[inline(always)]
    fn track_alloc(p: *mut u8, size: usize) {
        if valgrind::ENABLED && !p.is_null() {
            // SAFETY: p is a live block just allocated.
            valgrind::on_alloc(p, size, unsafe { usable_size(p) });
        }
    }

    /// [`alloc_generic`] without the zero flag: a tail call from `alloc`.
    #[inline(never)]
    #[link_section = "hakmem_text"]
    fn alloc_other(size: usize, align: usize) -> *mut u8 {
        // SAFETY: thread::heap() is this thread's heap.
        unsafe { alloc_generic(thread::heap(), size, align).0 }
    }

    /// `malloc`: `size` bytes aligned to `MIN_ALIGN`. (`secure`: `malloc(0)`
    /// is a unique pointer no one can read or write, `check/zero.rs`.)
    #[inline(always)]
    pub fn malloc(size: usize) -> *mut u8 {
        #[cfg(feature = "secure")]
        if let Some(p) = crate::check::zero::alloc_zero_sized(size, MIN_ALIGN) {
            return p;
        }
        alloc_aligned(size, MIN_ALIGN)
    }

    /// Large, huge and over-aligned requests, from `heap`. Returns the
    /// block and whether it is known to be zeroed.
    ///
    /// # Safety
    /// `heap` must be the calling thread's heap (possibly the empty or the
    /// exited heap) or one of its live local heaps.
    #[inline]
    #[link_section = "hakmem_text"]
    pub(crate) unsafe fn alloc_generic(heap: *mut Heap, size: usize, align: usize) -> (*mut u8, bool) {
        debug_assert!(align.is_power_of_two());
        let need = secure::padded(size);
        debug_assert!(align > MIN_ALIGN || need > secure::CLASS_SIZE_MAX);
        // SAFETY: the caller's guarantee for heap; a class is used only when
        // its blocks hold need.
        let (p, zero) = unsafe {
            match class::aligned_class(need, align) {
                Some(c)
                    if align > MIN_ALIGN
                        && align <= secure::CLASS_ALIGN_MAX
                        && class::BLOCK_SIZE[c] <= secure::CLASS_SIZE_MAX =>
                {
                    (crate::small::alloc::alloc(heap, c, size), false)
                }
                _ if !cfg!(feature = "secure") && size <= LARGE_SIZE_MAX && align <= PAGE_SIZE => {
                    crate::small::alloc::alloc_large(heap, size)
                }
                _ => alloc_huge(heap, size, align),
            }
        };
        if p.is_null() {
            os::set_errno(os::ENOMEM);
        }
        (p, zero)
    }

    /// A huge block for `heap`, listed in it when it is a local heap (so
    /// that destroying the heap frees it). None for an orphaned local heap
    /// (its thread has exited: it allocates nothing, thread/local.rs), whose
    /// struct goes back to the pool when its handle is deleted or
    /// destroyed — with nothing listed in it.
    ///
    /// # Safety
    /// As for [`alloc_generic`].
    #[link_section = "hakmem_text"]
    unsafe fn alloc_huge(heap: *mut Heap, size: usize, align: usize) -> (*mut u8, bool) {
        // A thread whose first allocation is huge gets its heap here, as on
        // its first small or large one: its duties below, and the process's
        // set-up (the fork handlers, and in `secure` builds the secret),
        // come with it. Without one (no memory for it) the block is served
        // all the same.
        let heap = if heap == thread::heap::EMPTY_HEAP.get() {
            let made = thread::init_heap();
            if made.is_null() {
                heap
            } else {
                made
            }
        } else {
            heap
        };
        // SAFETY: the caller's guarantee: heap is a valid heap.
        if unsafe { (*heap).is_orphaned() } {
            return (ptr::null_mut(), false);
        }
        // SAFETY: the caller's guarantee: heap is this thread's.
        let sample = unsafe { crate::profile::active() && crate::profile::take(heap, size) };
        let (p, zero) = huge::huge_alloc(size, align);
        // A huge allocation is a slow path too: the heap's duties, after the
        // block is had (a purge due now does not take the memory it reuses),
        // for a thread that goes on with huge blocks alone; a live local
        // heap's include its thread heap's (where the pages of the local
        // heaps the thread deleted lie). A static heap (a thread that has
        // exited, or one no heap could be made for) has the global ones.
        if thread::heap::is_static_heap(heap) {
            purge::heapless_duties();
        } else {
            // SAFETY: the caller's guarantee: heap is this thread's heap or
            // one of its live local heaps, not being a static one.
            unsafe { crate::small::refill::large_duties(heap) };
        }
        // SAFETY: the caller's guarantee; p is a huge block just allocated
        // for heap, so segment_of(p) is its fresh huge segment.
        unsafe {
            if !p.is_null() && (*heap).is_local() {
                huge::attach_to_local(heap, segment_of(p));
            }
            crate::profile::lower(heap);
            if sample && !p.is_null() {
                crate::profile::record(heap, p, size);
            }
        }
        (p, zero)
    }

    /// Like [`alloc`], with the block's bytes zeroed. Memory known to be fresh
    /// from the OS is not cleared again.
    #[link_section = "hakmem_text"]
    pub fn alloc_zeroed(size: usize, align: usize) -> *mut u8 {
        if !align.is_power_of_two() {
            return invalid_alignment();
        }
        #[cfg(feature = "secure")]
        if let Some(p) = crate::check::zero::alloc_zero_sized(size, align) {
            return p;
        }
        alloc_zeroed_aligned(size, align)
    }

    /// [`alloc_zeroed`] for an `align` known to be a power of two.
    #[link_section = "hakmem_text"]
    fn alloc_zeroed_aligned(size: usize, align: usize) -> *mut u8 {
        // SAFETY: thread::heap() is this thread's heap.
        unsafe { alloc_zeroed_in(thread::heap(), size, align) }
    }

    /// [`alloc_zeroed`] from `heap`, for an `align` known to be a power of
    /// two.
    ///
    /// # Safety
    /// As for [`alloc_generic`].
    #[link_section = "hakmem_text"]
    pub(crate) unsafe fn alloc_zeroed_in(heap: *mut Heap, size: usize, align: usize) -> *mut u8 {
        debug_assert!(align.is_power_of_two());
        if valgrind::ENABLED {
            // Cleared after valgrind is told of the block (the internal
            // paths clear it before), every time.
            // SAFETY: the caller's guarantee.
            let p = unsafe { alloc_in(heap, size, align) };
            if !p.is_null() {
                // SAFETY: p is a live block of at least `size` bytes.
                unsafe { ptr::write_bytes(p, 0, size) };
            }
            return p;
        }
        let need = secure::padded(size);
        if align <= MIN_ALIGN && need <= secure::CLASS_SIZE_MAX {
            // SAFETY: the caller's guarantee; class_of(need) holds need.
            return unsafe { crate::small::alloc::alloc_zeroed(heap, class::class_of(need), size) };
        }
        // SAFETY: the caller's guarantee.
        let (p, zero) = unsafe { alloc_generic(heap, size, align) };
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

    /// Whether `p` lies in the `secure` build's region of zero-sized
    /// blocks (`malloc(0)`: a pointer no one can read or write; always
    /// false in other builds). Such a pointer is hakmem's too.
    #[inline]
    pub fn is_zero_sized_block(p: *const u8) -> bool {
        #[cfg(feature = "secure")]
        return crate::check::zero::contains(p);
        #[cfg(not(feature = "secure"))]
        {
            let _ = p;
            false
        }
    }

    /// Usable size of block `p`: at least what was asked for, exactly what can
    /// be used (`secure`: exactly what was asked for, as the bytes after it
    /// are the block's canary; 0 for a zero-sized block).
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator.
    pub unsafe fn usable_size(p: *const u8) -> usize {
        #[cfg(feature = "secure")]
        if crate::check::zero::contains(p) {
            return 0;
        }
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
    /// failure returns null and leaves `p` untouched; a shrink never fails
    /// (with no memory for the copy, `p` stays where it is). (`secure`: the block is
    /// checked first, as `free` checks it.)
    ///
    /// # Safety
    /// `p` must be null or a live block returned by this allocator with `align`.
    #[link_section = "hakmem_text"]
    pub unsafe fn realloc(p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        // SAFETY: the caller's guarantee; thread::heap() is this thread's heap.
        unsafe { realloc_in(thread::heap(), p, new_size, align) }
    }

    /// [`realloc`] through `heap` (a new block comes from it; `p` is freed
    /// through it). An `align` that is not a power of two gets null and
    /// `EINVAL` when the block cannot stay where it is.
    ///
    /// # Safety
    /// As for [`realloc`] and [`alloc_generic`].
    #[link_section = "hakmem_text"]
    pub(crate) unsafe fn realloc_in(heap: *mut Heap, p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        if p.is_null() {
            // SAFETY: the caller's guarantee for heap.
            return unsafe { alloc_in_checked(heap, new_size, align) };
        }
        if valgrind::ENABLED {
            // SAFETY: the caller's guarantee.
            return unsafe { realloc_tracked(heap, p, None, new_size, align) };
        }
        #[cfg(feature = "secure")]
        // SAFETY: the caller's guarantee: p is a live hakmem block.
        return unsafe { realloc_secure(heap, p, new_size, align) };
        #[cfg(not(feature = "secure"))]
        // SAFETY: the caller's guarantee: p is a live hakmem block.
        unsafe {
            realloc_checked(heap, p, new_size, align)
        }
    }

    /// [`alloc_in`] for any `align`: null and `EINVAL` when it is not a
    /// power of two.
    ///
    /// # Safety
    /// As for [`alloc_generic`].
    #[link_section = "hakmem_text"]
    unsafe fn alloc_in_checked(heap: *mut Heap, size: usize, align: usize) -> *mut u8 {
        if align.is_power_of_two() {
            // SAFETY: the caller's guarantee.
            unsafe { alloc_in(heap, size, align) }
        } else {
            invalid_alignment()
        }
    }

    /// [`realloc_in`] of a live block `p`.
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator with `align`;
    /// `heap` as for [`alloc_generic`].
    #[cfg(not(feature = "secure"))]
    #[link_section = "hakmem_text"]
    unsafe fn realloc_checked(heap: *mut Heap, p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        // SAFETY: p is a live hakmem block.
        let usable = unsafe { usable_size(p) };
        // A sampled block (profile/) is moved, so that its record follows.
        // SAFETY: p is a live hakmem block.
        if new_size <= usable && new_size >= usable / 2 && !unsafe { crate::profile::is_sampled(p) } {
            return p;
        }
        let seg = segment_of(p);
        // SAFETY: p is a live hakmem block, so seg is its header.
        let huge = unsafe { (*seg).kind } == SegmentKind::Huge;
        // SAFETY: as above.
        let sampled = unsafe { crate::profile::is_sampled(p) };
        if huge && new_size > LARGE_SIZE_MAX && align <= PAGE_SIZE && !sampled {
            // SAFETY: p is the caller's live huge block.
            let q = unsafe { huge::huge_realloc(seg, p, new_size) };
            if !q.is_null() {
                return q;
            }
        }
        // SAFETY: forwarded.
        unsafe { realloc_by_copy(heap, p, usable, new_size, align) }
    }

    /// [`realloc_in`] of a live block `p` in the `secure` build: the block's
    /// canaries are checked (as `free` checks them: `hakmem: heap
    /// overflow ... found by realloc()`); it is resized in place when
    /// `new_size` and its canary byte fit and use at least half of it; huge
    /// blocks are always copied (each sits against its guard page), and a
    /// zero-sized block (`check/zero.rs`) is replaced.
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator with `align`;
    /// `heap` as for [`alloc_generic`].
    #[cfg(feature = "secure")]
    unsafe fn realloc_secure(heap: *mut Heap, p: *mut u8, new_size: usize, align: usize) -> *mut u8 {
        if crate::check::zero::contains(p) {
            // A zero-sized block: nothing to copy.
            // SAFETY: the caller's guarantee for heap.
            let q = unsafe { alloc_in_checked(heap, new_size, align) };
            if !q.is_null() {
                crate::check::zero::free(p, "realloc");
            }
            return q;
        }
        let seg = segment_of(p);
        // SAFETY: p is a live hakmem block, so seg is its header and
        // page_of its page.
        unsafe {
            if (*seg).kind == SegmentKind::Huge {
                let old = huge::huge_check(seg, p, "realloc()");
                return realloc_by_copy(heap, p, old, new_size, align);
            }
            let page = (*seg).page_of(p);
            let old = (*page).check_live(p, "realloc()");
            let bs = (*page).block_size;
            let need = secure::padded(new_size);
            if need <= bs && need > bs / 2 {
                (*page).set_requested_size(p, new_size);
                return p;
            }
            realloc_by_copy(heap, p, old, new_size, align)
        }
    }

    /// Moves live block `p`, of which `used` bytes are data, into a new
    /// block of `new_size` bytes from `heap` (`p` is freed through it).
    /// When none can be had: null (and `p` untouched), unless `new_size`
    /// is at most `used` — a shrink, which never fails (as in glibc): `p`
    /// stays where it is, holding `new_size` bytes (`secure`: its
    /// requested size and canary moved there), and `errno` as it was.
    ///
    /// # Safety
    /// `p` must be a live block returned by this allocator with `align`,
    /// with at least `used` bytes; `heap` as for [`alloc_generic`].
    #[link_section = "hakmem_text"]
    unsafe fn realloc_by_copy(heap: *mut Heap, p: *mut u8, used: usize, new_size: usize, align: usize) -> *mut u8 {
        let errno = os::errno();
        // SAFETY: the caller's guarantee for heap.
        let q = unsafe { alloc_in_checked(heap, new_size, align) };
        if !q.is_null() {
            // SAFETY: both blocks are live and disjoint; p has `used` bytes
            // and q at least `new_size`.
            unsafe {
                ptr::copy_nonoverlapping(p, q, used.min(new_size));
                crate::small::free::free_in(heap, p);
            }
            return q;
        }
        // (An `align` that is not a power of two failed for that: null and
        // `EINVAL`, as `realloc_in` says.)
        if new_size > used || !align.is_power_of_two() {
            return q;
        }
        #[cfg(feature = "secure")]
        {
            let seg = segment_of(p);
            // SAFETY: p is a live hakmem block (not a zero-sized one: those
            // are replaced before this), so seg is its header and, for a
            // block in a page, page_of its page; padded(new_size) fits the
            // slot, as padded(used) did.
            unsafe {
                if (*seg).kind != SegmentKind::Huge {
                    (*(*seg).page_of(p)).set_requested_size(p, new_size);
                }
            }
        }
        os::set_errno(errno);
        p
    }

    /// [`alloc`] from `heap`, for an `align` known to be a power of two:
    /// the same routing as the thread heap's, with `heap`'s address (and,
    /// `secure`, by the size with its canary byte).
    ///
    /// # Safety
    /// As for [`alloc_generic`].
    #[inline(always)]
    pub(crate) unsafe fn alloc_in(heap: *mut Heap, size: usize, align: usize) -> *mut u8 {
        debug_assert!(align.is_power_of_two());
        let need = secure::padded(size);
        // SAFETY: the caller's guarantee; the class holds need.
        let p = unsafe {
            if align <= MIN_ALIGN && need <= SMALL_SIZE_MAX {
                crate::small::alloc::alloc_small(heap, need, size)
            } else if align <= MIN_ALIGN && need <= secure::CLASS_SIZE_MAX {
                crate::small::alloc::alloc(heap, class::class_of(need), size)
            } else {
                alloc_generic(heap, size, align).0
            }
        };
        track_alloc(p, size);
        p
    }

    /// `realloc` with the `valgrind` feature: always a new block (from
    /// `heap`), the old one's `old_size` bytes (when known; else all its
    /// usable bytes, made defined first: memcheck does not know we may
    /// read the slack) copied, then the old one freed — each step one
    /// memcheck can follow, where the in-place and `mremap` paths are not.
    ///
    /// # Safety
    /// As for [`realloc_in`]; `p` not null, and allocated with `old_size`
    /// bytes when that is given.
    #[cold]
    #[inline(never)]
    #[link_section = "hakmem_text"]
    unsafe fn realloc_tracked(
        heap: *mut Heap,
        p: *mut u8,
        old_size: Option<usize>,
        new_size: usize,
        align: usize,
    ) -> *mut u8 {
        // SAFETY: p is a live hakmem block.
        let usable = unsafe { usable_size(p) };
        let old = match old_size {
            Some(size) => size.min(usable),
            None => {
                valgrind::defined(p, usable);
                usable
            }
        };
        if !align.is_power_of_two() {
            return invalid_alignment();
        }
        let errno = os::errno();
        // SAFETY: the caller's guarantee for heap.
        let q = unsafe { alloc_in(heap, new_size, align) };
        if !q.is_null() {
            // SAFETY: both blocks are live and disjoint; p has `old` bytes
            // the program may read, q at least `new_size`.
            unsafe {
                ptr::copy_nonoverlapping(p, q, old.min(new_size));
                crate::small::free::free_in(heap, p);
            }
            return q;
        }
        // A shrink never fails (`realloc_by_copy`): p stays, whole.
        if new_size <= old {
            os::set_errno(errno);
            return p;
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
