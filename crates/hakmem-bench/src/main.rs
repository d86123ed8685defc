//! hakmem-bench: hakmem against the system allocator, mimalloc v2 and v3 and
//! jemalloc (and, with `--preload`, Debian's mimalloc and tcmalloc), on the
//! workloads of BENCHMARKING.md.
//!
//! `scripts/bench` builds both binaries and runs the default table;
//! `--help` lists the workloads and options. This is the parent: it never
//! runs a workload itself but starts `hakmem-bench-child` (the library's
//! `child`, beside this executable) once per run, or the C program under
//! `--preload`. The layers, top-down: `cli` (options → plan), `runner`
//! (children, interleaving) with `progress` (the line on stderr, by
//! `indicatif`), `report` (medians, ratios, the table, CSV and JSON, the
//! scaling table), `plot` (the same results as bar charts, by `plotters`),
//! `preload` (the C program and the libraries it runs under); from the
//! library: `workloads`, `allocators`, `dlmimalloc`, `scratch`, `child`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod cli;
mod plot;
mod preload;
mod progress;
mod report;
mod runner;

use hakmem_bench::{allocators, child, dlmimalloc, scratch, workloads};

use cli::Mode;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let cli = match cli::try_parse_from(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let mut plan = match cli.plan() {
        Ok(plan) => plan,
        Err(message) => cli::command()
            .error(clap::error::ErrorKind::ValueValidation, message)
            .exit(),
    };
    match plan.mode {
        Mode::Compare => {
            let child = match child_binary() {
                Ok(child) => child,
                Err(message) => return fail(&message),
            };
            let cells = runner::run_plan(&plan, |job, allocator| {
                let mut command = Command::new(&child);
                command.args(child::args(job, allocator));
                command
            });
            finish(&plan, &cells, &[])
        }
        Mode::Preload => match preload_setup(&mut plan) {
            // `_scratch` holds the folder (removed at its drop when private)
            // until the last run is over.
            Ok((_scratch, binary, libraries, notes)) => {
                let cells = runner::run_plan(&plan, |job, allocator| {
                    let library = libraries
                        .iter()
                        .find(|(a, _)| *a == allocator)
                        .and_then(|(_, l)| l.as_deref());
                    preload::command(&binary, library, job, allocator)
                });
                finish(&plan, &cells, &notes)
            }
            Err(message) => fail(&message),
        },
    }
}

/// `hakmem-bench-child`, which cargo builds beside this executable.
fn child_binary() -> Result<std::path::PathBuf, String> {
    let child = scratch::exe_dir()?.join(child::BINARY);
    if child.is_file() {
        Ok(child)
    } else {
        Err(format!(
            "{} not found: build both binaries with `cargo build --release -p hakmem-bench` \
             (scripts/bench does), not only this one",
            child.display()
        ))
    }
}

type Libraries = Vec<(allocators::Allocator, Option<std::path::PathBuf>)>;

/// Builds the C program and finds the libraries; drops (with a note) the
/// allocators whose library is missing.
fn preload_setup(
    plan: &mut cli::Plan,
) -> Result<(scratch::Scratch, std::path::PathBuf, Libraries, Vec<String>), String> {
    let exe_dir = scratch::exe_dir()?;
    let scratch = scratch::Scratch::new(&exe_dir)?;
    let binary = preload::build(scratch.path())?;
    let (mut libraries, mut notes) = (Vec::new(), Vec::new());
    plan.allocators.retain(
        |&allocator| match preload::library(allocator, &exe_dir, scratch.path()) {
            Ok(library) => {
                libraries.push((allocator, library));
                true
            }
            Err(note) => {
                eprintln!("hakmem-bench: {note}");
                notes.push(note);
                false
            }
        },
    );
    if plan.allocators.is_empty() {
        return Err("no allocator left to run".into());
    }
    Ok((scratch, binary, libraries, notes))
}

/// Prints the results and draws the plots; fails the process when any run
/// failed or a plot could not be written.
fn finish(plan: &cli::Plan, cells: &[runner::Cell], notes: &[String]) -> ExitCode {
    let rows = report::rows(plan, cells);
    print!("{}", report::render(plan, &rows, notes));
    if let Err(message) = plot::write_all(plan, &rows) {
        return fail(&message);
    }
    for plot in &plan.plots {
        eprintln!("hakmem-bench: plot written to {}", plot.path.display());
    }
    if rows.iter().any(|r| r.failure.is_some()) {
        eprintln!("hakmem-bench: some runs failed (marked in the results)");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("hakmem-bench: {message}");
    ExitCode::FAILURE
}
