//! The statistics match a known sequence of operations, the JSON report
//! parses, and HAKMEM_STATS=1 prints the report at exit.

use hakmem_core::Hakmem;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// Reads `"key":number` from the flat JSON object.
fn json_number(json: &str, key: &str) -> usize {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("{key} missing in {json}"));
    let rest = &json[at + key.len() + 3..];
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap();
    rest[..end].parse().unwrap()
}

fn json() -> String {
    let mut buf = [0u8; 4096];
    let n = hakmem_core::stats_json(&mut buf);
    assert!(n <= buf.len());
    String::from_utf8(buf[..n].to_vec()).unwrap()
}

/// The tests of this binary that read counters: one at a time (the third
/// runs in a child process).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn counters_follow_a_known_sequence() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Run on a thread of its own so the harness's allocations do not mix in.
    std::thread::spawn(|| {
        let before = hakmem_core::stats();
        let huge: Vec<*mut u8> = (0..3).map(|i| hakmem_core::malloc((3 + i) << 20)).collect();
        let large: Vec<*mut u8> = (0..2).map(|_| hakmem_core::malloc(300_000)).collect();
        let small: Vec<*mut u8> = (0..10).map(|_| hakmem_core::malloc(40)).collect();
        let mid = hakmem_core::stats();
        // `secure` builds place every block above 40 KiB in a huge mapping.
        let (huge_count, large_count) = if cfg!(feature = "secure") { (5, 0) } else { (3, 2) };
        assert_eq!(mid.huge_allocs - before.huge_allocs, huge_count);
        assert_eq!(mid.huge_in_use, before.huge_in_use + huge_count);
        assert_eq!(mid.large_allocs - before.large_allocs, large_count);
        assert!(
            mid.pages_in_use >= before.pages_in_use + large_count,
            "a span per large block at least"
        );
        assert!(mid.committed_bytes >= before.committed_bytes + (12 << 20) - (2 << 20));
        assert!(mid.peak_committed_bytes >= mid.committed_bytes);
        if mid.per_class {
            let class_40 = 2; // 40 B is class 2 (48-byte blocks)
            assert_eq!(mid.allocs[class_40] - before.allocs[class_40], 10);
            assert_eq!(
                mid.allocs[hakmem_core::LARGE_ROW] - before.allocs[hakmem_core::LARGE_ROW],
                large_count
            );
        }
        // SAFETY: every pointer is a live block freed once.
        unsafe {
            for p in huge.into_iter().chain(large).chain(small.iter().copied()) {
                hakmem_core::free(p);
            }
        }
        let after = hakmem_core::stats();
        assert_eq!(after.huge_in_use, before.huge_in_use);
        if after.per_class {
            let class_40 = 2;
            assert!(after.frees[class_40] >= before.frees[class_40] + 10);
        }
        // The report against the counters read around it: the harness's
        // own threads may map (a thread's first segment) in between.
        let around = hakmem_core::os_counters();
        let j = json();
        let later = hakmem_core::stats();
        let huge_allocs = json_number(&j, "huge_allocs");
        assert!(
            (after.huge_allocs..=later.huge_allocs).contains(&huge_allocs),
            "{huge_allocs} huge allocations reported, {} before, {} after",
            after.huge_allocs,
            later.huge_allocs
        );
        let mmap = json_number(&j, "mmap");
        assert!(
            (around.mmap..=later.os.mmap).contains(&mmap),
            "{mmap} mmap calls reported, {} before, {} after",
            around.mmap,
            later.os.mmap
        );
        assert!(j.starts_with('{') && j.ends_with('}'));
        assert_eq!(j.matches('[').count(), 2, "allocs and frees tables");
    })
    .join()
    .unwrap();
}

#[test]
fn json_reports_the_size_it_needs() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut small = [0u8; 8];
    let needed = hakmem_core::stats_json(&mut small);
    assert!(needed > 8);
    let mut big = vec![0u8; needed];
    assert_eq!(hakmem_core::stats_json(&mut big), needed);
}

/// The child of `hakmem_stats_prints_the_report_at_exit`.
#[test]
#[ignore = "run as a child by hakmem_stats_prints_the_report_at_exit"]
fn stats_child() {
    let v: Vec<u8> = vec![1; 1000];
    std::hint::black_box(&v);
}

#[test]
fn hakmem_stats_prints_the_report_at_exit() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "stats_child", "--ignored", "--test-threads=1"])
        .env("HAKMEM_STATS", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("hakmem: committed_kib="), "stderr:\n{stderr}");
    assert!(stderr.contains(" mmap="), "stderr:\n{stderr}");
}
