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

/// `secure` builds put a freed huge block's mapping in quarantine: out of
/// the map and `PROT_NONE` at once (a dangling pointer faults, the misuse
/// tests of hakmem-ffi check that), handed out again only after 8 more
/// huge frees, zeroed — so a program cycling through 100 KiB buffers is
/// not an mmap, two mprotects and an munmap per buffer.
#[test]
#[cfg_attr(not(feature = "secure"), ignore = "the secure build's rule")]
fn secure_builds_quarantine_a_freed_huge_block_and_reuse_it_later_zeroed() {
    if hakmem_core::config().purge_delay_ms <= 0 {
        return; // no huge cache without a purge delay
    }
    // Kept resident and zeroed on reuse; purged as it goes in.
    for size in [100 << 10, 1 << 20] {
        quarantine_cycle(size);
    }
}

fn quarantine_cycle(size: usize) {
    let first = hakmem_core::malloc(size);
    assert!(!first.is_null());
    fill(first, size);
    let before = hakmem_core::os_counters();
    // SAFETY: first is a live block, freed once.
    unsafe { hakmem_core::free(first) };
    assert_eq!(
        hakmem_core::os_counters().munmap,
        before.munmap,
        "quarantined, not unmapped"
    );

    // Fewer than 8 huge frees later it is not handed out again.
    let mut held = Vec::new();
    for _ in 0..7 {
        let p = hakmem_core::malloc(size);
        assert!(!p.is_null());
        assert_ne!(p, first, "handed out again before 8 more huge frees");
        fill(p, size);
        held.push(p);
    }
    for p in held.drain(..) {
        // SAFETY: p is a live block, freed once.
        unsafe { hakmem_core::free(p) };
    }

    // Cycling: mappings come back out of quarantine, zeroed.
    let before = hakmem_core::os_counters();
    let mut seen_first = false;
    for _ in 0..200 {
        let p = hakmem_core::malloc(size);
        assert!(!p.is_null());
        seen_first |= p == first;
        // SAFETY: p is a live block of size bytes.
        let bytes = unsafe { std::slice::from_raw_parts(p, size) };
        assert!(bytes.iter().all(|&b| b == 0), "a reused block shows old data");
        fill(p, size);
        held.push(p);
        if held.len() == 2 {
            for p in held.drain(..) {
                // SAFETY: p is a live block, freed once.
                unsafe { hakmem_core::free(p) };
            }
        }
    }
    for p in held.drain(..) {
        // SAFETY: p is a live block, freed once.
        unsafe { hakmem_core::free(p) };
    }
    let after = hakmem_core::os_counters();
    assert!(seen_first, "the first mapping was never reused");
    // A request no release could serve leaves the quarantine alone.
    let before_absurd = hakmem_core::os_counters();
    assert!(hakmem_core::malloc(1 << 47).is_null(), "a 128 TiB block");
    assert_eq!(
        hakmem_core::os_counters().munmap,
        before_absurd.munmap,
        "a failed 128 TiB request emptied the quarantine"
    );
    assert!(
        after.mmap - before.mmap <= 16,
        "{} mmap calls for 200 buffers: the quarantine does not serve them",
        after.mmap - before.mmap
    );
}

#[test]
#[cfg_attr(feature = "secure", ignore = "secure builds quarantine huge mappings instead")]
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

/// A purged cached mapping keeps its block's freed mark (for the double
/// free check), written back after the purge: handed out again as known
/// zero, every byte of it must read zero, the mark's included.
#[test]
#[cfg_attr(feature = "secure", ignore = "secure builds quarantine huge mappings instead")]
fn a_purged_huge_mapping_comes_back_all_zero() {
    if hakmem_core::config().purge_delay_ms <= 0 {
        return; // no huge cache without a purge delay
    }
    let size = 6 * MIB;
    let p = hakmem_core::malloc(size);
    assert!(!p.is_null());
    // SAFETY: p is a live block of `size` bytes.
    unsafe { p.write_bytes(0xff, size) };
    // SAFETY: p is a live block, freed once.
    unsafe { hakmem_core::free(p) };
    hakmem_core::collect(true);
    let q = hakmem_core::alloc_zeroed(size, 16);
    assert_eq!(q, p, "the purged mapping is reused");
    // SAFETY: q is a live block of `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(q, size) };
    assert_eq!(bytes.iter().position(|&b| b != 0), None, "calloc of a purged mapping");
    // SAFETY: q is a live block, freed once.
    unsafe { hakmem_core::free(q) };
}
