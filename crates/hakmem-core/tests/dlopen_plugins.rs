//! Rust plugins (issue 16): a cdylib with `Hakmem` as its global allocator
//! (tests/plugin/lib.rs), copied under 100 names and loaded with `dlopen`
//! by a C host (tests/plugin/host.c), each copy allocating and freeing from
//! several threads — from threads it starts itself, and from host threads
//! it never saw before.
//!
//! With the `dlopen-tls` feature every copy loads. Without it (x86-64's
//! default binding, initial-exec TLS) each copy takes a piece of glibc's
//! static-TLS surplus, and the loads fail after a dozen or so with
//! "cannot allocate memory in static TLS block": the second test checks
//! that the first one tests something. The plugin is built by a nested
//! `cargo build` (its own workspace, so the feature does not reach other
//! builds of hakmem-core) under the target directory, with the RUSTFLAGS
//! of this run (the portable binding's run builds a portable plugin).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PLUGINS: usize = 100;
const HOST_THREADS: &str = "4";

fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/plugin")
}

/// Where the nested builds and the copies go: beside this run's `tmp`
/// (so the runs of scripts/test that share a target directory share the
/// plugin builds too).
fn work_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("../plugin")
}

/// Builds the plugin (with `dlopen-tls` when `dlopen_tls`) and returns the
/// path of the library.
fn build_plugin(dlopen_tls: bool) -> PathBuf {
    let variant = if dlopen_tls { "dlopen-tls" } else { "default" };
    let target = work_dir().join(variant);
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(plugin_dir())
        .args(["build", "--release", "--target-dir"])
        .arg(&target);
    if dlopen_tls {
        cargo.args(["--features", "dlopen-tls"]);
    }
    let out = cargo.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "building the plugin failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release/libhakmem_plugin.so")
}

/// Compiles the C host as `host-<name>`: one per test, as the tests run
/// in parallel (with one shared path, one test could run the host while
/// the other's `cc` was writing it: "Permission denied", seen in CI).
fn build_host(name: &str) -> PathBuf {
    let host = work_dir().join(format!("host-{name}"));
    std::fs::create_dir_all(work_dir()).unwrap();
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&host)
        .arg(plugin_dir().join("host.c"))
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "compiling host.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    host
}

/// Copies `plugin` to `plugin_0.so` .. `plugin_99.so` in a fresh directory
/// and runs the host on them.
fn load_copies(plugin: &Path, name: &str) -> Output {
    let host = build_host(name);
    let dir = work_dir().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..PLUGINS {
        std::fs::copy(plugin, dir.join(format!("plugin_{i}.so"))).unwrap();
    }
    Command::new(host)
        .arg(&dir)
        .arg(PLUGINS.to_string())
        .arg(HOST_THREADS)
        // glibc's default static-TLS surplus, whatever the environment says.
        .env_remove("GLIBC_TUNABLES")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("the host runs")
}

#[test]
fn a_hundred_plugins_with_dlopen_tls_load_and_allocate_from_several_threads() {
    if !common::have_tool("cc", "dlopen_plugins") {
        return;
    }
    let out = load_copies(&build_plugin(true), "copies-dlopen-tls");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "host failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("loaded {PLUGINS}\n")), "{stdout}");
    assert!(stdout.contains("ran "), "{stdout}");
}

/// Issue 22, hole 3: the plugin unloaded (`dlclose`) while threads that
/// allocated through it live on; their exit runs hakmem's thread-exit hook
/// (a pthread-key destructor) — which must still be there: hakmem keeps
/// the object that holds it loaded (`RTLD_NODELETE`). Before, the exit
/// jumped into the unmapped library (SIGSEGV).
fn threads_exit_after_the_plugin_is_unloaded(dlopen_tls: bool) {
    if !common::have_tool("cc", "dlopen_plugins") {
        return;
    }
    let plugin = build_plugin(dlopen_tls);
    let name = if dlopen_tls {
        "unload-dlopen-tls"
    } else {
        "unload-default"
    };
    let out = Command::new(build_host(name))
        .arg("unload")
        .arg(&plugin)
        .arg(HOST_THREADS)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("the host runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(&format!("exited {HOST_THREADS}\n")),
        "host failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn threads_exit_after_the_plugin_is_unloaded_with_dlopen_tls() {
    threads_exit_after_the_plugin_is_unloaded(true);
}

#[test]
fn threads_exit_after_the_plugin_is_unloaded_without_dlopen_tls() {
    threads_exit_after_the_plugin_is_unloaded(false);
}

/// Issue 22, hole 7: with `dlopen-tls` and the plugin's TLS placed
/// dynamically, a thread's first allocation goes through glibc's
/// `_dl_tlsdesc_dynamic`, which may call `malloc` without saving vector
/// registers (glibc before 2.40); floating-point values live across the
/// allocation must survive it (tests/plugin/tlsdesc_host.c overwrites
/// every vector register in its `malloc`).
#[test]
fn floating_point_values_survive_a_first_allocation_through_a_tls_descriptor() {
    if cfg!(any(hakmem_portable, not(target_arch = "x86_64"))) {
        return; // no TLS descriptor: the portable binding uses a thread key
    }
    if !common::have_tool("cc", "dlopen_plugins") {
        return;
    }
    let plugin = build_plugin(true);
    let host = work_dir().join("tlsdesc_host");
    std::fs::create_dir_all(work_dir()).unwrap();
    let cc = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&host)
        .arg(plugin_dir().join("tlsdesc_host.c"))
        .args(["-ldl", "-lpthread"])
        .output()
        .expect("cc runs");
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = Command::new(&host)
        .arg(&plugin)
        .env("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=0")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("the host runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("same"),
        "host ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn without_dlopen_tls_the_plugins_run_out_of_static_tls() {
    if cfg!(any(hakmem_portable, not(target_arch = "x86_64"))) {
        // The portable binding keeps the heap in a thread key: no static
        // TLS to run out of, with or without the feature.
        return;
    }
    if !common::have_tool("cc", "dlopen_plugins") {
        return;
    }
    let out = load_copies(&build_plugin(false), "copies-default");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "the host stopped at a dlopen: {stderr}");
    assert!(
        stderr.contains("cannot allocate memory in static TLS block"),
        "{stderr}"
    );
}
