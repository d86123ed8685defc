//! The caller's stack for a sample: the return addresses of the frames
//! above, found from the DWARF call-frame information (`.eh_frame`) every
//! x86-64 object carries — so C programs built at -O2 without frame
//! pointers unwind as well as Rust programs. On x86-64 with glibc the
//! profiler's own walk does it (cfi.rs: each return address's rule read
//! once and cached, a few loads per frame); where that walk meets a frame
//! it does not follow, libgcc's `_Unwind_Backtrace` walks the whole stack
//! (about 1 500 instructions a frame) if it safely can, else the stack
//! ends there. Other targets have only libgcc's walk, and with it the
//! risk below.
//!
//! Safe inside an allocator: the own walk finds unwind tables without
//! libgcc (cfi.rs) and keeps its state on the stack, and libgcc walks only
//! a stack none of whose frames the own walk found lies in libgcc: a
//! thread inside the unwinder may hold libgcc's lock (`libgcc_may_walk`).
//! Nothing here takes a hakmem lock, so a `malloc` libgcc makes during
//! its walk is an ordinary allocation (the heap's `busy` flag keeps it
//! from being sampled in turn), and a `fork` or `dlopen` in another thread
//! waits for nothing of ours. On targets without the own walk a sample
//! taken inside libgcc (a C++ `throw` in a program with registered
//! tables) can still wait for libgcc's lock.

use crate::sync::plain::AtomicUsize;
use crate::sync::Ordering;
use core::ffi::{c_int, c_void};

/// Stacks captured, and how many of them libgcc walked (statistics).
pub(super) static WALKS: AtomicUsize = AtomicUsize::new(0);
pub(super) static LIBGCC_WALKS: AtomicUsize = AtomicUsize::new(0);

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
    // SAFETY: arg is libgcc_walk's `Trace`; context the current frame.
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
    // Relaxed: statistics counters.
    WALKS.fetch_add(1, Ordering::Relaxed);
    let len = match fast_walk(&mut all) {
        Ok(len) => len,
        Err(walked) if libgcc_may_walk(&all[..walked]) => {
            // Relaxed: as above.
            LIBGCC_WALKS.fetch_add(1, Ordering::Relaxed);
            libgcc_walk(&mut all)
        }
        // The stack as far as the own walk went.
        Err(walked) => walked,
    };
    let ours = all[..len].iter().take_while(|&&ip| in_allocator(ip)).count();
    let kept = (len - ours).min(frames.len());
    frames[..kept].copy_from_slice(&all[ours..ours + kept]);
    kept
}

/// The profiler's own walk with its cached rules (cfi.rs): the frames,
/// or `Err` with those it found before a frame it does not follow.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
#[inline(always)]
fn fast_walk(frames: &mut [usize]) -> Result<usize, usize> {
    super::cfi::walk(frames)
}

#[cfg(not(all(target_arch = "x86_64", target_env = "gnu")))]
#[inline(always)]
fn fast_walk(_frames: &mut [usize]) -> Result<usize, usize> {
    Err(0)
}

/// Whether libgcc may walk a stack whose inner frames are `walked`: not
/// when one of them lies in libgcc itself. The thread is then inside the
/// unwinder (a C++ `throw`, `backtrace()`), which may hold its lock and
/// allocate under it (sorting the tables of code registered with
/// `__register_frame`): libgcc's walk, asking for the lock again, would
/// wait for good (found by review). Where libgcc is linked into the
/// object holding hakmem (a static executable) its frames cannot be told
/// from the program's: never there.
#[cfg(all(target_arch = "x86_64", target_env = "gnu"))]
fn libgcc_may_walk(walked: &[usize]) -> bool {
    let find = super::cfi::find_object;
    let (Some(libgcc), Some(ours)) = (
        find(_Unwind_Backtrace as *const () as usize),
        find(capture as *const () as usize),
    ) else {
        return false;
    };
    // A return address's call lies before it.
    libgcc != ours
        && !walked
            .iter()
            .any(|&ip| (libgcc.start..libgcc.end).contains(&ip.wrapping_sub(1)))
}

#[cfg(not(all(target_arch = "x86_64", target_env = "gnu")))]
fn libgcc_may_walk(_walked: &[usize]) -> bool {
    true
}

/// libgcc's walk: every rule DWARF has, at about 1 500 instructions a
/// frame.
#[inline(never)]
#[link_section = "hakmem_text"]
pub(super) fn libgcc_walk(frames: &mut [usize]) -> usize {
    let mut trace = Trace { frames, len: 0 };
    // SAFETY: step only writes within trace.frames; trace outlives the call.
    unsafe { _Unwind_Backtrace(step, (&raw mut trace).cast()) };
    trace.len
}

#[cfg(all(test, target_arch = "x86_64", target_env = "gnu"))]
mod tests {
    extern crate std;
    use super::*;

    /// Both walks from the same function: their frames from its caller
    /// outward (each walk's own frame and its return into `both` differ).
    #[inline(never)]
    fn both() -> ([usize; 80], usize, [usize; 80], usize) {
        let mut fast = [0usize; 80];
        let mut slow = [0usize; 80];
        let n = super::super::cfi::walk(&mut fast).expect("the walk follows a test's stack");
        let m = libgcc_walk(&mut slow);
        core::hint::black_box((fast, n, slow, m))
    }

    #[inline(never)]
    fn nested(depth: u32) -> ([usize; 80], usize, [usize; 80], usize) {
        if depth == 0 {
            return both();
        }
        let r = nested(core::hint::black_box(depth - 1));
        core::hint::black_box(r)
    }

    #[test]
    fn the_cached_walk_agrees_with_libgcc() {
        let _serial = super::super::cfi::tests::SERIAL.lock();
        for round in 0..3 {
            let (fast, n, slow, m) = nested(5);
            assert!(n > 8 && m > 8, "stacks of {n} and {m} frames");
            assert_eq!(
                &fast[2..n],
                &slow[2..m],
                "round {round}: frames differ from the caller of `both` outward"
            );
        }
        // From another thread (its stack bounded by its descriptor).
        std::thread::spawn(|| {
            let (fast, n, slow, m) = nested(3);
            assert!(n > 6, "{n} frames");
            assert_eq!(&fast[2..n], &slow[2..m]);
        })
        .join()
        .unwrap();
    }

    #[inline(never)]
    fn walked() -> ([usize; 80], usize) {
        let mut frames = [0usize; 80];
        let n = super::super::cfi::walk(&mut frames).expect("the walk follows a test's stack");
        core::hint::black_box((frames, n))
    }

    #[inline(never)]
    fn poisoned_caller() -> ([usize; 80], usize) {
        let r = walked();
        core::hint::black_box(r)
    }

    #[test]
    fn a_wrong_rule_never_reads_off_the_stack() {
        // Serial with the other tests that fill the cache: a rule they
        // cache in the poisoned slot would replace the poison.
        let _serial = super::super::cfi::tests::SERIAL.lock();
        use super::super::cfi::{poison, same_slot, Rule};
        let (frames, n) = poisoned_caller();
        assert!(n > 4, "{n} frames");
        // The frame to poison: frames[1] unless a lookup made before it
        // (the walk's own address) shares its slot (one layout in 4 096,
        // by ASLR) and would replace the poison; then frames[2].
        let k = if same_slot(frames[0], frames[1] - 1) { 2 } else { 1 };
        // frames[k] returns into `walked` (or `poisoned_caller`), whose
        // rule finds its caller: give it rules that put the caller's frame
        // far above the stack's top, below the stack pointer, and its
        // saved rbp below it. The walk keeps the k + 1 frames it had and
        // stops.
        let ra = frames[k];
        for rule in [
            Rule::Frame {
                from_rbp: false,
                cfa_off: 1 << 30,
                ra_off: -8,
                rbp_off: None,
            },
            Rule::Frame {
                from_rbp: false,
                cfa_off: -64,
                ra_off: -8,
                rbp_off: None,
            },
            Rule::Frame {
                from_rbp: false,
                cfa_off: 16,
                ra_off: -8,
                rbp_off: Some(i16::MIN),
            },
        ] {
            let restore = poison(ra - 1, rule);
            let (_, m) = poisoned_caller();
            restore();
            assert_eq!(m, k + 1, "{rule:?}");
        }
        let (again, m) = poisoned_caller();
        // (frames[3] is the return into this test: another call site.)
        assert_eq!(&again[1..3], &frames[1..3]);
        assert_eq!(&again[4..m], &frames[4..n], "the real rule back");
    }

    /// The own walk's result in the handler, whether libgcc may take over
    /// there, and libgcc's frame count.
    type InHandler = (Result<usize, usize>, bool, usize);
    static IN_HANDLER: std::sync::Mutex<Option<InHandler>> = std::sync::Mutex::new(None);

    extern "C" fn on_signal(_: c_int) {
        let mut fast = [0usize; 80];
        let mut slow = [0usize; 80];
        let walked = super::super::cfi::walk(&mut fast);
        let may = libgcc_may_walk(&fast[..walked.unwrap_or_else(|inner| inner)]);
        let m = libgcc_walk(&mut slow);
        *IN_HANDLER.lock().unwrap() = Some((walked, may, m));
    }

    /// A signal frame (`__restore_rt`: the kernel's frame, a rule of
    /// expressions) is one the walk gives to libgcc, which goes on through
    /// it to the interrupted code.
    #[test]
    fn a_signal_frame_is_left_to_libgcc() {
        let _serial = super::super::cfi::tests::SERIAL.lock();
        // SIGURG is ignored by default, and no other test uses it.
        // SAFETY: installs a handler for SIGURG, then raises it here.
        unsafe {
            let mut action: libc::sigaction = core::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            assert_eq!(libc::sigaction(libc::SIGURG, &action, core::ptr::null_mut()), 0);
            assert_eq!(libc::raise(libc::SIGURG), 0);
        }
        let (walked, may, m) = IN_HANDLER.lock().unwrap().take().expect("the handler ran");
        assert!(walked.is_err(), "the walk gives way at the signal frame: {walked:?}");
        assert!(may, "no frame of libgcc's among the walked ones: libgcc may walk");
        assert!(m > 6, "libgcc goes through it: {m} frames");
    }
}
