//! `Realized`: every pool node becomes one backend partition (here on the simulated device), and
//! a lease / submit / complete cycle goes through the pool and the node's partition together.

use std::sync::Arc;
use std::time::Duration;

use vitamin_hal::sim::{SimBackend, SimPartition};
use vitamin_hal::{
    Backend, Dim3, HalError, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition, Topology, UnitSet,
};
use vitamin_runtime::pool::{HolderId, NodeState, PoolError, Realized};

#[test]
fn every_node_is_realized_over_its_units() {
    for (backend, count) in [(SimBackend::preset("h200").unwrap(), 59), (SimBackend::preset("mi300x").unwrap(), 71)] {
        let r = Realized::create(&backend, 2).expect("sim partitions");
        assert_eq!(r.partitions().len(), count);
        for n in r.pool().nodes() {
            let p = r.partition(n.id);
            assert_eq!(*p.units(), n.units);
            assert_eq!(p.lanes(), 2);
        }
        assert!(r.pool().is_quiescent());
    }
}

#[test]
fn lease_submit_complete_through_a_realized_node() {
    let backend = SimBackend::preset("h200").unwrap();
    let mut r = Realized::create(&backend, 1).unwrap();
    let holder = HolderId(9);
    let (pool, parts) = r.split_mut();
    let node = pool.leaves()[2];
    pool.lease(node, holder).unwrap();
    let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        backend.kernel("busy").expect("built-in kernel"),
        Dim3::x(16),
        Dim3::x(32),
        0,
        KernelArgs::pack(&[&1000u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )));
    for _ in 0..3 {
        pool.begin_submit(node, holder).unwrap();
        parts[node.index()].submit(0, &op).unwrap();
    }
    assert_eq!(*pool.state(node), NodeState::Leased { holder, outstanding: 3 });
    pool.close_gate(node).unwrap();
    let mut done = Vec::new();
    let mut last = None;
    while !matches!(pool.state(node), NodeState::Idle) {
        done.clear();
        parts[node.index()].poll(&mut done).unwrap();
        for _ in &done {
            last = pool.complete(node).unwrap();
        }
        if done.is_empty() {
            assert!(backend.wait_for_progress(Duration::from_millis(1)).unwrap(), "work vanished");
        }
    }
    assert_eq!(last.expect("the last completion drains the node").drained, node);
    assert!(r.pool().is_quiescent());
}

#[test]
fn backend_failure_names_the_node() {
    match Realized::create(&SimBackend::preset("h200").unwrap(), 0) {
        Err(PoolError::Realize { node, source: HalError::InvalidPartition(_) }) => assert_eq!(node.0, 0),
        other => panic!("expected a realize error, got {other:?}"),
    }
}

/// A faulty backend that realizes every request over the first leaf only.
struct FirstLeafOnly(SimBackend);

impl Backend for FirstLeafOnly {
    type Partition = SimPartition;
    fn topology(&self) -> &Topology {
        self.0.topology()
    }
    fn create_partition(&self, _units: &UnitSet, lanes: usize) -> Result<SimPartition, HalError> {
        self.0.create_partition(&self.0.topology().leaves()[0], lanes)
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
    fn wait_for_progress(&self, timeout: Duration) -> Result<bool, HalError> {
        self.0.wait_for_progress(timeout)
    }
}

#[test]
fn partitions_over_wrong_units_are_refused() {
    match Realized::create(&FirstLeafOnly(SimBackend::preset("h200").unwrap()), 1) {
        Err(e @ PoolError::RealizedWrongUnits { .. }) => {
            assert_eq!(
                e.to_string(),
                "the backend realized pool node #0 over units 0-7 instead of 0-131: the backend is faulty; report it"
            );
        }
        other => panic!("expected a wrong-units error, got {other:?}"),
    }
}
