//! Shared by the system tests of the C library: finding (building) the
//! libraries, compiling the C and C++ programs of `tests/c/` and
//! `tests/cpp/`, and running programs with and without `LD_PRELOAD`.
//!
//! `cargo test` does not build this crate's `cdylib`/`staticlib` (it builds
//! only the unit-test harness of `src/lib.rs`), so [`libs`] runs
//! `cargo build -p hakmem-ffi` once per test binary, with the profile and
//! target directory of the running test (`target/<profile>/deps/<test>`),
//! and takes `libhakmem.so` / `libhakmem.a` from `target/<profile>/`. When
//! that build is up to date it costs well under a second. [`secure_libs`]
//! does the same for `hakmem-ffi-secure` (`libhakmem_secure.so` / `.a`).
#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::env;
use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The built libraries.
pub struct Libs {
    /// `libhakmem.so`, absolute.
    pub shared: PathBuf,
    /// `libhakmem.a`, absolute.
    pub archive: PathBuf,
}

/// Builds the libraries (once per test binary) and returns their paths.
pub fn libs() -> &'static Libs {
    static LIBS: OnceLock<Libs> = OnceLock::new();
    LIBS.get_or_init(|| build_libs(Path::new(env!("CARGO_MANIFEST_DIR")), "hakmem"))
}

/// Builds the hardened libraries, `libhakmem_secure.so` / `.a` (the
/// `hakmem-ffi-secure` package), once per test binary.
pub fn secure_libs() -> &'static Libs {
    static LIBS: OnceLock<Libs> = OnceLock::new();
    LIBS.get_or_init(|| {
        build_libs(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../hakmem-ffi-secure"),
            "hakmem_secure",
        )
    })
}

/// The features of the C libraries' dependencies that a build of the whole
/// workspace turns on and a build of the library's package alone does not,
/// as `cargo build --features` takes them: libc's defaults (`std`: other
/// packages' dependencies take libc with them), and hakmem-core's (none:
/// a workspace member is built with its defaults).
pub const WORKSPACE_FEATURES: &str = "libc/default,hakmem-core/default";

/// Builds the package in `package_dir` with the running test's profile and
/// target directory and returns its `lib<stem>.so` and `lib<stem>.a`.
fn build_libs(package_dir: &Path, stem: &str) -> Libs {
    let exe = env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test executable>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test runs from target/<profile>/deps");
    let target_dir = profile_dir.parent().expect("target/<profile> has a parent");
    let profile = match profile_dir.file_name().and_then(OsStr::to_str) {
        Some("debug") => "dev",
        Some(name) => name,
        None => panic!("unexpected test location {}", exe.display()),
    };
    let cargo = env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let manifest = package_dir.join("Cargo.toml");
    // With the features a build of the whole workspace unifies on the
    // library's dependencies (`cargo build --release`, the README's
    // command, and scripts/bench): this is the library users get, not one
    // only a build of the package alone gives (that difference once left
    // `atexit` unresolved in the workspace's libhakmem.so). They are
    // named rather than had by building hakmem-bench alongside, which
    // cost a fresh run minutes (jemalloc and mimalloc from their C
    // sources, with fat LTO); `workspace_features_are_the_tested_ones`
    // (c_api.rs) fails when the workspace's set moves.
    let output = Command::new(cargo)
        .args(["build", "--quiet", "--lib", "--profile", profile, "--manifest-path"])
        .arg(&manifest)
        .args(["-p", &package_name(package_dir), "--features", WORKSPACE_FEATURES])
        .arg("--target-dir")
        .arg(target_dir)
        .output()
        .expect("run cargo build");
    assert!(
        output.status.success(),
        "cargo build of lib{stem} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let libs = Libs {
        shared: profile_dir.join(format!("lib{stem}.so")),
        archive: profile_dir.join(format!("lib{stem}.a")),
    };
    assert!(libs.shared.is_file(), "{} was not built", libs.shared.display());
    assert!(libs.archive.is_file(), "{} was not built", libs.archive.display());
    libs
}

/// The package name in `package_dir`'s manifest.
fn package_name(package_dir: &Path) -> String {
    let manifest = fs::read_to_string(package_dir.join("Cargo.toml")).expect("read the package's manifest");
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("the manifest names its package")
        .to_string()
}

/// The workspace root (for `include/` and the git tests).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// A scratch directory for this test binary's outputs, under `target/tmp`.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hakmem-ffi").join(name);
    fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// How a test program gets hakmem.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// Plain executable; hakmem comes in with `LD_PRELOAD` at run time.
    Preload,
    /// `libhakmem.a` linked in (`-DHAKMEM_LINKED`); libc stays dynamic and
    /// binds its own `malloc` calls to the executable's.
    Archive,
    /// `libhakmem.a` and glibc's `libc.a` in one `-static` executable.
    FullyStatic,
}

impl Link {
    /// Whether the program needs `LD_PRELOAD` to get hakmem.
    pub fn preload(self) -> bool {
        self == Link::Preload
    }

    fn suffix(self) -> &'static str {
        match self {
            Link::Preload => "preload",
            Link::Archive => "archive",
            Link::FullyStatic => "static",
        }
    }
}

/// Compiles `tests/c/<source>` for `link` and returns the executable's
/// path (`<scratch>/bin/<source stem>-<link>`).
pub fn compile_c(source: &str, link: Link, defines: &[&str]) -> PathBuf {
    compile(Lang::C, source, link, defines)
}

/// Compiles `tests/cpp/<source>` (C++17, sized deallocation and aligned
/// new on) for `link`, as [`compile_c`] does a C program.
pub fn compile_cpp(source: &str, link: Link, defines: &[&str]) -> PathBuf {
    compile(Lang::Cpp, source, link, defines)
}

/// Compiles `tests/cpp/<source>` into a shared library
/// (`<scratch>/lib/lib<source stem>.so`), linked with libstdc++ as a C++
/// plugin is.
pub fn compile_cpp_shared(source: &str) -> PathBuf {
    let stem = source.trim_end_matches(".cpp");
    let lib = scratch_dir("lib").join(format!("lib{stem}.so"));
    let mut cxx = Lang::Cpp.compiler(source);
    cxx.args(["-shared", "-fPIC"]).arg("-o").arg(&lib);
    run_compiler(cxx, source);
    lib
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Lang {
    C,
    Cpp,
}

impl Lang {
    /// The compiler command for `tests/<c|cpp>/<source>`, with the flags
    /// every test program gets.
    fn compiler(self, source: &str) -> Command {
        let (dir, var, default, std) = match self {
            Lang::C => ("tests/c", "CC", "cc", "-std=gnu11"),
            Lang::Cpp => ("tests/cpp", "CXX", "c++", "-std=c++17"),
        };
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(source);
        let mut cc = Command::new(env::var_os(var).unwrap_or_else(|| default.into()));
        // -fno-builtin: keep the compiler from folding malloc/free pairs away or
        // assuming what an impossible malloc returns.
        cc.args([std, "-O1", "-g", "-Wall", "-Wextra", "-fno-builtin", "-pthread"])
            .arg("-I")
            .arg(workspace_root().join("include"))
            .arg(&src);
        if self == Lang::Cpp {
            // Explicit, though C++17 implies both: delete-expressions call the
            // sized operator delete, over-aligned types the aligned forms.
            cc.args(["-fsized-deallocation", "-faligned-new"]);
        }
        cc
    }
}

/// Compiles each program once per test binary: tests running in parallel
/// share the executable instead of rewriting it while another runs it
/// ("Text file busy").
fn compile(lang: Lang, source: &str, link: Link, defines: &[&str]) -> PathBuf {
    static COMPILED: Mutex<BTreeMap<PathBuf, Vec<String>>> = Mutex::new(BTreeMap::new());
    let stem = source.trim_end_matches(".cpp").trim_end_matches(".c");
    let exe = scratch_dir("bin").join(format!("{stem}-{}", link.suffix()));
    let defines: Vec<String> = defines.iter().map(|d| d.to_string()).collect();
    let mut compiled = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(earlier) = compiled.get(&exe) {
        assert_eq!(
            earlier, &defines,
            "{source} ({link:?}) compiled with other defines before"
        );
        return exe;
    }
    let mut cc = lang.compiler(source);
    cc.args(defines.iter().map(|d| format!("-D{d}"))).arg("-o").arg(&exe);
    match link {
        Link::Preload => {}
        Link::Archive => {
            cc.arg("-DHAKMEM_LINKED").arg(&libs().archive);
        }
        Link::FullyStatic => {
            cc.args(["-static", "-DHAKMEM_LINKED"]).arg(&libs().archive);
        }
    }
    cc.args(["-ldl", "-lm"]);
    run_compiler(cc, source);
    compiled.insert(exe.clone(), defines);
    exe
}

fn run_compiler(mut cc: Command, source: &str) {
    let output = cc.output().expect("run the C/C++ compiler (is one installed?)");
    assert!(
        output.status.success(),
        "compiling {source} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What a finished program did.
#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Outcome {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Panics with the program's output unless it exited with status 0.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what}: {}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            self.status,
            tail(&self.stdout),
            tail(&self.stderr)
        );
    }
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let start = text.len().saturating_sub(4000);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}

/// Runs `command` to completion (killing it after `limit`), feeding it no
/// standard input. With `preload`, `LD_PRELOAD` is set to `libhakmem.so`.
pub fn run(command: Command, preload: bool, limit: Duration) -> Outcome {
    run_preloading(command, preload.then(|| libs().shared.as_path()), limit)
}

/// [`run`] with `LD_PRELOAD` set to `library` (unset when `None`).
pub fn run_preloading(mut command: Command, library: Option<&Path>, limit: Duration) -> Outcome {
    command.env_remove("LD_PRELOAD");
    if let Some(library) = library {
        command.env("LD_PRELOAD", library);
    }
    let what = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    // Drain both pipes on their own threads so a chatty program cannot block.
    let mut out_pipe = child.stdout.take().expect("stdout piped");
    let mut err_pipe = child.stderr.take().expect("stderr piped");
    let out_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        out_pipe.read_to_end(&mut buf).map(|_| buf)
    });
    let err_reader = thread::spawn(move || {
        let mut buf = Vec::new();
        err_pipe.read_to_end(&mut buf).map(|_| buf)
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within {limit:?} (deadlock?)");
        }
        thread::sleep(Duration::from_millis(5));
    };
    Outcome {
        status,
        stdout: out_reader.join().expect("stdout reader").expect("read stdout"),
        stderr: err_reader.join().expect("stderr reader").expect("read stderr"),
    }
}

/// Runs `make()`'s command without and then with `LD_PRELOAD=libhakmem.so`,
/// asserts both succeed with byte-identical stdout, and returns the
/// preloaded run's outcome. With `LD_DEBUG=bindings` (written to a file,
/// not to the program's output) it also checks that the dynamic linker
/// bound `malloc` to libhakmem.so in that run: proof that the preload took
/// effect for this very program.
pub fn run_both(what: &str, limit: Duration, make: impl Fn() -> Command) -> Outcome {
    let plain = run(make(), false, limit);
    plain.assert_success(&format!("{what} (system allocator)"));

    let debug_dir = scratch_dir("ld-debug").join(what.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    let _ = fs::remove_dir_all(&debug_dir);
    fs::create_dir_all(&debug_dir).expect("create ld-debug dir");
    let mut command = make();
    command
        .env("LD_DEBUG", "bindings")
        .env("LD_DEBUG_OUTPUT", debug_dir.join("log"));
    let hakmem = run(command, true, limit);
    hakmem.assert_success(&format!("{what} (LD_PRELOAD=libhakmem.so)"));
    assert!(
        plain.stdout == hakmem.stdout,
        "{what}: stdout differs under LD_PRELOAD ({} vs {} bytes)",
        plain.stdout.len(),
        hakmem.stdout.len()
    );
    assert_malloc_bound_to_hakmem(what, &debug_dir);
    hakmem
}

/// Checks the `LD_DEBUG=bindings` logs (one per process) for a binding of
/// `malloc` to libhakmem.so.
fn assert_malloc_bound_to_hakmem(what: &str, debug_dir: &Path) {
    let lib = libs().shared.display().to_string();
    let needle_lib = format!(" to {lib} ");
    let mut logs = 0;
    for entry in fs::read_dir(debug_dir).expect("read ld-debug dir") {
        let text = fs::read_to_string(entry.expect("dir entry").path()).unwrap_or_default();
        logs += 1;
        if text
            .lines()
            .any(|l| l.contains(&needle_lib) && l.contains("symbol `malloc'"))
        {
            return;
        }
    }
    panic!(
        "{what}: no LD_DEBUG log of {logs} in {} binds malloc to {lib}",
        debug_dir.display()
    );
}

/// Whether `program` can be run (found on `PATH`).
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// For a test that needs `what` (a tool, or a condition it names): when
/// `present`, true; otherwise, with `REQUIRE_TEST_TOOLS` set (`.ci/run`
/// sets it and installs every tool the tests use) the test fails, and
/// without it a `SKIPPED: <test>: <what>` line goes straight to the
/// terminal (a passing test's `eprintln!` is captured and never shown) and
/// the caller returns.
pub fn require(present: bool, test: &str, what: &str) -> bool {
    if !present {
        assert!(
            std::env::var_os("REQUIRE_TEST_TOOLS").is_none(),
            "{test}: {what}, and REQUIRE_TEST_TOOLS is set"
        );
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {what}");
    }
    present
}
