//! Helpers shared by the integration tests (each test binary uses a part).
#![allow(dead_code)]

/// The process's resident set size in bytes (`/proc/self/statm`).
pub fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let resident: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    resident * 4096
}

/// The resident set size in MiB.
pub fn rss_mib() -> usize {
    rss_bytes() >> 20
}

/// One xorshift64 step: the tests' deterministic random numbers.
pub fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}
