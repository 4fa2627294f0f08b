//! `vitamin determinism`: the parallel-structure invariant on hardware, next to a reshaping
//! baseline (the suite itself is `vitamin_hal_cuda::determinism`), and with `--record FILE` a
//! determinism record on any backend (see [`crate::record_run`] and docs/determinism.md).
//!
//! ## `--record FILE`
//! On CUDA, on HIP ([`crate::record_hip`]: an AMD GPU, or hal-hip's test double) and on the
//! simulated device (`--sim`, or no GPU: the CPU reference): for each compile variant
//! (`--variants`, default `default,nocontract`; the CPU reference has one, `cpu`), kernel, dtype
//! and input seed (`--seeds`, default `1,2`) the fixed-structure output on the whole device
//! (digest and a compressed copy) and `--trials` (default 20) trials on random pool nodes with a
//! co-runner.
//! Writes the record (gzip-compressed when FILE ends in `.gz`) and prints one line per case.
//!
//! ## Table mode (no `--record`, NVIDIA GPU)
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

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use vitamin_hal_cuda::determinism::{self, Config, Progress};
use vitamin_kernels_cuda::plan::{DType, SuiteKernel};
use vitamin_runtime::pool::Hierarchy;

use vitamin_kernels_cuda::source::Variant;

use crate::backends::{self, AnyBackend, BackendChoice};
use crate::record_hip::HipSuite;
use crate::record_run::{self, CudaSuite, RecordConfig, SimSuite};

/// Options of `vitamin determinism`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trials per kernel, dtype and treatment (table: default 1000; --record: per case, default 20,
    /// 0 records the outputs without invariance trials).
    #[arg(long)]
    trials: Option<usize>,
    /// Seed of the random bindings (table mode: also of the inputs; --record uses --seeds for those).
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Kernels (comma-separated): reduction, splitk_gemm, layernorm, gemv, softmax, attention. Default: all.
    #[arg(long, value_delimiter = ',')]
    kernels: Vec<String>,
    /// Dtypes (comma-separated): f32, bf16, f16. Default: all.
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
    /// Write a determinism record (any backend) instead of the table.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// --record: input seeds (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1u64, 2])]
    seeds: Vec<u64>,
    /// --record: compile variants (comma-separated): default, nocontract, fastmath.
    #[arg(long, value_delimiter = ',', default_values_t = ["default".to_owned(), "nocontract".to_owned()])]
    variants: Vec<String>,
    /// --record: leave the compressed output copies out (digests only).
    #[arg(long)]
    no_outputs: bool,
    /// --record, test aid: record these kernels with a reshaped (1-unit) decomposition instead
    /// of the fixed one, so a comparison has a known mismatch.
    #[arg(long, value_delimiter = ',', hide = true)]
    perturb: Vec<String>,
}

fn kernel_list(names: &[String]) -> Result<Vec<SuiteKernel>> {
    names.iter().map(|k| SuiteKernel::from_name(k).with_context(|| format!("unknown kernel {k:?}"))).collect()
}

/// The kernels and dtypes asked for (all when none are named).
fn selection(args: &Args) -> Result<(Vec<SuiteKernel>, Vec<DType>)> {
    let kernels = if args.kernels.is_empty() { SuiteKernel::ALL.to_vec() } else { kernel_list(&args.kernels)? };
    let dtypes = if args.dtypes.is_empty() {
        DType::ALL.to_vec()
    } else {
        args.dtypes
            .iter()
            .map(|d| DType::from_name(d).with_context(|| format!("unknown dtype {d:?} (f32, bf16 or f16)")))
            .collect::<Result<_>>()?
    };
    Ok((kernels, dtypes))
}

fn config(args: &Args) -> Result<Config> {
    let (kernels, dtypes) = selection(args)?;
    let trials = args.trials.unwrap_or(1000);
    if trials == 0 {
        bail!("--trials must be at least 1");
    }
    Ok(Config {
        trials,
        seed: args.seed,
        kernels,
        dtypes,
        lanes: args.lanes.max(1),
        corunner: !args.no_corunner,
        census: !args.no_census,
        ..Config::default()
    })
}

/// `--record FILE`: a determinism record on the chosen backend.
fn run_record(choice: BackendChoice, sim: vitamin_hal::sim::SimDevice, args: &Args, path: &Path) -> Result<()> {
    let (kernels, dtypes) = selection(args)?;
    let variants = args
        .variants
        .iter()
        .map(|v| {
            Variant::from_name(v).with_context(|| format!("unknown variant {v:?} (default, nocontract, fastmath)"))
        })
        .collect::<Result<Vec<_>>>()?;
    let cfg = RecordConfig {
        kernels,
        dtypes,
        seeds: args.seeds.clone(),
        variants,
        trials: args.trials.unwrap_or(20),
        binding_seed: args.seed,
        corunner: !args.no_corunner,
        corunner_block_ns: Config::default().corunner_block_ns,
        keep_outputs: !args.no_outputs,
        perturb: kernel_list(&args.perturb)?,
    };
    let (backend, _) = backends::select(choice, sim)?;
    let nodes: Vec<_> = Hierarchy::build(backend.topology()).nodes().iter().map(|n| n.units).collect();
    let bar = ProgressBar::new(1);
    bar.set_style(ProgressStyle::with_template("{msg:<44} [{bar:30}] {pos}/{len} {elapsed}").expect("valid template"));
    let mut progress = |done: usize, total: usize, label: &str| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        bar.set_message(label.to_owned());
    };
    let record = match backend {
        AnyBackend::Sim(sim) => record_run::record(&SimSuite::new(sim), &nodes, &cfg, &mut progress)?,
        AnyBackend::Cuda(cuda) => {
            record_run::record(&CudaSuite::new(&cuda, cfg.corunner_block_ns), &nodes, &cfg, &mut progress)?
        }
        AnyBackend::Hip(hip) => {
            record_run::record(&HipSuite::new(&hip, cfg.corunner_block_ns)?, &nodes, &cfg, &mut progress)?
        }
    };
    bar.finish_and_clear();
    record.save(path)?;
    println!(
        "{} ({}, {}), {} cases, {} trials each on {} pool nodes{}",
        record.host.device,
        record.host.backend,
        record.host.compiler,
        record.cases.len(),
        cfg.trials,
        nodes.len(),
        if cfg.corunner { " with a co-runner" } else { "" }
    );
    for c in &record.cases {
        let inv =
            c.invariance.as_ref().map_or(String::new(), |i| format!("{}/{} bitwise equal", i.bitwise_equal, i.runs));
        println!(
            "  {:<11} {:<28} {:<22} {} {}",
            c.variant,
            c.key(),
            c.launch.as_ref().map_or("", |l| l.decomposition.as_str()),
            &c.output.sha256[..16],
            inv
        );
    }
    println!("record written to {}", path.display());
    Ok(())
}

/// Runs `vitamin determinism`.
pub fn run(choice: BackendChoice, sim: vitamin_hal::sim::SimDevice, args: &Args) -> Result<()> {
    if let Some(path) = &args.record {
        return run_record(choice, sim, args, path);
    }
    let cfg = config(args)?;
    let (backend, _) = backends::select(choice, sim)?;
    let AnyBackend::Cuda(cuda) = backend else {
        bail!(
            "vitamin determinism's table runs on an NVIDIA GPU (--backend cuda); no usable CUDA backend here (--record \
             FILE works on every backend, the simulated device included). The simulated \
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
