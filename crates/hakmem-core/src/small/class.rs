//! Size classes: size -> class by table (small) or bit scan (medium), and
//! class -> block size and page span.
//!
//! Classes 0..8 step by 16 bytes (16..=128); above that every power-of-two
//! interval is split in four (160, 192, 224, 256, 320, ...), so the internal
//! waste of a block is at most 25 %. Every power of two from 16 to 64 KiB is
//! a class, which is what aligned allocation relies on (see `aligned_class`).
//! The minimum block is 16 bytes so every block meets C's `max_align_t`.

/// Largest size served from the small classes (the research line's C0-C7 range).
pub const SMALL_SIZE_MAX: usize = 1024;
/// Largest size served from a size class; above it an allocation gets whole pages.
pub const MEDIUM_SIZE_MAX: usize = 64 * 1024;
/// Number of small classes (block size at most `SMALL_SIZE_MAX`).
pub const SMALL_CLASS_COUNT: usize = 20;
/// Entries of a heap's small direct table: one per 16 bytes up to 1 KiB.
pub const SMALL_DIRECT_LEN: usize = SMALL_SIZE_MAX / 16 + 1;
/// Number of size classes (small and medium).
pub const CLASS_COUNT: usize = 44;
/// Pseudo-class of a page holding one large block (a span of whole pages).
pub const LARGE_CLASS: u8 = CLASS_COUNT as u8;
/// Blocks of at most this size get one 64 KiB page; larger ones get a span
/// of the pages `SPAN_BLOCKS` blocks need, capped at `SPAN_PAGES_CAP`, but
/// never fewer than `MIN_BLOCKS_PER_SPAN` blocks need (so the 20 and 24 KiB
/// classes hold 12 and 10 blocks in 4 pages, and those above 32 KiB the
/// smallest span of 8).
const SINGLE_PAGE_BLOCK_MAX: usize = 8 * 1024;
const MIN_BLOCKS_PER_SPAN: usize = 8;
/// Blocks a medium span holds where it can: a span that fills after 8
/// blocks goes full and comes back every few operations of a program whose
/// live blocks of the class number about that (random 1-32 KiB blocks, ws
/// 400: 68.0 -> 73.5 M ops/s, docs/BENCHMARKS.md).
const SPAN_BLOCKS: usize = 16;
/// ... in at most 256 KiB: spans of 16 blocks up to 32 KiB (512 KiB) were
/// faster still (78.4 M ops/s) but left more partly used memory per class,
/// peak RSS 12.8 MiB against mimalloc's 12.0 on the same loop.
const SPAN_PAGES_CAP: usize = 4;
/// ... and (`secure`) in at most 512 KiB: a unit of the secure layout
/// holds 1 to 5 blocks of the classes above 8 KiB (1 to 4 with 16 KiB OS
/// pages: its table and guard page take 8 KiB and more), so the classes
/// of 32 and 40 KiB (of 24 KiB and up with 16 KiB OS pages) get 8 blocks,
/// in spans of 8 units.
const SECURE_SPAN_PAGES_CAP: usize = 8;

const fn compute_block_size(class: usize) -> usize {
    if class < 8 {
        16 * (class + 1)
    } else {
        let k = class - 8;
        let b = 7 + k / 4;
        let j = k % 4;
        (1 << b) + ((j + 1) << (b - 2))
    }
}

const fn build_block_sizes() -> [usize; CLASS_COUNT] {
    let mut t = [0; CLASS_COUNT];
    let mut c = 0;
    while c < CLASS_COUNT {
        t[c] = compute_block_size(c);
        c += 1;
    }
    t
}

/// Block size of each class.
pub static BLOCK_SIZE: [usize; CLASS_COUNT] = build_block_sizes();

/// The size -> class table covers every class size (4 KiB of `u8`), so the
/// fast path routes with one compare and one load; only the lines of sizes
/// in use are ever cached.
const SMALL_TABLE_LEN: usize = MEDIUM_SIZE_MAX / 16 + 1;

const fn build_small_table() -> [u8; SMALL_TABLE_LEN] {
    let sizes = build_block_sizes();
    let mut t = [0u8; SMALL_TABLE_LEN];
    let mut i = 0;
    while i < SMALL_TABLE_LEN {
        let size = i * 16;
        let mut c = 0;
        while sizes[c] < size {
            c += 1;
        }
        t[i] = c as u8;
        i += 1;
    }
    t
}

/// `SMALL_CLASS[(size + 15) / 16]` is the class of `size` for `size <= MEDIUM_SIZE_MAX`.
static SMALL_CLASS: [u8; SMALL_TABLE_LEN] = build_small_table();

/// Class of `size`; `size` must be at most `MEDIUM_SIZE_MAX`.
///
/// One table load (no loop, no division).
#[inline(always)]
pub fn class_of(size: usize) -> usize {
    debug_assert!(size <= MEDIUM_SIZE_MAX);
    SMALL_CLASS[(size + 15) >> 4] as usize
}

/// Index of `size` (at most `SMALL_SIZE_MAX`) in a heap's small direct table.
#[inline(always)]
pub fn small_index(size: usize) -> usize {
    (size + 15) >> 4
}

/// The small direct-table indices that map to small class `class`.
pub fn small_indices(class: usize) -> core::ops::RangeInclusive<usize> {
    let lo = if class == 0 { 0 } else { BLOCK_SIZE[class - 1] / 16 + 1 };
    lo..=BLOCK_SIZE[class] / 16
}

/// The same by bit scan (what the table is checked against).
#[cfg(all(test, not(hakmem_loom)))]
fn medium_class_of(size: usize) -> usize {
    let s = size - 1;
    let b = (usize::BITS - 1 - s.leading_zeros()) as usize; // floor(log2(s)), >= 10
    8 + (b - 7) * 4 + ((s >> (b - 2)) & 3)
}

/// Class whose blocks hold `size` bytes at an address aligned to `align`
/// (`16 < align <= 64 KiB`), or `None` when that needs more than
/// `MEDIUM_SIZE_MAX` bytes. Blocks sit at `page_start + k * block_size` with
/// 64 KiB-aligned page starts, so a block size that is a multiple of `align`
/// aligns every block. (`secure`: at `unit_start + 4 KiB + k * block_size`
/// in each unit of a span, so this holds up to `CLASS_ALIGN_MAX`, 4 KiB;
/// larger alignments are huge.)
pub fn aligned_class(size: usize, align: usize) -> Option<usize> {
    let s = size.max(align).checked_add(align - 1)? & !(align - 1);
    if s > MEDIUM_SIZE_MAX {
        return None;
    }
    let c = class_of(s);
    if BLOCK_SIZE[c].is_multiple_of(align) {
        return Some(c);
    }
    let p = s.next_power_of_two();
    (p <= MEDIUM_SIZE_MAX).then(|| class_of(p))
}

/// Number of 64 KiB pages a page of `class` spans. (`secure`: every unit
/// of a span holds its own table, blocks and guard page, so no block
/// straddles two units: a class above 8 KiB gets the units `SPAN_BLOCKS`
/// blocks need, at most `SECURE_SPAN_PAGES_CAP`.)
pub fn span_pages(class: usize) -> usize {
    let bs = BLOCK_SIZE[class];
    if bs <= SINGLE_PAGE_BLOCK_MAX {
        1
    } else if cfg!(feature = "secure") {
        let per_unit = crate::check::secure::unit_block_bytes() / bs;
        SPAN_BLOCKS.div_ceil(per_unit.max(1)).min(SECURE_SPAN_PAGES_CAP)
    } else {
        let pages = |blocks: usize| (bs * blocks).div_ceil(crate::segment::PAGE_SIZE);
        pages(SPAN_BLOCKS).min(SPAN_PAGES_CAP).max(pages(MIN_BLOCKS_PER_SPAN))
    }
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    #[test]
    fn block_sizes_increase_and_end_at_medium_max() {
        for c in 1..CLASS_COUNT {
            assert!(BLOCK_SIZE[c] > BLOCK_SIZE[c - 1], "class {c}");
            assert_eq!(BLOCK_SIZE[c] % 16, 0);
        }
        assert_eq!(BLOCK_SIZE[0], 16);
        assert_eq!(BLOCK_SIZE[CLASS_COUNT - 1], MEDIUM_SIZE_MAX);
    }

    #[test]
    fn every_size_maps_to_the_smallest_class_that_fits() {
        for size in 0..=MEDIUM_SIZE_MAX {
            let c = class_of(size);
            assert!(BLOCK_SIZE[c] >= size, "size {size} class {c}");
            if c > 0 {
                assert!(BLOCK_SIZE[c - 1] < size.max(1), "size {size} class {c}");
            }
        }
    }

    #[test]
    fn class_waste_is_at_most_a_quarter_above_128_bytes() {
        for size in 129..=MEDIUM_SIZE_MAX {
            let bs = BLOCK_SIZE[class_of(size)];
            assert!((bs - size) * 4 <= bs, "size {size} block {bs}");
        }
    }

    #[test]
    fn small_indices_partition_the_small_direct_table() {
        assert_eq!(BLOCK_SIZE[SMALL_CLASS_COUNT - 1], SMALL_SIZE_MAX);
        let mut next = 0;
        for c in 0..SMALL_CLASS_COUNT {
            let r = small_indices(c);
            assert_eq!(*r.start(), next);
            for i in r.clone() {
                assert_eq!(class_of(i * 16), c, "index {i}");
            }
            next = r.end() + 1;
        }
        assert_eq!(next, SMALL_DIRECT_LEN);
        for size in 0..=SMALL_SIZE_MAX {
            assert!(
                small_indices(class_of(size)).contains(&small_index(size)),
                "size {size}"
            );
        }
    }

    #[test]
    fn table_agrees_with_the_bit_scan_formula() {
        for size in 129..=MEDIUM_SIZE_MAX {
            assert_eq!(class_of(size), medium_class_of(size), "size {size}");
        }
    }

    #[test]
    fn block_size_round_trips_to_its_class() {
        for (c, &bs) in BLOCK_SIZE.iter().enumerate() {
            assert_eq!(class_of(bs), c);
        }
    }

    #[test]
    fn every_power_of_two_from_16_is_a_class() {
        let mut p = 16;
        while p <= MEDIUM_SIZE_MAX {
            assert_eq!(BLOCK_SIZE[class_of(p)], p);
            p *= 2;
        }
    }

    #[test]
    fn aligned_class_gives_a_multiple_of_the_alignment() {
        let mut align = 32;
        while align <= MEDIUM_SIZE_MAX {
            for size in [1, 17, 100, 1000, 3000, 40000, 65536] {
                match aligned_class(size, align) {
                    Some(c) => {
                        assert_eq!(BLOCK_SIZE[c] % align, 0);
                        assert!(BLOCK_SIZE[c] >= size);
                    }
                    None => assert!(size.max(align).next_power_of_two() > MEDIUM_SIZE_MAX || size > MEDIUM_SIZE_MAX),
                }
            }
            align *= 2;
        }
    }

    #[test]
    #[cfg(feature = "secure")]
    fn secure_spans_hold_enough_blocks_in_whole_units() {
        let per_unit = |bs: usize| crate::check::secure::unit_block_bytes() / bs;
        for (c, &bs) in BLOCK_SIZE.iter().enumerate() {
            if bs > crate::check::secure::CLASS_SIZE_MAX {
                break;
            }
            let (pages, in_unit) = (span_pages(c), per_unit(bs));
            assert!(in_unit >= 1, "class {c} ({bs} B) fits no unit");
            if bs <= SINGLE_PAGE_BLOCK_MAX {
                assert_eq!(pages, 1, "class {c} ({bs} B)");
                continue;
            }
            let blocks = pages * in_unit;
            assert!(pages <= SECURE_SPAN_PAGES_CAP, "class {c} ({bs} B): {pages} pages");
            assert!(
                blocks >= SPAN_BLOCKS || pages == SECURE_SPAN_PAGES_CAP,
                "class {c} ({bs} B): {blocks} blocks in {pages} pages"
            );
            assert!(
                (pages - 1) * in_unit < SPAN_BLOCKS,
                "class {c} ({bs} B): a unit fewer would hold enough"
            );
        }
    }

    #[test]
    #[cfg(not(feature = "secure"))]
    fn spans_hold_enough_blocks() {
        for (c, &bs) in BLOCK_SIZE.iter().enumerate() {
            let pages = span_pages(c);
            let blocks = pages * crate::segment::PAGE_SIZE / bs;
            assert!(blocks >= MIN_BLOCKS_PER_SPAN, "class {c}: {blocks} blocks");
            if bs > SINGLE_PAGE_BLOCK_MAX {
                assert!(
                    blocks >= SPAN_BLOCKS || pages >= SPAN_PAGES_CAP,
                    "class {c} ({bs} B): {blocks} blocks in {pages} pages"
                );
                let fewest = (bs * MIN_BLOCKS_PER_SPAN).div_ceil(crate::segment::PAGE_SIZE);
                assert!(pages <= SPAN_PAGES_CAP.max(fewest), "class {c} ({bs} B): {pages} pages");
            }
        }
    }
}
