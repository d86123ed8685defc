//! From runs to results: medians, ratios of medians, and the three output
//! formats (table, CSV, JSON written by hand).
//!
//! Per workload and allocator: throughput is the median over the successful
//! runs of `ops / elapsed`; ns/op is its inverse (wall time per operation,
//! all threads together); peak RSS is the median of the children's
//! `ru_maxrss`. The ratios divide this allocator's median throughput by
//! mimalloc's and by the system allocator's for the same workload, from the
//! same invocation (BENCHMARKING.md: ratios from one run, never across runs).

use crate::allocators::Allocator;
use crate::cli::{Format, Job, Mode, Plan};
use crate::runner::{Cell, Sample};
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
    let baseline = |rows: &[Row], workload: &str, allocator: Allocator| {
        rows.iter()
            .find(|r| r.job.workload == workload && r.allocator == allocator)
            .and_then(|r| r.mops)
    };
    for i in 0..rows.len() {
        let workload = rows[i].job.workload;
        rows[i].vs_mimalloc = ratio(rows[i].mops, baseline(&rows, workload, Allocator::Mimalloc));
        rows[i].vs_system = ratio(rows[i].mops, baseline(&rows, workload, Allocator::System));
    }
    rows
}

/// The results in `plan.format`. `notes` (skipped allocators and the like)
/// go below the table and into the JSON; CSV has no place for them.
pub fn render(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    match plan.format {
        Format::Table => table(plan, rows, notes),
        Format::Csv => csv(rows),
        Format::Json => json(plan, rows, notes),
    }
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Preload => "preload",
        Mode::Compare | Mode::Child(_) => "rust",
    }
}

fn fixed(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.decimals$}"))
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

fn table(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    let how = match plan.mode {
        Mode::Preload => "C program under LD_PRELOAD",
        Mode::Compare | Mode::Child(_) => "GlobalAlloc, identical loop per allocator",
    };
    let seed = plan.jobs.first().map_or(0, |j| j.params.seed);
    let mut out = format!("hakmem-bench: {how}; median of {} runs; seed {seed}\n\n", plan.reps);
    let _ = writeln!(
        out,
        "{:<9} {:<9} {:>9} {:>8} {:>9} {:>11} {:>9}",
        "workload", "allocator", "Mops/s", "ns/op", "peak MiB", "vs mimalloc", "vs system"
    );
    let mut previous = None;
    for row in rows {
        if previous.is_some_and(|w| w != row.job.workload) {
            out.push('\n');
        }
        previous = Some(row.job.workload);
        let note = match (&row.failure, row.mops) {
            (Some(failure), None) => format!("FAILED: {failure}"),
            (Some(failure), Some(_)) => failure.clone(),
            (None, _) => String::new(),
        };
        let line = format!(
            "{:<9} {:<9} {:>9} {:>8} {:>9} {:>11} {:>9}  {note}",
            row.job.workload,
            row.allocator.name(),
            fixed(row.mops, 2),
            fixed(row.ns_per_op, 2),
            fixed(row.peak_rss_mib, 1),
            times(row.vs_mimalloc),
            times(row.vs_system),
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.push_str("\nWorkload parameters (iterations per thread):\n");
    for job in &plan.jobs {
        let p = &job.params;
        let sizes = size_range(p.min, p.max);
        let ws = if p.kernel.uses_ws() {
            p.ws.to_string()
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "  {:<9} {sizes:<15} ws {ws:<5} iters {:<9} threads {}",
            job.workload, p.iters, p.threads
        );
    }
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    out
}

const CSV_HEADER: &str = "workload,kernel,min,max,ws,iters,threads,seed,allocator,runs,ok_runs,mops,ns_per_op,peak_rss_mib,vs_mimalloc,vs_system,failure";

fn csv(rows: &[Row]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    let number = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.4}"));
    for row in rows {
        let p = &row.job.params;
        let failure = row
            .failure
            .as_deref()
            .map_or_else(String::new, |f| format!("\"{}\"", f.replace('"', "\"\"")));
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{failure}",
            row.job.workload,
            p.kernel.name(),
            p.min,
            p.max,
            p.ws,
            p.iters,
            p.threads,
            p.seed,
            row.allocator.name(),
            row.runs,
            row.samples.len(),
            number(row.mops),
            number(row.ns_per_op),
            number(row.peak_rss_mib),
            number(row.vs_mimalloc),
            number(row.vs_system),
        );
    }
    out
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_number(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v}"),
        _ => "null".into(),
    }
}

fn json(plan: &Plan, rows: &[Row], notes: &[String]) -> String {
    let mut out = format!(
        "{{\n  \"mode\": {},\n  \"reps\": {},\n  \"results\": [",
        json_string(mode_name(plan.mode)),
        plan.reps
    );
    for (i, row) in rows.iter().enumerate() {
        let p = &row.job.params;
        let samples: Vec<String> = row
            .samples
            .iter()
            .map(|s| {
                format!(
                    "{{\"ops\": {}, \"elapsed_ns\": {}, \"maxrss_kib\": {}}}",
                    s.ops, s.elapsed_ns, s.maxrss_kib
                )
            })
            .collect();
        let _ = write!(
            out,
            "{}\n    {{\"workload\": {}, \"kernel\": {}, \"min\": {}, \"max\": {}, \"ws\": {}, \"iters\": {}, \
             \"threads\": {}, \"seed\": {}, \"allocator\": {}, \"runs\": {}, \"ok_runs\": {}, \"mops\": {}, \
             \"ns_per_op\": {}, \"peak_rss_mib\": {}, \"vs_mimalloc\": {}, \"vs_system\": {}, \"failure\": {}, \
             \"samples\": [{}]}}",
            if i == 0 { "" } else { "," },
            json_string(row.job.workload),
            json_string(p.kernel.name()),
            p.min,
            p.max,
            p.ws,
            p.iters,
            p.threads,
            p.seed,
            json_string(row.allocator.name()),
            row.runs,
            row.samples.len(),
            json_number(row.mops),
            json_number(row.ns_per_op),
            json_number(row.peak_rss_mib),
            json_number(row.vs_mimalloc),
            json_number(row.vs_system),
            row.failure.as_deref().map_or_else(|| "null".into(), json_string),
            samples.join(", "),
        );
    }
    let notes: Vec<String> = notes.iter().map(|n| json_string(n)).collect();
    let _ = write!(out, "\n  ],\n  \"notes\": [{}]\n}}\n", notes.join(", "));
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
                Allocator::Mimalloc,
                vec![sample(20.0, 1024), sample(20.0, 1024), sample(20.0, 1024)],
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
                Allocator::Mimalloc,
                vec![sample(50.0, 1024), sample(50.0, 1024), sample(50.0, 1024)],
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
        assert!(close(hakmem.vs_mimalloc, 1.5));
        assert!(close(hakmem.vs_system, 3.0));
        assert!(hakmem.failure.is_none());
        // A partly failed cell keeps the median of its good runs.
        let system = &rows[1];
        assert!(close(system.mops, 10.0) && close(system.vs_system, 1.0));
        assert_eq!(
            system.failure.as_deref(),
            Some("1/3 runs failed: killed by signal 11 (SIGSEGV)")
        );
        // A wholly failed cell has no numbers and no ratios.
        let failed = &rows[3];
        assert_eq!((failed.mops, failed.vs_mimalloc), (None, None));
        assert_eq!(failed.failure.as_deref(), Some("3/3 runs failed: exited with status 3"));
        assert!(close(rows[4].vs_mimalloc, 0.1));
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
        let out = render(&plan, &rows(&plan, &cells()), &[]);
        let mut lines = out.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let rows: Vec<Vec<&str>> = lines.map(|l| l.splitn(header.len(), ',').collect()).collect();
        assert_eq!(rows.len(), 6);
        let col = |name| header.iter().position(|h| *h == name).unwrap();
        assert_eq!(rows[0][col("allocator")], "hakmem");
        assert_eq!(rows[0][col("mops")].parse::<f64>().unwrap(), 30.0);
        assert_eq!(rows[0][col("vs_mimalloc")].parse::<f64>().unwrap(), 1.5);
        assert_eq!(rows[3][col("mops")], "");
        assert_eq!(rows[3][col("ok_runs")], "0");
        assert!(rows[3][col("failure")].starts_with("\"3/3 runs failed"));
    }

    #[test]
    fn json_is_balanced_and_carries_every_sample() {
        let plan = plan("json");
        let out = render(&plan, &rows(&plan, &cells()), &["a \"quoted\" note".into()]);
        assert_eq!(out.matches('{').count(), out.matches('}').count());
        assert_eq!(out.matches('[').count(), out.matches(']').count());
        assert_eq!(out.matches("\"workload\"").count(), 6);
        assert_eq!(out.matches("\"elapsed_ns\"").count(), 3 + 2 + 3 + 3 + 3);
        assert!(out.contains("\"mops\": null") && out.contains("\"mode\": \"rust\""));
        assert!(out.contains(r#""a \"quoted\" note""#));
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(json_number(Some(f64::NAN)), "null");
        assert_eq!(json_number(Some(1.5)), "1.5");
    }
}
