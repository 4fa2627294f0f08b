//! `vitamin daemon [run options]` / `vitamin daemon status [--json]` / `vitamin daemon stop`.
//!
//! Runs the coordination daemon (`vitamin_runtime::daemon`) in the foreground with logs
//! (`VITAMIN_LOG`, default `info`), or with `--detach` in the background (a new process group,
//! output to `--log-file`, pid in `--pid-file`). The socket is `--socket`, else `VITAMIN_DAEMON`,
//! else the default (`/run/vitamin/daemon.sock` as root, `$XDG_RUNTIME_DIR/vitamin/daemon.sock`).
//! Stop it with `vitamin daemon stop` (clean: the socket file is removed and an MPS server it
//! started is stopped); a signal ends it without that cleanup.
//!
//! ## MPS (NVIDIA)
//! Processes on disjoint green contexts run concurrently only under MPS (docs/daemon.md cites the
//! measurement); without it they time-slice. `--mps check` (default) looks for a control daemon's
//! `control` socket in `CUDA_MPS_PIPE_DIRECTORY` (default `/tmp/nvidia-mps`) and says plainly what
//! clients will get; `--mps start` starts `nvidia-cuda-mps-control -d` with its own pipe and log
//! directories when none runs, and stops it (`quit`) when the daemon stops; `--mps off` skips the
//! check. Green contexts need `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` unset or 100: a lower value is
//! refused. This is the only vendor-specific part of the daemon and it lives here, not in runtime.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Topology};
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
    /// Policy over all clients: throughput, tpot, static, exclusive or chaos.
    #[arg(long, default_value = "throughput", env = "VITAMIN_POLICY")]
    policy: String,
    /// Seed of the chaos policy.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also allow this uid (repeatable; the daemon's own uid and root are always allowed).
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uid: Vec<u32>,
    /// Allow every member of this gid (repeatable).
    #[arg(long = "allow-gid", value_name = "GID")]
    allow_gid: Vec<u32>,
    /// Device 0's topology: from-client (the first client's report), probe (the chosen backend),
    /// sim-h200 or sim-mi300x.
    #[arg(long, default_value = "from-client")]
    topology: String,
    /// Serve Prometheus metrics at this loopback address (e.g. 127.0.0.1:9464).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
    /// MPS: check, start or off.
    #[arg(long, value_enum, default_value = "check")]
    mps: MpsMode,
    /// Most clients at once.
    #[arg(long, default_value_t = 64)]
    max_clients: usize,
    /// Run in the background.
    #[arg(long)]
    detach: bool,
    /// With --detach: write the daemon's pid here.
    #[arg(long, value_name = "FILE")]
    pid_file: Option<PathBuf>,
    /// With --detach: log here (default: daemon.log next to the socket).
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
}

/// Whether `vitamin daemon` runs the daemon (then logs default to `info`).
pub fn runs_daemon(a: &DaemonArgs) -> bool {
    a.action.is_none()
}

/// Entry point.
pub fn run(args: DaemonArgs, choice: BackendChoice) -> Result<()> {
    let socket = args.socket.clone().unwrap_or_else(default_socket_path);
    match args.action {
        Some(Action::Status { json }) => status(&socket, json),
        Some(Action::Stop) => {
            client::stop(&socket, Duration::from_secs(5))?;
            println!("vitamin daemon at {} is stopping", socket.display());
            Ok(())
        }
        None if args.run.detach => detach(&socket, &args.run),
        None => foreground(&socket, &args.run, choice),
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
            "  {:>3} {:>7} {:>5} {:<22} {:>5} {:>5} {:>5} {:>8} {:>8}  {:<28} command",
            "id", "pid", "uid", "class", "ready", "outst", "units", "bound", "ops/s", "leases"
        );
    }
    for c in &st.clients {
        let leases = if c.leases.is_empty() { "-".to_owned() } else { c.leases.join(", ") };
        let _ = writeln!(
            o,
            "  {:>3} {:>7} {:>5} {:<22} {:>5} {:>5} {:>5} {:>8} {:>8.0}  {:<28} {}{}",
            c.id,
            c.pid,
            c.uid,
            c.class,
            c.ready,
            c.outstanding,
            c.units,
            c.bound,
            c.bound_per_s,
            leases,
            c.command,
            if c.departing { " (departing)" } else { "" }
        );
    }
    let k = &st.counters;
    let per_op = if k.bound > 0 { k.cpu_ns as f64 / k.bound as f64 / 1e3 } else { 0.0 };
    let _ = writeln!(
        o,
        "counters: bound {}, completions {}, continued {}, refused records {}, clients disconnected {}, connections refused {}, wake-ups {}, loop cpu {:.1} ms ({per_op:.2} us/op)",
        k.bound,
        k.completions,
        k.continued,
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

fn detach(socket: &Path, opts: &RunOpts) -> Result<()> {
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
        "sim-h200" => Some(SimBackend::h200().topology().clone()),
        "sim-mi300x" => Some(SimBackend::mi300x().topology().clone()),
        "probe" => Some(backends::select(choice, vitamin_hal::sim::SimDevice::default())?.0.topology().clone()),
        o => bail!("unknown --topology {o:?}: expected from-client, probe, sim-h200 or sim-mi300x"),
    })
}

fn foreground(socket: &Path, opts: &RunOpts, choice: BackendChoice) -> Result<()> {
    let policy: PolicyKind = opts.policy.parse().map_err(anyhow::Error::msg)?;
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
    let d = Daemon::start(cfg)?;
    tracing::info!(socket = %socket.display(), policy = %policy, "vitamin daemon running; stop it with `vitamin daemon stop`");
    if let Some(m) = opts.metrics {
        tracing::info!("metrics at http://{m}/metrics");
    }
    d.wait();
    drop(mps);
    tracing::info!("vitamin daemon stopped");
    Ok(())
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
        let t = render_status(&st);
        assert!(t.contains("#3 (8 units) leased") && t.contains("python train.py") && t.contains("clients: 1"), "{t}");
    }
}
