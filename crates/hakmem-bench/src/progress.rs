//! The progress line on stderr while a plan runs:
//!
//! ```text
//! [21/240] c7 | hakmem | rep 2/5 | elapsed 0:42 | left ~7:18
//! ```
//!
//! the run starting now (its number of all, workload, allocator, rep), the
//! time since the first run started, and an estimate of the time left. On a
//! terminal the line is rewritten in place (and cut to the terminal's
//! width); otherwise (a log, a pipe) each update is a line of its own.
//! Notes (failures, a child's stderr) go on lines of their own above it.
//!
//! The estimate adds up, over the runs still to come (this one included),
//! the mean duration of the runs done so far of the same workload and
//! allocator, else of the same workload, else of all: after the first round
//! of a workload its remaining reps are predicted by their own past, and
//! workloads not yet started by the overall mean. Nothing is shown before
//! the first run has finished.
//!
//! This runs in the parent between children, never in a timed section (each
//! child times its own workload).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// The runs of a plan in the order `runner::run_plan` starts them: job-major,
/// then rep, then allocator (A B C A B C ...).
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub jobs: usize,
    pub allocators: usize,
    pub reps: usize,
}

impl Shape {
    fn total(&self) -> usize {
        self.jobs * self.allocators * self.reps
    }

    /// Position of (job, rep, allocator) in the order runs start; `rep` from 0.
    fn index(&self, job: usize, rep: usize, allocator: usize) -> usize {
        (job * self.reps + rep) * self.allocators + allocator
    }

    /// (job, allocator) of the run at `index`.
    fn cell_of(&self, index: usize) -> (usize, usize) {
        (index / (self.reps * self.allocators), index % self.allocators)
    }
}

/// One run about to start, as the line names it.
pub struct Run<'a> {
    pub job: usize,
    /// The workload's name, with its thread count in a scaling plan.
    pub workload: &'a str,
    pub allocator: usize,
    pub allocator_name: &'a str,
    /// From 0.
    pub rep: usize,
}

/// The mean durations of the runs done, per (job, allocator), per job and
/// overall, for the estimate.
struct History {
    shape: Shape,
    /// Sum and count per (job, allocator), `job * allocators + allocator`.
    cells: Vec<(Duration, u32)>,
}

impl History {
    fn new(shape: Shape) -> History {
        History {
            shape,
            cells: vec![(Duration::ZERO, 0); shape.jobs * shape.allocators],
        }
    }

    fn record(&mut self, job: usize, allocator: usize, took: Duration) {
        let cell = &mut self.cells[job * self.shape.allocators + allocator];
        cell.0 += took;
        cell.1 += 1;
    }

    /// The time the runs from `next` (in start order) to the end will take,
    /// or `None` before any run has finished.
    fn estimate_from(&self, next: usize) -> Option<Duration> {
        let mean = |cells: &[(Duration, u32)]| {
            let (sum, count) = cells
                .iter()
                .fold((Duration::ZERO, 0), |(s, c), &(sum, count)| (s + sum, c + count));
            (count > 0).then(|| sum / count)
        };
        let overall = mean(&self.cells)?;
        let per_job: Vec<Option<Duration>> = self.cells.chunks(self.shape.allocators).map(mean).collect();
        let left = (next..self.shape.total())
            .map(|index| {
                let (job, allocator) = self.shape.cell_of(index);
                let cell = self.cells[job * self.shape.allocators + allocator];
                if cell.1 > 0 {
                    cell.0 / cell.1
                } else {
                    per_job[job].unwrap_or(overall)
                }
            })
            .sum();
        Some(left)
    }
}

/// The progress display of one plan.
pub struct Progress<W: Write> {
    out: W,
    /// Rewrite one line in place, cut to `width` columns.
    terminal: Option<usize>,
    shape: Shape,
    history: History,
    started: Option<Instant>,
    /// The run in flight: (job, allocator, index, start).
    current: Option<(usize, usize, usize, Instant)>,
}

impl Progress<std::io::Stderr> {
    /// On stderr, in place when stderr is a terminal.
    pub fn stderr(shape: Shape) -> Progress<std::io::Stderr> {
        let stderr = std::io::stderr();
        let terminal = stderr.is_terminal().then(terminal_width);
        Progress::new(stderr, terminal, shape)
    }
}

impl<W: Write> Progress<W> {
    /// `terminal`: the width of the terminal `out` is, if it is one.
    pub fn new(out: W, terminal: Option<usize>, shape: Shape) -> Progress<W> {
        Progress {
            out,
            terminal,
            shape,
            history: History::new(shape),
            started: None,
            current: None,
        }
    }

    /// Shows `run`, which starts now.
    pub fn start(&mut self, run: &Run) {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let index = self.shape.index(run.job, run.rep, run.allocator);
        self.current = Some((run.job, run.allocator, index, now));
        let line = status_line(
            run,
            index,
            &self.shape,
            now - started,
            self.history.estimate_from(index),
        );
        self.show(&line);
    }

    /// Records the end of the run in flight.
    pub fn done(&mut self) {
        if let Some((job, allocator, _, start)) = self.current.take() {
            self.history.record(job, allocator, start.elapsed());
        }
    }

    /// A message on its own line(s), not overwritten by the next update.
    pub fn note(&mut self, message: &str) {
        self.clear();
        let _ = writeln!(self.out, "{message}");
    }

    /// Clears the line and says how long the whole plan took.
    pub fn finish(&mut self) {
        self.clear();
        if let Some(started) = self.started {
            let _ = writeln!(
                self.out,
                "hakmem-bench: {} runs in {}",
                self.shape.total(),
                clock(started.elapsed())
            );
        }
    }

    fn show(&mut self, line: &str) {
        match self.terminal {
            Some(width) => {
                let cut: String = line.chars().take(width.saturating_sub(1)).collect();
                let _ = write!(self.out, "\r\x1b[K{cut}");
            }
            None => {
                let _ = writeln!(self.out, "{line}");
            }
        }
        let _ = self.out.flush();
    }

    fn clear(&mut self) {
        if self.terminal.is_some() {
            let _ = write!(self.out, "\r\x1b[K");
        }
    }

    #[cfg(test)]
    fn into_inner(self) -> W {
        self.out
    }
}

/// The progress line for `run`, the `index`th (from 0) of the plan.
fn status_line(run: &Run, index: usize, shape: &Shape, elapsed: Duration, left: Option<Duration>) -> String {
    let left = left.map_or_else(|| "?".to_string(), |left| format!("~{}", clock(left)));
    format!(
        "[{}/{}] {} | {} | rep {}/{} | elapsed {} | left {left}",
        index + 1,
        shape.total(),
        run.workload,
        run.allocator_name,
        run.rep + 1,
        shape.reps,
        clock(elapsed),
    )
}

/// `m:ss`, or `h:mm:ss` from an hour up.
fn clock(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if hours > 0 {
        format!("{hours}:{minutes:02}:{seconds:02}")
    } else {
        format!("{minutes}:{seconds:02}")
    }
}

/// The columns of the terminal on stderr (80 when it will not say).
fn terminal_width() -> usize {
    // SAFETY: winsize is plain old data, for which all-zero bytes are valid.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ on a file descriptor writes one winsize into the
    // live local it is given, and nothing else.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: Shape = Shape {
        jobs: 2,
        allocators: 3,
        reps: 2,
    };

    fn run(job: usize, rep: usize, allocator: usize) -> Run<'static> {
        Run {
            job,
            workload: ["mixed", "larson (4 threads)"][job],
            allocator,
            allocator_name: ["hakmem", "system", "mimalloc3"][allocator],
            rep,
        }
    }

    #[test]
    fn the_line_names_the_run_and_the_time() {
        let line = status_line(
            &run(1, 1, 2),
            SHAPE.index(1, 1, 2),
            &SHAPE,
            Duration::from_secs(42),
            Some(Duration::from_secs(3 * 3600 + 7 * 60 + 9)),
        );
        assert_eq!(
            line,
            "[12/12] larson (4 threads) | mimalloc3 | rep 2/2 | elapsed 0:42 | left ~3:07:09"
        );
        let first = status_line(&run(0, 0, 0), 0, &SHAPE, Duration::ZERO, None);
        assert_eq!(first, "[1/12] mixed | hakmem | rep 1/2 | elapsed 0:00 | left ?");
    }

    #[test]
    fn runs_are_numbered_in_the_order_they_start() {
        let order: Vec<usize> = (0..SHAPE.jobs)
            .flat_map(|j| (0..SHAPE.reps).flat_map(move |r| (0..SHAPE.allocators).map(move |a| (j, r, a))))
            .map(|(j, r, a)| SHAPE.index(j, r, a))
            .collect();
        assert_eq!(order, (0..12).collect::<Vec<_>>());
        assert_eq!(SHAPE.cell_of(SHAPE.index(1, 1, 2)), (1, 2));
        assert_eq!(SHAPE.cell_of(SHAPE.index(0, 1, 0)), (0, 0));
    }

    #[test]
    fn the_estimate_uses_the_cell_then_the_workload_then_all_runs() {
        let mut history = History::new(SHAPE);
        assert_eq!(history.estimate_from(0), None, "nothing done yet");
        let ms = Duration::from_millis;
        // First round of job 0: hakmem 1 s, system 2 s, mimalloc3 3 s.
        history.record(0, 0, ms(1000));
        history.record(0, 1, ms(2000));
        history.record(0, 2, ms(3000));
        // Left from the second round of job 0: each allocator's own time
        // again, then job 1's six runs at the overall mean (2 s).
        assert_eq!(history.estimate_from(3), Some(ms(6000 + 6 * 2000)));
        // Job 1, hakmem took 10 s: its other runs take job 1's mean until
        // they have their own.
        history.record(0, 0, ms(1000));
        history.record(0, 1, ms(2000));
        history.record(0, 2, ms(3000));
        history.record(1, 0, ms(10_000));
        assert_eq!(
            history.estimate_from(7),
            Some(ms(10_000 + 10_000 + 10_000 + 10_000 + 10_000))
        );
    }

    #[test]
    fn a_log_gets_one_line_per_update_with_notes_between() {
        let mut progress = Progress::new(Vec::new(), None, SHAPE);
        progress.start(&run(0, 0, 0));
        progress.done();
        progress.note("hakmem-bench: mixed system rep 1 failed: killed by signal 11 (SIGSEGV)");
        progress.start(&run(0, 0, 1));
        progress.done();
        progress.finish();
        let out = String::from_utf8(progress.into_inner()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(lines[0].starts_with("[1/12] mixed | hakmem | rep 1/2 | elapsed 0:00 | left ?"));
        assert!(lines[1].contains("failed"));
        assert!(lines[2].starts_with("[2/12] mixed | system | rep 1/2 | elapsed 0:00 | left ~0:00"));
        assert_eq!(lines[3], "hakmem-bench: 12 runs in 0:00");
        assert!(!out.contains('\r') && !out.contains('\x1b'));
    }

    #[test]
    fn a_terminal_gets_one_line_rewritten_in_place_and_cut_to_its_width() {
        let mut progress = Progress::new(Vec::new(), Some(30), SHAPE);
        progress.start(&run(0, 0, 0));
        progress.done();
        progress.start(&run(0, 0, 1));
        progress.note("a note");
        progress.finish();
        let out = String::from_utf8(progress.into_inner()).unwrap();
        assert_eq!(
            out,
            "\r\x1b[K[1/12] mixed | hakmem | rep 1\
             \r\x1b[K[2/12] mixed | system | rep 1\
             \r\x1b[Ka note\n\
             \r\x1b[Khakmem-bench: 12 runs in 0:00\n"
        );
    }

    #[test]
    fn clock_shows_minutes_and_hours() {
        assert_eq!(clock(Duration::from_secs(0)), "0:00");
        assert_eq!(clock(Duration::from_millis(61_900)), "1:01");
        assert_eq!(clock(Duration::from_secs(3600 + 5)), "1:00:05");
    }
}
