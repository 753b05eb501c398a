//! Progress on stderr for long runs; drawn only when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::file::Position;

/// Records between two progress updates: rare enough to cost nothing per record.
pub(crate) const COUNT_RECORDS_PER_TICK: u64 = 1 << 16;

/// A progress bar for bytes of input, rows of input, or records generated.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar for reading a file at `start`.
    pub(crate) fn reading(start: Position) -> Self {
        let (total, template) = match start {
            Position::Bytes { total, .. } => (
                total,
                "{spinner} {elapsed_precise} [{bar:30}] {bytes}/{total_bytes} {msg} (eta {eta})",
            ),
            Position::Rows { total, .. } => (
                total,
                "{spinner} {elapsed_precise} [{bar:30}] {pos}/{len} rows {msg} (eta {eta})",
            ),
        };
        Self::with(total, template)
    }

    /// A bar counting `total` generated records.
    pub(crate) fn counting(total: u64) -> Self {
        Self::with(
            total,
            "{spinner} {elapsed_precise} [{bar:30}] {pos}/{len} requests (eta {eta})",
        )
    }

    /// A bar that never draws, for library calls.
    pub(crate) fn hidden() -> Self {
        Self {
            bar: ProgressBar::hidden(),
        }
    }

    fn with(total: u64, template: &str) -> Self {
        let target = if std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(total), target);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        Self { bar }
    }

    /// Reports the reader at `at` after `records` records.
    pub(crate) fn read(&self, at: Position, records: u64) {
        match at {
            Position::Bytes { done, .. } | Position::Rows { done, .. } => {
                self.bar.set_position(done)
            }
        }
        self.bar.set_message(format!("{records} requests"));
    }

    /// Reports `records` records produced.
    pub(crate) fn count(&self, records: u64) {
        self.bar.set_position(records);
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
