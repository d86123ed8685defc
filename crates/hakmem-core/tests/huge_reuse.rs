//! A freed huge block's mapping serves the next huge request of any size
//! (issue 15, the "huge" shape: 5-25 MiB buffers replaced at random): the
//! closest cached mapping is shrunk in place or grown, and the pages it
//! already has stay resident — no fresh mapping, no page faults for them.
//! Its own binary: the huge cache is process-wide.

use hakmem_core::Hakmem;

#[global_allocator]
static GLOBAL: Hakmem = Hakmem;

const MIB: usize = 1 << 20;

fn fill(p: *mut u8, len: usize) {
    // SAFETY: p is a live block of at least len bytes.
    unsafe { p.write_bytes(0x5a, len) };
}

/// Whether the first `len` bytes still hold the fill (the pages were
/// reused as they were, not replaced by fresh zero pages).
fn still_filled(p: *const u8, len: usize) -> bool {
    // SAFETY: p is a live block of at least len bytes.
    (0..len).step_by(4096).all(|i| unsafe { *p.add(i) } == 0x5a)
}

/// `secure` builds cache no huge mapping: a freed huge block is unmapped
/// at once, so a dangling pointer into it faults.
#[test]
#[cfg_attr(not(feature = "secure"), ignore = "the secure build's rule")]
fn secure_builds_unmap_a_freed_huge_block_at_once() {
    let big = hakmem_core::malloc(20 * MIB);
    assert!(!big.is_null());
    let before = hakmem_core::os_counters();
    // SAFETY: big is a live block, freed once.
    unsafe { hakmem_core::free(big) };
    let after = hakmem_core::os_counters();
    assert!(after.munmap > before.munmap, "unmapped, not cached");
}

#[test]
#[cfg_attr(feature = "secure", ignore = "secure builds cache no huge mappings")]
fn a_cached_huge_mapping_serves_smaller_and_larger_requests_with_its_pages() {
    if hakmem_core::config().purge_delay_ms <= 0 {
        return; // no huge cache without a purge delay
    }
    let big = hakmem_core::malloc(20 * MIB);
    assert!(!big.is_null());
    fill(big, 20 * MIB);
    // SAFETY: big is a live block, freed once.
    unsafe { hakmem_core::free(big) };

    // Much smaller: the same mapping, shrunk where it is (an mremap, no
    // mmap; a mapping up to 4 times the size asked serves as it is).
    let before = hakmem_core::os_counters();
    let small = hakmem_core::malloc(4 * MIB);
    let after = hakmem_core::os_counters();
    assert_eq!(small, big, "the cached mapping is reused in place");
    assert_eq!(after.mmap, before.mmap, "no fresh mapping");
    assert!(after.mremap > before.mremap, "shrunk with mremap");
    assert!(still_filled(small, 4 * MIB), "its pages were kept");
    // SAFETY: small is a live block of at least 4 MiB.
    let usable = unsafe { hakmem_core::usable_size(small) };
    assert!(usable < 6 * MIB, "the tail went back");
    fill(small, 4 * MIB);
    // SAFETY: small is a live block, freed once.
    unsafe { hakmem_core::free(small) };

    // A similar size: the same mapping as it is.
    let before = hakmem_core::os_counters();
    let again = hakmem_core::malloc(3 * MIB);
    assert_eq!(again, small, "the freed mapping is reused");
    assert_eq!(hakmem_core::os_counters(), before, "as it is: no system call");
    assert!(still_filled(again, 3 * MIB));
    // SAFETY: again is a live block, freed once.
    unsafe { hakmem_core::free(again) };

    // Larger: the same pages, grown in place or moved with mremap; only
    // what lies beyond them is new.
    let large = hakmem_core::malloc(24 * MIB);
    assert!(!large.is_null());
    assert!(still_filled(large, 4 * MIB), "the first 4 MiB are the old pages");
    // SAFETY: large is a live block of 24 MiB.
    unsafe {
        assert_eq!(*large.add(24 * MIB - 1), 0, "the added part is fresh");
        hakmem_core::free(large);
    }
}
