//! Checks.

pub(crate) mod secure;
pub(crate) mod valgrind;
