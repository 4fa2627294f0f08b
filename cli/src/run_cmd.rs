//! `vitamin run [--bind [--policy P] | --observe] [--census FILE] [--lib-dir DIR] -- <command> [args...]`
//!
//! Runs an unmodified CUDA or HIP application under the interposer so users never type
//! `LD_PRELOAD`: picks the interposer by the backend ([`shim_file`]: `libvitamin_hip.so` with
//! `--backend hip`, or with `auto` when the HIP backend is usable; `libvitamin_cuda.so`
//! otherwise), finds it (`--lib-dir`, else `VITAMIN_LIB_DIR`, else next to the `vitamin`
//! binary, else `../lib` from it), prepends it to `LD_PRELOAD` (dropping any other copy of that
//! shim), sets `VITAMIN_MODE`, `VITAMIN_CENSUS` (absolute) and `VITAMIN_CENSUS_PID`, and then
//! **replaces itself** with the command (`exec`): the command keeps vitamin's process id, gets
//! signals directly, and its exit status is the exit status of `vitamin run`.
//!
//! Bind mode is the default (`--bind` says so explicitly): every modelled launch is late-bound to the
//! Green Context pool under `--policy` (default: the shim's, `throughput`); `--observe` forwards every
//! call unchanged and only counts. `VITAMIN_MODE` is always set explicitly, so a value inherited
//! from the environment never overrides the flags.
//!
//! The census (see `shim-cuda`'s docs) is written by the main process to FILE at exit; other
//! processes of the application that use CUDA write `FILE.<pid>`; `%p` in FILE is replaced by
//! the process id. A stale FILE from an earlier run is removed before the command starts.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::backends::BackendChoice;

/// File name of the CUDA interposer.
pub const SHIM_FILE: &str = "libvitamin_cuda.so";
/// File name of the HIP interposer.
pub const HIP_SHIM_FILE: &str = "libvitamin_hip.so";

/// The interposer for `choice`: the HIP one when the HIP backend is chosen, or (`auto`) when
/// `hip_usable` says it is usable (probed only then); the CUDA one otherwise.
pub fn shim_file(choice: BackendChoice, hip_usable: impl FnOnce() -> bool) -> &'static str {
    match choice {
        BackendChoice::Hip => HIP_SHIM_FILE,
        BackendChoice::Auto if hip_usable() => HIP_SHIM_FILE,
        _ => SHIM_FILE,
    }
}

/// Arguments of `vitamin run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Observe mode: forward every CUDA call unchanged and only count calls and kernel launches (no
    /// late binding).
    #[arg(long, conflicts_with = "bind")]
    pub observe: bool,
    /// Bind mode (the default): late-bind every modelled launch, unchanged, to the Green Context
    /// pool; docs/shim.md lists what is modelled and what still runs natively.
    #[arg(long)]
    pub bind: bool,
    /// Policy in bind mode: throughput (the shim's default), tpot, static, exclusive or chaos.
    #[arg(long, conflicts_with = "observe", value_name = "POLICY")]
    pub policy: Option<String>,
    /// Write the census JSON (calls per API, launches per kernel) here at exit; `%p` = pid.
    #[arg(long, value_name = "FILE")]
    pub census: Option<PathBuf>,
    /// The coordination daemon's socket (default: the daemon's default path). Bind mode uses a
    /// daemon that answers there, else decides in-process; named explicitly, a daemon that does
    /// not answer is an error.
    #[arg(long, env = "VITAMIN_DAEMON", value_name = "SOCKET", conflicts_with = "observe")]
    pub daemon: Option<PathBuf>,
    /// Decide in-process even if a daemon runs.
    #[arg(long, conflicts_with = "daemon")]
    pub no_daemon: bool,
    /// The class the daemon schedules this process as: batch (best effort, the default) or
    /// latency (TPOT-First reserves for it).
    #[arg(long, value_name = "CLASS", value_parser = ["batch", "latency"])]
    pub class: Option<String>,
    /// Per-token (per-step) target of a latency-class process, ms.
    #[arg(long, value_name = "MS")]
    pub tpot_ms: Option<f64>,
    /// Directory holding libvitamin_cuda.so / libvitamin_hip.so (default: next to the vitamin binary).
    #[arg(long, env = "VITAMIN_LIB_DIR", value_name = "DIR")]
    pub lib_dir: Option<PathBuf>,
    /// The command to run and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// What `vitamin run` will execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Program.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment variables to set (everything else is inherited).
    pub env: Vec<(String, OsString)>,
}

/// `LD_PRELOAD` with `lib` first, keeping every other entry in order and dropping other copies
/// of the same shim (glibc accepts ':' and whitespace as separators).
pub fn prepend_preload(existing: Option<&OsStr>, lib: &Path) -> OsString {
    let shim = lib.file_name().unwrap_or(OsStr::new(SHIM_FILE));
    let mut out = OsString::from(lib.as_os_str());
    let existing = existing.map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    for entry in existing.split(|c: char| c == ':' || c.is_whitespace()).filter(|e| !e.is_empty()) {
        if Path::new(entry).file_name() == Some(shim) {
            continue;
        }
        out.push(":");
        out.push(entry);
    }
    out
}

/// The execution plan: pure, so it is testable without starting anything.
///
/// `daemon`: the socket of a daemon that answered (bind mode then uses it); `None`: in-process.
pub fn plan(
    args: &RunArgs,
    lib: &Path,
    existing_preload: Option<&OsStr>,
    cwd: &Path,
    pid: u32,
    daemon: Option<&Path>,
) -> Result<Plan> {
    if args.observe && (args.bind || args.policy.is_some()) {
        bail!("--observe forwards every call unchanged: it takes neither --bind nor --policy");
    }
    let (program, rest) = args.command.split_first().context("no command given: vitamin run -- <command>")?;
    let mode = mode_of(args);
    let mut env = vec![
        ("LD_PRELOAD".to_string(), prepend_preload(existing_preload, lib)),
        ("VITAMIN_MODE".to_string(), OsString::from(mode)),
        ("VITAMIN_CENSUS_PID".to_string(), OsString::from(pid.to_string())),
    ];
    if let Some(p) = &args.policy {
        let kind: vitamin_runtime::policy::PolicyKind = p.parse().map_err(|e: String| anyhow::anyhow!(e))?;
        env.push(("VITAMIN_POLICY".to_string(), OsString::from(kind.name())));
    }
    if let Some(census) = &args.census {
        env.push(("VITAMIN_CENSUS".to_string(), cwd.join(census).into_os_string()));
    }
    // Always set, so that an inherited value never overrides the choice made here.
    env.push(("VITAMIN_DAEMON".to_string(), daemon.map(|d| cwd.join(d).into_os_string()).unwrap_or_default()));
    if args.tpot_ms.is_some() && args.class.as_deref() != Some("latency") {
        bail!("--tpot-ms is the target of a latency-class process: add --class latency");
    }
    match (&args.class, args.tpot_ms) {
        (_, Some(ms)) if !(ms.is_finite() && ms > 0.0) => bail!("--tpot-ms must be a positive number of milliseconds"),
        (Some(c), Some(ms)) => env.push(("VITAMIN_CLASS".to_string(), OsString::from(format!("{c}:{ms}")))),
        (Some(c), None) => env.push(("VITAMIN_CLASS".to_string(), OsString::from(c))),
        (None, _) => {}
    }
    Ok(Plan { program: program.clone(), args: rest.to_vec(), env })
}

/// The mode `vitamin run` sets: bind unless `--observe`.
pub fn mode_of(args: &RunArgs) -> &'static str {
    if args.observe {
        "observe"
    } else {
        "bind"
    }
}

/// Where to look for the shim, in order.
pub fn search_dirs(lib_dir: Option<&Path>, exe: Option<&Path>) -> Vec<PathBuf> {
    if let Some(d) = lib_dir {
        return vec![d.to_path_buf()];
    }
    let mut dirs = Vec::new();
    if let Some(bin) = exe.and_then(Path::parent) {
        dirs.push(bin.to_path_buf());
        if let Some(prefix) = bin.parent() {
            dirs.push(prefix.join("lib"));
        }
    }
    dirs
}

/// The absolute path of shim `file`.
pub fn find_shim(dirs: &[PathBuf], file: &str) -> Result<PathBuf> {
    for d in dirs {
        let p = d.join(file);
        if p.is_file() {
            return std::path::absolute(&p).with_context(|| format!("cannot make {} absolute", p.display()));
        }
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    bail!(
        "{file} not found (looked in: {}); build it with `cargo build --release -p {}` \
         and keep it next to the vitamin binary, or point --lib-dir / VITAMIN_LIB_DIR at its directory",
        if searched.is_empty() { "nowhere: no vitamin binary path".to_string() } else { searched.join(", ") },
        if file == HIP_SHIM_FILE { "vitamin-shim-hip" } else { "vitamin-shim-cuda" }
    )
}

/// Whether bind mode runs under a daemon: one named with `--daemon` (or `VITAMIN_DAEMON`) must
/// answer; otherwise the default socket is tried. Says which, once, on stderr.
fn choose_daemon(args: &RunArgs) -> Result<Option<PathBuf>> {
    if args.observe {
        return Ok(None);
    }
    if args.no_daemon {
        eprintln!("vitamin run: in-process (--no-daemon): this process decides its bindings alone");
        return Ok(None);
    }
    // --daemon (or VITAMIN_DAEMON), else the file's `daemon` key, else its [daemon] socket, else
    // the daemon's default path.
    let (socket, explicit) = match &args.daemon {
        Some(s) if !s.as_os_str().is_empty() => (s.clone(), true),
        _ => {
            let file_key = vitamin_runtime::config::process().get("VITAMIN_DAEMON").filter(|s| !s.trim().is_empty());
            let section = crate::daemon_cmd::file_section()?.1.socket;
            match (file_key, section) {
                (Some(k), _) => (PathBuf::from(k.trim()), true),
                (None, Some(s)) => (s, false),
                (None, None) => (vitamin_runtime::daemon::transport::default_socket_path(), false),
            }
        }
    };
    match vitamin_runtime::daemon::client::status(&socket, std::time::Duration::from_millis(500)) {
        Ok(st) => {
            eprintln!(
                "vitamin run: sharing the GPU through the vitamin daemon at {} (policy {}, {} other clients)",
                socket.display(),
                st.policy,
                st.clients.len()
            );
            Ok(Some(socket))
        }
        Err(e) if explicit => bail!("--daemon {}: {e}", socket.display()),
        Err(_) => {
            eprintln!(
                "vitamin run: in-process (no vitamin daemon at {}): this process decides its bindings alone",
                socket.display()
            );
            Ok(None)
        }
    }
}

/// Runs `vitamin run` with the interposer of backend `choice`: never returns on success (the
/// process becomes the command).
pub fn run(args: RunArgs, choice: BackendChoice) -> Result<()> {
    let exe = std::env::current_exe().ok();
    let file = shim_file(choice, || vitamin_hal_hip::HipBackend::new().is_ok());
    let lib = find_shim(&search_dirs(args.lib_dir.as_deref(), exe.as_deref()), file)?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let daemon = choose_daemon(&args)?;
    let plan =
        plan(&args, &lib, std::env::var_os("LD_PRELOAD").as_deref(), &cwd, std::process::id(), daemon.as_deref())?;
    if let Some((_, census)) = plan.env.iter().find(|(k, _)| k == "VITAMIN_CENSUS") {
        if !census.to_string_lossy().contains("%p") {
            match std::fs::remove_file(census) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => bail!("cannot remove the stale census {}: {e}", Path::new(census).display()),
            }
        }
    }
    tracing::info!(shim = %lib.display(), program = ?plan.program, mode = mode_of(&args), "vitamin run");
    exec(plan)
}

#[cfg(unix)]
fn exec(plan: Plan) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&plan.program);
    cmd.args(&plan.args).envs(plan.env.iter().map(|(k, v)| (k, v)));
    let err = cmd.exec();
    let code = match err.kind() {
        std::io::ErrorKind::NotFound => 127,
        std::io::ErrorKind::PermissionDenied => 126,
        _ => 1,
    };
    eprintln!("vitamin run: cannot execute {:?}: {err}", plan.program);
    std::process::exit(code);
}

#[cfg(not(unix))]
fn exec(_plan: Plan) -> Result<()> {
    bail!("vitamin run needs LD_PRELOAD, which exists on Linux only")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(observe: bool, census: Option<&str>, command: &[&str]) -> RunArgs {
        RunArgs {
            observe,
            bind: false,
            policy: None,
            census: census.map(PathBuf::from),
            daemon: None,
            no_daemon: false,
            class: None,
            tpot_ms: None,
            lib_dir: None,
            command: command.iter().map(OsString::from).collect(),
        }
    }

    #[test]
    fn preload_is_prepended_and_deduplicated() {
        let lib = Path::new("/opt/v/libvitamin_cuda.so");
        assert_eq!(prepend_preload(None, lib), "/opt/v/libvitamin_cuda.so");
        assert_eq!(prepend_preload(Some(OsStr::new("")), lib), "/opt/v/libvitamin_cuda.so");
        assert_eq!(
            prepend_preload(Some(OsStr::new("/a/liba.so /old/libvitamin_cuda.so:/b/libb.so")), lib),
            "/opt/v/libvitamin_cuda.so:/a/liba.so:/b/libb.so"
        );
    }

    #[test]
    fn observe_plan_sets_the_environment() {
        let p = plan(
            &args(true, Some("out/census.json"), &["python3", "-c", "print(1)"]),
            Path::new("/lib/libvitamin_cuda.so"),
            Some(OsStr::new("/x/libx.so")),
            Path::new("/work"),
            4242,
            None,
        )
        .unwrap();
        assert_eq!(p.program, "python3");
        assert_eq!(p.args, vec![OsString::from("-c"), OsString::from("print(1)")]);
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("LD_PRELOAD").unwrap(), "/lib/libvitamin_cuda.so:/x/libx.so");
        assert_eq!(get("VITAMIN_MODE").unwrap(), "observe");
        assert_eq!(get("VITAMIN_CENSUS").unwrap(), "/work/out/census.json");
        assert_eq!(get("VITAMIN_CENSUS_PID").unwrap(), "4242");
        let no_census =
            plan(&args(true, None, &["true"]), Path::new("/l/libvitamin_cuda.so"), None, Path::new("/"), 1, None);
        assert!(no_census.unwrap().env.iter().all(|(k, _)| k != "VITAMIN_CENSUS"));
    }

    #[test]
    fn bind_mode_sets_mode_and_policy() {
        let mut a = args(false, None, &["true"]);
        a.bind = true;
        a.policy = Some("Chaos".into());
        let p = plan(&a, Path::new("/l/libvitamin_cuda.so"), None, Path::new("/"), 1, None).expect("plan");
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("VITAMIN_MODE").unwrap(), "bind");
        assert_eq!(get("VITAMIN_POLICY").unwrap(), "chaos");
        a.policy = Some("fastest".into());
        assert!(plan(&a, Path::new("/l/libvitamin_cuda.so"), None, Path::new("/"), 1, None).is_err(), "unknown policy");
    }

    #[test]
    fn daemon_and_class_reach_the_environment() {
        let lib = Path::new("/l/libvitamin_cuda.so");
        let get = |p: &Plan, k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let p = plan(&args(false, None, &["true"]), lib, None, Path::new("/w"), 1, None).expect("plan");
        assert_eq!(get(&p, "VITAMIN_DAEMON").unwrap(), "", "in-process overrides an inherited socket");
        let mut a = args(false, None, &["true"]);
        a.class = Some("latency".into());
        a.tpot_ms = Some(25.0);
        let p = plan(&a, lib, None, Path::new("/w"), 1, Some(Path::new("d.sock"))).expect("plan");
        assert_eq!(get(&p, "VITAMIN_DAEMON").unwrap(), "/w/d.sock");
        assert_eq!(get(&p, "VITAMIN_CLASS").unwrap(), "latency:25");
        a.class = None;
        let err = plan(&a, lib, None, Path::new("/w"), 1, None).unwrap_err().to_string();
        assert!(err.contains("--class latency"), "{err}");
        a.class = Some("latency".into());
        a.tpot_ms = Some(-1.0);
        assert!(plan(&a, lib, None, Path::new("/w"), 1, None).is_err(), "a negative target");
    }

    #[test]
    fn bind_is_the_default_mode() {
        let lib = Path::new("/l/libvitamin_cuda.so");
        let p = plan(&args(false, None, &["true"]), lib, None, Path::new("/"), 1, None).expect("plan");
        let get = |k: &str| p.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("VITAMIN_MODE").unwrap(), "bind");
        assert_eq!(get("VITAMIN_POLICY"), None, "the shim's default policy");
        // A policy without --bind is bind mode with that policy.
        let mut a = args(false, None, &["true"]);
        a.policy = Some("static".into());
        let p = plan(&a, lib, None, Path::new("/"), 1, None).expect("plan");
        assert!(p.env.contains(&("VITAMIN_MODE".to_string(), OsString::from("bind"))));
        assert!(p.env.contains(&("VITAMIN_POLICY".to_string(), OsString::from("static"))));
        // --observe takes no policy.
        a.observe = true;
        let err = plan(&a, lib, None, Path::new("/"), 1, None).unwrap_err().to_string();
        assert!(err.contains("--observe") && err.contains("--policy"), "{err}");
    }

    #[test]
    fn shim_is_found_in_the_search_order() {
        let root = std::env::temp_dir().join(format!("vitamin-run-test-{}", std::process::id()));
        let bin = root.join("bin");
        let lib = root.join("lib");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let exe = bin.join("vitamin");
        let dirs = search_dirs(None, Some(&exe));
        assert_eq!(dirs, vec![bin.clone(), lib.clone()]);
        let err = find_shim(&dirs, SHIM_FILE).unwrap_err().to_string();
        assert!(err.contains("not found") && err.contains("VITAMIN_LIB_DIR"), "{err}");
        std::fs::write(lib.join(SHIM_FILE), b"").unwrap();
        assert_eq!(find_shim(&dirs, SHIM_FILE).unwrap(), lib.join(SHIM_FILE));
        std::fs::write(bin.join(SHIM_FILE), b"").unwrap();
        assert_eq!(find_shim(&dirs, SHIM_FILE).unwrap(), bin.join(SHIM_FILE), "next to the binary wins");
        let err = find_shim(&dirs, HIP_SHIM_FILE).unwrap_err().to_string();
        assert!(err.contains(HIP_SHIM_FILE) && err.contains("-p vitamin-shim-hip"), "{err}");
        std::fs::write(lib.join(HIP_SHIM_FILE), b"").unwrap();
        assert_eq!(find_shim(&dirs, HIP_SHIM_FILE).unwrap(), lib.join(HIP_SHIM_FILE));
        assert_eq!(search_dirs(Some(&lib), Some(&exe)), vec![lib.clone()], "--lib-dir overrides");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_backend_picks_the_interposer() {
        let never = || -> bool { panic!("the HIP backend is probed only for auto") };
        assert_eq!(shim_file(BackendChoice::Hip, never), HIP_SHIM_FILE);
        assert_eq!(shim_file(BackendChoice::Cuda, never), SHIM_FILE);
        assert_eq!(shim_file(BackendChoice::Sim, never), SHIM_FILE);
        assert_eq!(shim_file(BackendChoice::Auto, || true), HIP_SHIM_FILE, "a usable HIP backend");
        assert_eq!(shim_file(BackendChoice::Auto, || false), SHIM_FILE);
        // Each shim replaces only its own earlier copies.
        let hip = Path::new("/new/libvitamin_hip.so");
        let out = prepend_preload(Some(OsStr::new("/old/libvitamin_hip.so:/old/libvitamin_cuda.so")), hip);
        assert_eq!(out, "/new/libvitamin_hip.so:/old/libvitamin_cuda.so");
    }

    /// Exhaustive over a small domain: 0..=4 entries, the old shim at every position or absent,
    /// both separators. The shim comes first exactly once; every other entry survives in order.
    #[test]
    fn preload_keeps_other_entries() {
        let pool = ["/a/liba.so", "/b/libb.so", "/c/libc.so", "/d/libd.so"];
        let lib = Path::new("/new/libvitamin_cuda.so");
        for n in 0..=pool.len() {
            let entries = &pool[..n];
            for shim_at in (0..=n).map(Some).chain([None]) {
                for sep in [":", " ", " : "] {
                    let mut list: Vec<&str> = entries.to_vec();
                    if let Some(i) = shim_at {
                        list.insert(i, "/old/libvitamin_cuda.so");
                    }
                    let out = prepend_preload(Some(OsStr::new(&list.join(sep))), lib).into_string().unwrap();
                    let parts: Vec<&str> = out.split(':').collect();
                    assert_eq!(parts[0], "/new/libvitamin_cuda.so");
                    assert_eq!(parts.iter().filter(|p| p.ends_with(SHIM_FILE)).count(), 1, "{out}");
                    assert_eq!(&parts[1..], entries, "{out}");
                }
            }
        }
    }
}
