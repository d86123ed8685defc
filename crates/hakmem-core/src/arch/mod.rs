//! The processor-specific code: how a thread finds its heap (a
//! thread-local slot) and the two tests of the free fast paths that are
//! one compare against memory. One module per processor with a specialised
//! implementation — today `x86_64.rs` — and `portable.rs`, with no
//! assembly, for every other target.
//!
//! The portable implementation is selected automatically where there is no
//! specialised one; `--cfg hakmem_portable` forces it on x86-64 too, and
//! scripts/test runs the whole core suite that way, so it cannot rot. The
//! loom build uses it as well (its atomics are loom's; the thread's slot
//! is then thread.rs's loom thread-local).
//!
//! Each implementation provides:
//!
//! * `thread_heap()`: the calling thread's heap — the static empty heap
//!   until `set_thread_heap` gives it one;
//! * `set_thread_heap(heap)`;
//! * `owned_by(page, heap)`: `page.local_owner == heap` (a Relaxed load);
//! * `map_entry_is_set(map, index)`: entry `index` of the segment map is
//!   not 0 (an Acquire load);
//! * `fork_lock`, `fork_unlock`: whatever lock the binding holds while it
//!   sets a thread's slot, taken across `fork` (thread/mod.rs);
//!
//! and, with the `valgrind` feature on x86-64 whatever the binding,
//! `valgrind::client_request` (the request sequence check/valgrind.rs
//! uses). All of hakmem's assembly is here.
//!
//! **Layer: the processor**, at the bottom with `os`: it calls only `os`
//! and reads the types it tests (`small::page::Page`, `thread::heap::Heap`).

#[cfg(all(target_arch = "x86_64", not(any(hakmem_portable, hakmem_loom))))]
#[path = "x86_64.rs"]
mod imp;

#[cfg(not(all(target_arch = "x86_64", not(any(hakmem_portable, hakmem_loom)))))]
#[path = "portable.rs"]
mod imp;

pub(crate) use imp::*;

#[cfg(all(feature = "valgrind", target_arch = "x86_64"))]
pub(crate) mod valgrind;
