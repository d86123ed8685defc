//! Valgrind's client-request sequence on x86-64 (the `valgrind` feature;
//! check/valgrind.rs says what hakmem tells memcheck with it). Here, with
//! the rest of the crate's assembly, for either thread binding.

/// Valgrind's client request: `args[0]` the request, `args[1..]` its
/// arguments; returns valgrind's answer, or 0 when not running under
/// valgrind (the sequence is then a no-op).
#[inline(always)]
pub(crate) fn client_request(args: [usize; 6]) -> usize {
    let result: usize;
    // SAFETY: valgrind.h's amd64 sequence: four rotates of rdi by 128
    // bits in all (rdi unchanged), then `xchg rbx, rbx` (rbx
    // unchanged). On a real processor it changes nothing but the
    // flags; under valgrind it is the request, which reads `args`
    // (kept alive across the asm) and writes only rdx.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") 0usize => result,
            in("rax") args.as_ptr(),
            options(nostack),
        );
    }
    result
}
