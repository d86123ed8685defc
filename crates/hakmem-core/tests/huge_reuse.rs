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

/// The default build's tests, one after the other: they watch one
/// process-wide arena, and a purge (`collect`) by one would change what
/// the other sees.
#[test]
#[cfg_attr(feature = "secure", ignore = "secure builds quarantine huge mappings instead")]
fn default_builds_reuse_freed_huge_pages() {
    if hakmem_core::config().purge_delay_ms <= 0 {
        return; // freed huge pages are purged at once
    }
    freed_huge_units_serve_smaller_and_larger_requests_with_their_pages();
    // In the arena, and a mapping of its own (above the arena's 64 MiB).
    a_purged_huge_block_comes_back_all_zero(6 * MIB);
    a_purged_huge_block_comes_back_all_zero(80 * MIB);
}

/// Units of a freed 20 MiB block serve a 4 MiB and a 13 MiB request
/// together, with the pages they have (no system call, the old bytes
/// still there), and then a 24 MiB one, whose last units are fresh.
fn freed_huge_units_serve_smaller_and_larger_requests_with_their_pages() {
    let big = hakmem_core::malloc(20 * MIB);
    assert!(!big.is_null());
    fill(big, 20 * MIB);
    // SAFETY: big is a live block, freed once.
    unsafe { hakmem_core::free(big) };

    let before = hakmem_core::os_counters();
    let small = hakmem_core::malloc(4 * MIB);
    let rest = hakmem_core::malloc(13 * MIB);
    assert_eq!(hakmem_core::os_counters(), before, "no system call");
    assert_eq!(small, big, "the freed units are reused");
    let range = big as usize..big as usize + 20 * MIB;
    assert!(range.contains(&(rest as usize)), "so are the units after them");
    assert!(still_filled(small, 4 * MIB), "with their pages");
    assert!(still_filled(rest, 13 * MIB), "with their pages");
    // SAFETY: small is a live block of at least 4 MiB.
    let usable = unsafe { hakmem_core::usable_size(small) };
    assert!(usable < 6 * MIB, "a block takes the units it needs, no more");
    fill(small, 4 * MIB);
    fill(rest, 13 * MIB);
    // SAFETY: small and rest are live blocks, freed once.
    unsafe {
        hakmem_core::free(small);
        hakmem_core::free(rest);
    }

    // Larger: the same pages, merged again; only what lies beyond them is
    // new.
    let large = hakmem_core::malloc(24 * MIB);
    assert_eq!(large, big);
    assert!(still_filled(large, 4 * MIB), "the first 4 MiB are the old pages");
    // SAFETY: large is a live block of 24 MiB.
    unsafe {
        assert_eq!(*large.add(24 * MIB - 1), 0, "the added part is fresh");
        hakmem_core::free(large);
    }
}

/// A purged freed huge block (in the arena, or a cached mapping, which
/// keeps its freed mark for the double free check, written back after
/// the purge), handed out again as known zero, reads zero in every byte.
fn a_purged_huge_block_comes_back_all_zero(size: usize) {
    // A live block keeps the arena's region mapped through the purge (an
    // empty region is unmapped).
    let anchor = hakmem_core::malloc(3 * MIB);
    assert!(!anchor.is_null());
    let p = hakmem_core::malloc(size);
    assert!(!p.is_null());
    // SAFETY: p is a live block of `size` bytes.
    unsafe { p.write_bytes(0xff, size) };
    // SAFETY: p is a live block, freed once.
    unsafe { hakmem_core::free(p) };
    hakmem_core::collect(true);
    let q = hakmem_core::alloc_zeroed(size, 16);
    assert_eq!(q, p, "the purged block is reused");
    // SAFETY: q is a live block of `size` bytes.
    let bytes = unsafe { std::slice::from_raw_parts(q, size) };
    assert_eq!(bytes.iter().position(|&b| b != 0), None, "calloc of a purged mapping");
    // SAFETY: q and anchor are live blocks, freed once.
    unsafe {
        hakmem_core::free(q);
        hakmem_core::free(anchor);
    }
}
