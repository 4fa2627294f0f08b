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

/// An interposer's start-up lines through `emit`: `library` loaded (mode, census), why the mode
/// differs from what was asked, and the configuration file's problems, each at its level.
pub fn announce(cfg: &crate::config::Config, layers: &crate::config::Layers, library: &str, emit: Sink) {
    if cfg.log >= LogLevel::Info {
        let census = cfg.census.as_deref().unwrap_or("(none)");
        emit(LogLevel::Info, format_args!("{library} loaded: mode {}, census {census}", cfg.mode.name()));
    }
    if cfg.log < LogLevel::Warn {
        return;
    }
    if let Some(note) = &cfg.mode_note {
        emit(LogLevel::Warn, format_args!("{note}"));
    }
    for problem in &layers.problems {
        let file = layers.file.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
        emit(LogLevel::Warn, format_args!("configuration file {file}: {problem}"));
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

/// Installs the interposer's one logging path, [`LogSubscriber`], as the process-wide `tracing`
/// subscriber of this copy of `tracing` (an application's own subscribers, if any, live in other
/// copies), so that the runtime's and backend's events (a failed submission, a refused lease, a
/// failed op) reach stderr with the interposer's own lines. `filter` is a `tracing`-style filter
/// (`VITAMIN_LOG`; `warn` when `None`); `write` writes one finished line (the interposer's raw
/// stderr write).
pub fn install_subscriber(filter: Option<&str>, write: fn(&str)) {
    let _ = tracing::subscriber::set_global_default(LogSubscriber::new(filter.unwrap_or("warn"), write));
}

/// A `tracing` subscriber that hands each event, formatted as one line, to a writer.
///
/// Hand-written instead of `tracing-subscriber`'s `fmt`: that layer formats into a thread-local
/// buffer, and interposers log from thread-exit paths (a per-thread default stream released when
/// its thread ends), where a thread-local access panics ("cannot access a Thread Local Storage
/// value during or after destruction", seen under PyTorch on the H200:
/// docs/results/apps-suite.md). This one keeps no per-thread state: a filter of `target=level`
/// directives (a bare level applies to every target), events formatted into a local `String`,
/// spans ignored.
#[derive(Debug)]
pub struct LogSubscriber {
    /// (target prefix, most verbose level), longest prefix first; `""` is the default.
    directives: Vec<(String, tracing::level_filters::LevelFilter)>,
    max: tracing::level_filters::LevelFilter,
    write: fn(&str),
}

impl LogSubscriber {
    /// Parses a `tracing`-style filter (`debug`, `vitamin=debug,vitamin_runtime=trace`); words
    /// that do not parse are ignored.
    pub fn new(filter: &str, write: fn(&str)) -> LogSubscriber {
        use tracing::level_filters::LevelFilter;
        let mut directives: Vec<(String, LevelFilter)> = filter
            .split(',')
            .filter_map(|d| {
                let (target, level) = d.split_once('=').unwrap_or(("", d));
                let level = level.trim();
                // (`LevelFilter` parses an empty word as `ERROR`.)
                (!level.is_empty())
                    .then(|| level.parse::<LevelFilter>().ok())
                    .flatten()
                    .map(|l| (target.trim().to_string(), l))
            })
            .collect();
        directives.sort_by_key(|d| std::cmp::Reverse(d.0.len()));
        let max = directives.iter().map(|d| d.1).max().unwrap_or(LevelFilter::OFF);
        LogSubscriber { directives, max, write }
    }

    /// Whether an event of `level` from `target` is written.
    pub fn enabled_for(&self, target: &str, level: &tracing::Level) -> bool {
        self.directives.iter().find(|(prefix, _)| target.starts_with(prefix.as_str())).is_some_and(|(_, l)| l >= level)
    }

    /// The line an event becomes.
    fn line(event: &tracing::Event<'_>) -> String {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                use std::fmt::Write;
                if field.name() == "message" {
                    let _ = write!(self.0, " {value:?}");
                } else {
                    let _ = write!(self.0, " {}={value:?}", field.name());
                }
            }
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "message" {
                    self.0.push(' ');
                    self.0.push_str(value);
                } else {
                    self.record_debug(field, &value);
                }
            }
        }
        let meta = event.metadata();
        let mut f = Fields(format!("{} {}:", meta.level(), meta.target()));
        event.record(&mut f);
        f.0.push('\n');
        f.0
    }
}

impl tracing::Subscriber for LogSubscriber {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        self.enabled_for(meta.target(), meta.level())
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(self.max)
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        (self.write)(&Self::line(event));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

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

    #[test]
    fn the_filter_follows_tracing_directives() {
        use tracing::Level;
        let w: fn(&str) = |_| {};
        let f = LogSubscriber::new("warn,vitamin=debug", w);
        assert!(f.enabled_for("vitamin_runtime::dispatch", &Level::DEBUG), "a target prefix matches");
        assert!(!f.enabled_for("vitamin_runtime::dispatch", &Level::TRACE));
        assert!(f.enabled_for("other", &Level::WARN) && !f.enabled_for("other", &Level::INFO), "the bare level");
        let only = LogSubscriber::new("vitamin_hal=trace", w);
        assert!(only.enabled_for("vitamin_hal::sim", &Level::TRACE));
        assert!(!only.enabled_for("vitamin", &Level::ERROR), "no default: other targets are off");
        let off = LogSubscriber::new("off", w);
        assert!(!off.enabled_for("vitamin", &Level::ERROR));
        let junk = LogSubscriber::new("loud,=,x=y", w);
        assert!(!junk.enabled_for("vitamin", &Level::ERROR), "unparsable words are ignored");
    }
}
