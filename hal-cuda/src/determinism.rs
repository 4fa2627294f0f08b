//! The determinism suite: the parallel-structure invariant on hardware, next to a reshaping
//! baseline (`vitamin determinism` is a thin front end over [`run`]).
//!
//! For each suite kernel and dtype ([`vitamin_kernels_cuda::plan`]):
//! 1. **Reference**: the fixed-structure launch on the whole device with nothing else running
//!    (the exclusive-GPU result). Its FP64 error is reported as a sanity check of the kernel.
//! 2. **Fixed treatment**: `trials` times, the *same* descriptors (same function, grid, block,
//!    arguments) bound to a uniformly random pool node, while a co-runner (`busy`) occupies a
//!    random node disjoint from it.
//! 3. **Reshaped treatment**: the same, but each trial builds the decomposition a reshaping system
//!    would pick for the bound node's SM count ([`vitamin_kernels_cuda::plan::plan`]).
//!
//! Every trial poisons the output (all bits set: NaN in FP32 and BF16) before its launches, reads
//! it back after its fence, and compares it with the reference **bitwise**, also recording the
//! largest absolute and relative deviation. Inputs are seeded and identical for both treatments.
//! Everything goes through [`PhysicalPartition::submit`], i.e. the backend's unchanged-descriptor
//! path, never a side channel.
//!
//! [`compile_suite`] compiles the suite alone with one compile variant's NVRTC options
//! (`vitamin_kernels_cuda::source::Variant`) for `vitamin determinism --record`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use vitamin_hal::{
    Backend, Dim3, Fill, HalError, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition, UnitSet,
};
use vitamin_kernels_cuda::plan::{self, Arg, Buf, DType, Plan, Problem, SuiteKernel};
use vitamin_kernels_cuda::reference;
use vitamin_kernels_cuda::source::{self, Variant};

use crate::census::{self, CensusReport};
use crate::{CudaBackend, CudaPartition, RealizationStats};

/// Suite settings.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Trials per kernel, dtype and treatment.
    pub trials: usize,
    /// Seed of inputs and bindings.
    pub seed: u64,
    /// Kernels to run.
    pub kernels: Vec<SuiteKernel>,
    /// Dtypes to run.
    pub dtypes: Vec<DType>,
    /// Lanes per realized node.
    pub lanes: usize,
    /// Whether a co-runner keeps a disjoint node busy during each trial.
    pub corunner: bool,
    /// Nanoseconds each co-runner block spins (one wave of blocks on its node).
    pub corunner_block_ns: u32,
    /// Whether to run the `%smid` census over every node first.
    pub census: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            trials: 1000,
            seed: 0x5eed,
            kernels: SuiteKernel::ALL.to_vec(),
            dtypes: DType::ALL.to_vec(),
            lanes: 2,
            corunner: true,
            corunner_block_ns: 200_000,
            census: true,
        }
    }
}

/// Which launch structure a trial uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Treatment {
    /// The same descriptors on every node (vitamin).
    Fixed,
    /// A decomposition chosen for the bound node's size (kernel-reshaping baseline).
    Reshaped,
}

/// Outcome of one kernel, dtype and treatment.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// Kernel.
    pub kernel: SuiteKernel,
    /// Input/output type.
    pub dtype: DType,
    /// Treatment.
    pub treatment: Treatment,
    /// Problem sizes.
    pub problem: Problem,
    /// Trials run.
    pub trials: usize,
    /// Trials whose output equals the reference bit for bit.
    pub bitwise_equal: usize,
    /// Largest `|out - ref|` over all trials and elements.
    pub max_abs_deviation: f64,
    /// Largest `max|out - ref| / max|ref|` over all trials.
    pub max_rel_deviation: f64,
    /// Trials with an element still poisoned or NaN (never expected).
    pub unwritten_trials: usize,
    /// Distinct output bit patterns seen.
    pub distinct_outputs: usize,
    /// Decomposition used -> trials (one entry for the fixed treatment).
    pub decompositions: BTreeMap<String, usize>,
    /// Distinct nodes the trials were bound to.
    pub nodes_used: usize,
    /// Mean wall time of one trial (launches to completion, host view), microseconds.
    pub mean_trial_us: f64,
}

/// The reference run of one kernel and dtype.
#[derive(Debug, Clone, Serialize)]
pub struct ReferenceResult {
    /// Kernel.
    pub kernel: SuiteKernel,
    /// Type.
    pub dtype: DType,
    /// The fixed decomposition.
    pub decomposition: String,
    /// `max|ref - fp64| / max|fp64|` of the exclusive-GPU reference.
    pub rel_error_vs_fp64: f64,
}

/// Everything `vitamin determinism` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Device name.
    pub device: String,
    /// Driver version (`13.0`).
    pub driver: String,
    /// Settings.
    pub config: Config,
    /// Pool nodes (logical SM sets).
    pub nodes: Vec<String>,
    /// Cost of realizing the nodes as green contexts.
    pub realization: RealizationStats,
    /// `%smid` census, when requested.
    pub census: Option<CensusReport>,
    /// One per kernel and dtype.
    pub references: Vec<ReferenceResult>,
    /// One per kernel, dtype and treatment.
    pub results: Vec<CaseResult>,
    /// Whether every fixed-structure trial was bitwise equal to its reference.
    pub fixed_all_bitwise_equal: bool,
    /// Kernels (`kernel/dtype`) whose reshaped treatment deviated in some trial.
    pub reshaped_deviating: Vec<String>,
}

/// Progress notifications for long runs.
#[derive(Debug, Clone)]
pub enum Progress<'a> {
    /// A phase started (`realizing 31 nodes`, `census`, `reduction/f32 fixed`).
    Phase(&'a str),
    /// `done` of `total` trials of the current case finished.
    Trial {
        /// Trials finished.
        done: usize,
        /// Trials in this case.
        total: usize,
    },
}

/// Device buffers of one kernel and dtype.
struct Buffers {
    inputs: Vec<u64>,
    output: u64,
    output_bytes: usize,
    workspace: u64,
}

fn args_for(launch: &plan::Launch, b: &Buffers) -> KernelArgs {
    let vals: Vec<Vec<u8>> = launch
        .args
        .iter()
        .map(|a| match *a {
            Arg::Ptr(Buf::Input(i)) => b.inputs[i].to_le_bytes().to_vec(),
            Arg::Ptr(Buf::Output) => b.output.to_le_bytes().to_vec(),
            Arg::Ptr(Buf::Workspace) => b.workspace.to_le_bytes().to_vec(),
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
        })
        .collect();
    KernelArgs::pack(&vals.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// The descriptors of a plan over `b`: a poison fill of the output, then the plan's launches.
fn descriptors(backend: &CudaBackend, p: &Plan, b: &Buffers) -> Result<Vec<Arc<OpDesc>>, HalError> {
    let poison = Fill::new(b.output, 0xff, 1, b.output_bytes as u64).map_err(HalError::InvalidPartition)?;
    let mut ops = vec![Arc::new(OpDesc::Fill(poison))];
    for l in &p.launches {
        ops.push(Arc::new(OpDesc::Kernel(KernelLaunch::new(
            backend.kernel(l.kernel)?,
            Dim3::new(l.grid[0], l.grid[1], l.grid[2]),
            Dim3::new(l.block[0], l.block[1], l.block[2]),
            0,
            args_for(l, b),
            LaunchAttributes::none(),
        ))));
    }
    Ok(ops)
}

/// Submits `ops` on lane 0 of `part` and waits for the last one.
fn run_ops(part: &CudaPartition, ops: &[Arc<OpDesc>]) -> Result<(), HalError> {
    let mut last = None;
    for op in ops {
        last = Some(part.submit(0, op)?);
    }
    if let Some(f) = last {
        part.wait_for(f)?;
    }
    Ok(())
}

fn hash_bytes(b: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    b.hash(&mut h);
    h.finish()
}

/// Runs the suite on `nodes` (each a union of leaves; typically the pool's nodes).
pub fn run(
    backend: &CudaBackend,
    nodes: &[UnitSet],
    cfg: &Config,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Report, HalError> {
    if nodes.is_empty() || cfg.trials == 0 {
        return Err(HalError::InvalidPartition("the suite needs at least one node and one trial".into()));
    }
    let top = backend.topology().clone();
    progress(Progress::Phase(&format!("realizing {} pool nodes as green contexts", nodes.len())));
    let (parts, realization) = backend.realize(nodes, cfg.lanes.max(1), true)?;
    let census = if cfg.census {
        progress(Progress::Phase("%smid census of every node"));
        Some(census::check_nodes(backend, &parts.iter().collect::<Vec<_>>())?)
    } else {
        None
    };
    let whole_owned;
    let whole: &CudaPartition = match parts.iter().find(|p| *p.units() == top.all_units()) {
        Some(p) => p,
        None => {
            whole_owned = backend.create_partition(&top.all_units(), 1)?;
            &whole_owned
        }
    };
    let busy = backend.kernel("busy")?;
    let mut references = Vec::new();
    let mut results = Vec::new();
    for (ki, &kernel) in cfg.kernels.iter().enumerate() {
        let problem = Problem::default_for(kernel);
        for (di, &dtype) in cfg.dtypes.iter().enumerate() {
            let case_seed = cfg.seed ^ ((ki as u64) << 32) ^ ((di as u64) << 40);
            let host_inputs = plan::inputs(&problem, dtype, case_seed);
            let out_dtype = problem.output_dtype(dtype);
            let output_bytes = problem.output_elems() * out_dtype.size();
            let fixed = plan::fixed(&problem, dtype);
            let workspace_bytes = nodes
                .iter()
                .map(|n| plan::plan(&problem, dtype, n.len()).workspace_bytes)
                .chain([fixed.workspace_bytes])
                .max()
                .unwrap_or(0);
            let mut allocs = Vec::new();
            let mut alloc = |bytes: usize| -> Result<u64, HalError> {
                let a = backend.alloc(bytes)?;
                allocs.push(a);
                Ok(a)
            };
            let mut inputs = Vec::new();
            for v in &host_inputs {
                let a = alloc(v.len() * dtype.size())?;
                backend.write(a, &dtype.encode(v))?;
                inputs.push(a);
            }
            let bufs = Buffers {
                inputs,
                output: alloc(output_bytes)?,
                output_bytes,
                workspace: alloc(workspace_bytes.max(4) as usize)?,
            };
            let label = format!("{kernel}/{dtype}");
            progress(Progress::Phase(&format!("{label}: exclusive reference ({})", fixed.decomposition)));
            let fixed_ops = descriptors(backend, &fixed, &bufs)?;
            run_ops(whole, &fixed_ops)?;
            let ref_bytes = backend.read(bufs.output, output_bytes)?;
            let ref_vals = out_dtype.decode(&ref_bytes);
            let exact = reference::compute(&problem, &host_inputs);
            references.push(ReferenceResult {
                kernel,
                dtype,
                decomposition: fixed.decomposition.clone(),
                rel_error_vs_fp64: reference::relative_error(&ref_vals, &exact),
            });
            let ref_scale = ref_vals.iter().fold(0f64, |m, v| m.max(f64::from(v.abs()))).max(f64::MIN_POSITIVE);
            for treatment in [Treatment::Fixed, Treatment::Reshaped] {
                progress(Progress::Phase(&format!("{label}: {treatment:?} x {} trials", cfg.trials)));
                let mut rng = ChaCha8Rng::seed_from_u64(case_seed ^ ((treatment as u64 + 1) * 0x9e37_79b9));
                let mut reshaped_cache: HashMap<usize, (String, Vec<Arc<OpDesc>>)> = HashMap::new();
                let mut r = CaseResult {
                    kernel,
                    dtype,
                    treatment,
                    problem,
                    trials: cfg.trials,
                    bitwise_equal: 0,
                    max_abs_deviation: 0.0,
                    max_rel_deviation: 0.0,
                    unwritten_trials: 0,
                    distinct_outputs: 0,
                    decompositions: BTreeMap::new(),
                    nodes_used: 0,
                    mean_trial_us: 0.0,
                };
                let mut outputs = BTreeSet::new();
                let mut used = BTreeSet::new();
                let mut total_us = 0.0;
                for t in 0..cfg.trials {
                    let ni = rng.gen_range(0..parts.len());
                    let part = &parts[ni];
                    used.insert(ni);
                    let co_fence = if cfg.corunner {
                        let others: Vec<usize> =
                            (0..parts.len()).filter(|&j| parts[j].units().is_disjoint(part.units())).collect();
                        if others.is_empty() {
                            None
                        } else {
                            let co = &parts[others[rng.gen_range(0..others.len())]];
                            let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
                                busy.clone(),
                                Dim3::x(co.units().len() as u32 * 4),
                                Dim3::x(128),
                                0,
                                KernelArgs::pack(&[&cfg.corunner_block_ns.to_le_bytes()]),
                                LaunchAttributes::none(),
                            )));
                            Some((co, co.submit(0, &op)?))
                        }
                    } else {
                        None
                    };
                    let (decomp, ops) = match treatment {
                        Treatment::Fixed => (&fixed.decomposition, &fixed_ops),
                        Treatment::Reshaped => {
                            let units = part.units().len();
                            if let std::collections::hash_map::Entry::Vacant(e) = reshaped_cache.entry(units) {
                                let p = plan::plan(&problem, dtype, units);
                                let ops = descriptors(backend, &p, &bufs)?;
                                e.insert((p.decomposition, ops));
                            }
                            let (d, o) = &reshaped_cache[&units];
                            (d, o)
                        }
                    };
                    *r.decompositions.entry(decomp.clone()).or_default() += 1;
                    let t0 = Instant::now();
                    run_ops(part, ops)?;
                    total_us += t0.elapsed().as_secs_f64() * 1e6;
                    let out = backend.read(bufs.output, output_bytes)?;
                    if out == ref_bytes {
                        r.bitwise_equal += 1;
                    } else {
                        let vals = out_dtype.decode(&out);
                        if vals.iter().any(|v| v.is_nan()) {
                            r.unwritten_trials += 1;
                        }
                        let dev = vals
                            .iter()
                            .zip(&ref_vals)
                            .map(|(a, b)| f64::from((a - b).abs()))
                            .fold(0f64, |m, d| if d.is_nan() { f64::INFINITY } else { m.max(d) });
                        r.max_abs_deviation = r.max_abs_deviation.max(dev);
                        r.max_rel_deviation = r.max_rel_deviation.max(dev / ref_scale);
                    }
                    outputs.insert(hash_bytes(&out));
                    if let Some((co, f)) = co_fence {
                        co.wait_for(f)?;
                    }
                    if (t + 1).is_multiple_of(10) || t + 1 == cfg.trials {
                        progress(Progress::Trial { done: t + 1, total: cfg.trials });
                    }
                }
                r.distinct_outputs = outputs.len();
                r.nodes_used = used.len();
                r.mean_trial_us = total_us / cfg.trials as f64;
                results.push(r);
            }
            for p in &parts {
                p.synchronize()?;
            }
            for a in allocs {
                backend.free(a)?;
            }
        }
    }
    let fixed_all_bitwise_equal =
        results.iter().filter(|r| r.treatment == Treatment::Fixed).all(|r| r.bitwise_equal == r.trials);
    let reshaped_deviating = results
        .iter()
        .filter(|r| r.treatment == Treatment::Reshaped && r.bitwise_equal < r.trials)
        .map(|r| format!("{}/{}", r.kernel, r.dtype))
        .collect();
    Ok(Report {
        device: top.device_name().to_owned(),
        driver: backend.capabilities().driver_version_string(),
        config: cfg.clone(),
        nodes: nodes.iter().map(|n| n.display(top.unit_name()).to_string()).collect(),
        realization,
        census,
        references,
        results,
        fixed_all_bitwise_equal,
        reshaped_deviating,
    })
}

/// The report as a plain-text table (one row per kernel, dtype and treatment).
pub fn table(report: &Report) -> String {
    let mut s = format!(
        "{} (driver {}), {} nodes realized in {:.1} ms using {:.1} MiB ({} lanes each)\n",
        report.device,
        report.driver,
        report.realization.partitions,
        report.realization.create_ms,
        report.realization.memory_mib,
        report.realization.lanes
    );
    if let Some(c) = &report.census {
        s += &format!(
            "%smid census: leaves disjoint and sized: {}; every node on exactly its leaves' SMs: {}\n",
            c.leaves_disjoint_and_sized, c.all_exact
        );
    }
    s += &format!(
        "{:<12} {:<5} {:<9} {:>14} {:>11} {:>11} {:>9} {:>9}  {}\n",
        "kernel",
        "dtype",
        "treatment",
        "bitwise-equal",
        "max |dev|",
        "max rel",
        "outputs",
        "trial us",
        "decompositions"
    );
    for r in &report.results {
        let decomp: Vec<String> = r.decompositions.iter().map(|(d, n)| format!("{d} x{n}")).collect();
        s += &format!(
            "{:<12} {:<5} {:<9} {:>9}/{:<4} {:>11.3e} {:>11.3e} {:>9} {:>9.1}  {}\n",
            r.kernel.name(),
            r.dtype.name(),
            format!("{:?}", r.treatment).to_lowercase(),
            r.bitwise_equal,
            r.trials,
            r.max_abs_deviation,
            r.max_rel_deviation,
            r.distinct_outputs,
            r.mean_trial_us,
            decomp.join(", ")
        );
    }
    for rf in &report.references {
        s += &format!(
            "reference {}/{} ({}): rel. error vs FP64 {:.2e}\n",
            rf.kernel, rf.dtype, rf.decomposition, rf.rel_error_vs_fp64
        );
    }
    s += &format!(
        "fixed structure bitwise equal in every trial: {}; reshaped deviates for: {}\n",
        report.fixed_all_bitwise_equal,
        if report.reshaped_deviating.is_empty() { "none".into() } else { report.reshaped_deviating.join(", ") }
    );
    s
}

/// The determinism suite compiled by NVRTC with `variant`'s options and loaded into `backend`:
/// every suite kernel by name, and the full option list passed to NVRTC (for records).
pub fn compile_suite(
    backend: &CudaBackend,
    variant: Variant,
) -> Result<(HashMap<&'static str, vitamin_hal::FunctionRef>, Vec<String>), HalError> {
    let arch = backend.capabilities().compute_capability;
    let options = crate::nvrtc::suite_options(arch, variant);
    let extra: Vec<&str> = variant.nvrtc_options().to_vec();
    let cubin = crate::nvrtc::compile_cubin(&source::cuda_suite_source(), "vitamin_suite.cu", arch, &extra)?;
    let names = source::suite_kernel_names();
    let refs = backend.load_kernels(&cubin, &names)?;
    Ok((names.into_iter().zip(refs).collect(), options))
}
