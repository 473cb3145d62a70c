//! Tracing output. Every public operation opens a span; what happens to
//! the spans depends on the environment, read once:
//!
//! * `LIBOMPTARGET_DEBUG=1` prints them to stderr (`=2` and up adds
//!   trace-level detail);
//! * `LIBOMPTARGET_PROFILE=<file>` writes a Chrome trace-event profile at
//!   exit ([`crate::profile`]).
//!
//! With neither, no subscriber is installed and a span costs one relaxed
//! atomic load.

use std::sync::Once;

use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::config::Config;

/// Install the subscriber once, when debugging or profiling is on. Leaves an
/// application's own subscriber alone.
pub fn init(config: &Config) {
    static ONCE: Once = Once::new();
    if config.debug == 0 && config.profile.is_none() {
        return;
    }
    ONCE.call_once(|| {
        let debug = (config.debug > 0).then(|| {
            let level = if config.debug > 1 {
                tracing::Level::TRACE
            } else {
                tracing::Level::DEBUG
            };
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_span_events(FmtSpan::NEW)
                .with_target(false)
                .with_ansi(false)
                .with_filter(tracing_subscriber::filter::LevelFilter::from_level(level))
        });
        let profile = config.profile.clone().map(|path| {
            crate::profile::start(path, config.profile_granularity_us as f64)
                .with_filter(tracing_subscriber::filter::LevelFilter::TRACE)
        });
        let _ = tracing_subscriber::registry()
            .with(debug)
            .with(profile)
            .try_init();
    });
}
