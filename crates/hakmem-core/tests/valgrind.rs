//! Under valgrind's memcheck, a multi-threaded workload on hakmem makes no
//! invalid read or write (no access to memory hakmem unmapped or never
//! mapped). The test re-runs this binary under valgrind; where valgrind is
//! not installed it prints a SKIPPED line (and fails when
//! `REQUIRE_TEST_TOOLS` is set, as `.ci/run` does: CI installs it).

use hakmem_core::Hakmem;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

mod common;

/// The workload valgrind runs (a child's entry point: ignored in a normal
/// run, run by `memcheck_finds_no_invalid_access` with `--ignored`).
#[test]
#[ignore = "run under valgrind by memcheck_finds_no_invalid_access"]
fn workload_for_valgrind() {
    let handles: Vec<_> = (0..2)
        .map(|t| {
            std::thread::spawn(move || {
                let mut kept: Vec<Vec<u8>> = Vec::new();
                for i in 0..20_000usize {
                    let size = match i % 100 {
                        0 => 300_000,
                        1 => 3 << 20,
                        _ => 1 + (i * 7919 + t) % 3000,
                    };
                    let v = vec![(i % 251) as u8; size];
                    assert_eq!(v[size - 1], (i % 251) as u8);
                    if i % 3 == 0 {
                        kept.push(v);
                    }
                    if kept.len() > 64 {
                        kept.drain(..32);
                    }
                }
                kept
            })
        })
        .collect();
    let kept: Vec<Vec<Vec<u8>>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Freed here, on another thread than the one that allocated them.
    drop(kept);
    hakmem_core::collect(true);
}

#[test]
fn memcheck_finds_no_invalid_access() {
    if !common::have_tool("valgrind", "memcheck_finds_no_invalid_access") {
        return;
    }
    let out = Command::new("valgrind")
        .args(["--tool=memcheck", "--error-exitcode=99", "--leak-check=no", "--quiet"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "workload_for_valgrind", "--ignored", "--test-threads=1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("Invalid read") && !stderr.contains("Invalid write"),
        "memcheck reported:\n{stderr}"
    );
    assert!(out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the workload ran"
    );
}
