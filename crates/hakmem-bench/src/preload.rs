//! `--preload`: the workloads as a C program (`c/bench.c`, embedded in this
//! binary) run under each allocator's `LD_PRELOAD`ed malloc, for comparing
//! the C-ABI builds: glibc (no preload), Debian's mimalloc, jemalloc and
//! tcmalloc, and hakmem's `libhakmem.so` from the build tree.
//!
//! The program is compiled on first use with `$CC` (default `cc`) into a
//! `hakmem-bench-c/` folder beside this executable (or the temp dir when
//! that is read-only) and recompiled when the embedded source changes.

use crate::allocators::Allocator;
use crate::cli::Job;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The C benchmark's source, as compiled.
const SOURCE: &str = include_str!("../c/bench.c");

/// Flags for the C benchmark. `-fno-builtin-*` keeps the compiler from
/// reasoning about malloc/free (eliding pairs, assuming no aliasing), so that
/// every call reaches the preloaded allocator.
const CFLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-pthread",
    "-fno-builtin-malloc",
    "-fno-builtin-free",
    "-fno-builtin-realloc",
    "-Wall",
];

/// Where Debian installs the comparison libraries.
const SYSTEM_LIBRARY_DIR: &str = "/usr/lib/x86_64-linux-gnu";

/// hakmem's C-ABI library, as `cargo build -p hakmem-ffi` names it.
const HAKMEM_LIBRARY: &str = "libhakmem.so";

/// The directory of this executable (`target/release` under cargo).
pub fn exe_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} has no parent directory", exe.display()))
}

/// Compiles the C benchmark if needed and returns its path.
pub fn build(exe_dir: &Path) -> Result<PathBuf, String> {
    let beside = exe_dir.join("hakmem-bench-c");
    let dir = if std::fs::create_dir_all(&beside).is_ok() && !is_read_only(&beside) {
        beside
    } else {
        let temp = std::env::temp_dir().join("hakmem-bench-c");
        std::fs::create_dir_all(&temp).map_err(|e| format!("cannot create {}: {e}", temp.display()))?;
        temp
    };
    let source = dir.join("bench.c");
    let binary = dir.join("bench");
    let up_to_date = binary.exists() && std::fs::read_to_string(&source).is_ok_and(|s| s == SOURCE);
    if up_to_date {
        return Ok(binary);
    }
    // Build under names of our own and rename into place, so that two
    // instances never see each other's half-written files.
    let unique = std::process::id();
    let temp_source = dir.join(format!("bench.{unique}.c"));
    let temp_binary = dir.join(format!("bench.{unique}"));
    std::fs::write(&temp_source, SOURCE).map_err(|e| format!("cannot write {}: {e}", temp_source.display()))?;
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&compiler)
        .args(CFLAGS)
        .arg("-o")
        .arg(&temp_binary)
        .arg(&temp_source)
        .arg("-ldl")
        .output()
        .map_err(|e| format!("cannot run the C compiler '{compiler}' (set CC to choose another): {e}"));
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            let _ = std::fs::remove_file(&temp_source);
            return Err(e);
        }
    };
    if !output.status.success() {
        let _ = std::fs::remove_file(&temp_source);
        return Err(format!(
            "compiling {} with '{compiler}' failed ({}):\n{}",
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::rename(&temp_binary, &binary).map_err(|e| format!("cannot move {}: {e}", temp_binary.display()))?;
    std::fs::rename(&temp_source, &source).map_err(|e| format!("cannot move {}: {e}", temp_source.display()))?;
    Ok(binary)
}

fn is_read_only(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe.{}", std::process::id()));
    let writable = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    !writable
}

/// The library to preload for `allocator`: `Ok(None)` for the system
/// allocator, `Err` (a note for the user) when the library is missing.
pub fn library(allocator: Allocator, exe_dir: &Path) -> Result<Option<PathBuf>, String> {
    let (path, remedy) = match allocator {
        Allocator::System => return Ok(None),
        Allocator::Hakmem => (
            exe_dir.join(HAKMEM_LIBRARY),
            "run `cargo build --release -p hakmem-ffi` (with the same profile as this benchmark)".to_string(),
        ),
        other => {
            let name = other
                .system_library()
                .expect("every other allocator has a Debian library");
            let package = match other {
                Allocator::Mimalloc => "libmimalloc2.0",
                Allocator::Jemalloc => "libjemalloc2",
                _ => "libtcmalloc-minimal4",
            };
            (
                Path::new(SYSTEM_LIBRARY_DIR).join(name),
                format!("install the Debian package {package}"),
            )
        }
    };
    if path.is_file() {
        Ok(Some(path))
    } else {
        Err(format!("{allocator} skipped: {} not found; {remedy}", path.display()))
    }
}

/// The command for one run of `job` under `library` (`None`: glibc).
pub fn command(binary: &Path, library: Option<&Path>, job: &Job, allocator: Allocator) -> Command {
    let p = &job.params;
    let mut command = Command::new(binary);
    command.args([
        p.kernel.name().to_string(),
        p.min.to_string(),
        p.max.to_string(),
        p.ws.to_string(),
        p.iters.to_string(),
        p.seed.to_string(),
        p.threads.to_string(),
        job.workload.to_string(),
        allocator.name().to_string(),
    ]);
    match library {
        Some(library) => command.env("LD_PRELOAD", library),
        None => command.env_remove("LD_PRELOAD"),
    };
    command
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::run_child;
    use crate::workloads::{Kernel, Params, PRESETS};
    use std::time::Duration;

    fn job(workload: &'static str, kernel: Kernel, iters: u64) -> Job {
        Job {
            workload,
            params: Params {
                kernel,
                min: 16,
                max: 1024,
                ws: 64,
                iters,
                seed: 1,
                threads: 2,
            },
        }
    }

    #[test]
    fn system_needs_no_library_and_hakmem_names_its_build() {
        let dir = Path::new("/nonexistent");
        assert_eq!(library(Allocator::System, dir), Ok(None));
        let missing = library(Allocator::Hakmem, dir).unwrap_err();
        assert!(
            missing.contains("/nonexistent/libhakmem.so") && missing.contains("cargo build --release -p hakmem-ffi")
        );
    }

    /// Compiles the C program and runs every kernel once under glibc; skipped
    /// (with a message) where there is no C compiler.
    #[test]
    fn c_program_runs_every_kernel_and_counts_like_the_rust_one() {
        if Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: no C compiler");
            return;
        }
        let dir = std::env::temp_dir().join(format!("hakmem-bench-test-{}", std::process::id()));
        let binary = build(&dir).expect("compile c/bench.c");
        let iters = 3_000;
        for (kernel, expected_ops) in [
            (Kernel::Mixed, iters),
            (Kernel::Fixed, 2 * iters),
            (Kernel::Realloc, iters),
            (Kernel::MtMixed, 2 * iters),
            (Kernel::Larson, 0),
            (Kernel::ProdCons, 2 * iters),
        ] {
            let mut job = job(kernel.name(), kernel, iters);
            if kernel == Kernel::Larson {
                // A working set smaller than a handoff batch: how many blocks
                // each handoff finds depends on every earlier draw.
                job.params.ws = 10;
            }
            let run = run_child(command(&binary, None, &job, Allocator::System), Duration::from_secs(30));
            let sample = run.result.unwrap_or_else(|f| panic!("{kernel:?}: {f}\n{}", run.stderr));
            let expected_ops = if kernel == Kernel::Larson {
                // Exact only if the C program draws the same stream as rng.rs.
                let (local, remote) = crate::workloads::larson_expected_ops(&job.params);
                local + remote
            } else {
                expected_ops
            };
            assert_eq!(sample.ops, expected_ops, "{kernel:?}");
        }
        // Same binary reused when nothing changed.
        assert_eq!(build(&dir).unwrap(), binary);
        // A bad argument is a usage error, and a missing preload is caught.
        let mut bad = command(&binary, None, &job("mixed", Kernel::Mixed, 10), Allocator::System);
        bad.arg("extra");
        assert_eq!(
            run_child(bad, Duration::from_secs(10)).result,
            Err(crate::runner::Failure::Exit(2))
        );
        let missing = Path::new("/nonexistent/libnothing.so");
        let run = run_child(
            command(
                &binary,
                Some(missing),
                &job("mixed", Kernel::Mixed, 10),
                Allocator::Mimalloc,
            ),
            Duration::from_secs(10),
        );
        assert_eq!(run.result, Err(crate::runner::Failure::Exit(4)));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(PRESETS
            .iter()
            .all(|p| SOURCE.contains(&format!("\"{}\"", p.kernel.name()))));
    }
}
