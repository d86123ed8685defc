//! The sampled heap profiler: which code holds the memory.
//!
//! **Sampling** is a Poisson process over the bytes a heap hands out, with
//! a mean interval `rate` (512 KiB by default, jemalloc's): each thread heap
//! counts down the bytes left to its next sample, drawn from an exponential
//! distribution. The countdown costs the fast paths nothing: they already
//! subtract each allocation's size from the heap's heartbeat (small/alloc.rs),
//! and while profiling is on the slow path arms the heartbeat with at most
//! the bytes left to the next sample ([`rearm_own`]), so the allocation that
//! crosses it is the one that reaches the slow path. There [`take`] settles
//! the bytes counted since the last look and says whether this allocation
//! is a sample. Large and huge allocations, always on the slow path, are
//! counted the same way.
//!
//! **A sample** is served as a large block (a span of whole pages holding
//! one block, whatever its size: small/alloc.rs's `alloc_large`), its page
//! marked `sampled`, and the caller's stack captured (unwind.rs) and
//! recorded (table.rs) with the block's address and size. Large pages are
//! never on the free fast path (their owner entry is 0), so a sampled
//! block's `free`, by any thread, reaches `free_slow`, which sees the mark
//! and takes the record out: the fast paths never test for samples. The
//! price is memory: a sampled block of 16 bytes takes a 64 KiB span (of
//! which it touches the first 4 KiB page); at the default rate that is one
//! span per 512 KiB allocated, and only live samples hold one.
//!
//! **The profile** (pprof.rs) weights each live sample by the bytes and
//! objects it stands for — a block of `s` bytes is sampled with probability
//! `1 - exp(-s / rate)`, so it stands for `s / p` bytes and `1 / p`
//! objects (the estimator jemalloc and pprof use) — and writes pprof's
//! `profile.proto`, gzip-wrapped, with the executable mappings of
//! `/proc/self/maps` so that `pprof` symbolizes the addresses itself.
//!
//! Not sampled: local heaps' allocations (a destroyed local heap frees its
//! blocks without a `free` each; their bytes are not counted either), the
//! first allocation of each thread (before it has a heap), and the
//! hardened (`secure`) build, whose large blocks are huge mappings.
//!
//! Turned on by `HAKMEM_PROFILE=PATH[,rate=BYTES]` (config.rs; the live
//! heap is written to PATH at exit, `%p` in it standing for the process
//! id) or [`start`]; written at any time by [`dump`] (C:
//! `hakmem_profile_dump`).

#[cfg(all(not(hakmem_loom), target_arch = "x86_64", target_env = "gnu"))]
mod cfi;
#[cfg(not(hakmem_loom))]
mod math;
#[cfg(not(hakmem_loom))]
mod pprof;
#[cfg(not(hakmem_loom))]
mod symbols;
#[cfg(not(hakmem_loom))]
mod table;
#[cfg(not(hakmem_loom))]
mod unwind;

use crate::small::alloc::{HEARTBEAT_ALLOCS, HEARTBEAT_BYTES};
use crate::sync::plain::{AtomicBool, AtomicUsize};
use crate::sync::Ordering;
use crate::thread::heap::{is_static_heap, Heap};

/// The default mean sampling interval (jemalloc's `lg_prof_sample` 19).
pub const DEFAULT_RATE: usize = 512 * 1024;
/// The largest mean interval [`start`] accepts (1 GiB).
pub const MAX_RATE: usize = 1 << 30;
/// The smallest (4 KiB): each sample takes a 64 KiB span, so a smaller
/// one would make most allocations samples.
pub const MIN_RATE: usize = 4 << 10;

/// Whether new allocations are sampled.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The mean sampling interval in bytes (valid while `ACTIVE`, and kept
/// after [`stop`] for the weights of the samples still live).
static RATE: AtomicUsize = AtomicUsize::new(DEFAULT_RATE);

/// A heap's countdown to its next sample.
#[derive(Clone, Copy)]
pub(crate) struct Sampler {
    /// The value `rearm_own` (or the last `take` or `lower`) left in the heap's
    /// heartbeat: what the heartbeat has gone down since is what the fast
    /// paths handed out.
    armed: u32,
    /// Whether the countdown has been drawn (the first `take` draws it).
    seeded: bool,
    /// The heap is recording a sample: an allocation made meanwhile (by
    /// the unwinder) is not one.
    busy: bool,
    /// Bytes left to the next sample (at the time of `armed`).
    left: i64,
    /// The generator behind the intervals (xorshift64*; never 0).
    rng: u64,
    /// The heartbeat's measure of the heap's allocation sizes: a moving
    /// average (1/8 per look) of `2^24 / size` over the sizes slow paths
    /// see. A slow path is reached with a chance proportional to the size
    /// (the byte countdown runs out sooner for large blocks), and the
    /// harmonic mean of such a size-weighted draw is the plain mean size:
    /// `2^24 / inv_size_avg`, times `HEARTBEAT_ALLOCS`, comes about every
    /// `HEARTBEAT_ALLOCS` allocations whatever the mix (kept by every
    /// heap, profiling or not).
    inv_size_avg: u32,
    /// `HEARTBEAT_ALLOCS` times the mean size `inv_size_avg` gives,
    /// clamped: what the heartbeat is armed with when no sample is near
    /// (worked out when the average moves, not on every slow path).
    beat: u32,
}

impl Sampler {
    pub(crate) const NEW: Self = Self {
        armed: HEARTBEAT_BYTES,
        seeded: false,
        busy: false,
        left: 0,
        rng: 0,
        inv_size_avg: (1 << 24) / (HEARTBEAT_BYTES / HEARTBEAT_ALLOCS),
        beat: HEARTBEAT_BYTES,
    };
}

/// Whether the object holding hakmem has been initialised (its ELF
/// constructor, `thread::process_init_at_load`, has run): no sample is
/// recorded before. In a static executable glibc's own start-up allocates
/// before its tables of loaded objects are built (`_dl_find_object`
/// crashed on them half-built) and before libgcc has registered the
/// executable's unwind tables (its walk aborted): an early sample killed
/// a program that did nothing (found by review). Targets without the
/// constructor start set.
#[cfg(not(hakmem_loom))]
static LOADED: AtomicBool = AtomicBool::new(!cfg!(target_os = "linux"));

/// The constructor has run: samples may be recorded from now on.
#[cfg(not(hakmem_loom))]
pub(crate) fn loaded() {
    // The secure build never samples.
    #[cfg(all(target_arch = "x86_64", target_env = "gnu", not(feature = "secure")))]
    cfi::loaded();
    // Relaxed: a switch; what a sample's walk needs was set up by the
    // loader and libc before any constructor ran (and the lookup above
    // by this thread).
    LOADED.store(true, Ordering::Relaxed);
}

/// Whether sampling is on (one relaxed load; the slow paths' test).
#[inline(always)]
pub(crate) fn active() -> bool {
    // Relaxed: a switch, publishing nothing. A thread that sees it late
    // samples a little later; `RATE` is read on its own (below) and each
    // sample keeps the rate it read, so a stale pairing of the two skews
    // one interval's length, never a weight.
    !cfg!(feature = "secure") && !cfg!(hakmem_loom) && ACTIVE.load(Ordering::Relaxed)
}

/// Turns sampling on with a mean interval of `rate` bytes (clamped to
/// [`MIN_RATE`] ..= [`MAX_RATE`]). Each thread's countdown starts at its
/// next slow path (within about 1 024 allocations). The `secure` build
/// never samples. Samples already live keep the rate they were taken at.
pub fn start(rate: usize) {
    // Relaxed, both: see `active`. The tables a sample writes are
    // published by their own lock (table.rs), not by this switch.
    RATE.store(rate.clamp(MIN_RATE, MAX_RATE), Ordering::Relaxed);
    ACTIVE.store(true, Ordering::Relaxed);
}

/// Turns sampling off. Samples still live stay in the profile until their
/// blocks are freed.
pub fn stop() {
    // Relaxed: see `active`.
    ACTIVE.store(false, Ordering::Relaxed);
}

/// The mean sampling interval in bytes.
pub fn rate() -> usize {
    // Relaxed: see `active`.
    RATE.load(Ordering::Relaxed)
}

/// Whether `heap` samples: a thread heap (not the static empty or exited
/// heap, not a local heap) not already recording a sample.
///
/// # Safety
/// `heap` must be a valid heap.
#[inline]
unsafe fn samples(heap: *mut Heap) -> bool {
    // SAFETY: the caller's guarantee.
    !is_static_heap(heap) && unsafe { (*heap).parent.is_null() }
}

/// The heartbeat after a slow path (bytes): `HEARTBEAT_ALLOCS` times the
/// heap's average allocation size, between 16 KiB and 1 GiB.
const HEARTBEAT_MIN: i64 = 16 << 10;
const HEARTBEAT_MAX: i64 = 1 << 30;

/// Folds an allocation of `size` bytes that ran `heap`'s heartbeat out
/// (a slow path the countdown sent: the heartbeat is below zero) into the
/// heap's average size, the heartbeat's measure; slow paths an empty page
/// sent are not size-weighted draws and are left out (and cost two
/// instructions here, which matters to medium sizes, whose pages run
/// empty every few blocks).
///
/// # Safety
/// `heap` must be the calling thread's heap (a static one is left alone).
#[inline]
pub(crate) unsafe fn note_size(heap: *mut Heap, size: usize) {
    // SAFETY: the caller's guarantee: the heap is valid. The static heaps'
    // heartbeat never runs out (their pages have no blocks), so they
    // return here too.
    if unsafe { ((*heap).heartbeat as i32) >= 0 } {
        return;
    }
    // SAFETY: the caller's guarantee: the heap is the caller's own.
    unsafe {
        let s = &mut (*heap).sampler;
        let inv = ((1usize << 24) / size.clamp(1, 1 << 24)) as i64;
        let avg = s.inv_size_avg as i64;
        s.inv_size_avg = (avg + (inv - avg) / 8).max(1) as u32;
        let mean = (1i64 << 24) / s.inv_size_avg as i64;
        s.beat = (mean * HEARTBEAT_ALLOCS as i64).clamp(HEARTBEAT_MIN, HEARTBEAT_MAX) as u32;
    }
}

/// After a large or huge allocation (not counted by the fast paths) that
/// [`take`] has settled: lowers `heap`'s heartbeat to the bytes left to
/// its next sample when those are fewer, never raises it (so that these
/// allocations do not put the heartbeat's duties off). Thread heaps only.
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps
/// (the static heaps and local heaps are left alone).
#[inline]
pub(crate) unsafe fn lower(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    if !active() || unsafe { !samples(heap) } {
        return;
    }
    // SAFETY: the caller's guarantee: a thread heap of the caller's.
    unsafe {
        let s = &mut (*heap).sampler;
        if !s.seeded {
            return;
        }
        let cap = (s.left - 1).max(0);
        if ((*heap).heartbeat as i32) as i64 > cap {
            (*heap).heartbeat = cap as u32;
            s.armed = cap as u32;
        }
    }
}

/// Arms `heap`'s heartbeat: `HEARTBEAT_ALLOCS` times its average
/// allocation size, or the bytes left to the next sample when fewer and
/// profiling is on. Called by the slow path's duties once `take` has
/// settled the count.
///
/// # Safety
/// `heap` must be the calling thread's heap or one of its local heaps,
/// not a static heap.
#[inline]
pub(crate) unsafe fn rearm_own(heap: *mut Heap) {
    // SAFETY: the caller's guarantee: the heap is the caller's own.
    unsafe {
        let s = &mut (*heap).sampler;
        // Due below zero: armed with `left - 1`, the allocation that
        // brings the count to `left` bytes or more runs it out.
        let arm = if active() && s.seeded && (*heap).parent.is_null() {
            (s.left - 1).clamp(0, s.beat as i64) as u32
        } else {
            s.beat
        };
        (*heap).heartbeat = arm;
        s.armed = arm;
    }
}

/// Settles `heap`'s countdown at an allocation of `size` bytes on a slow
/// path and says whether that allocation is a sample. The bytes the fast
/// paths handed out since the last settling are what the heartbeat went
/// down from `armed`; this allocation is among them when it ran the
/// heartbeat out (the heartbeat below zero), and is added otherwise.
/// The caller then allocates (a sample through [`alloc_sample`]) and
/// re-arms the heartbeat.
///
/// # Safety
/// `heap` must be the calling thread's heap (possibly a static one, which
/// never samples).
#[inline(never)]
pub(crate) unsafe fn take(heap: *mut Heap, size: usize) -> bool {
    // SAFETY: the caller's guarantee.
    if !active() || unsafe { !samples(heap) } {
        return false;
    }
    // SAFETY: heap is the calling thread's own thread heap.
    unsafe {
        let heartbeat = (*heap).heartbeat;
        let s = &mut (*heap).sampler;
        if !s.seeded {
            s.seeded = true;
            s.rng = seed(heap);
            s.left = next_interval(&mut s.rng);
            s.armed = heartbeat;
        }
        let mut counted = (s.armed as i32).wrapping_sub(heartbeat as i32) as i64;
        if (heartbeat as i32) >= 0 {
            counted += size.min(i64::MAX as usize / 2) as i64;
        }
        s.armed = heartbeat;
        s.left -= counted;
        if s.left > 0 {
            return false;
        }
        s.left = next_interval(&mut s.rng);
        !s.busy
    }
}

/// A nonzero seed for `heap`'s generator: its address, the clock and the
/// process's random key mixed.
fn seed(heap: *mut Heap) -> u64 {
    let mut x = (heap as u64)
        ^ crate::os::now_ms().rotate_left(32)
        ^ (crate::small::page::freed_mark(core::ptr::null()) as u64);
    x = (x ^ (x >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    if x == 0 {
        0x2545_F491_4F6C_DD1D
    } else {
        x
    }
}

/// The next interval between samples: exponential with mean [`rate`], at
/// least 1 byte.
#[cfg(not(hakmem_loom))]
fn next_interval(rng: &mut u64) -> i64 {
    // xorshift64*.
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    let bits = x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
    // u in (0, 1]: never 0, whose logarithm is infinite.
    let u = (bits + 1) as f64 / (1u64 << 53) as f64;
    let interval = -math::ln(u) * rate() as f64;
    (interval as i64).clamp(1, i64::MAX / 4)
}

#[cfg(hakmem_loom)]
fn next_interval(_rng: &mut u64) -> i64 {
    rate() as i64
}

/// Serves the sampled allocation of `size` bytes (zeroed when `zero`) for
/// `heap` as a large block, marks its page and records it with the
/// caller's stack. Null (with `errno` set) when no memory can be had. The
/// caller's heartbeat is re-armed. Null when no span can be had: the
/// caller then serves the allocation as an ordinary one.
///
/// # Safety
/// `heap` must be the calling thread's thread heap, on which [`take`] has
/// just returned true.
#[cfg(not(hakmem_loom))]
#[cold]
#[inline(never)]
#[link_section = "hakmem_text"]
pub(crate) unsafe fn alloc_sample(heap: *mut Heap, size: usize, zero: bool) -> *mut u8 {
    // SAFETY: the caller's guarantee: heap is this thread's thread heap.
    unsafe {
        // The duties refill would have done (`alloc_large_block` does
        // them), and the heartbeat re-armed: while profiling, most
        // heartbeats end here.
        let (p, zeroed) = crate::small::alloc::alloc_large_block(heap, size);
        rearm_own(heap);
        if p.is_null() {
            return p;
        }
        if zero && !zeroed {
            core::ptr::write_bytes(p, 0, size);
        }
        record(heap, p, size);
        p
    }
}

/// Marks block `p` (a large or huge block just allocated for `heap`) as a
/// sample and records it with the caller's stack.
///
/// # Safety
/// `p` must be a live large or huge block just allocated by the calling
/// thread, not yet handed out; `heap` the calling thread's thread heap.
#[cfg(not(hakmem_loom))]
#[inline(never)]
#[link_section = "hakmem_text"]
pub(crate) unsafe fn record(heap: *mut Heap, p: *mut u8, size: usize) {
    // Relaxed: see `loaded`.
    if !LOADED.load(Ordering::Relaxed) {
        return;
    }
    let mut frames = [0usize; unwind::MAX_DEPTH];
    // SAFETY: the caller's guarantee: heap is ours (the busy flag keeps an
    // allocation made by the unwinder from recording a sample in turn),
    // and p is a live large or huge block just allocated, so segment_of(p)
    // is its segment header and page_of(p) its page (a huge segment's
    // own page entry).
    unsafe {
        (*heap).sampler.busy = true;
        let depth = unwind::capture(&mut frames);
        (*heap).sampler.busy = false;
        if table::insert(p as usize, size, &frames[..depth]) {
            let seg = crate::segment::segment_of(p);
            (*(*seg).page_of(p)).sampled = true;
        }
    }
}

/// `free` (or a move by `realloc`) of a block whose page carries the
/// sample mark: the mark cleared, the record taken out.
///
/// # Safety
/// `page` must be the page of `p`, a live block being freed by the caller.
#[cfg(not(hakmem_loom))]
#[cold]
#[inline(never)]
pub(crate) unsafe fn on_free(page: *mut crate::small::page::Page, p: *mut u8) {
    // SAFETY: the caller's guarantee.
    unsafe { (*page).sampled = false };
    table::remove(p as usize);
}

/// Whether block `p` is a sample (its page carries the mark).
///
/// # Safety
/// `p` must be a live hakmem block.
#[inline]
#[cfg_attr(feature = "secure", allow(dead_code))]
pub(crate) unsafe fn is_sampled(p: *const u8) -> bool {
    let seg = crate::segment::segment_of(p);
    // SAFETY: the caller's guarantee: seg is p's segment header.
    unsafe { (*(*seg).page_of(p)).sampled }
}

/// Under loom nothing samples (`active` is false): the slow paths' calls
/// compile to nothing.
#[cfg(hakmem_loom)]
pub(crate) unsafe fn alloc_sample(_heap: *mut Heap, _size: usize, _zero: bool) -> *mut u8 {
    core::ptr::null_mut()
}

#[cfg(hakmem_loom)]
pub(crate) unsafe fn record(_heap: *mut Heap, _p: *mut u8, _size: usize) {}

/// Why [`dump`] wrote no profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpError {
    /// The path is empty, too long (over 4095 bytes) or holds a NUL.
    BadPath,
    /// No memory for the profile's buffers.
    NoMemory,
    /// The file could not be written: the `errno` of the failed call.
    Io(i32),
}

/// Writes the live-heap profile (pprof's format, gzip-compressed) to
/// `path` (`%p` in it is replaced by the process id). Works whether or not
/// sampling is on: a profile with no samples when it never was.
#[cfg(not(hakmem_loom))]
pub fn dump(path: &[u8]) -> Result<(), DumpError> {
    pprof::dump(path)
}

/// What the profile holds and what it costs (part of the statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileStats {
    /// Live sampled blocks recorded.
    pub live_samples: usize,
    /// Distinct stacks recorded.
    pub stacks: usize,
    /// Samples not recorded because a table was full.
    pub dropped: usize,
    /// Stacks captured (one per sample), and how many of them the
    /// profiler's own walk gave to libgcc's (a frame whose rule it does
    /// not follow, or a stack it cannot bound; see `cfi.rs`).
    pub walks: usize,
    pub libgcc_walks: usize,
    /// Bytes held for the tables and the unwinder's rule cache (touched
    /// only as they fill).
    pub mapped_bytes: usize,
}

/// The unwinder's rule cache (static: touched only while profiling).
#[cfg(all(not(hakmem_loom), target_arch = "x86_64", target_env = "gnu"))]
const UNWIND_CACHE_BYTES: usize = cfi::CACHE_BYTES;
#[cfg(not(all(not(hakmem_loom), target_arch = "x86_64", target_env = "gnu")))]
const UNWIND_CACHE_BYTES: usize = 0;

/// The profile's counts (all zero before the first sample).
pub fn profile_stats() -> ProfileStats {
    #[cfg(not(hakmem_loom))]
    return table::stats();
    #[cfg(hakmem_loom)]
    ProfileStats::default()
}

/// The profile path `HAKMEM_PROFILE` named, written at exit.
#[cfg(not(hakmem_loom))]
pub(crate) extern "C" fn dump_at_exit() {
    let cfg = crate::config::config();
    let path = cfg.profile_path();
    if path.is_empty() {
        return;
    }
    if let Err(e) = pprof::dump(path) {
        let mut line = crate::os::Line::new();
        line.push(b"hakmem: could not write the heap profile to ");
        line.push(path);
        match e {
            DumpError::Io(errno) => {
                line.push(b" (errno ");
                line.push_i64(i64::from(errno));
                line.push(b")\n");
            }
            DumpError::NoMemory => line.push(b" (no memory)\n"),
            DumpError::BadPath => line.push(b" (bad path)\n"),
        }
        line.write();
    }
}

/// `fork` handlers: the tables' lock is held across `fork` (leaf lock).
#[cfg(not(hakmem_loom))]
pub(crate) fn fork_lock() {
    table::lock();
}

#[cfg(not(hakmem_loom))]
pub(crate) fn fork_unlock() {
    table::unlock();
}
