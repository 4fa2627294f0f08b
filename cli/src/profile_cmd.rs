//! `vitamin profile`: the profiling mode. Measures every recurring launch configuration of a
//! workload at every pool size and writes the versioned profile file (`vitamin.profile` format,
//! see `vitamin_runtime::profile`). Today the workloads are the demo scenarios on the simulated
//! H200. Applications are profiled by bind mode itself: the `profile_out` key (docs/config.md).

use std::path::PathBuf;

use anyhow::{Context, Result};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::scenario::{profile_tenants, ScenarioKind, ScenarioScale};

/// Options of `vitamin profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// Scenario whose tenants' kernels are profiled.
    #[arg(long, default_value = "colocated-training", conflicts_with = "merge")]
    scenario: String,
    /// Instead of profiling a scenario: merge these profile files (of one device; bind mode's
    /// `profile_out` writes one per process) into the output, later files' times first.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    merge: Vec<PathBuf>,
    /// Output file.
    #[arg(long, short, default_value = "vitamin-profile.json")]
    out: PathBuf,
}

pub fn run(args: ProfileArgs) -> Result<()> {
    if !args.merge.is_empty() {
        return merge(&args.merge, &args.out);
    }
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

fn merge(files: &[PathBuf], out: &std::path::Path) -> Result<()> {
    let mut merged: Option<Profiles> = None;
    for f in files {
        let p = Profiles::load(f)?;
        match merged.as_mut() {
            None => merged = Some(p),
            Some(m) => m.merge(&p).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?,
        }
    }
    let m = merged.context("no file to merge")?;
    m.save(out)?;
    println!(
        "merged {} files: {} launch configurations of {}; wrote {}",
        files.len(),
        m.len(),
        m.device,
        out.display()
    );
    Ok(())
}
