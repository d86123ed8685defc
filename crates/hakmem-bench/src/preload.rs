//! `--preload`: the workloads as a C program (`c/bench.c`, embedded in this
//! binary) run under each allocator's `LD_PRELOAD`ed malloc, for comparing
//! the C-ABI builds: glibc (no preload), mimalloc v2 and v3 (the libraries
//! `build.rs` compiles, embedded in this binary), Debian's mimalloc 2.0.9,
//! jemalloc and tcmalloc, and hakmem's `libhakmem.so` from the build tree.
//!
//! The program is compiled with `$CC` (default `cc`) into the scratch
//! folder (see `scratch`: `hakmem-bench-c/` beside this executable when that
//! is ours alone, else a private temporary directory) under a name that
//! hashes its source, compiler and flags, so a changed source or `$CC` gets
//! a binary of its own and an unchanged one is reused; the mimalloc
//! libraries are written there too.

use crate::allocators::Allocator;
use crate::cli::Job;
use crate::dlmimalloc;
use crate::scratch;
use std::hash::{DefaultHasher, Hash, Hasher};
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
/// The hardened build's, beside it (`hakmem-ffi-secure`).
const HAKMEM_SECURE_LIBRARY: &str = "libhakmem_secure.so";

/// Compiles the C benchmark into the scratch folder `dir` unless a trusted
/// build of the same source, compiler and flags is there, and returns its
/// path.
pub fn build(dir: &Path) -> Result<PathBuf, String> {
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let mut key = DefaultHasher::new();
    (SOURCE, &compiler, CFLAGS).hash(&mut key);
    let name = format!("bench-{:016x}", key.finish());
    let binary = dir.join(&name);
    if scratch::trusted_file(&binary) {
        return Ok(binary);
    }
    // Build under names of our own and rename into place, so that two
    // instances never see each other's half-written files.
    let unique = scratch::unique();
    let temp_source = dir.join(format!(".bench.{unique}.c"));
    let temp_binary = dir.join(format!(".bench.{unique}"));
    std::fs::write(&temp_source, SOURCE).map_err(|e| format!("cannot write {}: {e}", temp_source.display()))?;
    let output = Command::new(&compiler)
        .args(CFLAGS)
        .arg("-o")
        .arg(&temp_binary)
        .arg(&temp_source)
        .arg("-ldl")
        .output();
    let _ = std::fs::remove_file(&temp_source);
    let output =
        output.map_err(|e| format!("cannot run the C compiler '{compiler}' (set CC to choose another): {e}"))?;
    if !output.status.success() {
        let _ = std::fs::remove_file(&temp_binary);
        return Err(format!(
            "compiling c/bench.c with '{compiler}' failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    // The compiler made it with the umask's mode, maybe group-writable.
    scratch::make_private(&temp_binary)?;
    scratch::rename(&temp_binary, &binary)?;
    Ok(binary)
}

/// The library to preload for `allocator`: `Ok(None)` for the system
/// allocator, `Err` (a note for the user) when the library is missing.
/// hakmem's is looked for in `exe_dir`; the mimalloc builds are written to
/// the scratch folder `scratch`.
pub fn library(allocator: Allocator, exe_dir: &Path, scratch: &Path) -> Result<Option<PathBuf>, String> {
    if let Some(version) = allocator.mimalloc_build() {
        return dlmimalloc::library(version, scratch)
            .map(Some)
            .map_err(|e| format!("{allocator} skipped: {e}"));
    }
    let (path, remedy) = match allocator {
        Allocator::System => return Ok(None),
        Allocator::Hakmem => (
            exe_dir.join(HAKMEM_LIBRARY),
            "run `cargo build --release -p hakmem-ffi` (with the same profile as this benchmark)".to_string(),
        ),
        Allocator::HakmemSecure => (
            exe_dir.join(HAKMEM_SECURE_LIBRARY),
            "run `cargo build --release -p hakmem-ffi-secure` (with the same profile as this benchmark)".to_string(),
        ),
        other => {
            let (name, package) = other
                .system_library()
                .expect("every other allocator has a Debian library");
            (
                Path::new(SYSTEM_LIBRARY_DIR).join(name),
                format!("install the Debian package {package}"),
            )
        }
    };
    if !path.is_file() {
        return Err(format!("{allocator} skipped: {} not found; {remedy}", path.display()));
    }
    // Beside the executable is the build tree, but the executable may have
    // been copied anywhere (/tmp): preload nothing someone else could have
    // put there or changed. A link (Debian's libtcmalloc_minimal.so.4 is
    // one) is followed, and what it leads to is checked and preloaded.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let folder = path.parent().unwrap_or(Path::new("/"));
    if !scratch::trusted_file(&path) || !scratch::trusted_dir(folder) {
        return Err(format!(
            "{allocator} skipped: {} (or its folder) is owned by another user or writable by others; \
             not preloading it",
            path.display()
        ));
    }
    Ok(Some(path))
}

/// The command for one run of `job` under `library` (`None`: glibc).
pub fn command(binary: &Path, library: Option<&Path>, job: &Job, allocator: Allocator) -> Command {
    let mut command = Command::new(binary);
    // The C program takes the Rust child's arguments.
    command.args(crate::child::args(job, allocator));
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
        assert_eq!(library(Allocator::System, dir, dir), Ok(None));
        let missing = library(Allocator::Hakmem, dir, dir).unwrap_err();
        assert!(
            missing.contains("/nonexistent/libhakmem.so") && missing.contains("cargo build --release -p hakmem-ffi")
        );
        // Found, but others may have written it: not preloaded.
        let exe_dir = tempfile::tempdir().unwrap();
        scratch::make_private(exe_dir.path()).unwrap();
        let hakmem = exe_dir.path().join(HAKMEM_LIBRARY);
        std::fs::write(&hakmem, b"not really a library").unwrap();
        scratch::make_private(&hakmem).unwrap();
        assert_eq!(
            library(Allocator::Hakmem, exe_dir.path(), dir),
            Ok(Some(hakmem.clone()))
        );
        let set_mode = |path: &Path, mode| {
            std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap()
        };
        // A link is followed: preloaded when what it leads to is trusted.
        let link_dir = tempfile::tempdir().unwrap();
        scratch::make_private(link_dir.path()).unwrap();
        std::os::unix::fs::symlink(&hakmem, link_dir.path().join(HAKMEM_LIBRARY)).unwrap();
        assert_eq!(
            library(Allocator::Hakmem, link_dir.path(), dir),
            Ok(Some(std::fs::canonicalize(&hakmem).unwrap()))
        );
        set_mode(&hakmem, 0o666);
        assert!(library(Allocator::Hakmem, link_dir.path(), dir).is_err());
        let refused = library(Allocator::Hakmem, exe_dir.path(), dir).unwrap_err();
        assert!(refused.contains("writable by others"), "{refused}");
        set_mode(&hakmem, 0o700);
        set_mode(exe_dir.path(), 0o1777);
        assert!(
            library(Allocator::Hakmem, exe_dir.path(), dir).is_err(),
            "a folder like /tmp"
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
        let dir = tempfile::tempdir().unwrap();
        let binary = build(dir.path()).expect("compile c/bench.c");
        assert!(scratch::trusted_file(&binary));
        let iters = 3_000;
        for (kernel, expected_ops) in [
            (Kernel::Mixed, iters),
            (Kernel::Fixed, 2 * iters),
            (Kernel::Realloc, iters),
            (Kernel::MtMixed, 2 * iters),
            (Kernel::Larson, 0),
            (Kernel::ProdCons, 2 * iters),
            (Kernel::Huge, 2 * 40),
            (Kernel::Churn, 30 * 4),
            (Kernel::Pacing, 2 * 2 * iters),
            (Kernel::Rethread, 5 * 3 * crate::workloads::RETHREAD_EXCHANGES),
        ] {
            let mut job = job(kernel.name(), kernel, iters);
            match kernel {
                // A working set smaller than a handoff batch: how many blocks
                // each handoff finds depends on every earlier draw.
                Kernel::Larson => job.params.ws = 10,
                Kernel::Huge => {
                    (job.params.min, job.params.max) = (64 << 10, 512 << 10);
                    (job.params.ws, job.params.iters, job.params.threads) = (4, 40, 1);
                }
                // 30 rounds of 4 threads.
                Kernel::Churn => (job.params.min, job.params.iters, job.params.threads) = (24, 30, 4),
                // 5 rounds of 3 threads, blocks up to 64 KiB.
                Kernel::Rethread => {
                    (job.params.min, job.params.max) = (24, 64 << 10);
                    (job.params.iters, job.params.threads) = (5, 3);
                }
                // Two pairs.
                Kernel::Pacing => (job.params.max, job.params.threads) = (16 << 10, 4),
                _ => {}
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
        // Two prodcons pairs make twice the operations.
        let mut two_pairs = job("prodcons", Kernel::ProdCons, iters);
        two_pairs.params.threads = 4;
        let run = run_child(
            command(&binary, None, &two_pairs, Allocator::System),
            Duration::from_secs(30),
        );
        assert_eq!(run.result.map(|s| s.ops), Ok(4 * iters), "{}", run.stderr);
        // Same binary reused when nothing changed.
        let modified = std::fs::metadata(&binary).unwrap().modified().unwrap();
        assert_eq!(build(dir.path()).unwrap(), binary);
        assert_eq!(std::fs::metadata(&binary).unwrap().modified().unwrap(), modified);
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
                Allocator::MimallocDeb,
            ),
            Duration::from_secs(10),
        );
        assert_eq!(run.result, Err(crate::runner::Failure::Exit(4)));
        // churn refuses blocks too small for its header.
        let mut small = job("churn", Kernel::Churn, 2);
        small.params.min = 16;
        assert_eq!(
            run_child(
                command(&binary, None, &small, Allocator::System),
                Duration::from_secs(10)
            )
            .result,
            Err(crate::runner::Failure::Exit(2))
        );
        assert!(PRESETS
            .iter()
            .all(|p| SOURCE.contains(&format!("\"{}\"", p.kernel.name()))));
    }

    /// The mimalloc builds are written out and run the new workloads (and
    /// larson) under LD_PRELOAD; the C program's check that the library is
    /// loaded makes a silent fallback to glibc fail.
    #[test]
    fn mimalloc_builds_run_under_ld_preload() {
        if Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("skipped: no C compiler");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let binary = build(dir.path()).expect("compile c/bench.c");
        for allocator in [Allocator::Mimalloc2, Allocator::Mimalloc3] {
            let library = library(allocator, Path::new("/nonexistent"), dir.path())
                .unwrap()
                .expect("a library to preload");
            assert!(library.starts_with(dir.path()), "{}", library.display());
            for (kernel, min, max, ws, iters, threads, expected_ops) in [
                (Kernel::Larson, 16, 1024, 64, 2_000, 2, None),
                (Kernel::Huge, 1 << 20, 3 << 20, 3, 20, 1, Some(40)),
                (Kernel::Churn, 128, 128, 20, 10, 3, Some(30)),
                (Kernel::Rethread, 24, 256 << 10, 50, 4, 2, Some(4 * 2 * 256)),
                (Kernel::Pacing, 16, 16 << 10, 32, 2_000, 2, Some(4_000)),
            ] {
                let job = Job {
                    workload: kernel.name(),
                    params: Params {
                        kernel,
                        min,
                        max,
                        ws,
                        iters,
                        seed: 1,
                        threads,
                    },
                };
                let run = run_child(
                    command(&binary, Some(&library), &job, allocator),
                    Duration::from_secs(30),
                );
                let sample = run
                    .result
                    .unwrap_or_else(|f| panic!("{allocator} {kernel:?}: {f}\n{}", run.stderr));
                if let Some(expected) = expected_ops {
                    assert_eq!(sample.ops, expected, "{allocator} {kernel:?}");
                }
            }
        }
    }
}
