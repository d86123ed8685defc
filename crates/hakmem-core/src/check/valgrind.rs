//! Valgrind client requests (the `valgrind` cargo feature): what memcheck
//! needs to see hakmem's blocks as it sees glibc's.
//!
//! A program with `Hakmem` as its `#[global_allocator]` has our fast paths
//! inlined into it, so memcheck never sees an allocation: no write after
//! free, overflow or leak is reported. With the feature, hakmem tells
//! memcheck, as mimalloc does:
//!
//! * a block handed to the program is *malloc-like* (`MALLOCLIKE_BLOCK`,
//!   the size asked for: its bytes undefined), and the rest of the block
//!   (the size class's slack) *no-access*, so a one-byte overflow is an
//!   invalid write (`on_alloc`);
//! * a freed block is *free-like* (`FREELIKE_BLOCK`: no-access, and kept
//!   in memcheck's queue of freed blocks for "inside a block free'd"
//!   reports; `on_free`), and a block of a destroyed local heap too;
//! * a free block stays no-access: the allocator's own reads and writes of
//!   its first two words (the free-list link and the freed mark) are
//!   bracketed, made addressable just for that access (`header_access`,
//!   `header_done`), and the blocks carved into a page's free list are
//!   made no-access (`no_access`).
//!
//! Leaks are found by memcheck's own scan of the malloc-like blocks.
//!
//! Off (the default), every function here is empty and `ENABLED` is
//! false: callers need no `#[cfg]`, and the fast paths compile to the same
//! code as without the module. On, each request is a fixed sequence of
//! rotate instructions that valgrind recognises, a no-op costing a few
//! cycles on a real processor (docs/BENCHMARKS.md measures it); the
//! realloc and zeroed-allocation paths then take simpler routes (always
//! moving; always clearing), which memcheck can follow. x86-64 only: on
//! other targets the feature does nothing.

use crate::small::page::MIN_BLOCK_SIZE;

/// Whether hakmem tells valgrind about its blocks (the feature is on, on
/// a target whose client-request sequence we know).
pub(crate) const ENABLED: bool = cfg!(all(feature = "valgrind", target_arch = "x86_64"));

#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
mod request {
    /// `VG_USERREQ__MALLOCLIKE_BLOCK` and the rest (valgrind.h,
    /// memcheck.h: `VG_USERREQ_TOOL_BASE('M','C')` is `0x4d43_0000`).
    pub(super) const MALLOCLIKE_BLOCK: usize = 0x1301;
    pub(super) const FREELIKE_BLOCK: usize = 0x1302;
    pub(super) const MAKE_MEM_NOACCESS: usize = 0x4d43_0000;
    pub(super) const MAKE_MEM_UNDEFINED: usize = 0x4d43_0001;
    pub(super) const MAKE_MEM_DEFINED: usize = 0x4d43_0002;

    pub(super) use crate::arch::valgrind::client_request;
}

#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
use request::*;

/// `p` (non-null) was just handed out for `size` bytes: malloc-like for
/// `size` bytes, the rest of its `usable` bytes no-access.
#[inline(always)]
pub(crate) fn on_alloc(p: *mut u8, size: usize, usable: usize) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    {
        client_request([MALLOCLIKE_BLOCK, p as usize, size, 0, 0, 0]);
        no_access(p.wrapping_add(size), usable.saturating_sub(size));
    }
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = (p, size, usable);
}

/// `p` is being freed by the program: free-like (memcheck reports a
/// double or invalid free here), and its first two words addressable for
/// the free that follows, which makes them no-access again
/// (`header_done`) once it has written them.
#[inline(always)]
pub(crate) fn on_free(p: *mut u8) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    {
        client_request([FREELIKE_BLOCK, p as usize, 0, 0, 0, 0]);
        header_access(p);
    }
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = p;
}

/// A block of a destroyed local heap, which the program never freed:
/// free-like, so that memcheck does not report it as leaked.
#[inline(always)]
pub(crate) fn on_destroy(p: *mut u8) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    client_request([FREELIKE_BLOCK, p as usize, 0, 0, 0, 0]);
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = p;
}

/// The allocator is about to read or write the first two words of block
/// `p` (link and freed mark) while it is free, or being freed: addressable
/// and defined (the allocator wrote them, or — a block being freed — it
/// compares the program's bytes with the freed mark, which must not count
/// as a use of uninitialised memory).
#[inline(always)]
pub(crate) fn header_access<T>(p: *mut T) {
    defined(p as *mut u8, MIN_BLOCK_SIZE);
}

/// The allocator is done with the first two words of free block `p`:
/// no-access again.
#[inline(always)]
pub(crate) fn header_done<T>(p: *mut T) {
    no_access(p as *mut u8, MIN_BLOCK_SIZE);
}

/// `len` bytes at `p` no-access (free blocks, a block's slack).
#[inline(always)]
pub(crate) fn no_access(p: *mut u8, len: usize) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    if len != 0 {
        client_request([MAKE_MEM_NOACCESS, p as usize, len, 0, 0, 0]);
    }
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = (p, len);
}

/// `len` bytes at `p` addressable, their definedness unknown (about to be
/// written by the allocator).
#[inline(always)]
pub(crate) fn undefined(p: *mut u8, len: usize) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    if len != 0 {
        client_request([MAKE_MEM_UNDEFINED, p as usize, len, 0, 0, 0]);
    }
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = (p, len);
}

/// `len` bytes at `p` addressable and defined.
#[inline(always)]
pub(crate) fn defined(p: *mut u8, len: usize) {
    #[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
    if len != 0 {
        client_request([MAKE_MEM_DEFINED, p as usize, len, 0, 0, 0]);
    }
    #[cfg(not(all(feature = "valgrind", target_arch = "x86_64")))]
    let _ = (p, len);
}
