//! The measured child: one workload against one allocator, one result line.
//!
//! `hakmem-bench` (the parent) starts `hakmem-bench-child` (the binary in
//! `src/bin/`, linked with this library only: the workloads, the allocators
//! and this protocol, none of the parent's option parsing, tables or
//! plots) once per run, so each allocator starts from a fresh process and
//! the child's peak RSS is the workload's and the allocator's, not the
//! reporting code's.
//!
//! The arguments are positional and every parameter is explicit, in the
//! order `c/bench.c` (the `--preload` twin) takes them:
//!
//! ```text
//! hakmem-bench-child KERNEL MIN MAX WS ITERS SEED THREADS WORKLOAD ALLOCATOR
//! ```
//!
//! The result line is the protocol both print:
//!
//! ```text
//! hakmem-bench-result workload=mixed allocator=hakmem ops=4000000 elapsed_ns=81234567 errors=0 maxrss_kib=5012
//! ```
//!
//! Peak RSS is taken by the parent from `wait4`'s `ru_maxrss` (the child's
//! own `maxrss_kib` is informative only), so the C program and a crashed
//! child are measured the same way.

use crate::allocators::Allocator;
use crate::workloads::{self, Kernel, Outcome, Params, MAX_BLOCK_SIZE};

/// The child binary's file name, beside the parent's.
pub const BINARY: &str = "hakmem-bench-child";

/// First word of a result line.
pub const RESULT_PREFIX: &str = "hakmem-bench-result";

/// One workload with its resolved parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The preset's name (`workloads::PRESETS`).
    pub workload: &'static str,
    pub params: Params,
}

/// The line a child prints for a finished run.
pub fn result_line(workload: &str, allocator: Allocator, outcome: &Outcome, maxrss_kib: u64) -> String {
    format!(
        "{RESULT_PREFIX} workload={workload} allocator={allocator} ops={} elapsed_ns={} errors={} maxrss_kib={maxrss_kib}",
        outcome.ops,
        outcome.elapsed.as_nanos(),
        outcome.errors
    )
}

/// The numbers the parent takes from a result line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reported {
    pub ops: u64,
    pub elapsed_ns: u64,
    pub errors: u64,
}

/// Finds and parses the result line in a child's stdout.
pub fn parse_result_line(stdout: &str) -> Result<Reported, String> {
    let line = stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(RESULT_PREFIX))
        .ok_or_else(|| format!("no '{RESULT_PREFIX}' line in its output"))?;
    let field = |key: &str| -> Result<u64, String> {
        let value = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .ok_or_else(|| format!("result line lacks {key}: {line}"))?;
        value
            .parse()
            .map_err(|_| format!("result line has a bad {key}: {line}"))
    };
    let reported = Reported {
        ops: field("ops")?,
        elapsed_ns: field("elapsed_ns")?,
        errors: field("errors")?,
    };
    if reported.ops == 0 || reported.elapsed_ns == 0 {
        return Err(format!("result line reports no work: {line}"));
    }
    Ok(reported)
}

/// This process's peak resident set in KiB.
pub fn own_maxrss_kib() -> u64 {
    // SAFETY: rusage is plain old data, for which all-zero bytes are valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a live, writable rusage.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc == 0 {
        u64::try_from(usage.ru_maxrss).unwrap_or(0)
    } else {
        0
    }
}

/// The arguments that make the child run `job` against `allocator`.
pub fn args(job: &Job, allocator: Allocator) -> Vec<String> {
    let p = &job.params;
    vec![
        p.kernel.name().to_string(),
        p.min.to_string(),
        p.max.to_string(),
        p.ws.to_string(),
        p.iters.to_string(),
        p.seed.to_string(),
        p.threads.to_string(),
        job.workload.to_string(),
        allocator.name().to_string(),
    ]
}

/// Parses the child's arguments (without the program name) and checks
/// what the kernels rely on; the error is a one-line message.
pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<(Job, Allocator), String> {
    const USAGE: &str = "usage: hakmem-bench-child KERNEL MIN MAX WS ITERS SEED THREADS WORKLOAD ALLOCATOR \
                         (started by hakmem-bench, one run each)";
    let [kernel, min, max, ws, iters, seed, threads, workload, allocator] = args else {
        return Err(USAGE.into());
    };
    let kernel = Kernel::from_name(kernel.as_ref()).ok_or_else(|| format!("unknown kernel '{}'", kernel.as_ref()))?;
    let number = |name: &str, text: &S| -> Result<u64, String> {
        text.as_ref()
            .parse()
            .map_err(|_| format!("{name} must be a whole number, not '{}'", text.as_ref()))
    };
    let size = |name: &str, text: &S| -> Result<usize, String> {
        usize::try_from(number(name, text)?).map_err(|_| format!("{name} is too large"))
    };
    let params = Params {
        kernel,
        min: size("MIN", min)?,
        max: size("MAX", max)?,
        ws: size("WS", ws)?,
        iters: number("ITERS", iters)?,
        seed: number("SEED", seed)?,
        threads: size("THREADS", threads)?,
    };
    if !(kernel.min_size() <= params.min && 1 <= params.min && params.min <= params.max && params.max <= MAX_BLOCK_SIZE)
    {
        return Err(format!(
            "sizes must satisfy {} <= MIN <= MAX <= {MAX_BLOCK_SIZE} for {}",
            kernel.min_size().max(1),
            kernel.name()
        ));
    }
    if params.ws == 0 || params.threads == 0 || params.iters == 0 {
        return Err("WS, ITERS and THREADS must be at least 1".into());
    }
    if params.threads > 1024 {
        return Err("THREADS must be at most 1024".into());
    }
    let workload = workloads::find(workload.as_ref())
        .ok_or_else(|| format!("unknown workload '{}'", workload.as_ref()))?
        .name;
    let allocator = Allocator::from_name(allocator.as_ref())
        .ok_or_else(|| format!("unknown allocator '{}'", allocator.as_ref()))?;
    if !allocator.runs_in_process() {
        return Err(format!("allocator '{allocator}' runs only under --preload"));
    }
    Ok((Job { workload, params }, allocator))
}

/// The child's work: runs `job` against `allocator` and prints the result
/// line; the error says why the allocator could not run.
pub fn run(job: &Job, allocator: Allocator) -> Result<(), String> {
    let outcome = allocator.run(&job.params)?;
    println!("{}", result_line(job.workload, allocator, &outcome, own_maxrss_kib()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn result_line_round_trips() {
        let outcome = Outcome {
            ops: 1234,
            elapsed: Duration::from_nanos(5678),
            errors: 0,
        };
        let line = result_line("mixed", Allocator::Hakmem, &outcome, 42);
        assert_eq!(
            parse_result_line(&format!("noise\n{line}\n")),
            Ok(Reported {
                ops: 1234,
                elapsed_ns: 5678,
                errors: 0
            })
        );
    }

    #[test]
    fn malformed_result_lines_are_rejected() {
        for bad in [
            "",
            "ops=1 elapsed_ns=1 errors=0",
            "hakmem-bench-result ops=1 errors=0",
            "hakmem-bench-result ops=x elapsed_ns=1 errors=0",
            "hakmem-bench-result ops=0 elapsed_ns=1 errors=0",
            "hakmem-bench-resultops=1 elapsed_ns=1 errors=0",
        ] {
            assert!(parse_result_line(bad).is_err(), "{bad:?}");
        }
        // A key must match whole: `xops=` is not `ops=`.
        assert!(parse_result_line("hakmem-bench-result xops=5 elapsed_ns=1 errors=0").is_err());
    }

    #[test]
    fn args_carry_every_parameter_and_parse_back() {
        let job = Job {
            workload: "larson",
            params: Params {
                kernel: Kernel::Larson,
                min: 16,
                max: 32,
                ws: 3,
                iters: 4,
                seed: 5,
                threads: 6,
            },
        };
        let args = args(&job, Allocator::Jemalloc);
        assert_eq!(args, ["larson", "16", "32", "3", "4", "5", "6", "larson", "jemalloc"]);
        assert_eq!(parse_args(&args), Ok((job, Allocator::Jemalloc)));
    }

    #[test]
    fn bad_arguments_are_refused_with_a_message() {
        let good = ["mixed", "16", "1024", "10", "100", "1", "1", "mixed", "hakmem"];
        assert!(parse_args(&good).is_ok());
        let with = |index: usize, value: &'static str| {
            let mut args = good;
            args[index] = value;
            parse_args(&args).unwrap_err()
        };
        assert_eq!(with(0, "nope"), "unknown kernel 'nope'");
        assert_eq!(with(1, "x"), "MIN must be a whole number, not 'x'");
        assert!(with(1, "0").starts_with("sizes must satisfy"));
        assert!(with(1, "2048").starts_with("sizes must satisfy"), "min > max");
        assert_eq!(with(3, "0"), "WS, ITERS and THREADS must be at least 1");
        assert_eq!(with(4, "0"), "WS, ITERS and THREADS must be at least 1");
        assert_eq!(with(6, "0"), "WS, ITERS and THREADS must be at least 1");
        assert_eq!(with(6, "1025"), "THREADS must be at most 1024");
        assert_eq!(with(7, "nope"), "unknown workload 'nope'");
        assert_eq!(with(8, "tcmalloc"), "allocator 'tcmalloc' runs only under --preload");
        assert_eq!(with(8, "mimalloc"), "unknown allocator 'mimalloc'");
        assert!(parse_args(&good[..8]).unwrap_err().starts_with("usage:"));
    }
}
