//! `HAKMEM_*` environment variables, read once without allocating.
//!
//! Read from the environment (`os::for_each_env`: libc's `environ`, not
//! `std::env`, which allocates) on first
//! use, from any slow path. A misspelt `HAKMEM_` variable or a bad value gets
//! one warning on stderr and the default is kept. docs/CONFIG.md lists them.

use crate::os;
use crate::sync::{plain::AtomicUsize, Ordering};
use core::cell::UnsafeCell;

/// What to do when a bad pointer reaches `free`/`realloc`/`malloc_usable_size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// Print the `hakmem:` message and abort (default).
    Abort,
    /// Print the message and ignore the call (the block is leaked).
    Warn,
}

/// `HAKMEM_POLICY`: how the purge delay and the huge cache's limit are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Adapted online to the reuse the program shows (default; policy.rs).
    Adaptive,
    /// The configured purge delay and the default huge cache limit.
    Fixed,
}

/// The configuration in force.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// `HAKMEM_STATS=1`: print the statistics report at exit.
    pub stats: bool,
    /// `HAKMEM_VERBOSE=1`: print the configuration when it is read, and the
    /// first OS call the system refuses (nothing else is printed).
    pub verbose: bool,
    /// `HAKMEM_PURGE_DELAY`: milliseconds before free memory goes back to the
    /// OS; 0 = immediately, negative = never.
    pub purge_delay_ms: i64,
    /// Whether `HAKMEM_PURGE_DELAY` was given (the policy keeps it then).
    pub purge_delay_set: bool,
    /// `HAKMEM_POLICY=adaptive|fixed`.
    pub policy: Policy,
    /// `HAKMEM_THP=1`: ask for transparent huge pages on segments.
    pub thp: bool,
    /// `HAKMEM_ON_ERROR=abort|warn`.
    pub on_error: OnError,
    /// Not a variable: whether the system applies THP to every mapping, in
    /// which case hakmem opts its segments out unless `thp` is set.
    pub system_thp_always: bool,
    /// `HAKMEM_PROFILE=[PATH][,rate=BYTES]`: sample the heap (profile/)
    /// from the start.
    pub profile: bool,
    /// The mean sampling interval `HAKMEM_PROFILE` gave (bytes).
    pub profile_rate: usize,
    /// Where `HAKMEM_PROFILE` writes the live heap at exit (empty: not).
    profile_path_buf: [u8; PROFILE_PATH_MAX],
    profile_path_len: usize,
}

/// The longest `HAKMEM_PROFILE` path.
pub const PROFILE_PATH_MAX: usize = 1024;

impl Config {
    /// The path `HAKMEM_PROFILE` named (empty when none).
    pub fn profile_path(&self) -> &[u8] {
        &self.profile_path_buf[..self.profile_path_len]
    }
}

/// Default purge delay: long enough that a steady workload re-using its pages
/// makes no madvise calls, short enough that a burst's memory is back within
/// about a second (docs/BENCHMARKS.md has the measurement).
pub const DEFAULT_PURGE_DELAY_MS: i64 = 250;

const DEFAULT: Config = Config {
    stats: false,
    verbose: false,
    purge_delay_ms: DEFAULT_PURGE_DELAY_MS,
    purge_delay_set: false,
    policy: Policy::Adaptive,
    thp: false,
    on_error: OnError::Abort,
    system_thp_always: false,
    profile: false,
    profile_rate: crate::profile::DEFAULT_RATE,
    profile_path_buf: [0; PROFILE_PATH_MAX],
    profile_path_len: 0,
};

const KNOWN: &str =
    "HAKMEM_STATS, HAKMEM_VERBOSE, HAKMEM_PURGE_DELAY, HAKMEM_POLICY, HAKMEM_THP, HAKMEM_ON_ERROR, HAKMEM_PROFILE";

struct ConfigCell(UnsafeCell<Config>);

// SAFETY: written once by the thread that wins STATE's CAS, before it
// publishes READY with Release; read only after an Acquire load sees READY.
unsafe impl Sync for ConfigCell {}

static CONFIG: ConfigCell = ConfigCell(UnsafeCell::new(DEFAULT));
static STATE: AtomicUsize = AtomicUsize::new(0);
const READING: usize = 1;
const READY: usize = 2;

/// The configuration (read from the environment on first call).
pub fn config() -> &'static Config {
    // Acquire: pairs with the Release store of READY below.
    if STATE.load(Ordering::Acquire) != READY {
        init();
    }
    // SAFETY: READY was observed, so CONFIG is fully written and never again.
    unsafe { &*CONFIG.0.get() }
}

#[cold]
fn init() {
    if STATE
        .compare_exchange(0, READING, Ordering::Acquire, Ordering::Acquire)
        .is_ok()
    {
        // SAFETY: only the CAS winner gets here, once, and before any
        // segment holds a block: every mapping of a segment, huge block or
        // arena reads the configuration (`segment::arena::advise_thp`)
        // before the memory is set up, and a thread's set-up reads it
        // first: nobody reads the key yet.
        unsafe { crate::small::page::set_mark_key(os::random_for_marks()) };
        let mut cfg = DEFAULT;
        os::for_each_env(|entry| apply(&mut cfg, entry));
        cfg.system_thp_always = os::thp_always();
        // SAFETY: only the CAS winner writes, before publishing READY.
        unsafe { *CONFIG.0.get() = cfg };
        // Release: publishes CONFIG to the Acquire loads in `config`.
        STATE.store(READY, Ordering::Release);
        if cfg.profile {
            crate::profile::start(cfg.profile_rate);
        }
        if cfg.verbose {
            print_config(&cfg);
        }
    } else {
        while STATE.load(Ordering::Acquire) != READY {
            // Not `sync::spin_hint`: STATE is never modelled, and under
            // loom a yield here (a loom operation, as many as the race with
            // another test's model lasts) made the models' explorations
            // differ from run to run ("Is the model fully deterministic?").
            core::hint::spin_loop();
        }
    }
}

/// Applies one `NAME=value` environment entry.
fn apply(cfg: &mut Config, entry: &[u8]) {
    if !entry.starts_with(b"HAKMEM_") {
        return;
    }
    let (name, value) = match entry.iter().position(|&b| b == b'=') {
        Some(i) => (&entry[..i], &entry[i + 1..]),
        None => (entry, &b""[..]),
    };
    let ok = match name {
        b"HAKMEM_STATS" => parse_bool(value).map(|v| cfg.stats = v),
        b"HAKMEM_VERBOSE" => parse_bool(value).map(|v| cfg.verbose = v),
        b"HAKMEM_THP" => parse_bool(value).map(|v| cfg.thp = v),
        // -1 (never) and up: another negative value is rejected with the
        // message below rather than read as -1.
        b"HAKMEM_PURGE_DELAY" => parse_i64(value).filter(|&v| v >= -1).map(|v| {
            cfg.purge_delay_ms = v;
            cfg.purge_delay_set = true;
        }),
        b"HAKMEM_POLICY" => match value {
            b"adaptive" => Some(Policy::Adaptive),
            b"fixed" => Some(Policy::Fixed),
            _ => None,
        }
        .map(|v| cfg.policy = v),
        b"HAKMEM_PROFILE" => parse_profile(cfg, value),
        b"HAKMEM_ON_ERROR" => match value {
            b"abort" => Some(OnError::Abort),
            b"warn" => Some(OnError::Warn),
            _ => None,
        }
        .map(|v| cfg.on_error = v),
        _ => {
            warn3(b"hakmem: unknown variable ", name, b" ignored (known: ");
            os::write_stderr(KNOWN.as_bytes());
            os::write_stderr(b")\n");
            return;
        }
    };
    if ok.is_none() {
        warn3(b"hakmem: bad value for ", name, b": '");
        os::write_stderr(value);
        os::write_stderr(b"', default kept\n");
    }
}

fn warn3(a: &[u8], b: &[u8], c: &[u8]) {
    os::write_stderr(a);
    os::write_stderr(b);
    os::write_stderr(c);
}

fn parse_bool(v: &[u8]) -> Option<bool> {
    match v {
        b"1" | b"yes" | b"true" | b"on" => Some(true),
        b"0" | b"no" | b"false" | b"off" | b"" => Some(false),
        _ => None,
    }
}

/// `HAKMEM_PROFILE`'s value: comma-separated, `rate=BYTES` (digits, with
/// an optional `k`, `m` or `g` suffix: KiB, MiB, GiB) and at most one path.
/// Nothing is changed when any part is bad.
fn parse_profile(cfg: &mut Config, value: &[u8]) -> Option<()> {
    let mut rate = crate::profile::DEFAULT_RATE;
    let mut path: &[u8] = b"";
    for part in value.split(|&b| b == b',') {
        if let Some(bytes) = part.strip_prefix(b"rate=") {
            let (digits, shift) = match bytes.last() {
                Some(b'k' | b'K') => (&bytes[..bytes.len() - 1], 10),
                Some(b'm' | b'M') => (&bytes[..bytes.len() - 1], 20),
                Some(b'g' | b'G') => (&bytes[..bytes.len() - 1], 30),
                _ => (bytes, 0),
            };
            let n = parse_i64(digits)?;
            rate = usize::try_from(n).ok()?.checked_shl(shift)?;
            if !(crate::profile::MIN_RATE..=crate::profile::MAX_RATE).contains(&rate) || rate >> shift != n as usize {
                return None;
            }
        } else if !part.is_empty() {
            if !path.is_empty() || part.len() >= PROFILE_PATH_MAX {
                return None;
            }
            path = part;
        }
    }
    cfg.profile = true;
    cfg.profile_rate = rate;
    cfg.profile_path_buf[..path.len()].copy_from_slice(path);
    cfg.profile_path_len = path.len();
    Some(())
}

fn parse_i64(v: &[u8]) -> Option<i64> {
    let (neg, digits) = match v.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, v),
    };
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (d - b'0') as i64;
    }
    Some(if neg { -n } else { n })
}

fn print_config(cfg: &Config) {
    let mut line = os::Line::new();
    line.push(b"hakmem: stats=");
    line.push_u64(cfg.stats as u64);
    line.push(b" purge_delay_ms=");
    line.push_i64(cfg.purge_delay_ms);
    line.push(if cfg.policy == Policy::Adaptive {
        b" policy=adaptive"
    } else {
        b" policy=fixed"
    });
    line.push(b" thp=");
    line.push_u64(cfg.thp as u64);
    line.push(if cfg.on_error == OnError::Abort {
        b" on_error=abort\n"
    } else {
        b" on_error=warn\n"
    });
    line.write();
}

#[cfg(all(test, not(hakmem_loom)))]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_bad_ones_keep_the_default() {
        let mut cfg = DEFAULT;
        assert!(!cfg.purge_delay_set);
        apply(&mut cfg, b"HAKMEM_PURGE_DELAY=1000");
        assert_eq!(cfg.purge_delay_ms, 1000);
        assert!(cfg.purge_delay_set);
        assert_eq!(cfg.policy, Policy::Adaptive);
        apply(&mut cfg, b"HAKMEM_POLICY=fixed");
        assert_eq!(cfg.policy, Policy::Fixed);
        apply(&mut cfg, b"HAKMEM_POLICY=clever");
        assert_eq!(cfg.policy, Policy::Fixed, "bad value keeps the previous one");
        apply(&mut cfg, b"HAKMEM_PURGE_DELAY=-1");
        assert_eq!(cfg.purge_delay_ms, -1);
        apply(&mut cfg, b"HAKMEM_PURGE_DELAY=soon");
        assert_eq!(cfg.purge_delay_ms, -1, "bad value keeps the previous one");
        apply(&mut cfg, b"HAKMEM_PURGE_DELAY=0");
        apply(&mut cfg, b"HAKMEM_PURGE_DELAY=-7");
        assert_eq!(cfg.purge_delay_ms, 0, "below -1 is a bad value, not -1");
        apply(&mut cfg, b"HAKMEM_STATS=1");
        assert!(cfg.stats);
        apply(&mut cfg, b"HAKMEM_THP=maybe");
        assert!(!cfg.thp);
        apply(&mut cfg, b"HAKMEM_ON_ERROR=warn");
        assert_eq!(cfg.on_error, OnError::Warn);
        apply(&mut cfg, b"HAKMEM_ON_ERROR=explode");
        assert_eq!(cfg.on_error, OnError::Warn);
        apply(&mut cfg, b"HAKMEM_STATZ=1");
        apply(&mut cfg, b"PATH=/bin");
        assert!(cfg.stats);
    }

    #[test]
    fn integers_parse_strictly() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-5"), Some(-5));
        assert_eq!(parse_i64(b""), None);
        assert_eq!(parse_i64(b"12a"), None);
        assert_eq!(parse_i64(b"99999999999999999999"), None);
    }

    #[test]
    fn the_profile_variable_takes_a_path_and_a_rate() {
        let mut cfg = DEFAULT;
        apply(&mut cfg, b"HAKMEM_PROFILE=/tmp/heap.%p.pb.gz");
        assert!(cfg.profile);
        assert_eq!(cfg.profile_path(), b"/tmp/heap.%p.pb.gz");
        assert_eq!(cfg.profile_rate, crate::profile::DEFAULT_RATE);
        apply(&mut cfg, b"HAKMEM_PROFILE=out.pb.gz,rate=64k");
        assert_eq!((cfg.profile_path(), cfg.profile_rate), (&b"out.pb.gz"[..], 65536));
        apply(&mut cfg, b"HAKMEM_PROFILE=rate=10000");
        assert_eq!(
            (cfg.profile_path(), cfg.profile_rate),
            (&b""[..], 10000),
            "sampling without a path"
        );
        apply(&mut cfg, b"HAKMEM_PROFILE=,rate=2m");
        assert_eq!(cfg.profile_rate, 2 << 20);
        for bad in [
            &b"HAKMEM_PROFILE=a,b"[..],
            b"HAKMEM_PROFILE=x,rate=0",
            b"HAKMEM_PROFILE=x,rate=4095",
            b"HAKMEM_PROFILE=x,rate=2g",
            b"HAKMEM_PROFILE=x,rate=fast",
            b"HAKMEM_PROFILE=x,rate=-5",
        ] {
            apply(&mut cfg, bad);
            assert_eq!(
                (cfg.profile_path(), cfg.profile_rate),
                (&b""[..], 2 << 20),
                "{bad:?} kept the previous value"
            );
        }
        let mut entry = [b'x'; 15 + PROFILE_PATH_MAX];
        entry[..15].copy_from_slice(b"HAKMEM_PROFILE=");
        apply(&mut cfg, &entry);
        assert_eq!(cfg.profile_path(), b"", "a path too long is refused");
    }
}
