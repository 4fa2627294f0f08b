//! A deterministic simulated GPU: the backend for CI, tests and `vitamin demo` without hardware.
//!
//! ## Model
//! - **Topology presets**: [`SimConfig::h200`] (132 SMs split like the real H200: 15 leaves of 8 +
//!   one of 12), [`SimConfig::mi300x`] (304 CUs in 8 XCDs; logical CU `i` sits on XCD `i mod 8`,
//!   leaves are 16 consecutive logical CUs = 2 CUs on each XCD), and [`SimConfig::uniform`].
//!   [`SimDevice`] names the presets (`VITAMIN_SIM_DEVICE`, `vitamin --sim-device`).
//! - **Virtual time**: nothing happens until the caller advances the clock
//!   ([`Backend::wait_for_progress`] jumps to the next completion, [`SimBackend::advance_until`]
//!   to a given time). Identical call sequences give identical timelines.
//! - **Cost**: a kernel of `B` blocks on `m` units with occupancy `r` blocks/unit takes
//!   `fixed + ceil(B / (min(m, sat)*r)) * block` ns at full speed (waves; `sat` is the kernel's
//!   saturation size: a memory-bound kernel saturates bandwidth with `sat` units and gains
//!   nothing past it; device bandwidth is not shared between partitions in this model). Disjoint partitions run
//!   concurrently at full speed; a unit shared by `c` running kernels gives each `1/c` of its
//!   speed (a kernel's speed is the mean over its units). Copies: 1 us + bytes / bandwidth (50 GB/s
//!   to/from host, 2 TB/s on device), fills likewise; host functions 1 us; markers 0; graphs 20 us.
//!   Ops on one lane run one after another in submission order. Completion times are rounded up to
//!   whole nanoseconds, so virtual time is always integral.
//! - **Effects**: kernels with a CPU reference ([`SimKernel::exec`]) run block by block when they
//!   complete, in an order that depends on the partition (round-robin over its units), over
//!   [`SimMemory`]. A fixed-structure kernel therefore gives the same bits on every partition,
//!   and a re-gridded one (another block structure) generally does not: the invariant in small.
//!   Copies between device memory and staged host bytes move data; host addresses are timing only.
//!   A bad memory access fails the op asynchronously: the next [`PhysicalPartition::poll`] of that
//!   partition returns [`HalError::Async`].

mod engine;
mod kernels;
mod memory;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

pub use engine::{COPY_FIXED_NS, DEVICE_BW, GRAPH_NS, HOST_BW, HOST_FN_NS};
pub use kernels::{BlockFn, CostFn, SimKernel};
pub use memory::SimMemory;

use crate::backend::{check_union_of_leaves, Backend, Fence, LaneId, PhysicalPartition};
use crate::op::{FunctionKind, FunctionRef, OpDesc};
use crate::topology::{Capabilities, Topology, TopologySpec, UnitKind, Vendor};
use crate::unitset::UnitSet;
use crate::{HalError, Incompatibility};
use engine::Engine;

/// Largest block the simulated device accepts (threads), like CUDA and HIP.
pub const MAX_BLOCK_THREADS: u64 = 1024;
/// Largest cluster (blocks), like Hopper's non-portable limit.
pub const MAX_CLUSTER_BLOCKS: u64 = 16;

/// Shape of a simulated device.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Device name shown to users (always marked simulated).
    pub name: String,
    /// Vendor imitated.
    pub vendor: Vendor,
    /// Units.
    pub unit_count: usize,
    /// Leaves.
    pub leaves: Vec<UnitSet>,
    /// Hardware groupings.
    pub domains: Vec<UnitSet>,
    /// Smallest allocation.
    pub min_partition_size: usize,
}

impl SimConfig {
    /// The H200 as the real split produces it: 15 leaves of 8 SMs and one of 12.
    pub fn h200() -> Self {
        let mut leaves: Vec<UnitSet> = (0..15).map(|i| UnitSet::range(8 * i, 8 * i + 8)).collect();
        leaves.push(UnitSet::range(120, 132));
        SimConfig {
            name: "NVIDIA H200 (simulated)".into(),
            vendor: Vendor::Nvidia,
            unit_count: 132,
            leaves,
            domains: Vec::new(),
            min_partition_size: 8,
        }
    }

    /// The MI300X: 304 CUs, 8 XCDs of 38; logical CU `i` on XCD `i mod 8`; 19 leaves of 16
    /// consecutive logical CUs (2 per XCD, so every leaf spreads evenly).
    pub fn mi300x() -> Self {
        SimConfig {
            name: "AMD Instinct MI300X (simulated)".into(),
            vendor: Vendor::Amd,
            unit_count: 304,
            leaves: (0..19).map(|i| UnitSet::range(16 * i, 16 * i + 16)).collect(),
            domains: (0..8).map(|x| (0..304).filter(|i| i % 8 == x).collect()).collect(),
            min_partition_size: 16,
        }
    }

    /// `unit_count` units in leaves of `leaf_size`; a shorter remainder becomes one more leaf.
    pub fn uniform(vendor: Vendor, unit_count: usize, leaf_size: usize) -> Self {
        let leaf_size = leaf_size.max(1);
        let leaves = (0..unit_count.div_ceil(leaf_size))
            .map(|i| UnitSet::range(i * leaf_size, ((i + 1) * leaf_size).min(unit_count)))
            .collect();
        SimConfig {
            name: format!("{unit_count}-unit device (simulated)"),
            vendor,
            unit_count,
            leaves,
            domains: Vec::new(),
            min_partition_size: leaf_size,
        }
    }
}

/// Environment variable choosing the simulated device preset ([`SimDevice`]): `h200` (the
/// default) or `mi300x`.
pub const SIM_DEVICE_ENV: &str = "VITAMIN_SIM_DEVICE";

/// A named simulated device preset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SimDevice {
    /// [`SimConfig::h200`].
    #[default]
    H200,
    /// [`SimConfig::mi300x`].
    Mi300x,
}

impl SimDevice {
    /// Every preset.
    pub const ALL: [SimDevice; 2] = [SimDevice::H200, SimDevice::Mi300x];

    /// The preset's name (`h200`, `mi300x`).
    pub fn name(self) -> &'static str {
        match self {
            SimDevice::H200 => "h200",
            SimDevice::Mi300x => "mi300x",
        }
    }

    /// The preset's configuration.
    pub fn config(self) -> SimConfig {
        match self {
            SimDevice::H200 => SimConfig::h200(),
            SimDevice::Mi300x => SimConfig::mi300x(),
        }
    }

    /// A fresh simulated device of this preset.
    pub fn backend(self) -> SimBackend {
        match self {
            SimDevice::H200 => SimBackend::h200(),
            SimDevice::Mi300x => SimBackend::mi300x(),
        }
    }

    /// The preset named by [`SIM_DEVICE_ENV`], the default when unset.
    pub fn from_env() -> Result<Self, HalError> {
        match std::env::var(SIM_DEVICE_ENV) {
            Ok(v) if !v.trim().is_empty() => v.parse(),
            _ => Ok(SimDevice::default()),
        }
    }
}

impl std::str::FromStr for SimDevice {
    type Err = HalError;

    fn from_str(s: &str) -> Result<Self, HalError> {
        let s = s.trim();
        SimDevice::ALL.into_iter().find(|d| d.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
            HalError::InvalidTopology(format!(
                "unknown simulated device {s:?}: use one of {}",
                SimDevice::ALL.map(SimDevice::name).join(", ")
            ))
        })
    }
}

impl std::fmt::Display for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The simulated device. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct SimBackend {
    topology: Arc<Topology>,
    engine: Arc<Mutex<Engine>>,
}

impl SimBackend {
    /// Builds a device from a configuration, with the built-in kernels registered.
    pub fn new(config: SimConfig) -> Result<Self, HalError> {
        let unit_kind = match config.vendor {
            Vendor::Nvidia => UnitKind::Sm,
            Vendor::Amd => UnitKind::Cu,
        };
        let topology = Topology::new(TopologySpec {
            vendor: config.vendor,
            device_name: config.name,
            unit_kind,
            unit_count: config.unit_count,
            leaves: config.leaves,
            domains: config.domains,
            min_partition_size: config.min_partition_size,
            alignment: config.min_partition_size,
            capabilities: Capabilities {
                backend: "sim".into(),
                simulated: true,
                driver_version: None,
                spatial_partitioning: true,
                cooperative_launch: true,
                clusters: true,
                notes: vec!["virtual time; CPU reference kernels; see hal::sim for the cost model".into()],
            },
        })?;
        Ok(SimBackend { topology: Arc::new(topology), engine: Arc::new(Mutex::new(Engine::new(kernels::builtin()))) })
    }

    /// The simulated H200.
    pub fn h200() -> Self {
        Self::new(SimConfig::h200()).expect("the H200 preset is a valid topology")
    }

    /// The simulated MI300X.
    pub fn mi300x() -> Self {
        Self::new(SimConfig::mi300x()).expect("the MI300X preset is a valid topology")
    }

    /// Registers a kernel and returns its function reference.
    pub fn register_kernel(&self, kernel: SimKernel) -> FunctionRef {
        let mut e = self.engine.lock();
        let name = kernel.name.clone();
        e.kernels.push(kernel);
        FunctionRef::new((e.kernels.len() - 1) as u64, FunctionKind::Simulated, name)
    }

    /// The function reference of a registered kernel, by name.
    pub fn kernel(&self, name: &str) -> Option<FunctionRef> {
        let e = self.engine.lock();
        e.kernels
            .iter()
            .position(|k| k.name == name)
            .map(|i| FunctionRef::new(i as u64, FunctionKind::Simulated, e.kernels[i].name.clone()))
    }

    /// Allocates zeroed device memory.
    pub fn alloc(&self, bytes: usize) -> u64 {
        self.engine.lock().memory.alloc(bytes)
    }

    /// Frees device memory.
    pub fn free(&self, addr: u64) -> Result<(), String> {
        self.engine.lock().memory.free(addr)
    }

    /// Writes `f32`s to device memory immediately (test set-up, outside virtual time).
    pub fn write_f32s(&self, addr: u64, values: &[f32]) -> Result<(), String> {
        self.engine.lock().memory.write_f32s(addr, values)
    }

    /// Reads `f32`s from device memory immediately.
    pub fn read_f32s(&self, addr: u64, count: usize) -> Result<Vec<f32>, String> {
        self.engine.lock().memory.read_f32s(addr, count)
    }

    /// Reads raw bytes from device memory immediately.
    pub fn read_bytes(&self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        self.engine.lock().memory.read(addr, len).map(<[u8]>::to_vec)
    }

    /// Advances virtual time to `t_ns`, completing everything due by then.
    pub fn advance_until(&self, t_ns: u64) {
        let calls = {
            let mut e = self.engine.lock();
            e.advance_until(t_ns as f64);
            e.take_host_calls()
        };
        calls.iter().for_each(|h| h.invoke());
    }

    /// Time of the next completion, if anything runs.
    pub fn next_completion_ns(&self) -> Option<u64> {
        self.engine.lock().next_completion().map(|t| t.ceil() as u64)
    }

    /// Runs until nothing is queued or running.
    pub fn run_until_idle(&self) {
        while self.step() {}
    }

    fn step(&self) -> bool {
        let (progressed, calls) = {
            let mut e = self.engine.lock();
            let p = e.step();
            (p, e.take_host_calls())
        };
        calls.iter().for_each(|h| h.invoke());
        progressed
    }
}

impl Backend for SimBackend {
    type Partition = SimPartition;

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<SimPartition, HalError> {
        check_union_of_leaves(&self.topology, units)?;
        if lanes == 0 {
            return Err(HalError::InvalidPartition("a partition needs at least one lane".into()));
        }
        let id = self.engine.lock().add_partition(*units, lanes);
        Ok(SimPartition { id, units: *units, lanes, engine: self.engine.clone() })
    }

    fn now_ns(&self) -> u64 {
        self.engine.lock().now_ns()
    }

    fn wait_for_progress(&self, _timeout: Duration) -> Result<bool, HalError> {
        let busy = self.engine.lock().busy();
        if busy {
            self.step();
        }
        Ok(busy)
    }
}

/// A partition of the simulated device.
#[derive(Debug)]
pub struct SimPartition {
    id: usize,
    units: UnitSet,
    lanes: usize,
    engine: Arc<Mutex<Engine>>,
}

/// A [`PhysicalPartition::submit_native`] call in progress on this thread.
struct NativeSlot {
    token: u64,
    engine: Arc<Mutex<Engine>>,
    fence: Option<Fence>,
}

thread_local! {
    static NATIVE: std::cell::RefCell<Option<NativeSlot>> = const { std::cell::RefCell::new(None) };
}

/// The simulated counterpart of a native launch: inside a [`PhysicalPartition::submit_native`]
/// closure of a simulated partition, submits `op` on that call's lane (`token` is the handle the
/// closure received). Only once per call; the descriptor is not validated again (the caller
/// bound it with [`PhysicalPartition::can_execute`] on this partition).
pub fn issue_native(token: u64, op: Arc<OpDesc>) -> Result<(), HalError> {
    NATIVE.with(|n| {
        let mut n = n.borrow_mut();
        let slot = n
            .as_mut()
            .filter(|s| s.token == token && s.fence.is_none())
            .ok_or_else(|| HalError::Busy(format!("no native submission {token:#x} in progress on this thread")))?;
        let (part, lane) = ((token >> 32) as usize, (token & 0xffff_ffff) as LaneId);
        slot.fence = Some(slot.engine.lock().submit(part, lane, op));
        Ok(())
    })
}

impl SimPartition {
    /// Whether anything is queued or running on this partition.
    pub fn is_busy(&self) -> bool {
        self.engine.lock().partition_busy(self.id)
    }
}

impl PhysicalPartition for SimPartition {
    fn units(&self) -> &UnitSet {
        &self.units
    }

    fn lanes(&self) -> usize {
        self.lanes
    }

    fn can_execute(&self, op: &OpDesc) -> Result<(), Incompatibility> {
        let OpDesc::Kernel(k) = op else { return Ok(()) };
        let e = self.engine.lock();
        let f = k.function();
        let kernel = match f.kind() {
            FunctionKind::Simulated => e.kernels.get(f.handle() as usize),
            _ => None,
        }
        .ok_or_else(|| Incompatibility::UnknownFunction(f.name().to_owned()))?;
        let threads = k.block().volume();
        if threads == 0 || threads > MAX_BLOCK_THREADS || k.blocks() == 0 {
            return Err(Incompatibility::InvalidLaunch(format!(
                "grid {} x block {} (blocks need 1..={MAX_BLOCK_THREADS} threads)",
                k.grid(),
                k.block()
            )));
        }
        let capacity = self.units.len() as u64 * u64::from(kernel.resident_blocks_per_unit);
        if k.attributes().needs_coresidency() && k.blocks() > capacity {
            return Err(Incompatibility::NotCoResident { blocks: k.blocks(), capacity });
        }
        if let Some(c) = k.attributes().cluster() {
            let cb = c.volume();
            if cb == 0 || cb > MAX_CLUSTER_BLOCKS {
                return Err(Incompatibility::InvalidLaunch(format!(
                    "cluster {c} outside 1..={MAX_CLUSTER_BLOCKS} blocks"
                )));
            }
            if cb > capacity {
                return Err(Incompatibility::ClusterShape { cluster_blocks: cb, units: self.units.len() });
            }
        }
        Ok(())
    }

    fn submit(&self, lane: LaneId, op: &Arc<OpDesc>) -> Result<Fence, HalError> {
        if lane as usize >= self.lanes {
            return Err(HalError::InvalidLane { lane, lanes: self.lanes });
        }
        self.can_execute(op)?;
        Ok(self.engine.lock().submit(self.id, lane, op.clone()))
    }

    /// The simulated device has no native streams: the handle `issue` gets is a token under
    /// which its launch hands the descriptor over with [`issue_native`] (from the same thread,
    /// during the call), as a CUDA caller would launch on the lane's stream.
    fn submit_native(
        &self,
        lane: LaneId,
        issue: &mut dyn FnMut(u64) -> Result<(), HalError>,
    ) -> Result<Fence, HalError> {
        if lane as usize >= self.lanes {
            return Err(HalError::InvalidLane { lane, lanes: self.lanes });
        }
        let token = (self.id as u64) << 32 | u64::from(lane);
        NATIVE.with(|n| *n.borrow_mut() = Some(NativeSlot { token, engine: self.engine.clone(), fence: None }));
        let issued = issue(token);
        let slot = NATIVE.with(|n| n.borrow_mut().take());
        issued?;
        slot.and_then(|s| s.fence).ok_or_else(|| HalError::Busy("the native launch did not issue anything".into()))
    }

    fn poll(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.engine.lock().take_completed(self.id, completed).map_err(HalError::Async)
    }

    fn synchronize(&self) -> Result<(), HalError> {
        loop {
            let (busy, calls) = {
                let mut e = self.engine.lock();
                if !e.partition_busy(self.id) {
                    (false, Vec::new())
                } else {
                    e.step();
                    (true, e.take_host_calls())
                }
            };
            calls.iter().for_each(|h| h.invoke());
            if !busy {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_by_name() {
        assert_eq!("mi300x".parse::<SimDevice>(), Ok(SimDevice::Mi300x));
        assert_eq!(" H200 ".parse::<SimDevice>(), Ok(SimDevice::H200));
        let err = "mi250".parse::<SimDevice>().unwrap_err().to_string();
        assert!(err.contains("h200, mi300x"), "{err}");
        let m = SimDevice::Mi300x.backend();
        assert_eq!((m.topology().unit_count(), m.topology().leaves().len()), (304, 19));
        assert_eq!(SimDevice::default().backend().topology().unit_count(), 132);
        for d in SimDevice::ALL {
            assert_eq!(d.config().unit_count, d.backend().topology().unit_count());
        }
    }
}
