//! The heap profiler in a Rust program (`Hakmem` as the global allocator,
//! `hakmem_core::profile::{start, dump}`), read back by `go tool pprof`:
//! sites holding known amounts in their ratio, a churning site only in the
//! allocation profile. The bound: 5 standard errors of a Poisson count of
//! samples (tests/profile.rs of hakmem-ffi says more). Not in the
//! hardened build, which never samples.
#![cfg(not(feature = "secure"))]

use hakmem_core::Hakmem;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

const RATE: usize = 64 * 1024;

fn go() -> Option<PathBuf> {
    ["go", "/usr/local/go/bin/go"].into_iter().map(PathBuf::from).find(|p| {
        Command::new(p)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[inline(never)]
fn hold_vectors(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| vec![i as u8; 384]).collect()
}

#[inline(never)]
#[allow(clippy::vec_box)] // the boxes are the site's allocations
fn hold_boxes(n: usize) -> Vec<Box<[u64; 16]>> {
    (0..n).map(|i| Box::new([i as u64; 16])).collect()
}

#[inline(never)]
fn churn_strings(n: usize) -> usize {
    let mut total = 0;
    for i in 0..n {
        let s = black_box(format!("{i:0>200}"));
        total += s.len();
    }
    total
}

fn top(go: &Path, profile: &Path, index: &str) -> BTreeMap<String, f64> {
    let out = Command::new(go)
        .args(["tool", "pprof", "-top", "-nodecount=1000", "-unit=B"])
        .arg(format!("-sample_index={index}"))
        .arg(std::env::current_exe().unwrap())
        .arg(profile)
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    let mut flat = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !fields[1].ends_with('%') {
            continue;
        }
        if let Ok(v) = fields[3].trim_end_matches('B').parse::<f64>() {
            *flat.entry(fields[5..].join(" ")).or_insert(0.0) += v;
        }
    }
    flat
}

/// The bytes pprof gives the function named `site` (alone or as the last
/// part of a path), with
/// all they call (the `cum` column: a `String`'s growth is a frame of
/// `alloc::raw_vec` below the site).
fn site(map: &BTreeMap<String, f64>, site: &str) -> f64 {
    map.iter()
        .filter(|(k, _)| *k == site || k.ends_with(&format!("::{site}")))
        .map(|(_, v)| v)
        .sum()
}

fn assert_estimate(what: &str, got: f64, truth: f64) {
    let n = truth / RATE as f64;
    let bound = 5.0 * truth / n.sqrt();
    assert!(
        (got - truth).abs() <= bound,
        "{what}: estimated {got:.0} bytes, truly {truth:.0} (allowed ±{bound:.0})"
    );
}

/// One test in this binary: sampling is process-wide.
#[test]
fn a_rust_program_gets_its_sites_in_their_ratio() {
    let Some(go) = go() else {
        assert!(
            std::env::var_os("REQUIRE_TEST_TOOLS").is_none(),
            "go is not installed, and REQUIRE_TEST_TOOLS is set"
        );
        eprintln!("SKIPPED: go is not installed");
        return;
    };
    hakmem_core::profile::start(RATE);
    // Vec<u8> of 384 bytes: 48 MB live; boxes of 128 bytes: 16 MB live.
    let vectors = hold_vectors(125_000);
    let boxes = hold_boxes(125_000);
    let churned = churn_strings(1_000_000);
    let path = std::env::temp_dir().join(format!("hakmem-profile-{}.pb.gz", std::process::id()));
    hakmem_core::profile::dump(path.to_str().unwrap().as_bytes()).expect("dump");
    hakmem_core::profile::stop();
    let stats = hakmem_core::profile::profile_stats();
    assert!(stats.live_samples > 500 && stats.stacks >= 3, "{stats:?}");
    assert!(stats.mapped_bytes > 0 && stats.dropped == 0, "{stats:?}");
    // On x86-64 with glibc every frame of this program has a rule the profiler's own
    // walk follows: libgcc's walk is never needed.
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    assert!(
        stats.walks >= stats.live_samples && stats.libgcc_walks == 0,
        "{stats:?}"
    );

    let inuse = top(&go, &path, "inuse_space");
    assert_estimate("hold_vectors", site(&inuse, "hold_vectors"), 384.0 * 125_000.0);
    assert_estimate("hold_boxes", site(&inuse, "hold_boxes"), 128.0 * 125_000.0);
    assert_eq!(site(&inuse, "churn_strings"), 0.0, "{inuse:?}");
    assert!(
        inuse
            .keys()
            .all(|f| !f.contains("hakmem_core") && !f.contains("__rust_alloc")),
        "allocator frames: {inuse:?}"
    );
    let alloc = top(&go, &path, "alloc_space");
    // format! grows its String (at least 200 bytes per call, more as it
    // grows in steps).
    assert!(site(&alloc, "churn_strings") > 0.5 * 200.0 * 1e6, "{alloc:?}");
    std::fs::remove_file(&path).ok();
    drop(black_box((vectors, boxes, churned)));

    // Freed blocks leave the live profile: dump again.
    let path2 = std::env::temp_dir().join(format!("hakmem-profile-{}-after.pb.gz", std::process::id()));
    hakmem_core::profile::dump(path2.to_str().unwrap().as_bytes()).expect("dump");
    let inuse = top(&go, &path2, "inuse_space");
    assert!(
        site(&inuse, "hold_vectors") == 0.0 && site(&inuse, "hold_boxes") == 0.0,
        "{inuse:?}"
    );
    std::fs::remove_file(&path2).ok();
}
