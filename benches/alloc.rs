//! Criterion micro-benchmarks of single allocator operations: hakmem,
//! `System` and mimalloc side by side in each group, each called through
//! `GlobalAlloc` on the identical code.
//!
//! Groups: `malloc_free/<size>` (one allocate/touch/free pair per size
//! class), `realloc_growth` (a buffer grown from 16 B to 64 KiB by doubling),
//! `cross_thread_free` (batches allocated here and freed by another thread,
//! the remote-free path). Kept short (0.5 s warm-up, 1 s measurement, 20
//! samples) so `cargo bench -p hakmem-bench` finishes in about a minute on
//! 2 cores; pass criterion options after `--` for longer runs. For whole
//! workloads and ratios from interleaved runs, use the `hakmem-bench` binary.
//!
//! This file lives at the workspace root (`benches/`) and is registered by
//! `crates/hakmem-bench/Cargo.toml`.

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use hakmem_core::Hakmem;
use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One size per class range of BENCHMARKING.md's workloads.
const SIZES: [usize; 6] = [16, 64, 256, 1024, 4096, 32768];

/// `realloc_growth` doubles from this size up to `GROWTH_TO`.
const GROWTH_FROM: usize = 16;
const GROWTH_TO: usize = 64 * 1024;

/// `cross_thread_free`: blocks per batch sent to the freeing thread, and
/// their size.
const BATCH: usize = 64;
const BATCH_BLOCK_SIZE: usize = 64;

/// Alignment requested everywhere (as the `hakmem-bench` workloads do).
const ALIGN: usize = 8;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, ALIGN).expect("valid layout")
}

/// Runs `bench` once per allocator under test, in a fixed order.
macro_rules! for_each_allocator {
    ($group:expr, $bench:ident $(, $arg:expr)*) => {
        $bench($group, "hakmem", &Hakmem $(, $arg)*);
        $bench($group, "system", &System $(, $arg)*);
        $bench($group, "mimalloc", &MiMalloc $(, $arg)*);
    };
}

fn malloc_free(c: &mut Criterion) {
    for size in SIZES {
        let mut group = c.benchmark_group(format!("malloc_free/{size}"));
        group.throughput(Throughput::Elements(1));
        for_each_allocator!(&mut group, malloc_free_pair, size);
        group.finish();
    }
}

fn malloc_free_pair<A: GlobalAlloc>(group: &mut BenchmarkGroup<WallTime>, name: &str, a: &A, size: usize) {
    let layout = layout(size);
    group.bench_function(name, |b| {
        b.iter(|| {
            // SAFETY: the layout is non-empty; the block is written inside its
            // bounds and freed once, by the allocator that returned it.
            unsafe {
                let p = black_box(a.alloc(layout));
                assert!(!p.is_null(), "allocation failed");
                p.write(1);
                p.add(size - 1).write(2);
                a.dealloc(black_box(p), layout);
            }
        })
    });
}

fn realloc_growth(c: &mut Criterion) {
    let mut group = c.benchmark_group("realloc_growth");
    // One element is one grow-and-free sequence.
    group.throughput(Throughput::Elements(1));
    for_each_allocator!(&mut group, grow);
    group.finish();
}

fn grow<A: GlobalAlloc>(group: &mut BenchmarkGroup<WallTime>, name: &str, a: &A) {
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut size = GROWTH_FROM;
            // SAFETY: every layout is non-empty; each realloc gets the block
            // with the layout it was last given, writes stay inside the new
            // size, and the final block is freed once with its layout.
            unsafe {
                let mut p = black_box(a.alloc(layout(size)));
                assert!(!p.is_null(), "allocation failed");
                p.write(1);
                while size < GROWTH_TO {
                    p = black_box(a.realloc(p, layout(size), size * 2));
                    assert!(!p.is_null(), "realloc failed");
                    size *= 2;
                    p.add(size - 1).write(2);
                }
                a.dealloc(p, layout(size));
            }
        })
    });
}

fn cross_thread_free(c: &mut Criterion) {
    let mut group = c.benchmark_group("cross_thread_free");
    group.throughput(Throughput::Elements(BATCH as u64));
    for_each_allocator!(&mut group, remote_batches);
    group.finish();
}

/// Allocates batches of `BATCH` blocks on this thread and sends them to a
/// thread that frees them; the time includes waiting for the last batch to
/// be freed. Emptied batch vectors come back for reuse, so the harness does
/// not allocate (from the system allocator) per batch.
fn remote_batches<A: GlobalAlloc + Sync>(group: &mut BenchmarkGroup<WallTime>, name: &str, a: &A) {
    let layout = layout(BATCH_BLOCK_SIZE);
    let (full_tx, full_rx) = mpsc::sync_channel::<Vec<usize>>(4);
    let (empty_tx, empty_rx) = mpsc::channel::<Vec<usize>>();
    std::thread::scope(|s| {
        s.spawn(move || {
            for mut batch in full_rx {
                for p in batch.drain(..) {
                    // SAFETY: p came from `a.alloc(layout)` on the bench
                    // thread and is freed exactly once, here.
                    unsafe { a.dealloc(p as *mut u8, layout) };
                }
                if empty_tx.send(batch).is_err() {
                    break;
                }
            }
        });
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut spare: Vec<Vec<usize>> = Vec::new();
                let mut in_flight = 0usize;
                let start = Instant::now();
                for _ in 0..iters {
                    let mut batch = spare.pop().unwrap_or_else(|| Vec::with_capacity(BATCH));
                    for _ in 0..BATCH {
                        // SAFETY: the layout is non-empty; the write is inside
                        // the block; the freeing thread frees it.
                        let p = unsafe { a.alloc(layout) };
                        assert!(!p.is_null(), "allocation failed");
                        // SAFETY: p is a live block of BATCH_BLOCK_SIZE >= 1 bytes.
                        unsafe { p.write(1) };
                        batch.push(p as usize);
                    }
                    full_tx.send(batch).expect("freeing thread alive");
                    in_flight += 1;
                    spare.extend(empty_rx.try_iter().inspect(|_| in_flight -= 1));
                }
                while in_flight > 0 {
                    spare.push(empty_rx.recv().expect("freeing thread alive"));
                    in_flight -= 1;
                }
                start.elapsed()
            })
        });
        drop(full_tx);
    });
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
}

criterion_group! {
    name = benches;
    config = config();
    targets = malloc_free, realloc_growth, cross_thread_free
}
criterion_main!(benches);
