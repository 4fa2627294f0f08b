//! Configuration from the environment, parsed once per process by the interposer (pure; the
//! lookup is injected).
//!
//! | variable | meaning |
//! | --- | --- |
//! | `VITAMIN_MODE` | `bind` (default): late-bind asynchronous work to the pool (see [`crate::client`]), counting like observe mode. `observe`: forward every call unchanged and count. `passthrough`: forward without counting (to measure the bare interposition cost). Case-insensitive; an unknown value runs observe mode (the one that changes nothing) and says so. |
//! | `VITAMIN_POLICY` | bind mode's policy: `throughput` (default), `tpot`, `static`, `exclusive` or `chaos`. |
//! | `VITAMIN_SEED` | seed of the Chaos policy (default 0x5eed). |
//! | `VITAMIN_LANE_CONTINUATION` | `1` (default) or `0` (strict readiness: every op waits for its predecessors' observed completion). |
//! | `VITAMIN_CENSUS` | where to write the census JSON at exit; unset: nothing is written. `%p` is replaced by the process id. |
//! | `VITAMIN_CENSUS_PID` | the main process (set by `vitamin run`): other processes that made driver calls write `<census>.<pid>` instead of clobbering the main one's file. |
//! | `VITAMIN_LOG` | log level on stderr (`error`, `warn`, `info`, `debug`, `trace`, or `tracing`-style directives such as `vitamin=debug`); unset: the interposer prints nothing. |

use std::path::PathBuf;

use crate::policy::PolicyKind;

/// What the interposer does with intercepted calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward unchanged; count calls and launches.
    Observe,
    /// Forward unchanged; count nothing.
    Passthrough,
    /// Late-bind asynchronous work to the pool; count like observe mode.
    Bind,
}

impl Mode {
    /// Name used in the census JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Observe => "observe",
            Mode::Passthrough => "passthrough",
            Mode::Bind => "bind",
        }
    }
}

/// How much the interposer logs on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Nothing (default).
    Off,
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Start-up and exit summaries.
    Info,
    /// Every substitution.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    fn parse(word: &str) -> Option<LogLevel> {
        Some(match word.trim().to_ascii_lowercase().as_str() {
            "off" | "none" => LogLevel::Off,
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            _ => return None,
        })
    }

    /// Parses a `tracing`-style filter: the most verbose level among directives that apply to
    /// vitamin (no target, or a target starting with `vitamin`). Unparsable input means `Off`.
    pub fn from_filter(filter: &str) -> LogLevel {
        filter
            .split(',')
            .filter_map(|directive| match directive.split_once('=') {
                None => LogLevel::parse(directive),
                Some((target, level)) if target.trim().starts_with("vitamin") => LogLevel::parse(level),
                Some(_) => None,
            })
            .max()
            .unwrap_or(LogLevel::Off)
    }
}

/// The interposer's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// What to do with calls.
    pub mode: Mode,
    /// Why `mode` differs from what was asked, if it does (logged at start-up).
    pub mode_note: Option<String>,
    /// Census path template (`VITAMIN_CENSUS`).
    pub census: Option<String>,
    /// The main process's id (`VITAMIN_CENSUS_PID`).
    pub census_pid: Option<u32>,
    /// Log level.
    pub log: LogLevel,
    /// Bind mode's policy (`VITAMIN_POLICY`).
    pub policy: PolicyKind,
    /// Chaos seed (`VITAMIN_SEED`).
    pub seed: u64,
    /// Lane continuation (`VITAMIN_LANE_CONTINUATION`).
    pub lane_continuation: bool,
}

/// Default Chaos seed.
pub const DEFAULT_SEED: u64 = 0x5eed;

impl Config {
    /// Reads the configuration through `get` (the environment in the interposer, a map in tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let mut notes = Vec::new();
        let mode = match get("VITAMIN_MODE").map(|m| m.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("bind") => Mode::Bind,
            Some("observe") => Mode::Observe,
            Some("passthrough") | Some("off") => Mode::Passthrough,
            Some(other) => {
                notes.push(format!(
                    "unknown VITAMIN_MODE={other:?} (expected observe, bind or passthrough); running in observe mode"
                ));
                Mode::Observe
            }
        };
        let policy = match get("VITAMIN_POLICY").as_deref().map(str::trim) {
            None | Some("") => PolicyKind::Throughput,
            Some(p) => p.parse().unwrap_or_else(|e| {
                notes.push(format!("VITAMIN_POLICY: {e}; using throughput"));
                PolicyKind::Throughput
            }),
        };
        let seed = match get("VITAMIN_SEED").as_deref().map(str::trim) {
            None | Some("") => DEFAULT_SEED,
            Some(s) => parse_u64(s).unwrap_or_else(|| {
                notes.push(format!("VITAMIN_SEED={s:?} is not a number; using {DEFAULT_SEED:#x}"));
                DEFAULT_SEED
            }),
        };
        let lane_continuation = match get("VITAMIN_LANE_CONTINUATION").as_deref().map(str::trim) {
            None | Some("") | Some("1") | Some("on") | Some("true") => true,
            Some("0") | Some("off") | Some("false") => false,
            Some(other) => {
                notes.push(format!("VITAMIN_LANE_CONTINUATION={other:?} is not 0 or 1; keeping it on"));
                true
            }
        };
        let mode_note = (!notes.is_empty()).then(|| notes.join("; "));
        Config {
            mode,
            mode_note,
            census: get("VITAMIN_CENSUS").filter(|s| !s.is_empty()),
            census_pid: get("VITAMIN_CENSUS_PID").and_then(|s| s.trim().parse().ok()),
            log: get("VITAMIN_LOG").map(|f| LogLevel::from_filter(&f)).unwrap_or(LogLevel::Off),
            policy,
            seed,
            lane_continuation,
        }
    }

    /// Where process `pid` writes its census, if anywhere.
    ///
    /// `%p` in the template becomes the pid. Without `%p`, the main process (`VITAMIN_CENSUS_PID`,
    /// or every process when that is unset) writes the path itself and any other process writes
    /// `<path>.<pid>`, so a forked or spawned GPU process never overwrites the main census.
    pub fn census_path(&self, pid: u32) -> Option<PathBuf> {
        let template = self.census.as_deref()?;
        if template.contains("%p") {
            return Some(PathBuf::from(template.replace("%p", &pid.to_string())));
        }
        match self.census_pid {
            Some(main) if main != pid => Some(PathBuf::from(format!("{template}.{pid}"))),
            _ => Some(PathBuf::from(template)),
        }
    }
}

/// A decimal or `0x` hexadecimal number.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn config(pairs: &[(&str, &str)]) -> Config {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_silent_bind_without_census() {
        let c = config(&[]);
        assert_eq!(c.mode, Mode::Bind);
        assert_eq!(config(&[("VITAMIN_MODE", "")]).mode, Mode::Bind);
        assert_eq!(config(&[("VITAMIN_MODE", "  ")]).mode, Mode::Bind);
        assert_eq!(c.mode_note, None);
        assert_eq!(c.census, None);
        assert_eq!(c.log, LogLevel::Off);
        assert_eq!(c.census_path(42), None);
    }

    #[test]
    fn modes() {
        assert_eq!(config(&[("VITAMIN_MODE", "observe")]).mode, Mode::Observe);
        assert_eq!(config(&[("VITAMIN_MODE", "Observe ")]).mode, Mode::Observe);
        assert_eq!(config(&[("VITAMIN_MODE", "passthrough")]).mode, Mode::Passthrough);
        assert_eq!(config(&[("VITAMIN_MODE", "off")]).mode, Mode::Passthrough);
        assert_eq!(config(&[("VITAMIN_MODE", "BIND")]).mode, Mode::Bind);
        let bind = config(&[("VITAMIN_MODE", "bind")]);
        assert_eq!(bind.mode, Mode::Bind);
        assert_eq!(bind.mode_note, None);
        // An unknown value changes nothing: observe mode, with a note saying so.
        let odd = config(&[("VITAMIN_MODE", "turbo")]);
        assert_eq!(odd.mode, Mode::Observe);
        let note = odd.mode_note.unwrap();
        assert!(note.contains("turbo") && note.contains("observe"), "{note}");
    }

    #[test]
    fn bind_settings() {
        let d = config(&[]);
        assert_eq!((d.policy, d.seed, d.lane_continuation), (PolicyKind::Throughput, DEFAULT_SEED, true));
        let c = config(&[("VITAMIN_POLICY", "Chaos"), ("VITAMIN_SEED", "0x10"), ("VITAMIN_LANE_CONTINUATION", "0")]);
        assert_eq!((c.policy, c.seed, c.lane_continuation), (PolicyKind::Chaos, 16, false));
        assert_eq!(config(&[("VITAMIN_SEED", "42")]).seed, 42);
        let bad = config(&[("VITAMIN_POLICY", "fastest"), ("VITAMIN_SEED", "x"), ("VITAMIN_LANE_CONTINUATION", "2")]);
        assert_eq!((bad.policy, bad.seed, bad.lane_continuation), (PolicyKind::Throughput, DEFAULT_SEED, true));
        let note = bad.mode_note.unwrap();
        assert!(
            note.contains("fastest") && note.contains("VITAMIN_SEED") && note.contains("LANE_CONTINUATION"),
            "{note}"
        );
    }

    #[test]
    fn log_filters() {
        assert_eq!(LogLevel::from_filter("debug"), LogLevel::Debug);
        assert_eq!(LogLevel::from_filter("vitamin=info,warn"), LogLevel::Info);
        assert_eq!(LogLevel::from_filter("hyper=trace"), LogLevel::Off);
        assert_eq!(LogLevel::from_filter("vitamin_shim=trace"), LogLevel::Trace);
        assert_eq!(LogLevel::from_filter("nonsense"), LogLevel::Off);
        assert_eq!(LogLevel::from_filter(""), LogLevel::Off);
    }

    #[test]
    fn census_paths() {
        let c = config(&[("VITAMIN_CENSUS", "/tmp/c.json"), ("VITAMIN_CENSUS_PID", "100")]);
        assert_eq!(c.census_path(100).unwrap(), PathBuf::from("/tmp/c.json"));
        assert_eq!(c.census_path(101).unwrap(), PathBuf::from("/tmp/c.json.101"));
        let p = config(&[("VITAMIN_CENSUS", "/tmp/c.%p.json"), ("VITAMIN_CENSUS_PID", "100")]);
        assert_eq!(p.census_path(100).unwrap(), PathBuf::from("/tmp/c.100.json"));
        assert_eq!(p.census_path(7).unwrap(), PathBuf::from("/tmp/c.7.json"));
        let no_main = config(&[("VITAMIN_CENSUS", "c.json")]);
        assert_eq!(no_main.census_path(5).unwrap(), PathBuf::from("c.json"));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Two different processes never get the same census path while a main pid is known.
        #[test]
        fn distinct_processes_distinct_paths(main in 1u32..1000, a in 1u32..1000, b in 1u32..1000, pct in any::<bool>()) {
            prop_assume!(a != b);
            let template = if pct { "/x/census.%p.json" } else { "/x/census.json" };
            let main_s = main.to_string();
            let c = config(&[("VITAMIN_CENSUS", template), ("VITAMIN_CENSUS_PID", &main_s)]);
            prop_assert_ne!(c.census_path(a), c.census_path(b));
        }
    }
}
