//! Local heaps (issue 17): build 1 M small nodes, then drop them all.
//!
//! Each variant builds a linked list of `NODES` 32-byte nodes one
//! allocation at a time, walks it once (the phase's work, and a check that
//! every node is there), then gets rid of it:
//!
//! * `local-destroy`: nodes from a `LocalHeap`, then `LocalHeap::destroy`
//!   (every block at once, O(pages));
//! * `local-free-each`: nodes from a `LocalHeap`, each freed through it,
//!   then the heap dropped;
//! * `bumpalo`: nodes from a fresh `bumpalo::Bump`, then the bump dropped
//!   (no per-node free: the usual Rust arena). Its chunks come from the
//!   global allocator (`System` here), fresh memory each time;
//! * `bumpalo-reset`: one `Bump` kept across repetitions and `reset` (its
//!   largest chunk kept, already faulted in): the arena at its best;
//! * `hakmem-global`: nodes from the thread heap (`Hakmem` as a
//!   `GlobalAlloc`), each freed;
//! * `system-global`: the same with `System` (glibc), for reference.
//!
//! Every repetition runs all variants in turn (interleaved, so that the
//! noise of a shared machine spreads over all of them) with a fresh heap or
//! bump; the report gives the median and minimum of the build, drop and
//! total times in ms. `REPS` sets the repetitions (default 31), `NODES`
//! the node count (default 1 000 000), `VARIANTS` (comma-separated) runs
//! only those (for instruction counts under callgrind).
//!
//! Run: `cargo bench -p hakmem-bench --bench local_heap`.

use bumpalo::Bump;
use hakmem_core::{Hakmem, LocalHeap};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::ptr;
use std::time::{Duration, Instant};

/// A list node of 32 bytes (a small size class).
#[repr(C)]
struct Node {
    next: *mut Node,
    value: u64,
    pad: [u64; 2],
}

const LAYOUT: Layout = Layout::new::<Node>();

/// Builds a list of `n` nodes with `alloc`; returns its head.
#[inline(always)]
fn build(n: usize, mut alloc: impl FnMut() -> *mut u8) -> *mut Node {
    let mut head: *mut Node = ptr::null_mut();
    for i in 0..n {
        let node = alloc() as *mut Node;
        assert!(!node.is_null());
        // SAFETY: node is a fresh block of LAYOUT's size and alignment.
        unsafe {
            node.write(Node {
                next: head,
                value: i as u64,
                pad: [0; 2],
            })
        };
        head = node;
    }
    head
}

/// Sums the list (every node touched once).
fn walk(mut node: *mut Node) -> u64 {
    let mut sum = 0u64;
    while !node.is_null() {
        // SAFETY: node is a live node of the list.
        unsafe {
            sum = sum.wrapping_add((*node).value);
            node = (*node).next;
        }
    }
    sum
}

/// Frees every node of the list with `free`.
fn free_each(mut node: *mut Node, mut free: impl FnMut(*mut u8)) {
    while !node.is_null() {
        // SAFETY: node is a live node, read before it is freed.
        let next = unsafe { (*node).next };
        free(node as *mut u8);
        node = next;
    }
}

struct Times {
    build: Duration,
    drop: Duration,
}

fn run(variant: &str, n: usize, kept_bump: &mut Bump) -> Times {
    let expect = (n as u64) * (n as u64 - 1) / 2;
    let t0 = Instant::now();
    let (t1, t2);
    match variant {
        "local-destroy" => {
            let heap = LocalHeap::new();
            let head = build(n, || heap.alloc(LAYOUT.size(), LAYOUT.align()));
            assert_eq!(black_box(walk(head)), expect);
            t1 = Instant::now();
            // SAFETY: no node is used after this.
            unsafe { heap.destroy() };
            t2 = Instant::now();
        }
        "local-free-each" => {
            let heap = LocalHeap::new();
            let head = build(n, || heap.alloc(LAYOUT.size(), LAYOUT.align()));
            assert_eq!(black_box(walk(head)), expect);
            t1 = Instant::now();
            // SAFETY: every node is a live block, freed once.
            free_each(head, |p| unsafe { heap.free(p) });
            drop(heap);
            t2 = Instant::now();
        }
        "bumpalo-reset" => {
            let head = build(n, || kept_bump.alloc_layout(LAYOUT).as_ptr());
            assert_eq!(black_box(walk(head)), expect);
            t1 = Instant::now();
            kept_bump.reset();
            t2 = Instant::now();
        }
        "bumpalo" => {
            let bump = Bump::new();
            let head = build(n, || bump.alloc_layout(LAYOUT).as_ptr());
            assert_eq!(black_box(walk(head)), expect);
            t1 = Instant::now();
            drop(bump);
            t2 = Instant::now();
        }
        "hakmem-global" | "system-global" => {
            let a: &dyn GlobalAlloc = if variant == "hakmem-global" { &Hakmem } else { &System };
            // SAFETY: LAYOUT has a non-zero size.
            let head = build(n, || unsafe { a.alloc(LAYOUT) });
            assert_eq!(black_box(walk(head)), expect);
            t1 = Instant::now();
            // SAFETY: every node is a live block of `a`, freed once.
            free_each(head, |p| unsafe { a.dealloc(p, LAYOUT) });
            t2 = Instant::now();
        }
        _ => unreachable!(),
    }
    Times {
        build: t1 - t0,
        drop: t2 - t1,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs once, small.
    let quick = std::env::args().all(|a| a != "--bench");
    let env = |name, default| std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    let reps: usize = env("REPS", if quick { 1 } else { 31 });
    let n: usize = env("NODES", if quick { 10_000 } else { 1_000_000 });
    let variants = [
        "local-destroy",
        "local-free-each",
        "bumpalo",
        "bumpalo-reset",
        "hakmem-global",
        "system-global",
    ];
    let only = std::env::var("VARIANTS").unwrap_or_default();
    let variants: Vec<&str> = variants
        .into_iter()
        .filter(|v| only.is_empty() || only.split(',').any(|o| o == *v))
        .collect();
    let mut kept_bump = Bump::new();
    let mut times: Vec<Vec<Times>> = variants.iter().map(|_| Vec::new()).collect();
    // One warm-up round: first-touch page faults of the process's first
    // segments go to nobody.
    for v in &variants {
        run(v, n, &mut kept_bump);
    }
    for _ in 0..reps {
        for (i, v) in variants.iter().enumerate() {
            times[i].push(run(v, n, &mut kept_bump));
        }
    }
    println!(
        "local_heap: {n} nodes of {} B, {reps} reps (median / min, ms)",
        LAYOUT.size()
    );
    println!("{:<16} {:>15} {:>15} {:>15}", "variant", "build", "drop", "total");
    for (i, v) in variants.iter().enumerate() {
        let col = |f: &dyn Fn(&Times) -> f64| {
            let xs: Vec<f64> = times[i].iter().map(f).collect();
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            format!("{:>7.2} / {:>5.2}", median(xs), min)
        };
        println!(
            "{:<16} {:>15} {:>15} {:>15}",
            v,
            col(&|t| ms(t.build)),
            col(&|t| ms(t.drop)),
            col(&|t| ms(t.build + t.drop)),
        );
    }
}
