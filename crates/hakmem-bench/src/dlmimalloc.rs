//! mimalloc v2 and v3 built from source (`build.rs`): the two shared
//! libraries, embedded in this binary and written to the scratch folder for
//! `--preload`, and `DlMimalloc`, a `GlobalAlloc` over one of them loaded
//! with `dlopen` from an anonymous in-memory file (`memfd_create`), so that
//! the in-process comparator loads nothing from the file system at all.
//!
//! Why `dlopen`: the `mimalloc` crate (linked here statically, and with
//! `libmimalloc-sys` 0.1.49 that is mimalloc v3) builds one version per
//! binary; cargo unifies its `v2` feature across the build, so v2 and v3
//! cannot both be linked. `libmimalloc2.so` loaded with `RTLD_LOCAL` keeps
//! its symbols (its `malloc`/`free` overrides included) out of the global
//! scope: the process's own malloc stays glibc's, this binary exports no
//! `mi_*` symbol that could capture the library's internal references, and
//! the allocator is reached only through the function pointers below. The
//! cost over a direct call is one indirect (well-predicted) call per
//! operation, like calling any shared-library allocator.

use crate::scratch;
use std::alloc::{GlobalAlloc, Layout};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `libmimalloc2.so` as built by `build.rs`.
const LIBMIMALLOC2: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmimalloc2.so"));
/// `libmimalloc3.so` as built by `build.rs`.
const LIBMIMALLOC3: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libmimalloc3.so"));

/// A mimalloc major version this binary carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V2,
    V3,
}

impl Version {
    pub fn file_name(self) -> &'static str {
        match self {
            Version::V2 => "libmimalloc2.so",
            Version::V3 => "libmimalloc3.so",
        }
    }

    fn bytes(self) -> &'static [u8] {
        match self {
            Version::V2 => LIBMIMALLOC2,
            Version::V3 => LIBMIMALLOC3,
        }
    }

    /// The major version, as `mi_version() / 10000` reports it.
    pub fn major(self) -> c_int {
        match self {
            Version::V2 => 2,
            Version::V3 => 3,
        }
    }
}

/// The library of `version` in the scratch folder `dir`, written out if
/// missing, different or not trusted.
pub fn library(version: Version, dir: &Path) -> Result<PathBuf, String> {
    scratch::write_file(dir, version.file_name(), version.bytes())
}

type MallocAligned = unsafe extern "C" fn(size: usize, alignment: usize) -> *mut c_void;
type ReallocAligned = unsafe extern "C" fn(p: *mut c_void, new_size: usize, alignment: usize) -> *mut c_void;
type Free = unsafe extern "C" fn(p: *mut c_void);
type VersionFn = unsafe extern "C" fn() -> c_int;

/// mimalloc from a `dlopen`ed library, called the way the `mimalloc` crate's
/// `MiMalloc` calls the linked one (`mi_malloc_aligned`, `mi_zalloc_aligned`,
/// `mi_realloc_aligned`, `mi_free`), so the two differ only in the version.
///
/// Invariant: the pointers are those functions of one mimalloc library that
/// stays loaded for the rest of the process (it is never `dlclose`d).
pub struct DlMimalloc {
    malloc_aligned: MallocAligned,
    zalloc_aligned: MallocAligned,
    realloc_aligned: ReallocAligned,
    free: Free,
    /// `mi_version()`: major * 10000 + minor * 100 + patch.
    pub version: c_int,
}

impl DlMimalloc {
    /// Loads the embedded library of `version` from an anonymous in-memory
    /// file: nothing is written to, or loaded from, a path another process
    /// could change.
    ///
    /// The file descriptor stays open for the life of the process, like the
    /// library: `dlopen` recognises a library it has loaded by its path
    /// (`/proc/self/fd/N`) before it looks at the file, so a number used
    /// again for another version would give back the first one.
    pub fn load(version: Version) -> Result<DlMimalloc, String> {
        // SAFETY: the name is a NUL-terminated string; the flag is valid.
        let fd = unsafe { libc::memfd_create(c"hakmem-bench-mimalloc".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("memfd_create: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: fd was just created by memfd_create and is owned by nothing
        // else.
        let mut file = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        std::io::Write::write_all(&mut file, version.bytes())
            .map_err(|e| format!("cannot write {} to memory: {e}", version.file_name()))?;
        let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
        DlMimalloc::open(Path::new(&format!("/proc/self/fd/{fd}")), version.major())
    }

    /// Loads the library at `path` (`RTLD_NOW | RTLD_LOCAL`) and checks that
    /// it is mimalloc of major version `major`.
    pub fn open(path: &Path, major: c_int) -> Result<DlMimalloc, String> {
        let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| format!("{} has a NUL", path.display()))?;
        // SAFETY: c_path is a NUL-terminated string. Loading runs the
        // library's constructors: mimalloc's process init, which only sets up
        // its own state.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("cannot load {}: {}", path.display(), dl_error()));
        }
        let symbol = |name: &CStr| -> Result<*mut c_void, String> {
            // SAFETY: handle is a live handle from dlopen (never closed), name
            // is NUL-terminated.
            let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if address.is_null() {
                Err(format!(
                    "{} has no {}: not mimalloc",
                    path.display(),
                    name.to_string_lossy()
                ))
            } else {
                Ok(address)
            }
        };
        let (malloc_aligned, zalloc_aligned, realloc_aligned, free, version) = (
            symbol(c"mi_malloc_aligned")?,
            symbol(c"mi_zalloc_aligned")?,
            symbol(c"mi_realloc_aligned")?,
            symbol(c"mi_free")?,
            symbol(c"mi_version")?,
        );
        // SAFETY: (all five) each address is the mimalloc function of that
        // name, whose C signature (mimalloc.h, identical in v2 and v3) is the
        // pointer type it becomes; the library is never unloaded, so the
        // pointers stay valid.
        let dl = unsafe {
            DlMimalloc {
                malloc_aligned: std::mem::transmute::<*mut c_void, MallocAligned>(malloc_aligned),
                zalloc_aligned: std::mem::transmute::<*mut c_void, MallocAligned>(zalloc_aligned),
                realloc_aligned: std::mem::transmute::<*mut c_void, ReallocAligned>(realloc_aligned),
                free: std::mem::transmute::<*mut c_void, Free>(free),
                version: std::mem::transmute::<*mut c_void, VersionFn>(version)(),
            }
        };
        if dl.version / 10000 != major {
            return Err(format!(
                "{} is mimalloc {}, not version {major}",
                path.display(),
                version_string(dl.version)
            ));
        }
        Ok(dl)
    }
}

/// `20302` as `2.3.2`.
pub fn version_string(version: c_int) -> String {
    format!("{}.{}.{}", version / 10000, version / 100 % 100, version % 100)
}

fn dl_error() -> String {
    // SAFETY: dlerror takes no arguments; its result is null or a
    // NUL-terminated string valid until the next dl* call on this thread,
    // copied out at once.
    unsafe {
        let message: *const c_char = libc::dlerror();
        if message.is_null() {
            "unknown error".into()
        } else {
            CStr::from_ptr(message).to_string_lossy().into_owned()
        }
    }
}

// SAFETY: mimalloc's aligned functions satisfy the GlobalAlloc contract for
// any layout (a block of at least `size` bytes aligned to `align`, or null),
// mi_free and mi_realloc_aligned accept any block they returned, from any
// thread; the pointers are valid (invariant). Same calls as mimalloc::MiMalloc.
unsafe impl GlobalAlloc for DlMimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: see the impl; any size and power-of-two alignment is valid.
        unsafe { (self.malloc_aligned)(layout.size(), layout.align()).cast() }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in alloc.
        unsafe { (self.zalloc_aligned)(layout.size(), layout.align()).cast() }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: ptr came from this allocator (caller), i.e. from this library.
        unsafe { (self.free)(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: ptr came from this library with layout.align() (caller);
        // new_size is non-zero and valid with that alignment (caller).
        unsafe { (self.realloc_aligned)(ptr.cast(), new_size, layout.align()).cast() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_libraries_load_and_report_their_version() {
        let dir = tempfile::tempdir().unwrap();
        for version in [Version::V2, Version::V3] {
            let path = library(version, dir.path()).unwrap();
            assert_eq!(path.file_name().unwrap(), version.file_name());
            let dl = DlMimalloc::open(&path, version.major()).unwrap();
            assert_eq!(dl.version / 10000, version.major(), "{}", version_string(dl.version));
            // Loading it did not replace this process's malloc.
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name.
            let global_malloc = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"malloc".as_ptr()) };
            // SAFETY: as above.
            let global_mi = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mi_malloc".as_ptr()) };
            assert!(global_mi.is_null(), "mi_malloc is in the global scope");
            assert!(!global_malloc.is_null());
            // The other major version is refused.
            let other = if version == Version::V2 { 3 } else { 2 };
            let err = DlMimalloc::open(&path, other).err().unwrap();
            assert!(err.contains(&format!("not version {other}")), "{err}");
            // The same library from memory.
            let loaded = DlMimalloc::load(version).unwrap();
            assert_eq!(loaded.version / 10000, version.major());
        }
    }

    #[test]
    fn dl_mimalloc_allocates_zeroes_reallocates_and_frees() {
        let dl = DlMimalloc::load(Version::V2).unwrap();
        // SAFETY: valid non-zero layouts; every block is freed once, with dl.
        unsafe {
            let layout = Layout::from_size_align(100, 64).unwrap();
            let p = dl.alloc_zeroed(layout);
            assert!(!p.is_null() && (p as usize).is_multiple_of(64));
            assert!((0..100).all(|i| p.add(i).read() == 0));
            p.write(0xAB);
            let q = dl.realloc(p, layout, 100_000);
            assert!(!q.is_null() && (q as usize).is_multiple_of(64));
            assert_eq!(q.read(), 0xAB);
            dl.dealloc(q, Layout::from_size_align(100_000, 64).unwrap());
        }
    }

    #[test]
    fn a_library_that_is_not_mimalloc_is_refused() {
        let err = DlMimalloc::open(Path::new("libc.so.6"), 2).err().unwrap();
        assert!(err.contains("has no mi_malloc_aligned"), "{err}");
        let err = DlMimalloc::open(Path::new("/nonexistent/libmimalloc2.so"), 2)
            .err()
            .unwrap();
        assert!(err.contains("cannot load"), "{err}");
    }
}
