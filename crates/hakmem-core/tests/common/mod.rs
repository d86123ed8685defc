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

/// Whether `tool` can be run (`tool --version` succeeds). When it cannot:
/// with `REQUIRE_TEST_TOOLS` set (`.ci/run` sets it, and installs every
/// tool the tests use) the test fails; otherwise a `SKIPPED` line goes to
/// the terminal (past the test harness's capture) and the caller returns.
pub fn have_tool(tool: &str, test: &str) -> bool {
    let found = std::process::Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("REQUIRE_TEST_TOOLS").is_none(),
            "{test}: {tool} is not installed, and REQUIRE_TEST_TOOLS is set"
        );
        skipped(test, &format!("{tool} is not installed"));
    }
    found
}

/// Prints `SKIPPED: <test>: <why>` straight to the terminal: the harness
/// captures what a passing test prints with `eprintln!`, which would hide it.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {test}: {why}");
}

/// Blocks to free, and where to say that they are freed.
pub type ToFreer = std::sync::mpsc::Sender<(Vec<usize>, std::sync::mpsc::Sender<()>)>;

/// A thread that frees every block (a hakmem block's address) it is sent
/// and then says so. It allocates nothing through hakmem in a binary whose
/// global allocator is `System`: it has no heap, runs no duties of its
/// own, and pushes each free at once (none waits in a batch past the
/// sweep or purge a test waits for).
pub fn spawn_freer() -> (ToFreer, std::thread::JoinHandle<()>) {
    let (to_freer, freer_rx) = std::sync::mpsc::channel::<(Vec<usize>, std::sync::mpsc::Sender<()>)>();
    let freer = std::thread::spawn(move || {
        for (blocks, done) in freer_rx {
            for p in blocks {
                // SAFETY: p is a live block handed to this thread, freed once.
                unsafe { hakmem_core::free(p as *mut u8) };
            }
            let _ = done.send(());
        }
    });
    (to_freer, freer)
}
