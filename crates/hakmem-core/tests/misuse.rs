//! Misuse is reported, not silently absorbed: each scenario runs in a child
//! process (this test binary re-executed with `MISUSE_SCENARIO=<name>`), which
//! must die with SIGABRT after a `hakmem:` message naming the function and
//! the pointer — or, with `HAKMEM_ON_ERROR=warn`, print it and carry on.
//!
//! The `secure` build's hardening (heap overflows and underflows, writes
//! after free, delayed reuse, no old data) has its scenarios below
//! (`hardening`), each at six block sizes (`hardening::SIZES`): small,
//! medium (in spans of one unit and of several) and huge. A child either dies with SIGABRT after the `hakmem:` report,
//! or — where the misuse runs into a guard page — with SIGSEGV inside the
//! misusing write itself ("fails at once").

use hakmem_core::Hakmem;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// Tells the parent which block a scenario misuses: `block 0x<16 hex
/// digits>` on stderr, the form of hakmem's reports.
fn say_block(p: *mut u8) {
    eprintln!("block {:#018x}", p as usize);
}

/// The block a child named with `say_block`, in hakmem's form.
fn said_block(stderr: &str) -> &str {
    let at = stderr.find("block 0x").expect("the scenario names its block") + "block ".len();
    &stderr[at..at + 18]
}

/// Runs one misuse scenario in this process (called in the child).
fn scenario(name: &str) {
    // SAFETY: deliberately not: each scenario misuses the API; the process
    // is expected to abort before undefined behaviour can spread.
    unsafe {
        match name {
            "double-free-immediate" => {
                let p = hakmem_core::malloc(100);
                hakmem_core::free(p);
                hakmem_core::free(p);
            }
            "double-free-delayed" => {
                let p = hakmem_core::malloc(100);
                let others: Vec<_> = (0..50).map(|_| hakmem_core::malloc(100)).collect();
                hakmem_core::free(p);
                for q in others {
                    hakmem_core::free(q);
                }
                hakmem_core::free(p);
            }
            "double-free-remote" => {
                let p = hakmem_core::malloc(3000) as usize;
                hakmem_core::free(p as *mut u8);
                std::thread::spawn(move || hakmem_core::free(p as *mut u8))
                    .join()
                    .unwrap();
            }
            // Freed twice by a thread that holds the first free back in
            // its remote batch (it has a heap of its own to batch in).
            "double-free-batched" => {
                let p = hakmem_core::malloc(100) as usize;
                std::thread::spawn(move || {
                    hakmem_core::free(hakmem_core::malloc(16));
                    hakmem_core::free(p as *mut u8);
                    hakmem_core::free(p as *mut u8);
                })
                .join()
                .unwrap();
            }
            "double-free-large" => {
                let p = hakmem_core::malloc(300_000);
                say_block(p);
                hakmem_core::free(p);
                hakmem_core::free(p);
            }
            "double-free-huge" => {
                let p = hakmem_core::malloc(5 << 20);
                say_block(p);
                hakmem_core::free(p);
                hakmem_core::free_checked(p);
            }
            // Freed twice with a purge in between (`malloc_trim`): of the
            // huge arena's units, or of a cached mapping of its own (above
            // the arena's 64 MiB), whose purge must not erase the freed
            // mark.
            "double-free-huge-purged" | "double-free-huge-mapping-purged" => {
                let size = if name == "double-free-huge-purged" {
                    5 << 20
                } else {
                    80 << 20
                };
                let p = hakmem_core::malloc(size);
                say_block(p);
                p.write_bytes(1, size);
                hakmem_core::free(p);
                hakmem_core::collect(true);
                hakmem_core::free_checked(p);
            }
            "interior-pointer" => {
                let p = hakmem_core::malloc(100);
                hakmem_core::free_checked(p.add(8));
            }
            // Inside a huge block, at a power-of-two offset from its header
            // (where other alignments place their blocks).
            "huge-interior-pointer" => {
                let p = hakmem_core::malloc(5 << 20);
                hakmem_core::free_checked(p.add(64 << 10));
            }
            "huge-interior-aligned" => {
                let p = hakmem_core::alloc(5 << 20, 256 << 10);
                hakmem_core::free_checked(p.add(256 << 10));
            }
            "huge-interior-realloc" => {
                let p = hakmem_core::malloc(5 << 20);
                if hakmem_core::check_block(p.add(192 << 10), "realloc") {
                    std::process::exit(3);
                }
            }
            "stack-pointer" => {
                let x = 5u64;
                hakmem_core::free_checked(&x as *const u64 as *mut u8);
            }
            "garbage-pointer" => hakmem_core::free_checked(0x1234_5678 as *mut u8),
            // Outside the user address space but equal, below bit 47, to a
            // live block: shares that block's segment-map slot.
            "high-alias-pointer" => {
                let p = hakmem_core::malloc(100);
                hakmem_core::free_checked((p as usize | 1 << 47) as *mut u8);
            }
            "high-alias-huge" => {
                let p = hakmem_core::malloc(5 << 20);
                hakmem_core::free_checked((p as usize | 1 << 63) as *mut u8);
            }
            "realloc-freed" => {
                let p = hakmem_core::malloc(64);
                hakmem_core::free(p);
                if hakmem_core::check_block(p, "realloc") {
                    std::process::exit(3);
                }
            }
            "double-free-after-overwrite" => {
                let p = hakmem_core::malloc(100);
                hakmem_core::free(p);
                std::ptr::write_bytes(p, 0, 16); // a write after free wipes the freed mark
                hakmem_core::free(p);
            }
            "write-after-free" => {
                let p = hakmem_core::malloc(64);
                hakmem_core::free(p);
                (p as *mut usize).write(0x4141_4141_4141_4141); // corrupts the free-list link
                for _ in 0..1000 {
                    std::hint::black_box(hakmem_core::malloc(64));
                }
            }
            _ => hardening::scenario(name),
        }
    }
}

/// The `secure` build's scenarios: `<misuse>-<bytes>-<block size>`.
mod hardening {
    use std::hint::black_box;

    /// Block sizes every scenario runs at: small (a 48-byte slot), medium
    /// (a 2.5 KiB slot, zero throughout while free; a 5 KiB slot, zero only
    /// at its edges: `EDGES_ONLY`, as are the two after it), a 14 KiB slot
    /// and a 32 KiB one (spans of several units, with 4 blocks in each
    /// unit with 4 KiB OS pages, 3 with 16 KiB, and with 1: each block is its unit's first, the byte in front
    /// of it its table's last), and huge (a dedicated mapping between guard
    /// pages).
    pub const SIZES: [usize; 6] = [32, 2048, EDGES_ONLY, 14_000, 30_000, 1 << 20];

    /// The size whose free blocks hold zeroes only at their edges (a slot
    /// above `check/secure.rs`'s `WHOLE_ZERO_MAX`): its writes after free
    /// are made in the first cache line (`-head`; the middle is not
    /// checked), its new blocks asked of `alloc_zeroed` (`-zeroed`;
    /// `malloc` may show old data in the middle).
    pub const EDGES_ONLY: usize = 4096;

    /// Bytes the overflows and underflows run over.
    pub const REACH: [usize; 3] = [1, 32, 1 << 20];

    /// A block of `size` bytes, written all over (as a program would).
    fn block(size: usize) -> *mut u8 {
        let p = hakmem_core::malloc(size);
        assert!(!p.is_null());
        // SAFETY: p is a live block of `size` bytes.
        unsafe { p.write_bytes(b'v', size) };
        p
    }

    /// Writes `b'A'` to `p + from .. p + from + len` one byte at a time,
    /// upwards or downwards, as a loop in the program would.
    ///
    /// # Safety
    /// None: this is the misuse.
    unsafe fn write_loop(p: *mut u8, from: isize, len: usize, down: bool) {
        for i in 0..len as isize {
            let at = if down { from + len as isize - 1 - i } else { from + i };
            // SAFETY: deliberately not (the misuse under test).
            unsafe { black_box(p.offset(at)).write_volatile(b'A') };
        }
    }

    /// `memcpy` of `len` bytes of `b'A'` to `p + from`.
    ///
    /// # Safety
    /// None: this is the misuse.
    unsafe fn memcpy(p: *mut u8, from: isize, len: usize) {
        let src = vec![b'A'; len];
        // SAFETY: deliberately not (the misuse under test).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), black_box(p.offset(from)), len) };
        // Never freed: in the secure build's random carving order `src`
        // may be the slot right before `p`, and an underflow of `p` then
        // runs into its canary; freeing it would report that (correctly,
        // as an overflow of `src`) before `free(p)` reports the underflow
        // this scenario expects.
        std::mem::forget(src);
    }

    /// Allocates blocks of `size` until the page the freed block went back
    /// to has handed it out again (a write after free is reported then).
    fn allocate_until_reuse(size: usize) {
        for _ in 0..4096 {
            black_box(hakmem_core::malloc(size));
        }
    }

    pub fn scenario(name: &str) {
        let mut parts = name.rsplitn(3, '-');
        let size: usize = parts
            .next()
            .and_then(|s| s.parse().ok())
            .expect("<misuse>-<bytes>-<size>");
        let bytes: usize = parts
            .next()
            .and_then(|s| s.parse().ok())
            .expect("<misuse>-<bytes>-<size>");
        let misuse = parts.next().expect("<misuse>-<bytes>-<size>");
        // SAFETY: deliberately not: each scenario misuses a block; the
        // process is expected to end in the report or on a guard page.
        unsafe {
            match misuse {
                "overflow-write" => {
                    let p = block(size);
                    write_loop(p, size as isize, bytes, false);
                    hakmem_core::free(p);
                }
                "overflow-memcpy" => {
                    let p = block(size);
                    memcpy(p, 0, size + bytes);
                    hakmem_core::free(p);
                }
                "underflow-write" => {
                    let p = block(size);
                    write_loop(p, -(bytes as isize), bytes, true);
                    hakmem_core::free(p);
                }
                "underflow-memcpy" => {
                    let p = block(size);
                    memcpy(p, -(bytes as isize), bytes + size);
                    hakmem_core::free(p);
                }
                // A write into a freed block, found when it is handed out
                // again (`bytes`: the offset written, a byte or a word).
                // `-head`: at offset 24, past the link and the mark.
                "write-after-free" | "write-after-free-head" => {
                    let at = if misuse.ends_with("-head") { 24 } else { size / 2 };
                    let p = block(size);
                    hakmem_core::free(p);
                    write_loop(p, at as isize, bytes.min(size - at), false);
                    allocate_until_reuse(size);
                }
                // The same, and the program then exits: found at exit.
                "write-after-free-exit" | "write-after-free-head-exit" => {
                    let at = if misuse.ends_with("-head-exit") { 24 } else { size / 2 };
                    let p = block(size);
                    hakmem_core::free(p);
                    write_loop(p, at as isize, bytes.min(size - at), false);
                    libc::exit(0);
                }
                // A write into the block freed last of its page, found
                // by the next `free` into that page (`bytes` at offset
                // 24, the first cache line).
                "write-after-free-then-free" => {
                    let p = block(size);
                    let q = block(size);
                    hakmem_core::free(p);
                    write_loop(p, 24, bytes, false);
                    hakmem_core::free(q);
                }
                // The freed block is not the next one handed out, so a
                // write through the dangling pointer lands in a free block
                // (found at its reuse), not in a live one.
                "reuse" => {
                    let p = block(size);
                    hakmem_core::free(p);
                    let q = block(size);
                    if q == p {
                        eprintln!("the freed block was handed out again at once");
                        std::process::exit(3);
                    }
                    write_loop(p, 0, bytes.min(size), false);
                    allocate_until_reuse(size);
                }
                // Freed and fresh blocks never show what a block held
                // (`-zeroed`: fresh blocks of `alloc_zeroed`, and the freed
                // block's first bytes past its link and mark).
                "no-old-data" | "no-old-data-zeroed" => {
                    let zeroed = misuse.ends_with("-zeroed");
                    let p = block(size);
                    p.write_bytes(b'S', size);
                    hakmem_core::free(p);
                    let looked = if zeroed { 24 } else { size - 1 };
                    if size < 1 << 20 && *black_box(p).add(looked) == b'S' {
                        eprintln!("a freed block still holds its data");
                        std::process::exit(3);
                    }
                    for _ in 0..bytes {
                        let q = if zeroed {
                            hakmem_core::alloc_zeroed(size, 16)
                        } else {
                            hakmem_core::malloc(size)
                        };
                        let data = std::slice::from_raw_parts(q, size);
                        if data.contains(&b'S') || data.contains(&b'v') {
                            eprintln!("a new block shows old data");
                            std::process::exit(3);
                        }
                        q.write_bytes(b'S', size);
                        hakmem_core::free(q);
                    }
                }
                _ => panic!("unknown scenario {name}"),
            }
        }
    }
}

fn run_child(name: &str, on_error: Option<&str>) -> (std::process::ExitStatus, String) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "misuse_child",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("MISUSE_SCENARIO", name);
    if let Some(v) = on_error {
        cmd.env("HAKMEM_ON_ERROR", v);
    }
    let out = cmd.output().unwrap();
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The child: runs the scenario its parent names.
#[test]
#[ignore = "run as a child by the tests below"]
fn misuse_child() {
    let name = std::env::var("MISUSE_SCENARIO").expect("MISUSE_SCENARIO names the scenario");
    scenario(&name);
    eprintln!("scenario {name} returned");
}

/// The report of a second free of a large or huge block: a double free in
/// the default build; in the `secure` build, whose freed huge mappings wait
/// in quarantine out of the segment map, an invalid pointer.
const HUGE_DOUBLE_FREE: &str = if cfg!(feature = "secure") {
    "free(): invalid pointer (not allocated by hakmem) {block}"
} else {
    "free(): double free of {block}"
};

#[test]
fn every_misuse_aborts_with_a_hakmem_message() {
    let cases = [
        ("double-free-immediate", "free(): double free of 0x"),
        ("double-free-delayed", "free(): double free of 0x"),
        ("double-free-remote", "free(): double free of 0x"),
        ("double-free-batched", "free(): double free of 0x"),
        // `secure`: a large block is huge there, and a freed huge block's
        // mapping waits in quarantine out of the segment map, so its second
        // free finds no hakmem segment. `{block}`: the block the child
        // named, exactly.
        ("double-free-large", HUGE_DOUBLE_FREE),
        ("double-free-huge", HUGE_DOUBLE_FREE),
        // The huge arena's freed block leaves the segment map when its
        // units are purged (its header is purged with them): from then on
        // it is not hakmem's (docs/DESIGN.md, "The huge arena").
        (
            "double-free-huge-purged",
            "free(): invalid pointer (not allocated by hakmem) {block}",
        ),
        // A cached mapping of its own keeps its header and has its freed
        // mark written back after the purge.
        ("double-free-huge-mapping-purged", HUGE_DOUBLE_FREE),
        (
            "interior-pointer",
            "free(): invalid pointer (not the start of a hakmem block) 0x",
        ),
        ("stack-pointer", "free(): invalid pointer (not allocated by hakmem) 0x"),
        (
            "huge-interior-pointer",
            "free(): invalid pointer (not the start of a hakmem block) 0x",
        ),
        (
            "huge-interior-aligned",
            "free(): invalid pointer (not the start of a hakmem block) 0x",
        ),
        (
            "huge-interior-realloc",
            "realloc(): invalid pointer (not the start of a hakmem block) 0x",
        ),
        (
            "garbage-pointer",
            "free(): invalid pointer (not allocated by hakmem) 0x0000000012345678",
        ),
        ("realloc-freed", "realloc(): pointer already freed 0x"),
        (
            "high-alias-pointer",
            "free(): invalid pointer (not allocated by hakmem) 0x0000",
        ),
        (
            "high-alias-huge",
            "free(): invalid pointer (not allocated by hakmem) 0x8",
        ),
    ];
    for (name, message) in cases {
        let (status, stderr) = run_child(name, None);
        assert_eq!(status.signal(), Some(libc::SIGABRT), "{name}: {status:?}\n{stderr}");
        let message = if message.contains("{block}") {
            format!("{}\n", message.replace("{block}", said_block(&stderr)))
        } else {
            message.to_string()
        };
        assert!(
            stderr.contains(&format!("hakmem: {message}")),
            "{name}: expected `hakmem: {message}`; stderr was:\n{stderr}"
        );
        assert!(!stderr.contains("returned"), "{name} must not continue");
    }
}

#[test]
fn on_error_warn_reports_and_continues() {
    for name in ["double-free-delayed", "stack-pointer"] {
        let (status, stderr) = run_child(name, Some("warn"));
        assert!(status.success(), "{name}: {status:?}\n{stderr}");
        assert!(stderr.contains("hakmem: free(): "), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("scenario {name} returned")),
            "{name}: {stderr}"
        );
    }
}

/// The `secure` build also catches misuse that defeats the default checks.
#[test]
#[cfg_attr(not(feature = "secure"), ignore = "needs the secure feature")]
fn secure_build_catches_writes_after_free() {
    for (name, message) in [
        ("double-free-after-overwrite", "free(): double free of 0x"),
        ("write-after-free", "write after free: block 0x"),
    ] {
        let (status, stderr) = run_child(name, None);
        assert_eq!(status.signal(), Some(libc::SIGABRT), "{name}: {status:?}\n{stderr}");
        assert!(
            stderr.contains(&format!("hakmem: {message}")),
            "{name}: stderr was:\n{stderr}"
        );
    }
}

/// How a hardening scenario must end.
#[derive(Debug)]
enum Expect {
    /// SIGABRT after this `hakmem:` report.
    Report(String),
    /// SIGSEGV: the misuse ran into a guard page.
    GuardPage,
    /// Exit status 0.
    Success,
}

/// What the `secure` build does with each scenario of `hardening`.
fn secure_expectations() -> Vec<(String, Expect)> {
    use hardening::{REACH, SIZES};
    let mut cases = Vec::new();
    for size in SIZES {
        let huge = size >= 1 << 20;
        for reach in REACH {
            let far = reach >= 1 << 20;
            for how in ["write", "memcpy"] {
                let over = if huge || far {
                    Expect::GuardPage
                } else {
                    Expect::Report(format!(
                        "heap overflow: block 0x\\w+ of size {size}: first corrupted byte at offset {size} "
                    ))
                };
                cases.push((format!("overflow-{how}-{reach}-{size}"), over));
                let under = if huge || far {
                    Expect::GuardPage
                } else {
                    Expect::Report(format!(
                        "heap underflow: block 0x\\w+ of size {size}: corrupted byte at offset -1 "
                    ))
                };
                cases.push((format!("underflow-{how}-{reach}-{size}"), under));
            }
        }
        // Writes after free into a block of EDGES_ONLY or more land in its
        // first cache line: `-head`.
        let edges = size >= hardening::EDGES_ONLY && !huge;
        let (write, write_exit) = if edges {
            ("write-after-free-head", "write-after-free-head-exit")
        } else {
            ("write-after-free", "write-after-free-exit")
        };
        for (misuse, bytes) in [(write, 1), (write, 8), (write_exit, 1), ("reuse", 16)] {
            let expect = if huge {
                Expect::GuardPage
            } else {
                Expect::Report("write after free: block 0x".into())
            };
            cases.push((format!("{misuse}-{bytes}-{size}"), expect));
        }
        cases.push((
            format!("write-after-free-then-free-1-{size}"),
            if huge {
                Expect::GuardPage
            } else {
                Expect::Report(format!(
                    "write after free: block 0x\\w+ of size {size}: first corrupted byte at offset 24 (0x\\w+), found by free()"
                ))
            },
        ));
        let no_old_data = if edges { "no-old-data-zeroed" } else { "no-old-data" };
        cases.push((format!("{no_old_data}-20-{size}"), Expect::Success));
    }
    cases
}

/// Whether `stderr` has a line holding `pattern`, where `\w+` stands for
/// any run of hex digits (the addresses).
fn has_report(stderr: &str, pattern: &str) -> bool {
    let parts: Vec<&str> = pattern.split("\\w+").collect();
    stderr.lines().any(|line| {
        let Some(mut rest) = line.strip_prefix("hakmem: ").and_then(|l| l.strip_prefix(parts[0])) else {
            return false;
        };
        for part in &parts[1..] {
            let digits = rest.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(rest.len());
            match rest[digits..].strip_prefix(part) {
                Some(r) if digits > 0 => rest = r,
                _ => return false,
            }
        }
        true
    })
}

/// Every overflow and underflow (1 B, 32 B, 1 MiB; by a write loop and by
/// `memcpy`), write after free (found at reuse, at exit), the freed block
/// not handed out at once, and no old data, at six block sizes: the
/// `secure` build reports and stops on each (or faults on a guard page).
#[test]
#[cfg_attr(not(feature = "secure"), ignore = "needs the secure feature")]
fn secure_build_stops_every_overflow_underflow_and_write_after_free() {
    let mut failures = Vec::new();
    for (name, expect) in secure_expectations() {
        let (status, stderr) = run_child(&name, None);
        let ok = match &expect {
            Expect::Report(pattern) => status.signal() == Some(libc::SIGABRT) && has_report(&stderr, pattern),
            Expect::GuardPage => status.signal() == Some(libc::SIGSEGV) && !stderr.contains("returned"),
            Expect::Success => status.success(),
        };
        if !ok {
            failures.push(format!("{name}: expected {expect:?}, got {status:?}\n{stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The default build keeps catching what it caught (the double and
/// invalid frees above) and stays silent about what it cannot see: an
/// overflow within a block's slack and a write after free both run to the
/// end.
#[test]
#[cfg_attr(feature = "secure", ignore = "the default build's behaviour")]
fn default_build_is_silent_where_it_has_no_check() {
    for name in ["overflow-write-1-32", "write-after-free-1-32", "underflow-write-1-4096"] {
        let (status, stderr) = run_child(name, None);
        assert!(status.success(), "{name}: {status:?}\n{stderr}");
        assert!(stderr.contains("returned"), "{name}: {stderr}");
    }
}
