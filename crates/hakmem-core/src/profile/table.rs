//! The profile's records, in one mapping made at the first sample and
//! never given back: the distinct stacks (each with the samples ever taken
//! there, for `alloc_space`), their frames, and the live sampled blocks
//! (address, size, stack: for `inuse_space`). Fixed capacities bound the
//! profile's memory ([`MAPPED_BYTES`], touched only as the tables fill); a
//! sample that finds a table full is not recorded (its block is not
//! marked, and counted in `dropped`).
//!
//! One lock guards it all: taken for an insert (a sample: once per `rate`
//! bytes per thread), a removal (the free of a sampled block) and a dump,
//! never while the unwinder runs or another hakmem lock is held. A leaf:
//! `fork` takes it last (thread/mod.rs).

use super::ProfileStats;
use crate::os;
use crate::sync::plain::{AtomicBool, AtomicUsize};
use crate::sync::Ordering;
use core::cell::UnsafeCell;
use core::ptr;

/// Distinct stacks (a power of two; at most 3/4 used).
pub(super) const STACK_SLOTS: usize = 1 << 14;
/// Frames of all stacks together.
pub(super) const FRAME_POOL: usize = 1 << 18;
/// Live samples (a power of two; at most 3/4 used): at the default rate,
/// 48 Gi of live heap before one is dropped.
pub(super) const LIVE_SLOTS: usize = 1 << 17;

/// A distinct stack.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Stack {
    /// Hash of the frames; 0 marks an empty slot.
    pub(super) hash: u64,
    /// Where its frames start in the pool, and how many.
    pub(super) frames: u32,
    pub(super) depth: u32,
    /// Estimated objects and bytes ever allocated here (each sample
    /// weighted by the inverse of its probability).
    pub(super) alloc_objects: f64,
    pub(super) alloc_bytes: f64,
    /// Scratch for a dump: the live samples' estimates.
    pub(super) inuse_objects: f64,
    pub(super) inuse_bytes: f64,
}

/// A live sampled block; `addr == 0` marks an empty slot.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct Live {
    pub(super) addr: usize,
    pub(super) size: usize,
    /// The mean interval it was sampled at (its weight's).
    pub(super) rate: usize,
    pub(super) stack: u32,
}

pub(super) const MAPPED_BYTES: usize = STACK_SLOTS * core::mem::size_of::<Stack>()
    + FRAME_POOL * core::mem::size_of::<usize>()
    + LIVE_SLOTS * core::mem::size_of::<Live>();

/// The tables (null pointers until the first sample).
pub(super) struct Tables {
    pub(super) stacks: *mut Stack,
    pub(super) pool: *mut usize,
    pub(super) live: *mut Live,
    pub(super) stack_count: usize,
    pub(super) pool_used: usize,
    pub(super) live_count: usize,
}

struct Cell(UnsafeCell<Tables>);
// SAFETY: the tables are only touched under LOCK.
unsafe impl Sync for Cell {}

static TABLES: Cell = Cell(UnsafeCell::new(Tables {
    stacks: ptr::null_mut(),
    pool: ptr::null_mut(),
    live: ptr::null_mut(),
    stack_count: 0,
    pool_used: 0,
    live_count: 0,
}));
static LOCK: AtomicBool = AtomicBool::new(false);
/// Takes of `LOCK` by the thread that holds it for a `fork` (as
/// `SpinLock`'s: `sync::holds_locks_for_fork`), undone first by `unlock`.
static REENTERED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);

pub(super) fn lock() {
    // Acquire: the tables' last writer released them.
    while LOCK.swap(true, Ordering::Acquire) {
        if crate::sync::holds_locks_for_fork() {
            // Relaxed: only the holder touches the count.
            REENTERED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Relaxed: only a hint of when to try the swap again.
        while LOCK.load(Ordering::Relaxed) {
            os::yield_now();
        }
    }
}

pub(super) fn unlock() {
    // Relaxed: as `SpinLock::unlock`'s count (sync.rs): written only by the
    // fork's owner while it holds `LOCK`, 0 again before its Release store
    // below, which the next holder's Acquire swap pairs with.
    if REENTERED.load(Ordering::Relaxed) != 0 {
        REENTERED.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    // Release: publishes the tables to the next holder.
    LOCK.store(false, Ordering::Release);
}

/// Runs `f` on the tables under the lock.
pub(super) fn with<R>(f: impl FnOnce(&mut Tables) -> R) -> R {
    lock();
    // SAFETY: the lock makes the tables ours.
    let r = f(unsafe { &mut *TABLES.0.get() });
    unlock();
    r
}

fn hash_frames(frames: &[usize]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &f in frames {
        h = (h ^ f as u64).wrapping_mul(0x0000_0100_0000_01b3);
        h ^= h >> 29;
    }
    h | 1
}

fn hash_addr(addr: usize) -> usize {
    ((addr as u64 >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize
}

impl Tables {
    /// Maps the tables on first use; false when the OS refuses.
    fn ensure(&mut self) -> bool {
        if !self.stacks.is_null() {
            return true;
        }
        let size = MAPPED_BYTES.next_multiple_of(os::page_size());
        let base = os::map(size);
        if base.is_null() {
            return false;
        }
        self.stacks = base.cast();
        // SAFETY: the three tables lie one after another in the mapping
        // (each size a multiple of 8).
        unsafe {
            self.pool = base.add(STACK_SLOTS * core::mem::size_of::<Stack>()).cast();
            self.live = (self.pool as *mut u8)
                .add(FRAME_POOL * core::mem::size_of::<usize>())
                .cast();
        }
        true
    }

    /// The index of the stack `frames`, added when new; None when full.
    fn stack_index(&mut self, frames: &[usize]) -> Option<usize> {
        let h = hash_frames(frames);
        let mut i = h as usize & (STACK_SLOTS - 1);
        loop {
            // SAFETY: i < STACK_SLOTS, inside the mapped table.
            let s = unsafe { &mut *self.stacks.add(i) };
            if s.hash == 0 {
                break;
            }
            if s.hash == h && s.depth as usize == frames.len() && self.frames_of(s) == frames {
                return Some(i);
            }
            i = (i + 1) & (STACK_SLOTS - 1);
        }
        if self.stack_count >= STACK_SLOTS / 4 * 3 || self.pool_used + frames.len() > FRAME_POOL {
            return None;
        }
        // SAFETY: pool_used + len <= FRAME_POOL, inside the mapped pool;
        // i is the empty slot found above.
        unsafe {
            ptr::copy_nonoverlapping(frames.as_ptr(), self.pool.add(self.pool_used), frames.len());
            *self.stacks.add(i) = Stack {
                hash: h,
                frames: self.pool_used as u32,
                depth: frames.len() as u32,
                alloc_objects: 0.0,
                alloc_bytes: 0.0,
                inuse_objects: 0.0,
                inuse_bytes: 0.0,
            };
        }
        self.pool_used += frames.len();
        self.stack_count += 1;
        Some(i)
    }

    /// The frames of stack `s` (a stack of these tables).
    pub(super) fn frames_of(&self, s: &Stack) -> &[usize] {
        // SAFETY: a recorded stack's frames lie in the used part of the pool.
        unsafe { core::slice::from_raw_parts(self.pool.add(s.frames as usize), s.depth as usize) }
    }

    /// The slot of live block `addr`, or of the empty slot where it would go.
    fn live_slot(&self, addr: usize) -> usize {
        let mut i = hash_addr(addr) & (LIVE_SLOTS - 1);
        loop {
            // SAFETY: i < LIVE_SLOTS.
            let a = unsafe { (*self.live.add(i)).addr };
            if a == 0 || a == addr {
                return i;
            }
            i = (i + 1) & (LIVE_SLOTS - 1);
        }
    }

    /// Every recorded stack, by slot.
    pub(super) fn stacks_mut(&mut self) -> &mut [Stack] {
        if self.stacks.is_null() {
            return &mut [];
        }
        // SAFETY: the mapped table of STACK_SLOTS entries, ours under the lock.
        unsafe { core::slice::from_raw_parts_mut(self.stacks, STACK_SLOTS) }
    }

    /// Every live slot.
    pub(super) fn live(&self) -> &[Live] {
        if self.live.is_null() {
            return &[];
        }
        // SAFETY: the mapped table of LIVE_SLOTS entries, ours under the lock.
        unsafe { core::slice::from_raw_parts(self.live, LIVE_SLOTS) }
    }
}

/// Records live sample `addr` of `size` bytes taken at `frames`; false
/// when it could not be (no memory, a table full).
pub(super) fn insert(addr: usize, size: usize, frames: &[usize]) -> bool {
    let rate = super::rate();
    let (objects, bytes) = super::pprof::weights(size, rate);
    let ok = with(|t| {
        if !t.ensure() || t.live_count >= LIVE_SLOTS / 4 * 3 {
            return false;
        }
        let Some(stack) = t.stack_index(frames) else {
            return false;
        };
        // SAFETY: stack < STACK_SLOTS, a recorded stack.
        let s = unsafe { &mut *t.stacks.add(stack) };
        s.alloc_objects += objects;
        s.alloc_bytes += bytes;
        let i = t.live_slot(addr);
        // SAFETY: i < LIVE_SLOTS.
        let slot = unsafe { &mut *t.live.add(i) };
        if slot.addr == 0 {
            t.live_count += 1;
        }
        *slot = Live {
            addr,
            size,
            rate,
            stack: stack as u32,
        };
        true
    });
    if !ok {
        // Relaxed: a statistics counter.
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
    ok
}

/// Takes live sample `addr` out (nothing when it is not recorded).
pub(super) fn remove(addr: usize) {
    with(|t| {
        if t.live.is_null() {
            return;
        }
        let mut i = t.live_slot(addr);
        // SAFETY: every index is < LIVE_SLOTS.
        unsafe {
            if (*t.live.add(i)).addr == 0 {
                return;
            }
            t.live_count -= 1;
            // Backward-shift deletion (linear probing): move later entries
            // of the run into the hole when their home slot allows it.
            let mut j = i;
            loop {
                j = (j + 1) & (LIVE_SLOTS - 1);
                let e = *t.live.add(j);
                if e.addr == 0 {
                    break;
                }
                let home = hash_addr(e.addr) & (LIVE_SLOTS - 1);
                // e may move to i when its home is not in (i, j] cyclically.
                let between = if i <= j {
                    home > i && home <= j
                } else {
                    home > i || home <= j
                };
                if !between {
                    *t.live.add(i) = e;
                    i = j;
                }
            }
            (*t.live.add(i)).addr = 0;
        }
    });
}

/// Copies the stacks (with the live samples' estimates filled in) and
/// the frames they use into `stacks` and `pool`, under the lock, so that
/// a dump encodes (and reads symbol tables) without holding it. Returns
/// how many frames were copied (0: no sample yet, nothing copied).
pub(super) fn snapshot(stacks: &mut [Stack], pool: &mut [usize]) -> usize {
    with(|t| {
        if t.stacks.is_null() {
            return 0;
        }
        stacks.copy_from_slice(t.stacks_mut());
        for s in stacks.iter_mut() {
            s.inuse_objects = 0.0;
            s.inuse_bytes = 0.0;
        }
        for l in t.live().iter().filter(|l| l.addr != 0) {
            let (objects, bytes) = super::pprof::weights(l.size, l.rate);
            let s = &mut stacks[l.stack as usize];
            s.inuse_objects += objects;
            s.inuse_bytes += bytes;
        }
        // SAFETY: the used part of the mapped pool, ours under the lock.
        let used = unsafe { core::slice::from_raw_parts(t.pool, t.pool_used) };
        pool[..used.len()].copy_from_slice(used);
        used.len()
    })
}

pub(super) fn stats() -> ProfileStats {
    with(|t| ProfileStats {
        live_samples: t.live_count,
        stacks: t.stack_count,
        // Relaxed: a statistics counter.
        dropped: DROPPED.load(Ordering::Relaxed),
        // Relaxed: statistics counters.
        walks: super::unwind::WALKS.load(Ordering::Relaxed),
        // Relaxed: as above.
        libgcc_walks: super::unwind::LIBGCC_WALKS.load(Ordering::Relaxed),
        mapped_bytes: if t.stacks.is_null() {
            0
        } else {
            MAPPED_BYTES + super::UNWIND_CACHE_BYTES
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Insertions and removals that collide in the live table (addresses
    /// whose home slots fall in one window of 32, so that their runs
    /// overlap) leave every other entry findable: the backward shift keeps
    /// each run unbroken.
    #[test]
    fn live_table_removal_keeps_colliding_entries() {
        // Addresses far from any real block (the tables are the process's;
        // these are taken out again below).
        let frames = [1usize, 2, 3];
        let mut addrs = [0usize; 64];
        let mut n = 0;
        let mut a = 0x7000_0000_0000usize;
        while n < addrs.len() {
            a += 16;
            if hash_addr(a) & (LIVE_SLOTS - 1) < 32 {
                addrs[n] = a;
                n += 1;
            }
        }
        let before = stats().live_samples;
        for &a in &addrs {
            assert!(insert(a, 100, &frames));
        }
        assert_eq!(stats().live_samples, before + addrs.len());
        for &a in addrs.iter().step_by(2) {
            remove(a);
        }
        with(|t| {
            for (k, &a) in addrs.iter().enumerate() {
                let i = t.live_slot(a);
                // SAFETY: i < LIVE_SLOTS.
                let found = unsafe { (*t.live.add(i)).addr } == a;
                assert_eq!(found, k % 2 == 1, "entry {k}");
            }
        });
        for &a in addrs.iter().skip(1).step_by(2) {
            remove(a);
        }
        assert_eq!(stats().live_samples, before);
    }
}
