//! The allocators the tool compares, by name.
//!
//! In the default (Rust) mode each is a `GlobalAlloc` value linked into this
//! binary and `run` monomorphises the workload kernel for it. In `--preload`
//! mode each is a shared library `LD_PRELOAD`ed into the C benchmark, except
//! `system` (glibc malloc, no preload). `tcmalloc` exists only in that mode:
//! there is no Rust binding in the workspace.

use crate::workloads::{self, Outcome, Params};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocator {
    Hakmem,
    System,
    Mimalloc,
    Jemalloc,
    Tcmalloc,
}

/// The default comparison, in the order the runs interleave and rows print.
pub const RUST_DEFAULT: &[Allocator] = &[
    Allocator::Hakmem,
    Allocator::System,
    Allocator::Mimalloc,
    Allocator::Jemalloc,
];
pub const PRELOAD_DEFAULT: &[Allocator] = &[
    Allocator::Hakmem,
    Allocator::System,
    Allocator::Mimalloc,
    Allocator::Jemalloc,
    Allocator::Tcmalloc,
];

impl Allocator {
    pub const ALL: &'static [Allocator] = PRELOAD_DEFAULT;

    pub fn name(self) -> &'static str {
        match self {
            Allocator::Hakmem => "hakmem",
            Allocator::System => "system",
            Allocator::Mimalloc => "mimalloc",
            Allocator::Jemalloc => "jemalloc",
            Allocator::Tcmalloc => "tcmalloc",
        }
    }

    /// Parses a name; `glibc` is accepted for `system`.
    pub fn from_name(name: &str) -> Option<Allocator> {
        match name {
            "glibc" => Some(Allocator::System),
            _ => Allocator::ALL.iter().copied().find(|a| a.name() == name),
        }
    }

    /// Whether this binary links the allocator (so it can run without
    /// `--preload`).
    pub fn is_linked(self) -> bool {
        self != Allocator::Tcmalloc
    }

    /// The Debian library `--preload` loads, if any (`system` loads none;
    /// hakmem's comes from the build tree, see `preload`).
    pub fn system_library(self) -> Option<&'static str> {
        match self {
            Allocator::Mimalloc => Some("libmimalloc.so.2"),
            Allocator::Jemalloc => Some("libjemalloc.so.2"),
            Allocator::Tcmalloc => Some("libtcmalloc_minimal.so.4"),
            Allocator::Hakmem | Allocator::System => None,
        }
    }

    /// Runs `params` against this allocator in this process, or `None` for
    /// an allocator this binary does not link.
    pub fn run(self, params: &Params) -> Option<Outcome> {
        match self {
            Allocator::Hakmem => Some(workloads::run(&hakmem_core::Hakmem, params)),
            Allocator::System => Some(workloads::run(&std::alloc::System, params)),
            Allocator::Mimalloc => Some(workloads::run(&mimalloc::MiMalloc, params)),
            Allocator::Jemalloc => Some(workloads::run(&tikv_jemallocator::Jemalloc, params)),
            Allocator::Tcmalloc => None,
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
    fn names_round_trip_and_glibc_means_system() {
        for &a in Allocator::ALL {
            assert_eq!(Allocator::from_name(a.name()), Some(a));
        }
        assert_eq!(Allocator::from_name("glibc"), Some(Allocator::System));
        assert_eq!(Allocator::from_name("ptmalloc"), None);
    }

    #[test]
    fn every_linked_allocator_runs_a_tiny_workload() {
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
            let outcome = a.run(&p).expect("linked");
            assert!(outcome.ops >= 2 * p.iters, "{a}");
            assert_eq!(outcome.errors, 0, "{a}");
        }
        assert!(Allocator::Tcmalloc.run(&p).is_none());
    }
}
