//! The measured side of hakmem-bench, linked into the lean child binary
//! (`src/bin/hakmem-bench-child.rs`) and used by the parent (`src/main.rs`):
//! `workloads` (the kernels, generic over `GlobalAlloc`) with `rng`,
//! `allocators` (names → allocator values), `dlmimalloc` (the mimalloc v2
//! and v3 libraries `build.rs` compiles, and a `GlobalAlloc` over a
//! `dlopen`ed one), `scratch` (the private folder files are written to) and
//! `child` (the child's arguments and its result line).
//!
//! Nothing here draws, parses options or formats tables: what the child
//! links is what it measures with. The library keeps the system allocator as
//! the process's global allocator: the allocators under test are only ever
//! called explicitly by the workloads.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod allocators;
pub mod child;
pub mod dlmimalloc;
pub mod rng;
pub mod scratch;
pub mod workloads;
