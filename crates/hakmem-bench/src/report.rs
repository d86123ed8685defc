//! From runs to results: medians, ratios of medians, and the three output
//! formats (table; CSV and JSON through serde, one `Record` per row), plus
//! the scaling table (one column per thread count) when the plan asks for
//! several counts. `plot` draws the same rows.
//!
//! Per job (workload at one thread count) and allocator: throughput is the
//! median over the successful runs of `ops / elapsed`; ns/op is its inverse
//! (wall time per operation, all threads together); per-thread throughput
//! divides it by the job's threads; peak RSS is the median of the children's
//! `ru_maxrss`. The ratios divide this allocator's median throughput by
//! mimalloc's (the faster of `mimalloc2` and `mimalloc3` on the job: what a
//! goal against "mimalloc" means) and by the system allocator's, from the
//! same invocation (BENCHMARKING.md: ratios from one run, never across runs).

use crate::allocators::{Allocator, MIMALLOC};
use crate::cli::{Format, Job, Mode, Plan};
use crate::runner::{Cell, Sample};
use serde::Serialize;
use std::fmt::Write as _;

/// The median of `values` (the mean of the middle two for an even count),
/// or `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `value / baseline`, when both exist and the baseline is positive.
pub fn ratio(value: Option<f64>, baseline: Option<f64>) -> Option<f64> {
    match (value, baseline) {
        (Some(v), Some(b)) if b > 0.0 => Some(v / b),
        _ => None,
    }
}

/// One line of the results: one workload against one allocator.
#[derive(Debug)]
pub struct Row<'a> {
    pub job: &'a Job,
    pub allocator: Allocator,
    pub runs: usize,
    pub samples: Vec<Sample>,
    /// Median million operations per second.
    pub mops: Option<f64>,
    /// `mops` divided by the job's threads.
    pub mops_per_thread: Option<f64>,
    pub ns_per_op: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    pub vs_mimalloc: Option<f64>,
    pub vs_system: Option<f64>,
    /// "k/n runs failed: first reason", when any run failed.
    pub failure: Option<String>,
}

/// Summarises `cells` (from `runner::run_plan` on `plan`).
pub fn rows<'a>(plan: &'a Plan, cells: &[Cell]) -> Vec<Row<'a>> {
    let mut rows: Vec<Row<'a>> = cells
        .iter()
        .map(|cell| {
            let samples: Vec<Sample> = cell.runs.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
            let failures: Vec<String> = cell
                .runs
                .iter()
                .filter_map(|r| r.as_ref().err().map(|f| f.to_string()))
                .collect();
            let mops = median(&samples.iter().map(Sample::mops).collect::<Vec<_>>());
            let rss_kib = median(&samples.iter().map(|s| s.maxrss_kib as f64).collect::<Vec<_>>());
            Row {
                job: &plan.jobs[cell.job],
                allocator: cell.allocator,
                runs: cell.runs.len(),
                samples,
                mops,
                mops_per_thread: mops.map(|m| m / plan.jobs[cell.job].params.threads as f64),
                ns_per_op: ratio(Some(1e3), mops),
                peak_rss_mib: rss_kib.map(|kib| kib / 1024.0),
                vs_mimalloc: None,
                vs_system: None,
                failure: failures
                    .first()
                    .map(|first| format!("{}/{} runs failed: {first}", failures.len(), cell.runs.len())),
            }
        })
        .collect();
    // The fastest median among `allocators` on `job`.
    let baseline = |rows: &[Row], job: &Job, allocators: &[Allocator]| {
        rows.iter()
            .filter(|r| std::ptr::eq(r.job, job) && allocators.contains(&r.allocator))
            .filter_map(|r| r.mops)
            .max_by(f64::total_cmp)
    };
    for i in 0..rows.len() {
        let job = rows[i].job;
        rows[i].vs_mimalloc = ratio(rows[i].mops, baseline(&rows, job, MIMALLOC));
        rows[i].vs_system = ratio(rows[i].mops, baseline(&rows, job, &[Allocator::System]));
    }
    rows
}

/// The results in `plan.format`. `notes` (skipped allocators and the like)
/// go below the table and into the JSON; CSV has no place for them.
pub fn render(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    match plan.format {
        Format::Table if plan.scaling => scaling_table(plan, rows, notes),
        Format::Table => table(plan, rows, notes),
        Format::Csv => csv(rows),
        Format::Json => json(plan, rows, notes),
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Preload => "preload",
        Mode::Compare => "rust",
    }
}

fn fixed(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
}

/// A throughput: two decimals, or three significant digits below 1 (churn
/// runs thousands of threads per second, huge a few thousand calls).
fn rate(value: Option<f64>) -> String {
    let decimals = |v: f64| {
        if v >= 1.0 || v <= 0.0 {
            2
        } else {
            (2.0 - v.log10().floor()).min(9.0) as usize
        }
    };
    value.map_or_else(|| "-".into(), |v| format!("{v:.0$}", decimals(v)))
}

/// A time per operation: two decimals, none from 10 µs up.
fn nanos(value: Option<f64>) -> String {
    fixed(value, if value.is_some_and(|v| v >= 1e4) { 0 } else { 2 })
}

fn times(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.2}x"))
}

/// `min - max` in bytes, or one size when they are equal: `16 B - 1 KiB`.
pub fn size_range(min: usize, max: usize) -> String {
    if min == max {
        size(min)
    } else {
        format!("{} - {}", size(min), size(max))
    }
}

/// `bytes` in the largest binary unit that divides it: `16 B`, `64 KiB`.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// What was measured, in one line: `hakmem-bench: GlobalAlloc, identical
/// loop per allocator; median of 5 runs; seed 1`. The first line of a table
/// and of a plot.
pub fn headline(plan: &Plan) -> String {
    let how = match plan.mode {
        Mode::Preload => "C program under LD_PRELOAD",
        Mode::Compare => "GlobalAlloc, identical loop per allocator",
    };
    let scaling = if plan.scaling { "thread scaling; " } else { "" };
    let seed = plan.jobs.first().map_or(0, |j| j.params.seed);
    let runs = if plan.reps == 1 {
        "one run".to_string()
    } else {
        format!("median of {} runs", plan.reps)
    };
    format!("hakmem-bench: {scaling}{how}; {runs}; seed {seed}")
}

/// The first lines of a table.
fn title(plan: &Plan) -> String {
    format!(
        "{}\nvs mimalloc: against the faster of mimalloc2 and mimalloc3 in this run\n\n",
        headline(plan)
    )
}

const WORKLOAD_WIDTH: usize = 9;
const ALLOCATOR_WIDTH: usize = 12;

fn table(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    let mut out = title(plan);
    let _ = writeln!(
        out,
        "{:<WORKLOAD_WIDTH$} {:<ALLOCATOR_WIDTH$} {:>9} {:>8} {:>9} {:>11} {:>9}",
        "workload", "allocator", "Mops/s", "ns/op", "peak MiB", "vs mimalloc", "vs system"
    );
    let mut previous: Option<&Job> = None;
    for row in rows {
        if previous.is_some_and(|job| !std::ptr::eq(job, row.job)) {
            out.push('\n');
        }
        previous = Some(row.job);
        let note = match (&row.failure, row.mops) {
            (Some(failure), None) => format!("FAILED: {failure}"),
            (Some(failure), Some(_)) => failure.clone(),
            (None, _) => String::new(),
        };
        let line = format!(
            "{:<WORKLOAD_WIDTH$} {:<ALLOCATOR_WIDTH$} {:>9} {:>8} {:>9} {:>11} {:>9}  {note}",
            row.job.workload,
            row.allocator.name(),
            rate(row.mops),
            nanos(row.ns_per_op),
            fixed(row.peak_rss_mib, 1),
            times(row.vs_mimalloc),
            times(row.vs_system),
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    parameters(&mut out, plan);
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// The parameters of every workload, once per workload (a scaling plan
/// lists its thread counts together).
fn parameters(out: &mut String, plan: &Plan) {
    out.push_str("\nWorkload parameters (iterations per thread, per producer, or rounds for churn):\n");
    let mut seen: Vec<&str> = Vec::new();
    for job in &plan.jobs {
        if seen.contains(&job.workload) {
            continue;
        }
        seen.push(job.workload);
        let p = &job.params;
        let sizes = size_range(p.min, p.max);
        let ws = if p.kernel.uses_ws() {
            p.ws.to_string()
        } else {
            "-".into()
        };
        let threads: Vec<String> = plan
            .jobs
            .iter()
            .filter(|j| j.workload == job.workload)
            .map(|j| j.params.threads.to_string())
            .collect();
        let unit = match p.kernel.op_unit() {
            "call" => String::new(),
            unit => format!("  (one op = one {unit})"),
        };
        let _ = writeln!(
            out,
            "  {:<9} {sizes:<15} ws {ws:<5} iters {:<9} threads {}{unit}",
            job.workload,
            p.iters,
            threads.join(",")
        );
    }
}

/// A block of the scaling table: its heading and how a cell is written.
type Block = (&'static str, fn(&Row) -> String);

/// The scaling table: per workload and allocator, one column per thread
/// count of the plan, in four blocks (throughput, throughput per thread,
/// peak RSS, ratio to mimalloc). A cell is `-` where the workload did not
/// run at that count (one-thread workloads; pair workloads at odd counts).
fn scaling_table(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    let mut out = title(plan);
    let mut workloads: Vec<&str> = Vec::new();
    for job in &plan.jobs {
        if !workloads.contains(&job.workload) {
            workloads.push(job.workload);
        }
    }
    let blocks: [Block; 4] = [
        ("Mops/s, all threads together", |r| rate(r.mops)),
        ("Mops/s per thread (falls where a workload stops scaling)", |r| {
            rate(r.mops_per_thread)
        }),
        ("Peak RSS, MiB", |r| fixed(r.peak_rss_mib, 1)),
        ("Throughput vs mimalloc", |r| times(r.vs_mimalloc)),
    ];
    for (heading, cell) in blocks {
        let _ = write!(
            out,
            "{heading}\n{:<WORKLOAD_WIDTH$} {:<ALLOCATOR_WIDTH$}",
            "workload", "allocator"
        );
        for threads in &plan.thread_counts {
            let _ = write!(out, " {:>9}", format!("{threads} thr"));
        }
        out.push('\n');
        for workload in &workloads {
            for &allocator in &plan.allocators {
                let mut line = format!("{workload:<WORKLOAD_WIDTH$} {:<ALLOCATOR_WIDTH$}", allocator.name());
                for &threads in &plan.thread_counts {
                    let row = rows.iter().find(|r| {
                        r.job.workload == *workload && r.job.params.threads == threads && r.allocator == allocator
                    });
                    let text = match row {
                        None => "-".to_string(),
                        Some(row) if row.mops.is_none() => "FAILED".to_string(),
                        Some(row) => cell(row),
                    };
                    let _ = write!(line, " {text:>9}");
                }
                let _ = writeln!(out, "{}", line.trim_end());
            }
        }
        out.push('\n');
    }
    for row in rows.iter().filter(|r| r.failure.is_some()) {
        let _ = writeln!(
            out,
            "failed: {} {} threads {}: {}",
            row.job.workload,
            row.allocator,
            row.job.params.threads,
            row.failure.as_deref().unwrap_or_default()
        );
    }
    out.push_str("-: not run at that count (one-thread workloads; prodcons and pacing run whole pairs)\n");
    parameters(&mut out, plan);
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

/// One row of the CSV output, and the fields of one result in the JSON
/// output (which adds its samples): one workload at one thread count against
/// one allocator. The field names are the column names; a missing number
/// (no successful run, no baseline) is an empty CSV field or JSON `null`.
/// README.md lists the fields.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    pub workload: &'a str,
    pub kernel: &'a str,
    pub min: usize,
    pub max: usize,
    pub ws: usize,
    pub iters: u64,
    pub threads: usize,
    pub seed: u64,
    pub allocator: &'a str,
    pub runs: usize,
    pub ok_runs: usize,
    pub mops: Option<f64>,
    pub ns_per_op: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    pub vs_mimalloc: Option<f64>,
    pub vs_system: Option<f64>,
    pub mops_per_thread: Option<f64>,
    /// What one operation is: `call`, or `thread` for churn.
    pub op: &'a str,
    pub failure: Option<&'a str>,
}

impl<'a> Record<'a> {
    fn of(row: &'a Row) -> Record<'a> {
        let p = &row.job.params;
        Record {
            workload: row.job.workload,
            kernel: p.kernel.name(),
            min: p.min,
            max: p.max,
            ws: p.ws,
            iters: p.iters,
            threads: p.threads,
            seed: p.seed,
            allocator: row.allocator.name(),
            runs: row.runs,
            ok_runs: row.samples.len(),
            mops: row.mops,
            ns_per_op: row.ns_per_op,
            peak_rss_mib: row.peak_rss_mib,
            vs_mimalloc: row.vs_mimalloc,
            vs_system: row.vs_system,
            mops_per_thread: row.mops_per_thread,
            op: p.kernel.op_unit(),
            failure: row.failure.as_deref(),
        }
    }
}

/// The JSON output: the invocation, every result with every run, the notes.
#[derive(Serialize)]
struct JsonReport<'a> {
    /// `rust` (GlobalAlloc) or `preload` (LD_PRELOAD).
    mode: &'static str,
    reps: usize,
    /// Whether the table was the scaling table.
    scaling: bool,
    results: Vec<JsonResult<'a>>,
    notes: &'a [String],
}

#[derive(Serialize)]
struct JsonResult<'a> {
    #[serde(flatten)]
    record: Record<'a>,
    samples: Vec<JsonSample>,
}

/// One successful run.
#[derive(Serialize)]
struct JsonSample {
    ops: u64,
    elapsed_ns: u64,
    maxrss_kib: u64,
}

fn csv(rows: &[Row]) -> String {
    let mut writer = csv::Writer::from_writer(Vec::new());
    for row in rows {
        writer
            .serialize(Record::of(row))
            .expect("a record of numbers and strings serialises");
    }
    let bytes = writer.into_inner().expect("writing to memory cannot fail");
    String::from_utf8(bytes).expect("the fields are UTF-8")
}

fn json(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    let report = JsonReport {
        mode: mode_name(plan.mode),
        reps: plan.reps,
        scaling: plan.scaling,
        results: rows
            .iter()
            .map(|row| JsonResult {
                record: Record::of(row),
                samples: row
                    .samples
                    .iter()
                    .map(|s| JsonSample {
                        ops: s.ops,
                        elapsed_ns: s.elapsed_ns,
                        maxrss_kib: s.maxrss_kib,
                    })
                    .collect(),
            })
            .collect(),
        notes,
    };
    let mut out = serde_json::to_string_pretty(&report).expect("the report serialises");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::Failure;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
        assert_eq!(median(&[]), None);
        // An outlier does not move it.
        assert_eq!(median(&[10.0, 11.0, 12.0, 13.0, 1000.0]), Some(12.0));
    }

    #[test]
    fn ratio_needs_both_and_a_positive_baseline() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio(None, Some(2.0)), None);
        assert_eq!(ratio(Some(3.0), None), None);
        assert_eq!(ratio(Some(3.0), Some(0.0)), None);
    }

    fn plan(format: &str) -> Plan {
        crate::cli::try_parse_from([
            "hakmem-bench",
            "--workloads",
            "mixed,c7",
            "--allocators",
            "hakmem,system,mimalloc",
            "--reps",
            "3",
            "--format",
            format,
        ])
        .unwrap()
        .plan()
        .unwrap()
    }

    /// `mops` million ops per second, as a sample of 1e6 ops.
    fn sample(mops: f64, maxrss_kib: u64) -> Result<Sample, Failure> {
        Ok(Sample {
            ops: 1_000_000,
            elapsed_ns: (1e9 / mops) as u64,
            maxrss_kib,
        })
    }

    fn cells() -> Vec<Cell> {
        let cell = |job, allocator, runs| Cell { job, allocator, runs };
        vec![
            cell(
                0,
                Allocator::Hakmem,
                vec![sample(40.0, 2048), sample(10.0, 1024), sample(30.0, 3072)],
            ),
            cell(
                0,
                Allocator::System,
                vec![sample(10.0, 4096), sample(10.0, 4096), Err(Failure::Signal(11))],
            ),
            cell(
                0,
                Allocator::Mimalloc2,
                vec![sample(20.0, 1024), sample(20.0, 1024), sample(20.0, 1024)],
            ),
            cell(
                0,
                Allocator::Mimalloc3,
                vec![sample(15.0, 1024), sample(15.0, 1024), sample(15.0, 1024)],
            ),
            cell(
                1,
                Allocator::Hakmem,
                vec![Err(Failure::Exit(3)), Err(Failure::Signal(6)), Err(Failure::Exit(3))],
            ),
            cell(
                1,
                Allocator::System,
                vec![sample(5.0, 1024), sample(5.0, 1024), sample(5.0, 1024)],
            ),
            cell(
                1,
                Allocator::Mimalloc2,
                vec![sample(40.0, 1024), sample(40.0, 1024), sample(40.0, 1024)],
            ),
            cell(
                1,
                Allocator::Mimalloc3,
                vec![sample(50.0, 1024), sample(50.0, 1024), Err(Failure::Exit(1))],
            ),
        ]
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-6)
    }

    #[test]
    fn rows_take_medians_and_ratios_of_medians() {
        let plan = plan("table");
        let rows = rows(&plan, &cells());
        let hakmem = &rows[0];
        assert!(close(hakmem.mops, 30.0));
        assert!(close(hakmem.ns_per_op, 1e3 / 30.0));
        assert!(close(hakmem.peak_rss_mib, 2.0));
        assert!(close(hakmem.vs_mimalloc, 1.5), "against mimalloc2, the faster here");
        assert!(close(hakmem.vs_system, 3.0));
        assert!(close(hakmem.mops_per_thread, 30.0), "one thread");
        assert!(close(rows[3].vs_mimalloc, 0.75), "mimalloc3 against mimalloc2");
        assert!(hakmem.failure.is_none());
        // A partly failed cell keeps the median of its good runs.
        let system = &rows[1];
        assert!(close(system.mops, 10.0) && close(system.vs_system, 1.0));
        assert_eq!(
            system.failure.as_deref(),
            Some("1/3 runs failed: killed by signal 11 (SIGSEGV)")
        );
        // A wholly failed cell has no numbers and no ratios.
        let failed = &rows[4];
        assert_eq!((failed.mops, failed.vs_mimalloc), (None, None));
        assert_eq!(failed.failure.as_deref(), Some("3/3 runs failed: exited with status 3"));
        assert!(close(rows[5].vs_mimalloc, 0.1), "against mimalloc3, the faster here");
        assert!(close(rows[6].vs_mimalloc, 0.8));
    }

    #[test]
    fn table_marks_failed_cells_and_lists_parameters() {
        let plan = plan("table");
        let out = render(&plan, &rows(&plan, &cells()), &["tcmalloc skipped".into()]);
        let line = |start: &str| {
            out.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("{out}"))
        };
        let hakmem = line("mixed     hakmem");
        assert!(
            hakmem.contains("30.00") && hakmem.contains("33.33") && hakmem.contains("1.50x"),
            "{hakmem}"
        );
        assert!(line("c7        hakmem").contains("FAILED: 3/3 runs failed"), "{out}");
        assert!(line("  c7").contains("1 KiB "), "{out}");
        assert!(line("  mixed").contains("16 B - 1 KiB"), "{out}");
        assert!(out.lines().all(|l| l == l.trim_end()), "trailing blanks:\n{out}");
        assert!(out.contains("note: tcmalloc skipped"));
    }

    #[test]
    fn csv_has_one_parseable_row_per_cell() {
        let plan = plan("csv");
        let mut cells = cells();
        // A failure whose message holds the CSV's delimiter and quotes.
        cells[4].runs[0] = Err(Failure::BadOutput("a, \"b\"\nc".into()));
        let out = render(&plan, &rows(&plan, &cells), &[]);
        let mut reader = csv::Reader::from_reader(out.as_bytes());
        let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header[..3], ["workload", "kernel", "min"]);
        let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 8);
        let col = |name| header.iter().position(|h| h == name).unwrap();
        assert_eq!(&rows[0][col("allocator")], "hakmem");
        let number = |row: &csv::StringRecord, name| Some(row[col(name)].parse::<f64>().unwrap());
        assert!(close(number(&rows[0], "mops"), 30.0));
        assert!(close(number(&rows[0], "vs_mimalloc"), 1.5));
        assert!(close(number(&rows[0], "mops_per_thread"), 30.0));
        assert_eq!(&rows[0][col("op")], "call");
        assert_eq!(&rows[0][col("failure")], "");
        assert_eq!(&rows[2][col("allocator")], "mimalloc2");
        assert_eq!(&rows[3][col("allocator")], "mimalloc3");
        assert_eq!(&rows[4][col("mops")], "");
        assert_eq!(&rows[4][col("ok_runs")], "0");
        assert_eq!(
            &rows[4][col("failure")],
            "3/3 runs failed: bad output: a, \"b\"\nc",
            "quoted and read back whole"
        );
    }

    #[test]
    fn json_parses_and_carries_every_sample() {
        let plan = plan("json");
        let out = render(&plan, &rows(&plan, &cells()), &["a \"quoted\" note".into()]);
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["mode"], "rust");
        assert_eq!(json["reps"], 3);
        assert_eq!(json["scaling"], false);
        assert_eq!(json["notes"], serde_json::json!(["a \"quoted\" note"]));
        let results = json["results"].as_array().unwrap();
        assert_eq!(results.len(), 8);
        let samples: usize = results.iter().map(|r| r["samples"].as_array().unwrap().len()).sum();
        assert_eq!(samples, 3 + 2 + 3 + 3 + 3 + 3 + 2);
        assert_eq!(results[0]["workload"], "mixed");
        assert!(close(results[0]["mops"].as_f64(), 30.0));
        assert!(close(results[0]["mops_per_thread"].as_f64(), 30.0));
        assert_eq!(results[0]["samples"][0]["ops"], 1_000_000);
        assert!(results[4]["mops"].is_null() && results[4]["vs_system"].is_null());
        assert_eq!(results[4]["failure"], "3/3 runs failed: exited with status 3");
        assert!(results[0]["failure"].is_null());
    }

    #[test]
    fn small_rates_keep_three_significant_digits() {
        assert_eq!(rate(Some(114.734)), "114.73");
        assert_eq!(rate(Some(1.0)), "1.00");
        assert_eq!(rate(Some(0.5)), "0.500");
        assert_eq!(rate(Some(0.021_34)), "0.0213");
        assert_eq!(rate(Some(0.001_634)), "0.00163");
        assert_eq!(rate(None), "-");
        assert_eq!(nanos(Some(8.716)), "8.72");
        assert_eq!(nanos(Some(613_496.9)), "613497");
    }

    fn scaling_plan() -> Plan {
        crate::cli::try_parse_from([
            "hakmem-bench",
            "--scaling",
            "--workloads",
            "larson,prodcons,mixed",
            "--threads",
            "1,2,4",
            "--allocators",
            "hakmem,mimalloc",
            "--reps",
            "1",
        ])
        .unwrap()
        .plan()
        .unwrap()
    }

    #[test]
    fn scaling_table_has_a_column_per_thread_count_and_per_thread_rates() {
        let plan = scaling_plan();
        let names: Vec<(&str, usize)> = plan.jobs.iter().map(|j| (j.workload, j.params.threads)).collect();
        assert_eq!(
            names,
            [
                ("larson", 1),
                ("larson", 2),
                ("larson", 4),
                ("prodcons", 2),
                ("prodcons", 4),
                ("mixed", 1)
            ]
        );
        // Throughput grows less than the threads do: 8, 12, 16 Mops/s; the
        // larson 4-thread mimalloc3 cell failed.
        let mops = [8.0, 12.0, 16.0, 4.0, 6.0, 100.0];
        let mut cells = Vec::new();
        for (job, &m) in mops.iter().enumerate() {
            for (allocator, factor) in [
                (Allocator::Hakmem, 1.0),
                (Allocator::Mimalloc2, 0.5),
                (Allocator::Mimalloc3, 0.25),
            ] {
                let run = if job == 2 && allocator == Allocator::Mimalloc3 {
                    Err(Failure::Signal(11))
                } else {
                    sample(m * factor, 2048)
                };
                cells.push(Cell {
                    job,
                    allocator,
                    runs: vec![run],
                });
            }
        }
        let out = render(&plan, &rows(&plan, &cells), &[]);
        let block = |heading: &str| -> Vec<&str> {
            let start = out.find(heading).unwrap_or_else(|| {
                panic!(
                    "no {heading}:
{out}"
                )
            });
            out[start..].lines().skip(1).take_while(|l| !l.is_empty()).collect()
        };
        let words = |line: &str| -> Vec<String> { line.split_whitespace().map(String::from).collect() };
        let total = block("Mops/s, all threads together");
        assert_eq!(
            words(total[0]),
            ["workload", "allocator", "1", "thr", "2", "thr", "4", "thr"],
            "{out}"
        );
        assert_eq!(words(total[1]), ["larson", "hakmem", "8.00", "12.00", "16.00"]);
        assert_eq!(words(total[3]), ["larson", "mimalloc3", "2.00", "3.00", "FAILED"]);
        assert_eq!(words(total[4]), ["prodcons", "hakmem", "-", "4.00", "6.00"]);
        assert_eq!(words(total[7]), ["mixed", "hakmem", "100.00", "-", "-"]);
        assert_eq!(total.len(), 1 + 3 * 3);
        let per_thread = block("Mops/s per thread");
        assert_eq!(words(per_thread[1]), ["larson", "hakmem", "8.00", "6.00", "4.00"]);
        assert_eq!(words(per_thread[4]), ["prodcons", "hakmem", "-", "2.00", "1.50"]);
        let rss = block("Peak RSS, MiB");
        assert_eq!(words(rss[1]), ["larson", "hakmem", "2.0", "2.0", "2.0"]);
        let vs = block("Throughput vs mimalloc");
        // Against mimalloc2, the faster build, wherever it ran.
        assert_eq!(words(vs[1]), ["larson", "hakmem", "2.00x", "2.00x", "2.00x"]);
        assert_eq!(words(vs[3]), ["larson", "mimalloc3", "0.50x", "0.50x", "FAILED"]);
        assert!(
            out.contains("failed: larson mimalloc3 threads 4: 1/1 runs failed"),
            "{out}"
        );
        assert!(out.contains("  larson") && out.contains("threads 1,2,4"), "{out}");
        assert!(
            out.lines().all(|l| l == l.trim_end()),
            "trailing blanks:
{out}"
        );
    }
}
