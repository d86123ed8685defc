//! Failures injected at the OS calls (test builds under `--cfg
//! hakmem_fault_injection` only; nothing of this exists otherwise).
//!
//! Every call os/mod.rs makes on hakmem's behalf asks `refuse(call)`
//! first; when the plan in force says so, the call is not made and fails
//! with the error the kernel would give (`errno` set, as the kernel's
//! refusal would). Two plans: the N-th call of the chosen kinds fails
//! (`fail_nth`, for the exhaustive loop of tests/fault_injection.rs), or
//! each call fails with a probability, from a seed (`fail_randomly`). The
//! calls of each kind since the plan was set are counted either way, so a
//! test knows when N has run past the last call its workload makes.
//!
//! Every atomic here is Relaxed: a test sets the plan before it starts the
//! threads that make the calls (the spawn orders it), and the counts are
//! read after they are joined.

use crate::sync::{plain::AtomicU64, plain::AtomicUsize, Ordering};

/// The kinds of OS calls, as a test names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Call {
    /// `mmap` (fresh mappings, at a hint or anywhere): `ENOMEM`.
    Map,
    /// `munmap`: `ENOMEM` (a split past `vm.max_map_count`); the range
    /// stays mapped.
    Unmap,
    /// `madvise(MADV_DONTNEED)`: `EINVAL` (locked memory).
    Purge,
    /// `madvise` with other advice (transparent huge pages): `EINVAL`.
    Advise,
    /// `mprotect` (guard pages and the quarantine, `secure`): `ENOMEM`.
    Protect,
    /// `mremap` (huge `realloc`, in place or moved): `ENOMEM`.
    Remap,
    /// `pthread_key_create` and `pthread_setspecific` (the exit hook, the
    /// portable binding's slot): `EAGAIN` / `ENOMEM`.
    ThreadKey,
    /// `getrandom` (`secure`): `EAGAIN`.
    Random,
    /// `dlopen(RTLD_NOLOAD | RTLD_NODELETE)` of hakmem's own object.
    KeepLoaded,
}

/// Every kind, in order (`Call as usize` indexes it).
pub const CALLS: [Call; 9] = [
    Call::Map,
    Call::Unmap,
    Call::Purge,
    Call::Advise,
    Call::Protect,
    Call::Remap,
    Call::ThreadKey,
    Call::Random,
    Call::KeepLoaded,
];

impl Call {
    /// The error the kernel (or libc) gives for this kind of call.
    fn errno(self) -> i32 {
        match self {
            Call::Map | Call::Unmap | Call::Protect | Call::Remap => libc::ENOMEM,
            Call::Purge | Call::Advise => libc::EINVAL,
            Call::ThreadKey | Call::Random => libc::EAGAIN,
            Call::KeepLoaded => libc::ENOENT,
        }
    }

    /// The kind named `name` (`"map"`, `"unmap"`, ...), for a test's
    /// command line.
    pub fn named(name: &str) -> Option<Call> {
        CALLS.iter().copied().find(|c| c.name() == name)
    }

    /// The kind's name.
    pub fn name(self) -> &'static str {
        match self {
            Call::Map => "map",
            Call::Unmap => "unmap",
            Call::Purge => "purge",
            Call::Advise => "advise",
            Call::Protect => "protect",
            Call::Remap => "remap",
            Call::ThreadKey => "thread-key",
            Call::Random => "random",
            Call::KeepLoaded => "keep-loaded",
        }
    }
}

/// Calls of each kind since the plan was set.
static COUNTS: [AtomicUsize; 9] = [const { AtomicUsize::new(0) }; 9];
/// Calls refused since the plan was set.
static INJECTED: AtomicUsize = AtomicUsize::new(0);
/// The plan: 0 none, 1 the N-th call of the kinds in `KINDS`, 2 random.
static PLAN: AtomicUsize = AtomicUsize::new(0);
/// Bit `k`: kind `k` takes part in the plan.
static KINDS: AtomicUsize = AtomicUsize::new(0);
/// `fail_nth`'s N (1-based).
static NTH: AtomicUsize = AtomicUsize::new(0);
/// `fail_randomly`'s probability, in millionths.
static PER_MILLION: AtomicUsize = AtomicUsize::new(0);
/// `fail_randomly`'s generator (splitmix64 over an atomic counter: every
/// thread draws distinct numbers).
static RANDOM: AtomicU64 = AtomicU64::new(0);

fn reset(kinds: &[Call]) {
    PLAN.store(0, Ordering::Relaxed);
    for c in &COUNTS {
        c.store(0, Ordering::Relaxed);
    }
    INJECTED.store(0, Ordering::Relaxed);
    KINDS.store(kinds.iter().fold(0, |m, &k| m | 1 << k as usize), Ordering::Relaxed);
}

/// From now on, the `n`-th call (counting from 1) of each kind in `kinds`
/// fails — `n` counted per kind.
pub fn fail_nth(kinds: &[Call], n: usize) {
    reset(kinds);
    NTH.store(n, Ordering::Relaxed);
    PLAN.store(1, Ordering::Relaxed);
}

/// From now on, each call of the kinds in `kinds` fails with probability
/// `per_million` / 1 000 000, drawn from `seed`.
pub fn fail_randomly(kinds: &[Call], per_million: usize, seed: u64) {
    reset(kinds);
    PER_MILLION.store(per_million, Ordering::Relaxed);
    RANDOM.store(seed, Ordering::Relaxed);
    PLAN.store(2, Ordering::Relaxed);
}

/// No more failures (the counts stay readable).
pub fn stop() {
    PLAN.store(0, Ordering::Relaxed);
}

/// Calls of kind `call` since the plan was set.
pub fn calls(call: Call) -> usize {
    COUNTS[call as usize].load(Ordering::Relaxed)
}

/// Calls refused since the plan was set.
pub fn injected() -> usize {
    INJECTED.load(Ordering::Relaxed)
}

/// Whether the call about to be made, of kind `call`, must fail: then its
/// `errno` is set and true returned (the caller does not make the call).
pub(crate) fn refuse(call: Call) -> bool {
    let k = call as usize;
    let n = COUNTS[k].fetch_add(1, Ordering::Relaxed) + 1;
    let plan = PLAN.load(Ordering::Relaxed);
    if plan == 0 || KINDS.load(Ordering::Relaxed) & 1 << k == 0 {
        return false;
    }
    let fail = if plan == 1 {
        n == NTH.load(Ordering::Relaxed)
    } else {
        let mut z = RANDOM
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z % 1_000_000) < PER_MILLION.load(Ordering::Relaxed) as u64
    };
    if fail {
        INJECTED.fetch_add(1, Ordering::Relaxed);
        super::set_errno(call.errno());
    }
    fail
}
