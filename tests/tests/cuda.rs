//! The conformance suite and GPU checks on the NVIDIA backend (`hal-cuda`).
//!
//! Every test needs a CUDA GPU with a green-context driver and NVRTC. Without them each test
//! prints `SKIPPED: no CUDA GPU (<reason>)` to stderr and returns (CI has no GPU); on the GPU
//! machine `bench/gpu/run_gpu_check.sh` runs them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{
    Backend, Copy, Dim3, Endpoint, Fill, FunctionRef, GraphLaunch, HalError, HostFunction, Incompatibility, KernelArgs,
    KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition, Topology, UnitSet,
};
use vitamin_hal_cuda::{census, determinism, CudaBackend, CudaPartition};
use vitamin_tests::{reduce_on, reduction_input, sample_partitions, TestDevice};

/// `CudaBackend` with the conformance suite's test services (a newtype: both the trait and the
/// backend live in other crates).
#[derive(Debug, Clone)]
struct Cuda(CudaBackend);

impl Backend for Cuda {
    type Partition = CudaPartition;
    fn topology(&self) -> &Topology {
        self.0.topology()
    }
    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<CudaPartition, HalError> {
        self.0.create_partition(units, lanes)
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
    fn wait_for_progress(&self, timeout: Duration) -> Result<bool, HalError> {
        self.0.wait_for_progress(timeout)
    }
}

impl TestDevice for Cuda {
    fn alloc_f32(&self, values: &[f32]) -> u64 {
        let a = self.0.alloc(values.len().max(1) * 4).expect("device memory");
        self.0.write_f32s(a, values).expect("upload");
        a
    }
    fn read_f32(&self, addr: u64, count: usize) -> Vec<f32> {
        self.0.read_f32s(addr, count).expect("download")
    }
    fn function(&self, name: &str) -> FunctionRef {
        self.0.kernel(name).unwrap_or_else(|e| panic!("kernel {name}: {e}"))
    }
    fn busy_args(&self) -> KernelArgs {
        KernelArgs::pack(&[&20_000u32.to_le_bytes()])
    }
}

/// The CUDA backend, or `None` after printing why it is unusable here.
fn cuda_or_skip() -> Option<Cuda> {
    let backend = match CudaBackend::new() {
        Ok(b) => b,
        Err(e @ HalError::Unsupported { .. }) => {
            eprintln!("SKIPPED: no CUDA GPU ({e})");
            return None;
        }
        // A GPU is there but fails (e.g. a sticky error from an earlier test): that is a failure.
        Err(e) => panic!("the CUDA backend failed on a machine with a driver: {e}"),
    };
    match backend.kernel("reduce_partial") {
        Ok(_) => Some(Cuda(backend)),
        Err(e @ HalError::Unsupported { .. }) => {
            eprintln!("SKIPPED: no CUDA GPU (the driver works but vitamin's kernels cannot be compiled: {e})");
            None
        }
        Err(e) => panic!("vitamin's kernels failed to compile or load: {e}"),
    }
}

vitamin_tests::conformance_tests!(cuda_or_skip());

fn op(f: FunctionRef, grid: u32, block: u32, args: KernelArgs) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(f, Dim3::x(grid), Dim3::x(block), 0, args, LaunchAttributes::none())))
}

#[test]
fn without_a_gpu_the_backend_is_unsupported_with_a_reason() {
    match CudaBackend::new() {
        Ok(b) => assert!(b.topology().unit_count() > 0, "a usable backend has SMs"),
        Err(HalError::Unsupported { backend, reason }) => {
            assert_eq!(backend, "cuda");
            assert!(reason.len() > 10, "the reason says what is missing: {reason}");
        }
        Err(other) => panic!("no GPU must be Unsupported, got {other}"),
    }
}

#[test]
fn topology_is_one_split_with_the_remainder_as_last_leaf() {
    let Some(d) = cuda_or_skip() else { return };
    let top = d.topology();
    let caps = d.0.capabilities();
    let min = caps.min_partition_size as usize;
    assert_eq!(top.unit_count(), caps.sm_count as usize);
    let leaves = top.leaves();
    for leaf in &leaves[..leaves.len() - 1] {
        assert_eq!(leaf.len(), min, "every split group has the minimum size");
    }
    assert!(leaves.last().expect("leaves").len() >= min.min(top.unit_count()) || leaves.len() == 1);
    let mut next = 0;
    for leaf in leaves {
        assert_eq!(*leaf, UnitSet::range(next, next + leaf.len()), "logical indices are consecutive");
        next += leaf.len();
    }
    eprintln!("{top}");
}

/// The CUDA reduction kernels compute exactly what the simulator's CPU references compute.
#[test]
fn reduction_bits_match_the_simulator() {
    let Some(d) = cuda_or_skip() else { return };
    let sim = SimBackend::preset("h200").unwrap();
    let n = 1 << 16;
    let x = reduction_input(n);
    let (xg, xs) = (d.alloc_f32(&x), sim.alloc_f32(&x));
    let pg = d.create_partition(&d.topology().leaves()[0], 1).expect("leaf");
    let ps = sim.create_partition(&sim.topology().leaves()[0], 1).expect("sim leaf");
    for grid in [1u32, 7, 96, 256, 1024] {
        assert_eq!(reduce_on(&d, &pg, xg, n as u32, grid), reduce_on(&sim, &ps, xs, n as u32, grid), "grid {grid}");
    }
}

/// A launch bound to a node runs on exactly that node's physical SMs.
#[test]
fn smid_census_matches_the_leaves() {
    let Some(d) = cuda_or_skip() else { return };
    let top = d.topology().clone();
    let parts: Vec<CudaPartition> =
        sample_partitions(&top).iter().map(|u| d.create_partition(u, 1).expect("partition")).collect();
    let report = census::check_nodes(&d.0, &parts.iter().collect::<Vec<_>>()).expect("census");
    assert!(report.leaves_disjoint_and_sized, "leaves: {:?}", report.leaves);
    // The whole-device node runs on the primary context unless VITAMIN_ROOT_CONTEXT=green; its
    // kernels must still cover exactly its SMs (all of them), as every green node's do.
    let root_green = std::env::var(vitamin_hal_cuda::ROOT_CONTEXT_ENV).is_ok_and(|v| v.trim() == "green");
    for (n, p) in report.nodes.iter().zip(&parts) {
        assert!(n.exact, "{} ran on {:?}", n.units, n.physical);
        assert_eq!(n.physical.len(), n.size);
        let whole = n.size == top.unit_count();
        assert_eq!(p.on_primary_context(), whole && !root_green, "{}: context", n.units);
    }
}

/// Which SMs a graph's kernels use when the graph, captured in the primary context, is launched as
/// one op (`OpDesc::Graph`, `cuGraphLaunch` on the node's green-context stream) on nodes of
/// different sizes (issue 8: the measurement). Prints the census as JSON (and writes it to
/// `$VITAMIN_GRAPH_CENSUS_OUT` if set). Measured on the H200 (driver 580): the graph's kernels ran
/// on all 132 SMs from every node, so `CudaPartition::can_execute` accepts a graph without copies
/// only on a node holding every SM. This test asserts both: if a driver ever confines graph kernels
/// to the green context, the census assertion fails and the restriction should be lifted. And the
/// same launch carrying the graph's per-partition copies (what the shim attaches to a confinable
/// graph) runs the copy, whose kernels use exactly the node's SMs.
#[test]
fn graph_kernels_use_every_sm_unless_the_launch_runs_a_partition_copy() {
    let Some(d) = cuda_or_skip() else { return };
    let top = d.topology().clone();
    let parts: Vec<CudaPartition> =
        sample_partitions(&top).iter().map(|u| d.create_partition(u, 1).expect("partition")).collect();
    let report = census::check_graph_nodes(&d.0, &parts.iter().collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("graph census failed (launching a graph on a green-context stream?): {e}"));
    let json = report.to_json();
    eprintln!("graph census: {json}");
    if let Some(path) = std::env::var_os("VITAMIN_GRAPH_CENSUS_OUT") {
        std::fs::write(&path, &json).expect("write the graph census");
    }
    let device = top.unit_count();
    for (n, p) in report.nodes.iter().zip(&parts) {
        assert_eq!(n.graph_kernels_physical.len(), census::GRAPH_KERNELS);
        assert_eq!(n.kernel_physical.len(), n.size, "{}: a plain launch used {:?}", n.units, n.kernel_physical);
        // `can_execute` looks at what the op is, not at the handle.
        let graph = OpDesc::Graph(GraphLaunch::new(0, "probe"));
        if n.size < device {
            assert!(
                !n.within,
                "{}: the graph's kernels stayed within the node ({:?}): lift the whole-device rule",
                n.units, n.graph_kernels_physical
            );
            assert!(
                matches!(p.can_execute(&graph), Err(Incompatibility::WholeDevice { .. })),
                "{}: a graph must be refused below the whole device",
                n.units
            );
        } else {
            assert!(n.exact, "whole device: the graph's kernels used {:?}", n.graph_kernels_physical);
            assert!(p.can_execute(&graph).is_ok(), "the whole device must take a graph");
        }
        assert!(n.copy_exact, "{}: the copy's kernels used {:?}", n.units, n.copy_kernels_physical);
    }
}

/// Copies (staged, device-to-device, to the host), fills and host functions on green streams.
#[test]
fn copies_fills_and_host_functions_take_effect_in_order() {
    let Some(d) = cuda_or_skip() else { return };
    let p = d.create_partition(&d.topology().leaves()[1], 1).expect("leaf");
    let a = d.alloc_zeroed_f32(256);
    let b = d.alloc_zeroed_f32(256);
    let values: Vec<f32> = (0..256).map(|i| i as f32 * 0.5).collect();
    let staged: Arc<[u8]> = values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into();
    let mut host_dst = vec![0u8; 1024];
    let host_addr = host_dst.as_mut_ptr() as u64;
    let seen = Arc::new(AtomicU32::new(0));
    let s = seen.clone();
    let ops = [
        OpDesc::Copy(Copy::new(Endpoint::Device(a), Endpoint::Staged(staged), 1024).expect("copy")),
        OpDesc::Copy(Copy::new(Endpoint::Device(b), Endpoint::Device(a), 1024).expect("copy")),
        OpDesc::Fill(Fill::new(a, 0x3f80_0000, 4, 128).expect("fill")),
        OpDesc::Copy(Copy::new(Endpoint::Host(host_addr), Endpoint::Device(b), 1024).expect("copy")),
        OpDesc::Host(HostFunction::new("after-copies", move || s.store(1, Ordering::SeqCst))),
    ];
    let mut last = None;
    for o in ops {
        last = Some(p.submit(0, &Arc::new(o)).expect("submit"));
    }
    p.wait_for(last.expect("fence")).expect("complete");
    assert_eq!(d.read_f32(b, 256), values, "staged then device-to-device copy");
    let a_now = d.read_f32(a, 256);
    assert!(a_now[..128].iter().all(|&v| v == 1.0) && a_now[128..] == values[128..], "fill of the first half");
    let back: Vec<f32> = host_dst.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(back, values, "device-to-host copy");
    assert_eq!(seen.load(Ordering::SeqCst), 1, "host function ran");
}

/// Closing partitions with work in flight drains and destroys them without error, and repeated
/// create/close cycles hold no more device memory than the driver itself keeps per destroyed green
/// context.
///
/// Measured on driver 580.159.04 (docs/cuda-notes.md): `cuGreenCtxDestroy` returns none of the
/// ~4 MiB a green context takes (`cuMemGetInfo`), so every cycle of 16 contexts keeps ~64 MiB.
/// vitamin creates its pool once, so this costs nothing at run time; the bound below catches
/// anything this crate would leak on top (streams, events, allocations).
#[test]
fn closed_partitions_drain_and_leak_nothing_beyond_the_driver() {
    let Some(d) = cuda_or_skip() else { return };
    let top = d.topology().clone();
    let busy = d.function("busy");
    let cycle = || {
        let parts: Vec<CudaPartition> = top.leaves().iter().map(|l| d.create_partition(l, 2).expect("leaf")).collect();
        for p in &parts {
            p.submit(1, &op(busy.clone(), 8, 64, d.busy_args())).expect("work to drain");
        }
        for p in parts {
            p.close().expect("drain and destroy");
        }
    };
    let mib = |a: u64, b: u64| (a as f64 - b as f64) / 1048576.0;
    cycle();
    let contexts = top.leaves().len() as f64;
    /// Device memory the driver keeps per destroyed green context (measured), plus slack.
    const DRIVER_RETAINED_MIB: f64 = 4.0;
    let bound = contexts * DRIVER_RETAINED_MIB + 8.0;
    for round in 1..=3 {
        let (before, _) = d.0.memory_info().expect("mem");
        cycle();
        let (after, _) = d.0.memory_info().expect("mem");
        let kept = mib(before, after);
        eprintln!("cycle {round}: {kept:.1} MiB kept after closing {contexts} green contexts (bound {bound:.0})");
        assert!(kept <= bound, "cycle {round}: {kept:.1} MiB kept, more than the driver's own retention");
    }
}

/// A cooperative launch that fits is accepted on the whole device and runs to completion.
#[test]
fn a_fitting_cooperative_launch_runs() {
    let Some(d) = cuda_or_skip() else { return };
    let whole = d.create_partition(&d.topology().all_units(), 1).expect("device");
    let coop = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        d.function("busy"),
        Dim3::x(d.topology().unit_count() as u32 * 2),
        Dim3::x(64),
        0,
        d.busy_args(),
        LaunchAttributes::new(true, None, None, Vec::new()),
    )));
    let f = whole.submit(0, &coop).expect("cooperative launch");
    whole.wait_for(f).expect("completes");
    let cluster = OpDesc::Kernel(KernelLaunch::new(
        d.function("busy"),
        Dim3::x(16),
        Dim3::x(64),
        0,
        d.busy_args(),
        LaunchAttributes::new(false, Some(Dim3::x(2)), None, Vec::new()),
    ));
    if d.0.capabilities().clusters {
        assert_eq!(whole.can_execute(&cluster), Ok(()), "a 2-block cluster fits the whole device");
        let f = whole.submit(0, &Arc::new(cluster)).expect("cluster launch");
        whole.wait_for(f).expect("completes");
    }
}

/// A short determinism run: fixed structure bitwise equal on every node, reshaping deviates.
#[test]
fn determinism_suite_smoke() {
    let Some(d) = cuda_or_skip() else { return };
    let top = d.topology().clone();
    let nodes = sample_partitions(&top);
    let cfg = determinism::Config { trials: 12, census: false, ..Default::default() };
    let report = determinism::run(&d.0, &nodes, &cfg, &mut |_| {}).expect("suite");
    eprintln!("{}", determinism::table(&report));
    assert!(report.fixed_all_bitwise_equal);
    for r in &report.references {
        let tol = if r.dtype == vitamin_kernels_cuda::plan::DType::F32 { 1e-4 } else { 1e-2 };
        assert!(r.rel_error_vs_fp64 < tol, "{}/{}: {}", r.kernel, r.dtype, r.rel_error_vs_fp64);
    }
    assert!(report.results.iter().all(|r| r.unwritten_trials == 0));
}
