//! Statistics: counters and the report.
//!
//! Slow-path counters (OS calls, segments, pages, committed bytes and their
//! peak) are always on: they are relaxed atomics touched when a page or a
//! segment changes hands, never per allocation. Per-class allocation and
//! free counts sit on the fast path and exist only with the `stats` cargo
//! feature; without it `count_alloc`/`count_free` are empty and compile to
//! nothing. Per-class counts live in each heap (no atomics) and are added
//! to the global ones when the thread exits; `stats()` adds the calling
//! thread's own.
//!
//! "Committed" is memory hakmem holds mapped and not purged: a fresh
//! segment counts whole (as the kernel's commit accounting does), purged
//! pages stop counting until they are handed out again.

use crate::os::{self, Line, OsCounters, StackText};
use crate::small::class::CLASS_COUNT;
use crate::sync::{plain::AtomicUsize, Ordering};

/// Index of the large-block row in per-class tables (after the classes).
pub const LARGE_ROW: usize = CLASS_COUNT;
/// Index of the huge-block row in per-class tables.
pub const HUGE_ROW: usize = CLASS_COUNT + 1;
/// Rows of the per-class tables: every class, then large, then huge.
pub const ROWS: usize = CLASS_COUNT + 2;

static HEAPS_IN_USE: AtomicUsize = AtomicUsize::new(0);
static HEAPS_RETIRED: AtomicUsize = AtomicUsize::new(0);
static SEGMENTS_MAPPED: AtomicUsize = AtomicUsize::new(0);
static PAGES_IN_USE: AtomicUsize = AtomicUsize::new(0);
static HUGE_IN_USE: AtomicUsize = AtomicUsize::new(0);
static COMMITTED: AtomicUsize = AtomicUsize::new(0);
static PEAK_COMMITTED: AtomicUsize = AtomicUsize::new(0);
static HUGE_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static LARGE_ALLOCS: AtomicUsize = AtomicUsize::new(0);
static PURGE_PASSES: AtomicUsize = AtomicUsize::new(0);
#[cfg(feature = "stats")]
static CLASS_ALLOCS: [AtomicUsize; ROWS] = [const { AtomicUsize::new(0) }; ROWS];
#[cfg(feature = "stats")]
static CLASS_FREES: [AtomicUsize; ROWS] = [const { AtomicUsize::new(0) }; ROWS];

/// A snapshot of hakmem's counters.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    /// OS memory calls since start.
    pub os: OsCounters,
    /// Thread heaps in use (a thread's from its first allocation to its exit).
    pub heaps_in_use: usize,
    /// Heaps of exited threads kept whole for the next new thread.
    pub heaps_retired: usize,
    /// Normal segments mapped (owned, cached or abandoned).
    pub segments_mapped: usize,
    /// Empty segments in the cache.
    pub segments_cached: usize,
    /// Segments of exited threads waiting to be reclaimed.
    pub segments_abandoned: usize,
    /// Pages (spans) in use.
    pub pages_in_use: usize,
    /// Huge blocks in use.
    pub huge_in_use: usize,
    /// Large blocks allocated since start (slow path, always counted).
    pub large_allocs: usize,
    /// Huge blocks allocated since start.
    pub huge_allocs: usize,
    /// Global purge passes run since start (segment/purge.rs), forced ones
    /// (`collect(true)`, `malloc_trim`) among them.
    pub purge_passes: usize,
    /// Bytes mapped and not purged.
    pub committed_bytes: usize,
    /// Highest `committed_bytes` seen.
    pub peak_committed_bytes: usize,
    /// Whether the per-class counts below are kept (`stats` feature).
    pub per_class: bool,
    /// Allocations per class (then large, then huge); zeros without `stats`.
    pub allocs: [usize; ROWS],
    /// Frees by the owning thread's fast path per class; zeros without `stats`.
    pub frees: [usize; ROWS],
}

pub(crate) fn heap_retired(delta: isize) {
    HEAPS_RETIRED.fetch_add(delta as usize, Ordering::Relaxed);
}

pub(crate) fn heap_in_use(delta: isize) {
    HEAPS_IN_USE.fetch_add(delta as usize, Ordering::Relaxed);
}

pub(crate) fn segment_mapped(delta: isize) {
    SEGMENTS_MAPPED.fetch_add(delta as usize, Ordering::Relaxed);
}

pub(crate) fn page_in_use(delta: isize) {
    PAGES_IN_USE.fetch_add(delta as usize, Ordering::Relaxed);
}

pub(crate) fn huge_in_use(delta: isize) {
    HUGE_IN_USE.fetch_add(delta as usize, Ordering::Relaxed);
    if delta > 0 {
        HUGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) fn purge_pass() {
    PURGE_PASSES.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn large_alloc() {
    LARGE_ALLOCS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn committed(delta: isize) {
    let now = COMMITTED
        .fetch_add(delta as usize, Ordering::Relaxed)
        .wrapping_add(delta as usize);
    if delta > 0 {
        PEAK_COMMITTED.fetch_max(now, Ordering::Relaxed);
    }
}

/// Per-thread class counters (in the heap); empty without `stats`.
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct HeapCounts {
    #[cfg(feature = "stats")]
    allocs: [usize; ROWS],
    #[cfg(feature = "stats")]
    frees: [usize; ROWS],
}

impl HeapCounts {
    pub(crate) const ZERO: Self = Self {
        #[cfg(feature = "stats")]
        allocs: [0; ROWS],
        #[cfg(feature = "stats")]
        frees: [0; ROWS],
    };

    #[inline(always)]
    pub(crate) fn count_alloc(&mut self, _row: usize) {
        #[cfg(feature = "stats")]
        {
            self.allocs[_row] += 1;
        }
    }

    #[inline(always)]
    pub(crate) fn count_free(&mut self, _row: usize) {
        #[cfg(feature = "stats")]
        {
            self.frees[_row] += 1;
        }
    }

    /// Adds these counts to the global ones (thread exit) and clears them.
    pub(crate) fn flush(&mut self) {
        #[cfg(feature = "stats")]
        {
            for i in 0..ROWS {
                CLASS_ALLOCS[i].fetch_add(self.allocs[i], Ordering::Relaxed);
                CLASS_FREES[i].fetch_add(self.frees[i], Ordering::Relaxed);
            }
            *self = Self::ZERO;
        }
    }

    fn add_to(&self, _allocs: &mut [usize; ROWS], _frees: &mut [usize; ROWS]) {
        #[cfg(feature = "stats")]
        for i in 0..ROWS {
            _allocs[i] += self.allocs[i] + CLASS_ALLOCS[i].load(Ordering::Relaxed);
            _frees[i] += self.frees[i] + CLASS_FREES[i].load(Ordering::Relaxed);
        }
    }
}

/// The counters now (per-class counts: exited threads plus the caller's).
pub fn stats() -> Stats {
    let mut allocs = [0; ROWS];
    let mut frees = [0; ROWS];
    crate::thread::heap::own_counts().add_to(&mut allocs, &mut frees);
    Stats {
        os: os::os_counters(),
        heaps_in_use: HEAPS_IN_USE.load(Ordering::Relaxed),
        heaps_retired: HEAPS_RETIRED.load(Ordering::Relaxed),
        segments_mapped: SEGMENTS_MAPPED.load(Ordering::Relaxed),
        segments_cached: crate::segment::arena::cached_count(),
        segments_abandoned: crate::segment::arena::abandoned_count(),
        pages_in_use: PAGES_IN_USE.load(Ordering::Relaxed),
        huge_in_use: HUGE_IN_USE.load(Ordering::Relaxed),
        large_allocs: LARGE_ALLOCS.load(Ordering::Relaxed),
        huge_allocs: HUGE_ALLOCS.load(Ordering::Relaxed),
        purge_passes: PURGE_PASSES.load(Ordering::Relaxed),
        committed_bytes: COMMITTED.load(Ordering::Relaxed),
        peak_committed_bytes: PEAK_COMMITTED.load(Ordering::Relaxed),
        per_class: cfg!(feature = "stats"),
        allocs,
        frees,
    }
}

/// Prints the report (a table) to stderr, without allocating.
pub fn print_stats() {
    let s = stats();
    let line = |parts: &[(&str, u64)]| {
        let mut w = Line::new();
        w.push(b"hakmem:");
        for (name, value) in parts {
            w.push(b" ");
            w.push(name.as_bytes());
            w.push(b"=");
            w.push_u64(*value);
        }
        w.push(b"\n");
        w.write();
    };
    line(&[
        ("committed_kib", (s.committed_bytes >> 10) as u64),
        ("peak_committed_kib", (s.peak_committed_bytes >> 10) as u64),
    ]);
    line(&[
        ("heaps_in_use", s.heaps_in_use as u64),
        ("heaps_retired", s.heaps_retired as u64),
        ("segments_mapped", s.segments_mapped as u64),
        ("cached", s.segments_cached as u64),
        ("abandoned", s.segments_abandoned as u64),
        ("pages_in_use", s.pages_in_use as u64),
        ("huge_in_use", s.huge_in_use as u64),
    ]);
    line(&[
        ("large_allocs", s.large_allocs as u64),
        ("huge_allocs", s.huge_allocs as u64),
        ("purge_passes", s.purge_passes as u64),
    ]);
    line(&[
        ("mmap", s.os.mmap as u64),
        ("munmap", s.os.munmap as u64),
        ("madvise", s.os.madvise as u64),
        ("mremap", s.os.mremap as u64),
        ("failed", s.os.failed as u64),
        ("failed_purges", s.os.failed_purges as u64),
    ]);
    print_policy();
    let p = crate::profile::profile_stats();
    if p.mapped_bytes > 0 {
        line(&[
            ("profile_live", p.live_samples as u64),
            ("profile_stacks", p.stacks as u64),
            ("profile_dropped", p.dropped as u64),
            ("profile_kib", (p.mapped_bytes >> 10) as u64),
            ("profile_walks", p.walks as u64),
            ("profile_libgcc_walks", p.libgcc_walks as u64),
        ]);
    }
    if s.per_class {
        os::write_stderr(b"hakmem: class block_size allocs frees\n");
        for row in 0..ROWS {
            if s.allocs[row] == 0 && s.frees[row] == 0 {
                continue;
            }
            let mut w = Line::new();
            w.push(b"hakmem: ");
            match row {
                LARGE_ROW => w.push(b"large - "),
                HUGE_ROW => w.push(b"huge - "),
                _ => {
                    w.push_u64(row as u64);
                    w.push(b" ");
                    w.push_u64(crate::small::class::BLOCK_SIZE[row] as u64);
                    w.push(b" ");
                }
            }
            w.push_u64(s.allocs[row] as u64);
            w.push(b" ");
            w.push_u64(s.frees[row] as u64);
            w.push(b"\n");
            w.write();
        }
    }
}

/// The policy's line of the report, and one line per remembered decision.
fn print_policy() {
    let p = crate::policy::report();
    let mut w = Line::new();
    w.push(if p.adaptive {
        b"hakmem: policy=adaptive purge_delay_ms="
    } else {
        b"hakmem: policy=fixed purge_delay_ms="
    });
    w.push_i64(p.purge_delay_ms);
    w.push(b" huge_cache_mib=");
    w.push_u64((p.huge_cache_cap >> 20) as u64);
    w.push(b" epochs=");
    w.push_u64(p.epochs);
    w.push(b" decisions=");
    w.push_u64(p.decisions as u64);
    w.push(b" frozen=");
    w.push_u64(p.frozen as u64);
    w.push(b"\n");
    w.write();
    for &(at, decision) in p.log.iter().take(p.decisions.min(crate::policy::LOG_LEN)) {
        let mut w = Line::new();
        w.push(b"hakmem: policy at_ms=");
        w.push_u64(at);
        match decision {
            crate::policy::Decision::Delay(old, new) => {
                w.push(b" purge_delay_ms ");
                w.push_u64(old);
                w.push(b" -> ");
                w.push_u64(new);
            }
            crate::policy::Decision::HugeCap(old, new) => {
                w.push(b" huge_cache_mib ");
                w.push_u64((old >> 20) as u64);
                w.push(b" -> ");
                w.push_u64((new >> 20) as u64);
            }
            crate::policy::Decision::Freeze => w.push(b" freeze"),
            crate::policy::Decision::Relearn => w.push(b" relearn"),
        }
        w.push(b"\n");
        w.write();
    }
}

/// Writes the counters as one JSON object into `out`; returns the bytes
/// written, or the bytes needed when `out` is too small (nothing usable is
/// written then). Allocates nothing.
pub fn stats_json(out: &mut [u8]) -> usize {
    let s = stats();
    let mut w = StackText::<4096>::new();
    let p = crate::policy::report();
    let fields: [(&str, usize); 24] = [
        ("committed_bytes", s.committed_bytes),
        ("peak_committed_bytes", s.peak_committed_bytes),
        ("heaps_in_use", s.heaps_in_use),
        ("heaps_retired", s.heaps_retired),
        ("segments_mapped", s.segments_mapped),
        ("segments_cached", s.segments_cached),
        ("segments_abandoned", s.segments_abandoned),
        ("pages_in_use", s.pages_in_use),
        ("huge_in_use", s.huge_in_use),
        ("large_allocs", s.large_allocs),
        ("huge_allocs", s.huge_allocs),
        ("purge_passes", s.purge_passes),
        ("mmap", s.os.mmap),
        ("munmap", s.os.munmap),
        ("madvise", s.os.madvise),
        ("mremap", s.os.mremap),
        ("os_failed", s.os.failed),
        ("os_failed_purges", s.os.failed_purges),
        ("per_class", s.per_class as usize),
        ("policy_adaptive", p.adaptive as usize),
        ("huge_cache_cap", p.huge_cache_cap),
        ("policy_epochs", p.epochs as usize),
        ("policy_decisions", p.decisions),
        ("policy_frozen", p.frozen as usize),
    ];
    w.push(b"{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            w.push(b",");
        }
        w.push(b"\"");
        w.push(name.as_bytes());
        w.push(b"\":");
        w.push_u64(*value as u64);
    }
    // Signed: -1 is "never".
    w.push(b",\"purge_delay_ms\":");
    w.push_i64(p.purge_delay_ms);
    for (name, table) in [("allocs", &s.allocs), ("frees", &s.frees)] {
        w.push(b",\"");
        w.push(name.as_bytes());
        w.push(b"\":[");
        for (i, v) in table.iter().enumerate() {
            if i > 0 {
                w.push(b",");
            }
            w.push_u64(*v as u64);
        }
        w.push(b"]");
    }
    w.push(b"}");
    let text = w.as_bytes();
    if text.len() <= out.len() {
        out[..text.len()].copy_from_slice(text);
    }
    text.len()
}

/// `atexit` hook for `HAKMEM_STATS=1`.
pub(crate) extern "C" fn print_at_exit() {
    print_stats();
}
