//! The HIP backend's [`SuiteDevice`]: `vitamin determinism --record` on an AMD GPU (or on hal-hip's
//! test double).
//!
//! The suite is the shared source behind the HIP prelude ([`vitamin_kernels_hip::source`]),
//! compiled by hipRTC once per variant for the device's `gcnArchName`
//! (`--gpu-architecture=<arch>` and [`Variant::hip_options`]: `-ffp-contract=fast`,
//! `-ffp-contract=off` or `-ffast-math`), loaded with `hipModuleLoadData` and looked up with
//! `hipModuleGetFunction`. Cases run on hal-hip partitions (CU-masked streams of the pool's
//! nodes); the co-runner is [`CORUNNER_SOURCE`]'s `busy`, compiled the same way. The record states
//! the hipRTC version (`hiprtcVersion`), the HIP runtime (`hipRuntimeGetVersion`) and driver
//! (`hipDriverGetVersion`) versions, the architecture and the CU count.
//!
//! The test double (`VITAMIN_HIP_LIBRARY` naming hal-hip's fake `libamdhip64`) is recognised by
//! its code objects (text behind `FAKEHIPCO1`, where hipRTC gives an ELF or an offload bundle):
//! its records say `simulated: true` and name the double in the device, so that nobody mistakes
//! them for AMD hardware. No record from AMD hardware exists yet (docs/amd.md).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result};
use vitamin_hal::{Backend, Dim3, FunctionRef, KernelArgs};
use vitamin_hal_hip::{rtc, HipBackend, HipPartition};
use vitamin_kernels_cuda::source::Variant;

use crate::record::{self, Host, VariantInfo};
use crate::record_run::{variant_note, CompiledVariant, SuiteDevice};

/// The co-runner for AMD: each block spins for about `block_ns` nanoseconds on `wall_clock64`
/// (assumed to tick at 100 MHz, the MI200/MI300 constant clock; not measured here), with no
/// global-memory effect. Compiled behind the HIP prelude, like the suite.
pub const CORUNNER_SOURCE: &str = r#"
VT_KERNEL void busy(unsigned block_ns) {
  __shared__ volatile float pad[256];
  unsigned long long start = wall_clock64();
  float a = (float)threadIdx.x;
  while ((wall_clock64() - start) * 10ull < block_ns) a = a * 0.999f + 1.0f;
  pad[threadIdx.x % 256u] = a;
}
"#;

/// Options passed before [`Variant::hip_options`] for every variant but `fastmath`: clang's own
/// defaults for HIP device code (IEEE semantics, correctly rounded FP32 division and square root),
/// stated explicitly so that a record lists them, as NVRTC records list `--fmad=true`. hipcc
/// 5.2.3 (clang 15) gives byte-identical gfx90a assembly for the suite with and without them,
/// with contraction on and off (checked by hand, 2026-12-01); that hipRTC accepts them is not
/// verified (no ROCm host).
pub const HIP_IEEE_OPTIONS: &[&str] = &["-fno-fast-math", "-fhip-fp32-correctly-rounded-divide-sqrt"];

/// Every option after `--gpu-architecture` for variant `v`.
pub fn variant_options(v: Variant) -> Vec<&'static str> {
    let mut o = match v {
        Variant::FastMath => Vec::new(),
        Variant::Default | Variant::NoContract => HIP_IEEE_OPTIONS.to_vec(),
    };
    o.extend_from_slice(v.hip_options());
    o
}

/// What produced a code object, from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeObject {
    /// An AMDGPU ELF.
    Elf,
    /// A clang offload bundle (holding ELFs).
    Bundle,
    /// hal-hip's test double (its fake hipRTC's text format).
    TestDouble,
    /// Anything else.
    Unknown,
}

impl CodeObject {
    /// Classifies `code`.
    pub fn of(code: &[u8]) -> CodeObject {
        if code.starts_with(b"\x7fELF") {
            CodeObject::Elf
        } else if code.starts_with(b"__CLANG_OFFLOAD_BUNDLE__") {
            CodeObject::Bundle
        } else if code.starts_with(b"FAKEHIPCO1\n") {
            CodeObject::TestDouble
        } else {
            CodeObject::Unknown
        }
    }

    fn describe(self) -> &'static str {
        match self {
            CodeObject::Elf => "AMDGPU ELF",
            CodeObject::Bundle => "clang offload bundle",
            CodeObject::TestDouble => "HIP test double (hal-hip/tests/fake: kernels run on the CPU)",
            CodeObject::Unknown => "unrecognised format",
        }
    }
}

/// The HIP source of the co-runner.
pub fn corunner_source() -> String {
    format!("{}\n{CORUNNER_SOURCE}", vitamin_kernels_hip::PRELUDE)
}

/// Compiles `source` with the hipRTC that goes with `hip`'s runtime library, for its `arch`, with
/// `options` (after `--gpu-architecture`).
fn compile(hip: &HipBackend, source: &str, file: &str, options: &[&str]) -> Result<Vec<u8>> {
    let caps = hip.capabilities();
    rtc::compile_for(Some(&caps.library), source, file, &caps.arch, options)
        .with_context(|| format!("hipRTC compiling {file} for {} {options:?}", caps.arch))
}

/// An AMD GPU (or the test double): the suite compiled by hipRTC once per variant.
pub struct HipSuite<'a> {
    hip: &'a HipBackend,
    corunner_block_ns: u32,
    busy: FunctionRef,
    code_object: CodeObject,
}

impl<'a> HipSuite<'a> {
    /// Compiles and loads the co-runner on `hip` (which also tells what kind of code objects this
    /// hipRTC makes).
    pub fn new(hip: &'a HipBackend, corunner_block_ns: u32) -> Result<Self> {
        let code = compile(hip, &corunner_source(), "vitamin_corunner.hip", &[])?;
        let busy = hip
            .load_module(&code, &["busy"])
            .context("loading the co-runner")?
            .pop()
            .context("the co-runner module has no busy kernel")?;
        Ok(HipSuite { hip, corunner_block_ns, busy, code_object: CodeObject::of(&code) })
    }

    /// Whether this is hal-hip's test double rather than a HIP runtime on an AMD GPU.
    pub fn is_test_double(&self) -> bool {
        self.code_object == CodeObject::TestDouble
    }
}

impl SuiteDevice for HipSuite<'_> {
    type B = HipBackend;

    fn backend(&self) -> &Self::B {
        self.hip
    }

    fn host(&self) -> Host {
        let caps = self.hip.capabilities();
        let compiler = rtc::version_for(Some(&caps.library))
            .map_or_else(|e| format!("hipRTC ? ({e})"), |(a, b)| format!("hipRTC {a}.{b}"));
        let driver_version = rtc::driver_version(&caps.library).map_or_else(|e| format!("? ({e})"), |d| d.to_string());
        let driver = format!(
            "HIP runtime {} (hipRuntimeGetVersion {}), hipDriverGetVersion {driver_version}",
            caps.runtime_version_string(),
            caps.runtime_version
        );
        let mut extra = BTreeMap::new();
        extra.insert("arch".into(), caps.arch.clone());
        extra.insert("cu_count".into(), caps.cu_count.to_string());
        extra.insert("xcds".into(), caps.xcds.to_string());
        extra.insert("wgp_mode".into(), caps.wgp_mode.to_string());
        extra.insert("hip_library".into(), caps.library.clone());
        if let Ok(p) = rtc::library_path_for(Some(&caps.library)) {
            extra.insert("hiprtc_library".into(), p);
        }
        extra.insert("code_object".into(), self.code_object.describe().into());
        let device = self.hip.topology().device_name().to_owned();
        Host {
            vendor: "AMD".into(),
            device: if self.is_test_double() {
                format!("{device} [HIP test double, not AMD hardware]")
            } else {
                device
            },
            backend: "hip".into(),
            driver: Some(driver),
            compiler,
            simulated: self.is_test_double(),
            hostname: record::hostname(),
            extra,
        }
    }

    fn prelude(&self) -> (&'static str, &'static str) {
        ("hip", vitamin_kernels_hip::PRELUDE)
    }

    fn compile(&self, requested: &[Variant]) -> Result<Vec<CompiledVariant>> {
        let text = vitamin_kernels_hip::source();
        let arch = self.hip.capabilities().arch.clone();
        let names = vitamin_kernels_hip::suite_kernel_names();
        requested
            .iter()
            .map(|&v| {
                let extra = variant_options(v);
                let code = compile(self.hip, &text, "vitamin_suite.hip", &extra)?;
                let functions =
                    self.hip.load_module(&code, &names).with_context(|| format!("loading the {v} suite module"))?;
                let mut options = vec![format!("--gpu-architecture={arch}")];
                options.extend(extra.iter().map(|o| o.to_string()));
                let mut note = variant_note(v).to_owned();
                if CodeObject::of(&code) == CodeObject::TestDouble {
                    note.push_str(match v {
                        Variant::NoContract => " (HIP test double: plain C arithmetic)",
                        _ => {
                            " (HIP test double: modelled as every a * b + c of the source fused into fmaf, not \
                             clang's choice of fusions; no approximate math)"
                        }
                    });
                }
                Ok(CompiledVariant {
                    info: VariantInfo {
                        name: v.name().into(),
                        options,
                        source_sha256: record::sha256_hex(text.as_bytes()),
                        note,
                    },
                    kernels: names.iter().copied().zip(functions).collect::<HashMap<_, _>>(),
                })
            })
            .collect()
    }

    fn corunner(&self, units: usize) -> Result<(FunctionRef, Dim3, Dim3, KernelArgs)> {
        Ok((
            self.busy.clone(),
            Dim3::x(units as u32 * 4),
            Dim3::x(128),
            KernelArgs::pack(&[&self.corunner_block_ns.to_le_bytes()]),
        ))
    }

    fn alloc(&self, bytes: usize) -> Result<u64> {
        Ok(self.hip.alloc(bytes)?)
    }

    fn free(&self, addr: u64) -> Result<()> {
        Ok(self.hip.free(addr)?)
    }

    fn upload(&self, _part: &HipPartition, addr: u64, bytes: &[u8]) -> Result<()> {
        Ok(self.hip.write(addr, bytes)?)
    }

    fn download(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        Ok(self.hip.read(addr, len)?)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use vitamin_hal::Backend;
    use vitamin_kernels_cuda::plan::{self, DType, Problem, SuiteKernel};
    use vitamin_kernels_cuda::{cpu, reference};

    use super::*;
    use crate::record_run::{self, RecordConfig};

    /// hal-hip's test double, built once per test binary; `None` (and SKIPPED) where it cannot be
    /// built (no HIP headers or C compiler).
    fn double() -> Option<PathBuf> {
        static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
        // Next to the test binary (target/debug/deps), like the other tests' builds of the double.
        let exe = std::env::current_exe().expect("test binary path");
        let dir = exe.parent().map_or_else(std::env::temp_dir, |d| d.join("hipfake-record"));
        match BUILT.get_or_init(|| vitamin_hal_hip::test_double::build(&dir)) {
            Ok(p) => Some(p.clone()),
            Err(why) => {
                eprintln!("SKIPPED: the HIP test double cannot be built here ({why})");
                None
            }
        }
    }

    fn backend(lib: &std::path::Path) -> HipBackend {
        HipBackend::with_library(Some(lib), 0, vitamin_hal_hip::StreamLimits::default()).expect("the double loads")
    }

    fn small_problem() -> impl Strategy<Value = Problem> {
        prop_oneof![
            (1u32..6000).prop_map(|n| Problem::Reduction { n }),
            (1u32..40, 1u32..40, 1u32..200).prop_map(|(m, n, k)| Problem::Gemm { m, n, k }),
            (1u32..5, 1u32..400).prop_map(|(rows, cols)| Problem::LayerNorm { rows, cols }),
            (1u32..20, 1u32..400).prop_map(|(m, k)| Problem::Gemv { m, k }),
            (1u32..5, 1u32..400).prop_map(|(rows, cols)| Problem::Softmax { rows, cols }),
            (1u32..40, 1u32..32).prop_map(|(len, dim)| Problem::Attention { len, dim }),
        ]
    }

    /// The double's suite kernels against vitamin's CPU reference on random shapes, seeds and
    /// decompositions: built with `-ffp-contract=off` they compute the same operations in the same
    /// order (and call the same libm `expf`), so the bytes must be equal; built with contraction
    /// they compute the same function within the output type's rounding.
    #[test]
    fn the_doubles_suite_kernels_are_the_cpu_reference() {
        let Some(lib) = double() else { return };
        let hip = backend(&lib);
        let dev = HipSuite::new(&hip, 1000).expect("co-runner");
        assert!(dev.is_test_double());
        let variants = dev.compile(&[Variant::NoContract, Variant::Default]).expect("compiles");
        assert_eq!(
            variants[0].info.options,
            [
                "--gpu-architecture=gfx942:sramecc+:xnack-",
                "-fno-fast-math",
                "-fhip-fp32-correctly-rounded-divide-sqrt",
                "-ffp-contract=off"
            ]
        );
        let whole = hip.create_partition(&hip.topology().all_units(), 1).expect("whole device");
        let check = |(p, di, units, seed): (Problem, usize, usize, u64)| {
            let d = DType::ALL[di];
            prop_assume!(p.validate().is_ok());
            let x = plan::inputs(&p, d, seed);
            let pl = plan::plan(&p, d, units);
            let host = cpu::run_plan(&pl, &p, d, &x).expect("host run");
            let off = record_run::run_plan_once(&dev, &whole, &variants[0].kernels, &p, d, &pl, &x).expect("runs");
            prop_assert!(
                off == host,
                "{:?} {} {}: the nocontract double differs from the CPU reference",
                p,
                d,
                pl.decomposition
            );
            let on = record_run::run_plan_once(&dev, &whole, &variants[1].kernels, &p, d, &pl, &x).expect("runs");
            let od = p.output_dtype(d);
            let err = reference::conditioned_error(&p, &x, &od.decode(&on));
            let tol = match od {
                DType::F32 => 1e-5,
                DType::Bf16 => 1e-2,
                DType::F16 => 2e-3,
            };
            prop_assert!(err < tol, "{:?} {}: contracted relative error {:e}", p, d, err);
            Ok(())
        };
        // A reduction whose terms cancel: the plain relative error failed it on a fresh clone.
        check((Problem::Reduction { n: 1551 }, 0, 1, 2409890226163912672)).expect("regression case");
        let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
        runner.run(&(small_problem(), 0usize..3, 1usize..300, any::<u64>()), check).expect("property holds");
    }

    /// A record over the double: HIP host fields, both variants with their hipRTC options, every
    /// trial on a random CU-masked node bitwise equal.
    #[test]
    fn a_record_over_the_double() {
        let Some(lib) = double() else { return };
        let hip = backend(&lib);
        let dev = HipSuite::new(&hip, 1000).expect("co-runner");
        let leaves = hip.topology().leaves();
        let nodes = vec![leaves[0], leaves[1], leaves[2] | leaves[3], hip.topology().all_units()];
        let cfg = RecordConfig {
            kernels: vec![SuiteKernel::SplitKGemm, SuiteKernel::Softmax],
            dtypes: vec![DType::F32, DType::Bf16],
            seeds: vec![4],
            variants: vec![Variant::Default, Variant::NoContract],
            trials: 3,
            binding_seed: 1,
            corunner: true,
            corunner_block_ns: 1000,
            keep_outputs: true,
            perturb: Vec::new(),
        };
        let rec = record_run::record(&dev, &nodes, &cfg, &mut |_, _, _| {}).expect("record");
        assert_eq!((rec.host.vendor.as_str(), rec.host.backend.as_str()), ("AMD", "hip"));
        assert!(rec.host.simulated && rec.host.device.contains("HIP test double"), "{:?}", rec.host);
        assert_eq!(rec.host.compiler, "hipRTC 5.2");
        assert!(
            rec.host.driver.as_deref().is_some_and(|d| d.contains("hipDriverGetVersion 50221153")),
            "{:?}",
            rec.host.driver
        );
        assert_eq!(rec.host.extra["cu_count"], "304");
        assert_eq!(rec.source.as_ref().expect("source").prelude, "hip");
        let names: Vec<&str> = rec.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["default", "nocontract"]);
        assert_eq!(rec.variants[0].options.last().map(String::as_str), Some("-ffp-contract=fast"));
        assert_eq!(rec.cases.len(), 8);
        for c in &rec.cases {
            let inv = c.invariance.as_ref().expect("invariance");
            assert_eq!((inv.runs, inv.bitwise_equal, inv.distinct_outputs), (3, 3, 1), "{}", c.key());
        }
        // Contraction changes the FP32 GEMM (16 products per k-tile fused), not softmax (no product).
        let digest = |v: &str, k: &str| {
            rec.cases.iter().find(|c| c.variant == v && c.key() == k).expect("case").output.sha256.clone()
        };
        assert_ne!(digest("default", "splitk_gemm/f32/seed 4"), digest("nocontract", "splitk_gemm/f32/seed 4"));
        assert_eq!(digest("default", "softmax/f32/seed 4"), digest("nocontract", "softmax/f32/seed 4"));
    }

    #[test]
    fn code_objects_are_told_apart_by_their_first_bytes() {
        assert_eq!(CodeObject::of(b"\x7fELF\x02\x01"), CodeObject::Elf);
        assert_eq!(CodeObject::of(b"__CLANG_OFFLOAD_BUNDLE____hip"), CodeObject::Bundle);
        assert_eq!(CodeObject::of(b"FAKEHIPCO1\n// options: \n"), CodeObject::TestDouble);
        assert_eq!(CodeObject::of(b""), CodeObject::Unknown);
    }

    /// The co-runner, and the suite with the options a `nocontract` record passes, compile with
    /// Debian's hipcc (the suite's own check is kernels/hip/tests/hipcc.rs); SKIPPED without hipcc.
    #[test]
    fn the_corunner_and_the_record_options_compile_with_hipcc() {
        let hipcc = std::env::var_os("HIPCC").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("hipcc"));
        if !std::process::Command::new(&hipcc).arg("--version").output().is_ok_and(|o| o.status.success()) {
            eprintln!("SKIPPED: hipcc not found (CI installs Debian's hipcc; set HIPCC to use another)");
            return;
        }
        let exe = std::env::current_exe().expect("test binary path");
        let dir = exe.parent().expect("deps folder").join(format!("hipcc-record-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let build = |name: &str, source: &str, options: &[&str]| -> Vec<u8> {
            let (src, out) = (dir.join(format!("{name}.hip")), dir.join(format!("{name}.co")));
            std::fs::write(&src, source).expect("write source");
            let o = std::process::Command::new(&hipcc)
                .args(["-x", "hip", "--genco", "-O3", "--offload-arch=gfx90a"])
                .args(options)
                .arg(&src)
                .arg("-o")
                .arg(&out)
                .output()
                .expect("hipcc runs");
            let image = std::fs::read(&out).unwrap_or_default();
            assert!(
                o.status.success(),
                "hipcc {name} {options:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(CodeObject::of(&image), CodeObject::Bundle);
            image
        };
        let busy = build("corunner", &corunner_source(), &[]);
        let suite = build("suite", &vitamin_kernels_hip::source(), &variant_options(Variant::NoContract));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(busy.windows(7).any(|w| w == b"busy.kd"), "no kernel descriptor for busy");
        assert!(suite.windows(12).any(|w| w == b"softmax_f32."), "no softmax_f32 in the suite bundle");
    }

    #[test]
    fn the_corunner_is_hip_source_behind_the_prelude() {
        let s = corunner_source();
        assert!(s.starts_with(vitamin_kernels_hip::PRELUDE) && s.contains("VT_KERNEL void busy(unsigned block_ns)"));
    }
}
