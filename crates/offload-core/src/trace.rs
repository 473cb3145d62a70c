//! Tracing output: `LIBOMPTARGET_DEBUG=1` prints every operation's span to
//! stderr (`=2` and up adds trace-level detail). Without it no subscriber is
//! installed and spans cost one relaxed atomic load.

use std::sync::Once;

use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::Config;

/// Install the stderr subscriber once, when debugging is on. Leaves an
/// application's own subscriber alone.
pub fn init(config: &Config) {
    static ONCE: Once = Once::new();
    if config.debug == 0 {
        return;
    }
    let level = if config.debug > 1 {
        tracing::Level::TRACE
    } else {
        tracing::Level::DEBUG
    };
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_max_level(level)
            .with_span_events(FmtSpan::NEW)
            .with_target(false)
            .with_ansi(false)
            .try_init();
    });
}
