//! The built `hakmem-bench` binary end to end: usage errors, a tiny
//! comparison through child processes, tiny `--preload` runs, the new
//! workloads against both mimalloc builds in both modes, and the scaling
//! table.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hakmem-bench"))
        .args(args)
        .output()
        .expect("run hakmem-bench")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["--workloads", "mixd"], "unknown workload 'mixd'"),
        (&["--allocators", "hakmem,ptmalloc"], "unknown allocator 'ptmalloc'"),
        (
            &["--min", "2048", "--max", "1024"],
            "--min (2048) is larger than --max (1024)",
        ),
        (&["--reps", "0"], "--reps must be between 1"),
        (&["--allocators", "tcmalloc"], "only with --preload"),
        (&["--allocators", "mimalloc-deb"], "only with --preload"),
        (&["--allocators", "mimalloc4"], "unknown allocator 'mimalloc4'"),
        (&["--threads", "1,0"], "--threads must be between 1"),
        (
            &["--workloads", "churn", "--min", "8"],
            "workload churn: --min must be at least 24",
        ),
        (&["--format", "yaml"], "invalid value 'yaml'"),
        (&["--no-such-option"], "unexpected argument '--no-such-option'"),
    ];
    for (args, expected) in cases {
        let out = bench(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?} in {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed results");
    }
}

#[test]
fn help_exits_0_and_lists_workloads() {
    let out = bench(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for word in [
        "--workloads",
        "--preload",
        "--scaling",
        "mixed",
        "larson",
        "prodcons",
        "huge",
        "churn",
        "pacing",
        "mimalloc2",
        "mimalloc3",
        "mimalloc-deb",
        "Exit status",
    ] {
        assert!(help.contains(word), "{word} missing from --help");
    }
}

/// The column values of `row` by header name.
fn field<'a>(header: &[&str], row: &[&'a str], name: &str) -> &'a str {
    row[header
        .iter()
        .position(|h| *h == name)
        .unwrap_or_else(|| panic!("no column {name}"))]
}

#[test]
fn tiny_comparison_prints_parseable_csv() {
    let out = bench(&[
        "--iters",
        "1000",
        "--reps",
        "1",
        "--allocators",
        "system,hakmem",
        "--workloads",
        "mixed",
        "--format",
        "csv",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let mut lines = stdout.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    assert_eq!(header[0], "workload");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, allocator) in rows.iter().zip(["system", "hakmem"]) {
        assert_eq!(row.len(), header.len());
        assert_eq!(field(&header, row, "workload"), "mixed");
        assert_eq!(field(&header, row, "allocator"), allocator);
        assert_eq!(field(&header, row, "iters"), "1000");
        assert_eq!(field(&header, row, "ok_runs"), "1");
        let mops: f64 = field(&header, row, "mops").parse().expect("mops is a number");
        let ns: f64 = field(&header, row, "ns_per_op").parse().expect("ns_per_op is a number");
        assert!(mops > 0.0 && (mops * ns - 1e3).abs() < 1.0, "mops {mops} ns/op {ns}");
        let rss: f64 = field(&header, row, "peak_rss_mib").parse().expect("rss is a number");
        assert!(rss > 0.0 && rss < 1024.0, "peak RSS {rss} MiB");
        assert!(field(&header, row, "failure").is_empty());
    }
    assert_eq!(field(&header, &rows[0], "vs_system").parse::<f64>().unwrap(), 1.0);
    assert_eq!(field(&header, &rows[1], "vs_mimalloc"), "", "mimalloc did not run");
}

#[test]
fn json_output_holds_every_run() {
    let out = bench(&[
        "--iters",
        "500",
        "--reps",
        "2",
        "--allocators",
        "system",
        "--workloads",
        "c7,larson",
        "--format",
        "json",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.trim_start().starts_with('{') && stdout.trim_end().ends_with('}'));
    assert_eq!(stdout.matches("\"allocator\": \"system\"").count(), 2);
    assert_eq!(stdout.matches("\"elapsed_ns\"").count(), 4);
}

/// `--preload` with whatever libraries this machine has: glibc always runs;
/// missing libraries are skipped with a note, not an error.
#[test]
fn tiny_preload_run_skips_missing_libraries() {
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("skipped: no C compiler");
        return;
    }
    let out = bench(&[
        "--preload",
        "--iters",
        "1000",
        "--reps",
        "1",
        "--workloads",
        "mixed,prodcons",
        "--format",
        "csv",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let header: Vec<&str> = stdout.lines().next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = stdout.lines().skip(1).map(|l| l.split(',').collect()).collect();
    let ran: Vec<&str> = rows.iter().map(|r| field(&header, r, "allocator")).collect();
    // glibc and the mimalloc builds this binary carries always run.
    for allocator in ["system", "mimalloc2", "mimalloc3"] {
        assert!(ran.contains(&allocator), "{allocator} did not run\n{stdout}\n{stderr}");
    }
    for allocator in ["hakmem", "mimalloc-deb", "jemalloc", "tcmalloc"] {
        let skipped = stderr.contains(&format!("{allocator} skipped"));
        assert_ne!(
            ran.contains(&allocator),
            skipped,
            "{allocator}: ran or skipped, exactly one\n{stderr}"
        );
    }
    assert!(rows.iter().all(|r| field(&header, r, "ok_runs") == "1"), "{stdout}");
}

/// The `ops` of every sample of `allocator` on `workload` in a JSON report.
fn json_ops(json: &str, workload: &str, allocator: &str) -> Vec<u64> {
    let start = format!("{{\"workload\": \"{workload}\", ");
    json.lines()
        .filter(|l| l.trim_start().starts_with(&start) && l.contains(&format!("\"allocator\": \"{allocator}\"")))
        .flat_map(|l| {
            l.split("{\"ops\": ")
                .skip(1)
                .map(|s| s.split(',').next().unwrap().parse::<u64>().unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// huge, churn and pacing, small, against glibc and both mimalloc builds
/// (`mimalloc` selects both), through GlobalAlloc and under LD_PRELOAD:
/// every run succeeds and counts the operations its workload defines.
#[test]
fn new_workloads_run_against_both_mimalloc_builds_in_both_modes() {
    let mut modes = vec![false];
    if Command::new("cc").arg("--version").output().is_ok() {
        modes.push(true);
    }
    for preload in modes {
        let mut args = vec![
            "--workloads",
            "huge,churn,pacing",
            "--min",
            "64K",
            "--max",
            "256K",
            "--ws",
            "8",
            "--iters",
            "20",
            "--threads",
            "4",
            "--reps",
            "2",
            "--allocators",
            "system,mimalloc",
            "--format",
            "json",
        ];
        if preload {
            args.push("--preload");
        }
        let out = bench(&args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "preload {preload}\n{stdout}\n{stderr}");
        // huge: free + alloc per replacement; churn: 20 rounds of 4 threads;
        // pacing: 2 pairs, alloc + free per block.
        for (workload, ops) in [("huge", 2 * 20), ("churn", 20 * 4), ("pacing", 2 * 2 * 20)] {
            for allocator in ["system", "mimalloc2", "mimalloc3"] {
                assert_eq!(
                    json_ops(&stdout, workload, allocator),
                    [ops, ops],
                    "preload {preload}: {workload} {allocator}\n{stdout}"
                );
            }
        }
        assert!(stdout.contains("\"op\": \"thread\""), "churn counts threads");
    }
}

#[test]
fn scaling_prints_a_column_per_thread_count() {
    let out = bench(&[
        "--scaling",
        "--workloads",
        "larson,prodcons",
        "--threads",
        "1,2,4",
        "--iters",
        "500",
        "--reps",
        "1",
        "--allocators",
        "system",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    for heading in ["Mops/s, all threads together", "Mops/s per thread", "Peak RSS, MiB"] {
        let at = lines
            .iter()
            .position(|l| l.starts_with(heading))
            .unwrap_or_else(|| panic!("no {heading}\n{stdout}"));
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(
            words(lines[at + 1]),
            ["workload", "allocator", "1", "thr", "2", "thr", "4", "thr"]
        );
        let larson = words(lines[at + 2]);
        assert_eq!(larson[..2], ["larson", "system"]);
        assert!(larson[2..].iter().all(|c| c.parse::<f64>().is_ok()), "{stdout}");
        // prodcons runs whole pairs: nothing at one thread.
        let prodcons = words(lines[at + 3]);
        assert_eq!(prodcons[..3], ["prodcons", "system", "-"]);
        assert!(prodcons[3..].iter().all(|c| c.parse::<f64>().is_ok()), "{stdout}");
    }
    // The same run as CSV: one row per workload and thread count, with the
    // per-thread throughput.
    let out = bench(&[
        "--scaling",
        "--workloads",
        "larson",
        "--threads",
        "1,2",
        "--iters",
        "500",
        "--reps",
        "1",
        "--allocators",
        "system",
        "--format",
        "csv",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let header: Vec<&str> = stdout.lines().next().expect("header").split(',').collect();
    let rows: Vec<Vec<&str>> = stdout.lines().skip(1).map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, threads) in rows.iter().zip([1.0, 2.0]) {
        assert_eq!(field(&header, row, "threads").parse::<f64>().unwrap(), threads);
        let mops: f64 = field(&header, row, "mops").parse().unwrap();
        let per_thread: f64 = field(&header, row, "mops_per_thread").parse().unwrap();
        assert!((per_thread * threads - mops).abs() < 1e-3 * mops, "{stdout}");
    }
}
