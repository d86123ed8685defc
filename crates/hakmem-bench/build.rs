//! Builds `libmimalloc2.so` and `libmimalloc3.so` into `$OUT_DIR`: mimalloc
//! v2 and v3 as shared libraries that replace malloc/free, for `--preload`
//! (as `LD_PRELOAD`) and for the `mimalloc2` GlobalAlloc comparator (through
//! `dlopen`). `src/dlmimalloc.rs` embeds both files in the binary.
//!
//! Where the sources come from: the `libmimalloc-sys` crate (already the
//! `mimalloc` crate's dependency) ships both trees, `c_src/mimalloc/v2` and
//! `c_src/mimalloc/v3`. It declares `links = "mimalloc"` and prints
//! `cargo:INCLUDE_DIR=<its c_src/mimalloc/vN/include>`, which cargo hands to
//! the build script of every package depending on it directly as
//! `DEP_MIMALLOC_INCLUDE_DIR` (hence the direct dependency in Cargo.toml).
//! Two levels up from that folder is `c_src/mimalloc`, holding both versions.
//! This finds exactly the sources of the `libmimalloc-sys` in Cargo.lock,
//! wherever cargo unpacked it (registry, vendored directory, git checkout),
//! with nothing fetched and nothing copied into this repository; guessing a
//! path under `~/.cargo/registry` would not.
//!
//! Flags follow mimalloc's own CMake release build of the shared library
//! (`cmake -DCMAKE_BUILD_TYPE=Release`, `MI_OVERRIDE=ON`): `-O3 -DNDEBUG`,
//! `MI_BUILD_RELEASE`, `MI_SHARED_LIB(_EXPORT)`, `MI_MALLOC_OVERRIDE` (malloc,
//! free, calloc, realloc, posix_memalign, operator new/delete... defined by
//! mimalloc), `-fvisibility=hidden`, `-ftls-model=initial-exec`,
//! `-fno-builtin-malloc`, linked with `-lpthread`. The one difference: CMake
//! compiles the files one by one, this compiles `src/static.c`, mimalloc's
//! single-unit bundle of the same files (what `libmimalloc-sys` compiles too).
//! These comparators are always built optimised, whatever the cargo profile.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// The libraries built: file name and folder under `c_src/mimalloc`.
const LIBRARIES: [(&str, &str); 2] = [("libmimalloc2.so", "v2"), ("libmimalloc3.so", "v3")];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=DEP_MIMALLOC_INCLUDE_DIR");
    let include = env::var_os("DEP_MIMALLOC_INCLUDE_DIR").expect(
        "DEP_MIMALLOC_INCLUDE_DIR is not set: hakmem-bench must depend on libmimalloc-sys directly \
         (it exports its include folder through `links = \"mimalloc\"`)",
    );
    let sources = Path::new(&include)
        .parent()
        .and_then(Path::parent)
        .expect("DEP_MIMALLOC_INCLUDE_DIR is <root>/c_src/mimalloc/<version>/include")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // Both compile at once (a few seconds each); cc's Tool carries the
    // target's flags (-m64, -fPIC) and honours CC and CFLAGS.
    let compiler = cc::Build::new().opt_level(3).debug(false).get_compiler();
    let builds: Vec<(PathBuf, Child)> = LIBRARIES
        .iter()
        .map(|(name, version)| {
            let tree = sources.join(version);
            let static_c = tree.join("src/static.c");
            assert!(
                static_c.is_file(),
                "{} is missing: libmimalloc-sys no longer ships mimalloc {version}",
                static_c.display()
            );
            let output = out_dir.join(name);
            let mut command: Command = compiler.to_command();
            command
                .args([
                    "-O3",
                    "-DNDEBUG",
                    "-DMI_BUILD_RELEASE",
                    "-DMI_CMAKE_BUILD_TYPE=release",
                    "-DMI_SHARED_LIB",
                    "-DMI_SHARED_LIB_EXPORT",
                    "-DMI_MALLOC_OVERRIDE",
                    "-fPIC",
                    "-fvisibility=hidden",
                    "-ftls-model=initial-exec",
                    "-fno-builtin-malloc",
                    "-Wno-unknown-pragmas",
                    "-shared",
                ])
                .arg(format!("-Wl,-soname,{name}"))
                .arg("-I")
                .arg(tree.join("include"))
                .arg("-I")
                .arg(tree.join("src"))
                .arg("-o")
                .arg(&output)
                .arg(&static_c)
                .arg("-lpthread");
            let child = command
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run the C compiler for {name}: {e}: {command:?}"));
            (output, child)
        })
        .collect();
    for (output, mut child) in builds {
        let status = child.wait().expect("wait for the C compiler");
        assert!(status.success(), "building {} failed ({status})", output.display());
    }
}
