//! The huge arena (default build): huge blocks of up to `MAX_UNITS` 2 MiB
//! units at the common offset are carved out of large reserved regions
//! instead of getting a mapping each, and a freed block's units go back to
//! its region, where they merge with the free units around them by
//! address. A 20 MiB block freed serves a 7 MiB and then a 13 MiB request
//! with the pages it already has, where per-block mappings could serve
//! only one of them without page faults (BENCHMARKS.md, "huge: two layouts
//! tried and rejected"). mimalloc's arenas work the same way.
//!
//! A region is one kernel mapping of up to `REGION_UNITS` units (the first
//! ones smaller: 64 MiB, then 128, then 256, so that a program with one
//! huge block does not reserve 256 MiB of address space), mapped when the
//! regions there are full and unmapped when a purge leaves it empty (after
//! a failed mapping, none is tried for a second). Each unit is used (by a live
//! block) or free, and dirty (may hold resident pages) or clean. A request
//! takes the window of free units that would fault the fewest pages: at
//! either end of each free run, the run's length breaking ties (the
//! smallest, to keep long runs whole). A free dirty unit is purged
//! (`MADV_DONTNEED`) once it has been free for the purge delay (each
//! unit's own: a block freed just before another's deadline keeps its
//! pages for the next request), or at once when the free dirty units
//! exceed the huge cache's byte limit; purging never splits the region's
//! mapping.
//!
//! A block's header is written at its first unit, as any huge segment's,
//! with `huge_region` naming its region. A freed block's header stays in
//! the segment map with the block's freed mark, so that a double free is
//! reported, until its unit is purged or taken by another block (the entry
//! is cleared first). `realloc` grows a block in place when the units
//! after it are free, else moves it out of the arena, page tables and all
//! (`mremap`), into a mapping of its own, and maps the hole it leaves
//! again (units whose range another mapping took meanwhile stay used for
//! good). The hole is a kernel mapping of its own, which `mremap` cannot
//! move together with its neighbours: a block over such units is copied
//! when it outgrows its place. All state is under one lock, held across
//! `fork`.

use crate::os;
use crate::segment::map::{is_segment, map_set};
use crate::segment::purge::GLOBAL_PURGE_AT;
use crate::segment::{Segment, SegmentKind, PAGE_SIZE, SEGMENT_SIZE};
use crate::stats;
use crate::sync::{global, Ordering, SpinLock};
use core::cell::UnsafeCell;
use core::ptr;

/// Arena units are segment units: every block's header lies on one.
const UNIT: usize = SEGMENT_SIZE;
/// Units per region at most (one bit each in a `u128`): 256 MiB of
/// address space.
const REGION_UNITS: usize = 128;
/// Units of the first region mapped; each next one doubles, up to
/// `REGION_UNITS`.
const FIRST_REGION_UNITS: usize = 32;
/// Regions at most (8 GiB of address space); past them, huge blocks get
/// mappings of their own. One under loom, which never maps a region (its
/// huge blocks are mappings of their own) but whose purge passes read the
/// arena: loom builds its statics on a model thread's small stack.
const MAX_REGIONS: usize = if cfg!(hakmem_loom) { 1 } else { 32 };
/// The largest block the arena serves, in units (64 MiB): larger ones are
/// mapped on their own (their page-table moves make `realloc` cheap, and a
/// few of them would fill a region).
const MAX_UNITS: usize = 32;

#[derive(Clone, Copy)]
struct Region {
    /// Where it is mapped (0: the slot is empty).
    base: usize,
    /// Units it has (the bits above are set in `used` for good).
    units: usize,
    /// Units of live blocks (and, while it runs, of a purge; and for good,
    /// units whose range another mapping took, and those past `units`).
    used: u128,
    /// Units that may hold resident pages.
    dirty: u128,
    /// Free units a purge gave back to the OS and no block has taken
    /// since: taking one faults its pages in again, which is what the
    /// adaptive policy weighs against the purge (`policy::recommitted`).
    purged: u128,
    /// When each unit was last freed (ms; meaningful for free dirty units):
    /// a unit is purged once it has been free for the purge delay, not
    /// with the others at a deadline its block's free came just before.
    freed_at: [u64; REGION_UNITS],
    /// When the earliest free dirty unit is due for purging (ms; 0: none).
    purge_at: u64,
    /// Every free dirty unit is to go at the next pass, whatever its age:
    /// a purge due at once (over the huge cache's limit, a delay of 0)
    /// that found a pass running (`release`).
    purge_all: bool,
    /// Units mapped again after a block moved out (`move_out`): kernel
    /// mappings of their own.
    split: u128,
}

/// An empty region slot.
const EMPTY: Region = Region {
    base: 0,
    units: 0,
    used: 0,
    dirty: 0,
    purged: 0,
    freed_at: [0; REGION_UNITS],
    purge_at: 0,
    purge_all: false,
    split: 0,
};

struct Arena {
    lock: SpinLock,
    regions: UnsafeCell<[Region; MAX_REGIONS]>,
    /// Slots ever filled (a slot below may be empty again).
    count: UnsafeCell<usize>,
    /// Regions mapped now (the next one's size doubles with it).
    mapped: UnsafeCell<usize>,
}

// SAFETY: regions and count are only accessed with `lock` held.
unsafe impl Sync for Arena {}

global! {
    static ARENA: Arena = Arena {
        lock: SpinLock::new(),
        regions: UnsafeCell::new([EMPTY; MAX_REGIONS]),
        count: UnsafeCell::new(0),
        mapped: UnsafeCell::new(0),
    };
}

/// `fork` prepare: hold the arena's lock across the fork.
pub(crate) fn lock() {
    ARENA.lock.lock();
}

/// `fork` parent/child: release what `lock` took.
pub(crate) fn unlock() {
    ARENA.lock.unlock();
}

/// Bits `[start, start + n)`.
fn window(start: usize, n: usize) -> u128 {
    let ones = if n >= REGION_UNITS { u128::MAX } else { (1u128 << n) - 1 };
    ones << start
}

/// Units a block of `size` bytes at offset `PAGE_SIZE` takes, when the
/// arena serves it.
pub(crate) fn units_for(size: usize) -> Option<usize> {
    let n = size.checked_add(PAGE_SIZE)?.div_ceil(UNIT);
    (n <= MAX_UNITS).then_some(n)
}

/// The best window of `n` free units in `r`: (start, pages to fault, run
/// length), or `None`.
fn best_in(r: &Region, n: usize) -> Option<(usize, u32, u32)> {
    let mut best: Option<(usize, u32, u32)> = None;
    let mut free = !r.used;
    while free != 0 {
        let start = free.trailing_zeros() as usize;
        let len = (!(free >> start)).trailing_zeros().min((REGION_UNITS - start) as u32);
        free &= !window(start, len as usize);
        if (len as usize) < n {
            continue;
        }
        for at in [start, start + len as usize - n] {
            let faults = (window(at, n) & !r.dirty).count_ones();
            if best.is_none_or(|(_, f, l)| (faults, len) < (f, l)) {
                best = Some((at, faults, len));
            }
        }
    }
    best
}

/// A huge block of `n` units (`units_for`) at offset
/// `PAGE_SIZE` from its header, carved from a region: (block, known
/// zero), or `None` when the regions are full and no new one can be
/// mapped.
pub(crate) fn alloc(n: usize) -> Option<(*mut u8, bool)> {
    let (region, segment, dirty, back) = take(n)?;
    // Headers of freed blocks in these units leave the map before the
    // units are written (the first one gets this block's header).
    for unit in 0..n {
        let s = (segment as usize + unit * UNIT) as *mut Segment;
        if is_segment(s) {
            map_set(s, false);
        }
    }
    // SAFETY: the units are ours and hold no live data; the header is made
    // on zeroed bytes, as `construct` expects.
    unsafe {
        crate::check::valgrind::undefined(segment as *mut u8, core::mem::size_of::<Segment>());
        ptr::write_bytes(segment as *mut u8, 0, core::mem::size_of::<Segment>());
        Segment::construct(segment);
        (*segment).kind = SegmentKind::Huge;
        (*segment).mapping_size = n * UNIT;
        (*segment).huge_block_offset = PAGE_SIZE;
        (*segment).huge_region = region as u32 + 1;
        (*segment).reset_page_heads();
    }
    let p = (segment as usize + PAGE_SIZE) as *mut u8;
    let zero = dirty == 0;
    if !zero {
        // SAFETY: p is this block's start, in its units; the freed mark
        // of a block freed there must not survive.
        unsafe {
            crate::check::valgrind::header_access(p);
            (*(p as *mut crate::small::page::Block)).freed = 0;
        }
    }
    let clean = n - dirty as usize;
    stats::committed((clean * UNIT) as isize);
    stats::huge_in_use(1);
    if dirty != 0 {
        crate::policy::huge_hit(dirty as usize * UNIT);
    }
    if clean != 0 {
        crate::policy::huge_mapped(clean * UNIT);
    }
    if back != 0 {
        crate::policy::recommitted(back as usize * UNIT);
    }
    map_set(segment, true);
    Some((p, zero))
}

global! {
    /// When a region may be mapped again after a mapping failed (ms).
    static NEXT_MAP_MS: crate::sync::AtomicU64 = crate::sync::AtomicU64::new(0);
}

/// Takes `n` free units: (region, the address of the first, how many of
/// them were dirty, how many a purge had given back). Maps a new region
/// when none has room.
fn take(n: usize) -> Option<(usize, *mut Segment, u32, u32)> {
    loop {
        ARENA.lock.lock();
        // SAFETY: the lock is held.
        let found = unsafe {
            let regions = &mut *ARENA.regions.get();
            let count = *ARENA.count.get();
            let mut best: Option<(usize, usize, u32, u32)> = None;
            for (i, r) in regions[..count].iter().enumerate() {
                if r.base == 0 {
                    continue;
                }
                if let Some((at, faults, len)) = best_in(r, n) {
                    if best.is_none_or(|(_, _, f, l)| (faults, len) < (f, l)) {
                        best = Some((i, at, faults, len));
                    }
                }
            }
            best.map(|(i, at, _, _)| {
                let w = window(at, n);
                let r = &mut regions[i];
                let dirty = (w & r.dirty).count_ones();
                let back = (w & r.purged).count_ones();
                r.used |= w;
                r.dirty |= w;
                r.purged &= !w;
                (i, (r.base + at * UNIT) as *mut Segment, dirty, back)
            })
        };
        // SAFETY: the lock is held.
        let mapped = unsafe { *ARENA.mapped.get() };
        ARENA.lock.unlock();
        if found.is_some() {
            return found;
        }
        let now = os::now_ms();
        if mapped == MAX_REGIONS || now < NEXT_MAP_MS.load(Ordering::Relaxed) {
            return None;
        }
        let units = (FIRST_REGION_UNITS << mapped.min(2)).min(REGION_UNITS);
        if units < n {
            return None;
        }
        let base = os::map_aligned(units * UNIT, UNIT, 0);
        if base.is_null() {
            NEXT_MAP_MS.store(now + 1000, Ordering::Relaxed);
            return None;
        }
        crate::segment::arena::advise_thp(base, units * UNIT);
        ARENA.lock.lock();
        // SAFETY: the lock is held.
        let added = unsafe {
            let regions = &mut *ARENA.regions.get();
            let count = &mut *ARENA.count.get();
            let slot = regions[..*count]
                .iter()
                .position(|r| r.base == 0)
                .or((*count < MAX_REGIONS).then_some(*count));
            if let Some(i) = slot {
                let past = if units == REGION_UNITS { 0 } else { !window(0, units) };
                regions[i] = Region {
                    base: base as usize,
                    units,
                    used: past,
                    ..EMPTY
                };
                *count = (*count).max(i + 1);
                *ARENA.mapped.get() += 1;
            }
            slot.is_some()
        };
        ARENA.lock.unlock();
        if !added {
            // SAFETY: base was just mapped and is unused.
            unsafe { os::unmap(base, units * UNIT) };
            return None;
        }
    }
}

/// The region, first unit and number of units of arena block `segment`.
///
/// # Safety
/// `segment` must be a huge segment of the arena (`huge_region != 0`), the
/// caller's.
unsafe fn place(segment: *const Segment) -> (usize, usize, usize) {
    // SAFETY: the caller's guarantee.
    let (region, n) = unsafe { ((*segment).huge_region as usize - 1, (*segment).mapping_size / UNIT) };
    ARENA.lock.lock();
    // SAFETY: the lock is held; the region holds this live block, so its
    // slot is not emptied (nor its base changed) while the caller has it.
    let base = unsafe { (*ARENA.regions.get())[region].base };
    ARENA.lock.unlock();
    (region, (segment as usize - base) / UNIT, n)
}

/// Gives the units of freed arena block `segment` back to its region (its
/// header and freed mark stay, and its map entry, until the units are
/// purged or taken).
///
/// # Safety
/// `segment` must be a huge segment of the arena whose block was freed.
pub(crate) unsafe fn free(segment: *mut Segment, delay: i64) {
    // SAFETY: the caller's guarantee.
    let (region, start, n) = unsafe { place(segment) };
    release(region, window(start, n), delay);
}

/// Frees units `units` of region `region` (a freed block's, or the tail a
/// shrinking block gave back): purged once free for `delay` ms
/// (`Region::freed_at`), at once when the delay is 0 or the free dirty
/// units exceed the huge cache's limit.
fn release(region: usize, units: u128, delay: i64) {
    let now = if delay > 0 { os::now_ms() } else { 0 };
    ARENA.lock.lock();
    // SAFETY: the lock is held.
    let over = unsafe {
        let regions = &mut *ARENA.regions.get();
        let r = &mut regions[region];
        r.used &= !units;
        let mut rest = units;
        while rest != 0 {
            r.freed_at[rest.trailing_zeros() as usize] = now;
            rest &= rest - 1;
        }
        // The earlier of the region's deadline and this one's: the delay
        // may have come down since the region's was set.
        if delay > 0 {
            let due = now + delay as u64;
            if r.purge_at == 0 || r.purge_at > due {
                r.purge_at = due;
                // Relaxed: the global deadline is a hint of when a pass is
                // worth running; the region state it points at is read by
                // the pass under `ARENA.lock`, whose release/acquire pair
                // orders it.
                GLOBAL_PURGE_AT.fetch_min(due, Ordering::Relaxed);
            }
        }
        let free_dirty: u32 = regions[..*ARENA.count.get()]
            .iter()
            .map(|r| (!r.used & r.dirty).count_ones())
            .sum();
        free_dirty as usize * UNIT > crate::policy::huge_cache_cap()
    };
    ARENA.lock.unlock();
    if delay == 0 || over || crate::segment::arena::NO_CACHES {
        let done = crate::segment::purge::try_purge_now(|| {
            let purged = purge_region(region, true);
            if over {
                crate::policy::huge_evicted(purged);
            }
        });
        if !done {
            // A purge pass is running (or a fork waits for one): it, or
            // the next, purges the region.
            ARENA.lock.lock();
            // SAFETY: the lock is held.
            unsafe {
                let r = &mut (*ARENA.regions.get())[region];
                r.purge_at = 1;
                r.purge_all = true;
            }
            ARENA.lock.unlock();
            GLOBAL_PURGE_AT.fetch_min(1, Ordering::Relaxed);
        }
    }
}

/// Purges the free dirty units of region `region` that have been free
/// for the purge delay (`all`: every free dirty unit), and sets the
/// region's deadline for the others; returns the bytes purged.
///
/// Units whose purge the OS refuses (locked memory, a sandbox) stay dirty
/// (a block taken there is not zero), and the freed headers on them go
/// back into the map (their double frees are still reported); they get
/// no deadline of their own and are tried again at the region's next
/// purge. A region left with no live block is unmapped whatever its
/// purges did.
fn purge_region(region: usize, all: bool) -> usize {
    let delay = crate::policy::purge_delay_ms();
    let now = if all { 0 } else { os::now_ms() };
    ARENA.lock.lock();
    // SAFETY: the lock is held. The units are marked used while the purge
    // runs, so that no one takes them meanwhile.
    let (base, units) = unsafe {
        let r = &mut (*ARENA.regions.get())[region];
        if r.base == 0 {
            ARENA.lock.unlock();
            return 0;
        }
        let free_dirty = !r.used & r.dirty;
        let mut units = free_dirty;
        r.purge_at = 0;
        let all = all || r.purge_all;
        r.purge_all = false;
        if !all && delay > 0 {
            // Only those free for the delay; the earliest of the others
            // sets the next deadline.
            let mut next = u64::MAX;
            let mut rest = free_dirty;
            while rest != 0 {
                let unit = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                let due = r.freed_at[unit].saturating_add(delay as u64);
                if due > now {
                    units &= !(1 << unit);
                    next = next.min(due);
                }
            }
            if next != u64::MAX {
                r.purge_at = next;
                // Relaxed: a hint, as in `release`. Lowered after the pass
                // running this claimed the deadline (its swap to `MAX`),
                // so the pass's own `fetch_min` of what it saw cannot
                // raise it past `next`.
                GLOBAL_PURGE_AT.fetch_min(next, Ordering::Relaxed);
            }
        }
        r.used |= units;
        (r.base, units)
    };
    ARENA.lock.unlock();
    let mut rest = units;
    let mut refused = 0u128;
    while rest != 0 {
        let start = rest.trailing_zeros() as usize;
        let len = ((!(rest >> start)).trailing_zeros() as usize).min(REGION_UNITS - start);
        rest &= !window(start, len);
        let from = base + start * UNIT;
        let mut headers = 0u128;
        for unit in 0..len {
            let s = (from + unit * UNIT) as *mut Segment;
            if is_segment(s) {
                map_set(s, false);
                headers |= 1 << unit;
            }
        }
        // SAFETY: the units are free (no live block), reserved above, and
        // their freed headers are out of the map.
        if !unsafe { os::purge(from as *mut u8, len * UNIT) } {
            refused |= window(start, len);
            // The headers keep their freed marks: back into the map.
            for unit in 0..len {
                if headers & (1 << unit) != 0 {
                    map_set((from + unit * UNIT) as *mut Segment, true);
                }
            }
        }
    }
    let purged = units & !refused;
    let bytes = purged.count_ones() as usize * UNIT;
    ARENA.lock.lock();
    // SAFETY: the lock is held. A region left without a live block (all
    // its units free, dirty only where a purge was refused) leaves its
    // slot, and is unmapped below.
    let empty = unsafe {
        let r = &mut (*ARENA.regions.get())[region];
        r.used &= !units;
        r.dirty &= !purged;
        r.purged |= purged;
        let past = if r.units == REGION_UNITS {
            0
        } else {
            !window(0, r.units)
        };
        if r.used & !past == 0 && r.dirty & !refused == 0 && r.base != 0 {
            let gone = (r.base, r.units, r.dirty);
            *r = EMPTY;
            *ARENA.mapped.get() -= 1;
            Some(gone)
        } else {
            None
        }
    };
    ARENA.lock.unlock();
    if let Some((base, units, dirty)) = empty {
        // Freed headers left on units whose purge was refused leave the
        // map with the region.
        for unit in 0..units {
            let s = (base + unit * UNIT) as *mut Segment;
            if dirty & (1 << unit) != 0 && is_segment(s) {
                map_set(s, false);
            }
        }
        stats::committed(-((dirty.count_ones() as usize * UNIT) as isize));
        // SAFETY: the region has no block and no one can take its units
        // (its slot is empty).
        unsafe { os::unmap(base as *mut u8, units * UNIT) };
    }
    stats::committed(-(bytes as isize));
    crate::policy::purged(bytes);
    bytes
}

/// Purges the regions that are due (all when `force`); returns the
/// earliest remaining deadline (`u64::MAX` when none).
pub(crate) fn purge_due(now: u64, force: bool) -> u64 {
    let mut next = u64::MAX;
    let mut due = 0u64;
    ARENA.lock.lock();
    // SAFETY: the lock is held.
    unsafe {
        let count = *ARENA.count.get();
        let regions = &*ARENA.regions.get();
        for (i, r) in regions[..count].iter().enumerate() {
            if r.base == 0 {
                continue;
            }
            if force || (r.purge_at != 0 && r.purge_at <= now) {
                due |= 1 << i;
            } else if r.purge_at != 0 {
                next = next.min(r.purge_at);
            }
        }
    }
    ARENA.lock.unlock();
    while due != 0 {
        let i = due.trailing_zeros() as usize;
        due &= due - 1;
        purge_region(i, force);
    }
    next
}

/// Purges every region and unmaps those left without a live block (the
/// OS refused a mapping: `segment::purge::unmap_cached`, under the purge
/// lock). Returns whether any was unmapped.
pub(crate) fn unmap_empty() -> bool {
    let mapped = || {
        ARENA.lock.lock();
        // SAFETY: the lock is held.
        let n = unsafe { *ARENA.mapped.get() };
        ARENA.lock.unlock();
        n
    };
    let before = mapped();
    purge_due(0, true);
    mapped() < before
}

/// Resizes arena block `segment` in place to `new_total` bytes (a
/// multiple of `UNIT`): shrinking gives the tail units back, growing takes
/// the free units after it. False when they are not free.
///
/// # Safety
/// `segment` must be a live huge segment of the arena, used by the caller
/// only; when shrinking, its tail must hold no live data.
pub(crate) unsafe fn resize_in_place(segment: *mut Segment, new_total: usize) -> bool {
    // SAFETY: the caller's guarantee.
    let (region, start, n) = unsafe { place(segment) };
    let m = new_total / UNIT;
    if m == n {
        return true;
    }
    if m < n {
        // SAFETY: the caller's guarantee.
        unsafe { (*segment).mapping_size = new_total };
        release(region, window(start + m, n - m), crate::policy::purge_delay_ms());
        return true;
    }
    if start + m > REGION_UNITS || m > MAX_UNITS {
        return false;
    }
    // (Units past a smaller region's end are used for good: no grow there.)
    let added = window(start + n, m - n);
    ARENA.lock.lock();
    // SAFETY: the lock is held.
    let dirty = unsafe {
        let r = &mut (*ARENA.regions.get())[region];
        if r.used & added != 0 {
            None
        } else {
            let dirty = (r.dirty & added).count_ones();
            let back = (r.purged & added).count_ones();
            r.used |= added;
            r.dirty |= added;
            r.purged &= !added;
            Some((dirty, back))
        }
    };
    ARENA.lock.unlock();
    let Some((dirty, back)) = dirty else {
        return false;
    };
    if back != 0 {
        crate::policy::recommitted(back as usize * UNIT);
    }
    for unit in n..m {
        let s = (segment as usize + unit * UNIT) as *mut Segment;
        if is_segment(s) {
            map_set(s, false);
        }
    }
    stats::committed((((m - n) - dirty as usize) * UNIT) as isize);
    // SAFETY: the caller's guarantee.
    unsafe { (*segment).mapping_size = new_total };
    true
}

/// Moves arena block `segment` out of the arena into a mapping of its own
/// of `new_total` bytes, page tables and all (`mremap`), and maps the hole
/// it leaves again. Returns the new header, or null when it cannot (the
/// block is then untouched).
///
/// # Safety
/// `segment` must be a live huge segment of the arena, used by the caller
/// only, and `new_total` at least its size.
pub(crate) unsafe fn move_out(segment: *mut Segment, new_total: usize) -> *mut Segment {
    // SAFETY: the caller's guarantee.
    let (region, start, n) = unsafe { place(segment) };
    let old_total = n * UNIT;
    ARENA.lock.lock();
    // SAFETY: the lock is held.
    let split = unsafe { (*ARENA.regions.get())[region].split } & window(start, n) != 0;
    ARENA.lock.unlock();
    if split {
        // Over a hole mapped again: maybe more than one kernel mapping,
        // which `mremap` cannot move as one. The caller copies.
        return ptr::null_mut();
    }
    // SAFETY: the caller's guarantee; the units lie in one kernel mapping
    // (the region's, no hole among them).
    let target = unsafe { crate::huge::move_mapping(segment, old_total, new_total) };
    if target.is_null() {
        return ptr::null_mut();
    }
    // The hole, mapped again: fresh, clean units; unless another mapping
    // landed there meanwhile, whose units then stay used for good.
    let refilled = !os::map_at(segment as usize, old_total).is_null();
    if refilled {
        crate::segment::arena::advise_thp(segment as *mut u8, old_total);
    }
    ARENA.lock.lock();
    // SAFETY: the lock is held.
    unsafe {
        let r = &mut (*ARENA.regions.get())[region];
        r.dirty &= !window(start, n);
        r.purged &= !window(start, n);
        r.split |= window(start, n);
        if refilled {
            r.used &= !window(start, n);
        }
    }
    ARENA.lock.unlock();
    let moved = target as *mut Segment;
    // SAFETY: the header moved with the block to `target`; its page heads
    // still point into the old range and are rebuilt.
    unsafe {
        (*moved).mapping_size = new_total;
        (*moved).huge_region = 0;
        (*moved).reset_page_heads();
    }
    stats::committed((new_total - old_total) as isize);
    map_set(moved, true);
    moved
}

/// Tests of the protocol windows, in the `hakmem_race_windows` build only
/// (scripts/test runs them there, one at a time: no other test's huge
/// blocks come and go meanwhile).
#[cfg(all(test, hakmem_race_windows))]
mod window_tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    /// The region and units of arena block `p`.
    fn units_of(p: *mut u8) -> (usize, u128) {
        let segment = crate::segment::segment_of(p);
        // SAFETY: p is a live huge block (the caller's: 32 MiB, above the
        // large sizes), so its header is `segment`; that the arena holds
        // it, as `place` requires, is asserted first.
        unsafe {
            assert_ne!((*segment).huge_region, 0, "a block of the arena");
            let (region, start, n) = place(segment);
            (region, window(start, n))
        }
    }

    /// Which of `units` of region `region` are free and dirty.
    fn free_dirty(region: usize, units: u128) -> u128 {
        ARENA.lock.lock();
        // SAFETY: the lock is held.
        let r = unsafe { &(*ARENA.regions.get())[region] };
        let found = if r.base == 0 { 0 } else { !r.used & r.dirty & units };
        ARENA.lock.unlock();
        found
    }

    /// A purge due at once — here because the free dirty units pass the
    /// huge cache's limit — that finds a purge pass running (the purge
    /// lock held) is left to the next pass, which must purge the whole
    /// region: also the units freed just now, which their own age would
    /// keep for the purge delay. Found by a review at stop 42: they waited
    /// the whole delay with the cache over its limit.
    #[test]
    fn a_purge_due_at_once_that_found_a_pass_running_is_done_whole_by_the_next_pass() {
        let _serial = crate::sync::serial_window_tests();
        // Blocks of 32 MiB (17 units each, header included), untouched,
        // until past the limit by two of them.
        const BLOCK: usize = 32 << 20;
        let count = crate::policy::huge_cache_cap() / BLOCK + 2;
        let blocks: Vec<usize> = (0..count).map(|_| crate::malloc(BLOCK) as usize).collect();
        assert!(blocks.iter().all(|&p| p != 0));
        let (region, units) = units_of(*blocks.last().unwrap() as *mut u8);
        crate::segment::purge::lock_purges();
        for &p in &blocks {
            // SAFETY: p is a live block, freed once.
            unsafe { crate::free(p as *mut u8) };
        }
        crate::segment::purge::unlock_purges();
        assert_ne!(
            free_dirty(region, units),
            0,
            "the last block's units wait for the next pass"
        );
        crate::segment::purge::lock_purges();
        purge_due(os::now_ms(), false);
        crate::segment::purge::unlock_purges();
        assert_eq!(
            free_dirty(region, units),
            0,
            "the next pass purged the region whole, the units just freed too"
        );
    }
}
