//! `LIBOMPTARGET_PROFILE=<file>`: a Chrome trace-event profile (open it in
//! chrome://tracing or Perfetto), in the shape LLVM's runtime writes:
//! one complete event (`"ph":"X"`) per operation span with its fields as
//! `args`, per-name totals (`Total <name>` with count and average), and
//! `process_name` / `thread_name` metadata. `-` writes to stdout.
//! `LIBOMPTARGET_PROFILE_GRANULARITY=<µs>` keeps only longer events
//! individually; every event still counts in the totals.
//!
//! Events are collected in memory and written once, when the process exits.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tracing::span::{Attributes, Id};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

struct Event {
    name: &'static str,
    detail: String,
    tid: u64,
    start_us: f64,
    dur_us: f64,
}

struct Profile {
    path: PathBuf,
    granularity_us: f64,
    origin: Instant,
    events: Vec<Event>,
    totals: BTreeMap<&'static str, (u64, f64)>,
    threads: BTreeMap<u64, String>,
}

static PROFILE: OnceLock<Mutex<Profile>> = OnceLock::new();

/// Span start time and formatted fields, kept in the span's extensions.
struct Timing {
    start: Instant,
    detail: String,
}

/// The tracing layer that records spans into the profile.
pub struct ProfileLayer;

/// Start collecting; the file is written at process exit.
pub fn start(path: PathBuf, granularity_us: f64) -> ProfileLayer {
    let _ = PROFILE.set(Mutex::new(Profile {
        path,
        granularity_us,
        origin: Instant::now(),
        events: Vec::new(),
        totals: BTreeMap::new(),
        threads: BTreeMap::new(),
    }));
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(write_at_exit) };
    ProfileLayer
}

struct FieldText<'a>(&'a mut String);

impl tracing::field::Visit for FieldText<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(';');
        }
        let _ = write!(self.0, "{}={:?}", field.name(), value);
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ProfileLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut detail = String::new();
        attrs.record(&mut FieldText(&mut detail));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Timing {
                start: Instant::now(),
                detail,
            });
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(timing) = span.extensions_mut().remove::<Timing>() else {
            return;
        };
        let Some(profile) = PROFILE.get() else { return };
        let end = Instant::now();
        let mut p = profile.lock().unwrap_or_else(|e| e.into_inner());
        let name = span.metadata().name();
        let dur_us = end.duration_since(timing.start).as_secs_f64() * 1e6;
        let total = p.totals.entry(name).or_insert((0, 0.0));
        total.0 += 1;
        total.1 += dur_us;
        let tid = thread_id();
        if dur_us >= p.granularity_us {
            let start_us = timing.start.duration_since(p.origin).as_secs_f64() * 1e6;
            p.threads.entry(tid).or_insert_with(|| {
                std::thread::current()
                    .name()
                    .unwrap_or("thread")
                    .to_string()
            });
            p.events.push(Event {
                name,
                detail: timing.detail,
                tid,
                start_us,
                dur_us,
            });
        }
    }
}

fn thread_id() -> u64 {
    // SAFETY: plain syscall.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The profile as JSON (also used by tests).
fn render(p: &Profile) -> String {
    let pid = std::process::id();
    let mut rows = Vec::new();
    for e in &p.events {
        rows.push(format!(
            r#"{{"ph":"X","pid":{pid},"tid":{},"ts":{:.3},"dur":{:.3},"name":"{}","args":{{"detail":"{}"}}}}"#,
            e.tid,
            e.start_us,
            e.dur_us,
            escape(e.name),
            escape(&e.detail)
        ));
    }
    let main_tid = pid as u64;
    for (name, (count, sum_us)) in &p.totals {
        rows.push(format!(
            r#"{{"ph":"X","pid":{pid},"tid":{main_tid},"ts":0,"dur":{sum_us:.3},"name":"Total {}","args":{{"count":{count},"avg ms":{:.6}}}}}"#,
            escape(name),
            sum_us / 1e3 / *count as f64
        ));
    }
    rows.push(format!(
        r#"{{"ph":"M","pid":{pid},"name":"process_name","args":{{"name":"libomptarget"}}}}"#
    ));
    for (tid, name) in &p.threads {
        rows.push(format!(
            r#"{{"ph":"M","pid":{pid},"tid":{tid},"name":"thread_name","args":{{"name":"{}"}}}}"#,
            escape(name)
        ));
    }
    format!(
        "{{\"traceEvents\":[\n{}\n],\n\"beginningOfTime\":0}}\n",
        rows.join(",\n")
    )
}

extern "C" fn write_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let Some(profile) = PROFILE.get() else { return };
        let p = profile.lock().unwrap_or_else(|e| e.into_inner());
        let text = render(&p);
        let result = if p.path.as_os_str() == "-" {
            use std::io::Write;
            std::io::stdout().write_all(text.as_bytes())
        } else {
            std::fs::write(&p.path, text)
        };
        if let Err(e) = result {
            eprintln!(
                "offload: cannot write the profile to {}: {e}",
                p.path.display()
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_shapes() {
        let mut p = Profile {
            path: PathBuf::from("-"),
            granularity_us: 0.0,
            origin: Instant::now(),
            events: vec![Event {
                name: "alloc",
                detail: "size=8;kind=\"x\"".into(),
                tid: 7,
                start_us: 1.0,
                dur_us: 2.5,
            }],
            totals: BTreeMap::new(),
            threads: BTreeMap::new(),
        };
        p.totals.insert("alloc", (2, 5.0));
        p.threads.insert(7, "main".into());
        let text = render(&p);
        assert!(text.starts_with("{\"traceEvents\":["));
        assert!(
            text.contains(r#""name":"alloc","args":{"detail":"size=8;kind=\"x\""}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""name":"Total alloc","args":{"count":2,"avg ms":0.002500}"#),
            "{text}"
        );
        assert!(text.contains("process_name"));
    }
}
