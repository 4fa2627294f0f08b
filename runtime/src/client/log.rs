//! Logging of the client runtime through the interposer's own sink.
//!
//! An interposer logs with `write(2)` on stderr, without locks or buffering, and only when
//! `VITAMIN_LOG` asks ([`crate::config::LogLevel`]); the client runtime logs through the same
//! sink, installed once by the interposer ([`install`]). Before that (and in tests) nothing is
//! printed.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::config::LogLevel;

/// Where a log line goes.
pub type Sink = fn(LogLevel, std::fmt::Arguments<'_>);

static SINK: OnceLock<Sink> = OnceLock::new();
static LEVEL: AtomicU8 = AtomicU8::new(0);

fn rank(level: LogLevel) -> u8 {
    match level {
        LogLevel::Off => 0,
        LogLevel::Error => 1,
        LogLevel::Warn => 2,
        LogLevel::Info => 3,
        LogLevel::Debug => 4,
        LogLevel::Trace => 5,
    }
}

/// Installs the interposer's sink and the most verbose level it prints (the first call wins for
/// the sink; the level is updated every time).
pub fn install(sink: Sink, level: LogLevel) {
    let _ = SINK.set(sink);
    LEVEL.store(rank(level), Ordering::Relaxed);
}

/// Whether a message at `level` would be printed.
#[inline]
pub fn enabled(level: LogLevel) -> bool {
    level != LogLevel::Off && rank(level) <= LEVEL.load(Ordering::Relaxed) && SINK.get().is_some()
}

/// Writes one line through the sink, if one is installed.
pub fn emit(level: LogLevel, args: std::fmt::Arguments<'_>) {
    if let Some(sink) = SINK.get() {
        sink(level, args);
    }
}

/// Logs through the installed sink when the level is enabled.
macro_rules! clog {
    ($level:expr, $($arg:tt)*) => {
        if $crate::client::log::enabled($level) {
            $crate::client::log::emit($level, format_args!($($arg)*));
        }
    };
}
pub(crate) use clog;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_rank_like_their_order() {
        let all = [LogLevel::Off, LogLevel::Error, LogLevel::Warn, LogLevel::Info, LogLevel::Debug, LogLevel::Trace];
        for w in all.windows(2) {
            assert!(w[0] < w[1] && rank(w[0]) < rank(w[1]));
        }
        assert!(!enabled(LogLevel::Off), "off is never printed");
    }
}
