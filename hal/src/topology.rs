//! [`Topology`]: what a device offers for spatial partitioning, filled once at start-up.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::unitset::{UnitSet, MAX_UNITS};
use crate::HalError;

/// GPU vendor of a device (the simulated device imitates one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA: partitions are Green Contexts over SMs.
    Nvidia,
    /// AMD: partitions are CU-masked queues.
    Amd,
}

/// The kind of execution unit a [`UnitSet`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitKind {
    /// NVIDIA streaming multiprocessor.
    Sm,
    /// AMD compute unit.
    Cu,
}

impl UnitKind {
    /// `SM` or `CU`.
    pub fn short_name(self) -> &'static str {
        match self {
            UnitKind::Sm => "SM",
            UnitKind::Cu => "CU",
        }
    }
}

impl fmt::Display for UnitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short_name())
    }
}

/// What the backend behind a topology can do; filled once by the backend's probe instead of
/// scattering version checks through the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Backend name: `sim`, `cuda` or `hip`.
    pub backend: String,
    /// Whether this is the simulated device (virtual time, CPU reference kernels).
    pub simulated: bool,
    /// Driver/runtime version as the vendor reports it (e.g. CUDA `13000`), if any.
    pub driver_version: Option<u32>,
    /// Whether units can be confined per partition (green contexts / CU masks).
    pub spatial_partitioning: bool,
    /// Whether cooperative launches can be checked for co-residency on a partition.
    pub cooperative_launch: bool,
    /// Whether thread-block clusters exist on this device.
    pub clusters: bool,
    /// Free-form notes from the probe (why a feature is off, which library was loaded).
    pub notes: Vec<String>,
}

/// A device's units and the leaves (smallest allocations) it can be split into.
///
/// Invariants (checked by [`Topology::new`]): leaves are non-empty, pairwise disjoint, lie within
/// `0..unit_count`, and together cover every unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    vendor: Vendor,
    device_name: String,
    unit_kind: UnitKind,
    unit_count: usize,
    leaves: Vec<UnitSet>,
    /// Hardware groupings of units (AMD XCDs), empty when the device has none.
    domains: Vec<UnitSet>,
    min_partition_size: usize,
    alignment: usize,
    capabilities: Capabilities,
}

/// Everything [`Topology::new`] needs.
#[derive(Debug, Clone)]
pub struct TopologySpec {
    /// Vendor.
    pub vendor: Vendor,
    /// Human-readable device name.
    pub device_name: String,
    /// SM or CU.
    pub unit_kind: UnitKind,
    /// Total units.
    pub unit_count: usize,
    /// Leaves as produced by the one start-up split.
    pub leaves: Vec<UnitSet>,
    /// Hardware groupings (XCDs), may be empty.
    pub domains: Vec<UnitSet>,
    /// Smallest allocation the hardware allows.
    pub min_partition_size: usize,
    /// Allocation granularity.
    pub alignment: usize,
    /// Probe results.
    pub capabilities: Capabilities,
}

impl Topology {
    /// Builds and validates a topology.
    pub fn new(spec: TopologySpec) -> Result<Self, HalError> {
        let bad = |why: String| Err(HalError::InvalidTopology(why));
        if spec.unit_count == 0 || spec.unit_count > MAX_UNITS {
            return bad(format!("unit count {} not in 1..={MAX_UNITS}", spec.unit_count));
        }
        if spec.leaves.is_empty() {
            return bad("no leaves".into());
        }
        let device = UnitSet::first_n(spec.unit_count);
        let mut covered = UnitSet::EMPTY;
        for (i, leaf) in spec.leaves.iter().enumerate() {
            if leaf.is_empty() {
                return bad(format!("leaf {i} is empty"));
            }
            if !leaf.is_subset(&device) {
                return bad(format!("leaf {i} ({leaf}) exceeds the device's {} units", spec.unit_count));
            }
            if leaf.intersects(&covered) {
                return bad(format!("leaf {i} ({leaf}) overlaps an earlier leaf"));
            }
            covered |= *leaf;
        }
        if covered != device {
            return bad(format!("leaves leave units {} uncovered", device.difference(&covered)));
        }
        Ok(Topology {
            vendor: spec.vendor,
            device_name: spec.device_name,
            unit_kind: spec.unit_kind,
            unit_count: spec.unit_count,
            leaves: spec.leaves,
            domains: spec.domains,
            min_partition_size: spec.min_partition_size,
            alignment: spec.alignment,
            capabilities: spec.capabilities,
        })
    }

    /// Vendor.
    pub fn vendor(&self) -> Vendor {
        self.vendor
    }
    /// Device name.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }
    /// SM or CU.
    pub fn unit_kind(&self) -> UnitKind {
        self.unit_kind
    }
    /// Total units.
    pub fn unit_count(&self) -> usize {
        self.unit_count
    }
    /// All units of the device.
    pub fn all_units(&self) -> UnitSet {
        UnitSet::first_n(self.unit_count)
    }
    /// The leaves, in split order.
    pub fn leaves(&self) -> &[UnitSet] {
        &self.leaves
    }
    /// Hardware unit groupings (AMD XCDs); empty when none.
    pub fn domains(&self) -> &[UnitSet] {
        &self.domains
    }
    /// Smallest allocation.
    pub fn min_partition_size(&self) -> usize {
        self.min_partition_size
    }
    /// Allocation granularity.
    pub fn alignment(&self) -> usize {
        self.alignment
    }
    /// Probe results.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let caps = &self.capabilities;
        writeln!(
            f,
            "{} ({:?}, backend {}{}): {} {}s, min partition {}, alignment {}",
            self.device_name,
            self.vendor,
            caps.backend,
            if caps.simulated { ", SIMULATED" } else { "" },
            self.unit_count,
            self.unit_kind,
            self.min_partition_size,
            self.alignment
        )?;
        if let Some(v) = caps.driver_version {
            writeln!(f, "  driver version {v}")?;
        }
        writeln!(f, "  {} leaves:", self.leaves.len())?;
        for (i, leaf) in self.leaves.iter().enumerate() {
            writeln!(f, "    leaf {i:>2}: {:>3} {}s  {}", leaf.len(), self.unit_kind, leaf.display(self.unit_kind))?;
        }
        for (i, d) in self.domains.iter().enumerate() {
            writeln!(f, "  domain {i}: {} {}s", d.len(), self.unit_kind)?;
        }
        for n in &caps.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}
