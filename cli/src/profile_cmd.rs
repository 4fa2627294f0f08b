//! `vitamin profile`: the profiling mode. Measures every recurring launch configuration of a
//! workload at every pool size and writes the versioned profile file (`vitamin.profile` format,
//! see `vitamin_runtime::profile`). Today the workloads are the demo scenarios on the simulated
//! H200; hardware workloads are profiled by the interposer once it binds launches.

use std::path::PathBuf;

use anyhow::{Context, Result};
use vitamin_runtime::scenario::{profile_tenants, ScenarioKind, ScenarioScale};

/// Options of `vitamin profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// Scenario whose tenants' kernels are profiled.
    #[arg(long, default_value = "colocated-training")]
    scenario: String,
    /// Output file.
    #[arg(long, short, default_value = "vitamin-profile.json")]
    out: PathBuf,
}

pub fn run(args: ProfileArgs) -> Result<()> {
    let kind = ScenarioKind::ALL.into_iter().find(|k| k.name() == args.scenario).with_context(|| {
        format!("unknown scenario {:?}: expected colocated-training, inference-with-training or serving", args.scenario)
    })?;
    let p = profile_tenants(kind, ScenarioScale::default())?;
    p.save(&args.out)?;
    println!(
        "profiled {} launch configurations of {} on {} (SIMULATED) at every pool size; wrote {}",
        p.len(),
        kind.name(),
        p.device,
        args.out.display()
    );
    Ok(())
}
