//! The cache of freed huge mappings (`secure`: the quarantine's slots):
//! take the closest fit, put back with eviction of the largest, purge the
//! due ones; the mapping sizes that make reuse likely.

use super::{huge_unmap, purged_bytes};
use crate::os;
use crate::segment::purge::GLOBAL_PURGE_AT;
#[cfg(not(feature = "secure"))]
use crate::segment::SEGMENT_SIZE;
use crate::segment::{Segment, PAGE_SIZE};
use crate::stats;
use crate::sync::{global, Ordering, SpinLock};
use core::cell::UnsafeCell;
use core::ptr;

/// Huge mappings kept for reuse after free, so that a program cycling
/// through multi-MiB buffers does not mmap/munmap per allocation.
pub(super) const HUGE_CACHE_SLOTS: usize = 64;

/// A cached mapping up to this many times larger than a request serves it
/// as it is (its tail stays, resident or not); a larger one is shrunk.
#[cfg(not(feature = "secure"))]
pub(super) const SHRINK_FACTOR: usize = 4;

pub(crate) struct HugeCache {
    pub(super) lock: SpinLock,
    pub(super) slots: UnsafeCell<[*mut Segment; HUGE_CACHE_SLOTS]>,
    pub(super) bytes: UnsafeCell<usize>,
    /// `secure`: huge blocks freed so far (the quarantine's clock).
    #[cfg(feature = "secure")]
    pub(super) frees: UnsafeCell<u64>,
    /// `secure`: xorshift state choosing among reusable mappings (0 until
    /// seeded from the kernel).
    #[cfg(feature = "secure")]
    pub(super) rng: UnsafeCell<u64>,
}

// SAFETY: slots, bytes, frees and rng are only accessed with `lock` held.
unsafe impl Sync for HugeCache {}

global! {
    pub(crate) static HUGE_CACHE: HugeCache = HugeCache {
        lock: SpinLock::new(),
        slots: UnsafeCell::new([ptr::null_mut(); HUGE_CACHE_SLOTS]),
        bytes: UnsafeCell::new(0),
        #[cfg(feature = "secure")]
        frees: UnsafeCell::new(0),
        #[cfg(feature = "secure")]
        rng: UnsafeCell::new(0),
    };
}

#[cfg(not(feature = "secure"))]
/// Rounds a huge mapping size up to one of four steps per power of two, so
/// freed mappings are reused by requests of similar size (at most 25 %
/// virtual overhead; untouched tails cost no memory).
pub(super) fn huge_mapping_size(total: usize) -> Option<usize> {
    if total <= SEGMENT_SIZE {
        return Some(SEGMENT_SIZE);
    }
    let b = usize::BITS - 1 - (total - 1).leading_zeros();
    let step = 1usize << (b - 2);
    total.checked_add(step - 1).map(|t| t & !(step - 1))
}

/// Takes the cached mapping that serves a request for `mapping_size` bytes
/// best: among those whose pages are still resident (not purged) if any,
/// the smallest at least that large, else the largest. Null when the cache
/// is empty. (`secure` builds take from the cache, their quarantine,
/// with `quarantine_take`.)
#[cfg(not(feature = "secure"))]
pub(super) fn huge_cache_take(mapping_size: usize) -> *mut Segment {
    HUGE_CACHE.lock.lock();
    let mut best: Option<usize> = None;
    // SAFETY: the lock is held; cached segments are unused huge segments.
    let found = unsafe {
        let slots = &mut *HUGE_CACHE.slots.get();
        // Ordered by: resident first, then large enough, then closest size.
        let rank = |s: *mut Segment| {
            let size = (*s).mapping_size;
            let fits = size >= mapping_size;
            let gap = if fits { size - mapping_size } else { mapping_size - size };
            ((*s).purged_units != 0, !fits, gap)
        };
        for (i, &slot) in slots.iter().enumerate() {
            if slot.is_null() {
                continue;
            }
            if best.is_none_or(|b| rank(slot) < rank(slots[b])) {
                best = Some(i);
            }
        }
        match best {
            Some(i) => {
                let s = slots[i];
                slots[i] = ptr::null_mut();
                *HUGE_CACHE.bytes.get() -= (*s).mapping_size;
                s
            }
            None => ptr::null_mut(),
        }
    };
    HUGE_CACHE.lock.unlock();
    found
}

/// Keeps `segment` for reuse; returns the segment to unmap instead (the
/// one given, or the largest older one it displaced), or null.
pub(super) fn huge_cache_put(segment: *mut Segment) -> *mut Segment {
    let cap = crate::policy::huge_cache_cap();
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; segment and the cached segments are unused
    // huge segments.
    let victim = unsafe {
        let size = (*segment).mapping_size;
        let slots = &mut *HUGE_CACHE.slots.get();
        let bytes = &mut *HUGE_CACHE.bytes.get();
        let free_slot = slots.iter().position(|s| s.is_null());
        let largest = (0..HUGE_CACHE_SLOTS)
            .filter(|&i| !slots[i].is_null())
            .max_by_key(|&i| (*slots[i]).mapping_size);
        match (free_slot, largest) {
            (Some(i), _) if *bytes + size <= cap => {
                slots[i] = segment;
                *bytes += size;
                ptr::null_mut()
            }
            (_, Some(i)) if *bytes - (*slots[i]).mapping_size + size <= cap => {
                let old = slots[i];
                *bytes = *bytes - (*old).mapping_size + size;
                slots[i] = segment;
                old
            }
            _ => segment,
        }
    };
    HUGE_CACHE.lock.unlock();
    victim
}

/// Unmaps every cached huge mapping and the huge arena's regions left
/// without a block (`segment::purge::unmap_cached`, under the purge lock:
/// the OS refused a mapping). `secure`: nothing (the cache is the
/// quarantine, released by its own rule). Returns whether anything was
/// unmapped.
pub(crate) fn unmap_cached() -> bool {
    #[cfg(feature = "secure")]
    return false;
    #[cfg(not(feature = "secure"))]
    {
        unmap_slots(0) | crate::huge::arena::unmap_empty()
    }
}

/// Unmaps every mapping in the cache (`secure`: the quarantine) when they
/// hold `at_least` bytes together; returns whether there was any.
pub(super) fn unmap_slots(at_least: usize) -> bool {
    let mut taken = [ptr::null_mut::<Segment>(); HUGE_CACHE_SLOTS];
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; the slots are swapped out whole.
    unsafe {
        if *HUGE_CACHE.bytes.get() >= at_least {
            core::ptr::swap(HUGE_CACHE.slots.get(), &mut taken);
            *HUGE_CACHE.bytes.get() = 0;
        }
    }
    HUGE_CACHE.lock.unlock();
    let mut any = false;
    for &s in taken.iter().filter(|s| !s.is_null()) {
        // SAFETY: taken off the cache: an unused huge segment no list
        // refers to.
        unsafe { huge_unmap(s) };
        any = true;
    }
    any
}

/// Purges the huge mappings in the cache that are due (all when `force`);
/// returns the earliest remaining deadline (`u64::MAX` when none).
pub(crate) fn purge_huge_cache(now: u64, force: bool) -> u64 {
    let mut due = [ptr::null_mut::<Segment>(); HUGE_CACHE_SLOTS];
    let mut next = u64::MAX;
    HUGE_CACHE.lock.lock();
    // SAFETY: the lock is held; cached segments are unused huge segments.
    unsafe {
        for (slot, d) in (*HUGE_CACHE.slots.get()).iter_mut().zip(due.iter_mut()) {
            let s = *slot;
            if s.is_null() || (*s).dirty_units == 0 || (*s).purge_at_ms == 0 {
                continue;
            }
            if force || (*s).purge_at_ms <= now {
                *d = s;
                *slot = ptr::null_mut();
                *HUGE_CACHE.bytes.get() -= (*s).mapping_size;
            } else {
                next = next.min((*s).purge_at_ms);
            }
        }
    }
    HUGE_CACHE.lock.unlock();
    #[cfg(not(feature = "secure"))]
    {
        next = next.min(crate::huge::arena::purge_due(now, force));
    }
    for &s in due.iter().filter(|s| !s.is_null()) {
        // SAFETY: s was taken off the cache above: exclusively ours; its
        // block area holds no live data.
        unsafe {
            let block = (s as *mut u8).add(PAGE_SIZE);
            if os::purge(block, (*s).mapping_size - PAGE_SIZE) {
                // The freed mark back (its page faulted in again, zero but
                // for the mark), so that a double free after the purge is
                // still caught. (`secure`: the mapping is in quarantine,
                // `PROT_NONE` and out of the segment map.)
                #[cfg(not(feature = "secure"))]
                {
                    crate::check::valgrind::header_access(block);
                    (*(block as *mut crate::small::page::Block)).freed =
                        crate::small::page::freed_mark((*s).page_of(block));
                    crate::check::valgrind::header_done(block);
                }
                let bytes = purged_bytes((*s).mapping_size);
                stats::committed(-(bytes as isize));
                crate::policy::purged(bytes);
                (*s).purged_units = 1;
                (*s).dirty_units = 0;
            }
            // Refused (locked memory, a sandbox): the mapping keeps its
            // bytes and stays dirty — handed out again, it is not zero —
            // and is not tried again (it goes when the cache evicts it).
            (*s).purge_at_ms = 0;
        }
        let victim = huge_cache_put(s);
        if !victim.is_null() {
            // SAFETY: victim is an unused huge segment no list refers to.
            unsafe { huge_unmap(victim) };
        }
    }
    next
}

/// Puts freed huge `segment`, its purge state written (`deadline`: its
/// `purge_at_ms`, 0 for none), into the cache (`secure`: the quarantine);
/// returns the segment to unmap instead (this one, or an older one it
/// displaced), or null. From the put on, another thread may take the
/// segment out of the cache: it is not read again unless it comes back
/// as the victim, hence the deadline passed in.
pub(super) fn cache_freed(segment: *mut Segment, deadline: u64) -> *mut Segment {
    let victim = huge_cache_put(segment);
    if !victim.is_null() {
        // SAFETY: victim is an unused huge segment no list refers to.
        crate::policy::huge_evicted(unsafe { (*victim).mapping_size });
    }
    if victim != segment && deadline != 0 {
        GLOBAL_PURGE_AT.fetch_min(deadline, Ordering::Relaxed);
    }
    victim
}
