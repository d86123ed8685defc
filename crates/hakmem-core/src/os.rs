//! The only module that talks to the OS: mappings, stderr, abort.
//!
//! Every call preserves the caller's `errno` on success (a successful
//! `malloc` must not clobber it); on failure the caller sets `ENOMEM`.
//! Each memory call is counted (always on: these are slow-path calls), which
//! is how tests check that steady state makes no system calls.

use crate::sync::{plain::AtomicUsize, Ordering};
use core::ptr;

/// Counts of OS memory calls since process start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OsCounters {
    /// `mmap` calls (successful or not).
    pub mmap: usize,
    /// `munmap` calls.
    pub munmap: usize,
    /// `madvise` calls.
    pub madvise: usize,
    /// `mremap` calls.
    pub mremap: usize,
}

static MMAP_CALLS: AtomicUsize = AtomicUsize::new(0);
static MUNMAP_CALLS: AtomicUsize = AtomicUsize::new(0);
static MADVISE_CALLS: AtomicUsize = AtomicUsize::new(0);
static MREMAP_CALLS: AtomicUsize = AtomicUsize::new(0);

/// The OS memory calls made so far by this process's hakmem.
pub fn os_counters() -> OsCounters {
    OsCounters {
        mmap: MMAP_CALLS.load(Ordering::Relaxed),
        munmap: MUNMAP_CALLS.load(Ordering::Relaxed),
        madvise: MADVISE_CALLS.load(Ordering::Relaxed),
        mremap: MREMAP_CALLS.load(Ordering::Relaxed),
    }
}

/// The OS page size hakmem assumes for rounding mappings (x86-64 Linux).
pub const OS_PAGE_SIZE: usize = 4096;

/// Saves `errno` on creation and restores it on drop (snmalloc's `KeepErrno`).
struct KeepErrno(i32);

impl KeepErrno {
    fn new() -> Self {
        Self(errno())
    }
}

impl Drop for KeepErrno {
    fn drop(&mut self) {
        set_errno(self.0);
    }
}

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    // SAFETY: __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub fn set_errno(value: i32) {
    // SAFETY: __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = value }
}

/// Maps `size` bytes (a multiple of `OS_PAGE_SIZE`) of fresh, zeroed,
/// read-write memory, or returns null.
pub(crate) fn map(size: usize) -> *mut u8 {
    let _keep = KeepErrno::new();
    MMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing touches no existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        graveyard::mapped(p.cast(), size);
        p.cast()
    }
}

/// Unmaps `[p, p + size)`, a range this module mapped.
///
/// # Safety
/// The range must be mapped by `map`/`map_aligned` and no longer used.
pub(crate) unsafe fn unmap(p: *mut u8, size: usize) {
    if size == 0 {
        return;
    }
    let _keep = KeepErrno::new();
    MUNMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    if graveyard::defers_unmap() {
        return;
    }
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::munmap(p.cast(), size) };
}

/// Under loom, nothing is unmapped while a model runs: a thread the model
/// lets run after an unmap must meet loom's report (`Segment::touch`), not
/// a fault that would end the whole test binary. Every mapping made during
/// an explored execution is unmapped when that execution ends (its
/// `loom::lazy_static!` is dropped then). Normal builds: nothing.
mod graveyard {
    #[cfg(not(hakmem_loom))]
    #[inline(always)]
    pub(super) fn mapped(_p: *mut u8, _size: usize) {}

    #[cfg(not(hakmem_loom))]
    #[inline(always)]
    pub(super) fn defers_unmap() -> bool {
        false
    }

    #[cfg(hakmem_loom)]
    pub(super) use model::{defers_unmap, mapped};

    #[cfg(hakmem_loom)]
    mod model {
        extern crate std;
        use std::sync::Mutex;
        use std::vec::Vec;

        pub(crate) struct Graveyard(Mutex<Vec<(usize, usize)>>);

        impl Drop for Graveyard {
            fn drop(&mut self) {
                for &(p, size) in self.0.lock().unwrap().iter() {
                    // SAFETY: the execution that made the mapping is over:
                    // nothing of it is used any more.
                    unsafe { libc::munmap(p as *mut libc::c_void, size) };
                }
            }
        }

        loom::lazy_static! {
            static ref GRAVEYARD: Graveyard = Graveyard(Mutex::new(Vec::new()));
        }

        pub(crate) fn mapped(p: *mut u8, size: usize) {
            GRAVEYARD.0.lock().unwrap().push((p as usize, size));
        }

        pub(crate) fn defers_unmap() -> bool {
            true
        }
    }
}

/// Linux's `MAP_FIXED_NOREPLACE` (4.17+): map exactly at the hint or fail
/// with `EEXIST`, never over an existing mapping. Older kernels treat it as
/// a plain hint, which `map_at` detects.
const MAP_FIXED_NOREPLACE: libc::c_int = 0x10_0000;

/// Where the last aligned mapping started: the next one is tried just below
/// it (the kernel hands out addresses top-down, so that range is usually
/// free), which makes an aligned mapping one system call instead of three.
static NEXT_HINT: AtomicUsize = AtomicUsize::new(0);

/// Maps `size` bytes exactly at `addr`, or returns null.
pub(crate) fn map_at(addr: usize, size: usize) -> *mut u8 {
    let _keep = KeepErrno::new();
    MMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; a
    // kernel that ignores it places the mapping elsewhere (undone below).
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return ptr::null_mut();
    }
    graveyard::mapped(p.cast(), size);
    if p as usize != addr {
        // SAFETY: p is the mapping just made, not handed out.
        unsafe { unmap(p.cast(), size) };
        return ptr::null_mut();
    }
    p.cast()
}

/// Maps `size` bytes at an address `a` with `(a + offset) % align == 0`.
/// `align` is a power of two of at least `OS_PAGE_SIZE`; `offset` is a
/// multiple of `OS_PAGE_SIZE`. First tries the aligned range just below the
/// previous one (one call); else over-maps by `align` and trims both ends.
pub(crate) fn map_aligned(size: usize, align: usize, offset: usize) -> *mut u8 {
    let hint = NEXT_HINT.load(Ordering::Relaxed);
    if let Some(top) = hint.checked_sub(size) {
        let cand = ((top + offset) & !(align - 1)).wrapping_sub(offset);
        if cand >= align && cand <= top {
            let p = map_at(cand, size);
            if !p.is_null() {
                NEXT_HINT.store(cand, Ordering::Relaxed);
                return p;
            }
        }
    }
    let Some(total) = size.checked_add(align) else {
        return ptr::null_mut();
    };
    let base = map(total);
    if base.is_null() {
        return ptr::null_mut();
    }
    let b = base as usize;
    let start = ((b + offset + align - 1) & !(align - 1)) - offset;
    let start = if start < b { start + align } else { start };
    // SAFETY: [b, start) and [start + size, b + total) lie inside the mapping
    // just made and are not handed out.
    unsafe {
        unmap(base, start - b);
        unmap((start + size) as *mut u8, b + total - (start + size));
    }
    NEXT_HINT.store(start, Ordering::Relaxed);
    start as *mut u8
}

/// Gives the pages of `[p, p + size)` back to the OS (`MADV_DONTNEED`): the
/// range stays mapped and reads as zero when touched again. Resident memory
/// drops at once (unlike `MADV_FREE`, which waits for memory pressure and so
/// leaves RSS high in every measurement a user makes).
///
/// # Safety
/// The range must be mapped by this module and hold no live data.
pub(crate) unsafe fn purge(p: *mut u8, size: usize) {
    if size == 0 {
        return;
    }
    let _keep = KeepErrno::new();
    MADVISE_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::madvise(p.cast(), size, libc::MADV_DONTNEED) };
}

/// Asks for (or against) transparent huge pages on a fresh mapping.
pub(crate) fn advise_huge_pages(p: *mut u8, size: usize, on: bool) {
    let _keep = KeepErrno::new();
    MADVISE_CALLS.fetch_add(1, Ordering::Relaxed);
    let advice = if on { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
    // SAFETY: advice only; the range is a mapping of ours.
    unsafe { libc::madvise(p.cast(), size, advice) };
}

/// Moves/resizes mapping `[p, p + old)` to `[to, to + new)` without copying
/// (`to` is a mapping of `new` bytes it replaces). Returns success.
///
/// # Safety
/// Both ranges must be mappings of this module; `[p, p + old)` must not be
/// used by anyone else during the call.
pub(crate) unsafe fn remap_to(p: *mut u8, old: usize, new: usize, to: *mut u8) -> bool {
    let _keep = KeepErrno::new();
    MREMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller guarantees both ranges are ours; MREMAP_FIXED
    // replaces the mapping at `to` atomically.
    let r = unsafe {
        libc::mremap(
            p.cast(),
            old,
            new,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut libc::c_void,
        )
    };
    r != libc::MAP_FAILED
}

/// Resizes mapping `[p, p + old)` in place to `new` bytes. Returns success.
///
/// # Safety
/// `[p, p + old)` must be a mapping of this module; when shrinking, the tail
/// must hold no live data.
pub(crate) unsafe fn remap_in_place(p: *mut u8, old: usize, new: usize) -> bool {
    let _keep = KeepErrno::new();
    MREMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller guarantees the range is ours; without MAYMOVE the
    // mapping either resizes where it is or fails.
    unsafe { libc::mremap(p.cast(), old, new, 0) != libc::MAP_FAILED }
}

/// Makes `[p, p + size)` inaccessible (guard pages of `secure` builds).
///
/// # Safety
/// The range must be part of a mapping of this module and never handed out.
pub(crate) unsafe fn protect_none(p: *mut u8, size: usize) {
    let _keep = KeepErrno::new();
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::mprotect(p.cast(), size, libc::PROT_NONE) };
}

/// Random bits from the kernel (for the `secure` feature's keys).
#[cfg(feature = "secure")]
pub(crate) fn random_usize() -> usize {
    let _keep = KeepErrno::new();
    let mut v: usize = 0;
    // SAFETY: v is a valid buffer of its size.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), core::mem::size_of::<usize>(), 0) };
    if n != core::mem::size_of::<usize>() as isize {
        v = now_ms() as usize ^ (&raw const v as usize);
    }
    v
}

/// Gives the CPU to another thread (a wait that spun long enough).
pub(crate) fn yield_now() {
    #[cfg(not(hakmem_loom))]
    // SAFETY: sched_yield has no preconditions.
    unsafe {
        libc::sched_yield();
    }
    #[cfg(hakmem_loom)]
    loom::thread::yield_now();
}

/// Milliseconds of a monotonic clock (vDSO: no system call).
pub(crate) fn now_ms() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Whether the system backs every anonymous mapping with transparent huge
/// pages (`/sys/kernel/mm/transparent_hugepage/enabled` is `[always]`).
pub(crate) fn thp_always() -> bool {
    let path = c"/sys/kernel/mm/transparent_hugepage/enabled";
    let _keep = KeepErrno::new();
    // SAFETY: path is NUL-terminated; the buffer is valid for its length.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 64];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        n > 8 && buf.starts_with(b"[always]")
    }
}

/// Writes `bytes` to stderr, ignoring errors (used for diagnostics only).
pub(crate) fn write_stderr(bytes: &[u8]) {
    let _keep = KeepErrno::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        // SAFETY: rest is a valid byte slice for its length.
        let n = unsafe { libc::write(2, rest.as_ptr().cast(), rest.len()) };
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// Ends the process with SIGABRT, without unwinding.
pub(crate) fn abort() -> ! {
    // SAFETY: abort takes no arguments and does not return.
    unsafe { libc::abort() }
}

/// Reports a misused pointer — `hakmem: <function>(): <reason> 0x...` — then
/// aborts, or returns when `HAKMEM_ON_ERROR=warn` (the caller then ignores
/// the call).
#[cold]
#[inline(never)]
pub(crate) fn report_pointer(function: &str, reason: &str, p: *const u8) {
    write_pointer_message(function, reason, p);
    if crate::config::config().on_error == crate::config::OnError::Abort {
        abort()
    }
}

/// Reports a fatal misuse: `hakmem: <function>(): <reason> <pointer>` then abort.
#[cold]
#[inline(never)]
pub(crate) fn fatal_pointer(function: &str, reason: &str, p: *const u8) -> ! {
    write_pointer_message(function, reason, p);
    abort()
}

fn write_pointer_message(function: &str, reason: &str, p: *const u8) {
    let mut buf = [0u8; 256];
    let mut w = Writer::new(&mut buf);
    w.push(b"hakmem: ");
    w.push(function.as_bytes());
    w.push(b"(): ");
    w.push(reason.as_bytes());
    w.push(b" ");
    w.push_hex(p as usize);
    w.push(b"\n");
    let len = w.len;
    write_stderr(&buf[..len]);
}

/// Formats into a fixed buffer without allocating (for diagnostics).
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Self { buf, len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn push_u64(&mut self, mut value: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    pub(crate) fn push_i64(&mut self, value: i64) {
        if value < 0 {
            self.push(b"-");
        }
        self.push_u64(value.unsigned_abs());
    }

    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }

    pub(crate) fn push_hex(&mut self, value: usize) {
        let mut digits = [0u8; 18];
        digits[0] = b'0';
        digits[1] = b'x';
        for i in 0..16 {
            let nibble = (value >> ((15 - i) * 4)) & 0xf;
            digits[2 + i] = b"0123456789abcdef"[nibble];
        }
        self.push(&digits);
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    #[test]
    fn map_aligned_honours_alignment_and_offset() {
        for (align, offset) in [(1 << 21, 0), (1 << 22, 1 << 21), (1 << 16, 0)] {
            let p = map_aligned(3 << 20, align, offset);
            assert!(!p.is_null());
            assert_eq!((p as usize + offset) % align, 0);
            // SAFETY: the mapping is 3 MiB, fresh and ours.
            unsafe {
                assert_eq!(*p, 0);
                *p.add((3 << 20) - 1) = 1;
                unmap(p, 3 << 20);
            }
        }
    }

    #[test]
    fn an_aligned_mapping_below_the_last_takes_one_call() {
        // Other tests map and unmap concurrently and may take the range
        // below the hint, so try a few times: the hinted path must work at
        // least once, and then in exactly one mmap and no munmap.
        const SIZE: usize = 2 << 20;
        let mut hinted = 0;
        for _ in 0..20 {
            // An aligned range with room below it: map 2 segments' worth,
            // keep the upper one, give the lower one back.
            let region = map_aligned(2 * SIZE, SIZE, 0);
            assert!(!region.is_null());
            // SAFETY: the lower half of our fresh mapping, unused.
            unsafe { unmap(region, SIZE) };
            let upper = region as usize + SIZE;
            NEXT_HINT.store(upper, Ordering::Relaxed);
            let before = os_counters();
            let p = map_aligned(SIZE, SIZE, 0);
            let after = os_counters();
            assert_eq!(p as usize % SIZE, 0);
            if core::ptr::eq(p, region) {
                assert_eq!(after.mmap - before.mmap, 1, "one hinted mmap");
                assert_eq!(after.munmap, before.munmap, "nothing to trim");
                hinted += 1;
            }
            // SAFETY: both mappings are ours and unused.
            unsafe {
                unmap(p, SIZE);
                unmap(upper as *mut u8, SIZE);
            }
        }
        assert!(hinted > 0, "the range just below the hint was used");
    }

    #[test]
    fn os_calls_preserve_errno() {
        set_errno(1234);
        let p = map(OS_PAGE_SIZE);
        assert_eq!(errno(), 1234);
        // SAFETY: p was just mapped with that size.
        unsafe { unmap(p, OS_PAGE_SIZE) };
        assert_eq!(errno(), 1234);
    }

    #[test]
    fn counters_count_calls() {
        let before = os_counters();
        let p = map(OS_PAGE_SIZE);
        // SAFETY: p was just mapped with that size.
        unsafe { unmap(p, OS_PAGE_SIZE) };
        let after = os_counters();
        assert!(after.mmap > before.mmap);
        assert!(after.munmap > before.munmap);
    }
}
