//! The one place hakmem-core takes its atomics from.
//!
//! Normally these are `core::sync::atomic`; with `--cfg hakmem_loom` they are
//! loom's, so the lock-free protocols (remote free, abandon/reclaim, the
//! global lists) can be model-checked with the same code. Nothing else in the
//! crate names `core::sync::atomic`.
//!
//! The segment map is the one exception: it is a static array read on every
//! checked `free`, far too large for loom to model, and it is written only when
//! a segment is mapped or unmapped. It uses [`MapEntry`], always a core atomic.

#[cfg(not(hakmem_loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(hakmem_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

/// An entry of the segment map (never modelled by loom, see the module doc).
#[cfg(not(hakmem_loom))]
pub(crate) type MapEntry = core::sync::atomic::AtomicU8;

/// Spin-wait hint.
#[cfg(not(hakmem_loom))]
#[inline]
pub(crate) fn spin_hint() {
    core::hint::spin_loop();
}

/// A minimal test-and-test-and-set lock for the cold global lists (segment
/// cache, abandoned segments, heap pool). Held for a few instructions only,
/// never across a system call, and taken by `fork`'s prepare handler so a
/// child never inherits it locked.
#[cfg(not(hakmem_loom))]
pub(crate) struct SpinLock {
    locked: AtomicBool,
}

#[cfg(not(hakmem_loom))]
impl SpinLock {
    pub(crate) const fn new() -> Self {
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

/// Under loom the lock is loom's mutex (a spin loop makes the model
/// explore the spinner instead of the holder); same lock/unlock API.
#[cfg(hakmem_loom)]
pub(crate) struct SpinLock {
    mutex: loom::sync::Mutex<()>,
    guard: core::cell::UnsafeCell<Option<loom::sync::MutexGuard<'static, ()>>>,
}

#[cfg(hakmem_loom)]
impl SpinLock {
    pub(crate) fn new() -> Self {
        Self {
            mutex: loom::sync::Mutex::new(()),
            guard: core::cell::UnsafeCell::new(None),
        }
    }

    pub(crate) fn lock(&self) {
        let guard = self.mutex.lock().unwrap();
        // SAFETY: the guard is dropped in `unlock`, before `self` can be
        // dropped (a lock is never dropped while held); only the holder
        // touches `guard`.
        unsafe {
            *self.guard.get() = Some(core::mem::transmute::<
                loom::sync::MutexGuard<'_, ()>,
                loom::sync::MutexGuard<'static, ()>,
            >(guard));
        }
    }

    pub(crate) fn unlock(&self) {
        // SAFETY: only the holder calls unlock, and it owns `guard`.
        drop(unsafe { (*self.guard.get()).take() });
    }
}
