//! `vitamin demo`: the main job on a machine without a GPU. Runs the simulated scenarios under
//! every policy, prints a comparison table, checks determinism under Chaos, and writes JSON and a
//! Perfetto timeline on request. Everything here runs on the simulated H200 (or, with
//! `--sim-device mi300x`, the simulated MI300X: [`crate::sim_device`]) and says so.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};

use crate::sim_device;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use vitamin_hal::sim::SimDevice;
use vitamin_hal::Backend;
use vitamin_runtime::policy::PolicyKind;
use vitamin_runtime::scenario::{
    determinism_check, evaluate, run_scenario, DeterminismReport, HarnessConfig, PolicyRun, ScenarioKind,
    ScenarioReport, ScenarioScale,
};

/// Options of `vitamin demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Scenario(s) to run.
    #[arg(long, value_enum, default_value = "all")]
    scenario: ScenarioChoice,
    /// Policies to compare (comma-separated): throughput, tpot, static, exclusive, chaos.
    #[arg(long, value_delimiter = ',', default_value = "throughput,tpot,static,exclusive,chaos")]
    policies: Vec<PolicyKind>,
    /// Seed for arrivals and the Chaos policy.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Virtual duration of the time-bounded tenants, ms.
    #[arg(long, default_value_t = 2000)]
    duration_ms: u64,
    /// Requests replayed from the Azure conversation trace (serving scenario).
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Chaos seeds for the determinism check (0 skips it).
    #[arg(long, default_value_t = 20)]
    determinism_seeds: u64,
    /// Disable lane continuation (strict readiness) for comparison.
    #[arg(long)]
    strict: bool,
    /// Write the full report as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write a Perfetto-loadable binding timeline (Chrome trace JSON) of the first scenario under the
    /// first policy to this file.
    #[arg(long)]
    timeline: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ScenarioChoice {
    All,
    ColocatedTraining,
    InferenceWithTraining,
    Serving,
}

impl ScenarioChoice {
    fn kinds(self) -> Vec<ScenarioKind> {
        match self {
            ScenarioChoice::All => ScenarioKind::ALL.to_vec(),
            ScenarioChoice::ColocatedTraining => vec![ScenarioKind::ColocatedTraining],
            ScenarioChoice::InferenceWithTraining => vec![ScenarioKind::InferenceWithTraining],
            ScenarioChoice::Serving => vec![ScenarioKind::Serving],
        }
    }
}

/// The JSON document `--json` writes (schema `vitamin.demo.v1`).
#[derive(Debug, Serialize)]
struct DemoReport {
    schema: &'static str,
    simulated: bool,
    note: &'static str,
    seed: u64,
    lane_continuation: bool,
    scenarios: Vec<ScenarioReport>,
    determinism: Option<DeterminismReport>,
}

const NOTE: &str = "All figures come from vitamin's simulated device (virtual time, documented cost model in \
    hal::sim), not from a GPU. They compare policies on one mechanism; they are not hardware measurements.";

pub fn run(args: DemoArgs, device: SimDevice) -> Result<()> {
    let mut config = HarnessConfig::default();
    config.dispatch.lane_continuation = !args.strict;
    let scale = ScenarioScale { duration_ns: args.duration_ms * 1_000_000, trace_requests: args.requests };
    let kinds = args.scenario.kinds();
    anyhow::ensure!(!args.policies.is_empty(), "no policy selected");

    let top = device.backend().topology().clone();
    println!(
        "vitamin demo: SIMULATED device ({}, {} {}s, {}-node pool); no GPU is used.",
        top.device_name(),
        top.unit_count(),
        top.unit_name(),
        vitamin_runtime::pool::Hierarchy::build(&top).len()
    );
    println!("{NOTE}\n");
    let steps = kinds.len() as u64 * (args.policies.len() as u64 + 1)
        + args.determinism_seeds.min(1) * (args.determinism_seeds + 1);
    let bar = ProgressBar::new(steps).with_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    let mut reports = Vec::new();
    for &k in &kinds {
        let progress = |m: &str| {
            bar.set_message(m.to_owned());
            bar.inc(1);
        };
        let report = if device.is_default() {
            evaluate(k, &args.policies, args.seed, scale, &config, progress).map(|(r, _)| r).map_err(Into::into)
        } else {
            sim_device::evaluate(device, k, &args.policies, args.seed, scale, &config, progress)
        }
        .with_context(|| format!("scenario {}", k.name()))?;
        reports.push(report);
    }
    let determinism = if args.determinism_seeds > 0 {
        bar.set_message(format!("determinism: {} Chaos seeds", args.determinism_seeds));
        let seeds: Vec<u64> = (0..args.determinism_seeds).collect();
        let d = if device.is_default() {
            determinism_check(&seeds, 3, &config).map_err(Into::into)
        } else {
            sim_device::determinism_check(device, &seeds, 3, &config)
        }
        .context("determinism check")?;
        bar.inc(args.determinism_seeds + 1);
        Some(d)
    } else {
        None
    };
    bar.finish_and_clear();

    for r in &reports {
        print_scenario(r);
    }
    if let Some(d) = &determinism {
        let same = d.trials.iter().filter(|t| t.identical).count();
        println!(
            "determinism (colocated-training with data paths, {} iterations per tenant): {same}/{} Chaos seeds \
             produced bitwise-identical tenant outputs to the Exclusive reference (digests {})",
            d.iterations,
            d.trials.len(),
            d.reference.iter().map(|x| format!("{x:016x}")).collect::<Vec<_>>().join(", ")
        );
    }
    println!("\n(simulated; {:.1} s of host time)", started.elapsed().as_secs_f64());

    if let Some(path) = &args.json {
        let doc = DemoReport {
            schema: "vitamin.demo.v1",
            simulated: true,
            note: NOTE,
            seed: args.seed,
            lane_continuation: !args.strict,
            scenarios: reports,
            determinism,
        };
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    if let Some(path) = &args.timeline {
        let mut cfg = config.clone();
        cfg.dispatch.record_timeline = true;
        let (k, p) = (kinds[0], args.policies[0]);
        let run = if device.is_default() {
            run_scenario(k, p, args.seed, scale, &cfg)?
        } else {
            sim_device::run_scenario(device, k, p, args.seed, scale, &cfg)?
        };
        let t = run.timeline.context("timeline was not recorded")?;
        t.write_chrome_trace(path).with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote {} ({} spans of {} under {}; open it in https://ui.perfetto.dev)",
            path.display(),
            t.spans.len(),
            k.name(),
            p
        );
    }
    Ok(())
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.digits$}"))
}

fn print_scenario(r: &ScenarioReport) {
    println!("== {} ({})", r.scenario, r.device);
    println!(
        "  {:<11} {:>9}  {:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "policy",
        "agg.norm",
        "tenants: normalized throughput",
        "lat p50",
        "lat p99",
        "tpot p50",
        "tpot viol",
        "ttft p50",
        "ttft p99"
    );
    for run in &r.runs {
        let tenants = run
            .tenants
            .iter()
            .filter_map(|t| t.normalized_throughput.map(|n| format!("{} {n:.2}", t.name)))
            .collect::<Vec<_>>()
            .join(", ");
        let find = |f: fn(&vitamin_runtime::scenario::TenantReport) -> Option<f64>| run.tenants.iter().find_map(f);
        println!(
            "  {:<11} {:>9}  {:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            run.policy,
            fmt_opt(run.aggregate_normalized_throughput, 3),
            tenants,
            fmt_opt(find(|t| t.latency_p50_ms), 3),
            fmt_opt(find(|t| t.latency_p99_ms), 3),
            fmt_opt(find(|t| t.tpot_p50_ms), 3),
            find(|t| t.tpot_slo_violation_pct).map_or("-".into(), |v| format!("{v:.1}%")),
            fmt_opt(find(|t| t.ttft_p50_ms), 2),
            fmt_opt(find(|t| t.ttft_p99_ms), 2),
        );
    }
    print_dispatch(&r.runs);
    println!();
}

fn print_dispatch(runs: &[PolicyRun]) {
    let s: Vec<String> = runs
        .iter()
        .map(|r| {
            format!(
                "{}: {} bound, {} continued, {} rejected",
                r.policy, r.dispatch.bound, r.dispatch.continued, r.dispatch.rejected
            )
        })
        .collect();
    println!("  dispatch: {}", s.join("; "));
}
