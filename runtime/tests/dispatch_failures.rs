//! Nothing is lost or kept for ever: ops that cannot run fail visibly, and a policy that never
//! binds is reported, on the simulated H200.

use std::sync::Arc;

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, FunctionKind, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, DispatchError, Dispatcher};
use vitamin_runtime::policy::{ClientClass, Policy, PolicyKind, ReadyOpView, SchedState};
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

#[test]
fn launches_no_node_can_run_fail_at_the_next_sync_and_later_work_still_runs() {
    let sim = SimBackend::h200();
    let busy = sim.kernel("busy").expect("builtin");
    let mut d =
        Dispatcher::new(sim.clone(), PolicyKind::Throughput.build(0), Profiles::new("t"), DispatchConfig::default())
            .expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(0)));
    d.register(v.clone(), "app", ClientClass::BestEffort);
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
    let sim = SimBackend::h200();
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
