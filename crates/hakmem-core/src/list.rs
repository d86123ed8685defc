//! A short intrusive stack under a spin lock, for the cold global lists
//! (the segment cache, the abandoned segments).
//!
//! Chosen over a lock-free stack: a lock-free pop reads the `next` link of a
//! node another thread may have popped and unmapped meanwhile, and needs an
//! ABA tag; the lists are touched only when a heap gains or loses a segment,
//! the lock is held for a few instructions and never across a system call,
//! and `fork` takes it so a child never inherits it held.

use crate::sync::SpinLock;
use core::cell::UnsafeCell;
use core::ptr;

/// A node that carries its own list link.
///
/// # Safety
/// `next_link` must return a pointer to a link field of `this` that no other
/// list uses while the node is on a `LockedList`.
pub(crate) unsafe trait Linked {
    fn next_link(this: *mut Self) -> *mut *mut Self;
}

pub(crate) struct LockedList<T> {
    lock: SpinLock,
    head: UnsafeCell<*mut T>,
    count: UnsafeCell<usize>,
}

// SAFETY: head and count are only accessed with `lock` held; the nodes are
// handed over whole between threads.
unsafe impl<T> Sync for LockedList<T> {}

impl<T: Linked> LockedList<T> {
    #[cfg(not(hakmem_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            lock: SpinLock::new(),
            head: UnsafeCell::new(ptr::null_mut()),
            count: UnsafeCell::new(0),
        }
    }

    #[cfg(hakmem_loom)]
    pub(crate) fn new() -> Self {
        Self {
            lock: SpinLock::new(),
            head: UnsafeCell::new(ptr::null_mut()),
            count: UnsafeCell::new(0),
        }
    }

    /// Pushes unless the list already holds `limit`; returns whether it did.
    ///
    /// `node` must be valid and exclusively the caller's.
    pub(crate) fn push(&self, node: *mut T, limit: usize) -> bool {
        self.lock.lock();
        // SAFETY: the lock is held; node is exclusively the caller's.
        let pushed = unsafe {
            if *self.count.get() >= limit {
                false
            } else {
                *T::next_link(node) = *self.head.get();
                *self.head.get() = node;
                *self.count.get() += 1;
                true
            }
        };
        self.lock.unlock();
        pushed
    }

    /// Pops the most recently pushed node (null when empty).
    pub(crate) fn pop(&self) -> *mut T {
        self.lock.lock();
        // SAFETY: the lock is held; nodes on the list are valid.
        let node = unsafe {
            let n = *self.head.get();
            if !n.is_null() {
                *self.head.get() = *T::next_link(n);
                *T::next_link(n) = ptr::null_mut();
                *self.count.get() -= 1;
            }
            n
        };
        self.lock.unlock();
        node
    }

    /// Takes `node` off the list if it is on it; returns whether it was.
    /// Walks the list (it is short, and a node is taken this way at most
    /// once per stay on it).
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    pub(crate) fn remove(&self, node: *mut T) -> bool {
        self.lock.lock();
        // SAFETY: the lock is held; nodes on the list are valid.
        let found = unsafe {
            let mut link: *mut *mut T = self.head.get();
            loop {
                let n = *link;
                if n.is_null() {
                    break false;
                }
                if n == node {
                    *link = *T::next_link(n);
                    *T::next_link(n) = ptr::null_mut();
                    *self.count.get() -= 1;
                    break true;
                }
                link = T::next_link(n);
            }
        };
        self.lock.unlock();
        found
    }

    /// Number of nodes on the list.
    pub(crate) fn len(&self) -> usize {
        self.lock.lock();
        // SAFETY: the lock is held.
        let n = unsafe { *self.count.get() };
        self.lock.unlock();
        n
    }

    /// Calls `f` on every node, with the lock held (`f` must not touch the
    /// list).
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    pub(crate) fn for_each(&self, mut f: impl FnMut(*mut T)) {
        self.lock.lock();
        // SAFETY: the lock is held; nodes on the list are valid.
        unsafe {
            let mut n = *self.head.get();
            while !n.is_null() {
                f(n);
                n = *T::next_link(n);
            }
        }
        self.lock.unlock();
    }

    /// Takes the lock (for `fork`'s prepare handler).
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    pub(crate) fn lock(&self) {
        self.lock.lock();
    }

    /// Releases what `lock` took.
    #[cfg_attr(hakmem_loom, allow(dead_code))]
    pub(crate) fn unlock(&self) {
        self.lock.unlock();
    }
}
