//! A live block's data never looks freed.
//!
//! hakmem marks a freed block by writing a value into its second word.
//! That value was the address of the block's page entry in the segment
//! header, which a program can produce without ever holding a pointer into
//! the header: `p ^ size`, a tagged or offset pointer. hakmem-bench's
//! `rethread` workload stores `size ^ p` there, and one run in a few
//! aborted with "hakmem: free(): double free" on a live block of 64-256
//! KiB. Here every address of a block's segment header (the only place a
//! page entry can be) is written into the second word of live blocks, small
//! and large, and each must still pass the pointer check and be freed
//! normally. The scenario runs in a child with `HAKMEM_ON_ERROR=warn`, so a
//! false report is counted instead of aborting.

use hakmem_core::Hakmem;
use std::process::Command;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

/// Writes each 8-byte-aligned address of `p`'s segment header into `p`'s
/// second word and counts the values `check_block` takes for a freed mark.
fn false_marks(p: *mut u8, header: usize) -> usize {
    let segment = p as usize & !(hakmem_core::SEGMENT_SIZE - 1);
    let mut wrong = 0;
    for offset in (0..header).step_by(8) {
        // SAFETY: p is a live block of at least 16 bytes.
        unsafe {
            p.add(8).cast::<usize>().write(segment + offset);
            if !hakmem_core::check_block(p, "free") {
                wrong += 1;
            }
        }
    }
    wrong
}

#[test]
#[ignore = "run by live_data_never_looks_freed, in a child"]
fn child_live_data_never_looks_freed() {
    let header = hakmem_core::PAGE_SIZE;
    let mut wrong = 0;
    // Small, medium and large blocks (a large one spans pages: its page
    // entry is not the first).
    for size in [16, 100, 1024, 20_000, 100_000, 300_000] {
        for _ in 0..4 {
            let p = hakmem_core::malloc(size);
            assert!(!p.is_null());
            wrong += false_marks(p, header);
            // SAFETY: p is live, allocated above, freed once. Its second
            // word still holds the last candidate value.
            unsafe { hakmem_core::free(p) };
        }
    }
    println!("FREED_MARK wrong={wrong}");
}

#[test]
fn live_data_never_looks_freed() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "child_live_data_never_looks_freed",
        ])
        .env("HAKMEM_ON_ERROR", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("FREED_MARK wrong=0"), "{stdout}\n{stderr}");
    assert!(!stderr.contains("hakmem:"), "{stderr}");
}
