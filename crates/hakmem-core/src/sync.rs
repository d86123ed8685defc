//! The one place hakmem-core takes its atomics from.
//!
//! Normally these are `core::sync::atomic`; with `--cfg hakmem_loom` they are
//! loom's, so the lock-free protocols (remote free, abandon/reclaim, the
//! global lists) can be model-checked with the same code. Nothing else in the
//! crate names `core::sync::atomic`.
//!
//! The segment map is the one exception: it is a static array read on every
//! checked `free`, far too large for loom to model, and it is written only when
//! a segment is mapped or unmapped. It uses [`MapWord`], always a core atomic.

#[cfg(not(hakmem_loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(hakmem_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// A word of the segment map (never modelled by loom, see the module doc).
pub(crate) type MapWord = core::sync::atomic::AtomicU64;

/// Spin-wait hint; under loom a yield so the model can schedule the holder.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(not(hakmem_loom))]
    core::hint::spin_loop();
    #[cfg(hakmem_loom)]
    loom::thread::yield_now();
}

/// A minimal test-and-test-and-set lock for the cold global lists (segment
/// cache, abandoned segments, heap pool). Held for a few instructions only,
/// never across a system call, and taken by `fork`'s prepare handler so a
/// child never inherits it locked.
pub(crate) struct SpinLock {
    locked: AtomicBool,
}

impl SpinLock {
    #[cfg(not(hakmem_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            locked: AtomicBool::new(false),
        }
    }
    #[cfg(hakmem_loom)]
    pub(crate) fn new() -> Self {
        Self {
            locked: AtomicBool::new(false),
        }
    }

    pub(crate) fn lock(&self) {
        loop {
            // Acquire: pairs with the Release store in `unlock`, so the
            // previous holder's writes to the protected list are visible.
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
            while self.locked.load(Ordering::Relaxed) {
                spin_hint();
            }
        }
    }

    pub(crate) fn unlock(&self) {
        // Release: publishes this holder's writes to the next `lock`.
        self.locked.store(false, Ordering::Release);
    }
}
