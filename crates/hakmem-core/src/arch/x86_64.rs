//! x86-64: the thread's heap pointer in a TLS slot read with two
//! instructions, and the free fast paths' tests as compares against memory.
//!
//! The heap pointer lives in one 8-byte thread-local slot, defined with
//! `global_asm!` and accessed in inline assembly, so it is the same code in
//! an executable, in `libhakmem.so` loaded with `LD_PRELOAD`, and in a
//! static library — on stable Rust, without `std`. The slot is initialised
//! to the static empty heap, so the fast path never asks "initialised?":
//! it misses into the slow path, which gives the thread a heap.
//!
//! The access sequence is the TLS model:
//!
//! * default, *initial-exec*: `mov reg, [rip + slot@GOTTPOFF]; mov reg,
//!   fs:[reg]`. A `thread_local!` in a cdylib would use the general-dynamic
//!   model (a call to `__tls_get_addr` on every malloc and free;
//!   docs/BENCHMARKS.md has the measurement). The slot comes from the
//!   static TLS block, so a library holding it carries the `STATIC_TLS`
//!   flag: loaded with `dlopen` after start-up it takes glibc's small
//!   static-TLS surplus, and fails to load once that is used up.
//! * feature `dlopen-tls`, *TLS descriptors* (TLSDESC, the "GNU2" dialect):
//!   `lea rax, [rip + slot@TLSDESC]; call [rax]; mov reg, fs:[rax]`. The
//!   dynamic linker resolves the descriptor to a two-instruction function
//!   returning the slot's offset when the module's TLS is in the static
//!   block (a library loaded at start-up, or one glibc could still fit
//!   there), and otherwise to one that finds the dynamically allocated
//!   block; either way no `STATIC_TLS` flag, so `dlopen` never fails for
//!   it. In an executable the linker relaxes it to the local-exec
//!   sequence. The call needs the stack, so the fast paths may get a
//!   frame; docs/BENCHMARKS.md has the cost.

use crate::small::page::Page;
use crate::sync::MapEntry;
use crate::thread::heap::{Heap, EMPTY_HEAP};

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
#[cfg(not(feature = "dlopen-tls"))]
#[inline(always)]
pub(crate) fn thread_heap() -> *mut Heap {
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
#[cfg(not(feature = "dlopen-tls"))]
pub(crate) fn set_thread_heap(heap: *mut Heap) {
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

/// The TLS descriptor call, `$op` after it (with the slot's offset from
/// the thread pointer in rax), and what the call may change besides rax
/// and the flags: the vector and x87 registers. The TLSDESC ABI promises
/// every other register preserved, and glibc's integer-register saves keep
/// that promise; but before glibc 2.40 its `_dl_tlsdesc_dynamic` (the
/// descriptor of a module whose TLS is placed dynamically) calls
/// `__tls_get_addr` — and through it `malloc` — on a thread's first access
/// without saving the vector registers (glibc bug 31372; Debian 12 has
/// 2.36). Declared clobbered, they are saved by the compiler only where a
/// value is live across the call (a caller's floating-point values, with
/// the fast path inlined into it: tests/dlopen_plugins.rs).
#[cfg(all(feature = "dlopen-tls", not(target_feature = "avx512f")))]
macro_rules! tls_descriptor_asm {
    ($op:literal, $($operands:tt)*) => {
        core::arch::asm!(
            "lea rax, [rip + hakmem_core_0_1_thread_heap@TLSDESC]",
            "call qword ptr [rax + hakmem_core_0_1_thread_heap@TLSCALL]",
            $op,
            $($operands)*
            out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
            out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
            out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
            out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
            out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
            out("mm0") _, out("mm1") _, out("mm2") _, out("mm3") _,
            out("mm4") _, out("mm5") _, out("mm6") _, out("mm7") _,
        )
    };
}

/// `tls_descriptor_asm` where AVX-512 is on (`-C target-cpu=...`): its
/// sixteen more vector registers and mask registers too (glibc's AVX-512
/// string functions use them).
#[cfg(all(feature = "dlopen-tls", target_feature = "avx512f"))]
macro_rules! tls_descriptor_asm {
    ($op:literal, $($operands:tt)*) => {
        core::arch::asm!(
            "lea rax, [rip + hakmem_core_0_1_thread_heap@TLSDESC]",
            "call qword ptr [rax + hakmem_core_0_1_thread_heap@TLSCALL]",
            $op,
            $($operands)*
            out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
            out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
            out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
            out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
            out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
            out("k1") _, out("k2") _, out("k3") _, out("k4") _,
            out("k5") _, out("k6") _, out("k7") _,
            out("st(0)") _, out("st(1)") _, out("st(2)") _, out("st(3)") _,
            out("st(4)") _, out("st(5)") _, out("st(6)") _, out("st(7)") _,
            out("mm0") _, out("mm1") _, out("mm2") _, out("mm3") _,
            out("mm4") _, out("mm5") _, out("mm6") _, out("mm7") _,
        )
    };
}

/// The calling thread's heap (the static empty heap until its first allocation).
#[cfg(feature = "dlopen-tls")]
#[inline(always)]
pub(crate) fn thread_heap() -> *mut Heap {
    let heap: *mut Heap;
    // SAFETY: the TLS descriptor sequence for the slot defined above: the
    // linker and the dynamic linker fill in the descriptor, whose function
    // returns the slot's offset from the thread pointer in rax and
    // preserves every other general register (the TLSDESC ABI; it may
    // change the flags, and the vector registers, declared clobbered by
    // the macro). The call uses the stack (no `nostack`, so the compiler
    // keeps it aligned and leaves the red zone alone) and may write memory
    // (the dynamic case allocates the module's TLS block on first use).
    unsafe {
        tls_descriptor_asm!("mov rax, qword ptr fs:[rax]", out("rax") heap,);
    }
    heap
}

/// Points the calling thread's slot at `heap`.
#[cfg(feature = "dlopen-tls")]
pub(crate) fn set_thread_heap(heap: *mut Heap) {
    // SAFETY: as in `thread_heap`; the store goes to this thread's slot.
    unsafe {
        tls_descriptor_asm!("mov qword ptr fs:[rax], {h}", h = in(reg) heap, out("rax") _,);
    }
}

/// `fork` prepare: nothing to hold (the slot is set without a lock).
pub(crate) fn fork_lock() {}

/// `fork` parent/child: nothing was held.
pub(crate) fn fork_unlock() {}

/// Whether `page` is queued in `heap` (its `local_owner` is `heap`): the
/// free fast path's owner test, as one compare against memory and a
/// branch (a Rust atomic load is not folded into the compare).
///
/// # Safety
/// `page` must point to a valid `Page`.
#[inline(always)]
pub(crate) unsafe fn owned_by(page: *const Page, heap: *mut Heap) -> bool {
    // An aligned x86 load is atomic in hardware, as the Relaxed load it
    // replaces.
    // SAFETY: page is valid (caller): the 8 bytes read are `local_owner`'s.
    unsafe {
        core::arch::asm!(
            "cmp qword ptr [{page} + {owner}], {heap}",
            "jne {other}",
            page = in(reg) page,
            owner = const core::mem::offset_of!(Page, local_owner),
            heap = in(reg) heap,
            other = label { return false; },
            options(nostack, readonly),
        );
    }
    true
}

/// Whether entry `index` of the segment map `map` is set: one compare of
/// the map byte against memory and a branch. An atomic load in Rust would
/// be a load, a test and the branch (the compiler does not fold atomic
/// loads into other instructions); on the checked `free` path that
/// instruction is worth saving.
///
/// # Safety
/// `map.add(index)` must be an entry of the map.
#[inline(always)]
pub(crate) unsafe fn map_entry_is_set(map: *const MapEntry, index: usize) -> bool {
    // Ordering: an x86 byte load is atomic and has acquire ordering in
    // hardware, like the Acquire load it replaces (pairs with map_set's
    // Release store); the asm is not `readonly`, so the compiler moves no
    // later load above it.
    // SAFETY: the caller guarantees the byte is the map's.
    unsafe {
        core::arch::asm!(
            "cmp byte ptr [{map} + {slot}], 0",
            "je {absent}",
            map = in(reg) map,
            slot = in(reg) index,
            absent = label { return false; },
            options(nostack),
        );
    }
    true
}
