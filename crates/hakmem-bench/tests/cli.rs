//! The built `hakmem-bench` binary end to end, as a user runs it: usage
//! errors, a tiny comparison through child processes read back as CSV and
//! JSON with a fixed schema, tiny `--preload` runs, the new workloads
//! against both mimalloc builds in both modes, the scaling table, the plots
//! (SVG read as XML, PNG decoded), the progress line (in a log and on a
//! terminal), the measured child on its own, and a planted C benchmark
//! that must never run.

use serde::Deserialize;
use std::path::Path;
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

/// Whether `tool --version` runs. A test that needs a missing tool says
/// SKIPPED and passes, or fails when `REQUIRE_TEST_TOOLS` is set (as
/// `.ci/run` does, having installed them all).
fn have(tool: &str, test: &str) -> bool {
    let present = Command::new(tool).arg("--version").output().is_ok();
    if !present {
        assert!(
            std::env::var_os("REQUIRE_TEST_TOOLS").is_none(),
            "{test}: {tool} is not installed, and REQUIRE_TEST_TOOLS is set"
        );
        eprintln!("SKIPPED {test}: {tool} is not installed");
    }
    present
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
        (
            &["--reps", "0"],
            "invalid value '0' for '--reps <N>': 0 is not in 1..=1000",
        ),
        (&["--allocators", "tcmalloc"], "only with --preload"),
        (&["--allocators", "mimalloc-deb"], "only with --preload"),
        (&["--allocators", "mimalloc4"], "unknown allocator 'mimalloc4'"),
        (&["--threads", "1,0"], "invalid value '0' for '--threads <N[,N...]>'"),
        (&["--min", "0"], "invalid value '0' for '--min <BYTES>'"),
        (&["--iters", "1.2.3"], "invalid value '1.2.3' for '--iters <N>'"),
        (&["--max", "5G"], "5368709120 is not in 1..=1073741824"),
        (&["--plot", "results.jpg"], "the file name must end in .svg or .png"),
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

/// One row of the CSV output, and one result of the JSON output less its
/// `samples`: the schema README.md documents. Unknown fields are an error,
/// so a column added or renamed fails here until the schema (and the
/// README) follow.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Every field is parsed; not every test reads each.
struct Record {
    workload: String,
    kernel: String,
    min: u64,
    max: u64,
    ws: u64,
    iters: u64,
    threads: u64,
    seed: u64,
    allocator: String,
    runs: u64,
    ok_runs: u64,
    mops: Option<f64>,
    ns_per_op: Option<f64>,
    peak_rss_mib: Option<f64>,
    vs_mimalloc: Option<f64>,
    vs_system: Option<f64>,
    mops_per_thread: Option<f64>,
    op: String,
    failure: Option<String>,
}

/// The columns of the CSV output, in order.
const CSV_COLUMNS: [&str; 19] = [
    "workload",
    "kernel",
    "min",
    "max",
    "ws",
    "iters",
    "threads",
    "seed",
    "allocator",
    "runs",
    "ok_runs",
    "mops",
    "ns_per_op",
    "peak_rss_mib",
    "vs_mimalloc",
    "vs_system",
    "mops_per_thread",
    "op",
    "failure",
];

/// The rows of a CSV report, checked against the schema.
fn csv_records(stdout: &str) -> Vec<Record> {
    let mut reader = csv::Reader::from_reader(stdout.as_bytes());
    let header: Vec<String> = reader.headers().expect("a header").iter().map(String::from).collect();
    assert_eq!(header, CSV_COLUMNS, "the CSV columns");
    reader
        .deserialize()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}\n{stdout}")))
        .collect()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonReport {
    mode: String,
    reps: u64,
    scaling: bool,
    results: Vec<serde_json::Value>,
    notes: Vec<String>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct JsonSample {
    ops: u64,
    elapsed_ns: u64,
    maxrss_kib: u64,
}

/// A JSON report, each result checked against the schema: the CSV's fields
/// and its samples.
fn json_report(stdout: &str) -> (JsonReport, Vec<(Record, Vec<JsonSample>)>) {
    let report: JsonReport = serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}\n{stdout}"));
    let results = report
        .results
        .iter()
        .map(|result| {
            let mut result = result.clone();
            let samples = result
                .as_object_mut()
                .expect("a result is an object")
                .remove("samples")
                .expect("a result has samples");
            (
                serde_json::from_value(result).expect("a result has the CSV's fields"),
                serde_json::from_value(samples).expect("samples"),
            )
        })
        .collect();
    (report, results)
}

#[test]
fn tiny_comparison_prints_csv_with_the_documented_columns() {
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
    let rows = csv_records(&stdout);
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, allocator) in rows.iter().zip(["system", "hakmem"]) {
        assert_eq!((row.workload.as_str(), row.kernel.as_str()), ("mixed", "mixed"));
        assert_eq!(row.allocator, allocator);
        assert_eq!(
            (row.min, row.max, row.ws, row.iters, row.threads, row.seed),
            (16, 1024, 400, 1000, 1, 1)
        );
        assert_eq!((row.runs, row.ok_runs), (1, 1));
        let (mops, ns) = (row.mops.unwrap(), row.ns_per_op.unwrap());
        assert!(mops > 0.0 && (mops * ns - 1e3).abs() < 1e-6, "mops {mops} ns/op {ns}");
        assert_eq!(row.mops_per_thread, row.mops);
        let rss = row.peak_rss_mib.unwrap();
        assert!(rss > 0.0 && rss < 1024.0, "peak RSS {rss} MiB");
        assert_eq!(row.op, "call");
        assert_eq!(row.failure, None);
        assert_eq!(row.vs_mimalloc, None, "mimalloc did not run");
    }
    assert_eq!(rows[0].vs_system, Some(1.0));
}

#[test]
fn json_output_holds_every_run_with_the_documented_fields() {
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
    let (report, results) = json_report(&stdout);
    assert_eq!((report.mode.as_str(), report.reps, report.scaling), ("rust", 2, false));
    assert!(report.notes.is_empty());
    let workloads: Vec<&str> = results.iter().map(|(r, _)| r.workload.as_str()).collect();
    assert_eq!(workloads, ["c7", "larson"]);
    for (record, samples) in &results {
        assert_eq!(record.allocator, "system");
        assert_eq!((record.runs, record.ok_runs), (2, 2));
        assert_eq!(samples.len(), 2);
        assert!(samples
            .iter()
            .all(|s| s.ops > 0 && s.elapsed_ns > 0 && s.maxrss_kib > 0));
    }
    assert_eq!(results[1].0.threads, 2, "larson on 2 threads");
}

/// `--preload` with whatever libraries this machine has: glibc always runs;
/// missing libraries are skipped with a note, not an error.
#[test]
fn tiny_preload_run_skips_missing_libraries() {
    if !have("cc", "tiny_preload_run_skips_missing_libraries") {
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
    let rows = csv_records(&stdout);
    let ran: Vec<&str> = rows.iter().map(|r| r.allocator.as_str()).collect();
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
    assert!(rows.iter().all(|r| r.ok_runs == 1), "{stdout}");
}

/// huge, churn and pacing, small, against glibc and both mimalloc builds
/// (`mimalloc` selects both), through GlobalAlloc and under LD_PRELOAD:
/// every run succeeds and counts the operations its workload defines.
#[test]
fn new_workloads_run_against_both_mimalloc_builds_in_both_modes() {
    let mut modes = vec![false];
    if have("cc", "new_workloads_run_against_both_mimalloc_builds_in_both_modes") {
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
        let (report, results) = json_report(&stdout);
        assert_eq!(report.mode, if preload { "preload" } else { "rust" });
        // huge: free + alloc per replacement; churn: 20 rounds of 4 threads;
        // pacing: 2 pairs, alloc + free per block.
        for (workload, ops) in [("huge", 2 * 20), ("churn", 20 * 4), ("pacing", 2 * 2 * 20)] {
            for allocator in ["system", "mimalloc2", "mimalloc3"] {
                let (record, samples) = results
                    .iter()
                    .find(|(r, _)| r.workload == workload && r.allocator == allocator)
                    .unwrap_or_else(|| panic!("no {workload} {allocator}\n{stdout}"));
                let counted: Vec<u64> = samples.iter().map(|s| s.ops).collect();
                assert_eq!(counted, [ops, ops], "preload {preload}: {workload} {allocator}");
                let unit = if workload == "churn" { "thread" } else { "call" };
                assert_eq!(record.op, unit, "churn counts threads");
            }
        }
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
    let rows = csv_records(&stdout);
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, threads) in rows.iter().zip([1, 2]) {
        assert_eq!(row.threads, threads);
        let (mops, per_thread) = (row.mops.unwrap(), row.mops_per_thread.unwrap());
        assert!((per_thread * threads as f64 - mops).abs() < 1e-9 * mops, "{stdout}");
    }
}

/// The texts of an SVG's text elements, trimmed.
fn svg_texts(doc: &roxmltree::Document) -> Vec<String> {
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| {
            n.descendants()
                .filter(|t| t.is_text())
                .filter_map(|t| t.text())
                .collect::<String>()
                .trim()
                .to_string()
        })
        .collect()
}

/// The rectangles of an SVG filled with `colour` (`#RRGGBB`, any case).
fn rects_of(doc: &roxmltree::Document, colour: &str) -> usize {
    doc.descendants()
        .filter(|n| n.has_tag_name("rect"))
        .filter(|n| n.attribute("fill").is_some_and(|f| f.eq_ignore_ascii_case(colour)))
        .count()
}

/// The colour hakmem-bench draws each allocator in (plot.rs).
const COLOURS: &[(&str, &str)] = &[("hakmem", "#e15759"), ("system", "#9d9d9d"), ("mimalloc3", "#4e79a7")];

/// Checks a PNG written by `--plot` against its SVG: it decodes at the
/// SVG's size, is mostly white, has text and axes, and every allocator's
/// colour.
fn check_png(png: &Path, svg: &roxmltree::Document) {
    let bytes = std::fs::read(png).expect("the PNG was written");
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .expect("the PNG decodes");
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut buffer).expect("the PNG's pixels decode");
    assert_eq!(frame.color_type, png::ColorType::Rgb);
    let size = |name| svg.root_element().attribute(name).unwrap().parse::<u32>().unwrap();
    assert_eq!((frame.width, frame.height), (size("width"), size("height")));
    let pixels: Vec<&[u8]> = buffer[..frame.buffer_size()].chunks(3).collect();
    let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
    let dark = pixels.iter().filter(|p| p.iter().all(|&c| c < 80)).count();
    assert!(white > pixels.len() / 2, "a white background");
    assert!(
        dark > pixels.len() / 1000,
        "text and axes were drawn ({dark} dark pixels)"
    );
    for (allocator, colour) in COLOURS {
        let rgb = u32::from_str_radix(&colour[1..], 16).unwrap();
        let expected = [(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8];
        assert!(
            pixels.iter().any(|p| **p == expected),
            "no pixel of {allocator} ({colour})"
        );
    }
}

/// `--plot` as a user runs it: the same tiny table drawn as SVG and PNG.
/// The SVG is read as XML: the title and legend, two panels (throughput
/// relative to the system allocator, peak RSS), each with its groups
/// labelled, a bar per workload and allocator (the system allocator's
/// throughput bar is its 1x line), and each value the CSV reports written
/// on its bar.
#[test]
fn plot_draws_one_chart_with_a_bar_per_workload_and_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let (svg_path, png_path) = (dir.path().join("plot.svg"), dir.path().join("plot.png"));
    let out = bench(&[
        "--workloads",
        "mixed,c7,larson",
        "--iters",
        "3000",
        "--reps",
        "1",
        "--allocators",
        "hakmem,system,mimalloc3",
        "--format",
        "csv",
        "--plot",
        svg_path.to_str().unwrap(),
        "--plot",
        png_path.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("plot written to {}", svg_path.display())),
        "{stderr}"
    );
    let records = csv_records(&stdout);

    let svg = std::fs::read_to_string(&svg_path).expect("the SVG was written");
    let doc = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    assert_eq!(root.tag_name().namespace(), Some("http://www.w3.org/2000/svg"));
    let texts = svg_texts(&doc);
    let count = |text: &str| texts.iter().filter(|t| *t == text).count();
    assert!(texts[0].starts_with("hakmem-bench: GlobalAlloc"), "{texts:?}");
    assert_eq!(texts[1..4], ["hakmem", "system", "mimalloc3"], "the legend");
    assert_eq!(count("Throughput vs system (higher is faster)"), 1, "{texts:?}");
    assert_eq!(count("Peak RSS, MiB (lower is leaner)"), 1, "{texts:?}");
    for workload in ["mixed", "c7", "larson"] {
        assert_eq!(count(workload), 2, "a label under each panel: {texts:?}");
    }
    // The legend's swatch, then a bar per workload in each panel (the
    // system allocator's 1x throughput bars have no height).
    for (allocator, colour) in COLOURS {
        assert_eq!(rects_of(&doc, colour), 1 + 3 + 3, "{allocator}: {svg}");
    }
    for record in &records {
        let ratio = record.vs_system.unwrap();
        let mib = record.peak_rss_mib.unwrap();
        let label = |v: f64, big: f64| match v {
            v if v >= 100.0 => format!("{v:.0}"),
            v if v >= big => format!("{v:.1}"),
            v => format!("{v:.2}"),
        };
        if record.allocator != "system" {
            assert!(
                texts.contains(&label(ratio, 10.0)),
                "{} {ratio}: {texts:?}",
                record.allocator
            );
        }
        let mib_label = match mib {
            m if m >= 10.0 => format!("{m:.0}"),
            m => label(m, 1.0),
        };
        assert!(texts.contains(&mib_label), "{} {mib}: {texts:?}", record.allocator);
    }
    check_png(&png_path, &doc);
}

/// With --scaling, one chart per workload, one group of bars per thread
/// count; without the system allocator, throughput is relative to the
/// first allocator named.
#[test]
fn scaling_plot_has_a_chart_per_workload() {
    let dir = tempfile::tempdir().unwrap();
    let svg_path = dir.path().join("scaling.svg");
    let out = bench(&[
        "--scaling",
        "--workloads",
        "larson,prodcons",
        "--threads",
        "1,2",
        "--iters",
        "500",
        "--reps",
        "1",
        "--allocators",
        "hakmem,mimalloc3",
        "--plot",
        svg_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let texts = svg_texts(&doc);
    let count = |text: &str| texts.iter().filter(|t| *t == text).count();
    let titles: Vec<&String> = texts.iter().filter(|t| t.ends_with(": thread scaling")).collect();
    assert_eq!(titles, ["larson: thread scaling", "prodcons: thread scaling"]);
    assert_eq!(count("Throughput vs hakmem (higher is faster)"), 2, "{texts:?}");
    // larson at 1 and 2 threads, prodcons in whole pairs (2 only); each
    // label under both panels of its chart.
    assert_eq!((count("1 thr"), count("2 thr")), (2, 4), "{texts:?}");
    assert_eq!(
        rects_of(&doc, "#4e79a7"),
        1 + 2 * 3,
        "mimalloc3: the swatch, a bar per group and panel"
    );
}

/// The progress line in a log (stderr not a terminal): one line per run,
/// naming the workload, the allocator and the rep, with the time elapsed
/// and indicatif's estimate of the time left once a run has finished.
#[test]
fn progress_in_a_log_is_one_line_per_run() {
    let out = bench(&[
        "--workloads",
        "mixed,c7",
        "--iters",
        "1000",
        "--reps",
        "2",
        "--allocators",
        "system,hakmem",
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 8 + 1, "{stderr}");
    assert!(!stderr.contains('\r') && !stderr.contains('\x1b'), "{stderr:?}");
    let mut runs = Vec::new();
    for workload in ["mixed", "c7"] {
        for rep in 1..=2 {
            for allocator in ["system", "hakmem"] {
                runs.push(format!("{workload} | {allocator} | rep {rep}/2 | elapsed 00:00:"));
            }
        }
    }
    for (i, (line, run)) in lines.iter().zip(&runs).enumerate() {
        let prefix = format!("[{}/8] {run}", i + 1);
        assert!(line.starts_with(&prefix), "line {i}: {line:?}, expected {prefix:?}");
        if i == 0 {
            assert!(line.ends_with("| left ?"), "{line}");
        } else {
            assert!(line.contains("| left 00:"), "{line}");
        }
    }
    assert!(lines[8].starts_with("hakmem-bench: 8 runs in 00:"), "{}", lines[8]);
}

/// On a terminal (`script` gives the run one) indicatif redraws the line
/// in place: the first run is shown, no run gets a line of its own, and
/// the summary follows.
#[test]
fn progress_on_a_terminal_is_rewritten_in_place() {
    if !have("script", "progress_on_a_terminal_is_rewritten_in_place") {
        return;
    }
    let command = format!(
        "{} --workloads c7 --iters 1000 --reps 2 --allocators system,hakmem --format csv >/dev/null",
        env!("CARGO_BIN_EXE_hakmem-bench")
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .expect("run script");
    let screen = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{screen}");
    assert!(screen.contains("[1/4] c7 | system | rep 1/2 | elapsed"), "{screen:?}");
    assert!(
        screen.contains('\r') && screen.contains("\x1b["),
        "redrawn in place: {screen:?}"
    );
    for line in screen.lines() {
        let line = line.trim_start_matches(['\r']);
        assert!(
            !line.starts_with("[2/4]") && !line.starts_with("[3/4]"),
            "a line per run: {screen:?}"
        );
    }
    assert!(screen.contains("hakmem-bench: 4 runs in"), "{screen:?}");
}

/// The measured child, run by hand: one result line for a good request, a
/// message and status 1 for a bad one.
#[test]
fn the_child_runs_one_workload_and_prints_one_result_line() {
    let child = env!("CARGO_BIN_EXE_hakmem-bench-child");
    let out = Command::new(child)
        .args(["mixed", "16", "64", "10", "1000", "1", "1", "mixed", "hakmem"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("hakmem-bench-result workload=mixed allocator=hakmem ops=1000 elapsed_ns="),
        "{stdout}"
    );
    let out = Command::new(child)
        .args(["mixed", "16", "64", "0", "1000", "1", "1", "mixed", "hakmem"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "hakmem-bench-child: WS, ITERS and THREADS must be at least 1\n"
    );
}

/// The parent copied without its child says what to build, and fails.
#[test]
fn the_parent_without_its_child_says_what_to_build() {
    let (_dir, exe) = private_copy();
    let out = Command::new(&exe)
        .args(["--workloads", "c7", "--reps", "1"])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("hakmem-bench-child not found") && stderr.contains("cargo build --release -p hakmem-bench"),
        "{stderr}"
    );
}

/// A copy of the built binary in a folder of its own (0700), as if built
/// there, so its scratch folder is `hakmem-bench-c/` in that folder.
fn private_copy() -> (tempfile::TempDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let exe = dir.path().join("hakmem-bench");
    // By `cp`, not std::fs::copy: a file this process holds open for writing
    // can be inherited by a child another test thread forks at that moment,
    // and executing it then fails with ETXTBSY.
    let copied = Command::new("cp")
        .arg(env!("CARGO_BIN_EXE_hakmem-bench"))
        .arg(&exe)
        .status()
        .unwrap();
    assert!(copied.success());
    (dir, exe)
}

/// Runs `exe` once under `--preload` (glibc only): the C program runs.
fn preload_once(exe: &Path) -> Output {
    let out = Command::new(exe)
        .args([
            "--preload",
            "--allocators",
            "system",
            "--workloads",
            "c7",
            "--iters",
            "500",
            "--reps",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    out
}

/// The compiled C program is reused only from a folder and a file that
/// are this user's alone; a binary planted where it would be found (the
/// file made writable by others, then the folder) is never run, and a
/// folder others can write to is not used at all.
#[test]
fn a_planted_c_benchmark_is_never_run() {
    use std::os::unix::fs::PermissionsExt;
    if !have("cc", "a_planted_c_benchmark_is_never_run") {
        return;
    }
    let (dir, exe) = private_copy();
    let scratch = dir.path().join("hakmem-bench-c");
    preload_once(&exe);
    let built: Vec<_> = std::fs::read_dir(&scratch)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("bench-"))
        .collect();
    assert_eq!(built.len(), 1, "{built:?}");
    let binary = &built[0];
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(&scratch), mode(binary)), (0o700, 0o700));

    // The planted program leaves a mark and claims a result.
    let mark = dir.path().join("planted-program-ran");
    let planted = format!(
        "#!/bin/sh\ntouch {}\necho 'hakmem-bench-result workload=c7 allocator=system ops=1 elapsed_ns=1 errors=0 maxrss_kib=1'\n",
        mark.display()
    );
    let plant = |path: &Path, mode: u32| {
        let _ = std::fs::remove_file(path);
        std::fs::write(path, &planted).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };

    // Writable by others: rebuilt, not run.
    plant(binary, 0o777);
    preload_once(&exe);
    assert!(!mark.exists(), "the planted program ran");
    assert_eq!(mode(binary), 0o700, "rebuilt");
    assert!(!std::fs::read(binary).unwrap().starts_with(b"#!"));

    // Owned by someone else (root can hand it to nobody): rebuilt.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        plant(binary, 0o755);
        std::os::unix::fs::chown(binary, Some(65534), None).unwrap();
        preload_once(&exe);
        assert!(!mark.exists(), "the planted program ran");
        assert!(!std::fs::read(binary).unwrap().starts_with(b"#!"));
    }

    // A scratch folder others can write to is not used: the program is
    // built in a private folder, and the planted one is left alone.
    plant(binary, 0o700);
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o777)).unwrap();
    preload_once(&exe);
    assert!(!mark.exists(), "the planted program ran");
    assert!(std::fs::read(binary).unwrap().starts_with(b"#!"), "left alone");
}
