//! The progress line on stderr while a plan runs, by `indicatif`:
//!
//! ```text
//! [21/240] c7 | hakmem | rep 2/5 | elapsed 00:00:42 | left 00:07:18
//! ```
//!
//! the run starting now (its number of all, workload, allocator, rep), the
//! time since the first run started, and indicatif's estimate of the time
//! left (from the rate of the runs done so far). On a terminal indicatif
//! redraws the line in place; otherwise (a log, a pipe) each run gets a
//! line of its own, `left ?` until a run has finished. Notes (failures, a
//! child's stderr) go on lines of their own above it.
//!
//! This runs in the parent between children, never in a timed section (each
//! child times its own workload).

use indicatif::{FormattedDuration, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// The line's layout on a terminal (`prefix` is `21/240`).
const TEMPLATE: &str = "[{prefix}] {msg} | elapsed {elapsed_precise} | left {eta_precise}";

pub struct Progress {
    bar: ProgressBar,
    /// stderr is not a terminal: a line per run instead of a redrawn one.
    log: bool,
}

impl Progress {
    /// Progress of `total` runs on stderr.
    pub fn stderr(total: usize) -> Progress {
        let total = u64::try_from(total).unwrap_or(u64::MAX);
        let log = !std::io::stderr().is_terminal();
        let bar = if log {
            // Kept for its clock and estimate; the lines are printed below.
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden())
        } else {
            let style = ProgressStyle::with_template(TEMPLATE).expect("the template is valid");
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr()).with_style(style)
        };
        Progress { bar, log }
    }

    /// Shows the run `label` (`c7 | hakmem | rep 2/5`), which starts now.
    pub fn start(&self, label: &str) {
        let done = self.bar.position();
        let total = self.bar.length().unwrap_or(0);
        if done == 0 {
            // The clock starts with the first run, not with the set-up.
            self.bar.reset_elapsed();
        }
        if self.log {
            let left = if done == 0 {
                "?".to_string()
            } else {
                FormattedDuration(self.bar.eta()).to_string()
            };
            eprintln!(
                "[{}/{total}] {label} | elapsed {} | left {left}",
                done + 1,
                FormattedDuration(self.bar.elapsed())
            );
        } else {
            self.bar.set_prefix(format!("{}/{total}", done + 1));
            self.bar.set_message(label.to_string());
        }
    }

    /// Records the end of the run in flight.
    pub fn done(&self) {
        self.bar.inc(1);
    }

    /// A message on its own line(s), not overwritten by the next update.
    pub fn note(&self, message: &str) {
        if self.log {
            eprintln!("{message}");
        } else {
            self.bar.suspend(|| eprintln!("{message}"));
        }
    }

    /// Clears the line and says how long the whole plan took.
    pub fn finish(self) {
        self.bar.finish_and_clear();
        eprintln!(
            "hakmem-bench: {} runs in {}",
            self.bar.position(),
            FormattedDuration(self.bar.elapsed())
        );
    }
}
