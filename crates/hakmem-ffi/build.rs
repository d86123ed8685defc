//! Generates the C header for the `hakmem_*` extensions into
//! `$OUT_DIR/hakmem.h` with cbindgen (pinned in the workspace). The copy
//! users include is `include/hakmem.h` at the workspace root, checked in;
//! `tests/header.rs` fails when it differs from this output and rewrites it
//! when run with `HAKMEM_BLESS_HEADER=1`. The build script never writes
//! outside `OUT_DIR`.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let crate_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml is valid");
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen generates the header")
        .write_to_file(out_dir.join("hakmem.h"));
}
