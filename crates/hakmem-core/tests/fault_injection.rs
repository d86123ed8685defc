//! Issue 23: the OS says no, at every call, and nothing breaks.
//!
//! Built only with `--cfg hakmem_fault_injection` (scripts/test does, in
//! `target/fault`, for the default and the `secure` build), where hakmem's
//! OS layer can refuse the N-th call of a kind (`mmap`, `munmap`,
//! `madvise` purges and advice, `mprotect`, `mremap`, thread keys,
//! `getrandom`, the `dlopen` that pins hakmem), or each call with a
//! probability (os/fault.rs).
//!
//! A scripted workload (`workload`) touches every path: small, medium,
//! large and huge blocks, over-aligned ones, zeroed ones, `realloc`
//! growing and shrinking in place and by a move, local heaps (destroyed
//! and dropped), frees by another thread, threads that exit, and
//! `collect(true)` (C's `malloc_trim`). Every operation must either
//! succeed with the right contents (zeroed memory zero, `realloc` keeping
//! the bytes) or return null with `errno == ENOMEM` and change nothing
//! (a failed `realloc` leaves its block as it was); nothing may crash,
//! abort or hang. When the failures stop, the same workload must succeed
//! throughout, and the counters must come back to where they started:
//! no page, huge block or heap left in use, no segment left owned.
//!
//! * `every_nth_call_of_each_kind_fails_in_turn`: for each kind and every
//!   N from 1 until the workload makes fewer than N calls of it, a child
//!   process runs the workload with the N-th call failing.
//! * `one_call_in_a_hundred_fails`: a child runs the workload on three
//!   threads at once, over and over, for 30 s (`STRESS_SECONDS`), with 1 %
//!   of every kind of call failing (several seeds), the heap profiler
//!   sampling at its smallest rate and each thread writing a profile
//!   every fourth round (samples that get no span or no table, dumps that
//!   get no buffer).
//!
//! The binary keeps `System` as its global allocator: hakmem serves only
//! what the workload asks of it, and the test's own bookkeeping never
//! meets an injected failure.
#![cfg(hakmem_fault_injection)]

use hakmem_core::fault::{self, Call, CALLS};
use hakmem_core::LocalHeap;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A block the workload holds: where, how many bytes, and the seed of its
/// pattern.
#[derive(Clone, Copy)]
struct Held {
    p: usize,
    size: usize,
    seed: usize,
}

fn byte(seed: usize, i: usize) -> u8 {
    (seed.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8 | 1
}

/// Bytes of `size` the checks look at: the first and last 64 and one per
/// 4 KiB between (every page a block touches).
fn probes(size: usize) -> impl Iterator<Item = usize> {
    (0..size.min(64))
        .chain((64..size).step_by(4096))
        .chain(size.saturating_sub(64)..size)
}

fn fill(h: Held) {
    for i in probes(h.size) {
        // SAFETY: h is a live block of h.size bytes.
        unsafe { *(h.p as *mut u8).add(i) = byte(h.seed, i) };
    }
}

/// Checks the bytes `fill` wrote in `h` (as a block of `h.size` bytes)
/// below `upto`.
fn check(h: Held, upto: usize, what: &str) -> Result<(), String> {
    for i in probes(h.size).filter(|&i| i < upto) {
        // SAFETY: h is a live block of at least upto bytes.
        let b = unsafe { *(h.p as *const u8).add(i) };
        if b != byte(h.seed, i) {
            return Err(format!(
                "{what}: block {:#x} of {} bytes: byte {i} is {b:#x}",
                h.p, h.size
            ));
        }
    }
    Ok(())
}

/// The outcome of an allocation: the block, or None after checking that
/// the failure is a clean one (null and `ENOMEM`).
fn got(p: *mut u8, what: &str) -> Result<Option<usize>, String> {
    if p.is_null() {
        let e = hakmem_core::os_errno();
        if e != libc::ENOMEM {
            return Err(format!("{what}: null with errno {e}, not ENOMEM"));
        }
        return Ok(None);
    }
    Ok(Some(p as usize))
}

/// Allocates `size` bytes aligned to `align` (zeroed when `zeroed`),
/// checks and fills it; None when refused (cleanly).
fn allocate(size: usize, align: usize, zeroed: bool, seed: usize) -> Result<Option<Held>, String> {
    hakmem_core::os_errno_reset();
    let p = if zeroed {
        hakmem_core::alloc_zeroed(size, align)
    } else {
        hakmem_core::alloc(size, align)
    };
    let Some(p) = got(p, &format!("alloc({size}, {align})"))? else {
        return Ok(None);
    };
    if p % align != 0 {
        return Err(format!("alloc({size}, {align}) = {p:#x}: misaligned"));
    }
    if zeroed {
        for i in probes(size) {
            // SAFETY: p is a live block of size bytes.
            let b = unsafe { *(p as *const u8).add(i) };
            if b != 0 {
                return Err(format!("alloc_zeroed({size}) = {p:#x}: byte {i} is {b:#x}"));
            }
        }
    }
    let h = Held { p, size, seed };
    fill(h);
    Ok(Some(h))
}

fn release(h: Held) -> Result<(), String> {
    check(h, h.size, "before free")?;
    // SAFETY: a live block of this allocator, freed once.
    unsafe { hakmem_core::free(h.p as *mut u8) };
    Ok(())
}

/// `realloc` of `h` to `new_size`: the new block keeps the bytes; a
/// refusal leaves `h` as it was.
fn resize(h: Held, new_size: usize, align: usize) -> Result<Held, String> {
    hakmem_core::os_errno_reset();
    // SAFETY: h is a live block allocated with align.
    let q = unsafe { hakmem_core::realloc(h.p as *mut u8, new_size, align) };
    match got(q, &format!("realloc({}, {new_size})", h.size))? {
        None => {
            check(h, h.size, "a refused realloc's block")?;
            Ok(h)
        }
        Some(q) => {
            // The old block's bytes, where they are now.
            check(Held { p: q, ..h }, new_size, "realloc's copy")?;
            let h2 = Held {
                p: q,
                size: new_size,
                seed: h.seed,
            };
            fill(h2);
            Ok(h2)
        }
    }
}

/// Sizes of every kind: small, medium, large, huge in the arena, huge of
/// its own (above the arena's 64 MiB; `secure`, which has no arena and
/// copies on `realloc`, stays below: every huge block is a mapping of its
/// own there already).
const SIZES: [usize; 10] = [
    16,
    100,
    1000,
    5000,
    40_000,
    300_000,
    1_500_000,
    3 << 20,
    9 << 20,
    if cfg!(feature = "secure") { 12 << 20 } else { 80 << 20 },
];

/// `realloc`s: within the block, across classes, large and huge, growing
/// and shrinking (in place, by `mremap`, by a copy).
const RESIZES: &[(usize, usize)] = if cfg!(feature = "secure") {
    &[
        (100, 110),
        (100, 3000),
        (3000, 100),
        (200_000, 900_000),
        (900_000, 150_000),
        (3 << 20, 12 << 20),
        (12 << 20, 5 << 20),
    ]
} else {
    &[
        (100, 110),
        (100, 3000),
        (3000, 100),
        (200_000, 900_000),
        (900_000, 150_000),
        (3 << 20, 12 << 20),
        (12 << 20, 5 << 20),
        (5 << 20, 100 << 20),
        (100 << 20, 70 << 20),
        (80 << 20, 200 << 20),
        (200 << 20, 90 << 20),
    ]
};

/// The scripted workload. `round` varies the seeds.
fn workload(round: usize) -> Result<(), String> {
    let mut held: Vec<Held> = Vec::new();
    let mut seed = round * 1000;
    let mut next = || {
        seed += 1;
        seed
    };
    // Every size, plain and zeroed, and over-aligned.
    for &size in &SIZES {
        for zeroed in [false, true] {
            if let Some(h) = allocate(size, 16, zeroed, next())? {
                held.push(h);
            }
        }
    }
    for align in [64, 4096, 64 << 10, 1 << 20, 4 << 20] {
        for size in [24, 5000, 200_000] {
            if let Some(h) = allocate(size, align, false, next())? {
                held.push(h);
            }
        }
    }
    // Many small blocks (pages fill up and are parked), half freed.
    let mut small = Vec::new();
    for i in 0..600 {
        if let Some(h) = allocate(16 + (i * 37) % 1000, 16, i % 5 == 0, next())? {
            small.push(h);
        }
    }
    for (i, h) in small.drain(..).enumerate() {
        if i % 2 == 0 {
            release(h)?;
        } else {
            held.push(h);
        }
    }
    for &(from, to) in RESIZES {
        if let Some(h) = allocate(from, 16, false, next())? {
            held.push(resize(h, to, 16)?);
        }
    }
    // Local heaps: one destroyed with its blocks live, one dropped.
    if let Some(heap) = LocalHeap::try_new() {
        for &size in &SIZES[..8] {
            hakmem_core::os_errno_reset();
            let p = heap.alloc(size, 16);
            if let Some(p) = got(p, "LocalHeap::alloc")? {
                fill(Held { p, size, seed: next() });
            }
        }
        // SAFETY: nothing of the heap is used after this.
        unsafe { heap.destroy() };
    }
    if let Some(heap) = LocalHeap::try_new() {
        for &size in &SIZES[..8] {
            hakmem_core::os_errno_reset();
            let p = heap.alloc(size, 16);
            if let Some(p) = got(p, "LocalHeap::alloc")? {
                let h = Held { p, size, seed: next() };
                fill(h);
                held.push(h);
            }
        }
        drop(heap);
    }
    // Another thread's blocks freed here, and blocks of this thread freed
    // there; the thread exits.
    let (to_main, from_thread) = mpsc::channel::<Result<Vec<(usize, usize, usize)>, String>>();
    let (to_thread, from_main) = mpsc::channel::<Vec<(usize, usize, usize)>>();
    let give: Vec<Held> = held.drain(..held.len() / 3).collect();
    let base = next() * 100;
    let other = std::thread::spawn(move || -> Result<(), String> {
        let mut out = Vec::new();
        let mut result = Ok(());
        for (i, &size) in SIZES.iter().enumerate() {
            match allocate(size, 16, false, base + i) {
                Ok(Some(h)) => out.push((h.p, h.size, h.seed)),
                Ok(None) => {}
                Err(e) => result = Err(e),
            }
        }
        to_main.send(result.map(|()| out)).unwrap();
        for (p, size, seed) in from_main.recv().unwrap() {
            release(Held { p, size, seed })?;
        }
        Ok(())
    });
    to_thread
        .send(give.iter().map(|h| (h.p, h.size, h.seed)).collect())
        .unwrap();
    for (p, size, seed) in from_thread.recv().unwrap()? {
        held.push(Held { p, size, seed });
    }
    other.join().unwrap()?;
    // Threads that allocate a little and exit.
    let exits: Vec<_> = (0..3)
        .map(|t| {
            std::thread::spawn(move || -> Result<(), String> {
                for i in 0..50 {
                    if let Some(h) = allocate(16 + i * 13, 16, false, t * 100 + i)? {
                        release(h)?;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for t in exits {
        t.join().unwrap()?;
    }
    hakmem_core::collect(true);
    for h in held {
        release(h)?;
    }
    hakmem_core::collect(true);
    Ok(())
}

/// What the counters must come back to.
#[derive(Debug, PartialEq, Eq)]
struct Level {
    pages: usize,
    huge: usize,
    heaps: usize,
    owned_segments: usize,
}

fn level() -> Level {
    let s = hakmem_core::stats();
    Level {
        pages: s.pages_in_use,
        huge: s.huge_in_use,
        heaps: s.heaps_in_use,
        owned_segments: s.segments_mapped - s.segments_cached - s.segments_abandoned,
    }
}

/// After the failures: the workload again, all of it succeeding, then the
/// counters where a process that has freed everything has them — no page
/// or huge block in use, the main thread's heap alone, owning at most the
/// one segment a heap keeps (heaps of threads whose exit hook could not be
/// registered are found once those threads are gone: `collect(true)`).
fn settle_and_check() -> Result<(), String> {
    workload(7)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        hakmem_core::collect(true);
        let now = level();
        if now.pages == 0 && now.huge == 0 && now.heaps == 1 && now.owned_segments <= 1 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("counters after the workload: {now:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process's first allocation (its set-up: thread key, fork handlers,
/// the pin, `secure`'s secret), under the plan like the rest.
fn first_allocation() -> Result<(), String> {
    hakmem_core::os_errno_reset();
    if let Some(p) = got(hakmem_core::malloc(16), "the first malloc")? {
        // SAFETY: a block of this allocator, freed once.
        unsafe { hakmem_core::free(p as *mut u8) };
    }
    Ok(())
}

/// The child: runs the plan in `FAULT_PLAN` (`nth:<kind>:<n>` or
/// `random:<per million>:<seed>:<seconds>`), prints what happened.
#[test]
#[ignore = "run as a child by the tests below"]
fn fault_child() {
    let plan = std::env::var("FAULT_PLAN").expect("FAULT_PLAN");
    let fields: Vec<&str> = plan.split(':').collect();
    let outcome = match fields[..] {
        ["nth", kind, n] => {
            let kind = Call::named(kind).expect("a kind");
            fault::fail_nth(&[kind], n.parse().unwrap());
            let r = first_allocation().and_then(|()| workload(1));
            fault::stop();
            println!("calls={} injected={}", fault::calls(kind), fault::injected());
            r
        }
        ["random", per_million, seed, seconds] => {
            let seconds: u64 = seconds.parse().unwrap();
            // The heap profiler on at its smallest rate (the default build;
            // `secure` never samples): its samples' spans, its tables'
            // mapping and its dumps' buffers meet the failures too.
            hakmem_core::profile::start(hakmem_core::profile::MIN_RATE);
            let dump_dir = std::env::temp_dir().join(format!("hakmem-fault-{}", std::process::id()));
            std::fs::create_dir_all(&dump_dir).unwrap();
            fault::fail_randomly(&CALLS, per_million.parse().unwrap(), seed.parse().unwrap());
            first_allocation().unwrap_or_else(|e| panic!("{plan}: {e}"));
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let workers: Vec<_> = (0..3)
                .map(|w| {
                    let path = dump_dir.join(format!("heap-{w}.pb.gz"));
                    std::thread::spawn(move || -> Result<usize, String> {
                        let mut rounds = 0;
                        while Instant::now() < deadline {
                            workload(w * 1_000_000 + rounds)?;
                            // A dump may fail (no memory for its buffers),
                            // never crash or hang.
                            if rounds % 4 == 0 {
                                let _ = hakmem_core::profile::dump(path.to_str().unwrap().as_bytes());
                            }
                            rounds += 1;
                        }
                        Ok(rounds)
                    })
                })
                .collect();
            let mut r = Ok(());
            let mut rounds = 0;
            for w in workers {
                match w.join().unwrap() {
                    Ok(n) => rounds += n,
                    Err(e) => r = Err(e),
                }
            }
            fault::stop();
            hakmem_core::profile::stop();
            std::fs::remove_dir_all(&dump_dir).ok();
            let profile = hakmem_core::profile::profile_stats();
            println!(
                "rounds={rounds} injected={} stacks={} dropped={}",
                fault::injected(),
                profile.stacks,
                profile.dropped
            );
            r
        }
        _ => panic!("bad FAULT_PLAN {plan}"),
    };
    if let Err(e) = outcome.and_then(|()| settle_and_check()) {
        panic!("{plan}: {e}");
    }
    println!("settled");
}

/// Runs the child with `plan`; its stdout, after checking it ended well.
fn run_child(plan: &str, limit: Duration) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "fault_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("FAULT_PLAN", plan)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{plan}: the child hung\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.contains("settled"),
        "{plan}: the child failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn number(stdout: &str, key: &str) -> usize {
    let at = stdout
        .find(&format!("{key}="))
        .unwrap_or_else(|| panic!("{key} in {stdout}"))
        + key.len()
        + 1;
    stdout[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn every_nth_call_of_each_kind_fails_in_turn() {
    let mut summary = Vec::new();
    for kind in CALLS {
        let mut n = 1;
        loop {
            let stdout = run_child(&format!("nth:{}:{n}", kind.name()), Duration::from_secs(60));
            let calls = number(&stdout, "calls");
            if number(&stdout, "injected") == 0 {
                assert!(calls < n, "{}: call {n} of {calls} was not refused", kind.name());
                summary.push(format!("{} {}", kind.name(), n - 1));
                break;
            }
            n += 1;
        }
    }
    eprintln!("calls refused in turn: {}", summary.join(", "));
}

#[test]
fn one_call_in_a_hundred_fails() {
    let seconds: u64 = std::env::var("STRESS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let seeds = 3;
    let each = seconds.div_ceil(seeds).max(1);
    let (mut injected, mut stacks) = (0, 0);
    for seed in 1..=seeds {
        let stdout = run_child(&format!("random:10000:{seed}:{each}"), Duration::from_secs(each + 120));
        injected += number(&stdout, "injected");
        stacks += number(&stdout, "stacks");
    }
    assert!(injected > 0, "failures were injected");
    assert_eq!(
        stacks > 0,
        !cfg!(feature = "secure"),
        "the profiler sampled (but in the secure build)"
    );
}
