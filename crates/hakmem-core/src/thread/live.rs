//! The list of live thread heaps, and the look for heaps whose thread is
//! gone without having run its exit hook (see `LIVE_CHECK_MS`).

use crate::sync::{Ordering, SpinLock};
use crate::thread::heap::Heap;
use core::cell::UnsafeCell;
use core::ptr;

/// How long after a heap is given to a thread the thread is looked for
/// (`reap_exited`). A thread that never runs hakmem's exit hook dies right
/// after it made its heap: its first allocation came in glibc's last round
/// of key destructors (another library's destructor), after hakmem's turn
/// in that round, when no round is left to run the hook; or it was made
/// with a bare `clone`, which runs no destructors. Dead by the time it is
/// looked for, its heap — and the segments it holds — are abandoned then.
/// A thread alive at the look is an ordinary one, never looked at again;
/// a thread that exits before it (a thread-per-task program) costs
/// nothing; a long-lived one, one `tgkill(pid, tid, 0)`.
#[cfg(not(hakmem_loom))]
const LIVE_CHECK_MS: u64 = 1000;

/// Threads looked for per pass at most (the rest wait for the next pass).
#[cfg(not(hakmem_loom))]
const REAP_BATCH: usize = 32;

/// Thread heaps of live threads, linked through `Heap::live`.
#[cfg(not(hakmem_loom))]
struct LiveHeaps {
    lock: SpinLock,
    head: UnsafeCell<*mut Heap>,
}

// SAFETY: head and the listed heaps' `live` entries are only accessed with
// `lock` held.
#[cfg(not(hakmem_loom))]
unsafe impl Sync for LiveHeaps {}

#[cfg(not(hakmem_loom))]
static LIVE: LiveHeaps = LiveHeaps {
    lock: SpinLock::new(),
    head: UnsafeCell::new(ptr::null_mut()),
};

/// Lists `heap`, just given to the calling thread (`thread::init_heap`),
/// with the thread's kernel ids, and asks the global purge pass to come by
/// when it is due for a look.
///
/// # Safety
/// `heap` must be the calling thread's heap, on no list.
#[cfg(not(hakmem_loom))]
pub(crate) unsafe fn live_add(heap: *mut Heap) {
    let ids = crate::os::kernel_ids();
    let now = crate::os::now_ms();
    LIVE.lock.lock();
    // SAFETY: the lock is held; heap is ours and on no list.
    unsafe {
        let head = *LIVE.head.get();
        (*heap).live = crate::thread::heap::LiveEntry {
            ids,
            generation: (*heap).live.generation.wrapping_add(1),
            checked: false,
            exiting: false,
            listed_ms: now,
            next: head,
            prev: ptr::null_mut(),
        };
        if !head.is_null() {
            (*head).live.prev = heap;
        }
        *LIVE.head.get() = heap;
    }
    LIVE.lock.unlock();
    // Relaxed: a hint for when the pass comes by (purge.rs); the entry it
    // looks at is read under the list's lock, which orders it.
    crate::segment::purge::GLOBAL_PURGE_AT.fetch_min(now + LIVE_CHECK_MS, Ordering::Relaxed);
}

/// Takes `heap` off the list (with the lock held), its entry cleared but
/// for the generation.
///
/// # Safety
/// The list's lock must be held and `heap` be on the list.
#[cfg(not(hakmem_loom))]
unsafe fn live_unlink(heap: *mut Heap) {
    // SAFETY: the caller's guarantee.
    unsafe {
        let (prev, next) = ((*heap).live.prev, (*heap).live.next);
        if prev.is_null() {
            *LIVE.head.get() = next;
        } else {
            (*prev).live.next = next;
        }
        if !next.is_null() {
            (*next).live.prev = prev;
        }
        (*heap).live = crate::thread::heap::LiveEntry {
            generation: (*heap).live.generation,
            ..crate::thread::heap::LiveEntry::NONE
        };
    }
}

/// The calling thread's exit hook has put its work off by a destructor
/// round (`thread::thread_exit`): `heap` is looked for again a second on,
/// and as long as its thread lives, so that a heap whose hook is not
/// called again (its first call fell in glibc's last round) is found
/// once the thread is gone.
///
/// # Safety
/// `heap` must be the calling thread's heap.
#[cfg(not(hakmem_loom))]
pub(crate) unsafe fn live_exiting(heap: *mut Heap) {
    let now = crate::os::now_ms();
    LIVE.lock.lock();
    // SAFETY: the lock is held; a heap with ids is on the list.
    unsafe {
        if (*heap).live.ids != (0, 0) {
            (*heap).live.exiting = true;
            (*heap).live.checked = false;
            (*heap).live.listed_ms = now;
        }
    }
    LIVE.lock.unlock();
    // Relaxed: a hint for when the pass comes by (purge.rs); the entry it
    // looks at is read under the list's lock, which orders it.
    crate::segment::purge::GLOBAL_PURGE_AT.fetch_min(now + LIVE_CHECK_MS, Ordering::Relaxed);
}

/// Takes `heap` off the list, if it is listed (its thread is exiting and
/// gives it up itself).
///
/// # Safety
/// `heap` must be the calling thread's heap.
#[cfg(not(hakmem_loom))]
pub(crate) unsafe fn live_remove(heap: *mut Heap) {
    LIVE.lock.lock();
    // SAFETY: the lock is held; a heap with ids is on the list.
    unsafe {
        if (*heap).live.ids != (0, 0) {
            live_unlink(heap);
        }
    }
    LIVE.lock.unlock();
}

/// The global purge pass's look for heaps whose thread is gone (all not
/// yet seen alive with `force`: `collect(true)`): each is taken off the
/// list and abandoned, as its thread's exit would have. Returns when to
/// look again (`u64::MAX`: nothing waits). No lock is held across the
/// system calls.
#[cfg(not(hakmem_loom))]
pub(crate) fn reap_exited(now: u64, force: bool) -> u64 {
    // Each heap looked at, its ids and generation, and whether its look
    // was due (only a due look that finds the thread alive ends them).
    let mut looked: [(*mut Heap, (i32, i32), u32, bool); REAP_BATCH] =
        [(ptr::null_mut(), (0, 0), 0, false); REAP_BATCH];
    let mut n = 0;
    let mut next = u64::MAX;
    LIVE.lock.lock();
    // SAFETY: the lock is held; listed heaps' entries are the list's.
    unsafe {
        let mut heap = *LIVE.head.get();
        while !heap.is_null() {
            let entry = &(*heap).live;
            let due = entry.listed_ms + LIVE_CHECK_MS;
            if !entry.checked {
                if !force && due > now {
                    next = next.min(due);
                } else if n < REAP_BATCH {
                    looked[n] = (heap, entry.ids, entry.generation, due <= now);
                    n += 1;
                } else {
                    next = now;
                }
            }
            heap = entry.next;
        }
    }
    LIVE.lock.unlock();
    let mut gone = [false; REAP_BATCH];
    for (i, &(_, ids, _, _)) in looked[..n].iter().enumerate() {
        gone[i] = !crate::os::thread_exists(ids);
    }
    let mut reaped = [ptr::null_mut::<Heap>(); REAP_BATCH];
    let mut r = 0;
    LIVE.lock.lock();
    // SAFETY: the lock is held. A heap still listed with the same ids and
    // generation is the listing looked at: its thread's exit hook has not
    // run (it would have unlisted it), and for a thread found gone it never
    // will, so the heap is ours once unlisted.
    unsafe {
        for (i, &(heap, ids, generation, due)) in looked[..n].iter().enumerate() {
            if (*heap).live.ids != ids || (*heap).live.generation != generation {
                continue;
            }
            if gone[i] {
                live_unlink(heap);
                reaped[r] = heap;
                r += 1;
            } else if due && (*heap).live.exiting {
                // In its exit (its hook put off), still running other
                // destructors: looked at again.
                (*heap).live.listed_ms = now;
                next = next.min(now + LIVE_CHECK_MS);
            } else if due {
                // Alive a second after its listing: an ordinary thread.
                (*heap).live.checked = true;
            } else {
                // Alive at an early, forced look (`collect`): it may be one
                // that is dying right now, looked at again when due. The
                // pass that forced the look cleared the deadline that
                // asked for it: asked for again.
                next = next.min((*heap).live.listed_ms + LIVE_CHECK_MS);
            }
        }
    }
    LIVE.lock.unlock();
    for &heap in &reaped[..r] {
        // SAFETY: unlisted above: its thread is gone, and nothing else
        // uses a thread heap.
        unsafe { super::abandon::heap_abandon(heap) };
    }
    next
}

/// `fork` prepare: hold the list's lock across the fork.
#[cfg(not(hakmem_loom))]
pub(crate) fn lock_live() {
    LIVE.lock.lock();
}

/// `fork` parent: release what `lock_live` took.
#[cfg(not(hakmem_loom))]
pub(crate) fn unlock_live() {
    LIVE.lock.unlock();
}

/// `fork` child: only the forking thread exists here, with new kernel ids;
/// the list is made anew with its heap alone (the other threads' heaps are
/// left as they are, never looked for: they may have been in the middle of
/// anything at the fork). Releases what `lock_live` took.
#[cfg(not(hakmem_loom))]
pub(crate) fn live_fork_child(heap: *mut Heap) {
    // SAFETY: the child is alone and holds the lock.
    unsafe { *LIVE.head.get() = ptr::null_mut() };
    LIVE.lock.unlock();
    if !crate::thread::heap::is_static_heap(heap) {
        // SAFETY: the calling (only) thread's heap, on no list now.
        unsafe { live_add(heap) };
    }
}
