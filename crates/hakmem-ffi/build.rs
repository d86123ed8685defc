//! Two jobs, both writing only into `OUT_DIR`:
//!
//! - Generates the C header for the `hakmem_*` extensions into
//!   `$OUT_DIR/hakmem.h` with cbindgen (pinned in the workspace). The copy
//!   users include is `include/hakmem.h` at the workspace root, checked in;
//!   `tests/header.rs` fails when it differs from this output and rewrites
//!   it when run with `HAKMEM_BLESS_HEADER=1`.
//! - Compiles `src/new_handler.cpp` (the new-handler loop and
//!   `std::bad_alloc` of the C++ operators, `src/cxx.rs`) with the system
//!   C++ compiler into a static library that rustc bundles into both
//!   `libhakmem.so` and `libhakmem.a`. It is *not* linked with libstdc++:
//!   its references to the C++ runtime are weak (see the file), so C
//!   programs using libhakmem do not need one.
//!
//! - Keeps the linker's bounds of hakmem-core's `hakmem_text` section
//!   (`__start_hakmem_text`, `__stop_hakmem_text`: the heap profiler leaves
//!   the allocator's own frames out of its stacks by them) hidden, so
//!   that the library exports only its API.
//!
//! - Links `libhakmem.so` with `-z nodelete`: a program that opens it with
//!   `dlopen` and closes it while threads that allocated through it live
//!   on must not unmap it, as their exit runs hakmem's thread-exit hook
//!   (issue 22; hakmem-core also pins itself at run time, for Rust
//!   plugins whose link flags are not ours).
//!
//! `hakmem-ffi-secure` runs this script too (its `build` key): it compiles
//! the same sources into `libhakmem_secure`, so every path here is taken
//! from hakmem-ffi's folder, not from the package being built.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    let ffi_dir = ffi_dir();
    println!("cargo:rerun-if-changed={}", ffi_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", ffi_dir.join("cbindgen.toml").display());
    compile_new_handler(&ffi_dir);
    generate_header(&ffi_dir);
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    // The bounds of hakmem-core's `hakmem_text` section (the heap
    // profiler leaves the allocator's own frames out of its stacks with
    // them) stay inside the library rather than exported (GNU ld 2.36 or
    // later, lld 13 or later: Debian 12 has 2.40, Ubuntu 24.04 2.42).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,start-stop-visibility=hidden");
}

/// hakmem-ffi's folder: the package being built, or its sibling when the
/// package is `hakmem-ffi-secure`.
fn ffi_dir() -> PathBuf {
    let crate_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    if crate_dir.join("src/lib.rs").is_file() {
        crate_dir
    } else {
        crate_dir.join("../hakmem-ffi")
    }
}

fn compile_new_handler(ffi_dir: &Path) {
    cc::Build::new()
        .cpp(true)
        // No `-lstdc++`: the point is not to depend on it (cc adds it to
        // C++ builds by default).
        .cpp_link_stdlib(None)
        .file(ffi_dir.join("src/new_handler.cpp"))
        .std("c++17")
        // Unwind tables and catch clauses: exceptions pass through and are
        // caught in this code.
        .flag("-fexceptions")
        .flag("-fno-rtti")
        // hakmem's own helpers: never exported from libhakmem.so.
        .flag("-fvisibility=hidden")
        // Shown as cargo warnings, not errors: another compiler version
        // must not break the build.
        .warnings(true)
        .extra_warnings(true)
        .compile("hakmem_new_handler");
}

fn generate_header(crate_dir: &Path) {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml is valid");
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header")
        .write_to_file(out_dir.join("hakmem.h"));
}
