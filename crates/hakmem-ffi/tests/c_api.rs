//! The C ABI of libhakmem, seen from C programs (`tests/c/`): every
//! exported function's edge cases, foreign-pointer detection, the exported
//! symbol set, and the shape of the built shared library.

mod support;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::time::Duration;
use support::{compile_c, libs, run, secure_libs, Link};

const LIMIT: Duration = Duration::from_secs(60);
const VERSION_DEFINE: &str = concat!("HAKMEM_EXPECTED_VERSION=\"", env!("CARGO_PKG_VERSION"), "\"");

/// Every symbol libhakmem.so exports: glibc's allocator API, glibc's
/// aliases, C23's sized frees, glibc's statistics functions, the C++
/// operators (Itanium-mangled), and the `hakmem_*` extensions of
/// include/hakmem.h.
const EXPORTS: [&str; 61] = [
    "__libc_calloc",
    "__libc_free",
    "__libc_malloc",
    "__libc_memalign",
    "__libc_pvalloc",
    "__libc_realloc",
    "__libc_valloc",
    // operator delete[]: plain, nothrow, aligned, aligned nothrow, sized,
    // sized aligned.
    "_ZdaPv",
    "_ZdaPvRKSt9nothrow_t",
    "_ZdaPvSt11align_val_t",
    "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    "_ZdaPvm",
    "_ZdaPvmSt11align_val_t",
    // operator delete: the same six.
    "_ZdlPv",
    "_ZdlPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t",
    "_ZdlPvm",
    "_ZdlPvmSt11align_val_t",
    // operator new[] and operator new: plain, nothrow, aligned, aligned
    // nothrow.
    "_Znam",
    "_ZnamRKSt9nothrow_t",
    "_ZnamSt11align_val_t",
    "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_Znwm",
    "_ZnwmRKSt9nothrow_t",
    "_ZnwmSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t",
    "aligned_alloc",
    "calloc",
    "cfree",
    "free",
    "free_aligned_sized",
    "free_sized",
    "hakmem_collect",
    "hakmem_heap_calloc",
    "hakmem_heap_delete",
    "hakmem_heap_destroy",
    "hakmem_heap_malloc",
    "hakmem_heap_new",
    "hakmem_heap_realloc",
    "hakmem_os_counters",
    "hakmem_owns",
    "hakmem_profile_dump",
    "hakmem_profile_start",
    "hakmem_profile_stop",
    "hakmem_stats_json",
    "hakmem_stats_print",
    "hakmem_version",
    "malloc",
    "malloc_info",
    "malloc_stats",
    "malloc_trim",
    "malloc_usable_size",
    "mallinfo",
    "mallinfo2",
    "memalign",
    "posix_memalign",
    "pvalloc",
    "realloc",
    "reallocarray",
    "valloc",
];

fn run_edge_cases(link: Link) {
    let exe = compile_c("edge_cases.c", link, &[VERSION_DEFINE]);
    let outcome = run(Command::new(&exe), link.preload(), LIMIT);
    outcome.assert_success(&format!("edge_cases ({link:?})"));
    let stdout = outcome.stdout_text();
    assert!(stdout.contains(" checks, 0 failures"), "{stdout}");
    // hakmem_stats_print's report, and nothing else.
    let stderr = outcome.stderr_text();
    assert!(
        stderr.starts_with("hakmem: committed_kib="),
        "stats report missing: {stderr}"
    );
    assert!(stderr.contains("\nhakmem: mmap="), "{stderr}");
    assert!(stderr.lines().all(|l| l.starts_with("hakmem: ")), "{stderr}");
}

/// The executable itself defines the allocator (`T`), so every call,
/// glibc's internal ones included, reaches hakmem.
fn assert_defines_allocator(exe: &std::path::Path) {
    let nm = Command::new("nm").arg(exe).output().expect("run nm (binutils)");
    assert!(nm.status.success(), "nm failed");
    let text = String::from_utf8_lossy(&nm.stdout);
    for name in [
        "malloc",
        "free",
        "calloc",
        "realloc",
        "posix_memalign",
        "hakmem_version",
    ] {
        let defined = text.lines().any(|l| {
            let mut fields = l.split_whitespace();
            matches!((fields.next(), fields.next(), fields.next()), (Some(_), Some("T"), Some(n)) if n == name)
        });
        assert!(defined, "{name} is not defined in {}", exe.display());
    }
}

#[test]
fn edge_cases_hold_under_ld_preload() {
    run_edge_cases(Link::Preload);
}

#[test]
fn edge_cases_hold_linked_with_the_archive() {
    run_edge_cases(Link::Archive);
    assert_defines_allocator(&compile_c("edge_cases.c", Link::Archive, &[VERSION_DEFINE]));
}

#[test]
fn edge_cases_hold_in_a_fully_static_program() {
    run_edge_cases(Link::FullyStatic);
    assert_defines_allocator(&compile_c("edge_cases.c", Link::FullyStatic, &[VERSION_DEFINE]));
}

/// (operation argument, C function named in the diagnostic)
const POINTER_OPS: [(&str, &str); 5] = [
    ("free", "free"),
    ("realloc", "realloc"),
    ("realloc0", "realloc"),
    ("usable", "malloc_usable_size"),
    // free_sized is free, diagnostics included.
    ("free_sized", "free"),
];

#[test]
fn bad_pointers_abort_with_a_diagnostic() {
    for link in [Link::Preload, Link::Archive] {
        let exe = compile_c("foreign_pointer.c", link, &[]);
        for (op, function) in POINTER_OPS {
            // free's own fast path reports "double free of 0x...", the
            // checks before realloc and malloc_usable_size "pointer already freed".
            let already_freed = if function == "free" {
                "double free"
            } else {
                "pointer already freed"
            };
            for (kind, reason) in [
                ("stack", "invalid pointer"),
                ("mmap", "invalid pointer"),
                ("garbage", "invalid pointer"),
                ("interior", "invalid pointer"),
                ("freed", already_freed),
                ("delayed", already_freed),
            ] {
                let mut command = Command::new(&exe);
                command.args([op, kind]).env_remove("HAKMEM_ON_ERROR");
                let outcome = run(command, link.preload(), LIMIT);
                let what = format!("{op} of a {kind} pointer ({link:?})");
                assert_eq!(
                    outcome.status.signal(),
                    Some(libc::SIGABRT),
                    "{what}: want SIGABRT, got {}; stdout {:?} stderr {:?}",
                    outcome.status,
                    outcome.stdout_text(),
                    outcome.stderr_text()
                );
                let stderr = outcome.stderr_text();
                let expected = format!("hakmem: {function}(): {reason}");
                assert!(
                    stderr.starts_with(&expected),
                    "{what}: stderr {stderr:?}, want {expected:?}..."
                );
                assert!(stderr.contains(" 0x"), "{what}: the pointer is named: {stderr:?}");
                assert!(outcome.stdout.is_empty(), "{what}: the call returned");
            }
        }
    }
}

#[test]
fn bad_pointers_are_ignored_with_on_error_warn() {
    let exe = compile_c("foreign_pointer.c", Link::Preload, &[]);
    let returns = [
        ("free", "returned\n"),
        ("realloc", "returned NULL\n"),
        ("realloc0", "returned NULL\n"),
        ("usable", "returned 0\n"),
        ("free_sized", "returned\n"),
    ];
    for ((op, function), (_, returned)) in POINTER_OPS.into_iter().zip(returns) {
        let mut command = Command::new(&exe);
        command.args([op, "mmap"]).env("HAKMEM_ON_ERROR", "warn");
        let outcome = run(command, true, LIMIT);
        outcome.assert_success(&format!("{op} of a foreign pointer with HAKMEM_ON_ERROR=warn"));
        assert_eq!(outcome.stdout_text(), returned, "{op}");
        let expected = format!("hakmem: {function}(): invalid pointer");
        assert!(
            outcome.stderr_text().starts_with(&expected),
            "{op}: {:?}",
            outcome.stderr_text()
        );
    }
}

/// C23's `free_aligned_sized` checks the alignment: a block without it is
/// reported like a bad pointer (abort; ignored with `HAKMEM_ON_ERROR=warn`).
#[test]
fn aligned_free_of_a_misaligned_block_aborts_with_a_diagnostic() {
    let expected = "hakmem: free_aligned_sized(): pointer not aligned to 1048576 (alignment mismatch) 0x";
    for link in [Link::Preload, Link::Archive] {
        let exe = compile_c("foreign_pointer.c", link, &[]);
        let mut command = Command::new(&exe);
        command.arg("misaligned").env_remove("HAKMEM_ON_ERROR");
        let outcome = run(command, link.preload(), LIMIT);
        assert_eq!(
            outcome.status.signal(),
            Some(libc::SIGABRT),
            "misaligned ({link:?}): {} {:?}",
            outcome.status,
            outcome.stderr_text()
        );
        assert!(
            outcome.stderr_text().starts_with(expected),
            "misaligned ({link:?}): {:?}",
            outcome.stderr_text()
        );
        let mut command = Command::new(&exe);
        command.arg("misaligned").env("HAKMEM_ON_ERROR", "warn");
        let outcome = run(command, link.preload(), LIMIT);
        outcome.assert_success(&format!("misaligned with HAKMEM_ON_ERROR=warn ({link:?})"));
        assert_eq!(outcome.stdout_text(), "returned\n");
        assert!(outcome.stderr_text().starts_with(expected));
    }
}

#[test]
fn preload_probe_sees_hakmem_only_when_preloaded() {
    let exe = compile_c("preload_probe.c", Link::Preload, &[]);
    let plain = run(Command::new(&exe), false, LIMIT);
    plain.assert_success("preload_probe without LD_PRELOAD");
    assert_eq!(plain.stdout_text(), "no hakmem\n");
    let preloaded = run(Command::new(&exe), true, LIMIT);
    preloaded.assert_success("preload_probe with LD_PRELOAD");
    assert_eq!(
        preloaded.stdout_text(),
        concat!("hakmem ", env!("CARGO_PKG_VERSION"), " owns-malloc=1 owns-strdup=1\n")
    );
}

#[test]
fn shared_library_exports_exactly_the_allocator_api() {
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&libs().shared)
        .output()
        .expect("run nm (binutils)");
    assert!(nm.status.success(), "nm -D failed");
    let text = String::from_utf8_lossy(&nm.stdout);
    let exported: BTreeSet<&str> = text.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    let expected: BTreeSet<&str> = EXPORTS.into_iter().collect();
    if cfg!(debug_assertions) {
        // Unoptimised builds link std for unwinding and may export more.
        assert!(
            exported.is_superset(&expected),
            "missing: {:?}",
            expected.difference(&exported)
        );
    } else {
        assert_eq!(exported, expected);
    }
}

/// hakmem-core reaches its thread heap with initial-exec TLS (two `mov`s),
/// so the release library never calls `__tls_get_addr` and is marked
/// `STATIC_TLS`. (Debug builds link std, whose thread-locals may use it.)
#[test]
fn shared_library_uses_initial_exec_tls_only() {
    if cfg!(debug_assertions) {
        eprintln!("skipped: checked on release builds only");
        return;
    }
    let objdump = Command::new("objdump")
        .arg("-d")
        .arg(&libs().shared)
        .output()
        .expect("run objdump");
    assert!(objdump.status.success(), "objdump failed");
    let text = String::from_utf8_lossy(&objdump.stdout);
    let calls: Vec<&str> = text.lines().filter(|l| l.contains("__tls_get_addr")).collect();
    assert!(
        calls.is_empty(),
        "__tls_get_addr in libhakmem.so:\n{}",
        calls.join("\n")
    );

    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(&libs().shared)
        .output()
        .expect("run readelf");
    let dynamic = String::from_utf8_lossy(&readelf.stdout);
    assert!(
        dynamic.contains("STATIC_TLS"),
        "libhakmem.so is not marked STATIC_TLS:\n{dynamic}"
    );
}

/// libhakmem.so is linked against the C library: it needs `libc.so.6`,
/// and every C symbol it takes from it is versioned, none left to be
/// looked up by bare name. `atexit` and `pthread_atfork` are not exported
/// by glibc at all (they live in `libc_nonshared.a`): built without `-lc`
/// (the `libc` crate's `std` feature turned on by another package of the
/// same build), the library failed at its first allocation with "symbol
/// lookup error: undefined symbol: atexit".
#[test]
fn shared_library_links_the_c_library() {
    for lib in [&libs().shared, &secure_libs().shared] {
        let readelf = Command::new("readelf")
            .arg("-d")
            .arg(lib)
            .output()
            .expect("run readelf");
        let dynamic = String::from_utf8_lossy(&readelf.stdout);
        assert!(
            dynamic.contains("Shared library: [libc.so.6]"),
            "{} does not need libc.so.6:\n{dynamic}",
            lib.display()
        );
        let nm = Command::new("nm")
            .args(["-D", "--undefined-only"])
            .arg(lib)
            .output()
            .expect("run nm");
        let undefined = String::from_utf8_lossy(&nm.stdout);
        let bare: Vec<&str> = undefined
            .lines()
            // Weak references (`w`, `v`: the C++ runtime's, optional) may
            // stay unresolved.
            .filter(|l| !l.contains('@') && !matches!(l.split_whitespace().next(), Some("w" | "v")))
            .collect();
        assert!(
            bare.is_empty(),
            "{}: C symbols without a version:\n{}",
            lib.display(),
            bare.join("\n")
        );
    }
}

/// The tests build the C libraries as their package alone with
/// `support::WORKSPACE_FEATURES` (`support::build_libs`), standing in for
/// a build of the whole workspace (the README's `cargo build --release`),
/// which unifies features across its packages. The two must enable the
/// same features on every package the library is built from; when another
/// package of the workspace turns on one more, this fails and names it.
#[test]
fn workspace_features_are_the_tested_ones() {
    // `cargo tree` lines: "name version [(path)] feature,feature [(*)]".
    let tree = |args: &[&str]| -> BTreeSet<String> {
        let output = Command::new(env!("CARGO"))
            .args(["tree", "--quiet", "-e", "normal", "--prefix", "none"])
            .args(["-f", "{p} {f}", "--manifest-path"])
            .arg(support::workspace_root().join("Cargo.toml"))
            .args(args)
            .output()
            .expect("run cargo tree");
        assert!(
            output.status.success(),
            "cargo tree {args:?}:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| l.trim_end_matches(" (*)").trim_end().to_string())
            .collect()
    };
    let workspace = tree(&["--workspace"]);
    for package in ["hakmem-ffi", "hakmem-ffi-secure"] {
        let tested = tree(&["-p", package, "--features", support::WORKSPACE_FEATURES]);
        let name = |line: &String| line.split(' ').next().unwrap_or_default().to_string();
        let names: BTreeSet<String> = tested.iter().map(name).collect();
        let built: BTreeSet<String> = workspace.iter().filter(|l| names.contains(&name(l))).cloned().collect();
        assert!(!tested.is_empty(), "cargo tree listed nothing for {package}");
        assert_eq!(
            tested, built,
            "{package}: the features the tests build with (left) are not a workspace build's (right)"
        );
    }
}

/// Issue 22, hole 3: libhakmem.so opened with `dlopen`, used by threads,
/// closed with `dlclose` while they live; their exit runs hakmem's
/// thread-exit hook, which must still be mapped (the library is linked
/// with `-z nodelete`; without it the program crashed at the exits).
#[test]
fn threads_exit_after_libhakmem_is_closed() {
    let readelf = Command::new("readelf")
        .arg("-d")
        .arg(&libs().shared)
        .output()
        .expect("run readelf");
    let dynamic = String::from_utf8_lossy(&readelf.stdout);
    assert!(dynamic.contains("NODELETE"), "libhakmem.so is not NODELETE:\n{dynamic}");
    let exe = compile_c("dlclose.c", Link::Preload, &[]);
    let mut command = Command::new(&exe);
    command.arg(&libs().shared);
    let outcome = run(command, false, LIMIT);
    outcome.assert_success("dlclose.c");
    assert_eq!(outcome.stdout_text(), "exited 4\n");
}

#[test]
fn address_space_exhaustion_gives_null_and_enomem() {
    for link in [Link::Preload, Link::Archive] {
        let exe = compile_c("rlimit.c", link, &[]);
        let outcome = run(Command::new(&exe), link.preload(), LIMIT);
        outcome.assert_success(&format!("rlimit.c ({link:?})"));
        assert_eq!(outcome.stdout_text(), "ok\n", "{link:?}");
    }
}

/// The number after `name=` on hakmem's statistics lines.
fn stat(report: &str, name: &str) -> usize {
    let key = format!(" {name}=");
    let at = report.find(&key).unwrap_or_else(|| panic!("no {name} in:\n{report}")) + key.len();
    let digits: String = report[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

/// 5 000 threads one after another, each leaving half of its 100 blocks
/// (16 B to 5 KiB) behind for good (docs/BENCHMARKS.md, "Threads that
/// each leave a few blocks behind"). Before, each new thread reclaimed up
/// to 64 abandoned segments it had no use for, mapped a fresh one besides
/// and exited with too many to be retired: 3 840 segments for 590 MiB
/// left; and a purge pass over the whole abandoned list ran at nearly
/// every thread exit (2 700 passes in a second, without the passes' gap).
#[test]
fn threads_that_each_leave_blocks_behind_share_segments_and_purge_passes() {
    let exe = compile_c("leftover_threads.c", Link::Preload, &[]);
    let mut command = Command::new(&exe);
    command
        .env("HAKMEM_STATS", "1")
        .env_remove("HAKMEM_PURGE_DELAY")
        .env_remove("HAKMEM_POLICY");
    let outcome = run(command, true, LIMIT);
    outcome.assert_success("leftover_threads.c");
    let out = outcome.stdout_text();
    let mut words = out.split_whitespace();
    assert_eq!(words.next(), Some("left"), "{out}");
    let left: usize = words.next().unwrap().parse().unwrap();
    assert_eq!(words.next(), Some("ms"), "{out}");
    let ms: usize = words.next().unwrap().parse().unwrap();
    let report = outcome.stderr_text();
    let segments = stat(&report, "segments_mapped");
    let floor = left / (2 << 20);
    assert!(
        segments <= 3 * floor + 8,
        "{segments} segments mapped for {} MiB left (at least {floor} needed)",
        left >> 20
    );
    // At most one pass per 25 ms with the default policy (a delay of
    // 50 ms or more, half of it the gap); a few more at exit.
    let passes = stat(&report, "purge_passes");
    assert!(passes <= ms / 25 + 4, "{passes} purge passes in {ms} ms");
}

/// The same program under the hardened library, whose segments are
/// mappings split by guard pages: a segment per thread ran it out of the
/// kernel's mapping records (`ENOMEM` from `malloc` at about 400 MiB
/// left, where a single thread gets 1.2 GiB); segments shared as above,
/// it runs to the end.
#[test]
fn threads_that_each_leave_blocks_behind_do_not_run_the_secure_library_out_of_mappings() {
    let exe = compile_c("leftover_threads.c", Link::Preload, &[]);
    let mut command = Command::new(&exe);
    command.env_remove("HAKMEM_PURGE_DELAY").env_remove("HAKMEM_POLICY");
    let outcome = support::run_preloading(command, Some(&secure_libs().shared), LIMIT);
    outcome.assert_success("leftover_threads.c under libhakmem_secure.so");
    assert!(outcome.stdout_text().starts_with("left "), "{}", outcome.stdout_text());
}
