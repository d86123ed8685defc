//! Linux (glibc or musl): the primitives `os/mod.rs` builds on, each a thin
//! call into libc. They neither count calls nor save `errno`: `os/mod.rs`
//! does both around them. Another system provides the same functions
//! (the list is in `os/mod.rs`).

use core::ffi::{c_char, c_void, CStr};
use core::ptr;

// Links the C library itself. The `libc` crate asks for `-lc` only when
// its `std` feature is off (with it, it counts on std's link line); a
// program or library with no std in it (libhakmem.so) then got no `-lc`
// at all whenever another package of the same build turned that feature
// on (`cargo build --release` of the workspace: hakmem-bench's progress
// bar does). Its C symbols were left unversioned and `atexit` and
// `pthread_atfork`, which glibc keeps in `libc_nonshared.a` rather than
// exporting, undefined: "symbol lookup error: undefined symbol: atexit"
// at the first allocation under LD_PRELOAD. (Not with `crt-static`, where
// the C library is linked statically, as the `libc` crate does then.)
#[cfg_attr(not(target_feature = "crt-static"), link(name = "c"))]
extern "C" {}

pub(crate) use libc::{EEXIST, EINVAL, ENOMEM};

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    // SAFETY: __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(value: i32) {
    // SAFETY: __errno_location always returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = value }
}

/// The size of the pages `mmap`, `madvise` and `mprotect` work in.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

/// Maps `size` bytes of fresh, zeroed, read-write memory anywhere, or null.
///
/// Without `MAP_NORESERVE`: under the kernel's default overcommit
/// heuristic (`vm.overcommit_memory=0`) that flag skips its one check, so
/// a request larger than memory and swap together (a size read from
/// corrupt input, a program that tries a big buffer and halves it on
/// failure) was handed out, where glibc returns null and `ENOMEM`, and
/// the program was killed when it touched it. Without the flag such a
/// mapping is refused as glibc's is. (Under strict accounting the kernel
/// ignores the flag; with overcommit always allowed nothing is refused.)
pub(crate) fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address of the kernel's
    // choosing touches no existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Linux's `MAP_FIXED_NOREPLACE` (4.17+): map exactly at the hint or fail
/// with `EEXIST`, never over an existing mapping. Older kernels treat it as
/// a plain hint, which the caller detects.
const MAP_FIXED_NOREPLACE: libc::c_int = 0x10_0000;

/// Maps `size` bytes of fresh, zeroed, read-write memory at `addr` if that
/// range is free, never over an existing mapping. Returns where the memory
/// was mapped — `addr`, or elsewhere on a kernel that takes the flag for a
/// hint (the caller unmaps it) — or null. Without `MAP_NORESERVE`, as
/// `map`.
pub(crate) fn map_at(addr: usize, size: usize) -> *mut u8 {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; a
    // kernel that ignores it places the mapping elsewhere (see above).
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p.cast()
    }
}

/// Unmaps `[p, p + size)`; false when the kernel refuses (the range then
/// stays mapped).
///
/// # Safety
/// The range must be mapped by `map`/`map_at` and no longer used.
pub(crate) unsafe fn unmap(p: *mut u8, size: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::munmap(p.cast(), size) == 0 }
}

/// Gives the pages of `[p, p + size)` back (`MADV_DONTNEED`): the range
/// stays mapped and reads as zero when touched again. False when the
/// kernel refuses (locked pages: `EINVAL`; a seccomp filter: `EPERM`):
/// the bytes are then untouched.
///
/// # Safety
/// The range must be mapped and hold no live data.
pub(crate) unsafe fn purge(p: *mut u8, size: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::madvise(p.cast(), size, libc::MADV_DONTNEED) == 0 }
}

/// Whether every page of `[p, p + size)` is mapped (by anyone):
/// `madvise(MADV_NORMAL)`, which changes nothing on a mapped range and
/// fails with `ENOMEM` where part of it is not.
#[cfg_attr(feature = "secure", allow(dead_code))]
pub(crate) fn is_mapped(p: *mut u8, size: usize) -> bool {
    // SAFETY: MADV_NORMAL is the default advice: it changes nothing.
    unsafe { libc::madvise(p.cast(), size, libc::MADV_NORMAL) == 0 }
}

/// Asks for (or against) transparent huge pages on a mapping of ours.
/// Returns whether the kernel took the advice.
pub(crate) fn advise_huge_pages(p: *mut u8, size: usize, on: bool) -> bool {
    let advice = if on { libc::MADV_HUGEPAGE } else { libc::MADV_NOHUGEPAGE };
    // SAFETY: advice only; the range is a mapping of ours.
    unsafe { libc::madvise(p.cast(), size, advice) == 0 }
}

#[cfg_attr(feature = "secure", allow(dead_code))]
/// Moves/resizes mapping `[p, p + old)` to `[to, to + new)`, replacing the
/// mapping there, without copying (`mremap` with `MREMAP_FIXED`).
///
/// # Safety
/// Both ranges must be mappings of ours; `[p, p + old)` must not be used by
/// anyone else during the call.
pub(crate) unsafe fn remap_to(p: *mut u8, old: usize, new: usize, to: *mut u8) -> bool {
    // SAFETY: the caller guarantees both ranges are ours; MREMAP_FIXED
    // replaces the mapping at `to` atomically.
    let r = unsafe {
        libc::mremap(
            p.cast(),
            old,
            new,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut c_void,
        )
    };
    r != libc::MAP_FAILED
}

#[cfg_attr(feature = "secure", allow(dead_code))]
/// Resizes mapping `[p, p + old)` in place to `new` bytes.
///
/// # Safety
/// `[p, p + old)` must be a mapping of ours; when shrinking, the tail must
/// hold no live data.
pub(crate) unsafe fn remap_in_place(p: *mut u8, old: usize, new: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours; without MAYMOVE the
    // mapping either resizes where it is or fails.
    unsafe { libc::mremap(p.cast(), old, new, 0) != libc::MAP_FAILED }
}

/// Makes `[p, p + size)` inaccessible.
///
/// # Safety
/// The range must be part of a mapping of ours and hold nothing handed
/// out.
/// Returns false when the kernel refuses (out of memory for its mapping
/// records, past `vm.max_map_count`).
#[cfg_attr(not(feature = "secure"), allow(dead_code))]
pub(crate) unsafe fn protect_none(p: *mut u8, size: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::mprotect(p.cast(), size, libc::PROT_NONE) == 0 }
}

/// Makes `[p, p + size)` readable and writable again; false when the
/// kernel refuses (out of memory for its mapping records).
///
/// # Safety
/// The range must be part of a mapping of ours that no one else uses.
#[cfg(feature = "secure")]
pub(crate) unsafe fn protect_rw(p: *mut u8, size: usize) -> bool {
    // SAFETY: the caller guarantees the range is ours and unused.
    unsafe { libc::mprotect(p.cast(), size, libc::PROT_READ | libc::PROT_WRITE) == 0 }
}

/// Random bits from the kernel if its pool is ready (never blocks), or None.
pub(crate) fn random_nonblocking() -> Option<usize> {
    let mut v: usize = 0;
    // SAFETY: v is a valid buffer of its size.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), core::mem::size_of::<usize>(), libc::GRND_NONBLOCK) };
    (n == core::mem::size_of::<usize>() as isize).then_some(v)
}

/// Random bits from the kernel, or None.
#[cfg(feature = "secure")]
pub(crate) fn random_usize() -> Option<usize> {
    let mut v: usize = 0;
    // SAFETY: v is a valid buffer of its size.
    let n = unsafe { libc::getrandom((&raw mut v).cast(), core::mem::size_of::<usize>(), 0) };
    (n == core::mem::size_of::<usize>() as isize).then_some(v)
}

/// Gives the CPU to another thread.
pub(crate) fn yield_now() {
    // SAFETY: sched_yield has no preconditions.
    unsafe {
        libc::sched_yield();
    }
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

/// Opens `path` (NUL-terminated) for writing, created (mode 0644) or
/// truncated: the descriptor, or the `errno` of the failure.
pub(crate) fn create_file(path: &core::ffi::CStr) -> Result<i32, i32> {
    // SAFETY: path is NUL-terminated.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o644 as libc::c_uint,
        )
    };
    if fd < 0 {
        Err(errno())
    } else {
        Ok(fd)
    }
}

/// How a profile may replace file `path` (NUL-terminated): `Some(mode)`
/// when it names nothing (`mode` 0o644) or a regular file of the calling
/// user with one link (`mode` its permission bits), so that a new file
/// renamed over it loses nothing; `None` for anything else (a FIFO, a
/// device, a directory, a symbolic link, another user's file, a file with
/// hard links), which is written in place.
pub(crate) fn replaceable(path: &core::ffi::CStr) -> Option<u32> {
    // SAFETY: `stat` is plain data, valid zeroed.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: path is NUL-terminated; st is ours for the call.
    if unsafe { libc::lstat(path.as_ptr(), &mut st) } < 0 {
        return (errno() == libc::ENOENT).then_some(0o644);
    }
    // SAFETY: geteuid has no preconditions.
    let mine = st.st_uid == unsafe { libc::geteuid() };
    (st.st_mode & libc::S_IFMT == libc::S_IFREG && mine && st.st_nlink == 1).then_some(st.st_mode & 0o7777)
}

/// Creates file `path` (NUL-terminated) for writing with permission bits
/// `mode` exactly (the umask aside), failing if anything is there already
/// (a symbolic link included): the descriptor, or the `errno` of the
/// failure.
pub(crate) fn create_new_file(path: &core::ffi::CStr, mode: u32) -> Result<i32, i32> {
    // SAFETY: path is NUL-terminated.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: fd was opened above.
    if unsafe { libc::fchmod(fd, mode as libc::mode_t) } < 0 {
        let e = errno();
        // SAFETY: as above; the file is removed by the caller.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(fd)
}

/// Renames `from` to `to` (both NUL-terminated), replacing `to`: the
/// `errno` of a failure.
pub(crate) fn rename(from: &core::ffi::CStr, to: &core::ffi::CStr) -> Result<(), i32> {
    // SAFETY: both are NUL-terminated.
    if unsafe { libc::rename(from.as_ptr(), to.as_ptr()) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Removes file `path` (NUL-terminated), if it can.
pub(crate) fn remove_file(path: &core::ffi::CStr) {
    // SAFETY: path is NUL-terminated.
    unsafe { libc::unlink(path.as_ptr()) };
}

/// Writes all of `bytes` to `fd` (retrying short writes and `EINTR`).
pub(crate) fn write_all(fd: i32, mut bytes: &[u8]) -> Result<(), i32> {
    while !bytes.is_empty() {
        // SAFETY: bytes is a valid byte slice for its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(errno());
        }
        if n == 0 {
            return Err(libc::EIO);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Closes `fd`: the `errno` of a failure (a write the kernel reports late).
pub(crate) fn close(fd: i32) -> Result<(), i32> {
    // SAFETY: closing a descriptor this module opened.
    if unsafe { libc::close(fd) } < 0 {
        Err(errno())
    } else {
        Ok(())
    }
}

/// Reads the start of file `path` into `buf`: the bytes read (0 when it
/// cannot be opened).
pub(crate) fn read_file(path: &core::ffi::CStr, buf: &mut [u8]) -> usize {
    // SAFETY: path is NUL-terminated; each read stays within buf.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let mut len = 0;
        while len < buf.len() {
            let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            len += n as usize;
        }
        libc::close(fd);
        len
    }
}

/// Maps file `path` read-only: its address and size, or None (not a
/// regular file, empty, or not readable).
pub(crate) fn map_file(path: &core::ffi::CStr) -> Option<(*const u8, usize)> {
    // SAFETY: path is NUL-terminated; st is a valid stat buffer; the
    // mapping is a private read-only view of the whole file.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut st: libc::stat = core::mem::zeroed();
        let size = if libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG {
            st.st_size as usize
        } else {
            0
        };
        let p = if size > 0 {
            libc::mmap(ptr::null_mut(), size, libc::PROT_READ, libc::MAP_PRIVATE, fd, 0)
        } else {
            libc::MAP_FAILED
        };
        libc::close(fd);
        (p != libc::MAP_FAILED).then_some((p as *const u8, size))
    }
}

/// Unmaps a file mapped by `map_file`.
///
/// # Safety
/// `(p, size)` must come from `map_file` and no longer be used.
pub(crate) unsafe fn unmap_file(p: *const u8, size: usize) {
    // SAFETY: the caller's guarantee.
    unsafe { libc::munmap(p as *mut c_void, size) };
}

/// Nanoseconds since the Unix epoch (the real-time clock).
pub(crate) fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One `write` of `bytes` to stderr: the bytes written, or a negative
/// number on error.
pub(crate) fn write_stderr(bytes: &[u8]) -> isize {
    // SAFETY: bytes is a valid byte slice for its length.
    unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) }
}

/// Ends the process with SIGABRT, without unwinding.
pub(crate) fn abort() -> ! {
    // SAFETY: abort takes no arguments and does not return.
    unsafe { libc::abort() }
}

extern "C" {
    static environ: *const *const c_char;
}

/// Calls `f` with every `NAME=value` entry of the environment, without
/// allocating (libc's `environ`; `std::env` allocates).
pub(crate) fn for_each_env(mut f: impl FnMut(&[u8])) {
    // SAFETY: environ is libc's NULL-terminated array of C strings; it is
    // read before any thread of ours could modify the environment.
    unsafe {
        let mut e = environ;
        while !e.is_null() && !(*e).is_null() {
            f(CStr::from_ptr(*e).to_bytes());
            e = e.add(1);
        }
    }
}

/// A thread-specific data key (a pthread key).
pub(crate) type ThreadKey = libc::pthread_key_t;

/// Creates a key whose `destructor` runs at a thread's exit for a value
/// that is not null (glibc: the first keys need no allocation).
pub(crate) fn thread_key_create(destructor: unsafe extern "C" fn(*mut c_void)) -> Option<ThreadKey> {
    let mut key: ThreadKey = 0;
    // SAFETY: key is a valid place to write; the destructor is valid for
    // the life of the process.
    (unsafe { libc::pthread_key_create(&mut key, Some(destructor)) } == 0).then_some(key)
}

/// Deletes a key no thread has a value for.
pub(crate) fn thread_key_delete(key: ThreadKey) {
    // SAFETY: the caller created the key and set no value for it.
    unsafe { libc::pthread_key_delete(key) };
}

/// The calling thread's value for `key` (null when it set none).
#[allow(dead_code)] // the portable thread binding's
#[inline]
pub(crate) fn thread_key_get(key: ThreadKey) -> *mut c_void {
    // SAFETY: key was created by `thread_key_create`.
    unsafe { libc::pthread_getspecific(key) }
}

/// Sets the calling thread's value for `key`. glibc allocates (`calloc`) a
/// second-level block the first time a thread sets a key past the 32nd.
pub(crate) fn thread_key_set(key: ThreadKey, value: *mut c_void) -> bool {
    // SAFETY: key was created by `thread_key_create`.
    unsafe { libc::pthread_setspecific(key, value) == 0 }
}

/// Whether the kernel refuses mappings by its overcommit heuristic
/// (`vm.overcommit_memory` is 0, the default): one larger than memory and
/// swap together is refused there whatever else is mapped.
///
/// Read with the system calls themselves, not libc's `open` and `read`:
/// those are cancellation points, and this runs inside an allocation that
/// the OS refused (glibc's malloc reads the file with its no-cancel
/// variants for the same reason).
pub(crate) fn overcommit_heuristic() -> bool {
    let path = c"/proc/sys/vm/overcommit_memory";
    // SAFETY: path is NUL-terminated; the buffer is valid for its length;
    // the descriptor is ours to close.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        let mut buf = [0u8; 8];
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        libc::syscall(libc::SYS_close, fd);
        n >= 1 && buf[0] == b'0'
    }
}

/// Physical memory and swap together, in bytes (`sysinfo`); None when the
/// kernel does not say.
pub(crate) fn memory_and_swap() -> Option<usize> {
    // SAFETY: sysinfo only writes the struct it is given; all-zero bytes
    // are a valid `sysinfo` value.
    let mut info: libc::sysinfo = unsafe { core::mem::zeroed() };
    // SAFETY: a valid, writable struct.
    if unsafe { libc::sysinfo(&mut info) } != 0 {
        return None;
    }
    let unit = (info.mem_unit as usize).max(1);
    (info.totalram as usize)
        .checked_add(info.totalswap as usize)?
        .checked_mul(unit)
}

/// A number that identifies the calling thread among the living ones.
#[allow(dead_code)] // the portable thread binding's
pub(crate) fn thread_id() -> usize {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() as usize }
}

/// Keeps the shared object holding `code` loaded for good: a `dlclose`
/// of it no longer unmaps it (`dlopen` with `RTLD_NOLOAD | RTLD_NODELETE`
/// on the object `dladdr` names). Nothing for the main program or a
/// static one. Returns whether an object was pinned.
pub(crate) fn keep_loaded(code: *const c_void) -> bool {
    // SAFETY: Dl_info is plain pointers, for which all zeros is valid.
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; info is a valid place
    // to write.
    if unsafe { libc::dladdr(code, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // The main program's headers lie at the start of its image: never
    // unloaded, nothing to do (and its name may not open).
    // SAFETY: getauxval has no preconditions.
    let program_headers = unsafe { libc::getauxval(libc::AT_PHDR) } as usize;
    let base = info.dli_fbase as usize;
    if program_headers >= base && program_headers - base < 64 * 1024 {
        return false;
    }
    // SAFETY: dli_fname names an object that is loaded (it holds `code`);
    // RTLD_NOLOAD never loads anything, it only marks the object.
    let handle = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE) };
    !handle.is_null()
}

/// The kernel's id of the calling process (`getpid`).
pub(crate) fn process_id() -> i32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// The kernel's id of the calling thread (`gettid`).
pub(crate) fn kernel_thread_id() -> i32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Whether thread `tid` of process `pid` still exists: `tgkill` with
/// signal 0 (no signal is sent) fails with `ESRCH` only when it does not.
pub(crate) fn thread_exists(pid: i32, tid: i32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, 0) };
    r == 0 || errno() != libc::ESRCH
}

/// Registers `fork` handlers.
pub(crate) fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: the handlers are valid for the life of the process.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// Registers a function to run at process exit.
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: f is valid for the life of the process.
    unsafe { libc::atexit(f) };
}
