//! The caller's stack for a sample: the return addresses of the frames
//! above, found by the system unwinder (libgcc's `_Unwind_Backtrace`),
//! which follows the DWARF call-frame information (`.eh_frame`) every
//! x86-64 object carries — so C programs built at -O2 without frame
//! pointers unwind as well as Rust programs.
//!
//! Safe inside an allocator: libgcc finds each frame's unwind table with
//! glibc's `_dl_find_object` (lock-free, no allocation) and keeps its state
//! on the stack; nothing here takes a hakmem lock, so a `malloc` the
//! unwinder might make (libgcc sorting the tables of an object registered
//! with `__register_frame_info`, the first time) is an ordinary allocation
//! (the heap's `busy` flag keeps it from being sampled in turn), and a
//! `fork` or `dlopen` in another thread waits for nothing of ours.

use core::ffi::{c_int, c_void};

/// Frames kept per sample (the allocator's own frames included: pprof
/// drops them by name, see pprof.rs).
pub(super) const MAX_DEPTH: usize = 64;

#[repr(C)]
struct UnwindContext {
    _opaque: [u8; 0],
}

/// `_URC_NO_REASON`: go on to the next frame.
const URC_NO_REASON: c_int = 0;
/// `_URC_END_OF_STACK`: stop.
const URC_END_OF_STACK: c_int = 5;

type TraceFn = extern "C" fn(*mut UnwindContext, *mut c_void) -> c_int;

// libgcc_s: the unwinder every dynamically linked program on Linux has
// (Rust's std links it too; a statically linked program gets libgcc_eh
// through std's own unwinder).
#[cfg_attr(not(target_feature = "crt-static"), link(name = "gcc_s"))]
extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> c_int;
    fn _Unwind_GetIP(context: *mut UnwindContext) -> usize;
}

struct Trace<'a> {
    frames: &'a mut [usize],
    len: usize,
}

extern "C" fn step(context: *mut UnwindContext, arg: *mut c_void) -> c_int {
    // SAFETY: arg is the `Trace` `capture` passed, alive for the call;
    // context is the unwinder's current frame.
    unsafe {
        let trace = &mut *(arg as *mut Trace);
        let ip = _Unwind_GetIP(context);
        if ip == 0 || trace.len == trace.frames.len() {
            return URC_END_OF_STACK;
        }
        trace.frames[trace.len] = ip;
        trace.len += 1;
    }
    URC_NO_REASON
}

// The bounds of the `hakmem_text` section, which the linker defines for a
// section whose name is a C identifier: the allocator's functions that can
// be on the stack when a sample is recorded (`profiled_entry!`) are placed
// there, so that `capture` can leave them out wherever the allocator is
// linked (libhakmem.so, or a Rust program's own executable).
extern "C" {
    static __start_hakmem_text: u8;
    static __stop_hakmem_text: u8;
}

/// Whether return address `ip` lies in the allocator's own functions (the
/// call instruction before it, strictly: `ip - 1`).
fn in_allocator(ip: usize) -> bool {
    let start = (&raw const __start_hakmem_text) as usize;
    let stop = (&raw const __stop_hakmem_text) as usize;
    let call = ip.wrapping_sub(1);
    start <= call && call < stop
}

/// Fills `frames` with the return addresses of the calling stack,
/// innermost first, from the first frame outside the allocator's own
/// functions (`malloc` and the other entry points stay: pprof drops them
/// by name); returns how many.
#[inline(never)]
#[link_section = "hakmem_text"]
pub(super) fn capture(frames: &mut [usize]) -> usize {
    let mut all = [0usize; MAX_DEPTH + 16];
    let mut trace = Trace {
        frames: &mut all,
        len: 0,
    };
    // SAFETY: step only writes within trace.frames; trace outlives the call.
    unsafe { _Unwind_Backtrace(step, (&raw mut trace).cast()) };
    let len = trace.len;
    let ours = all[..len].iter().take_while(|&&ip| in_allocator(ip)).count();
    let kept = (len - ours).min(frames.len());
    frames[..kept].copy_from_slice(&all[ours..ours + kept]);
    kept
}
