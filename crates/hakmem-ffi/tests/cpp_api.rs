//! libhakmem's C++ operators and glibc statistics, seen from C++ programs
//! (`tests/cpp/`): every form of `operator new`/`delete`, the new-handler
//! and `std::bad_alloc`, misused deletes, a C++ plugin of a C program, and
//! the check that C programs do not get libstdc++ with the library.

mod support;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::{compile_c, compile_cpp, compile_cpp_shared, libs, run, Link};

const LIMIT: Duration = Duration::from_secs(90);

fn run_operators(link: Link) {
    let exe = compile_cpp("operators.cpp", link, &[]);
    let outcome = run(Command::new(&exe), link.preload(), LIMIT);
    outcome.assert_success(&format!("operators ({link:?})"));
    let stdout = outcome.stdout_text();
    assert!(stdout.contains(" checks, 0 failures"), "{stdout}");
    // malloc_stats printed hakmem's report, and nothing else was printed.
    let stderr = outcome.stderr_text();
    assert!(
        stderr.starts_with("hakmem: committed_kib="),
        "malloc_stats did not print hakmem's report: {stderr}"
    );
    assert!(stderr.lines().all(|l| l.starts_with("hakmem: ")), "{stderr}");
}

/// The executable itself defines every operator (`T`): libstdc++'s own
/// calls to `operator new` bind to hakmem's too.
fn assert_defines_operators(exe: &Path) {
    let nm = Command::new("nm").arg(exe).output().expect("run nm (binutils)");
    assert!(nm.status.success(), "nm failed");
    let text = String::from_utf8_lossy(&nm.stdout);
    for name in [
        "_Znwm",
        "_ZnamSt11align_val_t",
        "_ZdlPvm",
        "_ZdaPvmSt11align_val_t",
        "mallinfo2",
    ] {
        let defined = text.lines().any(|l| {
            let mut fields = l.split_whitespace();
            matches!((fields.next(), fields.next(), fields.next()), (Some(_), Some("T"), Some(n)) if n == name)
        });
        assert!(defined, "{name} is not defined in {}", exe.display());
    }
}

#[test]
fn cpp_operators_are_hakmems_under_ld_preload() {
    run_operators(Link::Preload);
}

#[test]
fn cpp_operators_are_hakmems_linked_with_the_archive() {
    run_operators(Link::Archive);
    assert_defines_operators(&compile_cpp("operators.cpp", Link::Archive, &[]));
}

#[test]
fn cpp_operators_are_hakmems_in_a_fully_static_program() {
    run_operators(Link::FullyStatic);
    assert_defines_operators(&compile_cpp("operators.cpp", Link::FullyStatic, &[]));
}

/// Real exhaustion (`RLIMIT_AS`), not an impossible size: the new-handler
/// frees memory, the `new` that called it succeeds; later ones throw.
#[test]
fn new_handler_that_frees_memory_lets_new_succeed() {
    for link in [Link::Preload, Link::Archive, Link::FullyStatic] {
        let exe = compile_cpp("operators.cpp", link, &[]);
        let mut command = Command::new(&exe);
        command.arg("handler-frees");
        let outcome = run(command, link.preload(), LIMIT);
        outcome.assert_success(&format!("operators handler-frees ({link:?})"));
        assert!(
            outcome.stdout_text().contains(" checks, 0 failures"),
            "{link:?}: {}",
            outcome.stdout_text()
        );
    }
}

/// (misuse kind, the diagnostic's start). Deletes are `free`, with free's
/// checks and name; the aligned forms also check the alignment. The size of
/// a sized delete is not checked (src/overrides.rs says why).
const MISUSES: [(&str, &str); 5] = [
    (
        "aligned",
        "hakmem: operator delete(): pointer not aligned to 1048576 (alignment mismatch)",
    ),
    (
        "aligned-sized",
        "hakmem: operator delete[](): pointer not aligned to 1048576 (alignment mismatch)",
    ),
    ("sized-stack", "hakmem: free(): invalid pointer"),
    ("sized-freed", "hakmem: free(): double free"),
    ("unsized-stack", "hakmem: free(): invalid pointer"),
];

#[test]
fn misused_deletes_abort_with_a_diagnostic() {
    for link in [Link::Preload, Link::Archive] {
        let exe = compile_cpp("operators.cpp", link, &[]);
        for (kind, expected) in MISUSES {
            let mut command = Command::new(&exe);
            command.args(["misuse", kind]).env_remove("HAKMEM_ON_ERROR");
            let outcome = run(command, link.preload(), LIMIT);
            let what = format!("misuse {kind} ({link:?})");
            assert_eq!(
                outcome.status.signal(),
                Some(libc::SIGABRT),
                "{what}: want SIGABRT, got {}; stdout {:?} stderr {:?}",
                outcome.status,
                outcome.stdout_text(),
                outcome.stderr_text()
            );
            let stderr = outcome.stderr_text();
            assert!(
                stderr.starts_with(expected),
                "{what}: stderr {stderr:?}, want {expected:?}..."
            );
            assert!(stderr.contains(" 0x"), "{what}: the pointer is named: {stderr:?}");
            assert!(outcome.stdout.is_empty(), "{what}: the call returned");
        }
    }
}

#[test]
fn misused_deletes_are_ignored_with_on_error_warn() {
    let exe = compile_cpp("operators.cpp", Link::Preload, &[]);
    for (kind, expected) in MISUSES {
        let mut command = Command::new(&exe);
        command.args(["misuse", kind]).env("HAKMEM_ON_ERROR", "warn");
        let outcome = run(command, true, LIMIT);
        outcome.assert_success(&format!("misuse {kind} with HAKMEM_ON_ERROR=warn"));
        assert_eq!(outcome.stdout_text(), "returned\n", "{kind}");
        assert!(
            outcome.stderr_text().starts_with(expected),
            "{kind}: {:?}",
            outcome.stderr_text()
        );
    }
}

/// A C program loads a C++ plugin with `dlopen(RTLD_LOCAL)`: libstdc++
/// arrives after libhakmem.so, whose weak references to it stay null.
/// hakmem finds the runtime by name: the throwing new calls the handler
/// and throws `std::bad_alloc` into the plugin; the nothrow new, which
/// cannot catch without the personality routine, returns null without
/// calling the handler (docs/DESIGN.md).
#[test]
fn cpp_plugin_of_a_c_program_gets_bad_alloc() {
    let plugin = compile_cpp_shared("plugin.cpp");
    let host = compile_c("plugin_host.c", Link::Preload, &[]);
    let mut command = Command::new(&host);
    command.arg(&plugin);
    let outcome = run(command, true, LIMIT);
    outcome.assert_success("plugin_host");
    assert_eq!(
        outcome.stdout_text(),
        "new: bad_alloc, handler calls 3\nnothrow new: null, handler calls 0\nplugin blocks are hakmem's\n"
    );
}

/// C programs must not get libstdc++ by preloading or linking libhakmem:
/// the library needs only libc, and its references to the C++ runtime
/// (new_handler.cpp) are all weak.
#[test]
fn shared_library_does_not_need_the_cpp_runtime() {
    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(&libs().shared)
        .output()
        .expect("run readelf");
    assert!(readelf.status.success(), "readelf failed");
    let dynamic = String::from_utf8_lossy(&readelf.stdout);
    let needed: Vec<&str> = dynamic
        .lines()
        .filter(|l| l.contains("(NEEDED)"))
        .filter_map(|l| l.split('[').nth(1)?.split(']').next())
        .collect();
    if cfg!(debug_assertions) {
        // Unoptimised builds link std (libgcc_s for unwinding), never libstdc++.
        assert!(!needed.iter().any(|n| n.contains("stdc++")), "{needed:?}");
    } else {
        // libgcc_s: the system unwinder the heap profiler walks stacks
        // with (`_Unwind_Find_FDE`, `_Unwind_Backtrace`), which every C
        // program's runtime has. On x86-64 the profiler's own walk reads
        // `__libc_stack_end` (the main thread's stack top) from the
        // dynamic loader, which every dynamically linked process has.
        if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
            assert_eq!(needed, ["libc.so.6", "ld-linux-x86-64.so.2", "libgcc_s.so.1"]);
        } else {
            assert_eq!(needed, ["libc.so.6", "libgcc_s.so.1"]);
        }
    }

    let nm = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(&libs().shared)
        .output()
        .expect("run nm (binutils)");
    assert!(nm.status.success(), "nm -D failed");
    let text = String::from_utf8_lossy(&nm.stdout);
    // glibc's own __cxa_atexit/__cxa_finalize are versioned GLIBC_*.
    let cpp_runtime = |name: &str| {
        (name.starts_with("_Z") || name.starts_with("__cxa_") || name.starts_with("__gxx_")) && !name.contains("@GLIBC")
    };
    let strong: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let mut fields = l.split_whitespace();
            match (fields.next(), fields.next()) {
                (Some("U"), Some(name)) if cpp_runtime(name) => Some(name),
                _ => None,
            }
        })
        .collect();
    assert!(strong.is_empty(), "strong references to the C++ runtime: {strong:?}");
    for weak in [
        "_ZSt15get_new_handlerv",
        "_ZSt17__throw_bad_allocv",
        "__gxx_personality_v0",
    ] {
        assert!(
            text.lines().any(|l| l.split_whitespace().eq(["w", weak])),
            "{weak} is not a weak reference:\n{text}"
        );
    }
}
