//! Nothing is lost or kept for ever: ops that cannot run fail visibly, and a policy that never
//! binds is reported, on the simulated H200.

use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, FunctionKind, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, DispatchError, Dispatcher};
use vitamin_runtime::policy::{AnyPolicy, ClientClass, Policy, PolicyKind, ReadyOpView, SchedState};
use vitamin_runtime::pool::NodeId;
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::vctx::{StreamKind, VctxError, VctxId, VirtualContext};

fn kernel(f: FunctionRef, grid: u32, block: u32, cooperative: bool) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        f,
        Dim3::x(grid),
        Dim3::x(block),
        0,
        KernelArgs::pack(&[&1_000u32.to_le_bytes()]),
        LaunchAttributes::new(cooperative, None, None, Vec::new()),
    )))
}

/// A Throughput dispatcher on `sim` with one registered client, and that client's vCtx.
fn throughput_with_one_client(sim: &SimBackend) -> (Dispatcher<SimBackend, AnyPolicy>, Arc<VirtualContext>) {
    let mut d =
        Dispatcher::new(sim.clone(), PolicyKind::Throughput.build(0), Profiles::new("t"), DispatchConfig::default())
            .expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
    (d, v)
}

#[test]
fn launches_no_node_can_run_fail_at_the_next_sync_and_later_work_still_runs() {
    let sim = SimBackend::preset("h200").unwrap();
    let busy = sim.kernel("busy").expect("builtin");
    let (mut d, v) = throughput_with_one_client(&sim);
    let bad = v.create_stream(StreamKind::NonBlocking, 0);
    let good = v.create_stream(StreamKind::NonBlocking, 0);
    // A function the device does not know, a 2048-thread block, and a cooperative grid larger than
    // the whole device can hold at once (132 SMs x 4 resident `busy` blocks).
    v.record_op(bad, kernel(FunctionRef::new(0xdead, FunctionKind::Kernel, "foreign"), 1, 32, false)).expect("record");
    v.record_op(bad, kernel(busy.clone(), 1, 2048, false)).expect("record");
    v.record_op(bad, kernel(busy.clone(), 132 * 4 + 1, 64, true)).expect("record");
    v.record_op(good, kernel(busy.clone(), 64, 64, false)).expect("record");
    d.run_until_idle().expect("no stall");
    assert_eq!(v.outstanding(), 0, "every op completed or failed; none is kept");
    assert!(matches!(v.stream_synchronize(bad), Err(VctxError::LaunchFailed { .. })), "the failure surfaces");
    assert_eq!(d.stats().failed, 3);
    assert!(d.stats().completed >= 1, "the valid launch ran");
}

/// A policy that never selects anything.
#[derive(Debug)]
struct Never;

impl Policy for Never {
    fn name(&self) -> &'static str {
        "never"
    }
    fn pick(&mut self, queue: &[ReadyOpView<'_>], _state: &SchedState<'_>) -> Option<usize> {
        (!queue.is_empty()).then_some(0)
    }
    fn select(&mut self, _op: &ReadyOpView<'_>, _eligible: &[NodeId], _state: &SchedState<'_>) -> Option<NodeId> {
        None
    }
}

#[test]
fn a_policy_that_never_binds_is_reported_as_a_stall() {
    let sim = SimBackend::preset("h200").unwrap();
    let busy = sim.kernel("busy").expect("builtin");
    let mut d = Dispatcher::new(sim, Never, Profiles::new("t"), DispatchConfig::default()).expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    v.record_op(s, kernel(busy, 8, 64, false)).expect("record");
    match d.run_until_idle() {
        Err(DispatchError::Stalled { ready: 1, policy: "never" }) => {}
        other => panic!("expected a stall report, got {other:?}"),
    }
}

/// A launch-first launch catches up with completions the pool still counts while its thread
/// holds the vCtx lock (`VirtualContext::record_launched_first`). A failure that catch-up finds
/// is reported to the vCtx by the next round, not there and then: reporting it takes the vCtx
/// lock, which that thread holds (a self-deadlock, seen as a hang of the shim's fake-driver test
/// `a_launch_failing_after_binding_surfaces_at_a_sync_on_both_submission_paths`).
#[test]
fn a_failure_found_while_a_launch_first_catches_up_is_reported_by_the_next_round() {
    let sim = SimBackend::preset("h200").unwrap();
    let axpy = sim.kernel("axpy").expect("builtin");
    let busy = sim.kernel("busy").expect("builtin");
    let (mut d, v) = throughput_with_one_client(&sim);
    let bad = v.create_stream(StreamKind::NonBlocking, 0);
    let fresh = v.create_stream(StreamKind::NonBlocking, 0);
    // axpy over memory nobody allocated: it fails when it runs.
    let args = KernelArgs::pack(&[
        &2.0f32.to_le_bytes(),
        &0x10u64.to_le_bytes(),
        &0x20u64.to_le_bytes(),
        &64u32.to_le_bytes(),
    ]);
    let faulting = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        axpy,
        Dim3::x(1),
        Dim3::x(64),
        0,
        args,
        LaunchAttributes::new(false, None, None, Vec::new()),
    )));
    v.record_op(bad, faulting).expect("record");
    d.pump().expect("round");
    assert_eq!(d.inflight(), 1, "submitted, not yet seen complete");
    sim.run_until_idle();
    // The launch-first launch, on a thread of its own so that a deadlock fails the test.
    let (tx, rx) = std::sync::mpsc::channel();
    let v2 = v.clone();
    std::thread::spawn(move || {
        let desc = kernel(busy, 1, 32, false);
        let r = v2.record_launched_first(
            fresh,
            || {
                let d = &mut d;
                let mut issue = |token| vitamin_hal::sim::issue_native(token, desc.clone());
                match d.launch_fresh_native(0, &desc, &mut issue)? {
                    Ok(l) => Some((desc.clone(), (d, l))),
                    Err(e) => panic!("the launch-first launch failed: {e}"),
                }
            },
            |op, desc, (d, l)| d.commit_native(l, op, desc.clone()),
        );
        let _ = tx.send((r.map(|r| r.is_some()), d));
    });
    let (launched, mut d) =
        rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the launch-first launch returned (no deadlock)");
    launched.expect("recorded");
    assert_eq!(d.stats().failed, 1, "the catch-up found the failure");
    d.run_until_idle().expect("no stall");
    assert!(matches!(v.stream_synchronize(bad), Err(VctxError::LaunchFailed { .. })), "the failure surfaces");
    assert_eq!(v.outstanding(), 0);
}

/// In process, launches that from some point on only the whole device runs (smaller partitions
/// refuse them, as a green context refuses a function whose raised limit it could not raise) are
/// offered only the nodes that run them: Throughput does not stall proposing small nodes, and every
/// later launch, on any stream, runs on the whole-device node.
#[test]
fn launches_kept_on_the_whole_device_all_run_there() {
    let sim = SimBackend::preset("h200").unwrap();
    let busy = sim.kernel("busy").expect("builtin");
    let (mut d, v) = throughput_with_one_client(&sim);
    let streams: Vec<_> = (0..4).map(|_| v.create_stream(StreamKind::NonBlocking, 0)).collect();
    // Small launches: Throughput places them on small nodes.
    for &s in &streams {
        v.record_op(s, kernel(busy.clone(), 8, 64, false)).expect("record");
    }
    d.run_until_idle().expect("no stall");
    let root = d.pool().root().index();
    let before = d.stats().per_node.clone();
    assert!(before[root] < 4, "small launches ran on smaller nodes first: {before:?}");
    sim.keep_on_whole_device("test: launches valid only in the application's context");
    for i in 0..64 {
        v.record_op(streams[i % 4], kernel(busy.clone(), 8, 64, false)).expect("record");
    }
    d.run_until_idle().expect("no stall");
    assert_eq!(v.outstanding(), 0);
    assert_eq!(d.stats().failed, 0, "{:?}", d.stats());
    assert_eq!(d.stats().per_node[root] - before[root], 64, "{:?}", d.stats().per_node);
}
