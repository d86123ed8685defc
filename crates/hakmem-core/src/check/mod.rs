//! **Cross-cutting: checks of block contents** — the hardened build's
//! layout constants, fills, canaries and reports, and its zero-sized
//! blocks in a region no one can touch (`secure`), and the
//! valgrind client requests that tell memcheck about blocks (`valgrind`).
//! Both are hooks: every layer that hands out, frees or walks blocks calls
//! them (`small`, `huge`, `thread::local`), and both compile to nothing —
//! constants that make the callers' code vanish, empty functions — in the
//! default build. They call only down: `os` (abort, the page size),
//! `arch::valgrind` (the request sequence), and read the types of `small`
//! (a block's size class) and `thread` (the heap whose pages the secure
//! build checks at exit).

pub(crate) mod secure;
pub(crate) mod valgrind;
#[cfg(feature = "secure")]
pub(crate) mod zero;
