//! Showing snapshot progress: a bar per table on a terminal, log lines
//! otherwise.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Where a table's snapshot stands, for display.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TableProgress<'a> {
    pub(crate) table: &'a str,
    pub(crate) rows: u64,
    pub(crate) chunks: u64,
    /// The planner's estimate of the table's rows, if known.
    pub(crate) estimate: Option<u64>,
    /// Rows per second over the snapshot so far.
    pub(crate) rate: f64,
}

impl TableProgress<'_> {
    /// Seconds left at the current rate, if the size is known.
    pub(crate) fn eta(&self) -> Option<u64> {
        let est = self.estimate?;
        (self.rate > 0.0).then(|| (est.saturating_sub(self.rows) as f64 / self.rate).round() as u64)
    }

    /// `[#####-----]  45%  450000 rows  120000 rows/s  ETA 5 s`.
    pub(crate) fn bar(&self, width: usize) -> String {
        let fraction = self
            .estimate
            .filter(|&e| e > 0)
            .map(|e| (self.rows as f64 / e as f64).min(1.0));
        let mut line = format!("{} ", self.table);
        match fraction {
            Some(f) => {
                let filled = (f * width as f64).round() as usize;
                line.push('[');
                line.extend(std::iter::repeat_n('#', filled));
                line.extend(std::iter::repeat_n('-', width - filled.min(width)));
                line.push_str(&format!("] {:3.0}% ", f * 100.0));
            }
            None => line.push_str("[size unknown] "),
        }
        line.push_str(&format!("{} rows  {:.0} rows/s", self.rows, self.rate));
        if let Some(eta) = self.eta() {
            line.push_str(&format!("  ETA {eta} s"));
        }
        line
    }
}

/// Draws progress on stderr when it is a terminal, else logs it every
/// `interval`.
#[derive(Debug)]
pub(crate) struct Display {
    terminal: bool,
    interval: Duration,
    last: Option<Instant>,
}

impl Display {
    pub(crate) fn new(interval: Duration) -> Self {
        Display {
            terminal: std::io::stderr().is_terminal(),
            interval,
            last: None,
        }
    }

    /// Shows `p` if it is time to (always when `finished`).
    pub(crate) fn show(&mut self, p: &TableProgress<'_>, finished: bool) {
        let every = if self.terminal {
            Duration::from_millis(200)
        } else {
            self.interval
        };
        if !finished && self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        self.last = Some(Instant::now());
        if self.terminal {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K{}", p.bar(30));
            if finished {
                let _ = writeln!(err);
            }
            let _ = err.flush();
        } else {
            tracing::info!(table = %p.table, rows = p.rows, chunks = p.chunks,
                rows_per_s = p.rate.round() as u64, eta_s = ?p.eta(), done = finished, "snapshot progress");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_shows_share_rate_and_eta() {
        let p = TableProgress {
            table: "public.t",
            rows: 250,
            chunks: 1,
            estimate: Some(1000),
            rate: 50.0,
        };
        let bar = p.bar(10);
        assert!(
            bar.starts_with("public.t [###-------]  25% 250 rows  50 rows/s"),
            "{bar}"
        );
        assert!(bar.ends_with("ETA 15 s"), "{bar}");
        let unknown = TableProgress {
            estimate: None,
            ..p
        };
        assert!(unknown.bar(10).contains("[size unknown] 250 rows"));
        assert_eq!(unknown.eta(), None);
        let over = TableProgress { rows: 2000, ..p };
        assert!(over.bar(10).contains("[##########] 100%"));
    }
}
