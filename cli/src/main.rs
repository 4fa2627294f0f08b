//! `vitamin`: the composition root. Picks a backend and runs one of the commands.
#![forbid(unsafe_code)]

mod backends;
mod compare_cmd;
mod config_cmd;
mod daemon_cmd;
mod demo_cmd;
mod determinism_cmd;
mod pool_cmd;
mod profile_cmd;
mod record;
mod record_hip;
mod record_run;
mod run_cmd;
mod sim_device;
mod ulp;

use anyhow::Result;
use clap::{Parser, Subcommand};

use backends::{AnyBackend, BackendChoice};

/// vitamin: determinism-preserving spatial sharing of GPUs.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Cli {
    /// Backend: auto (first usable GPU, else the simulated H200), sim, cuda or hip.
    #[arg(long, global = true, env = "VITAMIN_BACKEND", value_enum, default_value = "auto")]
    backend: BackendChoice,
    /// Use the simulated device (same as --backend sim).
    #[arg(long, global = true)]
    sim: bool,
    /// Simulated device for --sim and the fallback: h200 or mi300x.
    #[arg(long, global = true, env = "VITAMIN_SIM_DEVICE", default_value = "h200")]
    sim_device: vitamin_hal::sim::SimDevice,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the probed backends and the chosen device's topology and leaves.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The main job without a GPU: simulated scenarios under every policy, a comparison table, and a
    /// determinism check (always on the simulated H200).
    Demo(demo_cmd::DemoArgs),
    /// Profile a scenario's launch configurations at every pool size and write the profile file, or
    /// merge profile files (`--merge`).
    Profile(profile_cmd::ProfileArgs),
    /// Show the hierarchical pool of physical contexts for the chosen device (tree, remainders).
    Pool {
        /// Print JSON (schema vitamin.pool.v1) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Fixed-structure launches on random pool nodes vs reshaped launches (NVIDIA GPU); with
    /// --record FILE, a determinism record on any backend.
    Determinism(determinism_cmd::Args),
    /// Compare determinism records: vitamin compare A B [...] [--out DIR] [--json FILE]; exit 0 if
    /// everything matched bitwise, 1 if not, 2 on usage or input errors.
    Compare(compare_cmd::Args),
    /// The coordination daemon: one arbiter for every vitamin process on this host
    /// (`vitamin daemon [--detach] [--policy P] [--mps start]`, `vitamin daemon status`, `vitamin daemon stop`).
    Daemon(daemon_cmd::DaemonArgs),
    /// Run a CUDA application under the interposer, in bind mode (default) or --observe:
    /// vitamin run [--policy P | --observe] [--census FILE] -- <command>.
    Run(run_cmd::RunArgs),
    /// Print the effective configuration (file, environment, defaults) and where each value came
    /// from.
    Config {
        /// Print JSON (schema vitamin.config.v1) instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    // The daemon's log is its user interface: info by default there, warnings elsewhere.
    let default_log =
        if matches!(&cli.command, Command::Daemon(a) if daemon_cmd::runs_daemon(a)) { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("VITAMIN_LOG").unwrap_or_else(|_| default_log.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let choice = if cli.sim { BackendChoice::Sim } else { cli.backend };
    match cli.command {
        Command::Info { json } => info(choice, cli.sim_device, json),
        Command::Pool { json } => pool_cmd::run(choice, cli.sim_device, json),
        Command::Demo(args) => demo_cmd::run(args, cli.sim_device),
        Command::Profile(args) => profile_cmd::run(args),
        Command::Determinism(args) => determinism_cmd::run(choice, cli.sim_device, &args),
        Command::Run(args) => run_cmd::run(args, choice),
        Command::Compare(args) => match compare_cmd::run(&args) {
            Ok(all_match) => std::process::exit(if all_match { 0 } else { 1 }),
            Err(e) => {
                eprintln!("Error: {e:#}");
                std::process::exit(2)
            }
        },
        Command::Config { json } => config_cmd::run(json),
        Command::Daemon(args) => daemon_cmd::run(args, choice),
    }
}

fn info(choice: BackendChoice, sim: vitamin_hal::sim::SimDevice, json: bool) -> Result<()> {
    let (backend, reports) = backends::select(choice, sim)?;
    let top = backend.topology();
    if json {
        let mut v = serde_json::json!({ "probes": reports, "topology": top });
        if let AnyBackend::Cuda(cuda) = &backend {
            v["cuda_capabilities"] = serde_json::to_value(cuda.capabilities())?;
        }
        if let AnyBackend::Hip(hip) = &backend {
            v["hip_capabilities"] = serde_json::to_value(hip.capabilities())?;
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("backends probed:");
    for r in &reports {
        let state = if r.usable { "usable" } else { "skipped" };
        println!("  {:<5} {state}{}", r.backend, r.reason.as_deref().map(|s| format!(": {s}")).unwrap_or_default());
    }
    if let AnyBackend::Cuda(cuda) = &backend {
        println!("\ncuda capabilities: {}", serde_json::to_string(cuda.capabilities())?);
    }
    if let AnyBackend::Hip(hip) = &backend {
        println!("\nhip capabilities: {}", serde_json::to_string(hip.capabilities())?);
    }
    println!("\ndevice: {top}");
    Ok(())
}
