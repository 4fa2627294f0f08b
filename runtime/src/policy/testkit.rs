//! Fixtures shared by the policies' unit tests: a pool on the default simulated device, clients,
//! and the scheduling state a policy sees.

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Dim3, FunctionKind, FunctionRef, KernelArgs, KernelLaunch, LaunchAttributes};

use super::{ClientClass, ClientInfo, ClusterRefusals, ReadyOpView, SchedState};
use crate::pool::{HolderId, NodeId, Pool};
use crate::profile::Profiles;
use crate::vctx::OpId;

/// A pool on the default simulated device and one client per class (holders 0, 1, ...).
pub struct Fixture {
    pub pool: Pool,
    pub profiles: Profiles,
    pub clients: Vec<ClientInfo>,
    pub lanes: Vec<Vec<u64>>,
    pub cluster_refused: ClusterRefusals,
}

impl Fixture {
    pub fn new(classes: &[ClientClass]) -> Self {
        let pool = Pool::build(SimBackend::default_device().topology());
        let clients = classes
            .iter()
            .enumerate()
            .map(|(i, &class)| ClientInfo {
                holder: HolderId(i as u32),
                name: format!("c{i}"),
                class,
                deadline_ns: None,
            })
            .collect();
        let lanes = vec![Vec::new(); pool.nodes().len()];
        Self { pool, profiles: Profiles::new("test"), clients, lanes, cluster_refused: ClusterRefusals::new() }
    }

    /// `holder` leases `node` and keeps `ops` ops outstanding there (as lane continuation does).
    pub fn lease_busy(&mut self, node: NodeId, holder: HolderId, ops: usize) {
        self.pool.lease(node, holder).unwrap();
        for _ in 0..ops {
            self.pool.begin_submit(node, holder).unwrap();
        }
    }

    /// `ops` ops outstanding on `node` complete.
    pub fn complete(&mut self, node: NodeId, ops: usize) {
        for _ in 0..ops {
            self.pool.complete(node).unwrap();
        }
    }

    /// What a policy sees at `now_ns`.
    pub fn at(&self, now_ns: u64) -> SchedState<'_> {
        SchedState {
            pool: &self.pool,
            now_ns,
            profiles: &self.profiles,
            clients: &self.clients,
            lane_busy_until: &self.lanes,
            cluster_refused: &self.cluster_refused,
        }
    }
}

/// A kernel launch of `grid` blocks of 256 threads, no arguments.
pub fn kernel(name: &str, grid: u32) -> KernelLaunch {
    KernelLaunch::new(
        FunctionRef::new(1, FunctionKind::Kernel, name),
        Dim3::new(grid, 1, 1),
        Dim3::new(256, 1, 1),
        0,
        KernelArgs::from_layout(Vec::new(), Vec::new()).unwrap(),
        LaunchAttributes::default(),
    )
}

/// A ready op of `client` running `k`, ready since 0, sequence number `seq`.
pub fn op(k: &KernelLaunch, client: HolderId, seq: u64) -> ReadyOpView<'_> {
    ReadyOpView { client, op: OpId(seq), kernel: k, ready_since_ns: 0, seq, deadline_ns: None, min_units: 0 }
}
