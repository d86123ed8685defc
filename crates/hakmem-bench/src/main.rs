//! hakmem-bench: hakmem against the system allocator, mimalloc v2 and v3 and
//! jemalloc (and, with `--preload`, Debian's mimalloc and tcmalloc), on the
//! workloads of BENCHMARKING.md.
//!
//! `cargo run --release -p hakmem-bench` runs the default table; `--help`
//! lists the workloads and options. The layers, top-down: `cli` (options →
//! plan), `runner` (children, interleaving, the result line) with
//! `progress` (the line on stderr), `report` (medians, ratios, the table,
//! CSV and JSON, the scaling table), `plot` (the same results as SVG bar
//! charts) with `raster` (that SVG painted into a PNG), `workloads` (the
//! kernels, generic over `GlobalAlloc`) with `rng`, `allocators` (names →
//! allocator values), `dlmimalloc` (the mimalloc v2 and v3 libraries
//! `build.rs` compiles, and a `GlobalAlloc` over a `dlopen`ed one),
//! `preload` (the C program and the libraries it runs under) and `scratch`
//! (the private folder they are written to).
//!
//! This binary keeps the system allocator as its own global allocator: the
//! allocators under test are only ever called explicitly by the workloads.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod allocators;
mod cli;
mod dlmimalloc;
mod plot;
mod preload;
mod progress;
mod raster;
mod report;
mod rng;
mod runner;
mod scratch;
mod workloads;

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
        Mode::Child(allocator) => match runner::child_main(allocator, &plan.jobs[0]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => fail(&message),
        },
        Mode::Compare => {
            let exe = match std::env::current_exe() {
                Ok(exe) => exe,
                Err(e) => return fail(&format!("cannot find this executable to re-run it: {e}")),
            };
            let cells = runner::run_plan(&plan, |job, allocator| {
                let mut command = Command::new(&exe);
                command.args(runner::child_args(job, allocator));
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
