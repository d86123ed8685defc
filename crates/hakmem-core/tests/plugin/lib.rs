//! A plugin: a Rust cdylib with `Hakmem` as its global allocator, as a
//! Python extension module or any other `dlopen`ed Rust library would be.
//! tests/dlopen_plugins.rs builds it, with and without hakmem-core's
//! `dlopen-tls` feature, and loads 100 copies of it from a C host.

use hakmem_core::Hakmem;
use std::sync::mpsc;
use std::thread;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// One thread's work: blocks of sizes from 16 B to 320 KiB (small, medium
/// and large), each filled with one byte; every other one is sent to
/// the next thread, which checks and frees it (a cross-thread free), the
/// rest are checked and freed here.
/// Returns the blocks checked, or `None` on a wrong byte or a block that is
/// not hakmem's.
fn work(seed: u64, to_next: mpsc::Sender<Vec<u8>>, from_previous: mpsc::Receiver<Vec<u8>>) -> Option<u64> {
    let mut x = seed | 1;
    let mut kept = Vec::new();
    for i in 0..100u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let size = match i % 50 {
            49 => 64 * 1024 + (x % (256 << 10)) as usize,
            _ => 16 + (x % 2048) as usize,
        };
        let fill = (x >> 32) as u8;
        let block = vec![fill; size];
        if !hakmem_core::is_hakmem_segment(block.as_ptr()) {
            return None;
        }
        if i % 2 == 0 {
            to_next.send(block).ok()?;
        } else {
            kept.push(block);
        }
    }
    drop(to_next);
    let received: Vec<Vec<u8>> = from_previous.iter().collect();
    let mut checked = 0;
    for block in kept.iter().chain(received.iter()) {
        if block.iter().any(|&b| b != block[0]) {
            return None;
        }
        checked += 1;
    }
    Some(checked)
}

/// Runs `work` on `threads` threads (at least 2) in a ring. Returns the
/// blocks checked in all, or 0 when one was wrong.
#[no_mangle]
pub extern "C" fn plugin_run(seed: u64, threads: u32) -> u64 {
    let threads = threads.max(2) as usize;
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel()).unzip();
    let mut receivers: Vec<Option<mpsc::Receiver<Vec<u8>>>> = receivers.into_iter().map(Some).collect();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let to_next = senders[(t + 1) % threads].clone();
            let from_previous = receivers[t].take().unwrap();
            thread::spawn(move || work(seed.wrapping_add(t as u64), to_next, from_previous))
        })
        .collect();
    drop(senders);
    let mut total = 0;
    for h in handles {
        match h.join() {
            Ok(Some(n)) => total += n,
            _ => return 0,
        }
    }
    total
}

/// The headline loop through `GlobalAlloc`, for docs/BENCHMARKS.md ("TLS
/// in a dlopen'ed library"): `iters` operations on 400 slots, each freeing
/// its slot's block if it holds one, else allocating 16..=1024 bytes and
/// writing a byte of them (xorshift64, seed fixed). Returns the nanoseconds
/// the loop took.
#[no_mangle]
pub extern "C" fn plugin_mixed(iters: u64) -> u64 {
    use std::alloc::{GlobalAlloc, Layout};
    let mut slots = [(std::ptr::null_mut::<u8>(), 0usize); 400];
    let mut x: u64 = 88172645463325252;
    let start = std::time::Instant::now();
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let slot = &mut slots[(x % 400) as usize];
        if slot.0.is_null() {
            let size = 16 + ((x >> 20) % 1009) as usize;
            // SAFETY: the size is non-zero and the alignment a power of two.
            let p = unsafe { GLOBAL.alloc(Layout::from_size_align_unchecked(size, 8)) };
            // SAFETY: p is a live block of `size` bytes (null aborts: a
            // benchmark has no use for a recovery).
            unsafe { std::ptr::write_volatile(p, 1) };
            *slot = (p, size);
        } else {
            // SAFETY: the block was allocated above with this layout.
            unsafe { GLOBAL.dealloc(slot.0, Layout::from_size_align_unchecked(slot.1, 8)) };
            slot.0 = std::ptr::null_mut();
        }
    }
    let ns = start.elapsed().as_nanos() as u64;
    for (p, size) in slots {
        if !p.is_null() {
            // SAFETY: as above.
            unsafe { GLOBAL.dealloc(p, Layout::from_size_align_unchecked(size, 8)) };
        }
    }
    ns
}

/// Allocates and frees `size` bytes through `Hakmem` on the calling
/// thread and returns the sum of the bytes (`size`): the thread gets a
/// heap (and hakmem's thread-exit hook) and nothing else of the plugin's
/// — no thread-local of std, whose destructors would keep the plugin
/// loaded until the thread exits (tests/dlopen_plugins.rs, unloading).
#[no_mangle]
pub extern "C" fn plugin_touch(size: usize) -> u64 {
    let v = std::hint::black_box(vec![1u8; size]);
    v.iter().map(|&b| u64::from(b)).sum()
}

/// Issue 22, hole 7: eight floating-point values live across an
/// allocation through `Hakmem` (its fast path inlined here, as in any
/// program), on the calling thread's first allocation. With `dlopen-tls`,
/// and the plugin's TLS placed dynamically, that first access runs glibc's
/// `_dl_tlsdesc_dynamic`, which (before glibc 2.40) does not save vector
/// registers around the `malloc` it may call. Returns the values' sum
/// after the allocation (the caller compares with the same sum computed
/// again: they differ when the registers were not restored).
#[no_mangle]
pub extern "C" fn plugin_floats_across_alloc(seed: f64) -> f64 {
    use std::alloc::{GlobalAlloc, Layout};
    use std::hint::black_box;
    let x = black_box(seed);
    let (a, b, c, d) = (x * 1.5, x + 2.25, x * x, x - 0.125);
    let (e, f, g, h) = (a * b, c + d, a - c, b * d);
    let layout = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: a non-zero size; the block is freed below with its layout.
    let p = unsafe { GLOBAL.alloc(layout) };
    black_box(p);
    let sum = a + b + c + d + e + f + g + h;
    if !p.is_null() {
        // SAFETY: as above.
        unsafe { GLOBAL.dealloc(p, layout) };
    }
    sum
}
