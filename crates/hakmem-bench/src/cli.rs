//! The command line: what the user may ask for, and its translation into a
//! `Plan` (which runs, with fully resolved parameters).
//!
//! Parsing is clap's, each value checked by its value parser: clap's ranged
//! integer parsers for the plain numbers, `Scaled` for the sizes and counts
//! that take a unit suffix (`64K`, `2M`, read by the `parse-size` crate),
//! `PlotFile` for `--plot`. What no single value shows (`--min` above
//! `--max`, an allocator not available in this mode) is checked by
//! `Cli::plan`, whose message `main` reports through clap so it looks the
//! same and exits with status 2 like any usage error.
//!
//! The parent passes every resolved parameter to its children explicitly
//! (`hakmem_bench::child::args`), so a child applies no defaults.

use crate::allocators::{self, Allocator};
use crate::report;
use crate::workloads::{self, Params, Preset, MAX_BLOCK_SIZE, PRESETS};
use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{CommandFactory, FromArgMatches, Parser, ValueEnum};
use parse_size::{ByteSuffix, Config};
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

const ABOUT: &str = "Benchmark hakmem against the system allocator, mimalloc (v2 and v3) and jemalloc";

const LONG_ABOUT: &str = "\
Benchmark hakmem against the system allocator, mimalloc (v2 and v3) and jemalloc.

Each run is a child process (this binary re-executed), so each allocator starts
from a fresh process and its peak RSS is its own. Runs are interleaved (hakmem,
system, mimalloc2, mimalloc3, jemalloc, hakmem, ...) and repeated --reps times;
the table shows the median of each and the ratio of medians. Without arguments
this runs the default table (the workloads marked * below).

Workloads call the allocator under test through GlobalAlloc on the identical
loop; --preload instead runs the same workloads as a C program under
LD_PRELOAD (glibc, the mimalloc v2 and v3 libraries built with this binary,
Debian's libmimalloc.so.2, libjemalloc.so.2, libtcmalloc_minimal.so.4 and
hakmem's libhakmem.so). \"vs mimalloc\" is the ratio to the faster of
mimalloc2 and mimalloc3 on that workload.

--scaling (or a list of counts in --threads) runs the threaded workloads at
each thread count and prints one column per count, with the throughput per
thread, so that a collapse is visible.";

/// Output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns for reading.
    Table,
    /// One header line, one line per workload and allocator.
    Csv,
    /// One object with every median and every run.
    Json,
}

/// One item of `--workloads`.
#[derive(Clone, Copy, Debug)]
pub enum WorkloadArg {
    All,
    One(&'static Preset),
}

#[derive(Parser, Debug)]
#[command(name = "hakmem-bench", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// Workloads to run, comma-separated, or `all` [default: the * ones]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_workload)]
    pub workloads: Vec<WorkloadArg>,

    /// Smallest block size in bytes for every selected workload (K, M, G
    /// suffixes, with or without iB: KiB, MiB, GiB) [default: the workload's]
    #[arg(long, value_name = "BYTES", value_parser = Scaled::<usize>::bytes(1, MAX_BLOCK_SIZE as u64))]
    pub min: Option<usize>,

    /// Largest block size in bytes for every selected workload (K, M, G
    /// suffixes) [default: the workload's]
    #[arg(long, value_name = "BYTES", value_parser = Scaled::<usize>::bytes(1, MAX_BLOCK_SIZE as u64))]
    pub max: Option<usize>,

    /// Working-set slots per thread for every selected workload [default: the
    /// workload's]
    #[arg(long, value_name = "SLOTS", value_parser = Scaled::<usize>::count(1, MAX_WS))]
    pub ws: Option<usize>,

    /// Iterations per thread for every selected workload (k, M, G suffixes:
    /// 10^3, 10^6, 10^9) [default: the workload's]
    #[arg(long, value_name = "N", value_parser = Scaled::<u64>::count(1, MAX_ITERS))]
    pub iters: Option<u64>,

    /// Seed of the size and slot choices (the same for every allocator)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Threads of mt-mixed, larson and churn (per round), rounded down to
    /// producer/consumer pairs for prodcons and pacing; a comma-separated
    /// list runs each count and prints a scaling table [default: 2, churn 10;
    /// with --scaling 1,2,4,8,16]
    #[arg(
        long,
        value_name = "N[,N...]",
        value_delimiter = ',',
        value_parser = clap::value_parser!(u64).range(1..=MAX_THREADS).try_map(usize::try_from)
    )]
    pub threads: Vec<usize>,

    /// Thread scaling: run the workloads (default mt-mixed, larson,
    /// prodcons) at every --threads count (default 1,2,4,8,16) and print one
    /// column per count: throughput, throughput per thread, peak RSS
    #[arg(long)]
    pub scaling: bool,

    /// Allocators to compare, comma-separated: hakmem, system (or glibc),
    /// mimalloc2, mimalloc3, mimalloc (both), jemalloc, and with --preload
    /// mimalloc-deb (Debian's 2.0.9), tcmalloc and hakmem-secure
    /// (libhakmem_secure.so, only when named) [default: all]
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_allocators)]
    pub allocators: Vec<&'static [Allocator]>,

    /// Runs of each workload and allocator; the median is reported
    #[arg(
        long,
        value_name = "N",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..=MAX_REPS).try_map(usize::try_from)
    )]
    pub reps: usize,

    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Also draw the results as bar charts into FILE: SVG or PNG by its
    /// extension (.svg, .png); may be given more than once. One chart per
    /// table (with --scaling, one per workload), each with two panels:
    /// throughput relative to the system allocator and peak RSS
    #[arg(long, value_name = "FILE", value_parser = PlotFileParser)]
    pub plot: Vec<PlotFile>,

    /// Run the workloads as a C program (c/bench.c, compiled with $CC or cc)
    /// under LD_PRELOAD instead of through GlobalAlloc. hakmem's library is
    /// libhakmem.so beside this executable: build it first with
    /// `cargo build --release -p hakmem-ffi`. Missing libraries are skipped.
    #[arg(long)]
    pub preload: bool,

    /// Kill a run that takes longer than this and report it as failed
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
}

/// What the invocation does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Compare the allocators through GlobalAlloc, one child per run.
    Compare,
    /// Compare the allocators as LD_PRELOADed libraries under `c/bench.c`.
    Preload,
}

pub use hakmem_bench::child::Job;

/// Everything the tool will do, fully resolved and checked.
#[derive(Debug)]
pub struct Plan {
    pub mode: Mode,
    pub jobs: Vec<Job>,
    /// The thread counts asked for, in order, when `--threads` or
    /// `--scaling` gave them (empty: each workload's default).
    pub thread_counts: Vec<usize>,
    /// Print the scaling table: one column per thread count.
    pub scaling: bool,
    pub allocators: Vec<Allocator>,
    pub reps: usize,
    pub format: Format,
    /// The files to draw the results into.
    pub plots: Vec<PlotFile>,
    pub timeout: Duration,
}

/// `--scaling` without `--workloads`: the multi-threaded shapes of
/// BENCHMARKING.md (mixed on N threads, larson, producer/consumer).
pub const SCALING_WORKLOADS: &[&str] = &["mt-mixed", "larson", "prodcons"];
/// `--scaling` without `--threads`.
pub const SCALING_THREADS: &[usize] = &[1, 2, 4, 8, 16];

/// Upper bounds that catch typos before they turn into hours or gigabytes.
const MAX_THREADS: u64 = 1024;
const MAX_WS: u64 = 1 << 24;
const MAX_REPS: u64 = 1000;
const MAX_ITERS: u64 = 1 << 40;

/// The clap command, with the workload list appended to `--help`.
pub fn command() -> clap::Command {
    Cli::command().after_help(workloads_help())
}

/// Parses `args` (the first item is the program name).
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    Cli::from_arg_matches(&matches)
}

fn workloads_help() -> String {
    let mut help = String::from(
        "Workloads (* = in the default table; iterations are per thread, per producer
for prodcons and pacing, rounds for churn):\n",
    );
    for p in PRESETS {
        let mark = if p.in_default { '*' } else { ' ' };
        let sizes = report::size_range(p.min, p.max);
        let ws = if p.kernel.uses_ws() {
            p.ws.to_string()
        } else {
            "-".into()
        };
        let _ = writeln!(
            help,
            "  {mark} {:<9} {sizes:<15} ws {ws:<5} {:>9} iters  {}",
            p.name, p.iters, p.about
        );
    }
    help.push_str(
        "\nAn operation is one alloc, free or realloc call (churn: one thread, which callocs,
swaps and frees); Mops/s counts all threads together and ns/op is its inverse
(wall time per operation). Peak RSS is the child's ru_maxrss.

Exit status: 0 all runs succeeded, 1 a run failed (crash, timeout, damaged block;
its cell is marked FAILED and the rest of the table is still printed),
2 bad arguments.",
    );
    help
}

fn parse_workload(name: &str) -> Result<WorkloadArg, String> {
    if name == "all" {
        return Ok(WorkloadArg::All);
    }
    workloads::find(name).map(WorkloadArg::One).ok_or_else(|| {
        let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
        format!(
            "unknown workload '{name}' (expected all or one of: {})",
            names.join(", ")
        )
    })
}

fn allocator_names() -> String {
    let names: Vec<&str> = Allocator::ALL.iter().map(|a| a.name()).collect();
    names.join(", ")
}

/// An item of `--allocators`: one allocator, or `mimalloc` for both builds.
fn parse_allocators(name: &str) -> Result<&'static [Allocator], String> {
    Allocator::parse_group(name).ok_or_else(|| {
        format!(
            "unknown allocator '{name}' (expected one of: {}, glibc, mimalloc)",
            allocator_names()
        )
    })
}

/// A clap value parser for a number that may carry a unit suffix, checked
/// against an inclusive range: sizes in bytes (`64K`, `4MiB`: binary units)
/// or counts (`200k`, `2M`: decimal). The `parse-size` crate reads the
/// number (digits, `_` separators, a fraction before a suffix: `1.5M`).
#[derive(Clone)]
pub struct Scaled<T> {
    config: Config,
    /// What the value is, for the error message.
    what: &'static str,
    examples: &'static str,
    min: u64,
    max: u64,
    into: PhantomData<fn() -> T>,
}

impl<T> Scaled<T> {
    /// Bytes: `1024`, `64K`, `64KiB`, `4M`, `1G` (powers of 1024).
    pub fn bytes(min: u64, max: u64) -> Scaled<T> {
        Scaled {
            config: Config::new().with_binary(),
            what: "a size in bytes",
            examples: "1024, 64K, 4MiB",
            min,
            max,
            into: PhantomData,
        }
    }

    /// A count: `400`, `200k`, `2M`, `2_000_000` (powers of 1000).
    pub fn count(min: u64, max: u64) -> Scaled<T> {
        Scaled {
            config: Config::new().with_byte_suffix(ByteSuffix::Deny),
            what: "a count",
            examples: "400, 200k, 2M",
            min,
            max,
            into: PhantomData,
        }
    }

    /// The number `text` stands for, or why it is not one in range.
    fn value(&self, text: &str) -> Result<u64, String> {
        let n = self
            .config
            .parse_size(text)
            .map_err(|e| format!("{e}: expected {} such as {}", self.what, self.examples))?;
        if (self.min..=self.max).contains(&n) {
            Ok(n)
        } else {
            Err(format!("{n} is not in {}..={}", self.min, self.max))
        }
    }
}

impl<T: TryFrom<u64> + Clone + Send + Sync + 'static> TypedValueParser for Scaled<T> {
    type Value = T;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<T, clap::Error> {
        let text = value.to_string_lossy();
        self.value(&text)
            .and_then(|n| T::try_from(n).map_err(|_| format!("{n} does not fit this machine's integers")))
            .map_err(|reason| invalid_value(cmd, arg, &text, &reason))
    }
}

/// clap's own wording for a bad value, with our reason.
fn invalid_value(cmd: &clap::Command, arg: Option<&clap::Arg>, value: &str, reason: &str) -> clap::Error {
    let arg = arg.map_or_else(|| "...".to_string(), ToString::to_string);
    cmd.clone().error(
        ErrorKind::ValueValidation,
        format!("invalid value '{value}' for '{arg}': {reason}"),
    )
}

/// The kinds of picture `--plot` draws.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlotFormat {
    Svg,
    Png,
}

/// A file named by `--plot`, with the format its extension asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlotFile {
    pub path: PathBuf,
    pub format: PlotFormat,
}

/// Reads `--plot FILE`: the extension picks the format, and the folder must
/// exist (checked now, not after minutes of runs).
#[derive(Clone, Copy, Debug)]
struct PlotFileParser;

impl TypedValueParser for PlotFileParser {
    type Value = PlotFile;

    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<PlotFile, clap::Error> {
        let path = PathBuf::from(value);
        let text = value.to_string_lossy();
        let extension = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
        let format = match extension.as_deref() {
            Some("svg") => PlotFormat::Svg,
            Some("png") => PlotFormat::Png,
            _ => return Err(invalid_value(cmd, arg, &text, "the file name must end in .svg or .png")),
        };
        let folder = match path.parent() {
            Some(folder) if !folder.as_os_str().is_empty() => folder,
            _ => std::path::Path::new("."),
        };
        if !folder.is_dir() {
            let reason = format!("there is no folder {}", folder.display());
            return Err(invalid_value(cmd, arg, &text, &reason));
        }
        Ok(PlotFile { path, format })
    }
}

impl Cli {
    /// Resolves and checks the request. The error is a one-line message for
    /// the user, naming the offending option.
    pub fn plan(&self) -> Result<Plan, String> {
        let jobs = self.jobs()?;
        let mode = if self.preload { Mode::Preload } else { Mode::Compare };

        let defaults = if self.preload {
            allocators::PRELOAD_DEFAULT
        } else {
            allocators::RUST_DEFAULT
        };
        let requested: Vec<Allocator> = if self.allocators.is_empty() {
            defaults.to_vec()
        } else {
            self.allocators.concat()
        };
        let mut allocators = Vec::new();
        for allocator in requested {
            if !self.preload && !allocator.runs_in_process() {
                return Err(format!("allocator '{allocator}' is available only with --preload"));
            }
            if !allocators.contains(&allocator) {
                allocators.push(allocator);
            }
        }

        let thread_counts = self.thread_counts();
        Ok(Plan {
            mode,
            jobs,
            scaling: self.scaling || thread_counts.len() > 1,
            thread_counts,
            allocators,
            reps: self.reps,
            format: self.format,
            plots: self.plot.clone(),
            timeout: Duration::from_secs(self.timeout),
        })
    }

    /// The thread counts asked for, without repeats (empty: none asked).
    fn thread_counts(&self) -> Vec<usize> {
        let asked: &[usize] = match (self.threads.is_empty(), self.scaling) {
            (false, _) => &self.threads,
            (true, true) => SCALING_THREADS,
            (true, false) => &[],
        };
        let mut counts = Vec::new();
        for &count in asked {
            if !counts.contains(&count) {
                counts.push(count);
            }
        }
        counts
    }

    fn jobs(&self) -> Result<Vec<Job>, String> {
        let mut presets: Vec<&'static Preset> = Vec::new();
        if self.workloads.is_empty() && self.scaling {
            presets.extend(
                SCALING_WORKLOADS
                    .iter()
                    .map(|&name| workloads::find(name).expect("the scaling workloads are presets")),
            );
        } else if self.workloads.is_empty() {
            presets.extend(PRESETS.iter().filter(|p| p.in_default));
        }
        for arg in &self.workloads {
            match arg {
                WorkloadArg::All => presets.extend(PRESETS),
                WorkloadArg::One(preset) => presets.push(preset),
            }
        }
        let counts = self.thread_counts();
        let mut jobs: Vec<Job> = Vec::new();
        for preset in presets {
            let requested = if counts.is_empty() {
                vec![preset.kernel.default_threads()]
            } else {
                counts.clone()
            };
            for count in requested {
                let threads = preset.kernel.threads(count);
                if jobs
                    .iter()
                    .any(|j| j.workload == preset.name && j.params.threads == threads)
                {
                    continue;
                }
                let params = Params {
                    kernel: preset.kernel,
                    min: self.min.unwrap_or(preset.min),
                    max: self.max.unwrap_or(preset.max),
                    ws: self.ws.unwrap_or(preset.ws),
                    iters: self.iters.unwrap_or(preset.iters),
                    seed: self.seed,
                    threads,
                };
                if params.min > params.max {
                    return Err(format!(
                        "workload {}: --min ({}) is larger than --max ({})",
                        preset.name, params.min, params.max
                    ));
                }
                if params.min < preset.kernel.min_size() {
                    return Err(format!(
                        "workload {}: --min must be at least {} (its blocks carry their size)",
                        preset.name,
                        preset.kernel.min_size()
                    ));
                }
                jobs.push(Job {
                    workload: preset.name,
                    params,
                });
            }
        }
        Ok(jobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Kernel;

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let cli =
            try_parse_from(std::iter::once("hakmem-bench").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        cli.plan()
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.jobs.iter().map(|j| j.workload).collect()
    }

    #[test]
    fn no_arguments_is_the_default_table() {
        let plan = plan(&[]).unwrap();
        assert_eq!(plan.mode, Mode::Compare);
        assert_eq!(
            names(&plan),
            [
                "mixed", "c7", "c6", "c5", "c4", "large-ws", "mid", "large", "fixed64k", "mt-mixed", "larson",
                "prodcons", "churn", "pacing", "rethread"
            ]
        );
        assert_eq!(plan.allocators, allocators::RUST_DEFAULT);
        assert!(plan.allocators.contains(&Allocator::Mimalloc2) && plan.allocators.contains(&Allocator::Mimalloc3));
        assert!(!plan.scaling && plan.thread_counts.is_empty());
        assert_eq!(plan.reps, 5);
        assert_eq!(plan.format, Format::Table);
        let mixed = &plan.jobs[0].params;
        assert_eq!(
            (mixed.min, mixed.max, mixed.ws, mixed.seed, mixed.threads),
            (16, 1024, 400, 1, 1)
        );
        assert_eq!(plan.jobs[9].params.threads, 2, "mt-mixed runs on 2 threads by default");
        let job = |name| &plan.jobs.iter().find(|j| j.workload == name).unwrap().params;
        assert_eq!(job("prodcons").threads, 2, "one pair");
        assert_eq!(job("pacing").threads, 2, "one pair");
        assert_eq!(job("churn").threads, 10, "10 threads per round");
        assert_eq!(
            (job("churn").min, job("churn").ws, job("churn").iters),
            (128, 1000, 1000)
        );
        assert_eq!((job("pacing").min, job("pacing").max), (16, 16 << 10));
        let plan = super::tests::plan(&["--workloads", "huge"]).unwrap();
        let huge = &plan.jobs[0].params;
        assert_eq!(
            (huge.min, huge.max, huge.ws, huge.iters, huge.threads),
            (5 << 20, 25 << 20, 20, 2000, 1)
        );
    }

    #[test]
    fn overrides_apply_to_every_selected_workload() {
        let plan = plan(&[
            "--workloads",
            "mixed,mt-mixed",
            "--min",
            "32",
            "--max",
            "4K",
            "--ws",
            "100",
            "--iters",
            "200k",
            "--seed",
            "9",
            "--threads",
            "3",
            "--allocators",
            "system,hakmem",
            "--reps",
            "2",
            "--format",
            "csv",
        ])
        .unwrap();
        assert_eq!(names(&plan), ["mixed", "mt-mixed"]);
        let expect = |kernel, threads| Params {
            kernel,
            min: 32,
            max: 4096,
            ws: 100,
            iters: 200_000,
            seed: 9,
            threads,
        };
        assert_eq!(plan.jobs[0].params, expect(Kernel::Mixed, 1));
        assert_eq!(plan.jobs[1].params, expect(Kernel::MtMixed, 3));
        assert_eq!(plan.allocators, [Allocator::System, Allocator::Hakmem]);
        assert_eq!((plan.reps, plan.format), (2, Format::Csv));
    }

    #[test]
    fn all_selects_every_workload_once() {
        let plan = plan(&["--workloads", "mixed,all"]).unwrap();
        assert_eq!(plan.jobs.len(), PRESETS.len());
        assert!(names(&plan).contains(&"realloc"));
    }

    #[test]
    fn preload_adds_tcmalloc_and_debians_mimalloc_and_accepts_glibc() {
        let plan = plan(&["--preload"]).unwrap();
        assert_eq!(plan.mode, Mode::Preload);
        assert_eq!(plan.allocators, allocators::PRELOAD_DEFAULT);
        assert!(plan.allocators.contains(&Allocator::Tcmalloc));
        assert!(plan.allocators.contains(&Allocator::MimallocDeb));
        let plan = super::tests::plan(&["--preload", "--allocators", "glibc,tcmalloc,system"]).unwrap();
        assert_eq!(plan.allocators, [Allocator::System, Allocator::Tcmalloc]);
    }

    #[test]
    fn mimalloc_selects_both_builds_and_each_can_be_named() {
        let plan = plan(&["--allocators", "hakmem,mimalloc,mimalloc3"]).unwrap();
        assert_eq!(
            plan.allocators,
            [Allocator::Hakmem, Allocator::Mimalloc2, Allocator::Mimalloc3]
        );
        let plan = super::tests::plan(&["--allocators", "mimalloc2"]).unwrap();
        assert_eq!(plan.allocators, [Allocator::Mimalloc2]);
        let plan = super::tests::plan(&["--preload", "--allocators", "mimalloc-deb,mimalloc"]).unwrap();
        assert_eq!(
            plan.allocators,
            [Allocator::MimallocDeb, Allocator::Mimalloc2, Allocator::Mimalloc3]
        );
        let err = super::tests::plan(&["--allocators", "mimalloc-deb"]).unwrap_err();
        assert!(err.contains("only with --preload"), "{err}");
    }

    fn jobs_of<'a>(plan: &'a Plan, name: &str) -> Vec<&'a Job> {
        plan.jobs.iter().filter(|j| j.workload == name).collect()
    }

    #[test]
    fn scaling_runs_the_threaded_shapes_at_1_to_16_threads() {
        let plan = plan(&["--scaling"]).unwrap();
        assert!(plan.scaling);
        assert_eq!(plan.thread_counts, [1, 2, 4, 8, 16]);
        let threads = |name| -> Vec<usize> { jobs_of(&plan, name).iter().map(|j| j.params.threads).collect() };
        assert_eq!(threads("mt-mixed"), [1, 2, 4, 8, 16]);
        assert_eq!(threads("larson"), [1, 2, 4, 8, 16]);
        // Pairs: one thread rounds up to one pair, which 2 threads also are.
        assert_eq!(threads("prodcons"), [2, 4, 8, 16]);
        assert_eq!(plan.jobs.len(), 14, "nothing else");
    }

    #[test]
    fn a_thread_list_expands_the_selected_workloads() {
        let plan = plan(&["--threads", "4,1,4,3", "--workloads", "mixed,larson,pacing,churn"]).unwrap();
        assert!(plan.scaling, "several counts make a scaling table");
        assert_eq!(plan.thread_counts, [4, 1, 3], "in order, without repeats");
        let threads = |name| -> Vec<usize> { jobs_of(&plan, name).iter().map(|j| j.params.threads).collect() };
        assert_eq!(threads("mixed"), [1], "one-thread workloads run once");
        assert_eq!(threads("larson"), [4, 1, 3]);
        assert_eq!(threads("churn"), [4, 1, 3]);
        assert_eq!(threads("pacing"), [4, 2], "whole pairs");
        // --scaling with a list of its own, and one count without --scaling.
        let plan = super::tests::plan(&["--scaling", "--threads", "2,8"]).unwrap();
        assert_eq!(plan.thread_counts, [2, 8]);
        assert_eq!(jobs_of(&plan, "larson").len(), 2);
        let plan = super::tests::plan(&["--threads", "8"]).unwrap();
        assert!(!plan.scaling);
        assert_eq!(
            jobs_of(&plan, "churn")[0].params.threads,
            8,
            "an explicit count overrides churn's 10"
        );
        assert_eq!(jobs_of(&plan, "prodcons")[0].params.threads, 8, "four pairs");
    }

    /// What `--min`/`--max` and `--iters`/`--ws` make of `text`.
    fn parsed(text: &str) -> (Result<usize, String>, Result<u64, String>) {
        let size = try_parse_from(["hakmem-bench", "--max", text])
            .map(|cli| cli.max.unwrap())
            .map_err(|e| e.to_string());
        let count = try_parse_from(["hakmem-bench", "--iters", text])
            .map(|cli| cli.iters.unwrap())
            .map_err(|e| e.to_string());
        (size, count)
    }

    #[test]
    fn sizes_and_counts_accept_suffixes() {
        for (text, size, count) in [
            ("64K", 65536, 64_000),
            ("4M", 4 << 20, 4_000_000),
            ("1_024", 1024, 1024),
            ("200k", 200 << 10, 200_000),
            ("2_000_000", 2_000_000, 2_000_000),
            ("1.5M", 3 << 19, 1_500_000),
            ("1G", 1 << 30, 1_000_000_000),
        ] {
            assert_eq!(parsed(text), (Ok(size), Ok(count)), "{text}");
        }
        assert_eq!(parsed("64KiB").0, Ok(65536));
        assert_eq!(parsed("64KB").0, Ok(65536), "a size's units are binary");
        assert!(parsed("2MB").1.is_err(), "a count is not in bytes");
        for bad in ["", "K", "-1", "12x", "99999999999999999999", "0x10", "0", "2G"] {
            let (size, count) = parsed(bad);
            assert!(size.is_err(), "{bad:?}");
            if bad != "2G" {
                assert!(count.is_err(), "{bad:?}");
            }
        }
    }

    #[test]
    fn usage_errors_are_rejected_by_clap() {
        let cases: &[(&[&str], &str)] = &[
            (&["--workloads", "nope"], "unknown workload 'nope'"),
            (&["--allocators", "ptmalloc"], "unknown allocator 'ptmalloc'"),
            (&["--threads", "1,x"], "invalid value 'x' for '--threads"),
            (&["--format", "xml"], "invalid value 'xml'"),
            (
                &["--iters", "lots"],
                "invalid value 'lots' for '--iters <N>': invalid digit",
            ),
            (&["--reps"], "a value is required"),
            (&["--frobnicate"], "unexpected argument"),
            // The ranges, checked by the value parsers.
            (
                &["--min", "0"],
                "invalid value '0' for '--min <BYTES>': 0 is not in 1..=1073741824",
            ),
            (
                &["--max", "2G"],
                "invalid value '2G' for '--max <BYTES>': 2147483648 is not in 1..=",
            ),
            (&["--ws", "0"], "invalid value '0' for '--ws <SLOTS>'"),
            (&["--ws", "100M"], "100000000 is not in 1..=16777216"),
            (&["--iters", "0"], "invalid value '0' for '--iters <N>'"),
            (&["--threads", "0"], "0 is not in 1..=1024"),
            (&["--threads", "2,2000"], "2000 is not in 1..=1024"),
            (&["--reps", "0"], "0 is not in 1..=1000"),
            (&["--timeout", "0"], "0 is not in 1.."),
            (
                &["--plot", "out.pdf"],
                "invalid value 'out.pdf' for '--plot <FILE>': the file name must end in .svg or .png",
            ),
            (&["--plot", "/nonexistent/out.svg"], "there is no folder /nonexistent"),
        ];
        for (args, expected) in cases {
            let err = try_parse_from(std::iter::once("hakmem-bench").chain(args.iter().copied())).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
            let message = err.to_string();
            assert!(
                message.contains(expected),
                "{args:?}: got {message:?}, expected {expected:?}"
            );
        }
    }

    #[test]
    fn plot_files_take_their_format_from_the_extension() {
        let plan = plan(&["--plot", "a.svg", "--plot", "b.PNG"]).unwrap();
        assert_eq!(
            plan.plots,
            [
                PlotFile {
                    path: "a.svg".into(),
                    format: PlotFormat::Svg
                },
                PlotFile {
                    path: "b.PNG".into(),
                    format: PlotFormat::Png
                }
            ]
        );
        assert!(super::tests::plan(&[]).unwrap().plots.is_empty());
    }

    #[test]
    fn unknown_workload_message_lists_the_names() {
        let err = plan(&["--workloads", "mixed,nope"]).unwrap_err();
        assert!(
            err.contains("unknown workload 'nope'") && err.contains("larson"),
            "{err}"
        );
    }

    #[test]
    fn semantic_errors_name_the_option() {
        let cases: &[(&[&str], &str)] = &[
            (
                &["--min", "2048", "--max", "1024"],
                "--min (2048) is larger than --max (1024)",
            ),
            (&["--min", "2K", "--workloads", "c4"], "workload c4: --min"),
            (
                &["--workloads", "churn", "--min", "16"],
                "workload churn: --min must be at least 24",
            ),
            (&["--allocators", "tcmalloc"], "only with --preload"),
        ];
        for (args, expected) in cases {
            let err = plan(args).unwrap_err();
            assert!(
                err.contains(expected),
                "{args:?}: got {err:?}, expected it to contain {expected:?}"
            );
        }
    }

    #[test]
    fn help_lists_every_workload() {
        let help = command().render_long_help().to_string();
        for p in PRESETS {
            assert!(help.contains(p.name), "{} missing from --help", p.name);
        }
        assert!(help.contains("--preload") && help.contains("Exit status"));
    }
}
