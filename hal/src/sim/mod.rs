//! A deterministic simulated GPU: the backend for CI, tests and `vitamin demo` without hardware.
//!
//! ## Model
//! - **Topology presets**: data, not code: `hal/src/sim/presets.toml` (compiled in) lists each
//!   preset's name, display name, vendor and unit labels, units, leaf runs and hardware domains;
//!   [`SimPreset::all`] / [`SimPreset::named`] / [`SimBackend::preset`] look them up by name
//!   (`VITAMIN_SIM_DEVICE`, `vitamin --sim-device`; the first is the default, an unknown name is
//!   an error listing the known ones). [`SimConfig::uniform`] builds any even split.
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
use crate::topology::{Capabilities, Topology, TopologySpec};
use crate::unitset::UnitSet;
use crate::{HalError, Incompatibility};
use engine::Engine;

/// Largest block the simulated device accepts (threads), as real devices do.
pub const MAX_BLOCK_THREADS: u64 = 1024;
/// Largest cluster (blocks), like Hopper's non-portable limit.
pub const MAX_CLUSTER_BLOCKS: u64 = 16;

/// Shape of a simulated device.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Device name shown to users (always marked simulated).
    pub name: String,
    /// The vendor label of the imitated device ([`Topology::vendor`]).
    pub vendor: String,
    /// The unit's short name ([`Topology::unit_name`]).
    pub unit_name: String,
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
    /// `unit_count` units in leaves of `leaf_size`; a shorter remainder becomes one more leaf.
    /// Labelled vendor `generic`, unit `unit`.
    pub fn uniform(unit_count: usize, leaf_size: usize) -> Self {
        let leaf_size = leaf_size.max(1);
        let leaves = (0..unit_count.div_ceil(leaf_size))
            .map(|i| UnitSet::range(i * leaf_size, ((i + 1) * leaf_size).min(unit_count)))
            .collect();
        SimConfig {
            name: format!("{unit_count}-unit device (simulated)"),
            vendor: "generic".into(),
            unit_name: "unit".into(),
            unit_count,
            leaves,
            domains: Vec::new(),
            min_partition_size: leaf_size,
        }
    }
}

/// Environment variable with which the command-line tool chooses the simulated device preset by
/// name ([`SimPreset::named`]); unset: the first preset. This crate reads no environment.
pub const SIM_DEVICE_ENV: &str = "VITAMIN_SIM_DEVICE";

/// The preset table, compiled in (data, not code: `hal/src/sim/presets.toml` describes its fields).
const PRESETS_TOML: &str = include_str!("presets.toml");

/// `count` leaves of `units` consecutive units each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeafRun {
    /// How many leaves.
    pub count: usize,
    /// Units per leaf.
    pub units: usize,
}

/// How a preset's units fall into hardware groupings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DomainLayout {
    /// Unit `i` sits in domain `i mod count`.
    Interleaved,
    /// Domains are equal runs of consecutive units.
    Contiguous,
}

/// A preset's hardware groupings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainSpec {
    /// How many domains.
    pub count: usize,
    /// Which units each holds.
    pub layout: DomainLayout,
}

/// A named simulated device: one entry of the preset table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimPreset {
    /// What users type (`--sim-device NAME`), matched case-insensitively.
    pub name: String,
    /// The device name shown to users.
    pub display_name: String,
    /// The vendor label of the imitated device.
    pub vendor: String,
    /// The unit's short name.
    pub unit_name: String,
    /// Units.
    pub units: usize,
    /// Smallest allocation.
    pub min_partition: usize,
    /// The leaves, as runs of equal leaves in unit order.
    pub leaves: Vec<LeafRun>,
    /// Hardware groupings, if any.
    #[serde(default)]
    pub domains: Option<DomainSpec>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetTable {
    preset: Vec<SimPreset>,
}

/// Parses a preset table and checks that each preset builds a valid topology and that names are
/// unique and non-empty.
fn parse_presets(text: &str) -> Result<Vec<SimPreset>, HalError> {
    let bad = |why: String| HalError::InvalidTopology(format!("simulated device presets: {why}"));
    let table: PresetTable = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
    if table.preset.is_empty() {
        return Err(bad("no preset".into()));
    }
    for (i, p) in table.preset.iter().enumerate() {
        if p.name.trim().is_empty() || p.name.contains(',') {
            return Err(bad(format!("preset {i} has an empty name or one with a comma ({:?})", p.name)));
        }
        if table.preset[..i].iter().any(|q| q.name.eq_ignore_ascii_case(&p.name)) {
            return Err(bad(format!("preset name {:?} appears twice", p.name)));
        }
        p.try_config().map_err(|e| bad(format!("preset {:?}: {e}", p.name)))?;
    }
    Ok(table.preset)
}

impl SimPreset {
    /// Every preset, in table order (the first is the default).
    pub fn all() -> &'static [SimPreset] {
        static ALL: std::sync::OnceLock<Vec<SimPreset>> = std::sync::OnceLock::new();
        // The table is compiled in and checked by this module's tests: a failure here is a
        // build defect, not bad input.
        ALL.get_or_init(|| parse_presets(PRESETS_TOML).expect("hal/src/sim/presets.toml is valid"))
    }

    /// The default preset: the first in the table.
    pub fn default_preset() -> &'static SimPreset {
        &Self::all()[0]
    }

    /// The preset called `name` (case-insensitive, surrounding blanks ignored); an unknown name
    /// is an error listing the known ones.
    pub fn named(name: &str) -> Result<&'static SimPreset, HalError> {
        let name = name.trim();
        Self::all().iter().find(|p| p.name.eq_ignore_ascii_case(name)).ok_or_else(|| {
            HalError::InvalidTopology(format!(
                "unknown simulated device {name:?}: use one of {}",
                Self::all().iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })
    }

    fn try_config(&self) -> Result<SimConfig, HalError> {
        let bad = |why: String| Err(HalError::InvalidTopology(why));
        let mut leaves = Vec::new();
        let mut next = 0usize;
        for run in &self.leaves {
            if run.units == 0 || run.count == 0 {
                return bad(format!("a leaf run of {} x {} units", run.count, run.units));
            }
            for _ in 0..run.count {
                let end = next.saturating_add(run.units);
                if end > self.units {
                    return bad(format!("the leaves need more than the device's {} units", self.units));
                }
                leaves.push(UnitSet::range(next, end));
                next = end;
            }
        }
        let domains = match self.domains {
            None => Vec::new(),
            Some(DomainSpec { count, .. }) if count == 0 || count > self.units => {
                return bad(format!("{count} domains over {} units", self.units))
            }
            Some(DomainSpec { count, layout: DomainLayout::Interleaved }) => {
                (0..count).map(|d| (0..self.units).filter(|i| i % count == d).collect()).collect()
            }
            Some(DomainSpec { count, layout: DomainLayout::Contiguous }) => {
                if self.units / count * count != self.units {
                    return bad(format!("{} units do not split into {count} equal domains", self.units));
                }
                let size = self.units / count;
                (0..count).map(|d| UnitSet::range(d * size, (d + 1) * size)).collect()
            }
        };
        let config = SimConfig {
            name: self.display_name.clone(),
            vendor: self.vendor.clone(),
            unit_name: self.unit_name.clone(),
            unit_count: self.units,
            leaves,
            domains,
            min_partition_size: self.min_partition,
        };
        // Topology::new checks the rest (coverage, unit bound, labels).
        topology_spec(config.clone()).and_then(Topology::new)?;
        Ok(config)
    }

    /// The preset's configuration.
    pub fn config(&self) -> SimConfig {
        // Every preset of the table was checked when the table was parsed.
        self.try_config().expect("presets are validated when parsed")
    }

    /// A fresh simulated device of this preset.
    pub fn backend(&self) -> SimBackend {
        SimBackend::new(self.config()).expect("presets are validated when parsed")
    }
}

/// A preset chosen by name, as a small copyable handle (what `vitamin --sim-device` parses).
/// The default is the table's first preset.
#[derive(Debug, Clone, Copy)]
pub struct SimDevice(&'static SimPreset);

impl SimDevice {
    /// The preset called `name` ([`SimPreset::named`]).
    pub fn named(name: &str) -> Result<Self, HalError> {
        SimPreset::named(name).map(SimDevice)
    }

    /// Every preset.
    pub fn all() -> impl Iterator<Item = SimDevice> {
        SimPreset::all().iter().map(SimDevice)
    }

    /// The preset's name.
    pub fn name(self) -> &'static str {
        &self.0.name
    }

    /// The preset itself.
    pub fn preset(self) -> &'static SimPreset {
        self.0
    }

    /// The preset's configuration.
    pub fn config(self) -> SimConfig {
        self.0.config()
    }

    /// A fresh simulated device of this preset.
    pub fn backend(self) -> SimBackend {
        self.0.backend()
    }

    /// Whether this is the default preset.
    pub fn is_default(self) -> bool {
        self == SimDevice::default()
    }
}

impl Default for SimDevice {
    fn default() -> Self {
        SimDevice(SimPreset::default_preset())
    }
}

impl PartialEq for SimDevice {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for SimDevice {}

impl std::hash::Hash for SimDevice {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl std::str::FromStr for SimDevice {
    type Err = HalError;

    fn from_str(s: &str) -> Result<Self, HalError> {
        SimDevice::named(s)
    }
}

impl std::fmt::Display for SimDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The topology description of a simulated device of shape `config`.
fn topology_spec(config: SimConfig) -> Result<TopologySpec, HalError> {
    Ok(TopologySpec {
        vendor: config.vendor,
        device_name: config.name,
        unit_name: config.unit_name,
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
    })
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
        let topology = Topology::new(topology_spec(config)?)?;
        Ok(SimBackend { topology: Arc::new(topology), engine: Arc::new(Mutex::new(Engine::new(kernels::builtin()))) })
    }

    /// A fresh device of the preset called `name` ([`SimPreset::named`]).
    pub fn preset(name: &str) -> Result<Self, HalError> {
        SimPreset::named(name).map(SimPreset::backend)
    }

    /// A fresh device of the default preset ([`SimPreset::default_preset`]).
    pub fn default_device() -> Self {
        SimPreset::default_preset().backend()
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

    /// Makes `units` place no thread-block cluster: a cluster launch is refused
    /// ([`Incompatibility::ClusterShape`]) on a partition whose units all lie there, so node shape,
    /// not size alone, decides where it runs. On a real device the driver decides by the SMs'
    /// layout: on an H100, SM 120-131 refused ResNet-50's cluster launches that SM 0-7 ran
    /// (docs/results/eval.md, mixed-graph run 16). Default: none.
    pub fn set_clusterless_units(&self, units: UnitSet) {
        self.engine.lock().clusterless = units;
    }

    /// From now on only a partition holding every unit runs kernel and graph launches; smaller
    /// ones refuse them ([`Incompatibility::ContextBound`], with `why`), as a CUDA green context
    /// refuses a launch valid only in the application's own context (a function whose raised
    /// dynamic shared memory limit it could not raise). For tests of how the dispatcher places
    /// launches that only the whole device runs.
    pub fn keep_on_whole_device(&self, why: &str) {
        let device = self.topology().all_units();
        self.engine.lock().whole_device_only = Some((why.to_owned(), device));
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
        let e = self.engine.lock();
        if let Some((why, device)) = e.whole_device_only.as_ref().filter(|_| op.uses_units()) {
            if self.units != *device {
                return Err(Incompatibility::ContextBound { function: op.label().to_owned(), why: why.clone() });
            }
        }
        let OpDesc::Kernel(k) = op else { return Ok(()) };
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
            if cb > capacity || self.units.is_subset(&e.clusterless) {
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
    /// during the call), as a native caller would launch on the lane's stream.
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
    fn the_table_parses_and_every_preset_builds_its_topology() {
        let all = SimPreset::all();
        assert!(all.len() >= 2, "{all:?}");
        for p in all {
            let b = p.backend();
            let t = b.topology();
            assert_eq!(
                (t.unit_count(), t.device_name(), t.vendor()),
                (p.units, p.display_name.as_str(), p.vendor.as_str())
            );
            assert_eq!(t.unit_name(), p.unit_name);
            assert_eq!(t.leaves().len(), p.leaves.iter().map(|r| r.count).sum::<usize>());
            assert_eq!(t.domains().len(), p.domains.map_or(0, |d| d.count));
            assert!(t.capabilities().simulated);
        }
        assert_eq!(SimDevice::default().preset(), &all[0]);
        assert!(SimDevice::default().is_default());
    }

    #[test]
    fn presets_by_name_and_unknown_names_list_the_known_ones() {
        for p in SimPreset::all() {
            let upper = format!(" {} ", p.name.to_ascii_uppercase());
            assert_eq!(upper.parse::<SimDevice>().map(SimDevice::name), Ok(p.name.as_str()));
            assert_eq!(SimBackend::preset(&p.name).map(|b| b.topology().unit_count()), Ok(p.units));
        }
        let err = "no-such-device".parse::<SimDevice>().unwrap_err().to_string();
        for p in SimPreset::all() {
            assert!(err.contains(p.name.as_str()), "{err}");
        }
        assert!(err.contains("no-such-device"), "{err}");
    }

    #[test]
    fn layouts_build_as_described() {
        let text = r#"
            [[preset]]
            name = "a"
            display_name = "A"
            vendor = "v"
            unit_name = "U"
            units = 12
            min_partition = 4
            leaves = [{ count = 2, units = 4 }, { count = 2, units = 2 }]
            domains = { count = 3, layout = "contiguous" }

            [[preset]]
            name = "b"
            display_name = "B"
            vendor = "v"
            unit_name = "U"
            units = 6
            min_partition = 6
            leaves = [{ count = 1, units = 6 }]
            domains = { count = 2, layout = "interleaved" }
        "#;
        let p = parse_presets(text).expect("valid");
        let a = p[0].config();
        assert_eq!(
            a.leaves,
            vec![UnitSet::range(0, 4), UnitSet::range(4, 8), UnitSet::range(8, 10), UnitSet::range(10, 12)]
        );
        assert_eq!(a.domains, vec![UnitSet::range(0, 4), UnitSet::range(4, 8), UnitSet::range(8, 12)]);
        let b = p[1].config();
        assert_eq!(b.domains, vec![[0, 2, 4].into_iter().collect(), [1, 3, 5].into_iter().collect::<UnitSet>()]);
    }

    proptest::proptest! {
        /// Any table of leaf runs and domains builds the layout a plain reference computes: leaves
        /// of the runs' sizes, consecutive and in order; interleaved domains by `unit mod count`,
        /// contiguous ones by `unit / (units / count)`.
        #[test]
        fn leaf_runs_and_domains_build_as_the_reference_says(
            runs in proptest::collection::vec((1usize..4, 1usize..12), 1..6),
            domains in 0usize..5,
            interleaved in proptest::bool::ANY,
        ) {
            let units: usize = runs.iter().map(|&(c, u)| c * u).sum();
            let leaves: Vec<String> = runs.iter().map(|(c, u)| format!("{{ count = {c}, units = {u} }}")).collect();
            let layout = if interleaved { "interleaved" } else { "contiguous" };
            let domain_line = if domains == 0 { String::new() } else { format!("domains = {{ count = {domains}, layout = \"{layout}\" }}\n") };
            let text = format!(
                "[[preset]]\nname = \"p\"\ndisplay_name = \"P\"\nvendor = \"v\"\nunit_name = \"U\"\nunits = {units}\nmin_partition = 1\nleaves = [{}]\n{domain_line}",
                leaves.join(", ")
            );
            let fits = domains == 0 || (domains <= units && (interleaved || units / domains * domains == units));
            let parsed = parse_presets(&text);
            proptest::prop_assert_eq!(parsed.is_ok(), fits, "{}: {:?}", text, parsed);
            let Ok(p) = parsed else { return Ok(()) };
            let config = p[0].config();
            let mut want = Vec::new();
            let mut at = 0;
            for &(c, u) in &runs {
                for _ in 0..c {
                    want.push((at..at + u).collect::<UnitSet>());
                    at += u;
                }
            }
            proptest::prop_assert_eq!(&config.leaves, &want);
            for (d, set) in config.domains.iter().enumerate() {
                for i in 0..units {
                    let home = if interleaved { i % domains } else { i / (units / domains) };
                    proptest::prop_assert_eq!(set.contains(i), home == d, "unit {} domain {}", i, d);
                }
            }
            proptest::prop_assert_eq!(config.domains.len(), domains);
        }
    }

    #[test]
    fn bad_tables_are_errors_that_say_why() {
        let one = |body: &str| {
            format!("[[preset]]\nname = \"x\"\ndisplay_name = \"X\"\nvendor = \"v\"\nunit_name = \"U\"\n{body}")
        };
        let cases = [
            (one("units = 8\nmin_partition = 4\nleaves = [{ count = 1, units = 4 }]"), "uncovered"),
            (one("units = 8\nmin_partition = 4\nleaves = [{ count = 3, units = 4 }]"), "more than"),
            (one("units = 8\nmin_partition = 4\nleaves = [{ count = 0, units = 8 }]"), "leaf run"),
            (one("units = 8\nmin_partition = 8\nleaves = [{ count = 1, units = 8 }]\ndomains = { count = 3, layout = \"contiguous\" }"), "equal domains"),
            (one("units = 8\nmin_partition = 8\nleaves = [{ count = 1, units = 8 }]\ncolour = 1"), "colour"),
            ("preset = []".to_string(), "no preset"),
            ("[[preset]]\nname = 3".to_string(), "name"),
        ];
        for (text, why) in cases {
            let e = parse_presets(&text).expect_err(&text).to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
        let twice = format!(
            "{}\n{}",
            one("units = 8\nmin_partition = 8\nleaves = [{ count = 1, units = 8 }]"),
            one("units = 8\nmin_partition = 8\nleaves = [{ count = 1, units = 8 }]")
        );
        assert!(parse_presets(&twice).unwrap_err().to_string().contains("twice"));
    }
}
