//! The conformance suite on the AMD backend (`hal-hip`) over the HIP test double: a simulated
//! MI300X (304 CUs, 8 XCDs) whose CU-masked streams run the reference kernels on CPU worker
//! threads. Nothing here touches AMD hardware. Without the HIP headers (Debian's
//! `libamdhip64-dev`) or a C compiler every test prints `SKIPPED` and returns.
//!
//! On a ROCm host, `VITAMIN_HIP_CONFORMANCE=device` runs the same suite on the real runtime and
//! device instead (the reference kernels compiled with the real hipRTC; docs/amd.md). That has
//! never been run: this project has no AMD GPU.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use vitamin_hal::{Backend, FunctionRef, HalError, KernelArgs, Topology, UnitSet};
use vitamin_hal_hip::test_double::{self, TEST_KERNELS, TEST_KERNEL_NAMES};
use vitamin_hal_hip::{HipBackend, HipPartition, StreamLimits};
use vitamin_tests::TestDevice;

/// `HipBackend` with the suite's test services and its loaded reference kernels.
#[derive(Debug, Clone)]
struct Hip(HipBackend, Vec<FunctionRef>);

impl Backend for Hip {
    type Partition = HipPartition;
    fn topology(&self) -> &Topology {
        self.0.topology()
    }
    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<HipPartition, HalError> {
        self.0.create_partition(units, lanes)
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
    fn wait_for_progress(&self, timeout: Duration) -> Result<bool, HalError> {
        self.0.wait_for_progress(timeout)
    }
}

impl TestDevice for Hip {
    fn alloc_f32(&self, values: &[f32]) -> u64 {
        let a = self.0.alloc(values.len().max(1) * 4).expect("device memory");
        self.0.write_f32s(a, values).expect("upload");
        a
    }
    fn read_f32(&self, addr: u64, count: usize) -> Vec<f32> {
        self.0.read_f32s(addr, count).expect("download")
    }
    fn function(&self, name: &str) -> FunctionRef {
        self.1.iter().find(|f| f.name() == name).cloned().unwrap_or_else(|| panic!("kernel {name} not loaded"))
    }
    fn busy_args(&self) -> KernelArgs {
        KernelArgs::pack(&[&1_000u32.to_le_bytes()])
    }
}

/// Environment variable choosing the real runtime and device (`device`) instead of the double.
const TARGET_ENV: &str = "VITAMIN_HIP_CONFORMANCE";

/// The backend on the double (built once per process), or on the real device with
/// `VITAMIN_HIP_CONFORMANCE=device`, or `None` after printing why.
fn hip_on_the_double() -> Option<Hip> {
    if std::env::var(TARGET_ENV).as_deref() == Ok("device") {
        let b = match HipBackend::new() {
            Ok(b) => b,
            Err(e @ HalError::Unsupported { .. }) => {
                eprintln!("SKIPPED: {TARGET_ENV}=device but no usable AMD GPU ({e})");
                return None;
            }
            Err(e) => panic!("the HIP backend failed on a machine with a HIP runtime: {e}"),
        };
        let kernels = b.compile_and_load(TEST_KERNELS, "test_kernels.hip", TEST_KERNEL_NAMES).expect("kernels");
        return Some(Hip(b, kernels));
    }
    static DOUBLE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let lib =
        DOUBLE.get_or_init(|| test_double::build(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hipfake-suite")));
    let lib = match lib {
        Ok(l) => l,
        Err(why) => {
            eprintln!("SKIPPED: the HIP test double cannot be built here ({why})");
            return None;
        }
    };
    let b = HipBackend::with_library(Some(lib), 0, StreamLimits::default()).expect("the HIP backend on the double");
    let kernels = b.compile_and_load(TEST_KERNELS, "test_kernels.hip", TEST_KERNEL_NAMES).expect("kernels");
    Some(Hip(b, kernels))
}

vitamin_tests::conformance_tests!(hip_on_the_double());

/// The double's reduction gives the simulated MI300X's bits (same block structure), so the
/// conformance results on both mean the same thing.
#[test]
fn reduction_bits_match_the_simulator() {
    let Some(d) = hip_on_the_double() else { return };
    let sim = vitamin_hal::sim::SimBackend::preset("mi300x").unwrap();
    let n = 1u32 << 16;
    let input = vitamin_tests::reduction_input(n as usize);
    let (x, xs) = (d.alloc_f32(&input), sim.alloc_f32(&input));
    let p = d.create_partition(&d.topology().leaves()[5], 1).unwrap();
    let ps = sim.create_partition(&sim.topology().leaves()[5], 1).unwrap();
    for grid in [64u32, 333, 1024] {
        assert_eq!(vitamin_tests::reduce_on(&d, &p, x, n, grid), vitamin_tests::reduce_on(&sim, &ps, xs, n, grid));
    }
}
