//! The only code that talks to the OS (with arch/, for the thread binding):
//! mappings, the clock, stderr, abort, the environment, thread keys and
//! process hooks.
//!
//! **Layer: the system**, at the bottom: it calls nothing of hakmem's but
//! the configuration (`HAKMEM_VERBOSE`, for its one report of a refused
//! call) and `sync`'s plain atomics (its counters).
//!
//! This file is the part every system shares: each memory call preserves
//! the caller's `errno` on success (a successful `malloc` must not clobber
//! it; on failure the caller sets `ENOMEM`) and is counted (always on:
//! these are slow-path calls), which is how tests check that steady state
//! makes no system calls; aligned mappings are built from plain ones; and
//! the diagnostics are formatted here. The primitives come from one module
//! per system, `sys` — today only `linux.rs`. Another system provides the
//! same functions, with the same contracts:
//!
//! * `errno`, `set_errno`, `ENOMEM`, `EINVAL`; `page_size`;
//! * `map(size)` (fresh, zeroed, read-write, not committed up front),
//!   `map_at(addr, size)` (there or nowhere — or elsewhere, which the
//!   caller undoes — never over an existing mapping), `unmap`, `purge`
//!   (the range stays mapped and reads as zero afterwards), `protect_none`;
//! * optional, may do nothing or fail: `advise_huge_pages`, `thp_always`,
//!   `remap_to`, `remap_in_place` (without them huge `realloc` copies),
//!   `random_usize` (`secure` builds);
//! * `yield_now`, `now_ms` (monotonic, cheap: it is read on slow paths);
//! * `write_stderr` (one write), `abort`;
//! * `for_each_env` (the environment, without allocating);
//! * thread keys with a destructor run at thread exit (`thread_key_create`,
//!   `_delete`, `_get`, `_set`), `thread_id`, `at_fork`, `at_exit`;
//! * `keep_loaded` (the object holding hakmem never unloaded; may do
//!   nothing where objects are never unloaded);
//! * `kernel_ids` and `thread_exists` (finding heaps of threads that are
//!   gone without having run their exit hook).

#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod sys;

#[cfg(hakmem_fault_injection)]
pub mod fault;

/// Whether the OS call of kind `$call` about to be made must fail
/// (`--cfg hakmem_fault_injection` test builds: see fault.rs); always
/// false otherwise, where it compiles to nothing.
macro_rules! refused {
    ($call:ident) => {{
        #[cfg(hakmem_fault_injection)]
        let refused = fault::refuse(fault::Call::$call);
        #[cfg(not(hakmem_fault_injection))]
        let refused = false;
        refused
    }};
}

#[cfg(not(target_os = "linux"))]
compile_error!(
    "hakmem-core: os/ has only a Linux implementation; docs/DESIGN.md (\"Platforms\") lists what another system must provide"
);

pub(crate) use sys::{at_exit, at_fork, for_each_env, thread_key_delete, ThreadKey, EINVAL, ENOMEM};
// The heap profiler's file output (profile/pprof.rs): plain system calls, no
// allocation (not through the fault-injection layer: a refused write is
// reported to the caller of `dump` as it is).
#[cfg(not(hakmem_loom))]
pub(crate) use sys::{
    close, create_file, create_new_file, map_file, process_id, read_file, realtime_ns, remove_file, rename,
    replaceable, unmap_file, write_all,
};

/// Creates a thread key whose `destructor` runs at a thread's exit for a
/// value that is not null; None when the system has no key left.
pub(crate) fn thread_key_create(destructor: unsafe extern "C" fn(*mut core::ffi::c_void)) -> Option<ThreadKey> {
    if refused!(ThreadKey) {
        failed("pthread_key_create");
        return None;
    }
    sys::thread_key_create(destructor)
}

/// Sets the calling thread's value for `key`; false when libc refuses
/// (glibc allocates a second-level block for keys past the 32nd).
pub(crate) fn thread_key_set(key: ThreadKey, value: *mut core::ffi::c_void) -> bool {
    if refused!(ThreadKey) || !sys::thread_key_set(key, value) {
        failed("pthread_setspecific");
        return false;
    }
    true
}

/// The kernel's ids of the calling thread: (process, thread).
pub(crate) fn kernel_ids() -> (i32, i32) {
    let _keep = KeepErrno::new();
    (sys::process_id(), sys::kernel_thread_id())
}

/// Whether the thread with the kernel ids `(pid, tid)` (from
/// `kernel_ids`) still exists. A thread id is only reused after the
/// kernel has forgotten the thread, so "no" is certain; "yes" may be a
/// new thread that got the id (the caller then asks again later).
pub(crate) fn thread_exists((pid, tid): (i32, i32)) -> bool {
    let _keep = KeepErrno::new();
    sys::thread_exists(pid, tid)
}

/// Keeps the shared object holding `code` loaded for the life of the
/// process, so that hooks registered with the system (the thread-exit key
/// destructor, `fork` handlers) never point into an unmapped library after
/// a `dlclose` (`RTLD_NODELETE` semantics). Nothing for the main program.
/// `errno` is left alone.
pub(crate) fn keep_loaded(code: *const core::ffi::c_void) -> bool {
    let _keep = KeepErrno::new();
    !refused!(KeepLoaded) && sys::keep_loaded(code)
}
/// The size above which the kernel refuses any mapping, whatever else is
/// mapped: physical memory and swap together under the default overcommit
/// heuristic; `usize::MAX` under another setting (where address-space
/// limits and the number of mappings are what refuse) or when the system
/// does not say. Read once. `errno` is left alone.
pub(crate) fn refused_above() -> usize {
    static KNOWN: AtomicUsize = AtomicUsize::new(0);
    // Relaxed: a plain value; two threads reading it first both store the
    // same one.
    match KNOWN.load(Ordering::Relaxed) {
        0 => {
            let _keep = KeepErrno::new();
            let bytes = if sys::overcommit_heuristic() {
                sys::memory_and_swap().unwrap_or(usize::MAX).max(1)
            } else {
                usize::MAX
            };
            KNOWN.store(bytes, Ordering::Relaxed);
            bytes
        }
        bytes => bytes,
    }
}

// The portable thread binding's (arch/portable.rs).
#[allow(unused_imports)]
pub(crate) use sys::{thread_id, thread_key_get};

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
    /// Calls the OS refused, of every kind (a failed `mmap` included):
    /// each one was handled (docs/DESIGN.md, "When the OS says no").
    pub failed: usize,
    /// Purges (`madvise(MADV_DONTNEED)`) the OS refused: locked memory
    /// (`mlockall`), a sandbox. The range stays resident and counts as
    /// dirty (never as zero) until it is used again.
    pub failed_purges: usize,
}

static MMAP_CALLS: AtomicUsize = AtomicUsize::new(0);
static MUNMAP_CALLS: AtomicUsize = AtomicUsize::new(0);
static MADVISE_CALLS: AtomicUsize = AtomicUsize::new(0);
static MREMAP_CALLS: AtomicUsize = AtomicUsize::new(0);
static FAILED_CALLS: AtomicUsize = AtomicUsize::new(0);
static FAILED_PURGES: AtomicUsize = AtomicUsize::new(0);

/// The OS memory calls made so far by this process's hakmem.
pub fn os_counters() -> OsCounters {
    OsCounters {
        mmap: MMAP_CALLS.load(Ordering::Relaxed),
        munmap: MUNMAP_CALLS.load(Ordering::Relaxed),
        madvise: MADVISE_CALLS.load(Ordering::Relaxed),
        mremap: MREMAP_CALLS.load(Ordering::Relaxed),
        failed: FAILED_CALLS.load(Ordering::Relaxed),
        failed_purges: FAILED_PURGES.load(Ordering::Relaxed),
    }
}

/// The OS page size, read once (0: not yet).
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// The size of the pages the OS maps, protects and purges in (read at run
/// time: 4 KiB on x86-64; 4, 16 or 64 KiB on aarch64). Mapping sizes are
/// rounded to it.
pub fn page_size() -> usize {
    // Relaxed: a value read from the OS, the same in every thread.
    let size = PAGE_SIZE.load(Ordering::Relaxed);
    if size != 0 {
        return size;
    }
    let size = sys::page_size();
    PAGE_SIZE.store(size, Ordering::Relaxed);
    size
}

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
    sys::errno()
}

/// Sets the calling thread's `errno`.
pub fn set_errno(value: i32) {
    sys::set_errno(value)
}

/// Maps `size` bytes (a multiple of `page_size()`) of fresh, zeroed,
/// read-write memory, or returns null.
pub(crate) fn map(size: usize) -> *mut u8 {
    let _keep = KeepErrno::new();
    MMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    let p = if refused!(Map) { ptr::null_mut() } else { sys::map(size) };
    if p.is_null() {
        failed("mmap");
    } else {
        graveyard::mapped(p, size);
    }
    p
}

/// Counts a call the OS refused; the first one of each process is
/// reported under `HAKMEM_VERBOSE=1` (every failure is handled: nothing
/// is printed otherwise, as a `malloc` returning null prints nothing).
#[cold]
#[inline(never)]
fn failed(call: &str) {
    if FAILED_CALLS.fetch_add(1, Ordering::Relaxed) == 0 && crate::config::config().verbose {
        let mut line = Line::new();
        line.push(b"hakmem: the OS refused a call (");
        line.push(call.as_bytes());
        line.push(b", errno ");
        line.push_i64(i64::from(errno()));
        line.push(b"); handled: counted in the statistics' `failed`, this is reported once\n");
        line.write();
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
    if refused!(Unmap) || !unsafe { sys::unmap(p, size) } {
        // Still mapped (splitting a mapping past `vm.max_map_count`): the
        // range is lost to hakmem, not to the program.
        failed("munmap");
    }
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
                    unsafe { super::super::sys::unmap(p as *mut u8, size) };
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

/// Where the last aligned mapping started: the next one is tried just below
/// it (the kernel hands out addresses top-down, so that range is usually
/// free), which makes an aligned mapping one system call instead of three.
static NEXT_HINT: AtomicUsize = AtomicUsize::new(0);

/// Maps `size` bytes exactly at `addr`, or returns null.
pub(crate) fn map_at(addr: usize, size: usize) -> *mut u8 {
    let _keep = KeepErrno::new();
    MMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    let p = if refused!(Map) {
        ptr::null_mut()
    } else {
        sys::map_at(addr, size)
    };
    if p.is_null() {
        // A taken range (`EEXIST`) is the common answer, not a failure.
        if errno() != sys::EEXIST {
            failed("mmap");
        }
        return p;
    }
    graveyard::mapped(p, size);
    if p as usize != addr {
        // SAFETY: p is the mapping just made (elsewhere), not handed out.
        unsafe { unmap(p, size) };
        return ptr::null_mut();
    }
    p
}

/// Maps `size` bytes at an address `a` with `(a + offset) % align == 0`.
/// `align` is a power of two of at least `page_size()`; `offset` is a
/// multiple of `page_size()`. First tries the aligned range just below the
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
/// Returns whether the OS did it. When it refuses (`EINVAL` on locked
/// memory after `mlockall`, `EPERM` from a seccomp filter, `EAGAIN`), the
/// range keeps its bytes: the caller must go on treating it as dirty —
/// never as zero — and not count it as given back.
///
/// # Safety
/// The range must be mapped by this module and hold no live data.
#[must_use = "a refused purge leaves the range dirty"]
pub(crate) unsafe fn purge(p: *mut u8, size: usize) -> bool {
    if size == 0 {
        return true;
    }
    let _keep = KeepErrno::new();
    MADVISE_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller guarantees the range is ours and unused.
    let done = !refused!(Purge) && unsafe { sys::purge(p, size) };
    if !done {
        FAILED_PURGES.fetch_add(1, Ordering::Relaxed);
        failed("madvise(MADV_DONTNEED)");
    }
    done
}

/// Whether every page of `[p, p + size)` is mapped (by anyone).
#[cfg_attr(feature = "secure", allow(dead_code))]
pub(crate) fn is_mapped(p: *mut u8, size: usize) -> bool {
    let _keep = KeepErrno::new();
    sys::is_mapped(p, size)
}

/// Asks for (or against) transparent huge pages on a fresh mapping.
pub(crate) fn advise_huge_pages(p: *mut u8, size: usize, on: bool) {
    let _keep = KeepErrno::new();
    MADVISE_CALLS.fetch_add(1, Ordering::Relaxed);
    // Advice only: its failure changes nothing but the page size.
    if refused!(Advise) || !sys::advise_huge_pages(p, size, on) {
        failed("madvise");
    }
}

// `secure` builds never resize huge mappings in place.
#[cfg_attr(feature = "secure", allow(dead_code))]
/// Moves/resizes mapping `[p, p + old)` to `[to, to + new)` without copying
/// (`to` is a mapping of `new` bytes it replaces). Returns success.
///
/// # Safety
/// Both ranges must be mappings of this module; `[p, p + old)` must not be
/// used by anyone else during the call.
pub(crate) unsafe fn remap_to(p: *mut u8, old: usize, new: usize, to: *mut u8) -> bool {
    let _keep = KeepErrno::new();
    MREMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller's guarantee.
    let done = !refused!(Remap) && unsafe { sys::remap_to(p, old, new, to) };
    if !done {
        failed("mremap");
    }
    done
}

// `secure` builds never resize huge mappings in place.
#[cfg_attr(feature = "secure", allow(dead_code))]
/// Resizes mapping `[p, p + old)` in place to `new` bytes. Returns success.
///
/// # Safety
/// `[p, p + old)` must be a mapping of this module; when shrinking, the tail
/// must hold no live data.
pub(crate) unsafe fn remap_in_place(p: *mut u8, old: usize, new: usize) -> bool {
    let _keep = KeepErrno::new();
    MREMAP_CALLS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the caller's guarantee. (Not counted as a failure when it
    // does not happen: growing in place often cannot.)
    !refused!(Remap) && unsafe { sys::remap_in_place(p, old, new) }
}

/// Makes `[p, p + size)` inaccessible (guard pages and quarantined huge
/// mappings of `secure` builds).
///
/// # Safety
/// The range must be part of a mapping of this module and hold nothing
/// handed out (never, or no longer: a freed huge block in quarantine).
#[must_use = "a refused protection leaves the range accessible"]
#[cfg_attr(not(feature = "secure"), allow(dead_code))]
pub(crate) unsafe fn protect_none(p: *mut u8, size: usize) -> bool {
    let _keep = KeepErrno::new();
    // SAFETY: the caller's guarantee.
    let done = !refused!(Protect) && unsafe { sys::protect_none(p, size) };
    if !done {
        failed("mprotect");
    }
    done
}

/// Makes `[p, p + size)` readable and writable again (a `secure` build's
/// quarantined huge mapping, handed out again); false when the kernel
/// refuses.
///
/// # Safety
/// The range must be part of a mapping of this module that no one else
/// uses.
#[cfg(feature = "secure")]
pub(crate) unsafe fn protect_rw(p: *mut u8, size: usize) -> bool {
    let _keep = KeepErrno::new();
    // SAFETY: the caller's guarantee.
    let done = !refused!(Protect) && unsafe { sys::protect_rw(p, size) };
    if !done {
        failed("mprotect");
    }
    done
}

/// Random bits for the freed mark's key (`small::page::freed_mark`): from
/// the kernel without waiting for its entropy pool (a program started
/// early at boot must not block in its first `malloc`), else from the
/// clock and an address — a key a program does not know either way.
pub(crate) fn random_for_marks() -> usize {
    let _keep = KeepErrno::new();
    let v: usize = 0;
    let random = if refused!(Random) {
        None
    } else {
        sys::random_nonblocking()
    };
    random.unwrap_or_else(|| (now_ms() as usize).rotate_left(32) ^ (&raw const v as usize))
}

/// Random bits from the kernel (for the `secure` feature's keys).
#[cfg(feature = "secure")]
pub(crate) fn random_usize() -> usize {
    let _keep = KeepErrno::new();
    let v: usize = 0;
    let random = if refused!(Random) { None } else { sys::random_usize() };
    random.unwrap_or_else(|| now_ms() as usize ^ (&raw const v as usize))
}

/// Gives the CPU to another thread (a wait that spun long enough).
pub(crate) fn yield_now() {
    #[cfg(not(hakmem_loom))]
    sys::yield_now();
    #[cfg(hakmem_loom)]
    loom::thread::yield_now();
}

/// Milliseconds of a monotonic clock (vDSO: no system call).
pub(crate) fn now_ms() -> u64 {
    sys::now_ms()
}

/// Whether the system backs every anonymous mapping with transparent huge
/// pages (`/sys/kernel/mm/transparent_hugepage/enabled` is `[always]`).
pub(crate) fn thp_always() -> bool {
    let _keep = KeepErrno::new();
    sys::thp_always()
}

/// Writes `bytes` to stderr, ignoring errors (used for diagnostics only).
pub(crate) fn write_stderr(bytes: &[u8]) {
    let _keep = KeepErrno::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = sys::write_stderr(rest);
        if n <= 0 {
            return;
        }
        rest = &rest[n as usize..];
    }
}

/// Ends the process with SIGABRT, without unwinding.
pub(crate) fn abort() -> ! {
    sys::abort()
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
    let mut line = Line::new();
    line.push(b"hakmem: ");
    line.push(function.as_bytes());
    line.push(b"(): ");
    line.push(reason.as_bytes());
    line.push(b" ");
    line.push_hex(p as usize);
    line.push(b"\n");
    line.write();
}

/// Text formatted on the stack without allocating, in a buffer of `N`
/// bytes: hakmem's diagnostics and reports, and hakmem-ffi's (the panic
/// handler, misused `free_sized`/`operator delete`, `malloc_info`). Output
/// longer than the buffer is cut, never an error.
pub struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

/// One line of diagnostics: 256 bytes.
pub type Line = StackText<256>;

impl<const N: usize> StackText<N> {
    /// Empty text.
    pub const fn new() -> Self {
        Self { buf: [0; N], len: 0 }
    }

    /// Appends `bytes`, as many as fit.
    pub fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
        self.len += n;
    }

    /// Appends `value` in decimal.
    pub fn push_u64(&mut self, mut value: u64) {
        // u64::MAX has 20 decimal digits.
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

    /// Appends `value` in decimal.
    pub fn push_usize(&mut self, value: usize) {
        self.push_u64(value as u64);
    }

    /// Appends `value` in decimal, with a `-` when negative.
    pub fn push_i64(&mut self, value: i64) {
        if value < 0 {
            self.push(b"-");
        }
        self.push_u64(value.unsigned_abs());
    }

    /// Appends `value` as `0x` and 16 hex digits (the format of pointers in
    /// hakmem's diagnostics).
    pub fn push_hex(&mut self, value: usize) {
        let mut digits = [0u8; 18];
        digits[0] = b'0';
        digits[1] = b'x';
        for i in 0..16 {
            let nibble = (value >> ((15 - i) * 4)) & 0xf;
            digits[2 + i] = b"0123456789abcdef"[nibble];
        }
        self.push(&digits);
    }

    /// What has been formatted so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Writes the text to stderr; errors are ignored (there is nowhere to
    /// report them) and `errno` is left as it was.
    pub fn write(&self) {
        write_stderr(self.as_bytes());
    }
}

impl<const N: usize> Default for StackText<N> {
    fn default() -> Self {
        Self::new()
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
        // Other tests map and unmap concurrently: they may take the range
        // below the hint, and their calls land in the same process-wide
        // counters. So try a few times: at least once the hinted path must
        // be taken in exactly one mmap and no munmap (an attempt whose
        // counts another thread's calls disturbed proves nothing either
        // way, and one that regressed to map-and-trim is never clean).
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
            if core::ptr::eq(p, region) && after.mmap - before.mmap == 1 && after.munmap == before.munmap {
                hinted += 1;
            }
            // SAFETY: both mappings are ours and unused.
            unsafe {
                unmap(p, SIZE);
                unmap(upper as *mut u8, SIZE);
            }
        }
        assert!(
            hinted > 0,
            "the range just below the hint was used, in one mmap and no munmap"
        );
    }

    #[test]
    fn os_calls_preserve_errno() {
        set_errno(1234);
        let p = map(page_size());
        assert_eq!(errno(), 1234);
        // SAFETY: p was just mapped with that size.
        unsafe { unmap(p, page_size()) };
        assert_eq!(errno(), 1234);
    }

    #[test]
    fn text_formats_numbers_and_pointers() {
        let mut line = Line::new();
        line.push(b"a ");
        line.push_u64(0);
        line.push(b" ");
        line.push_usize(1234567890);
        line.push(b" ");
        line.push_u64(u64::MAX);
        line.push(b" ");
        line.push_i64(-42);
        line.push(b" ");
        line.push_hex(0);
        line.push(b" ");
        line.push_hex(0x7f12_3456_789a);
        assert_eq!(
            line.as_bytes(),
            b"a 0 1234567890 18446744073709551615 -42 0x0000000000000000 0x00007f123456789a"
        );
    }

    #[test]
    fn text_cuts_what_does_not_fit() {
        let mut line = Line::new();
        for _ in 0..100 {
            line.push(b"0123456789");
        }
        line.push_u64(42);
        assert_eq!(line.as_bytes().len(), 256);
        assert!(line.as_bytes().starts_with(b"0123456789"));
    }

    #[test]
    fn writing_text_leaves_errno_alone() {
        set_errno(4242);
        Line::new().write();
        let mut line = Line::new();
        line.push(b"hakmem-core unit test: stderr line\n");
        line.write();
        assert_eq!(errno(), 4242);
    }

    #[test]
    fn counters_count_calls() {
        let before = os_counters();
        let p = map(page_size());
        // SAFETY: p was just mapped with that size.
        unsafe { unmap(p, page_size()) };
        let after = os_counters();
        assert!(after.mmap > before.mmap);
        assert!(after.munmap > before.munmap);
    }
}
