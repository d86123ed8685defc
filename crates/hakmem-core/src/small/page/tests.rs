//! Tests of a page's lists, carving, remote stack and (`secure`) checks.

use super::*;
extern crate std;
use std::vec::Vec;

/// Memory for a test span of `len` bytes, 16-byte aligned, with room
/// in front for the `secure` build's table of requested sizes.
struct Span(Vec<u128>);

impl Span {
    fn new(len: usize) -> Self {
        // `secure`: old bytes everywhere, the table included, which
        // `extend` fills as it carves the first block (the pages built
        // here are not fresh).
        let old = if cfg!(feature = "secure") {
            u128::from_ne_bytes([0x77; 16])
        } else {
            0
        };
        Span(std::vec![old; (len + crate::check::secure::UNIT_TABLE_BYTES).div_ceil(16)])
    }

    fn start(&mut self) -> *mut u8 {
        // SAFETY: the table's bytes lie inside the span's memory.
        unsafe { (self.0.as_mut_ptr() as *mut u8).add(crate::check::secure::UNIT_TABLE_BYTES) }
    }

    fn len(&self) -> usize {
        self.0.len() * 16 - crate::check::secure::UNIT_TABLE_BYTES
    }
}

fn page_over(span: &mut Span, block_size: usize) -> Page {
    // The freed mark's key is drawn with the configuration, which every real
    // segment reads before it holds a block; a page built by hand must too,
    // or a test running beside one that maps the first segment could write
    // marks with one key and check them with the other.
    crate::config::config();
    let mut p = Page::empty();
    p.init(0, block_size, span.start(), 1, span.len(), false);
    p.reserved = (span.len() / block_size) as u32;
    p
}

/// Frees `block` of `page` as the owner's `free` does, but for the
/// checks (the freed mark, then the push).
fn free_local(page: &mut Page, block: *mut u8) {
    // `secure`: the checks and the zeroing of `free`.
    page.on_free(block);
    // SAFETY: block is a handed-out block of page.
    unsafe { (*(block as *mut Block)).freed = freed_mark(page) };
    page.push(block as *mut Block);
}

#[test]
fn carving_is_lazy_and_yields_every_block_once() {
    let mut span = Span::new(64 * 1024);
    let mut page = page_over(&mut span, 64);
    assert_eq!(page.capacity, 0);
    let mut seen = Vec::new();
    loop {
        if page.free.is_null() && !page.extend() {
            break;
        }
        assert!(page.capacity <= 4096 / 64 * (seen.len() as u32 / 64 + 1));
        seen.push(page.pop(1) as usize);
        assert!(page.is_valid());
    }
    assert_eq!(seen.len(), 1024);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 1024);
}

#[test]
#[cfg(not(feature = "secure"))]
fn the_block_freed_last_is_handed_out_first() {
    let mut span = Span::new(4096);
    let mut page = page_over(&mut span, 512);
    assert!(page.extend());
    let a = page.pop(1);
    let b = page.pop(1);
    let c = page.pop(1);
    free_local(&mut page, a);
    free_local(&mut page, c);
    assert_eq!(page.used, 1);
    assert!(page.is_valid());
    assert_eq!(page.pop(1), c);
    assert_eq!(page.pop(1), a);
    assert_ne!(page.pop(1), b);
    assert!(page.is_valid());
}

#[test]
#[cfg(not(feature = "secure"))]
fn only_never_handed_out_blocks_of_zeroed_spans_are_fresh() {
    let mut span = Span::new(4096);
    let mut page = Page::empty();
    page.init(0, 256, span.start(), 1, span.len(), true);
    assert!(page.extend());
    let (a, fresh) = page.pop_fresh(1);
    assert!(fresh);
    // SAFETY: a is a 256-byte block of the span, handed out.
    unsafe { a.write_bytes(0xAB, 256) };
    // SAFETY: as above; the second word is where free writes its mark.
    unsafe { (*(a as *mut Block)).freed = freed_mark(&page) };
    page.push(a as *mut Block);
    let (again, fresh) = page.pop_fresh(1);
    assert_eq!(again, a);
    assert!(!fresh, "a block handed out before is not fresh");
    let (_, fresh) = page.pop_fresh(1);
    assert!(fresh);
    // The same span, not known to be zero: nothing is fresh.
    let mut dirty = Page::empty();
    dirty.init(0, 256, span.start(), 1, span.len(), false);
    assert!(dirty.extend());
    assert!(!dirty.pop_fresh(1).1);
}

#[test]
fn remote_free_is_collected_by_owner() {
    let mut span = Span::new(4096);
    let mut page = page_over(&mut span, 256);
    assert!(page.extend());
    let blocks: Vec<*mut u8> = (0..4).map(|_| page.pop(1)).collect();
    for &b in &blocks {
        assert!(!page.push_remote(b as *mut Block, b as *mut Block, 1));
    }
    assert_eq!(page.used, 4);
    while !page.free.is_null() {
        page.pop(1);
    }
    let used_before = page.used;
    page.collect_remote();
    assert_eq!(page.used, used_before - 4);
    assert!(page.is_valid());
}

#[test]
fn every_span_fits_the_remote_count() {
    use crate::small::class::{span_pages, BLOCK_SIZE};
    for (class, block_size) in BLOCK_SIZE.iter().enumerate() {
        let blocks = span_pages(class) * crate::segment::PAGE_SIZE / block_size;
        assert!(blocks <= 4096, "class {class}: {blocks} blocks");
        assert!(blocks < 1 << (usize::BITS - REMOTE_COUNT_SHIFT));
    }
}

#[test]
fn a_remote_chain_is_counted_and_joined_to_a_non_empty_free() {
    let mut span = Span::new(4096);
    let mut page = page_over(&mut span, 256);
    assert!(page.extend());
    let b: Vec<*mut Block> = (0..6).map(|_| page.pop(1) as *mut Block).collect();
    let (b0, b1, b2) = (b[0], b[1], b[2]);
    // SAFETY: b0..b2 are handed-out blocks of the page, linked into a
    // chain as a remote batch is.
    unsafe {
        (*b0).next = page.encode(b1);
        (*b1).next = page.encode(b2);
    }
    assert!(!page.push_remote(b[0], b[2], 3));
    assert!(!page.push_remote(b[3], b[3], 1));
    assert_eq!(page.remote_waiting(), 4);
    assert!(!page.free.is_null(), "the carved rest is still free");
    page.collect_remote();
    assert_eq!(page.used, 2);
    assert_eq!(page.remote_waiting(), 0);
    assert!(page.is_valid(), "every block is on free once");
}

#[test]
fn odd_inverse_inverts() {
    for x in [1u64, 3, 5, 7, 9, 25, 63, 0x1234_5677, u64::MAX] {
        assert_eq!(x.wrapping_mul(odd_inverse(x)), 1, "{x}");
    }
}

#[test]
fn block_starts_are_recognised_without_division() {
    for bs in [16usize, 48, 80, 1024, 1280, 3584, 57344] {
        // `secure`: no more blocks than a unit's table has size slots for
        // (a real unit of the smallest secure class holds 1 792).
        let len = if cfg!(feature = "secure") {
            (512 * 1024).min((crate::check::secure::UNIT_TABLE_BYTES - 1) / 2 * bs)
        } else {
            512 * 1024
        };
        let mut span = Span::new(len);
        let mut page = page_over(&mut span, bs);
        while page.extend() {
            while !page.free.is_null() {
                page.pop(1);
            }
        }
        let start = page.start() as usize;
        let end = start + page.capacity as usize * bs;
        for off in (0..(end - start + 2 * bs)).step_by(8) {
            let expect = off % bs == 0 && start + off < end;
            assert_eq!(
                page.is_block_start((start + off) as *const u8),
                expect,
                "bs {bs} off {off}"
            );
        }
        // Below the start, far beyond, and at multiples of the block
        // size past the carved blocks: never a block start.
        for back in (8..4 * bs).step_by(8) {
            assert!(!page.is_block_start((start - back) as *const u8), "bs {bs} -{back}");
        }
        for k in [page.capacity as usize, page.capacity as usize + 1, 1 << 20, 1 << 40] {
            assert!(
                !page.is_block_start(start.wrapping_add(k * bs) as *const u8),
                "bs {bs} block {k}"
            );
        }
        assert!(!page.is_block_start(core::ptr::null()));
        assert!(!page.is_block_start(usize::MAX as *const u8));
    }
}

#[test]
fn block_index_is_exact_for_every_class_and_bounded_by_what_is_carved() {
    let mut sizes: Vec<usize> = crate::small::class::BLOCK_SIZE.to_vec();
    sizes.extend([31 * 65536, 31 * 65536 - 4096, 65536, 3 * 65536]);
    for bs in sizes {
        let mut page = Page::empty();
        // A span address only: nothing is read or written through it.
        let start = 0x7f00_0001_0000usize;
        page.init(0, bs, start as *mut u8, 1, 64 * bs, false);
        page.set_carved(5);
        for k in 0..64usize {
            let p = (start + k * bs) as *const u8;
            assert_eq!(page.block_index(p), k as u64, "bs {bs} block {k}");
            assert_eq!(page.is_block_start(p), k < 5, "bs {bs} block {k}");
            for delta in [1usize, 8, 16, bs / 2] {
                if delta % bs != 0 {
                    assert!(
                        !page.is_block_start((start + k * bs + delta) as *const u8),
                        "bs {bs} {k}+{delta}"
                    );
                }
            }
        }
    }
}

#[test]
fn full_notify_is_reported_once_to_the_first_remote_pusher() {
    let mut span = Span::new(1024);
    let mut page = page_over(&mut span, 256);
    assert!(page.extend());
    let blocks: Vec<*mut u8> = (0..4).map(|_| page.pop(1)).collect();
    assert!(page.try_set_full_notify());
    assert!(page.push_remote(blocks[0] as *mut Block, blocks[0] as *mut Block, 1));
    assert!(!page.push_remote(blocks[1] as *mut Block, blocks[1] as *mut Block, 1));
    assert!(!page.try_set_full_notify(), "blocks are waiting");
    page.collect_remote();
    assert_eq!(page.used, 2);
    // The first pusher has not finished telling the owner: the page
    // cannot be parked again (nor released) until it has.
    assert!(page.is_notifying());
    assert!(!page.try_set_full_notify(), "a notifier is at work");
    page.end_notify();
    assert_eq!(page.remote_free.load(Ordering::Relaxed), 0);
    page.wait_notifier();
    assert!(page.try_set_full_notify());
    assert!(
        page.try_set_full_notify(),
        "setting it again (a reclaimer does) succeeds"
    );
}

/// `secure`: the owner's frees wait on `local_free` until `free` has
/// run dry, then come back in an order that is neither theirs nor its
/// reverse (over several pages' worth of tries).
#[test]
#[cfg(feature = "secure")]
fn secure_reuse_is_delayed_and_shuffled() {
    let mut span = Span::new(4096);
    let mut page = page_over(&mut span, 64);
    assert!(page.extend());
    let span_start = page.start() as usize;
    let index = |p: *mut u8| (p as usize - span_start) / 64;
    let mut orders = std::collections::BTreeSet::new();
    for round in 0..8 {
        let blocks: Vec<*mut u8> = (0..64).map(|_| page.pop(10)).collect();
        assert!(page.free.is_null());
        let mut freed: Vec<usize> = blocks.iter().map(|&b| index(b)).collect();
        freed.sort_unstable();
        freed.truncate(32);
        for &i in &freed {
            free_local(&mut page, (span_start + i * 64) as *mut u8);
        }
        assert!(page.free.is_null() && page.has_local_free(), "round {round}");
        assert!(page.is_valid());
        // Nothing comes back before free runs dry; then all of them.
        page.collect_local();
        let again: Vec<usize> = (0..32).map(|_| index(page.pop(10))).collect();
        assert!(page.free.is_null() && !page.has_local_free());
        let mut sorted = again.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, freed, "every freed block comes back once");
        orders.insert(again);
        // Back to a page with every block free, for the next round.
        for &b in &blocks {
            if !freed.contains(&index(b)) {
                free_local(&mut page, b);
            }
        }
        for &i in &freed {
            free_local(&mut page, (span_start + i * 64) as *mut u8);
        }
        page.collect_local();
    }
    let ascending: Vec<usize> = (0..32).collect();
    let descending: Vec<usize> = (0..32).rev().collect();
    orders.remove(&ascending);
    orders.remove(&descending);
    assert!(orders.len() > 1, "the order of reuse is random: {orders:?}");
}

/// `secure`: a block hands out as zero up to its requested size, then its
/// canary (a zero, then `CANARY` bytes) to its last byte; it notes its
/// requested size, its canary is checked and moves with `realloc` in
/// place, and `free` zeroes it.
#[test]
#[cfg(feature = "secure")]
fn secure_blocks_are_zeroed_sized_and_guarded() {
    use crate::check::secure::{canary_intact, is_zero, CANARY};
    let mut span = Span::new(4096);
    let mut page = page_over(&mut span, 48);
    assert!(page.extend());
    let p = page.pop(20);
    // SAFETY: p is a 48-byte block of the span, handed out; the byte
    // before it is the unit table's last.
    unsafe {
        // The table's last byte and the slot's last byte are zero and stay
        // so: `free` of the next block reads them unsynchronised.
        assert_eq!(*p.sub(1), 0, "the table's last byte");
        assert_eq!(*p.add(47), 0);
        assert!(is_zero(p, 20), "a new block reads as zero");
        assert!(canary_intact(p.add(20), 28), "its canary follows");
        assert_eq!(page.requested_size(p), 20);
        assert_eq!(page.check_live(p, "test"), 20);
        p.write_bytes(7, 20);
        page.set_requested_size(p, 8);
        assert!(canary_intact(p.add(8), 40), "bytes past the new size are canary");
        page.set_requested_size(p, 30);
        assert_eq!(*p.add(30), 0, "a grown block's canary starts at its new size");
        assert_eq!(*p.add(31), CANARY);
        assert_eq!(page.check_live(p, "test"), 30);
        page.set_requested_size(p, 47);
        assert_eq!(
            page.check_live(p, "test"),
            47,
            "a one-byte canary: the slot's last byte"
        );
        p.write_bytes(9, 47);
        page.set_requested_size(p, 10);
        assert_eq!(*p.add(47), 0);
    }
    free_local(&mut page, p);
    // SAFETY: p's slot lies in the span.
    assert!(unsafe { is_zero(p.add(16), 32) }, "free zeroes what the block held");
    // Every other carved slot's last byte is zero too.
    for i in 0..page.capacity as usize {
        // SAFETY: slot i lies in the span.
        assert_eq!(unsafe { *page.start().add(i * 48 + 47) }, 0, "slot {i}");
    }
    page.check_free_blocks("test");
}

/// `secure`: a block above `WHOLE_ZERO_MAX` holds zeroes only at its edges
/// while free and has a canary of `EDGE_BYTES` while live: carving dirty
/// memory zeroes the edges (and every slot's last byte), `free` zeroes the
/// edges and leaves the middle, a write after free into an edge is seen
/// and one into the middle is not, the canary is checked from the
/// requested size for `EDGE_BYTES` and moves with `realloc` in place.
#[test]
#[cfg(feature = "secure")]
fn secure_large_blocks_keep_zeroes_and_canary_at_their_edges() {
    use crate::check::secure::{
        canary_intact, first_bad_slot_canary, free_body_is_zero, is_zero, slot_canary_intact, CANARY, EDGE_BYTES,
        WHOLE_ZERO_MAX,
    };
    let bs = 5120;
    assert!(bs > WHOLE_ZERO_MAX && WHOLE_ZERO_MAX >= 2 * EDGE_BYTES);
    let mut span = Span::new(4 * bs);
    // Old data everywhere: the span held other blocks before.
    // SAFETY: the blocks' bytes lie inside the span.
    unsafe { span.start().write_bytes(0x77, span.len()) };
    let mut page = page_over(&mut span, bs);
    assert!(page.extend());
    for i in 0..page.capacity as usize {
        // SAFETY: slot i lies in the span.
        unsafe {
            let slot = page.start().add(i * bs);
            assert!(free_body_is_zero(slot, bs), "slot {i}: carving zeroes the edges");
            assert_eq!(*slot.add(bs - 1), 0, "slot {i}'s last byte");
            assert_eq!(*slot.add(bs / 2), 0x77, "slot {i}: the middle is left as it was");
        }
    }
    let p = page.pop(100);
    // SAFETY: p is a bs-byte block of the span, handed out.
    unsafe {
        assert!(is_zero(p, 16), "link and mark are cleared");
        assert_eq!(*p.add(100), 0, "the canary starts with a zero");
        assert!(canary_intact(p.add(100), 1) && *p.add(101) == CANARY);
        assert!(slot_canary_intact(p, 100, bs));
        assert_eq!(*p.add(100 + EDGE_BYTES), 0x77, "the canary is EDGE_BYTES long");
        assert_eq!(page.check_live(p, "test"), 100);
        // An overflow's first bytes are seen; past the canary they are not.
        *p.add(105) = 1;
        assert_eq!(first_bad_slot_canary(p, 100, bs), Some(105));
        assert!(!slot_canary_intact(p, 100, bs));
        *p.add(105) = CANARY;
        *p.add(100 + EDGE_BYTES + 10) = 1;
        assert!(slot_canary_intact(p, 100, bs));
        // realloc in place: growing writes the canary at the new size.
        page.set_requested_size(p, 3000);
        assert_eq!(*p.add(3000), 0);
        assert!(slot_canary_intact(p, 3000, bs));
        assert_eq!(page.check_live(p, "test"), 3000);
        page.set_requested_size(p, 40);
        assert!(slot_canary_intact(p, 40, bs));
        p.write_bytes(0x55, 40);
        *p.add(bs / 2) = 0x55;
    }
    free_local(&mut page, p);
    // SAFETY: p's slot lies in the span.
    unsafe {
        assert!(free_body_is_zero(p, bs), "free zeroes the edges");
        assert!(is_zero(p.add(16), EDGE_BYTES - 16) && is_zero(p.add(bs - EDGE_BYTES), EDGE_BYTES));
        assert_eq!(*p.add(bs / 2), 0x55, "and leaves the middle");
        // A write after free into the middle is not seen, into an edge it is.
        *p.add(bs / 2) = 1;
        assert!(free_body_is_zero(p, bs));
        for at in [16, EDGE_BYTES - 1, bs - EDGE_BYTES, bs - 2] {
            *p.add(at) = 1;
            assert!(!free_body_is_zero(p, bs), "offset {at}");
            assert_eq!(crate::check::secure::first_nonzero_in_body(p, bs), Some(at));
            *p.add(at) = 0;
        }
    }
    page.check_free_blocks("test");
}

/// `secure`: a span of several units (every class above 8 KiB, with the
/// units `span_pages` gives it) holds each unit's blocks between that
/// unit's table and its guard page, never across the two: every block is
/// carved once, `block_index` and `block_addr` agree, no pointer into a
/// table, a guard page or the slack after a unit's last block starts a
/// block, `extend` fills each unit's table as it carves the unit (the
/// memory holds other bytes before), each block's size slot is in its own
/// unit's table, and the byte in front of each unit's first block (its
/// table's last) is zero.
#[test]
#[cfg(feature = "secure")]
fn secure_spans_of_several_units_keep_blocks_between_each_tables_and_guard() {
    use crate::check::secure::{guard_bytes, unit_block_bytes, CLASS_SIZE_MAX, UNIT_TABLE_BYTES};
    use crate::segment::PAGE_SIZE;
    use crate::small::class::{span_pages, BLOCK_SIZE};
    crate::config::config();
    let mut tested = 0;
    for (class, &bs) in BLOCK_SIZE.iter().enumerate() {
        let units = span_pages(class);
        if bs > CLASS_SIZE_MAX || units == 1 {
            continue;
        }
        tested += 1;
        // Old data everywhere, tables included.
        let mut mem = std::vec![0x7777_7777_7777_7777_7777_7777_7777_7777u128; units * PAGE_SIZE / 16];
        let base = mem.as_mut_ptr() as *mut u8;
        let per_unit = unit_block_bytes() / bs;
        let unit_base = |u: usize| base.wrapping_add(u * PAGE_SIZE);
        let mut page = Page::empty();
        page.init(
            class as u8,
            bs,
            unit_base(0).wrapping_add(UNIT_TABLE_BYTES),
            units as u32,
            unit_block_bytes(),
            false,
        );
        assert_eq!(page.reserved as usize, units * per_unit, "bs {bs}");
        let mut blocks = Vec::new();
        loop {
            if page.free.is_null() && !page.extend() {
                break;
            }
            let size = 1000 + blocks.len();
            blocks.push((page.pop(size), size));
        }
        assert_eq!(blocks.len(), units * per_unit, "bs {bs}: every block carved");
        let mut seen: Vec<usize> = blocks.iter().map(|&(p, _)| p as usize).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), blocks.len(), "bs {bs}: no block twice");
        for &(p, size) in &blocks {
            let off = p as usize - base as usize;
            let (u, in_unit) = (off / PAGE_SIZE, off % PAGE_SIZE);
            assert!(u < units && in_unit >= UNIT_TABLE_BYTES, "bs {bs}: {off:#x}");
            let j = (in_unit - UNIT_TABLE_BYTES) / bs;
            assert_eq!((in_unit - UNIT_TABLE_BYTES) % bs, 0, "bs {bs}: {off:#x}");
            assert!(
                in_unit + bs <= PAGE_SIZE - guard_bytes(),
                "bs {bs}: block {off:#x} reaches the guard"
            );
            let index = page.block_index(p);
            assert_eq!(index as usize, u * per_unit + j, "bs {bs}: {off:#x}");
            assert_eq!(page.block_addr(index as usize), p);
            // SAFETY: the slot lies in unit u's table, inside mem.
            let slot = unsafe { (unit_base(u).add(2 * j) as *const u16).read_unaligned() };
            assert_eq!(usize::from(slot), size, "bs {bs}: the slot is in its unit's table");
            if j == 0 {
                // SAFETY: the byte in front of the block lies in mem.
                assert_eq!(unsafe { *p.sub(1) }, 0, "bs {bs}: the table's last byte");
            }
            assert_eq!(page.check_live(p, "test"), size);
        }
        for u in 0..units {
            let unit = unit_base(u) as usize;
            let after_last = unit + UNIT_TABLE_BYTES + per_unit * bs;
            let probes = [
                unit,
                unit + 16,
                unit + UNIT_TABLE_BYTES - 16,
                unit + UNIT_TABLE_BYTES - 1,
                after_last,
                unit + PAGE_SIZE - guard_bytes(),
            ];
            for probe in probes {
                assert!(
                    !page.is_block_start(probe as *const u8),
                    "bs {bs}: unit {u} +{:#x}",
                    probe - unit
                );
            }
            for delta in [1usize, 16, bs / 2, bs - 16] {
                let p = unit + UNIT_TABLE_BYTES + delta;
                assert!(
                    !page.is_block_start(p as *const u8),
                    "bs {bs}: unit {u} block 0 +{delta}"
                );
            }
        }
        for p in [
            unit_base(units).wrapping_add(UNIT_TABLE_BYTES),
            base.wrapping_sub(PAGE_SIZE).wrapping_add(UNIT_TABLE_BYTES),
            base.wrapping_add(UNIT_TABLE_BYTES - 1),
            core::ptr::null_mut(),
            usize::MAX as *mut u8,
        ] {
            assert!(!page.is_block_start(p), "bs {bs}: {p:?}");
        }
        for &(p, _) in &blocks {
            free_local(&mut page, p);
        }
        assert_eq!(page.used, 0);
        assert!(page.is_valid());
        page.check_free_blocks("test");
    }
    assert!(tested >= 8, "{tested} classes with spans of several units");
}

/// `secure`: a span of one unit gets its table filled by its first
/// `extend` (old bytes there before): the slots of blocks not handed out
/// read 0xDEDE, a handed-out block's its size, and the table's last byte,
/// in front of the first block, is zero.
#[test]
#[cfg(feature = "secure")]
fn secure_first_extend_fills_the_table_of_a_one_unit_span() {
    use crate::check::secure::{CANARY, UNIT_TABLE_BYTES};
    let mut span = Span::new(4096);
    let table = span.start().wrapping_sub(UNIT_TABLE_BYTES);
    // SAFETY: the table lies inside the span's memory.
    assert_eq!(unsafe { *table.add(UNIT_TABLE_BYTES - 1) }, 0x77, "old bytes before");
    let mut page = page_over(&mut span, 256);
    assert!(page.extend());
    // SAFETY: the table and the first block lie inside the span.
    unsafe {
        assert_eq!(*page.start().sub(1), 0, "the table's last byte");
        for i in 0..page.capacity as usize {
            let slot = (table.add(2 * i) as *const u16).read_unaligned();
            assert_eq!(slot, u16::from_ne_bytes([CANARY; 2]), "slot {i}");
        }
    }
    let p = page.pop(100);
    assert_eq!(page.requested_size(p), 100);
    assert_eq!(page.check_live(p, "test"), 100);
}
