//! The allocators the tool compares, by name.
//!
//! In the default (Rust) mode each is a `GlobalAlloc` value, and `run`
//! monomorphises the workload kernel for it: hakmem, `System` (glibc),
//! mimalloc v3 (the `mimalloc` crate, linked), mimalloc v2 (the library
//! `build.rs` compiles, through `dlopen`: see `dlmimalloc`) and jemalloc.
//! In `--preload` mode each is a shared library `LD_PRELOAD`ed into the C
//! benchmark, except `system` (glibc malloc, no preload): hakmem's, the two
//! mimalloc builds, and Debian's mimalloc 2.0.9, jemalloc and tcmalloc, which
//! exist only in that mode (no Rust binding in the workspace), and
//! `hakmem-secure`, the hardened `libhakmem_secure.so` (`--preload` only,
//! and only when asked for: `--allocators hakmem,hakmem-secure`).
//!
//! "mimalloc" in a goal means the faster of `mimalloc2` and `mimalloc3` on
//! each workload (`MIMALLOC`); `--allocators mimalloc` selects both, and
//! `report` takes its "vs mimalloc" ratio against the faster.

use crate::dlmimalloc::{DlMimalloc, Version};
use crate::workloads::{self, Outcome, Params};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    Hakmem,
    /// `libhakmem_secure.so` (hakmem-core's `secure` build), `--preload`
    /// only and in no default table.
    HakmemSecure,
    System,
    /// mimalloc v2 built from `libmimalloc-sys`'s sources (`build.rs`).
    Mimalloc2,
    /// mimalloc v3: the `mimalloc` crate in Rust mode, the same sources
    /// built as a shared library under `--preload`.
    Mimalloc3,
    /// Debian's `libmimalloc.so.2` (2.0.9), `--preload` only.
    MimallocDeb,
    Jemalloc,
    Tcmalloc,
}

/// The default comparison, in the order the runs interleave and rows print.
pub const RUST_DEFAULT: &[Allocator] = &[
    Allocator::Hakmem,
    Allocator::System,
    Allocator::Mimalloc2,
    Allocator::Mimalloc3,
    Allocator::Jemalloc,
];
pub const PRELOAD_DEFAULT: &[Allocator] = &[
    Allocator::Hakmem,
    Allocator::System,
    Allocator::Mimalloc2,
    Allocator::Mimalloc3,
    Allocator::MimallocDeb,
    Allocator::Jemalloc,
    Allocator::Tcmalloc,
];

/// What "mimalloc" stands for: in `--allocators`, and as the baseline of
/// the "vs mimalloc" ratio (the faster of these on the workload).
pub const MIMALLOC: &[Allocator] = &[Allocator::Mimalloc2, Allocator::Mimalloc3];

impl Allocator {
    /// Every allocator by name: the `--preload` table's, then those only
    /// run when asked for.
    pub const ALL: &'static [Allocator] = &[
        Allocator::Hakmem,
        Allocator::System,
        Allocator::Mimalloc2,
        Allocator::Mimalloc3,
        Allocator::MimallocDeb,
        Allocator::Jemalloc,
        Allocator::Tcmalloc,
        Allocator::HakmemSecure,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Allocator::Hakmem => "hakmem",
            Allocator::HakmemSecure => "hakmem-secure",
            Allocator::System => "system",
            Allocator::Mimalloc2 => "mimalloc2",
            Allocator::Mimalloc3 => "mimalloc3",
            Allocator::MimallocDeb => "mimalloc-deb",
            Allocator::Jemalloc => "jemalloc",
            Allocator::Tcmalloc => "tcmalloc",
        }
    }

    /// Parses one allocator's name; `glibc` is accepted for `system`.
    pub fn from_name(name: &str) -> Option<Allocator> {
        match name {
            "glibc" => Some(Allocator::System),
            _ => Allocator::ALL.iter().copied().find(|a| a.name() == name),
        }
    }

    /// Parses an item of `--allocators`: a name, or `mimalloc` for both
    /// mimalloc builds (`MIMALLOC`).
    pub fn parse_group(name: &str) -> Option<&'static [Allocator]> {
        if name == "mimalloc" {
            return Some(MIMALLOC);
        }
        let allocator = Allocator::from_name(name)?;
        let index = Allocator::ALL.iter().position(|&a| a == allocator)?;
        Some(std::slice::from_ref(&Allocator::ALL[index]))
    }

    /// Whether this binary can run the allocator in-process through
    /// `GlobalAlloc` (so without `--preload`).
    pub fn runs_in_process(self) -> bool {
        !matches!(
            self,
            Allocator::MimallocDeb | Allocator::Tcmalloc | Allocator::HakmemSecure
        )
    }

    /// The Debian library `--preload` loads and its package, if any
    /// (`system` loads none; hakmem's comes from the build tree and the
    /// mimalloc builds from this binary, see `preload`).
    pub fn system_library(self) -> Option<(&'static str, &'static str)> {
        match self {
            Allocator::MimallocDeb => Some(("libmimalloc.so.2", "libmimalloc2.0")),
            Allocator::Jemalloc => Some(("libjemalloc.so.2", "libjemalloc2")),
            Allocator::Tcmalloc => Some(("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4")),
            Allocator::Hakmem
            | Allocator::HakmemSecure
            | Allocator::System
            | Allocator::Mimalloc2
            | Allocator::Mimalloc3 => None,
        }
    }

    /// The mimalloc build this allocator is, if it is one of ours.
    pub fn mimalloc_build(self) -> Option<Version> {
        match self {
            Allocator::Mimalloc2 => Some(Version::V2),
            Allocator::Mimalloc3 => Some(Version::V3),
            _ => None,
        }
    }

    /// Runs `params` against this allocator in this process. Fails for an
    /// allocator that exists only under `--preload`, or when mimalloc v2's
    /// library cannot be written out or loaded.
    pub fn run(self, params: &Params) -> Result<Outcome, String> {
        match self {
            Allocator::Hakmem => Ok(workloads::run(&hakmem_core::Hakmem, params)),
            Allocator::System => Ok(workloads::run(&std::alloc::System, params)),
            Allocator::Mimalloc2 => {
                let mimalloc2 = DlMimalloc::load(Version::V2)?;
                Ok(workloads::run(&mimalloc2, params))
            }
            Allocator::Mimalloc3 => Ok(workloads::run(&mimalloc::MiMalloc, params)),
            Allocator::Jemalloc => Ok(workloads::run(&tikv_jemallocator::Jemalloc, params)),
            Allocator::MimallocDeb | Allocator::Tcmalloc | Allocator::HakmemSecure => {
                Err(format!("{self} runs only with --preload"))
            }
        }
    }
}

impl fmt::Display for Allocator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::Kernel;

    #[test]
    fn names_round_trip_and_aliases_expand() {
        for &a in Allocator::ALL {
            assert_eq!(Allocator::from_name(a.name()), Some(a));
            assert_eq!(Allocator::parse_group(a.name()), Some(&[a][..]));
        }
        assert_eq!(Allocator::from_name("glibc"), Some(Allocator::System));
        assert_eq!(Allocator::parse_group("glibc"), Some(&[Allocator::System][..]));
        assert_eq!(
            Allocator::parse_group("mimalloc"),
            Some(&[Allocator::Mimalloc2, Allocator::Mimalloc3][..])
        );
        assert_eq!(Allocator::from_name("mimalloc"), None, "a group, not one allocator");
        assert_eq!(Allocator::from_name("mimalloc-deb"), Some(Allocator::MimallocDeb));
        assert_eq!(Allocator::from_name("hakmem-secure"), Some(Allocator::HakmemSecure));
        assert!(
            !PRELOAD_DEFAULT.contains(&Allocator::HakmemSecure),
            "only when asked for"
        );
        assert!(PRELOAD_DEFAULT.iter().all(|a| Allocator::ALL.contains(a)));
        assert_eq!(Allocator::from_name("ptmalloc"), None);
        assert_eq!(Allocator::parse_group("mimalloc4"), None);
    }

    #[test]
    fn both_mimalloc_builds_are_in_both_default_tables() {
        for defaults in [RUST_DEFAULT, PRELOAD_DEFAULT] {
            assert!(MIMALLOC.iter().all(|m| defaults.contains(m)), "{defaults:?}");
        }
        assert!(RUST_DEFAULT.iter().all(|a| a.runs_in_process()));
        assert!(PRELOAD_DEFAULT.contains(&Allocator::MimallocDeb));
    }

    #[test]
    fn the_linked_mimalloc_crate_is_version_3() {
        extern "C" {
            // mimalloc.h: `int mi_version(void)`, in the static library that
            // libmimalloc-sys links into this binary.
            fn mi_version() -> std::ffi::c_int;
        }
        // SAFETY: mi_version takes nothing and only returns a constant.
        let version = unsafe { mi_version() };
        assert_eq!(
            version / 10000,
            3,
            "mimalloc3 is {}",
            crate::dlmimalloc::version_string(version)
        );
    }

    #[test]
    fn every_in_process_allocator_runs_a_tiny_workload() {
        let p = Params {
            kernel: Kernel::Larson,
            min: 16,
            max: 1024,
            ws: 64,
            iters: 2_000,
            seed: 1,
            threads: 2,
        };
        for &a in RUST_DEFAULT {
            let outcome = a.run(&p).unwrap_or_else(|e| panic!("{a}: {e}"));
            assert!(outcome.ops >= 2 * p.iters, "{a}");
            assert_eq!(outcome.errors, 0, "{a}");
        }
        for a in [Allocator::Tcmalloc, Allocator::MimallocDeb, Allocator::HakmemSecure] {
            assert!(a.run(&p).unwrap_err().contains("only with --preload"));
        }
    }

    #[test]
    fn both_mimalloc_builds_run_the_new_workloads_in_process() {
        for (kernel, min, max, ws, iters, threads) in [
            (Kernel::Huge, 64 * 1024, 256 * 1024, 4, 20, 1),
            (Kernel::Churn, 128, 128, 50, 5, 4),
            (Kernel::Rethread, 24, 256 * 1024, 50, 3, 3),
            (Kernel::Pacing, 16, 16 * 1024, 64, 2_000, 2),
        ] {
            let p = Params {
                kernel,
                min,
                max,
                ws,
                iters,
                seed: 1,
                threads,
            };
            for &a in MIMALLOC {
                let outcome = a.run(&p).unwrap_or_else(|e| panic!("{a} {kernel:?}: {e}"));
                assert_eq!(outcome.errors, 0, "{a} {kernel:?}");
                assert!(outcome.ops > 0, "{a} {kernel:?}");
            }
        }
    }
}
