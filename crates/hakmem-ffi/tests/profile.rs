//! The heap profiler as a C program sees it (`LD_PRELOAD=libhakmem.so`,
//! `HAKMEM_PROFILE`, `hakmem_profile_dump`), read back by `go tool pprof`:
//! a program built at -O2 without frame pointers or debug information
//! (tests/c/heap_profile.c) gets stacks unwound from its DWARF call-frame
//! tables and function names from its symbol table.
//!
//! The statistical bound: at a mean interval of `RATE` bytes, a site that
//! allocates `B` bytes in blocks much smaller than `RATE` gets about
//! `n = B / RATE` samples, Poisson-distributed, and its estimate has a
//! relative standard error of `1 / sqrt(n)`. Each estimate must lie within
//! 5 standard errors of the truth (a chance failure about once in 1.7
//! million checks).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::{compile_c, libs, require, run, scratch_dir, Link};

const RATE: f64 = 65536.0;

/// `go`, on `PATH` or where the Go tarball installs it.
fn go() -> Option<PathBuf> {
    ["go", "/usr/local/go/bin/go"].into_iter().map(PathBuf::from).find(|p| {
        Command::new(p)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The program, built as users build theirs: -O2, no frame pointers, no
/// debug information.
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = scratch_dir("bin").join("heap_profile");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/heap_profile.c");
            let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
                .args(["-O2", "-fomit-frame-pointer", "-g0", "-pthread", "-o"])
                .arg(&exe)
                .arg(&src)
                .arg("-ldl")
                .output()
                .expect("run cc");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            exe
        })
        .clone()
}

/// Each function's own (flat) value in `profile` for `index`
/// (`inuse_space`, `alloc_space`, ...), in bytes or objects, as `go tool
/// pprof -top` prints it.
fn top(go: &Path, binary: &Path, profile: &Path, index: &str) -> BTreeMap<String, f64> {
    let out = Command::new(go)
        .args(["tool", "pprof", "-top", "-nodecount=1000", "-unit=B"])
        .arg(format!("-sample_index={index}"))
        .arg(binary)
        .arg(profile)
        .output()
        .expect("run go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "go tool pprof failed on {}:\n{}{}",
        profile.display(),
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut flat = BTreeMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !fields[1].ends_with('%') {
            continue;
        }
        let value = fields[0].trim_end_matches('B');
        if let Ok(v) = value.parse::<f64>() {
            flat.insert(fields[5..].join(" "), v);
        }
    }
    flat
}

/// `got` (an estimate of `truth` bytes) within 5 standard errors.
fn assert_estimate(site: &str, got: f64, truth: f64) {
    let n = truth / RATE;
    let bound = 5.0 * truth / n.sqrt();
    assert!(
        (got - truth).abs() <= bound,
        "{site}: estimated {got:.0} bytes, truly {truth:.0} (allowed ±{bound:.0}, {n:.0} samples expected)"
    );
}

fn value(map: &BTreeMap<String, f64>, site: &str) -> f64 {
    map.get(site).copied().unwrap_or(0.0)
}

fn profiled(dir: &str, args: &[&str], env_value: &str) -> (PathBuf, support::Outcome) {
    let dir = scratch_dir(dir);
    for entry in std::fs::read_dir(&dir).expect("read scratch dir") {
        let _ = std::fs::remove_file(entry.expect("entry").path());
    }
    let mut command = Command::new(program());
    command
        .args(args.iter().map(|a| a.replace("DIR", &dir.display().to_string())))
        .env("HAKMEM_PROFILE", env_value.replace("DIR", &dir.display().to_string()))
        .env("HAKMEM_STATS", "1");
    let outcome = run(command, true, Duration::from_secs(120));
    outcome.assert_success(&format!("heap_profile {args:?}"));
    (dir, outcome)
}

/// The stacks the profiler captured and how many of them libgcc walked,
/// from the statistics report at exit.
fn walks(outcome: &support::Outcome) -> (u64, u64) {
    let text = String::from_utf8_lossy(&outcome.stderr);
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} in the statistics: {text}"))
    };
    (field("profile_walks"), field("profile_libgcc_walks"))
}

/// Sites holding 60 MB and 20 MB in blocks of 300 and 100 bytes, one
/// churning 200 MB: the live profile shows the first two in their ratio
/// and not the third; the allocation profile shows all three. Written
/// twice: by `hakmem_profile_dump` mid-run, and at exit.
#[test]
fn a_c_program_gets_its_sites_in_their_ratio() {
    let Some(go) = go() else {
        require(
            false,
            "a_c_program_gets_its_sites_in_their_ratio",
            "go (go tool pprof) is not installed",
        );
        return;
    };
    let dump_path = scratch_dir("profile-sites-api").join("dump.pb.gz");
    let (dir, outcome) = profiled(
        "profile-sites",
        &["sites", dump_path.to_str().unwrap()],
        "DIR/exit.%p.pb.gz,rate=64k",
    );
    // Built at -O2 without frame pointers, every frame of the program has
    // a rule the profiler's own walk follows (x86-64, glibc): libgcc's walk is
    // never needed.
    let (all, libgcc) = walks(&outcome);
    assert!(all > 1000, "{all} stacks captured");
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    assert_eq!(libgcc, 0, "stacks libgcc walked");
    let exit_profile = std::fs::read_dir(&dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("exit."))
        .expect("the profile written at exit");
    for profile in [&dump_path, &exit_profile] {
        let inuse = top(&go, &program(), profile, "inuse_space");
        assert_estimate("hold_big", value(&inuse, "hold_big"), 300.0 * 200000.0);
        assert_estimate("hold_small", value(&inuse, "hold_small"), 100.0 * 200000.0);
        assert_eq!(value(&inuse, "churn"), 0.0, "churn holds nothing: {inuse:?}");
        let alloc = top(&go, &program(), profile, "alloc_space");
        assert_estimate("churn (allocated)", value(&alloc, "churn"), 200.0 * 1_000_000.0);
        assert_estimate("hold_big (allocated)", value(&alloc, "hold_big"), 300.0 * 200000.0);
        // The allocator's own frames are left out: no hakmem function and
        // no malloc is a site.
        assert!(
            inuse
                .keys()
                .chain(alloc.keys())
                .all(|f| !f.contains("hakmem") && f != "malloc"),
            "allocator frames in {inuse:?} {alloc:?}"
        );
        let objects = top(&go, &program(), profile, "inuse_objects");
        assert_estimate(
            "hold_small (objects)",
            value(&objects, "hold_small") * 100.0,
            100.0 * 200000.0,
        );
    }
}

/// Blocks made by threads and freed by the main thread after they exit
/// leave the live profile; the blocks the threads kept stay in it.
#[test]
fn blocks_freed_by_another_thread_leave_the_profile() {
    let Some(go) = go() else {
        require(
            false,
            "blocks_freed_by_another_thread_leave_the_profile",
            "go is not installed",
        );
        return;
    };
    let (dir, outcome) = profiled("profile-threads", &["threads"], "DIR/heap.pb.gz,rate=65536");
    #[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
    assert_eq!(walks(&outcome).1, 0, "threads' stacks walked by libgcc");
    let profile = dir.join("heap.pb.gz");
    let inuse = top(&go, &program(), &profile, "inuse_space");
    assert_estimate("keep_in_thread", value(&inuse, "keep_in_thread"), 4.0 * 10000.0 * 512.0);
    assert_eq!(value(&inuse, "produce"), 0.0, "freed by main: {inuse:?}");
    let alloc = top(&go, &program(), &profile, "alloc_space");
    assert_estimate("produce (allocated)", value(&alloc, "produce"), 4.0 * 20000.0 * 256.0);
}

/// Profiling on across `fork`: each process writes its own profile at
/// exit (`%p`); the child's holds what it allocated and what it inherited,
/// the parent's only its own.
#[test]
fn each_side_of_a_fork_writes_its_own_profile() {
    let Some(go) = go() else {
        require(
            false,
            "each_side_of_a_fork_writes_its_own_profile",
            "go is not installed",
        );
        return;
    };
    let (dir, outcome) = profiled("profile-fork", &["fork"], "DIR/heap.%p.pb.gz,rate=65536");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 2, "one profile per process: {files:?}");
    let mut child_seen = false;
    for file in &files {
        let inuse = top(&go, &program(), file, "inuse_space");
        assert_estimate("hold_big (before the fork)", value(&inuse, "hold_big"), 300.0 * 50000.0);
        if value(&inuse, "in_child") > 0.0 {
            child_seen = true;
            assert_estimate("in_child", value(&inuse, "in_child"), 300.0 * 50000.0);
        }
    }
    assert!(
        child_seen,
        "no profile shows the child's site; stdout {}",
        outcome.stdout_text()
    );
}

/// The C API is there for programs that link or preload the library.
#[test]
fn the_library_exports_the_profile_functions() {
    let nm = Command::new("nm")
        .arg("-D")
        .arg(&libs().shared)
        .output()
        .expect("run nm");
    let text = String::from_utf8_lossy(&nm.stdout);
    for f in ["hakmem_profile_dump", "hakmem_profile_start", "hakmem_profile_stop"] {
        assert!(
            text.lines().any(|l| l.ends_with(&format!(" T {f}"))),
            "{f} not exported"
        );
    }
}

/// A dump that fails (here the file size limit) leaves the profile an
/// earlier dump wrote whole: it is written beside it and renamed over it
/// (before, the file was truncated and cut: gzip failed on it), with the
/// permissions the program gave it; 4 threads dumping to the same path at
/// once all succeed; a device (`/dev/null`) is written in place. The
/// profile left (the threads') is read back.
#[test]
fn a_failed_dump_leaves_the_last_profile_whole() {
    let (dir, _) = profiled("profile-keep", &["keep", "DIR/kept.pb.gz"], ",rate=64k");
    let kept = dir.join("kept.pb.gz");
    let bytes = std::fs::read(&kept).expect("the first profile is there");
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "a gzip file");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("read dir")
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("kept.pb.gz")], "no temporary file left");
    if let Some(go) = go() {
        let sites = top(&go, &program(), &kept, "inuse_space");
        assert!(value(&sites, "hold_big") > 0.0, "{sites:?}");
        assert!(value(&sites, "hold_small") > 0.0, "{sites:?}");
    }
}

/// `tests/c/profile_in_unwinder.c` in `mode`, `runs` times, each with
/// sampling every 4 KiB on average and a limit of 20 s (a hang panics in
/// `run`).
fn run_sampled(link: Link, mode: &str, runs: usize, says: &str) {
    let exe = compile_c("profile_in_unwinder.c", link, &[]);
    for round in 0..runs {
        let mut command = Command::new(&exe);
        command.arg(mode).env("HAKMEM_PROFILE", ",rate=4k");
        let outcome = run(command, link.preload(), Duration::from_secs(20));
        outcome.assert_success(&format!("profile_in_unwinder {mode} ({link:?}), run {round}"));
        assert_eq!(outcome.stdout_text().trim(), says);
    }
}

/// libgcc allocates under its own lock as it sorts the tables of code
/// registered with `__register_frame` (JIT compilers; a static C
/// executable's own), for a `backtrace()` or a C++ `throw`. A sample taken
/// there once looked its frames up through libgcc, asked for that lock
/// again and hung (found by review: 3 runs of 3 preloaded, about 1 in 5
/// C++ throws in a static program); now the profiler never calls libgcc
/// from inside it.
#[test]
fn a_sample_taken_inside_the_unwinder_does_not_wait_for_its_lock() {
    run_sampled(Link::Preload, "unwind", 10, "walked");
    run_sampled(Link::FullyStatic, "unwind", 10, "walked");
}

/// A fully static program, sampled from its first allocation: samples
/// taken during glibc's start-up (before its tables of loaded objects, and
/// libgcc's registration of the program's unwind tables) crashed about 1
/// run in 3 (SIGABRT, SIGSEGV); none is recorded before hakmem's
/// constructor now.
#[test]
fn a_static_program_sampled_from_the_start_starts() {
    run_sampled(Link::FullyStatic, "start", 60, "started");
}
