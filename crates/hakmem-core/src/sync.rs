//! The one place hakmem-core takes its atomics from.
//!
//! Normally these are `core::sync::atomic`; with `--cfg hakmem_loom` they are
//! loom's, so the lock-free protocols (remote free, abandon/reclaim, the
//! global lists) can be model-checked with the same code. Nothing else in the
//! crate names `core::sync::atomic`.
//!
//! Two kinds of atomics are never modelled, and come from [`plain`] in
//! every build: the segment map (a static array read on every checked
//! `free`, far too large for loom, written only when a segment is mapped or
//! unmapped), and process-wide counters, hints and one-time state
//! (statistics, OS call counts, the mapping hint, the configuration's
//! state), and the `secure` build's tables of requested sizes (a slot per
//! block, written by the block's holder). None of them carries a protocol a
//! model checks: each is a relaxed counter or hint, or is published once
//! before any model runs. (The purge deadline is modelled: it carries one
//! Release/Acquire pair, `segment::purge::GLOBAL_PURGE_AT`.)
//!
//! Globals whose type holds a modelled atomic or lock (the global lists,
//! the empty heap) are declared with [`global!`]: a plain `static` normally,
//! a `loom::lazy_static!` (created afresh for each explored execution) under
//! loom.
//!
//! Also here: [`race_window`], the test-only hook that widens the windows
//! of the lock-free protocols (`--cfg hakmem_race_windows`).

#[cfg(not(hakmem_loom))]
pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(hakmem_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Atomics that are never modelled (see the module doc).
pub(crate) mod plain {
    #[cfg(feature = "secure")]
    pub(crate) use core::sync::atomic::AtomicU16;
    pub(crate) use core::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicU8, AtomicUsize};
}

/// An entry of the segment map (never modelled by loom, see the module doc).
pub(crate) type MapEntry = plain::AtomicU8;

/// A global whose type holds modelled atomics: a `static` normally, a
/// `loom::lazy_static!` under loom (loom's atomics have no `const`
/// constructor, and each explored execution needs fresh ones).
macro_rules! global {
    ($(#[$attr:meta])* static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(hakmem_loom))]
        $(#[$attr])*
        static $name: $ty = $init;
        #[cfg(hakmem_loom)]
        loom::lazy_static! {
            $(#[$attr])*
            static ref $name: $ty = $init;
        }
    };
    ($(#[$attr:meta])* pub(crate) static $name:ident: $ty:ty = $init:expr;) => {
        #[cfg(not(hakmem_loom))]
        $(#[$attr])*
        pub(crate) static $name: $ty = $init;
        #[cfg(hakmem_loom)]
        loom::lazy_static! {
            $(#[$attr])*
            pub(crate) static ref $name: $ty = $init;
        }
    };
}
pub(crate) use global;

/// Spin-wait hint.
#[cfg(not(hakmem_loom))]
#[inline]
pub(crate) fn spin_hint() {
    core::hint::spin_loop();
}

/// Spin-wait hint: under loom a spinning thread must let the others run.
#[cfg(hakmem_loom)]
pub(crate) fn spin_hint() {
    loom::thread::yield_now();
}

/// Places in the lock-free protocols where another thread's interleaving
/// would do harm if the protocol were wrong; `race_window` marks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    /// A remote free has pushed its blocks and is about to tell the owner
    /// (`remote::push_chain`).
    RemoteNotify,
    /// A huge block's mapping has been moved by `mremap`; the segment map
    /// is about to learn the new address (`huge::huge_realloc`). The
    /// argument is the old header's address.
    #[cfg_attr(feature = "secure", allow(dead_code))]
    HugeRemap(usize),
    /// A global purge pass has taken a list's segments off it for its
    /// system calls and not yet put them back (`purge::purge_list`).
    PurgeTaken,
}

/// Marks a protocol window. Nothing in a normal build. With
/// `--cfg hakmem_race_windows` (a test-only build, see docs/TESTING.md) it
/// yields the CPU, so that other threads run inside the window, or calls
/// the hook the calling thread installed with [`set_window_hook`].
#[inline(always)]
pub(crate) fn race_window(_window: Window) {
    #[cfg(hakmem_race_windows)]
    windows::enter(_window);
}

#[cfg(all(test, hakmem_race_windows))]
pub(crate) use windows::serial as serial_window_tests;
#[cfg(hakmem_race_windows)]
#[allow(unused_imports)]
pub(crate) use windows::set_window_hook;

#[cfg(hakmem_race_windows)]
mod windows {
    extern crate std;
    use super::Window;
    use std::cell::Cell;

    std::thread_local! {
        static HOOK: Cell<Option<fn(Window)>> = const { Cell::new(None) };
    }

    /// Makes `race_window` call `hook` on this thread (None: yield again).
    #[allow(dead_code)] // used by the window tests only
    pub(crate) fn set_window_hook(hook: Option<fn(Window)>) {
        HOOK.with(|h| h.set(hook));
    }

    /// Window tests that fork take this: a fork waits for a purge pass in
    /// progress (`purge::lock_purges`), so one test's lingering purge
    /// would let another's window close before its fork.
    #[cfg(test)]
    pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
        static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn enter(window: Window) {
        match HOOK.try_with(|h| h.get()).ok().flatten() {
            Some(hook) => hook(window),
            None => crate::os::yield_now(),
        }
    }
}

/// The thread running `fork`'s handlers (its `pthread_self`, which the
/// child's thread keeps), 0 when none is: set by hakmem's prepare handler
/// once it holds every lock, cleared by its parent and child handlers
/// before they release them. Other libraries' `fork` handlers registered
/// before hakmem's run inside that window (prepare handlers run in the
/// reverse order of registration, parent and child handlers in that
/// order), and hakmem registers its own at the first heap, after many
/// programs' constructors: a handler that allocates or frees reaches the
/// locks its own thread holds, and takes them again ([`SpinLock`]) rather
/// than wait for itself forever. The locks keep every other thread out, so
/// the lists are that thread's alone, and consistent: it holds them from
/// outside hakmem's code (no handler runs inside a critical section).
static FORK_OWNER: plain::AtomicUsize = plain::AtomicUsize::new(0);

/// Forks made inside the window by its owner (another library's handler
/// that forks): their prepare handler took every lock again, and their
/// parent and child handlers must leave the owner marked.
static FORK_DEPTH: plain::AtomicUsize = plain::AtomicUsize::new(0);

/// Marks the calling thread as the one running `fork`'s handlers with
/// hakmem's locks held (`on`: `fork_prepare`), or no thread (`fork_parent`,
/// `fork_child`), counting forks nested inside the window.
#[cfg(not(hakmem_loom))]
pub(crate) fn set_fork_owner(on: bool) {
    // Relaxed throughout: only the owner's own later loads compare the
    // mark with their thread (another thread's id never equals it), and
    // only the owner touches the depth.
    if on {
        if holds_locks_for_fork() {
            FORK_DEPTH.fetch_add(1, Ordering::Relaxed);
        } else {
            FORK_OWNER.store(crate::os::thread_id(), Ordering::Relaxed);
        }
    } else if FORK_DEPTH.load(Ordering::Relaxed) != 0 {
        FORK_DEPTH.fetch_sub(1, Ordering::Relaxed);
    } else {
        FORK_OWNER.store(0, Ordering::Relaxed);
    }
}

/// Whether the calling thread runs `fork`'s handlers with hakmem's locks
/// held (see [`FORK_OWNER`]). Asked when a lock is found taken, by a
/// global purge pass, and by `fork_prepare` (a nested fork).
#[cold]
#[inline(never)]
pub(crate) fn holds_locks_for_fork() -> bool {
    // Relaxed: as in `set_fork_owner`.
    let owner = FORK_OWNER.load(Ordering::Relaxed);
    owner != 0 && owner == crate::os::thread_id()
}

/// Looks at a taken [`SpinLock`] before its waiter starts yielding.
#[cfg(not(hakmem_loom))]
const SPINS: u32 = 64;

/// A minimal test-and-test-and-set lock for the cold global lists (segment
/// cache, abandoned segments, heap pool), held there for a few
/// instructions and never across a system call; the purge lock is held
/// across a pass's system calls. Every lock is taken by `fork`'s prepare
/// handler, so that a child never inherits one locked. The thread that
/// holds every lock for a `fork` takes it again ([`FORK_OWNER`]):
/// `reentered` counts those takes, which `unlock` undoes first.
///
/// A waiter spins `SPINS` times, then yields the CPU between looks: the
/// holder may be descheduled (more threads than CPUs), or be the thread
/// in `fork`, which holds every lock across the system call. Spinning
/// alone, 32 threads on 2 CPUs made `fork` take 64.5 ms on average
/// (glibc: 4.2 ms, docs/BENCHMARKS.md): the waiters used the time slices
/// the forking thread needed.
#[cfg(not(hakmem_loom))]
pub(crate) struct SpinLock {
    locked: AtomicBool,
    reentered: AtomicU32,
}

#[cfg(not(hakmem_loom))]
impl SpinLock {
    pub(crate) const fn new() -> Self {
        Self {
            locked: AtomicBool::new(false),
            reentered: AtomicU32::new(0),
        }
    }

    pub(crate) fn lock(&self) {
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the Release store in `unlock`, so the
            // previous holder's writes to the protected list are visible.
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
            if self.reenter_for_fork() {
                return;
            }
            while self.locked.load(Ordering::Relaxed) {
                if spins < SPINS {
                    spins += 1;
                    spin_hint();
                } else {
                    crate::os::yield_now();
                }
            }
        }
    }

    /// Takes the lock again when the calling thread holds it for a `fork`
    /// (see [`FORK_OWNER`]); false otherwise.
    #[cold]
    fn reenter_for_fork(&self) -> bool {
        if !holds_locks_for_fork() {
            return false;
        }
        // Relaxed: only the owner touches the count while it holds the lock.
        self.reentered.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Takes the lock if it is free; false otherwise.
    pub(crate) fn try_lock(&self) -> bool {
        // Acquire: as in `lock`.
        !self.locked.load(Ordering::Relaxed) && !self.locked.swap(true, Ordering::Acquire)
    }

    pub(crate) fn unlock(&self) {
        // Relaxed: the count is written only by the fork's owner while it
        // holds the lock, and is back to 0 before that thread's own last
        // `unlock`, whose Release store of `locked` publishes it; any other
        // holder took the lock with the Acquire swap that pairs with that
        // store, so it reads 0 here (Rust memory model: release/acquire
        // on `locked`, not x86's ordering).
        if self.reentered.load(Ordering::Relaxed) != 0 {
            self.reentered.fetch_sub(1, Ordering::Relaxed);
            return;
        }
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

    /// Takes the lock if it is free; false otherwise.
    pub(crate) fn try_lock(&self) -> bool {
        match self.mutex.try_lock() {
            Ok(guard) => {
                // SAFETY: as in `lock`.
                unsafe {
                    *self.guard.get() = Some(core::mem::transmute::<
                        loom::sync::MutexGuard<'_, ()>,
                        loom::sync::MutexGuard<'static, ()>,
                    >(guard));
                }
                true
            }
            Err(_) => false,
        }
    }

    pub(crate) fn unlock(&self) {
        // SAFETY: only the holder calls unlock, and it owns `guard`.
        drop(unsafe { (*self.guard.get()).take() });
    }
}
