//! `vitamin determinism --record`: runs the fixed-structure suite on one device and builds a
//! [`Record`]. Generic over [`SuiteDevice`], a small trait over `vitamin_hal::Backend` that adds
//! what the suite needs besides partitions (memory, the compiled kernels of a variant, a
//! co-runner): implemented here for the simulated device (the CPU reference) and for CUDA, and
//! for HIP in [`crate::record_hip`] (hipRTC over `vitamin_kernels_hip::source`,
//! `Variant::hip_options`).
//!
//! For each compile variant, suite kernel, dtype and input seed: the fixed launch structure runs
//! once on the whole device (its output is the case's output, digested and kept compressed), then
//! `trials` times on uniformly random pool nodes while a co-runner keeps a random disjoint node
//! busy; each trial poisons the output first and must give the same bytes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vitamin_hal::{
    Backend, Dim3, Fill, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition, UnitSet,
};
use vitamin_kernels_cuda::plan::{self, Arg, Buf, DType, Plan, Problem, SuiteKernel};
use vitamin_kernels_cuda::reference;
use vitamin_kernels_cuda::source::{self, Variant};

use crate::record::{
    self, Case, Host, Invariance, LaunchInfo, LaunchStructure, Output, Record, RecordKind, SourceInfo, SuiteConfig,
    Tool, VariantInfo, CPU_VARIANT,
};

/// A compiled variant: its description and its kernels by name.
pub struct CompiledVariant {
    /// For the record.
    pub info: VariantInfo,
    /// Every suite kernel.
    pub kernels: HashMap<&'static str, FunctionRef>,
}

/// What the suite needs from a device besides partitions.
pub trait SuiteDevice {
    /// The backend.
    type B: Backend;
    /// The backend.
    fn backend(&self) -> &Self::B;
    /// Where this runs.
    fn host(&self) -> Host;
    /// The prelude this device compiles the suite with (`cuda`, `hip`, `cpu`) and its text.
    fn prelude(&self) -> (&'static str, &'static str);
    /// The variants it will record for `requested` (a device whose output does not depend on
    /// compile options records one, [`CPU_VARIANT`]), each compiled and loaded.
    fn compile(&self, requested: &[Variant]) -> Result<Vec<CompiledVariant>>;
    /// A kernel that keeps the units of a node busy for a while, and its arguments for a node
    /// of `units` units.
    fn corunner(&self, units: usize) -> Result<(FunctionRef, Dim3, Dim3, KernelArgs)>;
    /// Device memory.
    fn alloc(&self, bytes: usize) -> Result<u64>;
    /// Frees [`SuiteDevice::alloc`] memory.
    fn free(&self, addr: u64) -> Result<()>;
    /// Copies host bytes to `addr` (through `part` where the device needs a queue) and waits.
    fn upload(&self, part: &<Self::B as Backend>::Partition, addr: u64, bytes: &[u8]) -> Result<()>;
    /// Copies device bytes to the host (everything submitted has completed).
    fn download(&self, addr: u64, len: usize) -> Result<Vec<u8>>;
}

/// Settings of a record run.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// Kernels.
    pub kernels: Vec<SuiteKernel>,
    /// Dtypes.
    pub dtypes: Vec<DType>,
    /// Input seeds.
    pub seeds: Vec<u64>,
    /// Requested variants.
    pub variants: Vec<Variant>,
    /// Trials per case on random nodes.
    pub trials: usize,
    /// Seed of the node choices.
    pub binding_seed: u64,
    /// Whether a co-runner runs on a disjoint node during each trial.
    pub corunner: bool,
    /// Co-runner block time in ns.
    pub corunner_block_ns: u32,
    /// Whether outputs are kept (compressed) in the record.
    pub keep_outputs: bool,
    /// Kernels run with a reshaped (1-unit) decomposition instead of the fixed one (test aid).
    pub perturb: Vec<SuiteKernel>,
}

/// The plan a case runs: the fixed structure, or the 1-unit reshaped one for a perturbed kernel.
pub fn case_plan(problem: &Problem, dtype: DType, perturbed: bool) -> Result<Plan> {
    let fixed = plan::fixed(problem, dtype);
    if !perturbed {
        return Ok(fixed);
    }
    let p = plan::plan(problem, dtype, 1);
    if p == fixed {
        bail!("perturbing {} changes nothing at this size ({})", problem.kernel(), fixed.decomposition);
    }
    Ok(p)
}

struct Buffers {
    inputs: Vec<u64>,
    output: u64,
    output_bytes: usize,
    workspace: u64,
}

fn descriptors(p: &Plan, b: &Buffers, kernels: &HashMap<&'static str, FunctionRef>) -> Result<Vec<Arc<OpDesc>>> {
    let poison = Fill::new(b.output, 0xff, 1, b.output_bytes as u64).map_err(anyhow::Error::msg)?;
    let mut ops = vec![Arc::new(OpDesc::Fill(poison))];
    for l in &p.launches {
        let vals: Vec<Vec<u8>> = l
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
        let f = kernels.get(l.kernel).with_context(|| format!("kernel {} was not compiled", l.kernel))?;
        ops.push(Arc::new(OpDesc::Kernel(KernelLaunch::new(
            f.clone(),
            Dim3::new(l.grid[0], l.grid[1], l.grid[2]),
            Dim3::new(l.block[0], l.block[1], l.block[2]),
            0,
            KernelArgs::pack(&vals.iter().map(Vec::as_slice).collect::<Vec<_>>()),
            LaunchAttributes::none(),
        ))));
    }
    Ok(ops)
}

/// Runs `p` once on `part` over `inputs` (in `dtype`) with `kernels` and returns the output bytes
/// (tests: one launch sequence outside a record).
#[cfg(test)]
pub fn run_plan_once<D: SuiteDevice>(
    dev: &D,
    part: &<D::B as Backend>::Partition,
    kernels: &HashMap<&'static str, FunctionRef>,
    problem: &Problem,
    dtype: DType,
    p: &Plan,
    inputs: &[Vec<f32>],
) -> Result<Vec<u8>> {
    let output_bytes = problem.output_elems() * problem.output_dtype(dtype).size();
    let mut allocs = Vec::new();
    let result = (|| -> Result<Vec<u8>> {
        let mut alloc = |bytes: usize| -> Result<u64> {
            let a = dev.alloc(bytes.max(4))?;
            allocs.push(a);
            Ok(a)
        };
        let mut ins = Vec::new();
        for x in inputs {
            let a = alloc(x.len() * dtype.size())?;
            dev.upload(part, a, &dtype.encode(x))?;
            ins.push(a);
        }
        let bufs = Buffers {
            inputs: ins,
            output: alloc(output_bytes)?,
            output_bytes,
            workspace: alloc(p.workspace_bytes as usize)?,
        };
        run_ops(part, &descriptors(p, &bufs, kernels)?)?;
        dev.download(bufs.output, output_bytes)
    })();
    for a in allocs {
        dev.free(a)?;
    }
    result
}

/// Submits `ops` on lane 0 of `part` and waits for them.
fn run_ops<P: PhysicalPartition>(part: &P, ops: &[Arc<OpDesc>]) -> Result<()> {
    for op in ops {
        part.submit(0, op)?;
    }
    drain(part)
}

fn drain<P: PhysicalPartition>(part: &P) -> Result<()> {
    part.synchronize()?;
    let mut done = Vec::new();
    part.poll(&mut done)?;
    Ok(())
}

fn structure(p: &Plan) -> LaunchStructure {
    LaunchStructure {
        decomposition: p.decomposition.clone(),
        launches: p
            .launches
            .iter()
            .map(|l| LaunchInfo { kernel: l.kernel.to_owned(), grid: l.grid, block: l.block, smem: 0 })
            .collect(),
    }
}

/// Progress of a record run: `(cases done, cases in all, current case)`.
pub type ProgressFn<'a> = dyn FnMut(usize, usize, &str) + 'a;

/// Runs the suite on `dev` over `nodes` (unions of leaves, typically the pool's nodes).
pub fn record<D: SuiteDevice>(
    dev: &D,
    nodes: &[UnitSet],
    cfg: &RecordConfig,
    progress: &mut ProgressFn<'_>,
) -> Result<Record> {
    if cfg.kernels.is_empty() || cfg.dtypes.is_empty() || cfg.seeds.is_empty() || cfg.variants.is_empty() {
        bail!("nothing to record: kernels, dtypes, seeds and variants must each name at least one");
    }
    let backend = dev.backend();
    let top = backend.topology().clone();
    let parts: Vec<_> = nodes.iter().map(|n| backend.create_partition(n, 1)).collect::<Result<_, _>>()?;
    if parts.is_empty() {
        bail!("no pool nodes to run on");
    }
    let whole_owned;
    let whole = match parts.iter().find(|p| *p.units() == top.all_units()) {
        Some(p) => p,
        None => {
            whole_owned = backend.create_partition(&top.all_units(), 1)?;
            &whole_owned
        }
    };
    let variants = dev.compile(&cfg.variants)?;
    let total = variants.len() * cfg.kernels.len() * cfg.dtypes.len() * cfg.seeds.len();
    let mut cases = Vec::with_capacity(total);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.binding_seed);
    for v in &variants {
        for &kernel in &cfg.kernels {
            let problem = Problem::record_for(kernel);
            for &dtype in &cfg.dtypes {
                let p = case_plan(&problem, dtype, cfg.perturb.contains(&kernel))?;
                for &seed in &cfg.seeds {
                    let label = format!("{}: {kernel}/{dtype}/seed {seed}", v.info.name);
                    progress(cases.len(), total, &label);
                    let case = run_case(dev, &parts, whole, v, &problem, dtype, seed, &p, cfg, &mut rng)
                        .with_context(|| label.clone())?;
                    cases.push(case);
                }
            }
        }
    }
    progress(total, total, "done");
    let (created_unix_s, created_utc) = record::now();
    let (prelude, prelude_text) = dev.prelude();
    Ok(Record {
        schema: record::SCHEMA.to_owned(),
        kind: RecordKind::Suite,
        created_unix_s,
        created_utc,
        host: dev.host(),
        tool: tool(),
        source: Some(SourceInfo {
            suite_sha256: record::sha256_hex(source::SUITE.as_bytes()),
            prelude: prelude.to_owned(),
            prelude_sha256: record::sha256_hex(prelude_text.as_bytes()),
        }),
        variants: variants.iter().map(|v| v.info.clone()).collect(),
        config: Some(SuiteConfig {
            trials: cfg.trials,
            seeds: cfg.seeds.clone(),
            corunner: cfg.corunner,
            nodes: nodes.len(),
            perturbed: cfg.perturb.iter().map(|k| k.name().to_owned()).collect(),
        }),
        cases,
    })
}

/// What wrote the record.
pub fn tool() -> Tool {
    Tool {
        name: "vitamin".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: std::env::var("VITAMIN_COMMIT").ok().filter(|s| !s.is_empty()),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_case<D: SuiteDevice>(
    dev: &D,
    parts: &[<D::B as Backend>::Partition],
    whole: &<D::B as Backend>::Partition,
    v: &CompiledVariant,
    problem: &Problem,
    dtype: DType,
    seed: u64,
    p: &Plan,
    cfg: &RecordConfig,
    rng: &mut ChaCha8Rng,
) -> Result<Case> {
    let host_inputs = plan::inputs(problem, dtype, seed);
    let out_dtype = problem.output_dtype(dtype);
    let output_bytes = problem.output_elems() * out_dtype.size();
    let mut allocs = Vec::new();
    let result = (|| -> Result<Case> {
        let mut alloc = |bytes: usize| -> Result<u64> {
            let a = dev.alloc(bytes.max(4))?;
            allocs.push(a);
            Ok(a)
        };
        let mut inputs = Vec::new();
        for x in &host_inputs {
            let a = alloc(x.len() * dtype.size())?;
            dev.upload(whole, a, &dtype.encode(x))?;
            inputs.push(a);
        }
        let bufs = Buffers {
            inputs,
            output: alloc(output_bytes)?,
            output_bytes,
            workspace: alloc(p.workspace_bytes as usize)?,
        };
        let ops = descriptors(p, &bufs, &v.kernels)?;
        run_ops(whole, &ops)?;
        let reference_bytes = dev.download(bufs.output, output_bytes)?;
        let mut distinct = BTreeSet::from([record::sha256_hex(&reference_bytes)]);
        let (mut equal, mut used) = (0, BTreeSet::new());
        for _ in 0..cfg.trials {
            let ni = rng.gen_range(0..parts.len());
            let part = &parts[ni];
            used.insert(ni);
            let co = if cfg.corunner {
                let others: Vec<usize> =
                    (0..parts.len()).filter(|&j| parts[j].units().is_disjoint(part.units())).collect();
                if others.is_empty() {
                    None
                } else {
                    let co = &parts[others[rng.gen_range(0..others.len())]];
                    let (f, grid, block, args) = dev.corunner(co.units().len())?;
                    let op =
                        Arc::new(OpDesc::Kernel(KernelLaunch::new(f, grid, block, 0, args, LaunchAttributes::none())));
                    co.submit(0, &op)?;
                    Some(co)
                }
            } else {
                None
            };
            run_ops(part, &ops)?;
            let out = dev.download(bufs.output, output_bytes)?;
            if out == reference_bytes {
                equal += 1;
            } else {
                distinct.insert(record::sha256_hex(&out));
            }
            if let Some(co) = co {
                drain(co)?;
            }
        }
        let vals = out_dtype.decode(&reference_bytes);
        let rel = reference::relative_error(&vals, &reference::compute(problem, &host_inputs));
        Ok(Case {
            name: problem.kernel().name().to_owned(),
            dtype: dtype.name().to_owned(),
            seed: Some(seed),
            variant: v.info.name.clone(),
            problem: Some(*problem),
            launch: Some(structure(p)),
            output: Output::new(
                out_dtype.name(),
                vec![problem.output_elems() as u64],
                &reference_bytes,
                cfg.keep_outputs,
            )?,
            invariance: Some(Invariance {
                runs: cfg.trials,
                bitwise_equal: equal,
                distinct_outputs: distinct.len(),
                nodes_used: used.len(),
                corunner: cfg.corunner,
            }),
            rel_error_vs_fp64: Some(rel),
        })
    })();
    for a in allocs {
        dev.free(a)?;
    }
    result
}

/// The simulated device: the suite's CPU reference ([`vitamin_kernels_cuda::cpu`]) registered as
/// its kernels.
pub struct SimSuite {
    sim: vitamin_hal::sim::SimBackend,
    kernels: HashMap<&'static str, FunctionRef>,
}

impl SimSuite {
    /// Registers the suite with `sim`.
    pub fn new(sim: vitamin_hal::sim::SimBackend) -> Self {
        let kernels = vitamin_kernels_cuda::sim::register(&sim).into_iter().collect();
        SimSuite { sim, kernels }
    }
}

impl SuiteDevice for SimSuite {
    type B = vitamin_hal::sim::SimBackend;

    fn backend(&self) -> &Self::B {
        &self.sim
    }

    fn host(&self) -> Host {
        let mut extra = std::collections::BTreeMap::new();
        extra.insert("arch".into(), format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS));
        extra.insert("expf".into(), "the host's libm (Rust f32::exp)".into());
        Host {
            vendor: "CPU reference".into(),
            device: self.sim.topology().device_name().to_owned(),
            backend: "sim".into(),
            driver: None,
            compiler: "rustc (vitamin_kernels_cuda::cpu: FP32, no contraction)".into(),
            simulated: true,
            hostname: record::hostname(),
            extra,
        }
    }

    fn prelude(&self) -> (&'static str, &'static str) {
        ("cpu", "")
    }

    fn compile(&self, _requested: &[Variant]) -> Result<Vec<CompiledVariant>> {
        Ok(vec![CompiledVariant {
            info: VariantInfo {
                name: CPU_VARIANT.into(),
                options: Vec::new(),
                source_sha256: record::sha256_hex(source::SUITE.as_bytes()),
                note: "the CPU reference: the suite's structure in FP32, every operation rounded as written (no \
                       contraction), IEEE division and square root, the host libm's expf; pairs with every GPU \
                       variant"
                    .into(),
            },
            kernels: self.kernels.clone(),
        }])
    }

    fn corunner(&self, units: usize) -> Result<(FunctionRef, Dim3, Dim3, KernelArgs)> {
        let f = self.sim.kernel("busy").context("the simulated device lacks its busy kernel")?;
        Ok((f, Dim3::x(units as u32 * 4), Dim3::x(128), KernelArgs::pack(&[&20_000u32.to_le_bytes()])))
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        Ok(self.sim.alloc(bytes))
    }

    fn free(&self, addr: u64) -> Result<()> {
        self.sim.free(addr).map_err(anyhow::Error::msg)
    }

    fn upload(&self, part: &vitamin_hal::sim::SimPartition, addr: u64, bytes: &[u8]) -> Result<()> {
        Ok(vitamin_kernels_cuda::sim::upload(part, addr, bytes)?)
    }

    fn download(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        self.sim.read_bytes(addr, len).map_err(anyhow::Error::msg)
    }
}

/// An NVIDIA GPU: the suite compiled by NVRTC once per variant.
pub struct CudaSuite<'a> {
    cuda: &'a vitamin_hal_cuda::CudaBackend,
    corunner_block_ns: u32,
}

impl<'a> CudaSuite<'a> {
    /// Wraps a CUDA backend.
    pub fn new(cuda: &'a vitamin_hal_cuda::CudaBackend, corunner_block_ns: u32) -> Self {
        CudaSuite { cuda, corunner_block_ns }
    }
}

impl SuiteDevice for CudaSuite<'_> {
    type B = vitamin_hal_cuda::CudaBackend;

    fn backend(&self) -> &Self::B {
        self.cuda
    }

    fn host(&self) -> Host {
        let caps = self.cuda.capabilities();
        let nvrtc = vitamin_hal_cuda::nvrtc::load()
            .map_or_else(|e| format!("NVRTC ? ({e})"), |(a, b)| format!("NVRTC {a}.{b}"));
        let mut extra = std::collections::BTreeMap::new();
        let (ma, mi) = caps.compute_capability;
        extra.insert("arch".into(), format!("sm_{ma}{mi}"));
        extra.insert("sm_count".into(), caps.sm_count.to_string());
        Host {
            vendor: "NVIDIA".into(),
            device: self.cuda.topology().device_name().to_owned(),
            backend: "cuda".into(),
            driver: Some(format!("CUDA {}", caps.driver_version_string())),
            compiler: nvrtc,
            simulated: false,
            hostname: record::hostname(),
            extra,
        }
    }

    fn prelude(&self) -> (&'static str, &'static str) {
        ("cuda", source::CUDA_PRELUDE)
    }

    fn compile(&self, requested: &[Variant]) -> Result<Vec<CompiledVariant>> {
        let text = source::cuda_suite_source();
        requested
            .iter()
            .map(|&v| {
                let (kernels, options) = vitamin_hal_cuda::determinism::compile_suite(self.cuda, v)?;
                Ok(CompiledVariant {
                    info: VariantInfo {
                        name: v.name().into(),
                        options,
                        source_sha256: record::sha256_hex(text.as_bytes()),
                        note: variant_note(v).into(),
                    },
                    kernels,
                })
            })
            .collect()
    }

    fn corunner(&self, units: usize) -> Result<(FunctionRef, Dim3, Dim3, KernelArgs)> {
        Ok((
            self.cuda.kernel("busy")?,
            Dim3::x(units as u32 * 4),
            Dim3::x(128),
            KernelArgs::pack(&[&self.corunner_block_ns.to_le_bytes()]),
        ))
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        Ok(self.cuda.alloc(bytes)?)
    }

    fn free(&self, addr: u64) -> Result<()> {
        Ok(self.cuda.free(addr)?)
    }

    fn upload(&self, _part: &vitamin_hal_cuda::CudaPartition, addr: u64, bytes: &[u8]) -> Result<()> {
        Ok(self.cuda.write(addr, bytes)?)
    }

    fn download(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        Ok(self.cuda.read(addr, len)?)
    }
}

/// What a GPU variant means for the bits.
pub fn variant_note(v: Variant) -> &'static str {
    match v {
        Variant::Default => "the compiler may contract a * b + c into one FMA (both compilers' default)",
        Variant::NoContract => "no contraction: each product and sum rounds as written, like the CPU reference",
        Variant::FastMath => "fast math: approximate division, square root and expf, denormals flushed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RecordConfig {
        RecordConfig {
            kernels: vec![SuiteKernel::Reduction, SuiteKernel::Softmax],
            dtypes: vec![DType::F32, DType::F16],
            seeds: vec![1],
            variants: vec![Variant::Default],
            trials: 3,
            binding_seed: 9,
            corunner: true,
            corunner_block_ns: 1000,
            keep_outputs: true,
            perturb: Vec::new(),
        }
    }

    fn nodes(sim: &vitamin_hal::sim::SimBackend) -> Vec<UnitSet> {
        let leaves = sim.topology().leaves();
        vec![leaves[0], leaves[1], leaves[2] | leaves[3], sim.topology().all_units()]
    }

    /// The simulated record: one CPU variant, every trial bitwise equal, outputs matching the
    /// host-memory CPU reference run of the same plan.
    #[test]
    fn the_simulated_record_is_invariant_and_matches_the_host_reference() {
        let dev = SimSuite::new(vitamin_hal::sim::SimBackend::preset("h200").unwrap());
        let rec = record(&dev, &nodes(&dev.sim), &cfg(), &mut |_, _, _| {}).expect("record");
        assert_eq!(rec.cases.len(), 4);
        assert_eq!(rec.variants.len(), 1);
        for c in &rec.cases {
            let inv = c.invariance.as_ref().expect("invariance");
            assert_eq!((inv.runs, inv.bitwise_equal, inv.distinct_outputs), (3, 3, 1), "{}", c.key());
            let p = c.problem.expect("problem");
            let d = DType::from_name(&c.dtype).expect("dtype");
            let host = vitamin_kernels_cuda::cpu::run_plan(&plan::fixed(&p, d), &p, d, &plan::inputs(&p, d, 1))
                .expect("host run");
            assert_eq!(c.output.decode().expect("decode").expect("kept"), host, "{}", c.key());
            assert!(c.rel_error_vs_fp64.expect("fp64") < 1e-2);
        }
    }

    #[test]
    fn a_perturbed_kernel_records_another_structure() {
        let dev = SimSuite::new(vitamin_hal::sim::SimBackend::preset("h200").unwrap());
        let mut c = cfg();
        let base = record(&dev, &nodes(&dev.sim), &c, &mut |_, _, _| {}).expect("record");
        c.perturb = vec![SuiteKernel::Reduction];
        let pert = record(&dev, &nodes(&dev.sim), &c, &mut |_, _, _| {}).expect("record");
        for (a, b) in base.cases.iter().zip(&pert.cases) {
            let same_structure =
                a.launch.as_ref().map(|l| &l.decomposition) == b.launch.as_ref().map(|l| &l.decomposition);
            assert_eq!(same_structure, a.name != "reduction", "{}", a.key());
            if same_structure {
                assert_eq!(a.output.sha256, b.output.sha256, "{}", a.key());
            }
        }
        assert_eq!(pert.config.expect("config").perturbed, ["reduction"]);
    }

    #[test]
    fn empty_selections_are_errors() {
        let dev = SimSuite::new(vitamin_hal::sim::SimBackend::preset("h200").unwrap());
        let mut c = cfg();
        c.seeds.clear();
        assert!(record(&dev, &nodes(&dev.sim), &c, &mut |_, _, _| {}).is_err());
    }
}
