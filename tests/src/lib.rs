//! # vitamin-tests: the backend conformance suite
//!
//! One suite, generic over [`TestDevice`] (a [`Backend`] plus the few test-only services a suite
//! needs: memory, the reference kernels, draining). [`conformance_tests!`] instantiates every check
//! as a `#[test]` for one backend; `tests/sim.rs` runs it on the simulated device in CI, and the
//! CUDA backend instantiates it on the GPU machine (skipping, with a message, when no GPU is there).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{
    Backend, Dim3, Fence, FunctionRef, HalError, HostFunction, Incompatibility, KernelArgs, KernelLaunch,
    LaunchAttributes, OpDesc, PhysicalPartition, UnitSet,
};

/// A backend plus the services the conformance suite needs.
pub trait TestDevice: Backend {
    /// Allocates device memory holding `values`.
    fn alloc_f32(&self, values: &[f32]) -> u64;
    /// Allocates `count` zeroed floats.
    fn alloc_zeroed_f32(&self, count: usize) -> u64 {
        self.alloc_f32(&vec![0.0; count])
    }
    /// Reads device floats.
    fn read_f32(&self, addr: u64, count: usize) -> Vec<f32>;
    /// The function of a reference kernel: `reduce_partial`, `reduce_final` or `busy`.
    fn function(&self, name: &str) -> FunctionRef;
    /// Blocks of one `busy` kernel that keep a partition occupied for a while.
    fn busy_args(&self) -> KernelArgs;
}

impl TestDevice for SimBackend {
    fn alloc_f32(&self, values: &[f32]) -> u64 {
        let a = self.alloc(values.len() * 4);
        self.write_f32s(a, values).expect("fresh allocation");
        a
    }
    fn read_f32(&self, addr: u64, count: usize) -> Vec<f32> {
        self.read_f32s(addr, count).expect("readable")
    }
    fn function(&self, name: &str) -> FunctionRef {
        self.kernel(name).unwrap_or_else(|| panic!("sim kernel {name} not registered"))
    }
    fn busy_args(&self) -> KernelArgs {
        KernelArgs::pack(&[&50_000u32.to_le_bytes()])
    }
}

/// Polls `part` (advancing the backend) until `fences` have all completed; returns completion order.
pub fn wait_all<B: Backend>(backend: &B, part: &B::Partition, expected: usize) -> Result<Vec<Fence>, HalError> {
    let mut done = Vec::new();
    while done.len() < expected {
        part.poll(&mut done)?;
        if done.len() < expected && !backend.wait_for_progress(Duration::from_millis(1))? {
            part.poll(&mut done)?;
            break;
        }
    }
    Ok(done)
}

/// Deterministic pseudo-random inputs with wide dynamic range (float addition order matters).
pub fn reduction_input(n: usize) -> Vec<f32> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            u * (1 + i % 97) as f32
        })
        .collect()
}

fn reduce_ops<D: TestDevice>(d: &D, x: u64, n: u32, grid: u32, partial: u64, out: u64) -> [Arc<OpDesc>; 2] {
    let p = KernelLaunch::new(
        d.function("reduce_partial"),
        Dim3::x(grid),
        Dim3::x(256),
        0,
        KernelArgs::pack(&[&x.to_le_bytes(), &n.to_le_bytes(), &partial.to_le_bytes()]),
        LaunchAttributes::none(),
    );
    let f = KernelLaunch::new(
        d.function("reduce_final"),
        Dim3::x(1),
        Dim3::x(32),
        0,
        KernelArgs::pack(&[&partial.to_le_bytes(), &grid.to_le_bytes(), &out.to_le_bytes()]),
        LaunchAttributes::none(),
    );
    [Arc::new(OpDesc::Kernel(p)), Arc::new(OpDesc::Kernel(f))]
}

/// A launch of the device's `busy` kernel.
pub fn busy_kernel<D: TestDevice>(d: &D, grid: u32, block: u32, attributes: LaunchAttributes) -> OpDesc {
    OpDesc::Kernel(KernelLaunch::new(d.function("busy"), Dim3::x(grid), Dim3::x(block), 0, d.busy_args(), attributes))
}

/// Runs the block-partitioned reduction with `grid` blocks on `part` and returns the result bits.
pub fn reduce_on<D: TestDevice>(d: &D, part: &D::Partition, x: u64, n: u32, grid: u32) -> u32 {
    let partial = d.alloc_zeroed_f32(grid as usize);
    let out = d.alloc_zeroed_f32(1);
    let ops = reduce_ops(d, x, n, grid, partial, out);
    for op in &ops {
        part.submit(0, op).expect("submit");
    }
    wait_all(d, part, 2).expect("completion");
    d.read_f32(out, 1)[0].to_bits()
}

/// Pairs of partitions the suite uses: each leaf, a pair of leaves, half the device, everything.
pub fn sample_partitions(top: &vitamin_hal::Topology) -> Vec<UnitSet> {
    let leaves = top.leaves();
    let half: UnitSet = leaves[..leaves.len() / 2].iter().fold(UnitSet::EMPTY, |a, l| a | *l);
    let mut v = vec![leaves[0], leaves[leaves.len() - 1], half, top.all_units()];
    if leaves.len() > 3 {
        v.push(leaves[1] | leaves[3]);
    }
    v
}

/// Checks: partitions are unions of leaves, and only those are accepted.
pub fn check_partition_shapes<D: TestDevice>(d: &D) {
    let top = d.topology().clone();
    for units in sample_partitions(&top) {
        let p = d.create_partition(&units, 2).expect("union of leaves");
        assert_eq!(*p.units(), units);
        assert_eq!(p.lanes(), 2);
    }
    let cut = UnitSet::range(0, top.leaves()[0].len() / 2);
    assert!(matches!(d.create_partition(&cut, 1), Err(HalError::InvalidPartition(_))), "half a leaf must be rejected");
    assert!(matches!(d.create_partition(&UnitSet::EMPTY, 1), Err(HalError::InvalidPartition(_))));
}

/// Checks: an out-of-range lane is an error and submits nothing.
pub fn check_invalid_lane<D: TestDevice>(d: &D) {
    let p = d.create_partition(&d.topology().leaves()[0], 1).expect("leaf");
    let op = Arc::new(busy_kernel(d, 1, 32, LaunchAttributes::none()));
    assert_eq!(p.submit(1, &op), Err(HalError::InvalidLane { lane: 1, lanes: 1 }));
    let mut done = Vec::new();
    p.poll(&mut done).expect("poll");
    assert!(done.is_empty());
}

/// Checks: fences on a lane complete once each, in submission order; a host function runs after
/// the ops before it on its lane.
pub fn check_lane_fifo_and_host_functions<D: TestDevice>(d: &D) {
    let p = d.create_partition(&d.topology().leaves()[0], 2).expect("leaf");
    let busy = Arc::new(busy_kernel(d, 64, 128, LaunchAttributes::none()));
    let counter = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(u64::MAX));
    let (c, s) = (counter.clone(), seen.clone());
    let host = Arc::new(OpDesc::Host(HostFunction::new("probe", move || {
        s.store(c.load(Ordering::SeqCst), Ordering::SeqCst);
    })));
    let mut fences = Vec::new();
    for lane in 0..2u32 {
        for _ in 0..3 {
            fences.push(p.submit(lane, &busy).expect("submit"));
        }
    }
    let hf = p.submit(0, &host).expect("host fn");
    let done = wait_all(d, &p, fences.len() + 1).expect("complete");
    assert_eq!(done.len(), fences.len() + 1, "every fence exactly once");
    for lane in 0..2u32 {
        let seqs: Vec<u64> = done.iter().filter(|f| f.lane == lane).map(|f| f.seq).collect();
        let mut sorted = seqs.clone();
        sorted.sort_unstable();
        assert_eq!(seqs, sorted, "lane {lane} completes in submission order");
    }
    assert!(done.contains(&hf));
    counter.store(1, Ordering::SeqCst);
    assert_eq!(seen.load(Ordering::SeqCst), 0, "host function ran exactly once, before this point");
}

/// Checks the invariant: the same reduction descriptor gives identical bits on every sampled
/// partition; re-gridded reductions (other block structures) give other bits.
pub fn check_determinism_across_partitions<D: TestDevice>(d: &D) {
    let n = 1 << 18;
    let x = d.alloc_f32(&reduction_input(n));
    let top = d.topology().clone();
    let parts: Vec<_> = sample_partitions(&top).iter().map(|u| d.create_partition(u, 1).expect("partition")).collect();
    assert!(parts.len() >= 5, "need at least 5 partitions");
    let reference = reduce_on(d, &parts[0], x, n as u32, 1024);
    for p in &parts {
        for _ in 0..3 {
            assert_eq!(reduce_on(d, p, x, n as u32, 1024), reference, "same descriptor, other partition");
        }
    }
    let regridded =
        [96u32, 160, 333, 500, 777].iter().filter(|&&g| reduce_on(d, &parts[3], x, n as u32, g) != reference);
    assert_eq!(regridded.count(), 5, "every re-gridded reduction should change the bits");
}

/// Checks: a cooperative launch larger than a partition can hold is refused there, and accepted on
/// the whole device.
pub fn check_cooperative_co_residency<D: TestDevice>(d: &D) {
    let top = d.topology().clone();
    let small = d.create_partition(&top.leaves()[0], 1).expect("leaf");
    let whole = d.create_partition(&top.all_units(), 1).expect("device");
    let grid = (top.leaves()[0].len() * 8 + 1) as u32;
    let op = busy_kernel(d, grid, 64, LaunchAttributes::new(true, None, None, Vec::new()));
    assert!(matches!(small.can_execute(&op), Err(Incompatibility::NotCoResident { .. })));
    assert_eq!(whole.can_execute(&op), Ok(()));
    assert!(matches!(small.submit(0, &Arc::new(op)), Err(HalError::Incompatible(_))));
}

/// Checks the whole runtime on the backend: four clients, two streams each, record dependent
/// reductions (with `busy` kernels in between) and cross-stream event waits; the dispatcher binds
/// every launch under the Chaos policy (a random eligible pool node per op, lane continuation
/// refused half the time). Every result must be bitwise equal to the same reduction run alone on
/// the whole device, and launches must have landed on many different pool nodes.
pub fn check_dispatcher_chaos_determinism<D: TestDevice + Clone + 'static>(d: &D) {
    use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher};
    use vitamin_runtime::policy::{ClientClass, PolicyKind};
    use vitamin_runtime::profile::Profiles;
    use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

    let n: u32 = 1 << 16;
    let grid = 256u32;
    let x = d.alloc_f32(&reduction_input(n as usize));
    let whole = d.create_partition(&d.topology().all_units(), 1).expect("whole device");
    let reference = reduce_on(d, &whole, x, n, grid);
    drop(whole);

    let mut disp =
        Dispatcher::new(d.clone(), PolicyKind::Chaos.build(11), Profiles::new("test"), DispatchConfig::default())
            .expect("pool realized");
    let busy = Arc::new(busy_kernel(d, 64, 128, LaunchAttributes::none()));
    let mut outs = Vec::new();
    let mut vctxs = Vec::new();
    for c in 0..4u32 {
        let v = Arc::new(VirtualContext::new(VctxId(c)));
        disp.register(v.clone(), format!("client-{c}"), ClientClass::BestEffort);
        let s1 = v.create_stream(StreamKind::NonBlocking, 0);
        let s2 = v.create_stream(StreamKind::NonBlocking, 0);
        let e = v.create_event();
        for rep in 0..3 {
            let (p1, o1) = (d.alloc_zeroed_f32(grid as usize), d.alloc_zeroed_f32(1));
            let (p2, o2) = (d.alloc_zeroed_f32(grid as usize), d.alloc_zeroed_f32(1));
            v.record_op(s1, busy.clone()).expect("record");
            for op in reduce_ops(d, x, n, grid, p1, o1) {
                v.record_op(s1, op).expect("record");
            }
            v.record_event(e, s1).expect("event record");
            // Stream 2 waits for stream 1's reduction, then runs its own.
            v.wait_event(s2, e).expect("event wait");
            for op in reduce_ops(d, x, n, grid, p2, o2) {
                v.record_op(s2, op).expect("record");
            }
            if rep == 1 {
                v.record_op(s2, busy.clone()).expect("record");
            }
            outs.push(o1);
            outs.push(o2);
        }
        vctxs.push(v);
    }
    disp.run_until_idle().expect("dispatch");
    for v in &vctxs {
        assert_eq!(v.outstanding(), 0, "every op completed");
        v.device_synchronize().expect("no asynchronous failure");
    }
    for &o in &outs {
        assert_eq!(d.read_f32(o, 1)[0].to_bits(), reference, "same descriptor, any binding: same bits");
    }
    let per_node = &disp.stats().per_node;
    let used = per_node.iter().filter(|&&k| k > 0).count();
    let want = (per_node.len() / 3).clamp(2, 8);
    assert!(
        used >= want,
        "Chaos spread {} kernels over only {used} of {} pool nodes",
        disp.stats().bound,
        per_node.len()
    );
    eprintln!(
        "dispatcher under Chaos: {} kernels bound, {} continued, over {used} of {} pool nodes",
        disp.stats().bound,
        disp.stats().continued,
        per_node.len()
    );
}

/// Instantiates every conformance check as a `#[test]` for one backend. `$make` is an expression
/// of type `Option<D>`: `None` skips (printing why is the caller's job).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            check_partition_shapes,
            check_invalid_lane,
            check_lane_fifo_and_host_functions,
            check_determinism_across_partitions,
            check_cooperative_co_residency,
            check_dispatcher_chaos_determinism);
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                if let Some(d) = $make {
                    $crate::$name(&d);
                }
            }
        )*
    };
}
