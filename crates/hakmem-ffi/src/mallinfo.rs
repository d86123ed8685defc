//! glibc's heap statistics — `mallinfo2`, `mallinfo`, `malloc_stats`,
//! `malloc_info` — answering with hakmem's counters
//! (`hakmem_core::stats()`). Without these, a preloaded program asking
//! would get glibc's answer about its own arena, which hakmem leaves
//! empty, and a fully static program calling one would pull glibc's
//! `malloc.o` in and fail to link.
//!
//! hakmem counts memory by pages and segments, not by block: a byte count
//! per allocation would cost on the fast path. So "in use" here is what
//! hakmem holds committed from the OS (segments and huge mappings, minus
//! purged pages, the caches included): an upper bound of what the program
//! has allocated, which falls when free memory is purged (after
//! `HAKMEM_PURGE_DELAY`, or at once with `malloc_trim(0)`). Fields with no
//! hakmem counterpart are 0. The mapping, field by field, is in
//! crates/hakmem-ffi/README.md.
//!
//! Nothing here allocates; `malloc_info` writes through stdio, which may.

use core::ffi::{c_int, c_void};
use hakmem_core::Line;

/// glibc's `struct mallinfo2` (`<malloc.h>`, glibc >= 2.33).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo2 {
    /// glibc: non-mmapped space from the system. hakmem: bytes committed.
    pub arena: usize,
    /// glibc: free chunks. hakmem: empty segments cached for reuse.
    pub ordblks: usize,
    /// glibc: fastbin blocks. hakmem: 0.
    pub smblks: usize,
    /// glibc: mmapped regions. hakmem: huge blocks (own mappings) in use.
    pub hblks: usize,
    /// glibc: bytes in mmapped regions. hakmem: 0 (huge blocks are counted
    /// in `arena`, like everything else hakmem maps).
    pub hblkhd: usize,
    /// glibc: always 0.
    pub usmblks: usize,
    /// glibc: bytes in free fastbin blocks. hakmem: 0.
    pub fsmblks: usize,
    /// glibc: bytes allocated. hakmem: bytes committed (an upper bound).
    pub uordblks: usize,
    /// glibc: bytes free. hakmem: 0 (not counted apart from `uordblks`).
    pub fordblks: usize,
    /// glibc: releasable top of the heap. hakmem: 0 (no top chunk).
    pub keepcost: usize,
}

/// glibc's legacy `struct mallinfo`: the same fields as `int`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mallinfo {
    pub arena: c_int,
    pub ordblks: c_int,
    pub smblks: c_int,
    pub hblks: c_int,
    pub hblkhd: c_int,
    pub usmblks: c_int,
    pub fsmblks: c_int,
    pub uordblks: c_int,
    pub fordblks: c_int,
    pub keepcost: c_int,
}

impl Mallinfo2 {
    /// hakmem's counters now, as `mallinfo2` reports them.
    fn now() -> Self {
        let s = hakmem_core::stats();
        Self {
            arena: s.committed_bytes,
            ordblks: s.segments_cached,
            hblks: s.huge_in_use,
            uordblks: s.committed_bytes,
            ..Self::default()
        }
    }
}

/// `mallinfo2()`: hakmem's heap in glibc's structure (see [`Mallinfo2`]
/// for what each field holds).
#[no_mangle]
pub extern "C" fn mallinfo2() -> Mallinfo2 {
    Mallinfo2::now()
}

/// `mallinfo()`: [`mallinfo2`] with each field cut to `int`, as glibc does
/// (values of 2 GiB and more wrap; that is why glibc added `mallinfo2`).
#[no_mangle]
pub extern "C" fn mallinfo() -> Mallinfo {
    let m = Mallinfo2::now();
    // Truncation is glibc's behaviour for this legacy structure.
    let cut = |v: usize| v as c_int;
    Mallinfo {
        arena: cut(m.arena),
        ordblks: cut(m.ordblks),
        smblks: cut(m.smblks),
        hblks: cut(m.hblks),
        hblkhd: cut(m.hblkhd),
        usmblks: cut(m.usmblks),
        fsmblks: cut(m.fsmblks),
        uordblks: cut(m.uordblks),
        fordblks: cut(m.fordblks),
        keepcost: cut(m.keepcost),
    }
}

/// `malloc_stats()`: prints hakmem's statistics report to stderr (the
/// `hakmem:` lines of `hakmem_stats_print`, docs/CONFIG.md) instead of
/// glibc's per-arena summary.
#[no_mangle]
pub extern "C" fn malloc_stats() {
    hakmem_core::print_stats();
}

/// `malloc_info(options, fp)`: writes hakmem's statistics to `fp` as
/// glibc's XML (`<malloc version="1">`, one `<heap>`, the totals), with
/// hakmem's numbers, plus a `<hakmem>` element holding
/// `hakmem_stats_json`'s object. Returns 0; `EINVAL` (as a return value,
/// glibc's convention) when `options` is not 0 or `fp` is `NULL`.
///
/// # Safety
/// `fp` must be `NULL` or an open stdio stream.
#[no_mangle]
pub unsafe extern "C" fn malloc_info(options: c_int, fp: *mut libc::FILE) -> c_int {
    if options != 0 || fp.is_null() {
        return libc::EINVAL;
    }
    let s = hakmem_core::stats();
    let mut out = XmlWriter { fp };
    out.line(&[Text(b"<malloc version=\"1\">")]);
    out.line(&[Text(b"<heap nr=\"0\">")]);
    // glibc lists its free chunks by size here; hakmem has no such list.
    out.line(&[Text(b"<sizes>")]);
    out.line(&[Text(b"</sizes>")]);
    out.free_totals();
    out.system(&s);
    out.line(&[Text(b"</heap>")]);
    out.free_totals();
    out.line(&[
        Text(b"<total type=\"mmap\" count=\""),
        Number(s.huge_in_use),
        Text(b"\" size=\"0\"/>"),
    ]);
    out.system(&s);
    out.line(&[
        Text(b"<hakmem version=\""),
        Text(env!("CARGO_PKG_VERSION").as_bytes()),
        Text(b"\" format=\"json\">"),
    ]);
    out.json();
    out.line(&[Text(b"</hakmem>")]);
    out.line(&[Text(b"</malloc>")]);
    0
}

/// A piece of a `malloc_info` line.
enum Piece<'a> {
    Text(&'a [u8]),
    Number(usize),
}
use Piece::{Number, Text};

/// Writes `malloc_info`'s lines to a stdio stream (errors ignored, as in
/// glibc).
struct XmlWriter {
    fp: *mut libc::FILE,
}

impl XmlWriter {
    fn write(&mut self, bytes: &[u8]) {
        // SAFETY: malloc_info's caller guarantees fp is an open stream;
        // bytes is valid for its length.
        unsafe { libc::fwrite(bytes.as_ptr().cast::<c_void>(), 1, bytes.len(), self.fp) };
    }

    /// One line from its pieces (each line fits `Line`'s buffer).
    fn line(&mut self, pieces: &[Piece<'_>]) {
        let mut line = Line::new();
        for piece in pieces {
            match piece {
                Text(bytes) => line.push(bytes),
                Number(value) => line.push_usize(*value),
            }
        }
        line.push(b"\n");
        self.write(line.as_bytes());
    }

    /// glibc's counts of free chunks: hakmem keeps none.
    fn free_totals(&mut self) {
        self.line(&[Text(b"<total type=\"fast\" count=\"0\" size=\"0\"/>")]);
        self.line(&[Text(b"<total type=\"rest\" count=\"0\" size=\"0\"/>")]);
    }

    /// Memory from the system: committed now and at its peak.
    fn system(&mut self, s: &hakmem_core::Stats) {
        self.line(&[
            Text(b"<system type=\"current\" size=\""),
            Number(s.committed_bytes),
            Text(b"\"/>"),
        ]);
        self.line(&[
            Text(b"<system type=\"max\" size=\""),
            Number(s.peak_committed_bytes),
            Text(b"\"/>"),
        ]);
        self.line(&[
            Text(b"<aspace type=\"total\" size=\""),
            Number(s.committed_bytes),
            Text(b"\"/>"),
        ]);
        self.line(&[
            Text(b"<aspace type=\"mprotect\" size=\""),
            Number(s.committed_bytes),
            Text(b"\"/>"),
        ]);
    }

    /// `hakmem_stats_json`'s object on a line of its own (JSON has no `<`
    /// or `&`, so it is valid XML text as it is).
    fn json(&mut self) {
        // hakmem-core formats the object in a 4 KiB buffer of its own.
        let mut buf = [0u8; 4096];
        let len = hakmem_core::stats_json(&mut buf);
        if let Some(text) = buf.get(..len) {
            self.write(text);
            self.write(b"\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mallinfo2_counts_what_hakmem_commits() {
        let p = hakmem_core::malloc(10 << 20);
        assert!(!p.is_null());
        let during = mallinfo2();
        assert!(during.uordblks >= 10 << 20, "{during:?}");
        assert!(during.arena >= during.uordblks);
        // The block is a huge one (its own mapping).
        assert!(during.hblks >= 1);
        let legacy = mallinfo();
        assert_eq!(legacy.hblks as usize, during.hblks);
        // SAFETY: p is a live hakmem block.
        unsafe { hakmem_core::free(p) };
    }

    #[test]
    fn malloc_info_refuses_options_and_null() {
        // SAFETY: NULL is handled before any use.
        assert_eq!(unsafe { malloc_info(1, core::ptr::null_mut()) }, libc::EINVAL);
        // SAFETY: as above.
        assert_eq!(unsafe { malloc_info(0, core::ptr::null_mut()) }, libc::EINVAL);
    }
}
