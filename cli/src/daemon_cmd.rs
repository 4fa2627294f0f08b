//! `vitamin daemon [run options]` / `vitamin daemon status [--json]` / `vitamin daemon stop`.
//!
//! Runs the coordination daemon (`vitamin_runtime::daemon`) in the foreground with logs
//! (`VITAMIN_LOG`, default `info`), or with `--detach` in the background (a new process group,
//! output to `--log-file`, pid in `--pid-file`). The socket is `--socket`, else `VITAMIN_DAEMON`,
//! else the default (`/run/vitamin/daemon.sock` as root, `$XDG_RUNTIME_DIR/vitamin/daemon.sock`).
//! Stop it with `vitamin daemon stop`, SIGTERM, SIGINT or SIGHUP: each stops it cleanly (clients
//! are told, the socket file is removed, an MPS server it started is stopped).
//!
//! Options come from the flags (and their environment variables), else the `[daemon]` section
//! of the configuration file (docs/config.md, `runtime::config::DaemonSection`), else defaults.
//!
//! ## MPS (NVIDIA)
//! Processes on disjoint green contexts run concurrently only under MPS (docs/daemon.md cites the
//! measurement); without it they time-slice. `--mps check` (default) looks for a control daemon's
//! `control` socket in `CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`) and says plainly what
//! clients will get; `--mps start` starts `nvidia-cuda-mps-control -d` with its own pipe and log
//! directories when none runs, and stops it (`quit`) when the daemon stops; `--mps off` skips the
//! check. Green contexts need `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` unset or 100: a lower value is
//! refused. While it runs, the daemon watches the MPS it found or started (every second: the
//! control socket, and `get_server_status` of every server `get_server_list` names): a server in
//! `FAULT` or a control daemon gone is logged and published to every client (a notice bit in its
//! shared region, which each client logs) and shown by `vitamin daemon status`. This is the only
//! vendor-specific part of the daemon and it lives here, not in runtime.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Topology};
use vitamin_runtime::config::DaemonSection;
use vitamin_runtime::daemon::client;
use vitamin_runtime::daemon::control::StatusReport;
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::daemon::transport::{default_socket_path, AllowList};
use vitamin_runtime::policy::PolicyKind;

use crate::backends::{self, BackendChoice};

/// Arguments of `vitamin daemon`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DaemonArgs {
    #[command(subcommand)]
    action: Option<Action>,
    /// Socket path (default: /run/vitamin/daemon.sock as root, else $XDG_RUNTIME_DIR/vitamin/daemon.sock).
    #[arg(long, global = true, env = "VITAMIN_DAEMON", value_name = "PATH")]
    socket: Option<PathBuf>,
    #[command(flatten)]
    run: RunOpts,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Clients (pid, uid, command, class), leases, units in use per node, ops bound per second.
    Status {
        /// Print JSON (schema vitamin.daemon.status.v1).
        #[arg(long)]
        json: bool,
    },
    /// Ask the running daemon to stop.
    Stop,
}

/// MPS handling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MpsMode {
    /// Detect a running MPS control daemon and say what clients will get.
    Check,
    /// Start one (own pipe and log directories) if none runs; stop it on exit.
    Start,
    /// Do not check.
    Off,
}

#[derive(Debug, clap::Args)]
struct RunOpts {
    /// Policy over all clients: throughput (default), tpot, static, exclusive or chaos.
    #[arg(long, env = "VITAMIN_POLICY")]
    policy: Option<String>,
    /// Seed of the chaos policy (default 0).
    #[arg(long)]
    seed: Option<u64>,
    /// Also allow this uid (repeatable; the daemon's own uid and root are always allowed).
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uid: Vec<u32>,
    /// Allow every member of this gid (repeatable).
    #[arg(long = "allow-gid", value_name = "GID")]
    allow_gid: Vec<u32>,
    /// Device 0's topology: from-client (the first client's report, the default), probe (the
    /// chosen backend), sim-h200 or sim-mi300x.
    #[arg(long)]
    topology: Option<String>,
    /// Serve Prometheus metrics at this loopback address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// MPS: check (default), start or off.
    #[arg(long, value_enum)]
    mps: Option<MpsMode>,
    /// Most clients at once (default 64).
    #[arg(long)]
    max_clients: Option<usize>,
    /// Run in the background.
    #[arg(long)]
    detach: bool,
    /// With --detach: write the daemon's pid here.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// With --detach: log here (default: daemon.log next to the socket).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Record the binding timeline (every client's ops, node by node and lane by lane) and write
    /// it here when the daemon stops: Chrome trace JSON, loadable in Perfetto.
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// Most spans the timeline keeps per device (default 1000000, about 100 bytes each); later
    /// ones are counted, not kept.
    #[arg(long, value_name = "N")]
    timeline_spans: Option<usize>,
    /// A profile file (`vitamin.profile` JSON, as bind mode's `profile_out` writes it) the policy
    /// sizes launches by; without one, the wave model.
    #[arg(long, value_name = "FILE")]
    profiles: Option<PathBuf>,
}

/// Whether `vitamin daemon` runs the daemon (then logs default to `info`).
pub fn runs_daemon(a: &DaemonArgs) -> bool {
    a.action.is_none()
}

/// The daemon's options after flags, environment, the `[daemon]` section and defaults.
#[derive(Debug, Clone, PartialEq)]
struct Resolved {
    socket: PathBuf,
    policy: PolicyKind,
    seed: u64,
    allow_uid: Vec<u32>,
    allow_gid: Vec<u32>,
    topology: String,
    metrics: Option<SocketAddr>,
    mps: MpsMode,
    max_clients: usize,
    log_file: Option<PathBuf>,
    pid_file: Option<PathBuf>,
    timeline: Option<PathBuf>,
    timeline_spans: usize,
    profiles: Option<PathBuf>,
}

/// Default of `--timeline-spans`.
const TIMELINE_SPANS: usize = 1_000_000;

/// The `[daemon]` section of the configuration file in use (none: defaults). A malformed
/// section is an error that names the file.
pub(crate) fn file_section() -> Result<(Option<PathBuf>, DaemonSection)> {
    let env = |k: &str| std::env::var(k).ok();
    let Some(path) = vitamin_runtime::config::Layers::find_file(&env) else {
        return Ok((None, DaemonSection::default()));
    };
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let sec = vitamin_runtime::config::daemon_section(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((Some(path), sec))
}

fn resolve(socket: Option<&Path>, o: &RunOpts, file: &DaemonSection) -> Result<Resolved> {
    let policy = o.policy.clone().or_else(|| file.policy.clone()).unwrap_or_else(|| "throughput".into());
    let mps = match (o.mps, file.mps.as_deref()) {
        (Some(m), _) => m,
        (None, Some(m)) => <MpsMode as clap::ValueEnum>::from_str(m, true)
            .map_err(|_| anyhow::anyhow!("[daemon] mps = {m:?}: expected check, start or off"))?,
        (None, None) => MpsMode::Check,
    };
    let metrics = match (o.metrics, file.metrics.as_deref()) {
        (Some(m), _) => Some(m),
        (None, Some(m)) => Some(m.parse().map_err(|e| anyhow::anyhow!("[daemon] metrics = {m:?}: {e}"))?),
        (None, None) => None,
    };
    let mut allow_uid = file.allow_uid.clone();
    allow_uid.extend(&o.allow_uid);
    let mut allow_gid = file.allow_gid.clone();
    allow_gid.extend(&o.allow_gid);
    Ok(Resolved {
        socket: socket.map(Path::to_path_buf).or_else(|| file.socket.clone()).unwrap_or_else(default_socket_path),
        policy: policy.parse().map_err(anyhow::Error::msg)?,
        seed: o.seed.or(file.seed).unwrap_or(0),
        allow_uid,
        allow_gid,
        topology: o.topology.clone().or_else(|| file.topology.clone()).unwrap_or_else(|| "from-client".into()),
        metrics,
        mps,
        max_clients: o.max_clients.or(file.max_clients).unwrap_or(64),
        log_file: o.log_file.clone().or_else(|| file.log_file.clone()),
        pid_file: o.pid_file.clone().or_else(|| file.pid_file.clone()),
        timeline: o.timeline.clone().or_else(|| file.timeline.clone()),
        timeline_spans: o.timeline_spans.or(file.timeline_spans).unwrap_or(TIMELINE_SPANS),
        profiles: o.profiles.clone().or_else(|| file.profiles.clone()),
    })
}

/// Entry point.
pub fn run(args: DaemonArgs, choice: BackendChoice) -> Result<()> {
    let (_, file) = file_section()?;
    let r = resolve(args.socket.as_deref(), &args.run, &file)?;
    let socket = r.socket.clone();
    match args.action {
        Some(Action::Status { json }) => status(&socket, json),
        Some(Action::Stop) => {
            client::stop(&socket, Duration::from_secs(5))?;
            println!("vitamin daemon at {} is stopping", socket.display());
            Ok(())
        }
        None if args.run.detach => detach(&socket, &r),
        None => foreground(&r, choice),
    }
}

fn status(socket: &Path, json: bool) -> Result<()> {
    let st = client::status(socket, Duration::from_secs(5))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        print!("{}", render_status(&st));
    }
    Ok(())
}

/// The shortest wait of a client's oldest ready op that the status text shows, ms.
const WAITING_SHOWN_MS: f64 = 10.0;

/// The text form of `vitamin daemon status`.
pub fn render_status(st: &StatusReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "vitamin daemon pid {}, policy {}, up {:.1} s, socket {}",
        st.pid, st.policy, st.uptime_s, st.socket
    );
    let _ = writeln!(o, "concurrency: {}", st.concurrency);
    for d in &st.devices {
        let _ = writeln!(
            o,
            "device {}: {}: {} units, {} in use, {} pool nodes",
            d.device, d.name, d.units, d.units_in_use, d.nodes
        );
        for a in &d.active {
            let _ = writeln!(o, "  {a}");
        }
    }
    let _ = writeln!(o, "clients: {}", st.clients.len());
    if !st.clients.is_empty() {
        let _ = writeln!(
            o,
            "  {:>3} {:>7} {:>5} {:<22} {:>5} {:>5} {:>5} {:>8} {:>8} {:>13}  {:<28} command",
            "id", "pid", "uid", "class", "ready", "outst", "units", "bound", "ops/s", "floored/whole", "leases"
        );
    }
    for c in &st.clients {
        let mut leases = if c.leases.is_empty() { "-".to_owned() } else { c.leases.join(", ") };
        if let Some(n) = &c.standing {
            let _ = write!(leases, "; standing {n}");
        }
        if c.floor_units > 0 {
            let _ = write!(leases, "; floor {} units", c.floor_units);
        }
        // A ready op waits microseconds in the normal course; one waiting longer is worth a look
        // (a cluster launch waiting for a node wide and shaped enough, a drain).
        if c.oldest_ready_ms >= WAITING_SHOWN_MS {
            let _ = write!(leases, "; ready op waiting {:.0} ms", c.oldest_ready_ms);
            if c.ready_floor > 0 {
                let _ = write!(leases, " (floor {} units)", c.ready_floor);
            }
        }
        if !c.cluster_refused.is_empty() {
            let _ = write!(leases, "; cluster launches refused on units {}", c.cluster_refused.join(" | "));
        }
        let _ = writeln!(
            o,
            "  {:>3} {:>7} {:>5} {:<22} {:>5} {:>5} {:>5} {:>8} {:>8.0} {:>13}  {:<28} {}{}",
            c.id,
            c.pid,
            c.uid,
            c.class,
            c.ready,
            c.outstanding,
            c.units,
            c.bound,
            c.bound_per_s,
            format!("{}/{}", c.floored, c.whole_device),
            leases,
            c.command,
            if c.departing { " (departing)" } else { "" }
        );
    }
    let k = &st.counters;
    let per_op = if k.bound > 0 { k.cpu_ns as f64 / k.bound as f64 / 1e3 } else { 0.0 };
    let _ = writeln!(
        o,
        "counters: bound {}, completions {}, continued {} (launched first {}, stray {}, continued behind a stray {}), refused records {}, clients disconnected {}, connections refused {}, wake-ups {}, loop cpu {:.1} ms ({per_op:.2} us/op)",
        k.bound,
        k.completions,
        k.continued,
        k.launched,
        k.launched_stray,
        k.continued_stray,
        k.refused_records,
        k.clients_disconnected,
        k.connections_refused,
        k.wakeups_sent,
        k.cpu_ns as f64 / 1e6
    );
    if let Some(ns) = k.last_hangup_to_free_ns {
        let _ = writeln!(o, "last client exit -> leases freed: {:.3} ms", ns as f64 / 1e6);
    }
    o
}

fn detach(socket: &Path, opts: &Resolved) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let dir = socket.parent().unwrap_or(Path::new("/tmp"));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = opts.log_file.clone().unwrap_or_else(|| dir.join("daemon.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("opening the log {}", log.display()))?;
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--detach").collect();
    let mut child = Command::new(std::env::current_exe()?)
        .args(&args)
        .env("VITAMIN_DAEMON", socket)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .context("starting the daemon process")?;
    let pid = child.id();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(10) {
        if let Some(st) = child.try_wait()? {
            bail!("the daemon exited at start ({st}); see {}", log.display());
        }
        if client::status(socket, Duration::from_millis(500)).is_ok() {
            if let Some(p) = &opts.pid_file {
                std::fs::write(p, format!("{pid}\n")).with_context(|| format!("writing {}", p.display()))?;
            }
            println!("vitamin daemon started: pid {pid}, socket {}, log {}", socket.display(), log.display());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the daemon (pid {pid}) did not answer on {} within 10 s; see {}", socket.display(), log.display())
}

fn topology(opt: &str, choice: BackendChoice) -> Result<Option<Topology>> {
    Ok(match opt {
        "from-client" => None,
        "probe" => Some(backends::select(choice, vitamin_hal::sim::SimDevice::default())?.0.topology().clone()),
        o => match o.strip_prefix("sim-").map(SimBackend::preset) {
            Some(Ok(sim)) => Some(sim.topology().clone()),
            _ => {
                let sims: Vec<String> =
                    vitamin_hal::sim::SimPreset::all().iter().map(|p| format!("sim-{}", p.name)).collect();
                bail!("unknown --topology {o:?}: expected from-client, probe or {}", sims.join(", "))
            }
        },
    })
}

fn foreground(opts: &Resolved, choice: BackendChoice) -> Result<()> {
    let socket = &opts.socket;
    let policy = opts.policy;
    let mps = Mps::setup(opts.mps)?;
    let mut cfg = DaemonConfig::new(socket.to_owned());
    cfg.decide.policy = policy;
    cfg.decide.seed = opts.seed;
    cfg.decide.max_clients = opts.max_clients;
    cfg.decide.topology = topology(&opts.topology, choice)?;
    cfg.decide.concurrency = mps.running;
    let mut allow = AllowList::default();
    allow.uids.extend(&opts.allow_uid);
    allow.gids.extend(&opts.allow_gid);
    cfg.allow = allow;
    cfg.metrics = opts.metrics;
    cfg.concurrency_note = mps.note.clone();
    if let Some(t) = &opts.timeline {
        cfg.timeline = Some(std::path::absolute(t).with_context(|| format!("--timeline {}", t.display()))?);
        cfg.decide.timeline_spans = opts.timeline_spans;
    }
    if let Some(path) = &opts.profiles {
        let p = vitamin_runtime::profile::Profiles::load(path).map_err(|e| anyhow::anyhow!("--profiles: {e}"))?;
        tracing::info!(file = %path.display(), configurations = p.len(), device = %p.device, "profiles loaded");
        cfg.decide.profiles = Some(p);
    }
    // A signal only sets a flag (signal-hook); the loop below turns it into a clean stop.
    let term = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(sig, term.clone())
            .with_context(|| format!("installing the handler of signal {sig}"))?;
    }
    let d = Daemon::start(cfg)?;
    tracing::info!(socket = %socket.display(), policy = %policy, "vitamin daemon running; stop it with `vitamin daemon stop`");
    if let Some(m) = opts.metrics {
        tracing::info!("metrics at http://{m}/metrics");
    }
    let mut watch = MpsWatch::new(&mps);
    while !d.stop_requested() && !term.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(w) = watch.as_mut() {
            if let Some((note, bits)) = w.check() {
                d.set_concurrency(note, bits);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if term.load(std::sync::atomic::Ordering::Relaxed) {
        tracing::info!("signal received: stopping");
    }
    d.shutdown();
    drop(mps);
    tracing::info!("vitamin daemon stopped");
    Ok(())
}

/// Watches the MPS the daemon found or started: every second, the control socket and the status
/// of every server. Reports a change of state once.
struct MpsWatch {
    bin: Option<PathBuf>,
    pipe: PathBuf,
    log: Option<PathBuf>,
    last: Instant,
    state: u64,
    base_note: String,
}

impl MpsWatch {
    fn new(mps: &Mps) -> Option<MpsWatch> {
        if mps.running != Some(true) {
            return None;
        }
        let (bin, pipe, log) = match &mps.started {
            Some((b, p, l)) => (Some(b.clone()), p.clone(), Some(l.clone())),
            None => (find_in_path(MPS_CONTROL), Mps::pipe_dir(), None),
        };
        Some(MpsWatch { bin, pipe, log, last: Instant::now(), state: 0, base_note: mps.note.clone() })
    }

    /// `Some((status sentence, notice bits))` when the state changed.
    fn check(&mut self) -> Option<(String, u64)> {
        if self.last.elapsed() < Duration::from_secs(1) {
            return None;
        }
        self.last = Instant::now();
        let state = if !self.pipe.join("control").exists() {
            vitamin_runtime::daemon::NOTICE_CONCURRENCY_GONE
        } else if self.faulted() {
            vitamin_runtime::daemon::NOTICE_CONCURRENCY_FAULT
        } else {
            0
        };
        if state == self.state {
            return None;
        }
        self.state = state;
        let note = match state {
            0 => self.base_note.clone(),
            s if s == vitamin_runtime::daemon::NOTICE_CONCURRENCY_GONE => {
                format!("MPS control daemon gone ({} has no control socket): clients' kernels time-slice", self.pipe.display())
            }
            _ => "MPS server FAULT: work of every client it served may have failed; it refuses new clients until they exit"
                .to_owned(),
        };
        match state {
            0 => tracing::info!("{note}"),
            _ => tracing::error!("{note}"),
        }
        Some((note, state))
    }

    /// Whether a server `get_server_list` names reports `FAULT` (`get_server_status PID`).
    fn faulted(&self) -> bool {
        let Some(bin) = &self.bin else { return false };
        let ask = |cmd: &str| -> Option<String> {
            let mut c = Command::new(bin);
            c.env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            if let Some(l) = &self.log {
                c.env("CUDA_MPS_LOG_DIRECTORY", l);
            }
            let mut child = c.spawn().ok()?;
            {
                use std::io::Write;
                let mut i = child.stdin.take()?;
                let _ = writeln!(i, "{cmd}");
            }
            let t = Instant::now();
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if t.elapsed() < Duration::from_secs(2) => std::thread::sleep(Duration::from_millis(10)),
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return None;
                    }
                }
            }
            let mut out = String::new();
            std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
            Some(out)
        };
        let Some(list) = ask("get_server_list") else { return false };
        list.split_whitespace().filter(|w| w.parse::<u32>().is_ok()).any(|pid| {
            ask(&format!("get_server_status {pid}")).is_some_and(|s| s.to_ascii_uppercase().contains("FAULT"))
        })
    }
}

/// The MPS check/start, and the server to stop at exit.
struct Mps {
    running: Option<bool>,
    note: String,
    started: Option<(PathBuf, PathBuf, PathBuf)>,
}

const MPS_CONTROL: &str = "nvidia-cuda-mps-control";

fn find_in_path(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(bin)).find(|p| p.is_file())
}

impl Mps {
    fn pipe_dir() -> PathBuf {
        std::env::var_os("CUDA_MPS_PIPE_DIRECTORY").map_or_else(|| PathBuf::from("/tmp/nvidia-mps"), PathBuf::from)
    }

    fn setup(mode: MpsMode) -> Result<Mps> {
        if mode == MpsMode::Off {
            return Ok(Mps { running: None, note: "not checked (--mps off)".into(), started: None });
        }
        if let Ok(p) = std::env::var("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") {
            let v: f64 = p.trim().parse().unwrap_or(0.0);
            if v < 100.0 {
                bail!(
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={p}: green contexts need it unset or 100 under MPS; unset it and start again"
                );
            }
        }
        let dir = Self::pipe_dir();
        if dir.join("control").exists() {
            let note =
                format!("MPS control daemon found ({}): clients on disjoint nodes run concurrently", dir.display());
            tracing::info!("{note}");
            return Ok(Mps { running: Some(true), note, started: None });
        }
        if mode == MpsMode::Check {
            let note = format!(
                "no MPS control daemon at {}: clients' kernels will time-slice, not run side by side (start one with --mps start)",
                dir.display()
            );
            tracing::warn!("{note}");
            return Ok(Mps { running: Some(false), note, started: None });
        }
        let Some(bin) = find_in_path(MPS_CONTROL) else {
            bail!("--mps start: {MPS_CONTROL} is not on PATH (is the NVIDIA driver installed?)");
        };
        let base = std::env::temp_dir().join(format!("vitamin-mps-{}", std::process::id()));
        let (pipe, log) = (base.join("pipe"), base.join("log"));
        std::fs::create_dir_all(&pipe)?;
        std::fs::create_dir_all(&log)?;
        let st = Command::new(&bin)
            .arg("-d")
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &log)
            .status()
            .with_context(|| format!("running {} -d", bin.display()))?;
        if !st.success() {
            bail!("{} -d failed ({st}); see {}", bin.display(), log.display());
        }
        let t = Instant::now();
        while !pipe.join("control").exists() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let note = format!(
            "MPS control daemon started by vitamin: clients must run with CUDA_MPS_PIPE_DIRECTORY={} (log {})",
            pipe.display(),
            log.display()
        );
        tracing::info!("{note}");
        Ok(Mps { running: Some(true), note, started: Some((bin, pipe, log)) })
    }
}

impl Drop for Mps {
    fn drop(&mut self) {
        let Some((bin, pipe, log)) = self.started.take() else { return };
        let child = Command::new(&bin)
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &log)
            .stdin(Stdio::piped())
            .spawn();
        if let Ok(mut c) = child {
            if let Some(mut i) = c.stdin.take() {
                use std::io::Write;
                let _ = i.write_all(b"quit\n");
            }
            let _ = c.wait();
            tracing::info!("MPS control daemon stopped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_low_active_thread_percentage_is_refused() {
        // Only this test touches the variable in this binary.
        std::env::set_var("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50");
        let e = Mps::setup(MpsMode::Check).err().expect("refused").to_string();
        std::env::remove_var("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
        assert!(e.contains("unset it"), "{e}");
        assert!(Mps::setup(MpsMode::Off).unwrap().running.is_none());
    }

    #[test]
    fn status_text_lists_clients_and_leases() {
        let mut st = StatusReport { policy: "throughput".into(), ..Default::default() };
        st.clients.push(vitamin_runtime::daemon::control::ClientStatus {
            id: 1,
            pid: 42,
            class: "batch".into(),
            leases: vec!["#3 (8 units) leased".into()],
            command: "python train.py".into(),
            ..Default::default()
        });
        st.clients.push(vitamin_runtime::daemon::control::ClientStatus {
            id: 2,
            class: "latency (tpot 11.0 ms)".into(),
            standing: Some("#7 (64 units) reserved".into()),
            floor_units: 64,
            ..Default::default()
        });
        let t = render_status(&st);
        assert!(t.contains("#3 (8 units) leased") && t.contains("python train.py") && t.contains("clients: 2"), "{t}");
        assert!(t.contains("-; standing #7 (64 units) reserved; floor 64 units"), "{t}");
        assert_eq!(t.matches("standing").count(), 1, "{t}");
        assert!(!t.contains("waiting"), "{t}");
        st.clients[0].oldest_ready_ms = 2_500.0;
        st.clients[0].ready_floor = 16;
        st.clients[1].oldest_ready_ms = WAITING_SHOWN_MS / 2.0;
        let t = render_status(&st);
        assert!(t.contains("#3 (8 units) leased; ready op waiting 2500 ms (floor 16 units)"), "{t}");
        assert_eq!(t.matches("waiting").count(), 1, "{t}");
        assert!(!t.contains("cluster launches refused"), "{t}");
        st.clients[0].cluster_refused = vec!["120-131".into(), "0-3".into()];
        let t = render_status(&st);
        assert!(t.contains("(floor 16 units); cluster launches refused on units 120-131 | 0-3"), "{t}");
        assert_eq!(t.matches("cluster launches refused").count(), 1, "{t}");
    }
}
