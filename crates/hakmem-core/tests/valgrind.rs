//! Under valgrind's memcheck, a multi-threaded workload on hakmem makes no
//! invalid read or write (no access to memory hakmem unmapped or never
//! mapped). The test re-runs this binary under valgrind; skipped, with a
//! note, where valgrind is not installed (`.ci/run` installs it).

use hakmem_core::Hakmem;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// The workload valgrind runs (does nothing unless VALGRIND_WORKLOAD is set).
#[test]
fn workload_for_valgrind() {
    if std::env::var_os("VALGRIND_WORKLOAD").is_none() {
        return;
    }
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
    let Ok(out) = Command::new("valgrind").arg("--version").output() else {
        eprintln!("valgrind not installed: memcheck test skipped");
        return;
    };
    assert!(out.status.success());
    let out = Command::new("valgrind")
        .args(["--tool=memcheck", "--error-exitcode=99", "--leak-check=no", "--quiet"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", "workload_for_valgrind", "--test-threads=1"])
        .env("VALGRIND_WORKLOAD", "1")
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
