//! Runs, the parent's side: start each child (`hakmem-bench-child`, or the
//! C program under `--preload`), time it out, reap it with its resource
//! usage, parse its result line (`hakmem_bench::child`), and interleave the
//! runs of a plan.
//!
//! Peak RSS is taken from `wait4`'s `ru_maxrss` (the child's own
//! `maxrss_kib` is informative only), so the C program and a crashed child
//! are measured the same way.

use crate::allocators::Allocator;
use crate::cli::{Job, Plan};
use crate::progress::Progress;
use hakmem_bench::child::parse_result_line;
use std::fmt;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest sleep between two checks on a running child: adds at most this to
/// the wall time of a run, never to its measurement (the child times itself).
const MAX_POLL: Duration = Duration::from_millis(20);

/// Stderr lines of a failed child quoted in its report.
const STDERR_TAIL_LINES: usize = 20;

/// One successful run as the parent saw it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub ops: u64,
    pub elapsed_ns: u64,
    /// Peak RSS of the child, from `wait4`.
    pub maxrss_kib: u64,
}

impl Sample {
    /// Million operations per second.
    pub fn mops(&self) -> f64 {
        self.ops as f64 * 1e3 / self.elapsed_ns as f64
    }
}

/// Why a run gave no sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    Spawn(String),
    Signal(i32),
    Exit(i32),
    Timeout(Duration),
    BadOutput(String),
    /// The workload found this many blocks with damaged contents.
    Damaged(u64),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Spawn(e) => write!(f, "could not start: {e}"),
            Failure::Signal(s) => write!(f, "killed by signal {s} ({})", signal_name(*s)),
            Failure::Exit(code) => write!(f, "exited with status {code}"),
            Failure::Timeout(t) => write!(f, "timed out after {} s", t.as_secs()),
            Failure::BadOutput(e) => write!(f, "bad output: {e}"),
            Failure::Damaged(n) => write!(f, "{n} blocks had damaged contents"),
        }
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGTRAP => "SIGTRAP",
        _ => "?",
    }
}

/// What a finished child left: its result and whatever it wrote to stderr.
#[derive(Debug)]
pub struct ChildRun {
    pub result: Result<Sample, Failure>,
    pub stderr: String,
}

/// Runs `command` to completion (or kills it after `timeout`) and returns
/// its sample, taking peak RSS from `wait4`.
pub fn run_child(mut command: Command, timeout: Duration) -> ChildRun {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return ChildRun {
                result: Err(Failure::Spawn(e.to_string())),
                stderr: String::new(),
            }
        }
    };
    // Read both pipes while the child runs, so a chatty child cannot fill
    // a pipe and block.
    let stdout = read_to_end(child.stdout.take());
    let stderr = read_to_end(child.stderr.take());
    let waited = wait_with_rusage(&mut child, timeout);
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let result = waited.and_then(|(status, maxrss_kib)| {
        if libc::WIFSIGNALED(status) {
            return Err(Failure::Signal(libc::WTERMSIG(status)));
        }
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) != 0 {
            return Err(Failure::Exit(libc::WEXITSTATUS(status)));
        }
        let reported = parse_result_line(&stdout).map_err(Failure::BadOutput)?;
        if reported.errors != 0 {
            return Err(Failure::Damaged(reported.errors));
        }
        Ok(Sample {
            ops: reported.ops,
            elapsed_ns: reported.elapsed_ns,
            maxrss_kib,
        })
    });
    ChildRun { result, stderr }
}

fn read_to_end(pipe: Option<impl Read + Send + 'static>) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits for `child` with `wait4`, polling so that it can be killed at the
/// deadline. Returns the wait status and the peak RSS in KiB.
fn wait_with_rusage(child: &mut Child, timeout: Duration) -> Result<(i32, u64), Failure> {
    let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
    let deadline = Instant::now() + timeout;
    let mut poll = Duration::from_millis(1);
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain old data, for which all-zero bytes are valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is our child and not yet reaped (only this function
        // reaps it, and returns once it has); the pointers are to live locals.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped == pid {
            return Ok((status, u64::try_from(usage.ru_maxrss).unwrap_or(0)));
        }
        if reaped == -1 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Failure::Spawn(format!("wait4: {error}")));
        }
        if Instant::now() >= deadline {
            // Still unreaped, so the pid is still this child's.
            let _ = child.kill();
            // SAFETY: as above; a blocking wait for the child just killed.
            unsafe { libc::wait4(pid, &mut status, 0, std::ptr::null_mut()) };
            return Err(Failure::Timeout(timeout));
        }
        std::thread::sleep(poll);
        poll = (poll * 2).min(MAX_POLL);
    }
}

/// All runs of one workload against one allocator.
#[derive(Debug)]
pub struct Cell {
    /// Index into `Plan::jobs`.
    pub job: usize,
    pub allocator: Allocator,
    pub runs: Vec<Result<Sample, Failure>>,
}

/// Runs every job of `plan` against every allocator, `plan.reps` times,
/// interleaving the allocators (A B C D A B C D ...) within each workload.
/// `command` builds the child for one run. Returns the cells job-major, in
/// `plan.allocators` order; progress (see `progress`) and failures go to
/// stderr.
pub fn run_plan(plan: &Plan, command: impl Fn(&Job, Allocator) -> Command) -> Vec<Cell> {
    let mut cells: Vec<Cell> = (0..plan.jobs.len())
        .flat_map(|job| {
            plan.allocators.iter().map(move |&allocator| Cell {
                job,
                allocator,
                runs: Vec::new(),
            })
        })
        .collect();
    let progress = Progress::stderr(plan.jobs.len() * plan.allocators.len() * plan.reps);
    for (j, job) in plan.jobs.iter().enumerate() {
        let workload = if plan.scaling {
            format!("{} ({} threads)", job.workload, job.params.threads)
        } else {
            job.workload.to_string()
        };
        for rep in 0..plan.reps {
            for (a, &allocator) in plan.allocators.iter().enumerate() {
                progress.start(&format!("{workload} | {allocator} | rep {}/{}", rep + 1, plan.reps));
                let run = run_child(command(job, allocator), plan.timeout);
                progress.done();
                let label = format!("{workload} {allocator} rep {}", rep + 1);
                if let Err(failure) = &run.result {
                    progress.note(&format!("hakmem-bench: {label} failed: {failure}"));
                }
                let stderr = run.stderr.trim_end();
                if !stderr.is_empty() {
                    let lines: Vec<&str> = stderr.lines().collect();
                    let tail = &lines[lines.len().saturating_sub(STDERR_TAIL_LINES)..];
                    progress.note(&format!("hakmem-bench: {label} stderr:\n    {}", tail.join("\n    ")));
                }
                cells[j * plan.allocators.len() + a].runs.push(run.result);
            }
        }
    }
    progress.finish();
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    const GOOD_LINE: &str = "hakmem-bench-result workload=mixed allocator=system ops=1000 elapsed_ns=2000 errors=0";

    #[test]
    fn successful_child_gives_a_sample_with_rss() {
        let run = run_child(sh(&format!("echo '{GOOD_LINE}'")), Duration::from_secs(10));
        let sample = run.result.unwrap();
        assert_eq!((sample.ops, sample.elapsed_ns), (1000, 2000));
        assert!(sample.maxrss_kib > 0);
        assert!((sample.mops() - 500.0).abs() < 1e-9);
    }

    #[test]
    fn crashing_child_is_a_failure_with_its_signal_and_stderr() {
        let run = run_child(sh("echo dying >&2; kill -SEGV $$"), Duration::from_secs(10));
        assert_eq!(run.result, Err(Failure::Signal(libc::SIGSEGV)));
        assert_eq!(run.stderr.trim(), "dying");
        assert_eq!(
            Failure::Signal(libc::SIGSEGV).to_string(),
            "killed by signal 11 (SIGSEGV)"
        );
    }

    #[test]
    fn failing_exit_status_and_damage_are_failures() {
        let run = run_child(sh(&format!("echo '{GOOD_LINE}'; exit 3")), Duration::from_secs(10));
        assert_eq!(run.result, Err(Failure::Exit(3)));
        let damaged = GOOD_LINE.replace("errors=0", "errors=2");
        let run = run_child(sh(&format!("echo '{damaged}'")), Duration::from_secs(10));
        assert_eq!(run.result, Err(Failure::Damaged(2)));
        let run = run_child(sh("echo nothing useful"), Duration::from_secs(10));
        assert!(matches!(run.result, Err(Failure::BadOutput(_))));
        let run = run_child(Command::new("/nonexistent/hakmem-bench"), Duration::from_secs(10));
        assert!(matches!(run.result, Err(Failure::Spawn(_))));
    }

    #[test]
    fn hung_child_is_killed_at_the_timeout() {
        let started = Instant::now();
        let run = run_child(sh("exec sleep 30"), Duration::from_millis(200));
        assert_eq!(run.result, Err(Failure::Timeout(Duration::from_millis(200))));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn run_plan_interleaves_allocators_and_keeps_failures() {
        let cli = crate::cli::try_parse_from([
            "hakmem-bench",
            "--workloads",
            "c7,c6",
            "--allocators",
            "system,mimalloc3,hakmem",
            "--reps",
            "2",
        ])
        .unwrap();
        let plan = cli.plan().unwrap();
        let order = std::sync::Mutex::new(Vec::new());
        let cells = run_plan(&plan, |job, allocator| {
            order.lock().unwrap().push(format!("{}:{allocator}", job.workload));
            if allocator == Allocator::Mimalloc3 {
                sh("exit 7")
            } else {
                sh(&format!("echo '{GOOD_LINE}'"))
            }
        });
        let order = order.into_inner().unwrap();
        let expected: Vec<String> = ["c7", "c7", "c6", "c6"]
            .iter()
            .flat_map(|w| ["system", "mimalloc3", "hakmem"].map(|a| format!("{w}:{a}")))
            .collect();
        assert_eq!(order, expected);
        assert_eq!(cells.len(), 6);
        for cell in &cells {
            assert_eq!(cell.runs.len(), 2);
            let ok = cell.runs.iter().all(|r| r.is_ok());
            assert_eq!(ok, cell.allocator != Allocator::Mimalloc3, "{cell:?}");
        }
        assert_eq!((cells[3].job, cells[3].allocator), (1, Allocator::System));
    }
}
