//! The workloads: the named presets of BENCHMARKING.md's list and the
//! kernels that run them against one allocator.
//!
//! Every kernel is generic over `A: GlobalAlloc` and calls the allocator
//! under test explicitly (`alloc`/`dealloc`/`realloc`), so each allocator
//! runs the identical monomorphised loop; the binary's own global allocator
//! (the system one) serves only the harness (slot arrays, mailboxes).
//!
//! Invariants the kernels keep:
//! - Requested sizes come from `Rng::in_range(min, max)` with
//!   `1 <= min <= max <= MAX_BLOCK_SIZE` (checked by `run`, and reported
//!   earlier as a usage error by `cli`), so every layout is valid and
//!   non-empty.
//! - Every block is stamped on allocation (first and last byte) and checked
//!   before it is freed; a mismatch counts as an error, which the parent
//!   reports as a failed run (a corrupting allocator has not won).
//! - Everything allocated is freed before the kernel returns; frees after
//!   the timed section (draining the working set) are not counted.
//! - An *operation* is one call to `alloc`, `dealloc` or `realloc` inside
//!   the timed section.
//!
//! The C twin of these kernels, for `--preload`, is `c/bench.c`; keep the
//! two in step.

use crate::rng::Rng;
use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// Alignment asked for every block: what a Rust `Vec<u64>` or `Box<u64>`
/// asks, and at most `MIN_ALIGN` of every comparator, so all of them take
/// their plain `malloc` path.
const ALIGN: usize = 8;

/// Largest block a workload may request (1 GiB): keeps `Layout` sizes far
/// from `isize::MAX` and catches a mistyped `--max`.
pub const MAX_BLOCK_SIZE: usize = 1 << 30;

/// Exit status of a child whose allocator returned null.
pub const EXIT_OUT_OF_MEMORY: i32 = 3;

/// larson: a thread hands blocks to its neighbour every this many
/// iterations (a power of two, so the check is a mask)...
const HANDOFF_EVERY: u64 = 128;
/// ...at most this many of its live blocks. With the working set about half
/// full this sends roughly a quarter of all frees across threads.
const HANDOFF_BATCH: usize = 16;
/// A thread whose neighbour has this many blocks waiting (about 2 MiB at
/// 16–1024 B) frees its own mail until the neighbour catches up. Without the
/// bound a neighbour descheduled for a while (2 cores, other work) lets
/// blocks pile up, and peak RSS measures the scheduler, not the allocator.
const MAILBOX_CAP: usize = 4096;

/// prodcons: blocks per message, and messages in flight before the
/// producer blocks (at most 4096 live blocks per pair, about 2 MiB at
/// 16–1024 B).
const PRODCONS_BATCH: usize = 64;
const PRODCONS_DEPTH: usize = 64;

/// rethread: exchanges each thread of a round makes before it exits.
pub const RETHREAD_EXCHANGES: u64 = 256;

/// churn: a block carries its size and a check word in its first 16 bytes
/// (the shared slots hold bare pointers, and `dealloc` needs the size) and
/// its tag in its last byte, so it is at least this long.
pub const CHURN_MIN_SIZE: usize = 24;

/// Spins on a busy-wait before a waiting thread yields its core (pacing):
/// short enough that an oversubscribed run (16 threads on 2 cores) does not
/// burn its time slices spinning.
const SPINS_BEFORE_YIELD: u32 = 64;

/// The loop a workload runs. The presets differ only in parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// One thread; random slot: free it if occupied, else allocate a random
    /// size into it. One iteration is one operation.
    Mixed,
    /// Allocate a random size (fixed when `min == max`), touch, free. One
    /// iteration is two operations.
    Fixed,
    /// `Mixed` on `threads` threads, each with its own slots and stream.
    MtMixed,
    /// `Mixed` on `threads` threads that periodically hand a batch of live
    /// blocks to the next thread, which frees them (cross-thread free).
    Larson,
    /// Producer threads allocate, consumer threads check and free, in
    /// batches through a bounded channel per pair. One block is two
    /// operations.
    ProdCons,
    /// Random slot: allocate if empty, else free it (1 in 4) or `realloc` it
    /// to a new random size and check the contents moved.
    Realloc,
    /// `ws` huge blocks live; each iteration frees a random one and
    /// allocates a new one of a random size, written in full (zeroed, like
    /// C++ `make_unique<char[]>(n)`). One iteration is two operations.
    Huge,
    /// Thread churn: each iteration (round) starts `threads` threads, each
    /// `calloc`s one block, swaps it into a random one of `ws` shared slots,
    /// frees what it found there and exits. One thread is one operation.
    Churn,
    /// Producer threads hand blocks one by one to consumer threads through a
    /// ring per pair; a consumer frees a block only once `ws` newer ones are
    /// queued behind it, so each pair keeps a steady `ws` to `2 ws` blocks
    /// live. One block is two operations.
    Pacing,
    /// Threads that come and go, handing blocks on: each iteration (round)
    /// starts `threads` threads; each makes `RETHREAD_EXCHANGES` exchanges
    /// (allocate a block of a size whose binary exponent is uniform in
    /// `[min, max]`, swap it into a random one of `ws` shared slots, free
    /// what it found there) and exits. Blocks outlive the thread that
    /// allocated them and are freed by later threads. One exchange is one
    /// operation.
    Rethread,
}

impl Kernel {
    pub const ALL: &'static [Kernel] = &[
        Kernel::Mixed,
        Kernel::Fixed,
        Kernel::MtMixed,
        Kernel::Larson,
        Kernel::ProdCons,
        Kernel::Realloc,
        Kernel::Huge,
        Kernel::Churn,
        Kernel::Pacing,
        Kernel::Rethread,
    ];

    /// The kernel of `name` (`Kernel::name`).
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// The kernel's name on the `c/bench.c` command line.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Mixed => "mixed",
            Kernel::Fixed => "fixed",
            Kernel::MtMixed => "mt-mixed",
            Kernel::Larson => "larson",
            Kernel::ProdCons => "prodcons",
            Kernel::Realloc => "realloc",
            Kernel::Huge => "huge",
            Kernel::Churn => "churn",
            Kernel::Pacing => "pacing",
            Kernel::Rethread => "rethread",
        }
    }

    /// Whether the kernel keeps a working set (`--ws`: slots, live blocks,
    /// or the per-pair lag of `Pacing`); `Fixed` and `ProdCons` have none.
    pub fn uses_ws(self) -> bool {
        !matches!(self, Kernel::Fixed | Kernel::ProdCons)
    }

    /// The threads a run uses when `--threads` asks for `requested`:
    /// `MtMixed`, `Larson` and `Churn` (threads per round) take it as is,
    /// `ProdCons` and `Pacing` round it down to whole producer/consumer pairs
    /// (at least one), the others run on one thread.
    pub fn threads(self, requested: usize) -> usize {
        match self {
            Kernel::MtMixed | Kernel::Larson | Kernel::Churn | Kernel::Rethread => requested,
            Kernel::ProdCons | Kernel::Pacing => 2 * (requested / 2).max(1),
            Kernel::Mixed | Kernel::Fixed | Kernel::Realloc | Kernel::Huge => 1,
        }
    }

    /// `--threads` when the command line gives none.
    pub fn default_threads(self) -> usize {
        match self {
            Kernel::Churn => 10,
            Kernel::Rethread => 4,
            _ => self.threads(2),
        }
    }

    /// Smallest block the kernel can work with.
    pub fn min_size(self) -> usize {
        match self {
            Kernel::Churn | Kernel::Rethread => CHURN_MIN_SIZE,
            _ => 1,
        }
    }

    /// What one operation of the kernel is, for the reports.
    pub fn op_unit(self) -> &'static str {
        match self {
            Kernel::Churn => "thread",
            _ => "call",
        }
    }
}

/// A named workload with its default parameters.
#[derive(Debug)]
pub struct Preset {
    pub name: &'static str,
    pub kernel: Kernel,
    pub min: usize,
    pub max: usize,
    pub ws: usize,
    /// Iterations per thread (per producer for `ProdCons` and `Pacing`,
    /// rounds for `Churn`). Chosen so that one run takes roughly 0.1 to 0.4 s
    /// on the 2-core development machine (long enough that timer and
    /// start-up noise vanish), except `huge`, whose 2000 replacements are the
    /// shape it models (and which is not in the default table for that).
    pub iters: u64,
    /// Part of the default table (no `--workloads`).
    pub in_default: bool,
    pub about: &'static str,
}

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Every workload, in table order. The headline `mixed` shape is
/// BENCHMARKING.md's `ws = 400, seed = 1`.
#[rustfmt::skip]
pub static PRESETS: &[Preset] = &[
    //     name        kernel            min       max        ws    iters/thread  about
    preset("mixed",    Kernel::Mixed,    16,       1024,      400,  10_000_000, "random mixed sizes (the headline)"),
    preset("c7",       Kernel::Mixed,    1024,     1024,      400,  10_000_000, "one size class"),
    preset("c6",       Kernel::Mixed,    257,      768,       400,  10_000_000, "the range where lookups hurt most"),
    preset("c5",       Kernel::Mixed,    129,      256,       400,  10_000_000, "small classes"),
    preset("c4",       Kernel::Mixed,    65,       128,       400,  10_000_000, "small classes"),
    preset("large-ws", Kernel::Mixed,    16,       1024,      8192, 10_000_000, "large working set: cache misses"),
    preset("mid",      Kernel::Mixed,    KIB,      32 * KIB,  400,  4_000_000,  "medium blocks"),
    preset("large",    Kernel::Mixed,    64 * KIB, 4 * MIB,   64,   500_000,    "large blocks: OS interaction, purging"),
    preset("fixed64k", Kernel::Fixed,    64 * KIB, 64 * KIB,  1,    2_000_000,  "allocate, touch, free in a loop"),
    preset("mt-mixed", Kernel::MtMixed,  16,       1024,      400,  10_000_000, "mixed on --threads threads, own slots"),
    preset("larson",   Kernel::Larson,   16,       1024,      400,  5_000_000,  "threads free each other's blocks"),
    preset("prodcons", Kernel::ProdCons, 16,       1024,      1,    2_000_000,  "producers allocate, consumers free (pairs)"),
    preset("churn",    Kernel::Churn,    128,      128,       1000, 1_000,      "rounds of short threads: calloc, swap, free"),
    preset("pacing",   Kernel::Pacing,   16,       16 * KIB,  2048, 500_000,    "producers hand blocks to consumers, steady live set"),
    preset("rethread", Kernel::Rethread, 24,       256 * KIB, 1000, 300,        "rounds of threads exchanging blocks of up to 256 KiB"),
    Preset {
        in_default: false,
        ..preset("realloc", Kernel::Realloc, 16,     4 * KIB,   400,  4_000_000,  "realloc to random sizes (not in the default table)")
    },
    // 2000 replacements write about 30 GB: seconds per run, so not in the
    // default table (it would take longer than all the others together).
    Preset {
        in_default: false,
        ..preset("huge",     Kernel::Huge,   5 * MIB,  25 * MIB,  20,   2_000,      "replace huge blocks, written in full (not in the default table)")
    },
];

const fn preset(
    name: &'static str,
    kernel: Kernel,
    min: usize,
    max: usize,
    ws: usize,
    iters: u64,
    about: &'static str,
) -> Preset {
    Preset {
        name,
        kernel,
        min,
        max,
        ws,
        iters,
        in_default: true,
        about,
    }
}

/// The preset called `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// Everything one run needs; `cli` resolves it from a preset and overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    pub kernel: Kernel,
    pub min: usize,
    pub max: usize,
    /// Working-set slots (per thread).
    pub ws: usize,
    /// Iterations (per thread for `MtMixed` and `Larson`, per producer for
    /// `ProdCons` and `Pacing`, rounds for `Churn`).
    pub iters: u64,
    pub seed: u64,
    pub threads: usize,
}

/// What one run measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Operations in the timed section, all threads together.
    pub ops: u64,
    /// From the first thread's start to the last thread's end.
    pub elapsed: Duration,
    /// Blocks whose stamp was damaged when they were freed.
    pub errors: u64,
}

/// Runs `params` against `a`.
///
/// Panics unless `kernel.min_size() <= min <= max <= MAX_BLOCK_SIZE` and
/// `ws`, `threads` are at least 1 (`cli` reports these as usage errors
/// first): the kernels' `unsafe` blocks rely on it. The pair kernels run
/// `threads / 2` pairs (at least one); `cli` passes an even count.
pub fn run<A: GlobalAlloc + Sync>(a: &A, params: &Params) -> Outcome {
    let p = params;
    assert!(
        p.kernel.min_size() <= p.min
            && 1 <= p.min
            && p.min <= p.max
            && p.max <= MAX_BLOCK_SIZE
            && p.ws >= 1
            && p.threads >= 1,
        "invalid workload parameters {p:?}"
    );
    let runs = match params.kernel {
        Kernel::Mixed => vec![mixed(a, params, Rng::new(params.seed), None)],
        Kernel::Fixed => vec![fixed(a, params)],
        Kernel::Realloc => vec![realloc(a, params)],
        Kernel::MtMixed => mt_mixed(a, params),
        Kernel::Larson => larson(a, params),
        Kernel::ProdCons => prodcons(a, params),
        Kernel::Huge => vec![huge(a, params)],
        Kernel::Churn => vec![churn(a, params)],
        Kernel::Rethread => vec![rethread(a, params)],
        Kernel::Pacing => pacing(a, params),
    };
    ThreadRun::combine(&runs)
}

/// One thread's share of a run.
struct ThreadRun {
    start: Instant,
    end: Instant,
    ops: u64,
    errors: u64,
}

impl ThreadRun {
    fn combine(runs: &[ThreadRun]) -> Outcome {
        let start = runs.iter().map(|r| r.start).min().expect("at least one thread");
        let end = runs.iter().map(|r| r.end).max().expect("at least one thread");
        Outcome {
            ops: runs.iter().map(|r| r.ops).sum(),
            elapsed: end - start,
            errors: runs.iter().map(|r| r.errors).sum(),
        }
    }
}

/// A live block from the allocator under test and the size it was asked for.
///
/// Invariant: `ptr` was returned by `alloc`/`realloc` of the allocator the
/// kernel is running with `layout(size)`, and has not been freed; its first
/// and last bytes hold `tag()` unless something overwrote them.
struct Block {
    ptr: NonNull<u8>,
    size: usize,
}

// SAFETY: a Block is the only handle to its heap block (no aliasing), and
// the allocators under test are `GlobalAlloc + Sync`, which allows freeing a
// block on a thread other than the one that allocated it.
unsafe impl Send for Block {}

/// The layout of a block of `size` bytes (unchecked: it is on the hot path).
///
/// # Safety
/// `1 <= size <= MAX_BLOCK_SIZE`.
#[inline(always)]
unsafe fn layout(size: usize) -> Layout {
    debug_assert!((1..=MAX_BLOCK_SIZE).contains(&size));
    // SAFETY: ALIGN is a power of two and size <= MAX_BLOCK_SIZE (caller),
    // so size rounded up to ALIGN cannot exceed isize::MAX.
    unsafe { Layout::from_size_align_unchecked(size, ALIGN) }
}

impl Block {
    /// Allocates `size` bytes from `a` and stamps them.
    ///
    /// # Safety
    /// `1 <= size <= MAX_BLOCK_SIZE`.
    #[inline(always)]
    unsafe fn alloc<A: GlobalAlloc>(a: &A, size: usize) -> Block {
        // SAFETY: size is in [1, MAX_BLOCK_SIZE] (caller), as `layout` needs,
        // so the layout is non-empty.
        let ptr = black_box(unsafe { a.alloc(layout(size)) });
        let Some(ptr) = NonNull::new(ptr) else {
            out_of_memory(size)
        };
        let block = Block { ptr, size };
        block.stamp();
        block
    }

    /// The byte the block's ends carry: differs between blocks at different
    /// addresses or of different sizes, so an allocator that hands out
    /// overlapping blocks is caught when the first one is freed.
    #[inline(always)]
    fn tag(&self) -> u8 {
        ((self.ptr.as_ptr() as usize >> 4) ^ self.size) as u8
    }

    #[inline(always)]
    fn stamp(&self) {
        let tag = self.tag();
        // SAFETY: the block is live and `size >= 1` bytes long (invariant),
        // so offsets 0 and size - 1 are inside it.
        unsafe {
            self.ptr.as_ptr().write(tag);
            self.ptr.as_ptr().add(self.size - 1).write(tag);
        }
    }

    #[inline(always)]
    fn is_intact(&self) -> bool {
        let tag = self.tag();
        // SAFETY: as in `stamp`; both bytes were written by `stamp`.
        unsafe { self.ptr.as_ptr().read() == tag && self.ptr.as_ptr().add(self.size - 1).read() == tag }
    }

    /// Returns the block to `a`.
    ///
    /// # Safety
    /// `a` is the allocator that allocated the block.
    #[inline(always)]
    unsafe fn free<A: GlobalAlloc>(self, a: &A) {
        // SAFETY: ptr came from `a` (caller) with layout(self.size), whose
        // size is valid (invariant), and is freed once (`self` is consumed).
        unsafe { a.dealloc(black_box(self.ptr.as_ptr()), layout(self.size)) }
    }

    /// Resizes the block with `a.realloc`; returns the new block and whether
    /// the first byte survived the move.
    ///
    /// # Safety
    /// `a` is the allocator that allocated the block, and
    /// `1 <= new_size <= MAX_BLOCK_SIZE`.
    #[inline(always)]
    unsafe fn realloc<A: GlobalAlloc>(self, a: &A, new_size: usize) -> (Block, bool) {
        let old_tag = self.tag();
        // SAFETY: ptr came from `a` (caller) with layout(self.size), whose
        // size is valid (invariant); new_size is in [1, MAX_BLOCK_SIZE]
        // (caller), so non-zero and far from overflowing with ALIGN.
        let ptr = black_box(unsafe { a.realloc(self.ptr.as_ptr(), layout(self.size), new_size) });
        let Some(ptr) = NonNull::new(ptr) else {
            out_of_memory(new_size)
        };
        // SAFETY: realloc preserved min(old, new) >= 1 bytes at ptr.
        let moved_intact = unsafe { ptr.as_ptr().read() } == old_tag;
        let block = Block { ptr, size: new_size };
        block.stamp();
        (block, moved_intact)
    }

    /// Allocates `size` bytes from `a`, writes every one of them (zero, as
    /// C++ value-initialisation of `new char[n]()` does) and stamps them.
    ///
    /// # Safety
    /// `1 <= size <= MAX_BLOCK_SIZE`.
    unsafe fn alloc_written<A: GlobalAlloc>(a: &A, size: usize) -> Block {
        // SAFETY: size is in [1, MAX_BLOCK_SIZE] (caller), as `layout` needs.
        let ptr = black_box(unsafe { a.alloc(layout(size)) });
        let Some(ptr) = NonNull::new(ptr) else {
            out_of_memory(size)
        };
        // SAFETY: the block is ours and `size` bytes long.
        unsafe { ptr.as_ptr().write_bytes(0, size) };
        // black_box: the writes must reach memory, not be dropped as dead.
        let block = Block {
            ptr: black_box(ptr),
            size,
        };
        block.stamp();
        block
    }

    /// churn: `calloc`s `size` bytes from `a` and reports whether they came
    /// back zeroed; then writes the size and a check word (size XOR address)
    /// into the first 16 bytes and the tag into the last one, which
    /// `from_sized` reads back.
    ///
    /// # Safety
    /// `CHURN_MIN_SIZE <= size <= MAX_BLOCK_SIZE`.
    unsafe fn calloc_sized<A: GlobalAlloc>(a: &A, size: usize) -> (Block, bool) {
        // SAFETY: size is in [1, MAX_BLOCK_SIZE] (caller), as `layout` needs.
        let ptr = black_box(unsafe { a.alloc_zeroed(layout(size)) });
        let Some(ptr) = NonNull::new(ptr) else {
            out_of_memory(size)
        };
        // SAFETY: the block is ours, `size` bytes long, and alloc_zeroed
        // initialised them.
        let zeroed = unsafe { std::slice::from_raw_parts(ptr.as_ptr(), size) }
            .iter()
            .all(|&b| b == 0);
        let block = Block { ptr, size };
        let header = block.header();
        // SAFETY: size >= CHURN_MIN_SIZE > 16, so bytes 0..16 and size - 1
        // are inside the block and do not overlap.
        unsafe {
            let words = ptr.as_ptr().cast::<[u64; 2]>();
            words.write_unaligned(header);
            ptr.as_ptr().add(size - 1).write(block.tag());
        }
        (block, zeroed)
    }

    /// rethread: allocates `size` bytes from `a` (not zeroed) and writes
    /// the header and tag `from_sized` reads back, as `calloc_sized` does.
    ///
    /// # Safety
    /// `CHURN_MIN_SIZE <= size <= MAX_BLOCK_SIZE`.
    unsafe fn alloc_sized<A: GlobalAlloc>(a: &A, size: usize) -> Block {
        // SAFETY: size is in [1, MAX_BLOCK_SIZE] (caller), as `layout` needs.
        let ptr = black_box(unsafe { a.alloc(layout(size)) });
        let Some(ptr) = NonNull::new(ptr) else {
            out_of_memory(size)
        };
        let block = Block { ptr, size };
        let header = block.header();
        // SAFETY: size >= CHURN_MIN_SIZE > 16, so bytes 0..16 and size - 1
        // are inside the block and do not overlap.
        unsafe {
            ptr.as_ptr().cast::<[u64; 2]>().write_unaligned(header);
            ptr.as_ptr().add(size - 1).write(block.tag());
        }
        block
    }

    /// What `calloc_sized` writes into a block's first 16 bytes.
    fn header(&self) -> [u64; 2] {
        [self.size as u64, self.size as u64 ^ self.ptr.as_ptr() as u64]
    }

    /// churn: the block at `ptr`, with the size its header gives, or `None`
    /// if the header or tag was damaged (the block is then leaked: its size
    /// is unknown).
    ///
    /// # Safety
    /// `ptr` came from `calloc_sized` with a size in `[min, max]`, is live,
    /// and the caller holds the only handle to it.
    unsafe fn from_sized(ptr: NonNull<u8>, min: usize, max: usize) -> Option<Block> {
        // SAFETY: the block is at least CHURN_MIN_SIZE > 16 bytes long
        // (caller).
        let [size, check] = unsafe { ptr.as_ptr().cast::<[u64; 2]>().read_unaligned() };
        let size = usize::try_from(size).ok().filter(|s| (min..=max).contains(s))?;
        let block = Block { ptr, size };
        if block.header() != [size as u64, check] {
            return None;
        }
        // SAFETY: the size matches its check word (derived from the address),
        // so, short of damage that forged both words consistently, it is the
        // size the block was allocated with and size - 1 is inside it.
        let tag = unsafe { ptr.as_ptr().add(size - 1).read() };
        (tag == block.tag()).then_some(block)
    }
}

#[cold]
#[inline(never)]
fn out_of_memory(size: usize) -> ! {
    eprintln!("hakmem-bench: allocating {size} bytes returned null");
    std::process::exit(EXIT_OUT_OF_MEMORY)
}

/// One allocation and free before timing, so that allocators that set up
/// their global or thread state lazily do not pay for it in the loop (the
/// system allocator was already used by the Rust runtime).
fn warm_up<A: GlobalAlloc>(a: &A, size: usize) {
    // SAFETY: size is a workload's min, in [1, MAX_BLOCK_SIZE] (`run`); the
    // block is freed with the allocator that returned it.
    unsafe { Block::alloc(a, size).free(a) }
}

/// A working set of `ws` slots, each empty or holding a block.
struct Slots(Vec<Option<Block>>);

impl Slots {
    fn new(ws: usize) -> Slots {
        Slots((0..ws).map(|_| None).collect())
    }

    /// Frees every block left (untimed); returns how many were damaged.
    fn drain<A: GlobalAlloc>(self, a: &A) -> u64 {
        let mut errors = 0;
        for block in self.0.into_iter().flatten() {
            errors += u64::from(!block.is_intact());
            // SAFETY: every block in the slots came from `a`.
            unsafe { block.free(a) };
        }
        errors
    }
}

/// One step of the random mixed loop on `slots[slot]`: free the block there,
/// or allocate a size drawn from `[min, max]` into the empty slot.
#[inline(always)]
fn mixed_step<A: GlobalAlloc>(a: &A, p: &Params, rng: &mut Rng, slot: &mut Option<Block>, errors: &mut u64) {
    match slot.take() {
        Some(block) => {
            *errors += u64::from(!block.is_intact());
            // SAFETY: blocks in the slots came from `a`.
            unsafe { block.free(a) };
        }
        None => {
            let size = rng.in_range(p.min, p.max);
            // SAFETY: size is in [min, max] within [1, MAX_BLOCK_SIZE] (`run`).
            *slot = Some(unsafe { Block::alloc(a, size) });
        }
    }
}

fn mixed<A: GlobalAlloc>(a: &A, p: &Params, mut rng: Rng, start_together: Option<&Barrier>) -> ThreadRun {
    let mut slots = Slots::new(p.ws);
    warm_up(a, p.min);
    if let Some(barrier) = start_together {
        barrier.wait();
    }
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..p.iters {
        let slot = &mut slots.0[rng.below(p.ws)];
        mixed_step(a, p, &mut rng, slot, &mut errors);
    }
    let end = Instant::now();
    errors += slots.drain(a);
    ThreadRun {
        start,
        end,
        ops: p.iters,
        errors,
    }
}

fn fixed<A: GlobalAlloc>(a: &A, p: &Params) -> ThreadRun {
    let mut rng = Rng::new(p.seed);
    warm_up(a, p.min);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..p.iters {
        let size = rng.in_range(p.min, p.max);
        // SAFETY: size is in [min, max] within [1, MAX_BLOCK_SIZE] (`run`).
        let block = unsafe { Block::alloc(a, size) };
        errors += u64::from(!block.is_intact());
        // SAFETY: the block came from `a`.
        unsafe { block.free(a) };
    }
    let end = Instant::now();
    ThreadRun {
        start,
        end,
        ops: 2 * p.iters,
        errors,
    }
}

fn realloc<A: GlobalAlloc>(a: &A, p: &Params) -> ThreadRun {
    let mut rng = Rng::new(p.seed);
    let mut slots = Slots::new(p.ws);
    warm_up(a, p.min);
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..p.iters {
        let slot = &mut slots.0[rng.below(p.ws)];
        match slot.take() {
            Some(block) if rng.below(4) != 0 => {
                errors += u64::from(!block.is_intact());
                let size = rng.in_range(p.min, p.max);
                // SAFETY: the block came from `a`; size is in [min, max] within
                // [1, MAX_BLOCK_SIZE] (`run`).
                let (block, moved_intact) = unsafe { block.realloc(a, size) };
                errors += u64::from(!moved_intact);
                *slot = Some(block);
            }
            occupied_or_empty => {
                *slot = occupied_or_empty;
                mixed_step(a, p, &mut rng, slot, &mut errors);
            }
        }
    }
    let end = Instant::now();
    errors += slots.drain(a);
    ThreadRun {
        start,
        end,
        ops: p.iters,
        errors,
    }
}

fn mt_mixed<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> Vec<ThreadRun> {
    let barrier = Barrier::new(p.threads);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..p.threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || mixed(a, p, Rng::for_thread(p.seed, t), Some(barrier)))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("mt-mixed thread panicked"))
            .collect()
    })
}

/// Blocks handed to one larson thread, for it to free.
type Mailbox = Mutex<Vec<Block>>;

fn larson<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> Vec<ThreadRun> {
    let mailboxes: Vec<Mailbox> = (0..p.threads).map(|_| Mutex::new(Vec::new())).collect();
    let finished = AtomicUsize::new(0);
    let barrier = Barrier::new(p.threads);
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..p.threads)
            .map(|t| {
                let (mailboxes, finished, barrier) = (&mailboxes, &finished, &barrier);
                s.spawn(move || larson_thread(a, p, t, mailboxes, finished, barrier))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("larson thread panicked"))
            .collect()
    })
}

fn larson_thread<A: GlobalAlloc>(
    a: &A,
    p: &Params,
    index: usize,
    mailboxes: &[Mailbox],
    finished: &AtomicUsize,
    barrier: &Barrier,
) -> ThreadRun {
    let own = &mailboxes[index];
    let next = &mailboxes[(index + 1) % mailboxes.len()];
    let mut rng = Rng::for_thread(p.seed, index);
    let mut slots = Slots::new(p.ws);
    let mut outgoing = Vec::with_capacity(HANDOFF_BATCH);
    let mut incoming = Vec::new();
    let (mut ops, mut errors) = (0, 0);
    warm_up(a, p.min);
    barrier.wait();
    let start = Instant::now();
    for i in 0..p.iters {
        let slot = &mut slots.0[rng.below(p.ws)];
        mixed_step(a, p, &mut rng, slot, &mut errors);
        ops += 1;
        if i % HANDOFF_EVERY == HANDOFF_EVERY - 1 {
            let from = rng.below(p.ws);
            for k in 0..p.ws {
                if outgoing.len() == HANDOFF_BATCH {
                    break;
                }
                if let Some(block) = slots.0[(from + k) % p.ws].take() {
                    outgoing.push(block);
                }
            }
            loop {
                let mut mailbox = next.lock().expect("mailbox poisoned");
                if mailbox.len() < MAILBOX_CAP {
                    mailbox.append(&mut outgoing);
                    break;
                }
                drop(mailbox);
                // Free our own mail while we wait, so that a ring of
                // waiting threads still makes progress.
                ops += free_mail(a, own, &mut incoming, &mut errors);
                std::thread::yield_now();
            }
            ops += free_mail(a, own, &mut incoming, &mut errors);
        }
    }
    // Keep freeing what the others send until all have stopped sending.
    // Release: our last handoff happens-before a peer's Acquire load below.
    finished.fetch_add(1, Ordering::Release);
    loop {
        // Acquire: pairs with every thread's Release increment, so once all
        // have finished, all their handoffs are visible to the drain below.
        let all_finished = finished.load(Ordering::Acquire) == mailboxes.len();
        ops += free_mail(a, own, &mut incoming, &mut errors);
        if all_finished {
            break;
        }
        std::thread::yield_now();
    }
    let end = Instant::now();
    errors += slots.drain(a);
    ThreadRun {
        start,
        end,
        ops,
        errors,
    }
}

/// Frees every block in `mailbox` (swapped into `incoming` so the lock is
/// held only for the swap); returns how many.
fn free_mail<A: GlobalAlloc>(a: &A, mailbox: &Mailbox, incoming: &mut Vec<Block>, errors: &mut u64) -> u64 {
    std::mem::swap(&mut *mailbox.lock().expect("mailbox poisoned"), incoming);
    let count = incoming.len() as u64;
    for block in incoming.drain(..) {
        *errors += u64::from(!block.is_intact());
        // SAFETY: all larson threads allocate from the same `a`.
        unsafe { block.free(a) };
    }
    count
}

/// The pairs of a `ProdCons` or `Pacing` run.
fn pairs(p: &Params) -> usize {
    (p.threads / 2).max(1)
}

fn prodcons<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> Vec<ThreadRun> {
    let barrier = Barrier::new(2 * pairs(p));
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..pairs(p))
            .flat_map(|index| {
                let (full_tx, full_rx) = mpsc::sync_channel::<Vec<Block>>(PRODCONS_DEPTH);
                // Emptied batches go back to the producer, so the harness does
                // not allocate a Vec (from the system allocator) per batch.
                let (empty_tx, empty_rx) = mpsc::channel::<Vec<Block>>();
                let barrier = &barrier;
                let producer = s.spawn(move || prodcons_producer(a, p, index, full_tx, empty_rx, barrier));
                let consumer = s.spawn(move || prodcons_consumer(a, p, full_rx, empty_tx, barrier));
                [producer, consumer]
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("prodcons thread panicked"))
            .collect()
    })
}

fn prodcons_producer<A: GlobalAlloc>(
    a: &A,
    p: &Params,
    index: usize,
    full_tx: mpsc::SyncSender<Vec<Block>>,
    empty_rx: mpsc::Receiver<Vec<Block>>,
    barrier: &Barrier,
) -> ThreadRun {
    let mut rng = Rng::for_thread(p.seed, index);
    warm_up(a, p.min);
    barrier.wait();
    let start = Instant::now();
    let mut batch = Vec::with_capacity(PRODCONS_BATCH);
    for _ in 0..p.iters {
        let size = rng.in_range(p.min, p.max);
        // SAFETY: size is in [min, max] within [1, MAX_BLOCK_SIZE] (`run`).
        batch.push(unsafe { Block::alloc(a, size) });
        if batch.len() == PRODCONS_BATCH {
            let next = empty_rx
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(PRODCONS_BATCH));
            full_tx
                .send(std::mem::replace(&mut batch, next))
                .expect("consumer gone");
        }
    }
    if !batch.is_empty() {
        full_tx.send(batch).expect("consumer gone");
    }
    drop(full_tx);
    ThreadRun {
        start,
        end: Instant::now(),
        ops: p.iters,
        errors: 0,
    }
}

fn prodcons_consumer<A: GlobalAlloc>(
    a: &A,
    p: &Params,
    full_rx: mpsc::Receiver<Vec<Block>>,
    empty_tx: mpsc::Sender<Vec<Block>>,
    barrier: &Barrier,
) -> ThreadRun {
    warm_up(a, p.min);
    barrier.wait();
    let start = Instant::now();
    let (mut ops, mut errors) = (0, 0);
    for mut batch in full_rx {
        ops += batch.len() as u64;
        for block in batch.drain(..) {
            errors += u64::from(!block.is_intact());
            // SAFETY: the producer allocated every block from `a`.
            unsafe { block.free(a) };
        }
        // The producer may have finished and dropped its end.
        let _ = empty_tx.send(batch);
    }
    ThreadRun {
        start,
        end: Instant::now(),
        ops,
        errors,
    }
}

fn huge<A: GlobalAlloc>(a: &A, p: &Params) -> ThreadRun {
    let mut rng = Rng::new(p.seed);
    let mut live = Slots::new(p.ws);
    // Untimed: fill the live set (which also warms the allocator up).
    for slot in &mut live.0 {
        let size = rng.in_range(p.min, p.max);
        // SAFETY: size is in [min, max] within [1, MAX_BLOCK_SIZE] (`run`).
        *slot = Some(unsafe { Block::alloc_written(a, size) });
    }
    let mut errors = 0;
    let start = Instant::now();
    for _ in 0..p.iters {
        let slot = &mut live.0[rng.below(p.ws)];
        if let Some(block) = slot.take() {
            errors += u64::from(!block.is_intact());
            // SAFETY: blocks in the slots came from `a`.
            unsafe { block.free(a) };
        }
        let size = rng.in_range(p.min, p.max);
        // SAFETY: size is in [min, max] within [1, MAX_BLOCK_SIZE] (`run`).
        *slot = Some(unsafe { Block::alloc_written(a, size) });
    }
    let end = Instant::now();
    errors += live.drain(a);
    ThreadRun {
        start,
        end,
        ops: 2 * p.iters,
        errors,
    }
}

/// churn: every round starts `threads` threads and waits for them. The main
/// thread draws each thread's slot and size before starting it, so the
/// request stream does not depend on scheduling (which block a thread finds
/// in its slot does).
fn churn<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> ThreadRun {
    let slots: Vec<AtomicPtr<u8>> = (0..p.ws).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
    let errors = AtomicU64::new(0);
    let mut rng = Rng::new(p.seed);
    warm_up(a, p.min);
    let start = Instant::now();
    for _ in 0..p.iters {
        std::thread::scope(|s| {
            for _ in 0..p.threads {
                let slot = &slots[rng.below(p.ws)];
                let size = rng.in_range(p.min, p.max);
                let errors = &errors;
                s.spawn(move || churn_thread(a, p, slot, size, errors));
            }
        });
    }
    let end = Instant::now();
    // The scope joined every thread: their blocks and counts are visible.
    let errors = errors.into_inner() + drain_sized(a, p, slots);
    ThreadRun {
        start,
        end,
        ops: p.iters * p.threads as u64,
        errors,
    }
}

/// churn and rethread: frees the blocks left in the shared slots (after
/// the timed section) and returns how many were damaged.
fn drain_sized<A: GlobalAlloc>(a: &A, p: &Params, slots: Vec<AtomicPtr<u8>>) -> u64 {
    let mut errors = 0;
    for slot in slots {
        let Some(ptr) = NonNull::new(slot.into_inner()) else {
            continue;
        };
        // SAFETY: every pointer in the slots came from `calloc_sized` or
        // `alloc_sized` with a size in [min, max] and is live; the slots are
        // gone, so this is its only holder.
        match unsafe { Block::from_sized(ptr, p.min, p.max) } {
            // SAFETY: the block came from `a`.
            Some(block) => unsafe { block.free(a) },
            None => errors += 1,
        }
    }
    errors
}

fn churn_thread<A: GlobalAlloc>(a: &A, p: &Params, slot: &AtomicPtr<u8>, size: usize, errors: &AtomicU64) {
    // SAFETY: size is in [min, max] within [CHURN_MIN_SIZE, MAX_BLOCK_SIZE]
    // (`run`).
    let (block, zeroed) = unsafe { Block::calloc_sized(a, size) };
    let mut damaged = u64::from(!zeroed);
    // AcqRel: the Release half publishes this block's header and tag to the
    // thread that swaps it out later; the Acquire half pairs with the Release
    // of the thread that swapped `old` in, so its header and tag are visible.
    let old = slot.swap(block.ptr.as_ptr(), Ordering::AcqRel);
    if let Some(old) = NonNull::new(old) {
        // SAFETY: every pointer in the slots came from `calloc_sized` with a
        // size in [min, max] and is live; the swap made this thread its only
        // holder.
        match unsafe { Block::from_sized(old, p.min, p.max) } {
            // SAFETY: the block came from `a`.
            Some(old) => unsafe { old.free(a) },
            None => damaged += 1,
        }
    }
    if damaged > 0 {
        // Read by the main thread after the join, which orders it.
        errors.fetch_add(damaged, Ordering::Relaxed);
    }
}

/// A size in `[min, max]` whose binary exponent is uniform: as many blocks
/// of 32-63 B as of 32-63 KiB (each exponent's range cut to `[min, max]`).
fn log_size(rng: &mut Rng, min: usize, max: usize) -> usize {
    let low = min.ilog2() as usize;
    let high = max.ilog2() as usize;
    let exponent = rng.in_range(low, high);
    let from = (1usize << exponent).max(min);
    let to = ((1usize << exponent) * 2 - 1).min(max);
    rng.in_range(from, to)
}

/// The main thread draws each thread's seed before starting it; the thread
/// draws its sizes and slots from it (`c/bench.c` does the same).
fn rethread<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> ThreadRun {
    let slots: Vec<AtomicPtr<u8>> = (0..p.ws).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
    let errors = AtomicU64::new(0);
    let mut rng = Rng::new(p.seed);
    warm_up(a, p.min);
    let start = Instant::now();
    for _ in 0..p.iters {
        std::thread::scope(|s| {
            for _ in 0..p.threads {
                let seed = rng.next_u64();
                let (slots, errors) = (&slots, &errors);
                s.spawn(move || rethread_thread(a, p, slots, seed, errors));
            }
        });
    }
    let end = Instant::now();
    // The scope joined every thread: their blocks and counts are visible.
    let errors = errors.into_inner() + drain_sized(a, p, slots);
    ThreadRun {
        start,
        end,
        ops: p.iters * p.threads as u64 * RETHREAD_EXCHANGES,
        errors,
    }
}

fn rethread_thread<A: GlobalAlloc>(a: &A, p: &Params, slots: &[AtomicPtr<u8>], seed: u64, errors: &AtomicU64) {
    let mut rng = Rng::new(seed);
    let mut damaged = 0;
    for _ in 0..RETHREAD_EXCHANGES {
        let size = log_size(&mut rng, p.min, p.max);
        let slot = &slots[rng.below(p.ws)];
        // SAFETY: size is in [min, max] within [CHURN_MIN_SIZE,
        // MAX_BLOCK_SIZE] (`run`).
        let block = unsafe { Block::alloc_sized(a, size) };
        // AcqRel, as in `churn_thread`: publishes this block's header and
        // tag, and sees those of the block swapped out.
        let old = slot.swap(block.ptr.as_ptr(), Ordering::AcqRel);
        if let Some(old) = NonNull::new(old) {
            // SAFETY: every pointer in the slots came from `alloc_sized` with
            // a size in [min, max] and is live; the swap made this thread its
            // only holder.
            match unsafe { Block::from_sized(old, p.min, p.max) } {
                // SAFETY: the block came from `a`.
                Some(old) => unsafe { old.free(a) },
                None => damaged += 1,
            }
        }
    }
    if damaged > 0 {
        // Read by the main thread after the join, which orders it.
        errors.fetch_add(damaged, Ordering::Relaxed);
    }
}

/// Keeps its value on a cache line of its own (the ring's two indices are
/// written by different threads).
#[repr(align(128))]
struct Padded<T>(T);

/// One pacing pair's ring of `capacity = 2 ws` slots. The producer fills
/// slot `j % capacity` and then publishes `tail = j + 1`; the consumer
/// empties it and then publishes `head = j + 1`. Invariant:
/// `head <= tail <= head + capacity`.
struct Ring {
    slots: Vec<(AtomicPtr<u8>, AtomicUsize)>,
    tail: Padded<AtomicU64>,
    head: Padded<AtomicU64>,
}

impl Ring {
    fn new(capacity: usize) -> Ring {
        Ring {
            slots: (0..capacity)
                .map(|_| (AtomicPtr::new(std::ptr::null_mut()), AtomicUsize::new(0)))
                .collect(),
            tail: Padded(AtomicU64::new(0)),
            head: Padded(AtomicU64::new(0)),
        }
    }

    fn capacity(&self) -> u64 {
        self.slots.len() as u64
    }
}

/// One step of a busy-wait: spin a little, then give the core away.
fn backoff(spins: &mut u32) {
    if *spins < SPINS_BEFORE_YIELD {
        *spins += 1;
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

fn pacing<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> Vec<ThreadRun> {
    let rings: Vec<Ring> = (0..pairs(p)).map(|_| Ring::new(2 * p.ws)).collect();
    let barrier = Barrier::new(2 * pairs(p));
    std::thread::scope(|s| {
        let threads: Vec<_> = rings
            .iter()
            .enumerate()
            .flat_map(|(index, ring)| {
                let barrier = &barrier;
                let producer = s.spawn(move || pacing_producer(a, p, index, ring, barrier));
                let consumer = s.spawn(move || pacing_consumer(a, p, ring, barrier));
                [producer, consumer]
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("pacing thread panicked"))
            .collect()
    })
}

fn pacing_producer<A: GlobalAlloc>(a: &A, p: &Params, index: usize, ring: &Ring, barrier: &Barrier) -> ThreadRun {
    let mut rng = Rng::for_thread(p.seed, index);
    let (mut head, mut spins) = (0, 0);
    warm_up(a, p.min);
    barrier.wait();
    let start = Instant::now();
    for j in 0..p.iters {
        let size = rng.in_range(p.min, p.max);
        // SAFETY: size is in [min, max] within [1, MAX_BLOCK_SIZE] (`run`).
        let block = unsafe { Block::alloc(a, size) };
        while j - head >= ring.capacity() {
            // Acquire: pairs with the consumer's Release store of head, so
            // its reads of the slot about to be reused are done.
            head = ring.head.0.load(Ordering::Acquire);
            if j - head >= ring.capacity() {
                backoff(&mut spins);
            }
        }
        spins = 0;
        let slot = &ring.slots[(j % ring.capacity()) as usize];
        slot.0.store(block.ptr.as_ptr(), Ordering::Relaxed);
        slot.1.store(block.size, Ordering::Relaxed);
        // Release: publishes the slot and the block's stamp to the
        // consumer's Acquire load of tail.
        ring.tail.0.store(j + 1, Ordering::Release);
    }
    ThreadRun {
        start,
        end: Instant::now(),
        ops: p.iters,
        errors: 0,
    }
}

fn pacing_consumer<A: GlobalAlloc>(a: &A, p: &Params, ring: &Ring, barrier: &Barrier) -> ThreadRun {
    let lag = p.ws as u64;
    let (mut tail, mut spins, mut errors) = (0, 0, 0);
    warm_up(a, p.min);
    barrier.wait();
    let start = Instant::now();
    for j in 0..p.iters {
        // Block j goes once `lag` newer blocks are queued behind it, or once
        // the producer has published its last one.
        while tail <= j + lag && tail < p.iters {
            // Acquire: pairs with the producer's Release store of tail, so
            // the slot and the block's stamp are visible.
            tail = ring.tail.0.load(Ordering::Acquire);
            if tail <= j + lag && tail < p.iters {
                backoff(&mut spins);
            }
        }
        spins = 0;
        let slot = &ring.slots[(j % ring.capacity()) as usize];
        let block = Block {
            ptr: NonNull::new(slot.0.load(Ordering::Relaxed)).expect("a published slot holds a block"),
            size: slot.1.load(Ordering::Relaxed),
        };
        errors += u64::from(!block.is_intact());
        // SAFETY: the producer allocated the block from `a` with this size and
        // handed it over through the ring; slot j is read once.
        unsafe { block.free(a) };
        // Release: the reads of slot j happen-before the producer reuses it
        // (its Acquire load of head).
        ring.head.0.store(j + 1, Ordering::Release);
    }
    ThreadRun {
        start,
        end: Instant::now(),
        ops: p.iters,
        errors,
    }
}

/// Replays larson's slot choices without allocating: every iteration is
/// one local operation and every block handed off is one remote free.
/// (A thread's slots depend only on its own stream, so this is exact;
/// `c/bench.c` must give the same count: the parent's `preload` tests
/// check it.)
#[doc(hidden)]
pub fn larson_expected_ops(p: &Params) -> (u64, u64) {
    let (mut local, mut remote) = (0, 0);
    for t in 0..p.threads {
        let mut rng = Rng::for_thread(p.seed, t);
        let mut occupied = vec![false; p.ws];
        for i in 0..p.iters {
            let k = rng.below(p.ws);
            if !occupied[k] {
                rng.in_range(p.min, p.max);
            }
            occupied[k] = !occupied[k];
            local += 1;
            if i % HANDOFF_EVERY == HANDOFF_EVERY - 1 {
                let from = rng.below(p.ws);
                let mut sent = 0;
                for j in 0..p.ws {
                    if sent == HANDOFF_BATCH {
                        break;
                    }
                    if std::mem::take(&mut occupied[(from + j) % p.ws]) {
                        sent += 1;
                    }
                }
                remote += sent as u64;
            }
        }
    }
    (local, remote)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;
    use std::sync::atomic::AtomicU64;

    /// Delegates to `System` and records what it was asked.
    #[derive(Default)]
    struct Recorder {
        /// Every allocation, zeroed ones included.
        allocs: AtomicU64,
        zeroed: AtomicU64,
        frees: AtomicU64,
        reallocs: AtomicU64,
        min_size: AtomicUsize,
        max_size: AtomicUsize,
        /// Blocks allocated and not yet freed (counted before the call, so
        /// at most one per thread above the truth), and its maximum.
        live: AtomicU64,
        max_live: AtomicU64,
    }

    impl Recorder {
        fn new() -> Recorder {
            Recorder {
                min_size: AtomicUsize::new(usize::MAX),
                ..Recorder::default()
            }
        }
        fn saw(&self, size: usize) {
            self.min_size.fetch_min(size, Ordering::Relaxed);
            self.max_size.fetch_max(size, Ordering::Relaxed);
        }
        fn allocated(&self, size: usize) {
            self.allocs.fetch_add(1, Ordering::Relaxed);
            self.saw(size);
            let live = self.live.fetch_add(1, Ordering::Relaxed) + 1;
            self.max_live.fetch_max(live, Ordering::Relaxed);
        }
    }

    // SAFETY: forwards every call unchanged to System, which upholds the
    // GlobalAlloc contract; the counters do not touch the blocks.
    unsafe impl GlobalAlloc for Recorder {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.allocated(layout.size());
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            self.allocated(layout.size());
            self.zeroed.fetch_add(1, Ordering::Relaxed);
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.frees.fetch_add(1, Ordering::Relaxed);
            self.live.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            self.reallocs.fetch_add(1, Ordering::Relaxed);
            self.saw(new_size);
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    fn params(kernel: Kernel, min: usize, max: usize) -> Params {
        Params {
            kernel,
            min,
            max,
            ws: 50,
            iters: 5_000,
            seed: 1,
            threads: 2,
        }
    }

    /// Runs `p` on a Recorder; checks nothing leaked and sizes stayed in range.
    fn run_recorded(p: &Params) -> (Outcome, Recorder) {
        let rec = Recorder::new();
        let outcome = run(&rec, p);
        assert_eq!(outcome.errors, 0, "damaged blocks in {p:?}");
        assert_eq!(
            rec.allocs.load(Ordering::Relaxed),
            rec.frees.load(Ordering::Relaxed),
            "leak in {p:?}"
        );
        assert!(rec.min_size.load(Ordering::Relaxed) >= p.min, "size below min in {p:?}");
        assert!(rec.max_size.load(Ordering::Relaxed) <= p.max, "size above max in {p:?}");
        assert!(outcome.elapsed > Duration::ZERO);
        (outcome, rec)
    }

    #[test]
    fn mixed_counts_one_op_per_iteration_and_draws_sizes_in_range() {
        let p = params(Kernel::Mixed, 100, 200);
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, p.iters);
        // Each iteration allocates or frees; about half allocate.
        let allocs = rec.allocs.load(Ordering::Relaxed);
        assert!((p.iters / 3..=p.iters * 2 / 3).contains(&allocs), "{allocs} allocs");
        assert_eq!(rec.min_size.load(Ordering::Relaxed), 100);
        assert_eq!(rec.max_size.load(Ordering::Relaxed), 200);
    }

    #[test]
    fn fixed_counts_two_ops_per_iteration() {
        let p = params(Kernel::Fixed, 64 * KIB, 64 * KIB);
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, 2 * p.iters);
        assert_eq!(
            rec.allocs.load(Ordering::Relaxed),
            p.iters + 1,
            "iterations plus the warm-up"
        );
    }

    #[test]
    fn realloc_resizes_within_range() {
        let p = params(Kernel::Realloc, 16, 4096);
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, p.iters);
        assert!(rec.reallocs.load(Ordering::Relaxed) > p.iters / 4);
    }

    #[test]
    fn mt_mixed_counts_iterations_of_every_thread() {
        let p = Params {
            threads: 3,
            ..params(Kernel::MtMixed, 16, 1024)
        };
        let (outcome, _) = run_recorded(&p);
        assert_eq!(outcome.ops, 3 * p.iters);
    }

    #[test]
    fn larson_counts_local_ops_plus_every_cross_thread_free() {
        // ws 50 fills most handoff batches; ws 10 (below the batch size)
        // makes each handoff's size depend on the whole history.
        for (threads, ws) in [(1, 50), (2, 50), (3, 50), (2, 10)] {
            let p = Params {
                threads,
                ws,
                ..params(Kernel::Larson, 16, 1024)
            };
            let (outcome, _) = run_recorded(&p);
            let (local, remote) = larson_expected_ops(&p);
            assert_eq!(local, threads as u64 * p.iters);
            assert!(
                remote >= local / 32,
                "{threads} threads, ws {ws}: only {remote} handed off"
            );
            assert_eq!(outcome.ops, local + remote, "{threads} threads, ws {ws}");
        }
    }

    #[test]
    fn prodcons_counts_alloc_and_free_of_every_block() {
        // Not a multiple of the batch size: the last partial batch counts too.
        let p = Params {
            iters: 5_001,
            ..params(Kernel::ProdCons, 16, 1024)
        };
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, 2 * p.iters);
        assert_eq!(
            rec.allocs.load(Ordering::Relaxed),
            p.iters + 2,
            "blocks plus two warm-ups"
        );
    }

    #[test]
    fn same_seed_requests_the_same_sizes() {
        let sizes = |seed| {
            let rec = Recorder::new();
            run(
                &rec,
                &Params {
                    seed,
                    ..params(Kernel::Mixed, 16, 100_000)
                },
            );
            (rec.allocs.load(Ordering::Relaxed), rec.min_size.load(Ordering::Relaxed))
        };
        assert_eq!(sizes(5), sizes(5));
        assert_ne!(sizes(5), sizes(6));
    }

    #[test]
    fn damaged_block_is_detected() {
        // SAFETY: 32 is a valid size; the block is freed with System.
        unsafe {
            let block = Block::alloc(&System, 32);
            assert!(block.is_intact());
            block.ptr.as_ptr().add(31).write(!block.tag());
            assert!(!block.is_intact());
            block.free(&System);
        }
    }

    #[test]
    fn presets_are_valid_and_uniquely_named() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(1 <= p.min && p.min <= p.max && p.max <= MAX_BLOCK_SIZE, "{}", p.name);
            assert!(p.ws >= 1 && p.iters >= 1, "{}", p.name);
            assert!(PRESETS[..i].iter().all(|q| q.name != p.name), "{} twice", p.name);
            assert!(std::ptr::eq(find(p.name).unwrap(), p));
        }
        for p in PRESETS {
            assert!(p.min >= p.kernel.min_size(), "{}", p.name);
            assert_eq!(
                p.kernel.threads(p.kernel.default_threads()),
                p.kernel.default_threads(),
                "{}",
                p.name
            );
        }
        assert_eq!(PRESETS.iter().filter(|p| p.in_default).count(), 15);
        assert!(find("nope").is_none());
    }

    #[test]
    fn pair_kernels_round_threads_down_to_whole_pairs() {
        for kernel in [Kernel::ProdCons, Kernel::Pacing] {
            let threads: Vec<usize> = [1, 2, 3, 4, 16, 17].map(|t| kernel.threads(t)).to_vec();
            assert_eq!(threads, [2, 2, 2, 4, 16, 16], "{kernel:?}");
        }
        assert_eq!(Kernel::Churn.threads(3), 3);
        assert_eq!(Kernel::Churn.default_threads(), 10);
        assert_eq!(Kernel::Huge.threads(8), 1);
    }

    #[test]
    fn prodcons_runs_one_channel_per_pair() {
        let p = Params {
            threads: 4,
            iters: 3_001,
            ..params(Kernel::ProdCons, 16, 1024)
        };
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, 2 * 2 * p.iters, "two pairs, alloc and free per block");
        assert_eq!(
            rec.allocs.load(Ordering::Relaxed),
            2 * p.iters + 4,
            "plus four warm-ups"
        );
    }

    /// Hands out blocks filled with 0xA5 and, when they come back, counts
    /// those whose inside (all but the stamped ends) is not all zero.
    #[derive(Default)]
    struct WriteChecker {
        blocks: AtomicU64,
        not_written: AtomicU64,
    }

    // SAFETY: forwards to System, which upholds the GlobalAlloc contract;
    // it only writes and reads inside blocks it hands out and gets back.
    unsafe impl GlobalAlloc for WriteChecker {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded with the caller's guarantees.
            let ptr = unsafe { System.alloc(layout) };
            if !ptr.is_null() {
                // SAFETY: a fresh block of layout.size() bytes.
                unsafe { ptr.write_bytes(0xA5, layout.size()) };
            }
            ptr
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.blocks.fetch_add(1, Ordering::Relaxed);
            // SAFETY: a live block of layout.size() bytes (caller).
            let inside = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
            let inside = &inside[1..layout.size() - 1];
            if inside.iter().any(|&b| b != 0) {
                self.not_written.fetch_add(1, Ordering::Relaxed);
            }
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[test]
    fn huge_counts_two_ops_per_replacement_and_writes_every_byte() {
        let p = Params {
            ws: 5,
            iters: 300,
            threads: 1,
            ..params(Kernel::Huge, 1000, 70_000)
        };
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, 2 * p.iters);
        assert_eq!(
            rec.allocs.load(Ordering::Relaxed),
            p.ws as u64 + p.iters,
            "the fill, then one per replacement"
        );
        assert_eq!(rec.max_live.load(Ordering::Relaxed), p.ws as u64, "a steady live set");
        let checker = WriteChecker::default();
        let outcome = run(&checker, &p);
        assert_eq!(outcome.errors, 0);
        assert_eq!(checker.blocks.load(Ordering::Relaxed), p.ws as u64 + p.iters);
        assert_eq!(
            checker.not_written.load(Ordering::Relaxed),
            0,
            "blocks not written in full"
        );
    }

    #[test]
    fn churn_counts_one_op_per_thread_and_callocs_every_block() {
        let p = Params {
            ws: 30,
            iters: 40,
            threads: 5,
            ..params(Kernel::Churn, CHURN_MIN_SIZE, 300)
        };
        let (outcome, rec) = run_recorded(&p);
        assert_eq!(outcome.ops, p.iters * p.threads as u64, "one op per thread");
        assert_eq!(rec.zeroed.load(Ordering::Relaxed), p.iters * p.threads as u64);
        assert_eq!(
            rec.allocs.load(Ordering::Relaxed),
            p.iters * p.threads as u64 + 1,
            "plus a warm-up"
        );
        // At most every slot plus what the threads of one round hold.
        assert!(rec.max_live.load(Ordering::Relaxed) <= (p.ws + 2 * p.threads) as u64);
    }

    #[test]
    fn rethread_counts_its_exchanges_and_frees_every_block() {
        let p = Params {
            ws: 40,
            iters: 6,
            threads: 3,
            ..params(Kernel::Rethread, CHURN_MIN_SIZE, 64 * 1024)
        };
        let (outcome, rec) = run_recorded(&p);
        let exchanges = p.iters * p.threads as u64 * RETHREAD_EXCHANGES;
        assert_eq!(outcome.ops, exchanges);
        assert_eq!(outcome.errors, 0);
        assert_eq!(rec.allocs.load(Ordering::Relaxed), exchanges + 1, "plus a warm-up");
        // At most every slot plus the block each running thread holds.
        assert!(rec.max_live.load(Ordering::Relaxed) <= (p.ws + p.threads + 1) as u64);
    }

    #[test]
    fn log_sizes_cover_every_exponent_and_stay_in_range() {
        let mut rng = Rng::new(7);
        let mut seen = [0u32; 20];
        for _ in 0..20_000 {
            let size = log_size(&mut rng, 24, 256 * 1024);
            assert!((24..=256 * 1024).contains(&size), "{size}");
            seen[size.ilog2() as usize] += 1;
        }
        // Exponents 4 (only 24-31) to 18 (only 256 KiB itself): each about
        // 20 000 / 15 times.
        for (exponent, &count) in seen.iter().enumerate().take(19).skip(4) {
            assert!((1_000..1_700).contains(&count), "2^{exponent}: {count}");
        }
        assert_eq!(log_size(&mut rng, 100, 100), 100);
    }

    /// `alloc_zeroed` that forgets to zero.
    struct DirtyCalloc;

    // SAFETY: forwards to System; the default alloc_zeroed is replaced by a
    // plain allocation filled with 0xFF, still a valid block.
    unsafe impl GlobalAlloc for DirtyCalloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: forwarded with the caller's guarantees.
            let ptr = unsafe { System.alloc(layout) };
            if !ptr.is_null() {
                // SAFETY: a fresh block of layout.size() bytes.
                unsafe { ptr.write_bytes(0xFF, layout.size()) };
            }
            ptr
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    #[test]
    fn churn_reports_a_calloc_that_does_not_zero() {
        let p = Params {
            ws: 10,
            iters: 3,
            threads: 2,
            ..params(Kernel::Churn, 128, 128)
        };
        assert_eq!(run(&DirtyCalloc, &p).errors, 6, "every block");
    }

    #[test]
    fn churn_header_survives_and_damage_is_detected() {
        // SAFETY: sizes within [CHURN_MIN_SIZE, MAX_BLOCK_SIZE]; each block is
        // freed once, with System, or leaked when damaged.
        unsafe {
            let (block, zeroed) = Block::calloc_sized(&System, 40);
            assert!(zeroed);
            let back = Block::from_sized(block.ptr, 24, 64).expect("intact");
            assert_eq!(back.size, 40);
            assert!(Block::from_sized(block.ptr, 41, 64).is_none(), "size out of range");
            block.ptr.as_ptr().add(8).write(!block.ptr.as_ptr().add(8).read());
            assert!(Block::from_sized(block.ptr, 24, 64).is_none(), "check word");
            block.ptr.as_ptr().add(8).write(!block.ptr.as_ptr().add(8).read());
            block.ptr.as_ptr().add(39).write(!block.tag());
            assert!(Block::from_sized(block.ptr, 24, 64).is_none(), "tag");
            block.free(&System);
        }
    }

    #[test]
    fn pacing_counts_two_ops_per_block_and_keeps_a_steady_live_set() {
        for threads in [2, 4] {
            let p = Params {
                ws: 50,
                iters: 5_000,
                threads,
                ..params(Kernel::Pacing, 16, 16 * KIB)
            };
            let pairs = (threads / 2) as u64;
            let (outcome, rec) = run_recorded(&p);
            assert_eq!(outcome.ops, 2 * p.iters * pairs, "{threads} threads");
            assert_eq!(rec.allocs.load(Ordering::Relaxed), p.iters * pairs + threads as u64);
            // A consumer frees its first block only with ws more behind it;
            // a ring holds at most 2 ws, plus the block its producer holds.
            let max_live = rec.max_live.load(Ordering::Relaxed);
            let ws = p.ws as u64;
            assert!(
                max_live > ws,
                "{threads} threads: live set never reached ws: {max_live}"
            );
            assert!(
                max_live <= pairs * (2 * ws + 1) + threads as u64,
                "{threads} threads: {max_live} live, more than the rings hold"
            );
        }
    }
}
