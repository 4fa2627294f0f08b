//! The one configuration of a process: typed, from defaults, an optional TOML file and
//! `VITAMIN_*` overrides (pure; the environment and the file reader are injected).
//!
//! Layers, parsed once per process ([`process`]): each key's default, then an optional TOML file
//! (`VITAMIN_CONFIG`, then `$XDG_CONFIG_HOME/vitamin/config.toml`, `~/.config/vitamin/config.toml`,
//! `/etc/vitamin/config.toml`), then the `VITAMIN_*` variable of the keys that take one. User
//! keys sit at the top level, tuning knobs under `[advanced]`, and `[daemon]` is the daemon's.
//! [`KEYS`] lists every key; docs/config.md lists the same with the measurement behind each
//! default (`runtime/tests/config_table.rs` keeps them in step). The parsers ([`Config::from_lookup`],
//! the coordinator's `Tuning::from_lookup`) ask by variable name; [`Layers::get`] answers.
//!
//! `mode`: `bind` (default) late-binds asynchronous work to the pool (see [`crate::client`]),
//! counting like observe mode; `observe` forwards every call unchanged and counts; `passthrough`
//! forwards without counting. Case-insensitive; an unknown value runs observe mode (the one that
//! changes nothing) and says so.

use std::path::PathBuf;

use serde::Serialize;

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
    /// The coordination daemon's socket (`VITAMIN_DAEMON`): bind under its arbitration; `None`:
    /// this process decides alone.
    pub daemon: Option<PathBuf>,
    /// The scheduling class the daemon sees (`VITAMIN_CLASS`, `VITAMIN_TPOT_MS`).
    pub class: crate::policy::ClientClass,
    /// A profile file the policy sizes launches by (the file key `profiles`); `None`: the wave model.
    pub profiles: Option<PathBuf>,
    /// Where to write, at exit, the execution times bind mode observed per launch configuration
    /// and node size (the file key `profile_out`; `%p`: the process id), merged over `profiles`.
    pub profile_out: Option<String>,
}

/// Default Chaos seed.
pub const DEFAULT_SEED: u64 = 0x5eed;

/// Default per-token target of a latency-class client without `tpot_ms`, ms.
pub const DEFAULT_TPOT_MS: f64 = 50.0;

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
        let class = match get("VITAMIN_CLASS") {
            None => crate::policy::ClientClass::BestEffort,
            Some(c) => parse_class(&c).unwrap_or_else(|e| {
                notes.push(format!("VITAMIN_CLASS={c:?}: {e}; using batch"));
                crate::policy::ClientClass::BestEffort
            }),
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
            daemon: get("VITAMIN_DAEMON").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).map(PathBuf::from),
            class,
            profiles: get("profiles").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).map(PathBuf::from),
            profile_out: get("profile_out").map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()),
        }
    }

    /// Where process `pid` writes its recorded profile, if anywhere (`%p` becomes the pid).
    pub fn profile_out_path(&self, pid: u32) -> Option<PathBuf> {
        self.profile_out.as_deref().map(|t| PathBuf::from(t.replace("%p", &pid.to_string())))
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

/// A scheduling class: `batch` (or empty), `latency` (the default target) or `latency:MS`.
pub fn parse_class(text: &str) -> Result<crate::policy::ClientClass, String> {
    let t = text.trim().to_ascii_lowercase();
    let (name, ms) = match t.split_once(':') {
        Some((n, ms)) => (n.to_owned(), Some(ms.trim().to_owned())),
        None => (t.clone(), None),
    };
    match (name.as_str(), ms) {
        ("" | "batch" | "best-effort", None) => Ok(crate::policy::ClientClass::BestEffort),
        ("latency", ms) => {
            let ms = match ms {
                None => DEFAULT_TPOT_MS,
                Some(m) => match m.parse::<f64>() {
                    Ok(v) if v.is_finite() && v > 0.0 => v,
                    _ => return Err(format!("{m:?} is not a positive per-token target in ms")),
                },
            };
            Ok(crate::policy::ClientClass::LatencyCritical { tpot_target_ns: (ms * 1e6) as u64 })
        }
        _ => Err("expected batch, latency or latency:MS".into()),
    }
}

/// A decimal or `0x` hexadecimal number.
fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

// ---- layers: defaults, the optional TOML file, the environment --------------------------------

/// Where a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The key's default.
    Default,
    /// The configuration file.
    File,
    /// A `VITAMIN_*` environment variable.
    Env,
}

/// Which part of the file a key lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    /// What users set (top level of the file).
    User,
    /// Tuning knobs (`[advanced]`), each with the measurement that chose its default.
    Advanced,
}

/// One configuration key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Key {
    /// The key in the file (`[advanced]` keys without the section prefix).
    pub name: &'static str,
    /// Its section.
    pub section: Section,
    /// The `VITAMIN_*` variable that overrides it, when the environment may (`None`: file only).
    pub env: Option<&'static str>,
    /// The default, as written in the table.
    pub default: &'static str,
}

impl Key {
    /// The variable name the parsers ask for (`VITAMIN_` + the key in capitals), whether or not
    /// the environment may set it.
    pub fn var(&self) -> String {
        format!("VITAMIN_{}", self.name.to_ascii_uppercase())
    }
}

const fn user(name: &'static str, env: &'static str, default: &'static str) -> Key {
    Key { name, section: Section::User, env: Some(env), default }
}
const fn user_file(name: &'static str, default: &'static str) -> Key {
    Key { name, section: Section::User, env: None, default }
}
const fn advanced(name: &'static str, default: &'static str) -> Key {
    Key { name, section: Section::Advanced, env: None, default }
}
const fn advanced_env(name: &'static str, env: &'static str, default: &'static str) -> Key {
    Key { name, section: Section::Advanced, env: Some(env), default }
}

/// Every key of the configuration (the table in docs/config.md lists the same, with the
/// measurement behind each default; a test keeps the two in step). Knobs whose measured effect
/// was nil or worse are file-only (`[advanced]`), so a measurement can still turn them; only the
/// keys users need, and the ones device scripts and the fake-driver tests set per process, keep
/// an environment variable. Backend settings (the device ordinal, a backend's stream bound and
/// leaf layout) are keys like the others, named for what they set; each backend reads the ones
/// that apply to it and documents which.
pub const KEYS: &[Key] = &[
    user("mode", "VITAMIN_MODE", "bind"),
    user("policy", "VITAMIN_POLICY", "throughput"),
    user("seed", "VITAMIN_SEED", "0x5eed"),
    user("lane_continuation", "VITAMIN_LANE_CONTINUATION", "1"),
    user("census", "VITAMIN_CENSUS", ""),
    user("census_pid", "VITAMIN_CENSUS_PID", ""),
    user("log", "VITAMIN_LOG", "off"),
    user("trace", "VITAMIN_TRACE", ""),
    user("daemon", "VITAMIN_DAEMON", ""),
    user("class", "VITAMIN_CLASS", "batch"),
    user_file("device", "0"),
    user_file("profiles", ""),
    user_file("profile_out", ""),
    advanced_env("profile_dispatch", "VITAMIN_PROFILE_DISPATCH", "0"),
    advanced("fence", "hybrid"),
    advanced("waiter_fence", "cover"),
    advanced_env("root_context", "VITAMIN_ROOT_CONTEXT", "primary"),
    advanced("continuation_depth", "256"),
    advanced("continuation_us", "none"),
    advanced("poll_interval_us", "50"),
    advanced("submit_thread", "1"),
    advanced("submit_burst_us", "10"),
    advanced("submit_spin_us", "200"),
    advanced("busy_query_us", "20"),
    advanced("eager", "1"),
    advanced("launch_first", "1"),
    advanced("eager_continue_ops", "8"),
    advanced("lf_lock_wait_us", "20"),
    advanced("wake_grace_us", "20"),
    advanced("wait_assist", "1"),
    advanced("fast_wait", "1"),
    advanced("tight_poll", "1"),
    advanced("spin_yield", "1"),
    advanced("idle_spin_us", "100"),
    advanced("sync_spin_us", "auto"),
    advanced("sync_yield", "auto"),
    advanced("dispatch_cpu", "none"),
    advanced("inline", "0"),
    advanced("native_wait", "0"),
    advanced("eager_continue", "0"),
    advanced("defer_to_waiters", "0"),
    advanced("dispatch_nap", "off"),
    advanced_env("unbound_timeout_ms", "VITAMIN_UNBOUND_TIMEOUT_MS", "10000"),
    advanced_env("max_outstanding_ops", "VITAMIN_MAX_OUTSTANDING_OPS", "1024"),
    advanced("max_staged_bytes", "67108864"),
    advanced("start_timeout_ms", "30000"),
    advanced("fault_dispatch", "none"),
    advanced("max_lanes", "8"),
    advanced("max_streams", "512"),
    advanced("leaf_units", "auto"),
    advanced("domains", "auto"),
    advanced("paired_units", "auto"),
    advanced("rtc_library", "auto"),
    advanced("partitions", "auto"),
    advanced("pool", "hierarchical"),
    advanced("lane_streams", "on-demand"),
    advanced("remainders", "on-demand"),
    advanced("guard_hold_ms", "50"),
];

/// The `[daemon]` section of the configuration file: the daemon's options (`vitamin daemon`
/// flags and their environment variables override them). Unknown keys are an error, so that a
/// misspelt option never silently falls back to its default.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonSection {
    /// Control socket.
    pub socket: Option<PathBuf>,
    /// Policy over all clients.
    pub policy: Option<String>,
    /// Chaos seed.
    pub seed: Option<u64>,
    /// Uids allowed besides the daemon's own and root.
    #[serde(default)]
    pub allow_uid: Vec<u32>,
    /// Gids whose members are allowed.
    #[serde(default)]
    pub allow_gid: Vec<u32>,
    /// Device 0's topology (`from-client`, `probe`, `sim-NAME` for a simulated device preset).
    pub topology: Option<String>,
    /// Prometheus endpoint (loopback `ADDR:PORT`).
    pub metrics: Option<String>,
    /// MPS handling (`check`, `start`, `off`).
    pub mps: Option<String>,
    /// Most clients at once.
    pub max_clients: Option<usize>,
    /// Background mode's log file.
    pub log_file: Option<PathBuf>,
    /// Background mode's pid file.
    pub pid_file: Option<PathBuf>,
    /// Binding timeline written when the daemon stops (Chrome trace JSON, for Perfetto).
    pub timeline: Option<PathBuf>,
    /// Most spans the timeline keeps per device.
    pub timeline_spans: Option<usize>,
    /// A profile file the policy sizes launches by (`vitamin.profile` JSON).
    pub profiles: Option<PathBuf>,
}

/// The `[daemon]` section of a configuration file's text (absent: all defaults).
pub fn daemon_section(text: &str) -> Result<DaemonSection, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("not valid TOML: {e}"))?;
    match table.get("daemon") {
        None => Ok(DaemonSection::default()),
        Some(v) => v.clone().try_into().map_err(|e| format!("[daemon]: {e}")),
    }
}

/// The variable naming the configuration file (`none` or empty: no file).
pub const CONFIG_ENV: &str = "VITAMIN_CONFIG";

/// The configuration layers of one process: the file (if any) and the environment, resolved
/// per key. Parsed once ([`process`]).
#[derive(Debug, Clone, Default)]
pub struct Layers {
    /// The file read, if any.
    pub file: Option<std::path::PathBuf>,
    /// Values per key name from the file (scalars as text: booleans `1`/`0`).
    file_values: std::collections::BTreeMap<String, String>,
    /// Values per variable from the environment (only keys that take one).
    env_values: std::collections::BTreeMap<String, String>,
    /// What went wrong reading the file (unknown keys, bad syntax): logged at start-up.
    pub problems: Vec<String>,
}

fn scalar(v: &toml::Value) -> Option<String> {
    Some(match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => f.to_string(),
        toml::Value::Boolean(b) => if *b { "1" } else { "0" }.to_string(),
        _ => return None,
    })
}

impl Layers {
    /// The file to read: `VITAMIN_CONFIG`, else `$XDG_CONFIG_HOME/vitamin/config.toml`, else
    /// `~/.config/vitamin/config.toml`, else `/etc/vitamin/config.toml` (the first that exists).
    pub fn find_file(get: &impl Fn(&str) -> Option<String>) -> Option<std::path::PathBuf> {
        use std::path::PathBuf;
        if let Some(p) = get(CONFIG_ENV) {
            let p = p.trim();
            return (!p.is_empty() && p != "none").then(|| PathBuf::from(p));
        }
        let xdg = get("XDG_CONFIG_HOME").filter(|x| !x.is_empty()).map(PathBuf::from);
        let home = get("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".config"));
        [xdg, home]
            .into_iter()
            .flatten()
            .map(|d| d.join("vitamin").join("config.toml"))
            .chain(std::iter::once(PathBuf::from("/etc/vitamin/config.toml")))
            .find(|p| p.is_file())
    }

    /// The layers from the environment `get` and the file it names (read with `read`).
    pub fn load(
        get: impl Fn(&str) -> Option<String>,
        read: impl Fn(&std::path::Path) -> std::io::Result<String>,
    ) -> Layers {
        let mut layers = Layers::default();
        for k in KEYS {
            if let Some(var) = k.env {
                if let Some(v) = get(var) {
                    layers.env_values.insert(var.to_string(), v);
                }
            }
        }
        let Some(path) = Self::find_file(&get) else { return layers };
        match read(&path) {
            Ok(text) => layers.parse_file(&text),
            Err(e) => layers.problems.push(format!("{}: {e}", path.display())),
        }
        layers.file = Some(path);
        layers
    }

    /// Takes the keys of a TOML document (`[advanced]` for tuning knobs, `[daemon]` left to the
    /// daemon); unknown keys and non-scalar values are reported, never fatal.
    pub fn parse_file(&mut self, text: &str) {
        let table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                self.problems.push(format!("not valid TOML: {e}"));
                return;
            }
        };
        for (name, v) in &table {
            match (name.as_str(), v) {
                ("advanced", toml::Value::Table(t)) => {
                    for (k, v) in t {
                        self.take(Section::Advanced, k, v);
                    }
                }
                ("daemon", toml::Value::Table(_)) => {}
                (k, v) => self.take(Section::User, k, v),
            }
        }
    }

    fn take(&mut self, section: Section, name: &str, v: &toml::Value) {
        let known = KEYS.iter().any(|k| k.name == name && k.section == section);
        match scalar(v) {
            Some(v) if known => {
                self.file_values.insert(name.to_string(), v);
            }
            _ if !known => self.problems.push(format!("unknown key {name:?} ignored")),
            _ => self.problems.push(format!("{name}: expected a string, number or boolean")),
        }
    }

    /// The value of the key asked for as `var` (its environment variable, or its name) and where
    /// it came from: the environment first where it may set the key, then the file; `None`: the
    /// default.
    pub fn value(&self, var: &str) -> Option<(String, Source)> {
        let key = KEYS.iter().find(|k| k.env == Some(var) || k.name == var || k.var() == var)?;
        if let Some(v) = key.env.and_then(|e| self.env_values.get(e)) {
            return Some((v.clone(), Source::Env));
        }
        self.file_values.get(key.name).map(|v| (v.clone(), Source::File))
    }

    /// The lookup the parsers take ([`Config::from_lookup`], the tuning knobs).
    pub fn get(&self, var: &str) -> Option<String> {
        self.value(var).map(|(v, _)| v)
    }

    /// Every key with its effective value (the default's text when unset) and source.
    pub fn effective(&self) -> Vec<(Key, String, Source)> {
        KEYS.iter()
            .map(|k| match self.value(&k.var()) {
                Some((v, s)) => (*k, v, s),
                None => (*k, k.default.to_string(), Source::Default),
            })
            .collect()
    }
}

/// The process's layers, read once from the environment and the file.
pub fn process() -> &'static Layers {
    static LAYERS: std::sync::OnceLock<Layers> = std::sync::OnceLock::new();
    LAYERS.get_or_init(|| Layers::load(|k| std::env::var(k).ok(), |p| std::fs::read_to_string(p)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn the_daemon_section_parses_and_rejects_unknown_keys() {
        let d = daemon_section("policy = \"chaos\"\n[daemon]\nsocket = \"/run/v.sock\"\npolicy = \"static\"\nallow_uid = [1000, 1001]\nmax_clients = 8\n")
            .expect("valid");
        assert_eq!(d.socket.as_deref(), Some(std::path::Path::new("/run/v.sock")));
        assert_eq!(d.policy.as_deref(), Some("static"));
        assert_eq!((d.allow_uid.clone(), d.max_clients), (vec![1000, 1001], Some(8)));
        assert_eq!(daemon_section("seed = 3").unwrap(), DaemonSection::default());
        let e = daemon_section("[daemon]\npolcy = \"chaos\"").unwrap_err();
        assert!(e.contains("polcy"), "{e}");
        assert!(daemon_section("[daemon]\nmax_clients = \"many\"").is_err());
        assert!(daemon_section("[daemon").is_err());
    }

    #[test]
    fn classes_parse_with_their_targets() {
        use crate::policy::ClientClass::*;
        assert_eq!(parse_class("batch"), Ok(BestEffort));
        assert_eq!(parse_class(" "), Ok(BestEffort));
        assert_eq!(parse_class("latency"), Ok(LatencyCritical { tpot_target_ns: 50_000_000 }));
        assert_eq!(parse_class("Latency:12.5"), Ok(LatencyCritical { tpot_target_ns: 12_500_000 }));
        assert!(parse_class("latency:-3").is_err() && parse_class("latency:x").is_err());
        assert!(parse_class("batch:4").is_err() && parse_class("fast").is_err());
        let c = config(&[("VITAMIN_CLASS", "urgent"), ("VITAMIN_DAEMON", " /run/v.sock ")]);
        assert_eq!(c.class, BestEffort);
        assert!(c.mode_note.as_deref().unwrap_or("").contains("VITAMIN_CLASS"), "{:?}", c.mode_note);
        assert_eq!(c.daemon.as_deref(), Some(std::path::Path::new("/run/v.sock")));
        assert_eq!(config(&[("VITAMIN_DAEMON", "")]).daemon, None);
    }

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

#[cfg(test)]
mod layer_tests {
    use super::*;

    #[test]
    fn file_values_reach_the_parsers() {
        let mut l = Layers::default();
        l.parse_file("[advanced]\neager_continue = \"1\"\n");
        assert_eq!(l.get("eager_continue").as_deref(), Some("1"), "{:?}", l.problems);
    }
}
