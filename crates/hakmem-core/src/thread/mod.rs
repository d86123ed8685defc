//! **Layer: heaps and threads** — the `Heap` a thread allocates from and
//! its life cycle (`heap`), which heap the calling thread uses and its
//! set-up and exit hook (this file), thread exit and reclaim (`abandon`),
//! the look for threads gone without their exit hook (`live`), frees into
//! other threads' pages and the owner's notifications (`remote`), and
//! local heaps (`local`).
//!
//! Calls down: `small` (settling a collected or reclaimed page, releasing
//! a span, a local heap's allocations), `segment` (segments to own,
//! abandon and free; the purge pass), `huge` (a local heap's huge blocks),
//! `arch` (the thread's slot), `os`, the `check` hooks. `small` calls back
//! up into this layer where a page's owner is needed (small/mod.rs says
//! where and why).
//!
//! Thread binding: which heap the calling thread uses, its set-up on the
//! first allocation, the thread-exit hook, and `fork`.
//!
//! The heap pointer itself is the processor's business (arch/: a TLS slot
//! read with two instructions on x86-64, a thread key elsewhere). It starts
//! at the static empty heap, so the fast path never asks "initialised?": it
//! misses into the slow path, which calls `init_heap`.
//!
//! Thread exit is caught with a thread key destructor (glibc's
//! `pthread_key_create` and `pthread_setspecific` for the first keys do not
//! allocate). The destructor abandons the heap's segments for other threads
//! to reclaim, and leaves the slot pointing at the static *exited* heap: an
//! allocation after that (by another library's key destructor that runs
//! after ours) is served by a heap made for that one allocation and
//! abandoned at once (`alloc::alloc_after_exit`), because glibc runs no
//! destructor round after its last one and a heap registered then would
//! never be given up. `fork` is made safe by holding every global lock
//! across it.
//!
//! Under loom the slot is a `loom::thread_local!` and there is no key, no
//! exit hook and no fork: the models call `heap_abandon` themselves.
//!
//! Limits: the x86-64 binding's default TLS model (initial-exec) takes the
//! slot from the static TLS block; see arch/x86_64.rs and the `dlopen-tls`
//! feature (docs/CONFIG.md) for libraries loaded with `dlopen`.

pub(crate) mod abandon;
pub(crate) mod heap;
pub(crate) mod live;
pub(crate) mod local;
pub(crate) mod remote;

use crate::segment::arena;
use crate::sync::{plain::AtomicUsize, Ordering};
#[cfg(hakmem_loom)]
use crate::thread::heap::EMPTY_HEAP;
use crate::thread::heap::{Heap, EXITED_HEAP};
use crate::{arch, os};
use core::ffi::c_void;

/// The calling thread's heap (the static empty heap until its first allocation).
#[cfg(not(hakmem_loom))]
#[inline(always)]
pub(crate) fn heap() -> *mut Heap {
    arch::thread_heap()
}

/// Points the calling thread's slot at `heap`.
#[cfg(not(hakmem_loom))]
pub(crate) fn set_heap(heap: *mut Heap) {
    arch::set_thread_heap(heap)
}

#[cfg(hakmem_loom)]
loom::thread_local! {
    static SLOT: core::cell::Cell<*mut Heap> = core::cell::Cell::new(EMPTY_HEAP.get());
}

/// The calling (loom) thread's heap.
#[cfg(hakmem_loom)]
pub(crate) fn heap() -> *mut Heap {
    SLOT.with(|slot| slot.get())
}

/// Points the calling (loom) thread's slot at `heap`.
#[cfg(hakmem_loom)]
pub(crate) fn set_heap(heap: *mut Heap) {
    SLOT.with(|slot| slot.set(heap));
}

/// Gives the calling (loom) thread a heap.
#[cfg(hakmem_loom)]
pub(crate) fn init_heap() -> *mut Heap {
    let heap = heap::heap_new();
    set_heap(heap);
    heap
}

#[cfg(not(hakmem_loom))]
const INIT_NONE: usize = 0;
#[cfg(not(hakmem_loom))]
const INIT_RUNNING: usize = 1;
#[cfg(not(hakmem_loom))]
const INIT_DONE: usize = 2;
#[cfg(not(hakmem_loom))]
static PROCESS_INIT: AtomicUsize = AtomicUsize::new(INIT_NONE);

/// The thread key whose destructor is the thread-exit hook (and, for the
/// portable binding, the heap slot itself): 0 until it is created, else
/// the key plus 1.
#[cfg(not(hakmem_loom))]
static THREAD_KEY: AtomicUsize = AtomicUsize::new(0);

/// The thread-exit key, created on first use (None when the system has no
/// key left).
#[cfg(not(hakmem_loom))]
pub(crate) fn thread_key() -> Option<os::ThreadKey> {
    thread_key_if_created().or_else(create_thread_key)
}

/// The thread-exit key if it has been created.
#[cfg(not(hakmem_loom))]
#[inline(always)]
pub(crate) fn thread_key_if_created() -> Option<os::ThreadKey> {
    // Acquire: pairs with the AcqRel CAS in `create_thread_key`, so the
    // key's creation happens before this thread uses it.
    match THREAD_KEY.load(Ordering::Acquire) {
        0 => None,
        k => Some((k - 1) as os::ThreadKey),
    }
}

/// Creates the key; when another thread has published one first, gives
/// this one back and uses that. Allocates nothing (`pthread_key_create`).
#[cfg(not(hakmem_loom))]
#[cold]
#[inline(never)]
fn create_thread_key() -> Option<os::ThreadKey> {
    let key = os::thread_key_create(thread_exit)?;
    // AcqRel: publishes the key (Release) to `thread_key_if_created`, and
    // reads a winner's (Acquire) on failure.
    match THREAD_KEY.compare_exchange(0, key as usize + 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => Some(key),
        Err(winner) => {
            os::thread_key_delete(key);
            Some((winner - 1) as os::ThreadKey)
        }
    }
}

/// Gives the calling thread a heap (slow path of its first allocation).
/// Returns null when no memory for it can be had.
#[cfg(not(hakmem_loom))]
#[cold]
#[inline(never)]
pub(crate) fn init_heap() -> *mut Heap {
    let heap = crate::thread::abandon::heap_for_thread();
    if heap.is_null() {
        return heap;
    }
    // Installed first: anything below that allocates (glibc's atfork
    // registration, a second-level key array) finds this heap.
    set_heap(heap);
    if self::heap() != heap {
        // No slot to be had (the portable binding found no thread key).
        // SAFETY: the heap was made above, and nothing refers to it.
        unsafe { crate::thread::abandon::heap_abandon(heap) };
        return core::ptr::null_mut();
    }
    process_init();
    // Without a key (none left) or its value (libc out of memory), the
    // thread's exit hook will not run: its heap is then found once the
    // thread is gone, as that of any thread that dies without it (live.rs).
    if let Some(key) = thread_key() {
        os::thread_key_set(key, heap as *mut c_void);
    }
    // SAFETY: the calling thread's heap, on no list.
    unsafe { crate::thread::live::live_add(heap) };
    keep_loaded_once();
    heap
}

/// Whether the object holding hakmem has been pinned (or a thread is at it).
#[cfg(not(hakmem_loom))]
static PINNED: crate::sync::plain::AtomicBool = crate::sync::plain::AtomicBool::new(false);

/// Keeps the object holding this code loaded for good, once, as the first
/// thread's exit hook is registered (issue 22, hole 3): a library carrying
/// hakmem (libhakmem.so opened with `dlopen`, a Rust `cdylib` with `Hakmem`
/// as its global allocator) may be unloaded with `dlclose` while threads
/// that allocated through it live on, and their exit would then call a
/// key destructor in an unmapped library. libhakmem.so is linked with `-z
/// nodelete` as well; a plugin's link flags are not ours, hence this.
///
/// Runs at the end of `init_heap`, holding nothing: it takes the loader's
/// lock, and a thread that holds that lock (inside `dlopen`) may be
/// allocating at the same time. No thread waits for it (the flag is a
/// claim, not a lock), so no lock order can form.
#[cfg(not(hakmem_loom))]
fn keep_loaded_once() {
    // Relaxed: the claim orders nothing; a second pin would be harmless.
    if PINNED.load(Ordering::Relaxed) || PINNED.swap(true, Ordering::Relaxed) {
        return;
    }
    os::keep_loaded(thread_exit as *const c_void);
}

/// `process_init` as the object holding hakmem is loaded (an ELF
/// constructor), rather than at the first allocation: `process_init`
/// calls `pthread_atfork` and `atexit`, and the first allocation may come
/// from inside those very functions, which take a lock and then allocate
/// to grow their lists (glibc: at the 33rd exit handler, the 49th set of
/// fork handlers). Set up from there it waited for the lock its own
/// thread held, for good. The constructor runs before the executable's
/// own (priority 101, the first a program may use; preloaded, a library
/// is initialised before the executable, though after the libraries the
/// program links). Its own `atexit` or `pthread_atfork` may be what grows
/// a list: that allocation, on a thread with no heap yet, makes its heap
/// without waiting for the set-up it comes from (`INIT_OWNER`). An
/// allocation made before the constructor runs (a library initialised
/// earlier; glibc's start-up in an executable linked with the archive)
/// sets up inline as before, and the constructor then finds it done:
/// made from inside those functions, that one still waits (DESIGN.md).
#[cfg(all(target_os = "linux", not(hakmem_loom)))]
#[used]
#[link_section = ".init_array.00101"]
static PROCESS_INIT_AT_LOAD: extern "C" fn() = process_init_at_load;

#[cfg(all(target_os = "linux", not(hakmem_loom)))]
extern "C" fn process_init_at_load() {
    process_init();
    crate::profile::loaded();
}

#[cfg(not(hakmem_loom))]
fn process_init() {
    // Acquire: pairs with the Release store of INIT_DONE below, so the
    // secret (`secure`) is visible.
    if PROCESS_INIT.load(Ordering::Acquire) == INIT_DONE {
        return;
    }
    if PROCESS_INIT
        .compare_exchange(INIT_NONE, INIT_RUNNING, Ordering::Acquire, Ordering::Acquire)
        .is_ok()
    {
        // Relaxed: only this thread's own loads below compare the mark
        // with their thread; another thread's id never equals it.
        INIT_OWNER.store(os::thread_id(), Ordering::Relaxed);
        #[cfg(feature = "secure")]
        {
            crate::check::secure::check_page_size();
            crate::small::page::SECRET.store(crate::os::random_usize(), Ordering::Relaxed);
            os::at_exit(crate::check::secure::check_at_exit);
        }
        os::at_fork(fork_prepare, fork_parent, fork_child);
        if crate::config::config().stats {
            os::at_exit(crate::stats::print_at_exit);
        }
        if !crate::config::config().profile_path().is_empty() {
            os::at_exit(crate::profile::dump_at_exit);
        }
        // Release: publishes the secret to the Acquire loads above and below.
        PROCESS_INIT.store(INIT_DONE, Ordering::Release);
    } else if INIT_OWNER.load(Ordering::Relaxed) != os::thread_id() {
        while PROCESS_INIT.load(Ordering::Acquire) != INIT_DONE {
            crate::sync::spin_hint();
        }
    }
    // Else the call came from inside this thread's own set-up, from the
    // allocation glibc makes in `atexit` or `pthread_atfork` as it grows
    // their lists for hakmem's handlers (the constructor's set-up, on a
    // thread with no heap yet): that set-up goes on once the allocation
    // has returned, and the secret it uses (`secure`) is already written.
}

/// The thread running `process_init`'s set-up (its `pthread_self`; 0
/// before): a call from inside it returns at once instead of waiting for
/// itself.
#[cfg(not(hakmem_loom))]
static INIT_OWNER: AtomicUsize = AtomicUsize::new(0);

/// Thread key destructor: the thread is exiting (`value` is its heap), or
/// — the portable binding, whose slot is this key — a later destructor
/// round found the exited heap there, which glibc has just cleared.
///
/// Its first call for a heap that has live local heaps sets the key's
/// value again and returns: the heap is given up in the next destructor
/// round, after the destructors
/// of the round that follow hakmem's in key order. They are the program's
/// own, created after hakmem's key (made at the first allocation), and
/// the usual place to destroy a per-thread local heap: done after the
/// heap was given up, its local heaps were already orphaned — their
/// memory handed to the thread heap, the destroy a no-op — and each
/// thread left its blocks behind for good (found by review: 2 MiB per
/// thread). glibc runs a next round whenever a destructor set a value,
/// up to four: a heap whose first call falls in the last one (made by a
/// destructor's first allocation in a late round) is not called again,
/// and is found gone by the live list's looks, which go on for a heap
/// whose hook put its work off for as long as its thread lives
/// (`live::live_exiting`; found by review: the one look a second after
/// the listing ended them). A heap with no local heap is given up at
/// once: a later destructor's frees are remote frees either way, and the
/// extra round cost glibc about 470 instructions a thread (its scan of
/// the key table), 5 % of a thread's whole life in `churn`.
#[cfg(not(hakmem_loom))]
extern "C" fn thread_exit(value: *mut c_void) {
    let heap = value as *mut Heap;
    if heap != EXITED_HEAP.get() && !heap.is_null() {
        // SAFETY: the key's value is the heap this thread created in
        // init_heap, used by no other thread.
        unsafe {
            if !(*heap).exit_deferred && !(*heap).locals.is_null() {
                (*heap).exit_deferred = true;
                // The portable binding: this also puts the heap back in
                // the slot glibc cleared for this call.
                if let Some(key) = thread_key_if_created() {
                    if os::thread_key_set(key, value) {
                        crate::thread::live::live_exiting(heap);
                        return;
                    }
                }
            }
        }
    }
    // Frees after this point (later destructors) are remote frees; an
    // allocation is served by a heap made and abandoned for it alone (see
    // the module doc).
    set_heap(EXITED_HEAP.get());
    if heap == EXITED_HEAP.get() {
        return;
    }
    // SAFETY: the key's value is the heap this thread created in init_heap,
    // used by no other thread.
    unsafe {
        crate::thread::live::live_remove(heap);
        crate::thread::abandon::heap_retire(heap);
    }
}

#[cfg(not(hakmem_loom))]
extern "C" fn fork_prepare() {
    // In lock order: a purge pass (PURGE) takes the list locks below it.
    arch::fork_lock();
    crate::segment::purge::lock_purges();
    crate::thread::live::lock_live();
    heap::pool_lock();
    crate::thread::abandon::lock_retired();
    arena::lock_all();
    crate::policy::fork_lock();
    crate::profile::fork_lock();
    // Last: the handlers of other libraries that run from here to our
    // parent and child handlers may allocate (sync.rs, `FORK_OWNER`).
    crate::sync::set_fork_owner(true);
}

#[cfg(not(hakmem_loom))]
extern "C" fn fork_parent() {
    crate::sync::set_fork_owner(false);
    crate::profile::fork_unlock();
    crate::policy::fork_unlock();
    arena::unlock_all();
    crate::thread::abandon::unlock_retired();
    heap::pool_unlock();
    crate::thread::live::unlock_live();
    crate::segment::purge::unlock_purges();
    arch::fork_unlock();
}

#[cfg(not(hakmem_loom))]
extern "C" fn fork_child() {
    crate::sync::set_fork_owner(false);
    crate::profile::fork_unlock();
    crate::policy::fork_unlock();
    arena::unlock_all();
    crate::thread::abandon::unlock_retired();
    heap::pool_unlock();
    // The child's thread has new kernel ids: its heap is listed anew.
    crate::thread::live::live_fork_child(heap());
    crate::segment::purge::fork_child_purge_due();
    crate::segment::purge::unlock_purges();
    arch::fork_unlock();
    crate::thread::remote::fork_child_repair();
}
