//! Thread binding: the thread-local heap pointer and the thread-exit hook.
//!
//! The heap pointer lives in one 8-byte thread-local slot, accessed with the
//! *initial-exec* TLS model (`mov reg, [rip + slot@GOTTPOFF]; mov reg,
//! fs:[reg]`), written in inline assembly so it is the same two instructions
//! in an executable, in `libhakmem.so` loaded with `LD_PRELOAD`, and in a
//! static library — on stable Rust, without `std`. A `thread_local!` in a
//! cdylib would use the general-dynamic model (a call to `__tls_get_addr` on
//! every malloc and free); docs/DESIGN.md has the measurement. The slot is
//! initialised to the static empty heap, so the fast path never asks
//! "initialised?": it misses into the slow path, which calls `init_heap`.
//!
//! Thread exit is caught with a pthread key destructor (glibc's
//! `pthread_key_create` and `pthread_setspecific` for the first keys do not
//! allocate). The destructor abandons the heap's segments for other threads
//! to reclaim, and leaves the slot pointing at the static *exited* heap: an
//! allocation after that (by another library's key destructor that runs
//! after ours) is served by a heap made for that one allocation and
//! abandoned at once (`heap::alloc_after_exit`), because glibc runs no
//! destructor round after its last one and a heap registered then would
//! never be given up. `fork` is made safe by holding every global lock
//! across it.
//!
//! Under loom the slot is a `loom::thread_local!` and there is no key, no
//! exit hook and no fork: the models call `heap_abandon` themselves.
//!
//! Limits: initial-exec TLS comes from the static TLS surplus when the
//! library is `dlopen`ed after start-up; 8 bytes fit easily, but a process
//! that has exhausted it will fail to load libhakmem.so (as with mimalloc).

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("hakmem-core supports x86_64 Linux only for now (its TLS binding is x86-64 assembly)");

use crate::heap::{self, Heap, EMPTY_HEAP, EXITED_HEAP};
use crate::segment;
use crate::sync::{plain::AtomicUsize, Ordering};
use core::ffi::c_void;

#[cfg(not(hakmem_loom))]
core::arch::global_asm!(
    ".pushsection .tdata,\"awT\",@progbits",
    ".balign 8",
    ".globl hakmem_core_0_1_thread_heap",
    ".hidden hakmem_core_0_1_thread_heap",
    ".type hakmem_core_0_1_thread_heap, @object",
    ".size hakmem_core_0_1_thread_heap, 8",
    "hakmem_core_0_1_thread_heap:",
    ".quad {empty}",
    ".popsection",
    empty = sym EMPTY_HEAP,
);

/// The calling thread's heap (the static empty heap until its first allocation).
#[cfg(not(hakmem_loom))]
#[inline(always)]
pub(crate) fn heap() -> *mut Heap {
    let heap: *mut Heap;
    // SAFETY: reads this thread's TLS slot defined above via the
    // initial-exec sequence; it touches no other memory and no flags.
    unsafe {
        core::arch::asm!(
            "mov {h}, qword ptr [rip + hakmem_core_0_1_thread_heap@GOTTPOFF]",
            "mov {h}, qword ptr fs:[{h}]",
            h = out(reg) heap,
            options(nostack, preserves_flags, readonly),
        );
    }
    heap
}

/// Points the calling thread's slot at `heap`.
#[cfg(not(hakmem_loom))]
pub(crate) fn set_heap(heap: *mut Heap) {
    // SAFETY: writes this thread's TLS slot defined above via the
    // initial-exec sequence; it touches no other memory and no flags.
    unsafe {
        core::arch::asm!(
            "mov {t}, qword ptr [rip + hakmem_core_0_1_thread_heap@GOTTPOFF]",
            "mov qword ptr fs:[{t}], {h}",
            t = out(reg) _,
            h = in(reg) heap,
            options(nostack, preserves_flags),
        );
    }
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
#[cfg(not(hakmem_loom))]
static mut THREAD_KEY: libc::pthread_key_t = 0;

/// Gives the calling thread a heap (slow path of its first allocation).
/// Returns null when no memory for it can be had.
#[cfg(not(hakmem_loom))]
#[cold]
#[inline(never)]
pub(crate) fn init_heap() -> *mut Heap {
    let heap = heap::heap_new();
    if heap.is_null() {
        return heap;
    }
    // Installed first: anything below that allocates (glibc's atfork
    // registration, a second-level key array) finds this heap.
    set_heap(heap);
    process_init();
    // SAFETY: THREAD_KEY was created by process_init, which has completed.
    unsafe { libc::pthread_setspecific(THREAD_KEY, heap as *const c_void) };
    heap
}

#[cfg(not(hakmem_loom))]
fn process_init() {
    // Acquire: pairs with the Release store of INIT_DONE below, so THREAD_KEY is visible.
    if PROCESS_INIT.load(Ordering::Acquire) == INIT_DONE {
        return;
    }
    if PROCESS_INIT
        .compare_exchange(INIT_NONE, INIT_RUNNING, Ordering::Acquire, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: only this thread writes THREAD_KEY (INIT_RUNNING is ours);
        // readers wait for INIT_DONE. The handlers are valid for the process.
        unsafe {
            #[cfg(feature = "secure")]
            crate::page::SECRET.store(crate::os::random_usize(), Ordering::Relaxed);
            libc::pthread_key_create(&raw mut THREAD_KEY, Some(thread_exit));
            libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child));
            if crate::config::config().stats {
                libc::atexit(crate::stats::print_at_exit);
            }
        }
        // Release: publishes THREAD_KEY to the Acquire loads above and below.
        PROCESS_INIT.store(INIT_DONE, Ordering::Release);
    } else {
        while PROCESS_INIT.load(Ordering::Acquire) != INIT_DONE {
            crate::sync::spin_hint();
        }
    }
}

/// pthread key destructor: the thread is exiting.
#[cfg(not(hakmem_loom))]
extern "C" fn thread_exit(value: *mut c_void) {
    let heap = value as *mut Heap;
    // Frees after this point (later destructors) are remote frees; an
    // allocation is served by a heap made and abandoned for it alone (see
    // the module doc).
    set_heap(EXITED_HEAP.get());
    // SAFETY: the key's value is the heap this thread created in init_heap,
    // used by no other thread.
    unsafe { heap::heap_abandon(heap) };
}

#[cfg(not(hakmem_loom))]
extern "C" fn fork_prepare() {
    heap::pool_lock();
    segment::lock_all();
}

#[cfg(not(hakmem_loom))]
extern "C" fn fork_parent() {
    segment::unlock_all();
    heap::pool_unlock();
}

#[cfg(not(hakmem_loom))]
extern "C" fn fork_child() {
    segment::unlock_all();
    heap::pool_unlock();
    heap::fork_child_repair();
}
