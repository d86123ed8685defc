//! Whole programs on hakmem: real tools under `LD_PRELOAD` (python3, sort,
//! git) with their output compared byte for byte to a run on the system
//! allocator, and C programs that stress threads and fork, preloaded and
//! linked. Each preloaded run also proves, through the dynamic linker's
//! `LD_DEBUG=bindings` log, that `malloc` was bound to libhakmem.so.

mod support;

use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use support::{
    compile_c, have, require, run, run_both, run_preloading, scratch_dir, secure_libs, workspace_root, Link,
};

const LIMIT: Duration = Duration::from_secs(90);

/// The interpreter itself, not a wrapper script (pyenv installs a bash
/// shim named python3 on PATH).
fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !path.is_empty()).then(|| path.into())
}

#[test]
fn python_output_is_unchanged_under_preload() {
    let Some(python) = python() else {
        require(false, "python_output_is_unchanged_under_preload", "python3 not found");
        return;
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/workload.py");
    // pymalloc serves small objects from its own arenas; PYTHONMALLOC=malloc
    // sends every object through malloc/free/realloc.
    for allocator in ["pymalloc", "malloc"] {
        let outcome = run_both(&format!("python3 PYTHONMALLOC={allocator}"), LIMIT, || {
            let mut command = Command::new(&python);
            command
                .arg(&script)
                .env("PYTHONMALLOC", allocator)
                .env("PYTHONHASHSEED", "0");
            command
        });
        let stdout = outcome.stdout_text();
        assert!(stdout.ends_with("done\n"), "python3 output: {stdout}");
    }
}

#[test]
fn sort_output_is_unchanged_under_preload() {
    if !require(have("sort"), "sort_output_is_unchanged_under_preload", "sort not found") {
        return;
    }
    let dir = scratch_dir("sort");
    let input = dir.join("input.txt");
    // About 6 MB of pseudo-random lines: word, number, word.
    let mut text = String::with_capacity(6 << 20);
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..200_000 {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = state >> 16;
        let word: String = (0..(3 + r % 13))
            .map(|k| char::from(b'a' + ((r >> (3 * k)) % 26) as u8))
            .collect();
        let _ = writeln!(text, "{word}\t{}\t{:x}", r % 1_000_003, state);
    }
    fs::write(&input, text).expect("write sort input");
    for args in [
        &["--parallel=2"][..],
        &["-t", "\t", "-k2,2n", "-k1,1", "-S", "1M", "--parallel=2"][..],
    ] {
        let outcome = run_both(&format!("sort {}", args.join(" ")), LIMIT, || {
            let mut command = Command::new("sort");
            command.args(args).arg(&input).env("LC_ALL", "C").env("TMPDIR", &dir);
            command
        });
        assert_eq!(
            outcome.stdout.len(),
            fs::metadata(&input).expect("input").len() as usize
        );
    }
}

#[test]
fn git_output_is_unchanged_under_preload() {
    let root = workspace_root();
    if !require(have("git"), "git_output_is_unchanged_under_preload", "git not found") {
        return;
    }
    let in_repo = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["rev-parse", "--verify", "-q", "HEAD"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !in_repo {
        // Not a tool that can be missing: a source tree without history.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED: git_output_is_unchanged_under_preload: {} is not a git checkout with commits",
            root.display()
        );
        return;
    }
    let commands: [&[&str]; 3] = [
        &["log", "--stat", "-n", "50"],
        &["ls-files"],
        &["grep", "-n", "unsafe", "HEAD", "--", "crates"],
    ];
    for args in commands {
        let outcome = run_both(&format!("git {}", args.join(" ")), LIMIT, || {
            let mut command = Command::new("git");
            command
                .arg("-C")
                .arg(&root)
                .args(["--no-pager", "-c", "color.ui=never"])
                .args(args)
                .env("GIT_PAGER", "cat");
            command
        });
        assert!(!outcome.stdout.is_empty(), "git {} printed nothing", args.join(" "));
    }
}

#[test]
fn threads_exchanging_blocks_under_preload() {
    let exe = compile_c("threads.c", Link::Preload, &[]);
    let outcome = run_both("threads", LIMIT, || Command::new(&exe));
    assert!(outcome.stdout_text().ends_with("ok\n"), "{}", outcome.stdout_text());
}

#[test]
fn threads_exchanging_blocks_linked() {
    for link in [Link::Archive, Link::FullyStatic] {
        let exe = compile_c("threads.c", link, &[]);
        let outcome = run(Command::new(&exe), false, LIMIT);
        outcome.assert_success(&format!("threads ({link:?})"));
        assert!(outcome.stdout_text().ends_with("ok\n"), "{}", outcome.stdout_text());
    }
}

#[test]
fn fork_while_threads_allocate_under_preload() {
    let exe = compile_c("fork.c", Link::Preload, &[]);
    let outcome = run_both("fork", LIMIT, || Command::new(&exe));
    assert!(
        outcome.stdout_text().ends_with(", 0 failed\n"),
        "{}",
        outcome.stdout_text()
    );
}

/// The program's own `fork` handlers allocate and free, registered before
/// hakmem's (fork_handlers.c): they run while hakmem's prepare handler
/// holds its locks, which the forking thread takes again. Before, the
/// first fork hung (the run was killed at the time limit).
#[test]
fn fork_handlers_that_allocate_under_preload() {
    let exe = compile_c("fork_handlers.c", Link::Preload, &[]);
    let outcome = run_both("fork_handlers", LIMIT, || Command::new(&exe));
    assert!(
        outcome
            .stdout_text()
            .ends_with("10 forks, 0 failed, 0 failures in the parent\n"),
        "{}",
        outcome.stdout_text()
    );
    let secure = run_preloading(Command::new(&exe), Some(&secure_libs().shared), LIMIT);
    secure.assert_success("fork_handlers (LD_PRELOAD=libhakmem_secure.so)");
    assert_eq!(
        secure.stdout, outcome.stdout,
        "fork_handlers: the hardened library's output"
    );
}

/// Linked with the archive the handlers run inside hakmem's window as
/// under preload (the first fork hung before); fully static, glibc's
/// start-up allocates before any constructor, so hakmem's handlers are
/// registered first and these run outside it.
#[test]
fn fork_handlers_that_allocate_linked() {
    for link in [Link::Archive, Link::FullyStatic] {
        let exe = compile_c("fork_handlers.c", link, &[]);
        let outcome = run(Command::new(&exe), false, LIMIT);
        outcome.assert_success(&format!("fork_handlers ({link:?})"));
        assert!(
            outcome
                .stdout_text()
                .ends_with("10 forks, 0 failed, 0 failures in the parent\n"),
            "{}",
            outcome.stdout_text()
        );
    }
}

/// The program's first allocation made by glibc inside `atexit` or
/// `pthread_atfork`, holding their lock (first_allocation_in_atexit.c).
/// hakmem registered its own handlers at its first allocation, so it
/// waited there for that lock, for good (killed at the time limit): the
/// fork handlers always, the exit handlers in the hardened library and
/// with `HAKMEM_STATS=1`. It now registers them as it is loaded. The
/// `-full` modes fill the lists before hakmem's constructor, so that its
/// own registration allocates, on a thread with no heap: preloaded only
/// (linked with the archive, glibc's start-up registers an exit handler
/// of its own between the executable's `.preinit_array` and hakmem's
/// constructor, and its allocation is the first: the case DESIGN leaves).
#[test]
fn first_allocation_inside_atexit_and_pthread_atfork() {
    const SHORT: Duration = Duration::from_secs(20);
    let expected = |mode: &str| match mode {
        "atexit" => "allocated\n40 exit handlers ran\n",
        "atexit-full" => "allocated\n32 exit handlers ran\n",
        "atfork" => "allocated\n60 prepare, 60 parent handlers ran; the child's 60\n",
        _ => "allocated\n48 prepare, 48 parent handlers ran; the child's 48\n",
    };
    let command = |exe: &PathBuf, mode: &str| {
        let mut command = Command::new(exe);
        command.arg(mode).env("HAKMEM_STATS", "1");
        command
    };
    let preloaded = compile_c("first_allocation_in_atexit.c", Link::Preload, &[]);
    for mode in ["atexit", "atfork", "atexit-full", "atfork-full"] {
        for library in [None, Some(&support::libs().shared), Some(&secure_libs().shared)] {
            let what = format!("first_allocation_in_atexit {mode} (LD_PRELOAD={library:?})");
            let outcome = run_preloading(command(&preloaded, mode), library.map(|l| l.as_path()), SHORT);
            outcome.assert_success(&what);
            assert_eq!(outcome.stdout_text(), expected(mode), "{what}");
        }
        if mode.ends_with("-full") {
            continue;
        }
        for link in [Link::Archive, Link::FullyStatic] {
            let exe = compile_c("first_allocation_in_atexit.c", link, &[]);
            let outcome = run(command(&exe, mode), false, SHORT);
            outcome.assert_success(&format!("first_allocation_in_atexit {mode} ({link:?})"));
            assert_eq!(outcome.stdout_text(), expected(mode), "{mode} ({link:?})");
        }
    }
}

#[test]
fn fork_while_threads_allocate_linked() {
    for link in [Link::Archive, Link::FullyStatic] {
        let exe = compile_c("fork.c", link, &[]);
        let outcome = run(Command::new(&exe), false, LIMIT);
        outcome.assert_success(&format!("fork ({link:?})"));
        assert!(
            outcome.stdout_text().ends_with(", 0 failed\n"),
            "{}",
            outcome.stdout_text()
        );
    }
}
