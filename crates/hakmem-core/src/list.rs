//! A short intrusive list under a spin lock, for the cold global lists
//! (the segment cache, the abandoned segments): a stack (push and pop at
//! the head) whose nodes can also be taken out of the middle in O(1)
//! (`remove`: a free into an abandoned segment takes it off the list).
//!
//! Chosen over a lock-free stack: a lock-free pop reads the `next` link of a
//! node another thread may have popped and unmapped meanwhile, and needs an
//! ABA tag; the lists are touched only when a heap gains or loses a segment,
//! the lock is held for a few instructions and never across a system call,
//! and `fork` takes it so a child never inherits it held.

use crate::sync::SpinLock;
use core::cell::UnsafeCell;
use core::ptr;

/// A node that carries its own list links.
///
/// # Safety
/// The three functions must return pointers to distinct fields of `this`
/// that no other code writes while the node is on a `LockedList`, and
/// `list_link`'s field must be written only by a `LockedList`, under its
/// lock (null while the node is on none: zeroed memory is).
pub(crate) unsafe trait Linked {
    fn next_link(this: *mut Self) -> *mut *mut Self;
    fn prev_link(this: *mut Self) -> *mut *mut Self;
    /// The list the node is on (its address), null when none.
    fn list_link(this: *mut Self) -> *mut *const ();
}

/// A list's address is its mark in its nodes (`list_link`): it must not
/// move while it holds nodes (statics, an `Arc`, loom's lazy statics).
pub(crate) struct LockedList<T> {
    lock: SpinLock,
    head: UnsafeCell<*mut T>,
    /// The least recently pushed node (null when empty): `take_first`
    /// moves the nodes it passed over behind it.
    tail: UnsafeCell<*mut T>,
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
            tail: UnsafeCell::new(ptr::null_mut()),
            count: UnsafeCell::new(0),
        }
    }

    #[cfg(hakmem_loom)]
    pub(crate) fn new() -> Self {
        Self {
            lock: SpinLock::new(),
            head: UnsafeCell::new(ptr::null_mut()),
            tail: UnsafeCell::new(ptr::null_mut()),
            count: UnsafeCell::new(0),
        }
    }

    /// This list's mark in its nodes' `list_link`.
    fn id(&self) -> *const () {
        self as *const Self as *const ()
    }

    /// Pushes unless the list already holds `limit`; returns whether it did.
    ///
    /// `node` must be valid and exclusively the caller's.
    pub(crate) fn push(&self, node: *mut T, limit: usize) -> bool {
        self.lock.lock();
        // SAFETY: the lock is held; node is exclusively the caller's, the
        // head (when there is one) a valid node of this list.
        let pushed = unsafe {
            debug_assert!((*T::list_link(node)).is_null(), "a node on a list pushed");
            if *self.count.get() >= limit {
                false
            } else {
                let head = *self.head.get();
                *T::next_link(node) = head;
                *T::prev_link(node) = ptr::null_mut();
                *T::list_link(node) = self.id();
                if head.is_null() {
                    *self.tail.get() = node;
                } else {
                    *T::prev_link(head) = node;
                }
                *self.head.get() = node;
                *self.count.get() += 1;
                true
            }
        };
        self.lock.unlock();
        pushed
    }

    /// Pushes `node` behind every other node (no limit): the last that
    /// `pop` and `take_first` come to.
    ///
    /// `node` must be valid and exclusively the caller's.
    pub(crate) fn push_last(&self, node: *mut T) {
        self.lock.lock();
        // SAFETY: the lock is held; node is exclusively the caller's, the
        // tail (when there is one) a valid node of this list.
        unsafe {
            debug_assert!((*T::list_link(node)).is_null(), "a node on a list pushed");
            let tail = *self.tail.get();
            *T::next_link(node) = ptr::null_mut();
            *T::prev_link(node) = tail;
            *T::list_link(node) = self.id();
            if tail.is_null() {
                *self.head.get() = node;
            } else {
                *T::next_link(tail) = node;
            }
            *self.tail.get() = node;
            *self.count.get() += 1;
        }
        self.lock.unlock();
    }

    /// Pops the most recently pushed node (null when empty).
    pub(crate) fn pop(&self) -> *mut T {
        self.lock.lock();
        // SAFETY: the lock is held; nodes on the list are valid.
        let node = unsafe {
            let n = *self.head.get();
            if !n.is_null() {
                self.unlink(n);
            }
            n
        };
        self.lock.unlock();
        node
    }

    /// Takes off the list the first of its `max` most recently pushed
    /// nodes for which `pred` holds, and returns it. When none does (null
    /// returned), the `max` nodes passed over go behind the others, so
    /// that the next call looks at the next ones: without it a node below
    /// the first `max` would never be looked at while those stay (found by
    /// review: abandoned segments with room, 80 deep, never reused).
    /// `pred` runs with the lock held: it must not touch the list.
    pub(crate) fn take_first(&self, max: usize, mut pred: impl FnMut(*mut T) -> bool) -> *mut T {
        self.lock.lock();
        // SAFETY: the lock is held; nodes on the list are valid.
        let found = unsafe {
            let mut n = *self.head.get();
            let mut last: *mut T = ptr::null_mut();
            let mut seen = 0;
            while !n.is_null() && seen < max && !pred(n) {
                last = n;
                n = *T::next_link(n);
                seen += 1;
            }
            if !n.is_null() && seen < max {
                self.unlink(n);
                n
            } else {
                if !n.is_null() && !last.is_null() {
                    // head ..= last, then n ..= tail: becomes n ..= tail, head ..= last.
                    let head = *self.head.get();
                    let tail = *self.tail.get();
                    *T::prev_link(n) = ptr::null_mut();
                    *self.head.get() = n;
                    *T::next_link(tail) = head;
                    *T::prev_link(head) = tail;
                    *T::next_link(last) = ptr::null_mut();
                    *self.tail.get() = last;
                }
                ptr::null_mut()
            }
        };
        self.lock.unlock();
        found
    }

    /// Takes `node` off the list if it is on it; returns whether it was.
    /// O(1): the node's `list_link` says whether it is on this list.
    ///
    /// # Safety
    /// `node` must be valid, and not be put on or taken off another list
    /// meanwhile (it may be on this one, or on none).
    pub(crate) unsafe fn remove(&self, node: *mut T) -> bool {
        self.lock.lock();
        // SAFETY: the lock is held. node is valid (the caller's guarantee)
        // and its `list_link` is written only by a list under that list's
        // lock: by this one (held), or by no other meanwhile (the caller's
        // guarantee). It reads our mark only while on this list.
        let found = unsafe {
            if *T::list_link(node) == self.id() {
                self.unlink(node);
                true
            } else {
                false
            }
        };
        self.lock.unlock();
        found
    }

    /// Unlinks `node`, a node of this list, and clears its links.
    ///
    /// # Safety
    /// The lock must be held and `node` be on this list.
    unsafe fn unlink(&self, node: *mut T) {
        // SAFETY: the caller's guarantee; a node's neighbours are nodes of
        // this list (or null at the ends).
        unsafe {
            debug_assert_eq!(*T::list_link(node), self.id(), "a node of another list unlinked");
            let (prev, next) = (*T::prev_link(node), *T::next_link(node));
            if prev.is_null() {
                *self.head.get() = next;
            } else {
                *T::next_link(prev) = next;
            }
            if next.is_null() {
                *self.tail.get() = prev;
            } else {
                *T::prev_link(next) = prev;
            }
            *T::next_link(node) = ptr::null_mut();
            *T::prev_link(node) = ptr::null_mut();
            *T::list_link(node) = ptr::null();
            *self.count.get() -= 1;
        }
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

/// A bare node, for the tests of the list and its loom model.
#[cfg(test)]
pub(crate) struct TestNode {
    next: *mut TestNode,
    prev: *mut TestNode,
    listed: *const (),
}

#[cfg(test)]
impl TestNode {
    pub(crate) const EMPTY: TestNode = TestNode {
        next: ptr::null_mut(),
        prev: ptr::null_mut(),
        listed: ptr::null(),
    };
}

// SAFETY: the links are used by the one list a test puts the node on.
#[cfg(test)]
unsafe impl Linked for TestNode {
    fn next_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: this is a valid node.
        unsafe { &raw mut (*this).next }
    }
    fn prev_link(this: *mut Self) -> *mut *mut Self {
        // SAFETY: this is a valid node.
        unsafe { &raw mut (*this).prev }
    }
    fn list_link(this: *mut Self) -> *mut *const () {
        // SAFETY: this is a valid node.
        unsafe { &raw mut (*this).listed }
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    type Node = TestNode;

    fn nodes<const N: usize>() -> [Node; N] {
        core::array::from_fn(|_| Node::EMPTY)
    }

    /// The nodes from head to tail, checking every back link on the way.
    fn walk(list: &LockedList<Node>) -> std::vec::Vec<*mut Node> {
        let mut out = std::vec::Vec::new();
        let mut prev: *mut Node = ptr::null_mut();
        list.for_each(|n| {
            // SAFETY: n is a node of the list, valid while the test runs.
            unsafe {
                assert_eq!((*n).prev, prev, "back link");
                assert_eq!((*n).listed, list.id(), "mark");
            }
            prev = n;
            out.push(n);
        });
        assert_eq!(list.len(), out.len());
        // SAFETY: the test's list, not used by another thread.
        let tail = unsafe { *list.tail.get() };
        assert_eq!(tail, out.last().copied().unwrap_or(ptr::null_mut()), "tail");
        out
    }

    extern crate std;

    /// `remove` on a node of the test's own (on this list, another or none).
    fn remove(list: &LockedList<Node>, node: *mut Node) -> bool {
        // SAFETY: the test's nodes are valid and no other thread touches them.
        unsafe { list.remove(node) }
    }

    #[test]
    fn remove_takes_any_node_of_its_list_and_no_other() {
        let list = LockedList::<Node>::new();
        let other = LockedList::<Node>::new();
        let mut n = nodes::<5>();
        let p: std::vec::Vec<*mut Node> = n.iter_mut().map(|x| x as *mut Node).collect();
        for &x in &p[..4] {
            assert!(list.push(x, usize::MAX));
        }
        assert!(other.push(p[4], usize::MAX));
        assert_eq!(walk(&list), [p[3], p[2], p[1], p[0]]);
        assert!(!remove(&list, p[4]), "a node of another list");
        assert!(remove(&list, p[2]), "the middle");
        assert_eq!(walk(&list), [p[3], p[1], p[0]]);
        assert!(!remove(&list, p[2]), "removed already");
        assert!(remove(&list, p[0]), "the tail");
        assert_eq!(walk(&list), [p[3], p[1]]);
        assert!(remove(&list, p[3]), "the head");
        assert_eq!(walk(&list), [p[1]]);
        assert!(list.push(p[2], usize::MAX), "back on");
        assert_eq!(walk(&list), [p[2], p[1]]);
        assert_eq!(list.pop(), p[2]);
        assert!(!remove(&list, p[2]), "popped");
        assert_eq!(list.pop(), p[1]);
        assert!(list.pop().is_null());
        assert_eq!(walk(&list), []);
        assert!(remove(&other, p[4]));
        for x in &n {
            assert!(
                x.next.is_null() && x.prev.is_null() && x.listed.is_null(),
                "links cleared"
            );
        }
    }

    #[test]
    fn take_first_takes_the_first_match_among_the_first_max() {
        let list = LockedList::<Node>::new();
        let mut n = nodes::<4>();
        let p: std::vec::Vec<*mut Node> = n.iter_mut().map(|x| x as *mut Node).collect();
        for &x in &p {
            assert!(list.push(x, usize::MAX));
        }
        // Head to tail: p3 p2 p1 p0.
        assert!(list.take_first(2, |x| x == p[1]).is_null(), "beyond the first two");
        assert_eq!(walk(&list), [p[1], p[0], p[3], p[2]], "the two passed over go last");
        assert!(list.take_first(4, |_| false).is_null());
        assert_eq!(
            walk(&list),
            [p[1], p[0], p[3], p[2]],
            "all passed over: the order stays"
        );
        assert!(list.take_first(3, |_| false).is_null());
        assert_eq!(walk(&list), [p[2], p[1], p[0], p[3]]);
        assert!(list.take_first(3, |_| false).is_null());
        assert_eq!(walk(&list), [p[3], p[2], p[1], p[0]], "back where it was");
        assert_eq!(list.take_first(3, |x| x == p[1] || x == p[0]), p[1], "the first match");
        assert_eq!(walk(&list), [p[3], p[2], p[0]]);
        assert!(list.take_first(usize::MAX, |_| false).is_null());
        assert_eq!(list.take_first(usize::MAX, |_| true), p[3], "the head");
        assert_eq!(walk(&list), [p[2], p[0]]);
        assert!(list.take_first(0, |_| true).is_null(), "none looked at");
        assert_eq!(list.take_first(1, |_| true), p[2]);
        assert_eq!(list.take_first(5, |_| true), p[0]);
        assert!(list.take_first(5, |_| true).is_null(), "empty");
        list.push_last(p[1]);
        assert_eq!(walk(&list), [p[1]], "last onto an empty list");
        list.push_last(p[2]);
        assert!(list.push(p[3], usize::MAX));
        assert_eq!(walk(&list), [p[3], p[1], p[2]]);
        assert_eq!(list.take_first(5, |x| x == p[2]), p[2], "the last");
        assert_eq!(walk(&list), [p[3], p[1]]);
        assert!(remove(&list, p[3]) && remove(&list, p[1]));
        assert!(n[1].listed.is_null() && n[1].next.is_null(), "links cleared");
    }

    #[test]
    fn push_stops_at_the_limit() {
        let list = LockedList::<Node>::new();
        let mut n = nodes::<2>();
        assert!(list.push(&mut n[0], 1));
        assert!(!list.push(&mut n[1], 1));
        assert!(n[1].listed.is_null(), "not pushed, not marked");
        assert_eq!(walk(&list), [&mut n[0] as *mut Node]);
    }
}
