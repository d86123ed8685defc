//! **Layer: small, medium and large blocks** — everything that lives in a
//! page of a segment: the size classes (`class`), a page's metadata, lists
//! and states (`page`), the heap's class queues and where a page belongs
//! (`page_queue`), the allocation fast paths and their slow-path entries
//! (`alloc`), the slow path's search for a page with a free block and the
//! way a page's span goes back (`refill`), and every free (`free`).
//!
//! Calls down: `segment` (a span from the heap's segments, the segment
//! map, the segment of a pointer; the purge schedule of a freed span),
//! `huge` (the free of a huge block, which `free` recognises), `os`,
//! `arch` (the free fast path's owner test), and the hooks of `check`
//! (the secure build's byte checks, valgrind's requests), which compile to
//! nothing in the default build.
//!
//! Calls up, into `thread`, and why: the fast paths run on a `Heap`
//! (`thread::heap`), the thread's own, which they read from its slot; the
//! allocation slow path asks `thread::abandon` for a segment (reclaiming
//! exited threads' segments first) and, for a thread that has exited, for
//! a heap of its own for one call; `free`'s slow path hands a block of
//! another thread's page to `thread::remote`, and takes over an abandoned
//! segment it frees into (unless its heap owns many segments already).
//! The heap is the unit these paths work for, and the thread layer is what
//! decides which heap and what happens at its
//! end; the calls back are the points where a page's owner is needed.
//!
//! (`thread` calls down into this layer in turn: settling a reclaimed or
//! collected page, releasing a span.)

pub(crate) mod alloc;
pub(crate) mod class;
pub(crate) mod free;
pub(crate) mod page;
pub(crate) mod page_queue;
pub(crate) mod refill;
