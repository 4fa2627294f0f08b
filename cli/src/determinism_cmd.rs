//! `vitamin determinism`: the parallel-structure invariant on hardware, next to a reshaping
//! baseline (the suite itself is `vitamin_hal_cuda::determinism`).
//!
//! Realizes every node of the device's pool ([`Hierarchy::build`]) as a green context, runs the
//! `%smid` census, then for each kernel and dtype `--trials` trials of the fixed-structure launch
//! bound to a random node (a co-runner busy on a disjoint node) and as many of the reshaped
//! variant. Prints a table (progress on stderr) and, with `--json FILE`, the full report.
//!
//! JSON (schema `vitamin.determinism.v1`; fields are only ever added): `{ "schema", "report": {
//! device, driver, config, nodes, realization {partitions, lanes, create_ms, memory_mib,
//! memory_after_first_launch_mib}, census {leaves, leaves_disjoint_and_sized, nodes[], all_exact},
//! references [{kernel, dtype, decomposition, rel_error_vs_fp64}], results [{kernel, dtype,
//! treatment, problem, trials, bitwise_equal, max_abs_deviation, max_rel_deviation,
//! unwritten_trials, distinct_outputs, decompositions, nodes_used, mean_trial_us}],
//! fixed_all_bitwise_equal, reshaped_deviating } }`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use vitamin_hal_cuda::determinism::{self, Config, Progress};
use vitamin_kernels_cuda::plan::{DType, SuiteKernel};
use vitamin_runtime::pool::Hierarchy;

use crate::backends::{self, AnyBackend, BackendChoice};

/// Options of `vitamin determinism`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trials per kernel, dtype and treatment.
    #[arg(long, default_value_t = 1000)]
    trials: usize,
    /// Seed of the inputs and of the random bindings.
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Kernels (comma-separated): reduction, splitk_gemm, layernorm, gemv. Default: all.
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Dtypes (comma-separated): f32, bf16. Default: both.
    #[arg(long, value_delimiter = ',')]
    dtypes: Vec<String>,
    /// Lanes (streams) per realized node.
    #[arg(long, default_value_t = 2)]
    lanes: usize,
    /// Run without the co-runner on a disjoint node.
    #[arg(long)]
    no_corunner: bool,
    /// Skip the %smid census.
    #[arg(long)]
    no_census: bool,
    /// Write the JSON report to this file (`-` for stdout, then the table goes to stderr).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn config(args: &Args) -> Result<Config> {
    let kernels = if args.kernels.is_empty() {
        SuiteKernel::ALL.to_vec()
    } else {
        args.kernels
            .iter()
            .map(|k| SuiteKernel::from_name(k).with_context(|| format!("unknown kernel {k:?}")))
            .collect::<Result<_>>()?
    };
    let dtypes = if args.dtypes.is_empty() {
        DType::ALL.to_vec()
    } else {
        args.dtypes
            .iter()
            .map(|d| DType::from_name(d).with_context(|| format!("unknown dtype {d:?} (f32 or bf16)")))
            .collect::<Result<_>>()?
    };
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    Ok(Config {
        trials: args.trials,
        seed: args.seed,
        kernels,
        dtypes,
        lanes: args.lanes.max(1),
        corunner: !args.no_corunner,
        census: !args.no_census,
        ..Config::default()
    })
}

/// Runs `vitamin determinism`.
pub fn run(choice: BackendChoice, sim: vitamin_hal::sim::SimDevice, args: &Args) -> Result<()> {
    let cfg = config(args)?;
    let (backend, _) = backends::select(choice, sim)?;
    let AnyBackend::Cuda(cuda) = backend else {
        bail!(
            "vitamin determinism runs on an NVIDIA GPU (--backend cuda); no usable CUDA backend here. The simulated \
             device checks the same invariant in the conformance suite (cargo test -p vitamin-tests)"
        );
    };
    let nodes: Vec<_> =
        Hierarchy::build(vitamin_hal::Backend::topology(&cuda)).nodes().iter().map(|n| n.units).collect();
    let bar = ProgressBar::new(cfg.trials as u64);
    bar.set_style(ProgressStyle::with_template("{msg:<40} [{bar:30}] {pos}/{len} {elapsed}").expect("valid template"));
    let report = determinism::run(&cuda, &nodes, &cfg, &mut |p| match p {
        Progress::Phase(s) => {
            bar.set_position(0);
            bar.set_message(s.to_owned());
            bar.suspend(|| eprintln!("{s}"));
        }
        Progress::Trial { done, total } => {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    })?;
    bar.finish_and_clear();
    let table = determinism::table(&report);
    let json = serde_json::json!({ "schema": "vitamin.determinism.v1", "report": report });
    match &args.json {
        Some(p) if p.as_os_str() == "-" => {
            eprint!("{table}");
            println!("{}", serde_json::to_string_pretty(&json)?);
        }
        Some(p) => {
            std::fs::write(p, serde_json::to_string_pretty(&json)?).with_context(|| format!("writing {p:?}"))?;
            print!("{table}");
        }
        None => print!("{table}"),
    }
    Ok(())
}
