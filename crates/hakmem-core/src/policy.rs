//! The adaptive policy (`HAKMEM_POLICY=adaptive`, the default): the purge
//! delay and the huge cache's byte limit follow the reuse the program shows.
//!
//! What the research allocator's learner did, reduced to what paid: slow
//! paths count events into a few relaxed counters (bytes purged, purged
//! bytes taken back into use, huge mappings thrown out of a full cache and
//! huge mappings made fresh), and every `EPOCH_MS` one thread — whichever
//! slow path notices first, never a background thread — turns them into a
//! decision:
//!
//! - **Purge delay.** Memory that is purged and then taken back into use
//!   soon after cost a `madvise` and the page faults of refilling it for
//!   nothing: when at least half the bytes purged in an epoch came back
//!   (`waste ≥ 1/2`), the delay doubles, up to `DELAY_MAX_MS`. When almost
//!   none did (`waste ≤ 1/8`), the delay halves, down to `DELAY_MIN_MS`, so
//!   a program that frees a burst and moves on gets it back sooner.
//! - **Huge cache.** When the cache threw a mapping out for want of room
//!   and, in the same epoch, a huge request had to map a fresh one, the
//!   cache was too small for the program's set of buffers: its limit
//!   doubles, up to `HUGE_CAP_MAX`. When a larger limit saw neither hits
//!   nor evictions while its entries were purged unused, it halves back
//!   towards the fixed default.
//! - **Freeze and relearn.** After `STABLE_EPOCHS` epochs with a signal and
//!   no change, the choice is frozen with the signal it was made on; a frozen
//!   policy decides again only when an epoch's signal drifts from that one
//!   by more than `DRIFT` (20 points of the waste or miss fraction).
//!
//! Epochs with too little signal (under `SIGNAL_MIN` bytes) change nothing
//! and count for nothing. Memory is bounded: the counters, the two values
//! and the last `LOG_LEN` decisions, all static. Everything starts at the
//! fixed policy's values, so the policy is ready before the first
//! allocation and both policies are equally correct: they only pick numbers
//! within bounds the fixed policy could have been configured with.
//!
//! `HAKMEM_POLICY=fixed` keeps the configured delay (default 250 ms) and the
//! default limit; an explicit `HAKMEM_PURGE_DELAY` fixes the delay under
//! either policy (the huge limit still adapts under `adaptive`), as does a
//! delay of 0 (purge at once) or negative (never).

use crate::config::{config, Policy, DEFAULT_PURGE_DELAY_MS};
use crate::sync::{
    plain::{AtomicU64, AtomicU8, AtomicUsize},
    Ordering,
};

/// How often (at most) the counters are turned into a decision.
pub(crate) const EPOCH_MS: u64 = 500;
/// Bounds of the adapted purge delay.
pub const DELAY_MIN_MS: u64 = 50;
/// See `DELAY_MIN_MS`.
pub const DELAY_MAX_MS: u64 = 1000;
/// The fixed policy's huge-cache limit, and the adapted one's floor.
pub const HUGE_CAP_DEFAULT: usize = 256 << 20;
/// The adapted huge-cache limit's ceiling.
pub const HUGE_CAP_MAX: usize = 1 << 30;
/// Bytes of signal an epoch needs to count: a few MiB purged and faulted
/// back per epoch cost well under a millisecond of page faults, not worth
/// holding memory longer for (a program's steady trickle of page releases
/// is about that much; measured in tests/policy.rs's burst).
const SIGNAL_MIN: u64 = 4 << 20;
/// Epochs with signal and no change before the choice freezes.
const STABLE_EPOCHS: u32 = 4;
/// Drift of a fraction (in 1/256ths: about 20 points) that unfreezes.
const DRIFT: u32 = 51;
/// Decisions remembered for the report.
pub const LOG_LEN: usize = 8;

/// What happened in one epoch (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Epoch {
    /// Bytes purged (pages and huge mappings).
    pub purged: u64,
    /// Purged bytes taken back into use.
    pub recommitted: u64,
    /// Huge mappings unmapped because the cache was full.
    pub huge_evicted: u64,
    /// Huge mappings made fresh (the cache had none to give).
    pub huge_mapped: u64,
    /// Huge requests served from the cache.
    pub huge_hits: u64,
}

/// A decision, as the report shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The purge delay changed: milliseconds, old and new.
    Delay(u64, u64),
    /// The huge cache limit changed: bytes, old and new.
    HugeCap(usize, usize),
    /// The choice froze.
    Freeze,
    /// A frozen choice was opened again: the signal drifted.
    Relearn,
}

/// The learner's state: the values it chose and its freeze.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Learner {
    pub delay_ms: u64,
    pub adapt_delay: bool,
    pub huge_cap: usize,
    stable: u32,
    /// The signal (waste, miss fractions in 1/256ths) frozen on, if frozen.
    frozen_on: Option<(u32, u32)>,
}

/// Fraction `part / whole` in 1/256ths (0 when `whole` is 0).
fn fraction(part: u64, whole: u64) -> u32 {
    part.min(whole).saturating_mul(256).checked_div(whole).unwrap_or(0) as u32
}

impl Learner {
    pub(crate) const fn new(delay_ms: u64, adapt_delay: bool) -> Learner {
        Learner {
            delay_ms,
            adapt_delay,
            huge_cap: HUGE_CAP_DEFAULT,
            stable: 0,
            frozen_on: None,
        }
    }

    /// Turns one epoch's counts into decisions (at most three: a
    /// relearn, then a change or a freeze), passed to `log`.
    pub(crate) fn epoch(&mut self, e: &Epoch, mut log: impl FnMut(Decision)) {
        let delay_signal = self.adapt_delay && e.purged.max(e.recommitted) >= SIGNAL_MIN;
        // Huge traffic, or a raised limit in an epoch that purged but saw
        // no huge traffic (the limit may come down).
        let huge_signal = e.huge_evicted.max(e.huge_mapped).max(e.huge_hits) > 0
            || (self.huge_cap > HUGE_CAP_DEFAULT && e.purged > 0);
        if !delay_signal && !huge_signal {
            return;
        }
        let waste = fraction(e.recommitted, e.purged.max(1));
        let misses = fraction(e.huge_evicted.min(e.huge_mapped), e.huge_mapped + e.huge_hits);
        if let Some((w, m)) = self.frozen_on {
            if waste.abs_diff(w) <= DRIFT && misses.abs_diff(m) <= DRIFT {
                return;
            }
            self.frozen_on = None;
            self.stable = 0;
            log(Decision::Relearn);
        }
        let mut changed = false;
        if delay_signal {
            let old = self.delay_ms;
            if waste >= 128 {
                self.delay_ms = (old * 2).min(DELAY_MAX_MS);
            } else if waste <= 32 {
                self.delay_ms = (old / 2).max(DELAY_MIN_MS);
            }
            if self.delay_ms != old {
                log(Decision::Delay(old, self.delay_ms));
                changed = true;
            }
        }
        if huge_signal {
            let old = self.huge_cap;
            if e.huge_evicted > 0 && e.huge_mapped > 0 {
                self.huge_cap = (old * 2).min(HUGE_CAP_MAX);
            } else if e.huge_evicted == 0 && e.huge_hits == 0 && e.purged > 0 {
                self.huge_cap = (old / 2).max(HUGE_CAP_DEFAULT);
            }
            if self.huge_cap != old {
                log(Decision::HugeCap(old, self.huge_cap));
                changed = true;
            }
        }
        if changed {
            self.stable = 0;
        } else {
            self.stable += 1;
            if self.stable >= STABLE_EPOCHS {
                self.frozen_on = Some((waste, misses));
                log(Decision::Freeze);
            }
        }
    }

    pub(crate) fn frozen(&self) -> bool {
        self.frozen_on.is_some()
    }
}

// The counters of the current epoch (slow paths add, the evaluator swaps).
static PURGED: AtomicU64 = AtomicU64::new(0);
static RECOMMITTED: AtomicU64 = AtomicU64::new(0);
static HUGE_EVICTED: AtomicU64 = AtomicU64::new(0);
static HUGE_MAPPED: AtomicU64 = AtomicU64::new(0);
static HUGE_HITS: AtomicU64 = AtomicU64::new(0);

// What the policy chose, read by the slow paths (Relaxed: a value, not a
// publication; a stale one is a delay or a limit the policy held just now).
static DELAY_MS: AtomicU64 = AtomicU64::new(DEFAULT_PURGE_DELAY_MS as u64);
static HUGE_CAP: AtomicUsize = AtomicUsize::new(HUGE_CAP_DEFAULT);

/// When the next epoch ends (0: the learner is not set up yet).
static NEXT_EPOCH_MS: AtomicU64 = AtomicU64::new(0);
/// Held by the one thread turning an epoch into decisions (a try-lock:
/// nobody waits for it).
static BUSY: AtomicU8 = AtomicU8::new(0);

/// The learner and its log: only touched with `BUSY` held.
struct Shared {
    learner: Learner,
    log: [(u64, Decision); LOG_LEN],
    logged: usize,
    epochs: u64,
    /// When the learner was set up (the log's times count from here).
    start_ms: u64,
}

struct SharedCell(core::cell::UnsafeCell<Shared>);

// SAFETY: the cell is only accessed by the thread holding `BUSY` (Acquire
// CAS to take it, Release store to give it back).
unsafe impl Sync for SharedCell {}

static SHARED: SharedCell = SharedCell(core::cell::UnsafeCell::new(Shared {
    learner: Learner::new(DEFAULT_PURGE_DELAY_MS as u64, true),
    log: [(0, Decision::Freeze); LOG_LEN],
    logged: 0,
    epochs: 0,
    start_ms: 0,
}));

fn adaptive() -> bool {
    config().policy == Policy::Adaptive
}

/// The purge delay in force (ms; 0 = at once, negative = never).
#[inline]
pub(crate) fn purge_delay_ms() -> i64 {
    let cfg = config();
    if cfg.policy == Policy::Fixed || cfg.purge_delay_set || cfg.purge_delay_ms <= 0 {
        cfg.purge_delay_ms
    } else {
        DELAY_MS.load(Ordering::Relaxed) as i64
    }
}

/// The huge cache's byte limit in force.
#[inline]
pub(crate) fn huge_cache_cap() -> usize {
    HUGE_CAP.load(Ordering::Relaxed)
}

/// `bytes` were purged (given back to the OS, still mapped).
pub(crate) fn purged(bytes: usize) {
    PURGED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// `bytes` purged earlier were taken back into use.
pub(crate) fn recommitted(bytes: usize) {
    RECOMMITTED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// A huge mapping of `bytes` left the full cache for the OS.
pub(crate) fn huge_evicted(bytes: usize) {
    HUGE_EVICTED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// A huge request mapped `bytes` fresh.
pub(crate) fn huge_mapped(bytes: usize) {
    HUGE_MAPPED.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// A huge request of `bytes` was served by the cache (`secure`: by the
/// quarantine).
pub(crate) fn huge_hit(bytes: usize) {
    HUGE_HITS.fetch_add(bytes as u64, Ordering::Relaxed);
}

/// Slow paths call this with the time: at the end of an epoch, one of
/// them turns the counters into decisions.
#[inline]
pub(crate) fn tick(now: u64) {
    if now >= NEXT_EPOCH_MS.load(Ordering::Relaxed) && adaptive() {
        end_epoch(now);
    }
}

#[cold]
#[inline(never)]
fn end_epoch(now: u64) {
    if BUSY
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    let next = NEXT_EPOCH_MS.load(Ordering::Relaxed);
    if now >= next {
        NEXT_EPOCH_MS.store(now + EPOCH_MS, Ordering::Relaxed);
        let take = |c: &AtomicU64| c.swap(0, Ordering::Relaxed);
        let e = Epoch {
            purged: take(&PURGED),
            recommitted: take(&RECOMMITTED),
            huge_evicted: take(&HUGE_EVICTED),
            huge_mapped: take(&HUGE_MAPPED),
            huge_hits: take(&HUGE_HITS),
        };
        // SAFETY: BUSY is held: the shared state is ours.
        let shared = unsafe { &mut *SHARED.0.get() };
        if next == 0 {
            // The first call: start from the configuration.
            let cfg = config();
            let adapt = !cfg.purge_delay_set && cfg.purge_delay_ms > 0;
            shared.learner = Learner::new(cfg.purge_delay_ms.max(0) as u64, adapt);
            shared.start_ms = now;
        } else {
            shared.epochs += 1;
            let Shared {
                learner,
                log,
                logged,
                start_ms,
                ..
            } = shared;
            learner.epoch(&e, |d| {
                log[*logged % LOG_LEN] = (now - *start_ms, d);
                *logged += 1;
            });
            if learner.adapt_delay {
                DELAY_MS.store(learner.delay_ms, Ordering::Relaxed);
            }
            HUGE_CAP.store(learner.huge_cap, Ordering::Relaxed);
        }
    }
    BUSY.store(0, Ordering::Release);
}

/// Takes `BUSY`, waiting out a decision in progress (a few microseconds).
/// True when the calling thread already holds it for a `fork` (another
/// library's `fork` handler asking for the statistics, or forking, while
/// hakmem's hold every lock: sync.rs, `FORK_OWNER`): then the state is the
/// caller's to read, and nothing is to be released.
fn lock_busy() -> bool {
    while BUSY
        .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if crate::sync::holds_locks_for_fork() {
            return true;
        }
        core::hint::spin_loop();
    }
    false
}

/// `fork` prepare: hold `BUSY` across the fork. A decision in progress on
/// a thread that does not exist in the child would leave it held there for
/// good: the policy would never decide again, and `report` (the statistics)
/// would wait forever.
pub(crate) fn fork_lock() {
    if lock_busy() {
        // A fork from another library's handler inside the window: the
        // outer fork's release comes last.
        // Relaxed: only the fork's owner touches the count.
        FORK_NESTED.fetch_add(1, Ordering::Relaxed);
    }
}

/// `fork` parent/child: release what `fork_lock` took.
pub(crate) fn fork_unlock() {
    // Relaxed: written only by the fork's owner while it holds `BUSY`, 0
    // again before its Release store below, which the next taker's
    // Acquire compare-exchange pairs with.
    if FORK_NESTED.load(Ordering::Relaxed) != 0 {
        FORK_NESTED.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    // Release: publishes the holder's writes, as in `end_epoch`.
    BUSY.store(0, Ordering::Release);
}

/// Forks nested inside a fork's window whose `fork_lock` found `BUSY`
/// held by the same fork (see `fork_lock`).
static FORK_NESTED: crate::sync::plain::AtomicUsize = crate::sync::plain::AtomicUsize::new(0);

/// What the policy is doing, for the statistics report.
#[derive(Clone, Copy, Debug)]
pub struct PolicyReport {
    /// Whether the policy adapts (`HAKMEM_POLICY=adaptive`).
    pub adaptive: bool,
    /// The purge delay in force (ms; 0 = at once, negative = never).
    pub purge_delay_ms: i64,
    /// The huge cache's byte limit in force.
    pub huge_cache_cap: usize,
    /// Epochs turned into decisions so far.
    pub epochs: u64,
    /// Decisions taken so far (changes, freezes and relearns).
    pub decisions: usize,
    /// Whether the choice is frozen now.
    pub frozen: bool,
    /// The last decisions (up to `LOG_LEN`), oldest first, with when they
    /// were taken (ms since the policy's first epoch began);
    /// `decisions.min(LOG_LEN)` entries are valid.
    pub log: [(u64, Decision); LOG_LEN],
}

/// The policy's state now. Waits out a decision in progress (a few
/// microseconds at most).
pub fn report() -> PolicyReport {
    let reentered = lock_busy();
    // SAFETY: BUSY is held.
    let shared = unsafe { &*SHARED.0.get() };
    let n = shared.logged.min(LOG_LEN);
    let mut log = [(0, Decision::Freeze); LOG_LEN];
    for (i, entry) in log.iter_mut().take(n).enumerate() {
        *entry = shared.log[(shared.logged - n + i) % LOG_LEN];
    }
    let r = PolicyReport {
        adaptive: adaptive(),
        purge_delay_ms: purge_delay_ms(),
        huge_cache_cap: huge_cache_cap(),
        epochs: shared.epochs,
        decisions: shared.logged,
        frozen: shared.learner.frozen(),
        log,
    };
    if !reentered {
        BUSY.store(0, Ordering::Release);
    }
    r
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    /// Issue 22, hole 6: a fork while another thread holds `BUSY` (a
    /// decision in progress) leaves it free in the child: `report` (the
    /// statistics) returns there (before, it waited forever).
    #[test]
    fn a_fork_during_a_decision_leaves_the_policy_free_in_the_child() {
        extern crate std;
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};
        static HELD: AtomicBool = AtomicBool::new(false);
        // hakmem's fork handlers are registered with the first heap.
        // SAFETY: a block of this allocator, freed once.
        unsafe { crate::free(crate::malloc(16)) };
        let holder = std::thread::spawn(|| {
            lock_busy();
            HELD.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            fork_unlock();
        });
        while !HELD.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // SAFETY: the child only reads the policy and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let _ = report();
            // SAFETY: ends the child without running the parent's exit code.
            unsafe { libc::_exit(0) };
        }
        assert!(pid > 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut status = 0;
        let done = loop {
            // SAFETY: pid is our child.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break true;
            }
            if Instant::now() > deadline {
                // SAFETY: our child, stuck.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                break false;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        holder.join().unwrap();
        assert!(
            done,
            "the child's statistics waited for a decision of a thread it lacks"
        );
    }
    extern crate std;
    use std::vec::Vec;

    const MIB: u64 = 1 << 20;

    fn run(l: &mut Learner, e: Epoch) -> Vec<Decision> {
        let mut out = Vec::new();
        l.epoch(&e, |d| out.push(d));
        out
    }

    fn waste(purged_mib: u64, back_mib: u64) -> Epoch {
        Epoch {
            purged: purged_mib * MIB,
            recommitted: back_mib * MIB,
            ..Epoch::default()
        }
    }

    #[test]
    fn purges_that_come_back_lengthen_the_delay_up_to_its_bound() {
        let mut l = Learner::new(250, true);
        assert_eq!(run(&mut l, waste(64, 60)), [Decision::Delay(250, 500)]);
        assert_eq!(run(&mut l, waste(64, 32)), [Decision::Delay(500, 1000)]);
        assert_eq!(run(&mut l, waste(64, 64)), [], "at the bound: no change");
        assert_eq!(l.delay_ms, DELAY_MAX_MS);
    }

    #[test]
    fn purges_that_stay_away_shorten_it_down_to_its_bound() {
        let mut l = Learner::new(250, true);
        for expect in [125, 62, 50] {
            let before = l.delay_ms;
            assert_eq!(run(&mut l, waste(280, 1)), [Decision::Delay(before, expect)]);
        }
        assert_eq!(l.delay_ms, DELAY_MIN_MS);
    }

    #[test]
    fn a_fixed_delay_and_quiet_epochs_change_nothing() {
        let mut l = Learner::new(250, false);
        assert_eq!(run(&mut l, waste(64, 64)), []);
        assert_eq!(l.delay_ms, 250);
        let mut l = Learner::new(250, true);
        let tiny = Epoch {
            purged: 4096,
            recommitted: 4096,
            ..Epoch::default()
        };
        for _ in 0..10 {
            assert_eq!(run(&mut l, tiny), []);
        }
        assert!(!l.frozen(), "quiet epochs do not count towards a freeze");
    }

    #[test]
    fn a_stable_signal_freezes_and_a_drift_relearns() {
        let mut l = Learner::new(250, true);
        // Waste between the thresholds: no change, four times, then frozen.
        for _ in 0..STABLE_EPOCHS - 1 {
            assert_eq!(run(&mut l, waste(64, 16)), []);
        }
        assert_eq!(run(&mut l, waste(64, 16)), [Decision::Freeze]);
        assert!(l.frozen());
        // A small drift (16 → 24 of 64: 12 points) stays frozen even though
        // it would not have changed anything anyway; a large one (to 60 of
        // 64) relearns and decides at once.
        assert_eq!(run(&mut l, waste(64, 24)), []);
        assert_eq!(
            run(&mut l, waste(64, 60)),
            [Decision::Relearn, Decision::Delay(250, 500)]
        );
        assert!(!l.frozen());
    }

    #[test]
    fn a_frozen_choice_ignores_what_would_have_moved_it_within_the_drift() {
        let mut l = Learner::new(250, true);
        for _ in 0..STABLE_EPOCHS {
            run(&mut l, waste(64, 28)); // 44 % waste: no change
        }
        assert!(l.frozen());
        // 50 % waste would double the delay, but it is 6 points off: frozen.
        assert_eq!(run(&mut l, waste(64, 32)), []);
        assert_eq!(l.delay_ms, 250);
    }

    #[test]
    fn the_huge_cache_grows_when_it_throws_out_what_is_mapped_again() {
        let mut l = Learner::new(250, true);
        let thrash = Epoch {
            huge_evicted: 300 * MIB,
            huge_mapped: 300 * MIB,
            huge_hits: 10 * MIB,
            ..Epoch::default()
        };
        assert_eq!(
            run(&mut l, thrash),
            [Decision::HugeCap(HUGE_CAP_DEFAULT, 2 * HUGE_CAP_DEFAULT)]
        );
        run(&mut l, thrash);
        run(&mut l, thrash);
        assert_eq!(l.huge_cap, HUGE_CAP_MAX);
        // Idle and purged: back towards the default, never below it.
        let idle = Epoch {
            purged: 64 * MIB,
            recommitted: 16 * MIB,
            ..Epoch::default()
        };
        run(&mut l, idle);
        run(&mut l, idle);
        assert_eq!(l.huge_cap, HUGE_CAP_DEFAULT);
        assert_eq!(run(&mut l, idle), [], "at the floor");
    }
}
