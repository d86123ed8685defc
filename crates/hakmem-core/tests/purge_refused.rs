//! Issue 22, hole 2: a purge the OS refuses leaves memory dirty.
//!
//! After `mlockall(MCL_CURRENT | MCL_FUTURE)` every `madvise(MADV_DONTNEED)`
//! fails with `EINVAL` (locked pages cannot be dropped), as it may under a
//! seccomp filter. Blocks of every size range are filled, freed and
//! trimmed (`collect(true)`, C's `malloc_trim`), so hakmem tries to purge
//! them; then `alloc_zeroed` asks for the same sizes again. Each block
//! must be all zero: memory whose purge was refused still holds the old
//! bytes and must be cleared, not taken for fresh. (Before the fix every
//! range came back dirty: the purge's result was ignored and the range
//! counted as zero.) The `secure` build runs the same, and its `free` of
//! those blocks must not take an old freed mark for a double free.
//!
//! The work runs in a child process (this binary again, one ignored test),
//! since `mlockall` locks everything the process maps from then on.

use hakmem_core::Hakmem;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// Small, medium, large (a span), huge in the arena, huge on its own.
const SIZES: [usize; 6] = [48, 1000, 20_000, 300_000, 5 << 20, 80 << 20];

/// Blocks of each size: enough that whole pages and segments empty.
fn count(size: usize) -> usize {
    ((4 << 20) / size).clamp(2, 4096)
}

/// Fills `len` bytes at `p` so that any block later carved over them
/// shows it: every 16-byte chunk is `0xAB` in its first word and zero in
/// its second (where a free block's mark lives, which a never-used block
/// has as zero).
///
/// # Safety
/// `[p, p + len)` must be writable.
unsafe fn fill(p: *mut u8, len: usize) {
    for chunk in (0..len).step_by(16) {
        let n = (len - chunk).min(16);
        for i in 0..n {
            // SAFETY: the caller's guarantee.
            unsafe { *p.add(chunk + i) = if i < 8 { 0xAB } else { 0 } };
        }
    }
}

#[test]
#[ignore = "run as a child by calloc_is_zero_after_refused_purges"]
fn refused_purges_child() {
    // SAFETY: mlockall has no memory-safety preconditions.
    let locked = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    assert_eq!(locked, 0, "mlockall: {}", std::io::Error::last_os_error());
    // Keeps the huge arena's first region mapped: emptied, it would be
    // unmapped whole, and its units would come back fresh.
    let pin = hakmem_core::malloc(3 << 20);
    let mut dirty = Vec::new();
    for round in 0..2 {
        for &size in &SIZES {
            let n = count(size);
            let blocks: Vec<usize> = (0..n)
                .map(|_| {
                    let p = hakmem_core::malloc(size);
                    assert!(!p.is_null());
                    // SAFETY: p is a live block of `size` bytes.
                    unsafe { fill(p, size) };
                    p as usize
                })
                .collect();
            for &p in &blocks {
                // SAFETY: live blocks of this allocator, freed once.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
            hakmem_core::collect(true);
            let again: Vec<usize> = (0..n)
                .map(|_| {
                    let p = hakmem_core::alloc_zeroed(size, 16);
                    assert!(!p.is_null());
                    // SAFETY: p is a live block of `size` bytes.
                    let bytes = unsafe { std::slice::from_raw_parts(p, size) };
                    if let Some(at) = bytes.iter().position(|&b| b != 0) {
                        dirty.push(format!(
                            "round {round}: alloc_zeroed({size}) at {p:p}: byte {at} is {:#x}",
                            bytes[at]
                        ));
                    }
                    p as usize
                })
                .collect();
            for &p in &again {
                // SAFETY: as above.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
        }
    }
    // SAFETY: a live block, freed once.
    unsafe { hakmem_core::free(pin) };
    dirty.dedup_by_key(|line| line.split(" at ").next().unwrap().to_string());
    assert!(dirty.is_empty(), "blocks with old bytes:\n{}", dirty.join("\n"));
    let os = hakmem_core::os_counters();
    assert!(os.failed_purges > 0, "the purges were refused and counted: {os:?}");
    println!("failed_purges={}", os.failed_purges);
}

#[test]
fn calloc_is_zero_after_refused_purges() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "refused_purges_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("failed_purges="), "{stdout}");
}
