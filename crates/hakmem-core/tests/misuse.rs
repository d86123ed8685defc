//! Misuse is reported, not silently absorbed: each scenario runs in a child
//! process (this test binary re-executed with `MISUSE_SCENARIO=<name>`), which
//! must die with SIGABRT after a `hakmem:` message naming the function and
//! the pointer — or, with `HAKMEM_ON_ERROR=warn`, print it and carry on.

use hakmem_core::Hakmem;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

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
                hakmem_core::free(p);
                hakmem_core::free(p);
            }
            "double-free-huge" => {
                let p = hakmem_core::malloc(5 << 20);
                hakmem_core::free(p);
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
            _ => panic!("unknown scenario {name}"),
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

#[test]
fn every_misuse_aborts_with_a_hakmem_message() {
    let cases = [
        ("double-free-immediate", "free(): double free of 0x"),
        ("double-free-delayed", "free(): double free of 0x"),
        ("double-free-remote", "free(): double free of 0x"),
        ("double-free-batched", "free(): double free of 0x"),
        ("double-free-large", "free(): double free of 0x"),
        ("double-free-huge", "free(): "),
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
        assert!(
            stderr.contains(&format!("hakmem: {message}")),
            "{name}: stderr was:\n{stderr}"
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
        ("write-after-free", "malloc(): free list corrupted"),
    ] {
        let (status, stderr) = run_child(name, None);
        assert_eq!(status.signal(), Some(libc::SIGABRT), "{name}: {status:?}\n{stderr}");
        assert!(
            stderr.contains(&format!("hakmem: {message}")),
            "{name}: stderr was:\n{stderr}"
        );
    }
}
