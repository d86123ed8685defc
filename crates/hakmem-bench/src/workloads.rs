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
use std::sync::atomic::{AtomicUsize, Ordering};
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
/// producer blocks (at most 4096 live blocks, about 2 MiB at 16–1024 B).
const PRODCONS_BATCH: usize = 64;
const PRODCONS_DEPTH: usize = 64;

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
    /// A producer thread allocates, a consumer thread checks and frees, in
    /// batches through a bounded channel. One block is two operations.
    ProdCons,
    /// Random slot: allocate if empty, else free it (1 in 4) or `realloc` it
    /// to a new random size and check the contents moved.
    Realloc,
}

impl Kernel {
    /// The kernel's name on the `c/bench.c` command line.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Mixed => "mixed",
            Kernel::Fixed => "fixed",
            Kernel::MtMixed => "mt-mixed",
            Kernel::Larson => "larson",
            Kernel::ProdCons => "prodcons",
            Kernel::Realloc => "realloc",
        }
    }

    /// Whether the kernel keeps a working set (`--ws`); `Fixed` and
    /// `ProdCons` have none.
    pub fn uses_ws(self) -> bool {
        !matches!(self, Kernel::Fixed | Kernel::ProdCons)
    }

    /// The threads a run uses when `--threads` asks for `requested`: only
    /// `MtMixed` and `Larson` follow it; `ProdCons` is always one pair.
    pub fn threads(self, requested: usize) -> usize {
        match self {
            Kernel::MtMixed | Kernel::Larson => requested,
            Kernel::ProdCons => 2,
            Kernel::Mixed | Kernel::Fixed | Kernel::Realloc => 1,
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
    /// Iterations per thread. Chosen so that one run takes roughly 0.1 to
    /// 0.4 s on the 2-core development machine (long enough that timer and
    /// start-up noise vanish) and the default table (12 workloads x 4
    /// allocators x 5 reps = 240 runs) stays well under 5 minutes.
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
    preset("prodcons", Kernel::ProdCons, 16,       1024,      1,    2_000_000,  "one thread allocates, another frees"),
    Preset {
        in_default: false,
        ..preset("realloc", Kernel::Realloc, 16,     4 * KIB,   400,  4_000_000,  "realloc to random sizes (not in the default table)")
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
    /// Iterations (per thread for `MtMixed` and `Larson`).
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
/// Panics unless `1 <= min <= max <= MAX_BLOCK_SIZE` and `ws`, `threads`
/// are at least 1 (`cli` reports these as usage errors first): the kernels'
/// `unsafe` blocks rely on it.
pub fn run<A: GlobalAlloc + Sync>(a: &A, params: &Params) -> Outcome {
    let p = params;
    assert!(
        1 <= p.min && p.min <= p.max && p.max <= MAX_BLOCK_SIZE && p.ws >= 1 && p.threads >= 1,
        "invalid workload parameters {p:?}"
    );
    let runs = match params.kernel {
        Kernel::Mixed => vec![mixed(a, params, Rng::new(params.seed), None)],
        Kernel::Fixed => vec![fixed(a, params)],
        Kernel::Realloc => vec![realloc(a, params)],
        Kernel::MtMixed => mt_mixed(a, params),
        Kernel::Larson => larson(a, params),
        Kernel::ProdCons => prodcons(a, params),
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

fn prodcons<A: GlobalAlloc + Sync>(a: &A, p: &Params) -> Vec<ThreadRun> {
    let (full_tx, full_rx) = mpsc::sync_channel::<Vec<Block>>(PRODCONS_DEPTH);
    // Emptied batches go back to the producer, so the harness does not
    // allocate a Vec (from the system allocator) per batch.
    let (empty_tx, empty_rx) = mpsc::channel::<Vec<Block>>();
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let barrier = &barrier;
        let producer = s.spawn(move || {
            let mut rng = Rng::for_thread(p.seed, 0);
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
        });
        let consumer = s.spawn(move || {
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
        });
        vec![
            producer.join().expect("producer panicked"),
            consumer.join().expect("consumer panicked"),
        ]
    })
}

/// Replays larson's slot choices without allocating: every iteration is
/// one local operation and every block handed off is one remote free.
/// (A thread's slots depend only on its own stream, so this is exact;
/// `c/bench.c` must give the same count.)
#[cfg(test)]
pub(crate) fn larson_expected_ops(p: &Params) -> (u64, u64) {
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
        allocs: AtomicU64,
        frees: AtomicU64,
        reallocs: AtomicU64,
        min_size: AtomicUsize,
        max_size: AtomicUsize,
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
    }

    // SAFETY: forwards every call unchanged to System, which upholds the
    // GlobalAlloc contract; the counters do not touch the blocks.
    unsafe impl GlobalAlloc for Recorder {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.allocs.fetch_add(1, Ordering::Relaxed);
            self.saw(layout.size());
            // SAFETY: forwarded with the caller's guarantees.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.frees.fetch_add(1, Ordering::Relaxed);
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
        assert_eq!(PRESETS.iter().filter(|p| p.in_default).count(), 12);
        assert!(find("nope").is_none());
    }
}
