//! Any target, no assembly: plain atomics for the free fast paths' tests,
//! and the thread's heap in a thread-specific data key (a pthread key,
//! `os::thread_key_*`), which works on stable Rust without `std`.
//!
//! The key is thread.rs's exit key: the one whose destructor gives up a
//! thread's heap at its exit (`thread::thread_key`). One key for both, so
//! that the slot says "exited" after the destructor has run: glibc clears
//! every key's value before each destructor round, also of keys without a
//! destructor, so a slot of its own would read "no heap" (the empty heap,
//! which makes a new one) in the destructors of other libraries that run
//! after ours. Ours sets the exited heap again each time it is called.
//!
//! The cost: `pthread_getspecific` is a call (about ten instructions in
//! glibc) where x86-64's slot is two instructions, on malloc and on free;
//! docs/BENCHMARKS.md has the measurement. It is dlopen-safe by nature:
//! a pthread key takes no static TLS.

use crate::small::page::Page;
use crate::sync::{MapEntry, Ordering};
use crate::thread::heap::Heap;

/// Whether `page` is queued in `heap` (its `local_owner` is `heap`): the
/// free fast path's owner test.
///
/// # Safety
/// `page` must point to a valid `Page`.
#[inline(always)]
pub(crate) unsafe fn owned_by(page: *const Page, heap: *mut Heap) -> bool {
    // Relaxed: see `Page::local_owner` (only the owner stores its own heap
    // there).
    // SAFETY: page is valid (caller).
    unsafe { (*page).local_owner.load(Ordering::Relaxed) == heap as usize }
}

/// Whether entry `index` of the segment map `map` is set.
///
/// # Safety
/// `map.add(index)` must be an entry of the map.
#[inline(always)]
pub(crate) unsafe fn map_entry_is_set(map: *const MapEntry, index: usize) -> bool {
    // Acquire: pairs with map_set's Release store (a thread that sees the
    // entry sees the initialised header).
    // SAFETY: the caller guarantees the entry is the map's.
    unsafe { (*map.add(index)).load(Ordering::Acquire) != 0 }
}

#[cfg(not(hakmem_loom))]
pub(crate) use slot::{fork_lock, fork_unlock, set_thread_heap, thread_heap};

/// The heap slot in the thread key (the loom build has its own, thread.rs).
#[cfg(not(hakmem_loom))]
mod slot {
    use crate::os;
    use crate::sync::{plain::AtomicUsize, Ordering, SpinLock};
    use crate::thread;
    use crate::thread::heap::{Heap, EMPTY_HEAP};

    /// The calling thread's heap (the static empty heap until its first
    /// allocation, or before the key exists).
    #[inline(always)]
    pub(crate) fn thread_heap() -> *mut Heap {
        let Some(key) = thread::thread_key_if_created() else {
            return EMPTY_HEAP.get();
        };
        let heap = os::thread_key_get(key) as *mut Heap;
        if heap.is_null() {
            return installing_or_empty();
        }
        heap
    }

    /// Serialises threads setting their first value (see `set_thread_heap`).
    static INSTALL_LOCK: SpinLock = SpinLock::new();
    /// The thread setting its first value (`os::thread_id`; 0: none) and
    /// the heap it sets.
    static INSTALLING_THREAD: AtomicUsize = AtomicUsize::new(0);
    static INSTALLING_HEAP: AtomicUsize = AtomicUsize::new(0);

    /// No value in the key: the empty heap — or, for the thread whose first
    /// `thread_key_set` is allocating, the heap it is setting.
    #[cold]
    #[inline(never)]
    fn installing_or_empty() -> *mut Heap {
        // Relaxed: a thread can only find its own id here if it stored it
        // itself (program order); others see 0 or another thread's id.
        if INSTALLING_THREAD.load(Ordering::Relaxed) == os::thread_id() {
            INSTALLING_HEAP.load(Ordering::Relaxed) as *mut Heap
        } else {
            EMPTY_HEAP.get()
        }
    }

    /// Points the calling thread's slot at `heap` (creating the key on the
    /// process's first call; when that fails, the thread keeps the empty
    /// heap and `thread::init_heap` reports no memory).
    ///
    /// A thread's first value may allocate — glibc `calloc`s a block of
    /// values for keys past the 32nd — and that allocation comes back
    /// here, to a thread whose key still holds nothing: it must find
    /// `heap`, not make another heap (which would recurse for ever). So the
    /// first value is set with the thread named in `INSTALLING_THREAD`,
    /// one thread at a time (only at a thread's first allocation).
    pub(crate) fn set_thread_heap(heap: *mut Heap) {
        let Some(key) = thread::thread_key() else {
            return;
        };
        if !os::thread_key_get(key).is_null() {
            os::thread_key_set(key, heap.cast());
            return;
        }
        INSTALL_LOCK.lock();
        // Relaxed: read back only by this thread (`installing_or_empty`).
        INSTALLING_HEAP.store(heap as usize, Ordering::Relaxed);
        INSTALLING_THREAD.store(os::thread_id(), Ordering::Relaxed);
        os::thread_key_set(key, heap.cast());
        INSTALLING_THREAD.store(0, Ordering::Relaxed);
        INSTALL_LOCK.unlock();
    }

    /// `fork` prepare: no thread may be setting its first value across the
    /// fork (a child would inherit the lock held). Taken before every other
    /// lock: a first value's allocation may take them.
    pub(crate) fn fork_lock() {
        INSTALL_LOCK.lock();
    }

    /// `fork` parent/child: release what `fork_lock` took.
    pub(crate) fn fork_unlock() {
        INSTALL_LOCK.unlock();
    }
}
