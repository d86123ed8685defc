//! The small-block path.

pub(crate) mod alloc;
pub(crate) mod class;
pub(crate) mod free;
pub(crate) mod page;
pub(crate) mod page_queue;
pub(crate) mod refill;
