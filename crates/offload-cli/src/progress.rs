//! Progress of long work (`offload replay` of many launches, `offload
//! pack` of large images) on stderr.
//!
//! On a terminal: an `indicatif` bar (or spinner), cleared when the work
//! ends so only the summary lines stay. Elsewhere (logs, pipes, CI): no
//! escape codes and nothing at all for work under [`QUIET_FOR`]; past it,
//! plain lines such as `offload replay: 40/100 launches (2.1 s)`, at most
//! one per [`EVERY`].

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Work shorter than this prints no progress line off a terminal.
pub const QUIET_FOR: Duration = Duration::from_secs(2);
/// The least time between two progress lines off a terminal.
pub const EVERY: Duration = Duration::from_secs(5);

pub struct Progress {
    /// `offload replay`, `offload pack`: the start of every line.
    prefix: &'static str,
    /// `launches`: what is counted (None: phases only).
    unit: Option<&'static str>,
    total: u64,
    done: u64,
    start: Instant,
    /// When the last plain line was printed (off a terminal).
    last_line: Option<Instant>,
    /// The current phase (pack: "reading 3 images").
    phase: String,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Progress of `total` things counted in `unit`; a bar on a terminal
    /// when `show_bar` (the caller's judgement that the work may be long).
    pub fn counted(prefix: &'static str, unit: &'static str, total: u64, show_bar: bool) -> Self {
        let bar = (show_bar && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{prefix}: [{{bar:30}}] {{pos}}/{{len}} {unit} ({{elapsed}}, {{eta}} left) {{msg}}"
                ))
                .expect("a valid template")
                .progress_chars("=> "),
            );
            bar
        });
        Self::with_bar(prefix, Some(unit), total, bar)
    }

    /// Progress told in phases (`phase`); a spinner on a terminal when
    /// `show_spinner`.
    pub fn phases(prefix: &'static str, show_spinner: bool) -> Self {
        let bar = (show_spinner && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(&format!(
                    "{prefix}: {{spinner}} {{msg}} ({{elapsed}})"
                ))
                .expect("a valid template"),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self::with_bar(prefix, None, 0, bar)
    }

    fn with_bar(
        prefix: &'static str,
        unit: Option<&'static str>,
        total: u64,
        bar: Option<ProgressBar>,
    ) -> Self {
        Progress {
            prefix,
            unit,
            total,
            done: 0,
            start: Instant::now(),
            last_line: None,
            phase: String::new(),
            bar,
        }
    }

    /// One more thing done.
    pub fn inc(&mut self) {
        self.done += 1;
        match &self.bar {
            Some(bar) => bar.inc(1),
            None => self.maybe_line(),
        }
    }

    /// A new phase of the work (`writing out.bin (1.2 GiB)`).
    pub fn phase(&mut self, phase: impl Into<String>) {
        self.phase = phase.into();
        match &self.bar {
            Some(bar) => bar.set_message(self.phase.clone()),
            None => self.maybe_line(),
        }
    }

    /// Runs `f` (which prints) with the bar hidden, so lines and the bar do
    /// not mix on the terminal.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// The plain line for now, off a terminal, when the work has run past
    /// [`QUIET_FOR`] and the last line is [`EVERY`] old.
    fn maybe_line(&mut self) {
        let now = Instant::now();
        let elapsed = now - self.start;
        let due = match self.last_line {
            None => elapsed >= QUIET_FOR,
            Some(t) => now - t >= EVERY,
        };
        if due {
            self.last_line = Some(now);
            eprintln!("{}", self.line(elapsed));
        }
    }

    fn line(&self, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64();
        match (self.unit, self.phase.is_empty()) {
            (Some(unit), _) => format!(
                "{}: {}/{} {unit} ({secs:.1} s)",
                self.prefix, self.done, self.total
            ),
            (None, false) => format!("{}: {} ({secs:.1} s so far)", self.prefix, self.phase),
            (None, true) => format!("{}: working ({secs:.1} s so far)", self.prefix),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// `bytes` for people: `512 B`, `3.4 MiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    indicatif::BinaryBytes(n).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_count_and_name_phases() {
        let mut p = Progress::counted("offload replay", "launches", 10, false);
        assert!(p.bar.is_none(), "no bar unless asked for");
        p.done = 4;
        assert_eq!(
            p.line(Duration::from_millis(2500)),
            "offload replay: 4/10 launches (2.5 s)"
        );
        let mut p = Progress::phases("offload pack", false);
        assert_eq!(
            p.line(Duration::from_secs(3)),
            "offload pack: working (3.0 s so far)"
        );
        p.phase = "writing out.bin (1.0 GiB)".into();
        assert_eq!(
            p.line(Duration::from_secs(3)),
            "offload pack: writing out.bin (1.0 GiB) (3.0 s so far)"
        );
        assert_eq!(bytes(3 << 20), "3.00 MiB");
    }

    #[test]
    fn quick_work_prints_no_line() {
        let mut p = Progress::counted("offload replay", "launches", 2, false);
        p.inc();
        p.inc();
        assert!(p.last_line.is_none());
    }
}
