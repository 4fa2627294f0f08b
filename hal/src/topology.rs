//! [`Topology`]: what a device offers for spatial partitioning, filled once at start-up.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::unitset::{UnitSet, MAX_UNITS};
use crate::HalError;

/// What the backend behind a topology can do; filled once by the backend's probe instead of
/// scattering version checks through the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Backend name, as the backend crate gives it (`sim` for the simulated device).
    pub backend: String,
    /// Whether this is the simulated device (virtual time, CPU reference kernels).
    pub simulated: bool,
    /// Driver/runtime version as the backend's driver reports it, if any.
    pub driver_version: Option<u32>,
    /// Whether units can be confined per partition.
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
/// `0..unit_count`, and together cover every unit; the vendor and unit labels are non-empty.
///
/// The vendor and the unit's name are labels the backend supplies (what users read in `vitamin
/// info` and the pool's JSON); nothing in this crate or the runtime branches on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    vendor: String,
    device_name: String,
    unit_name: String,
    unit_count: usize,
    leaves: Vec<UnitSet>,
    /// Hardware groupings of units (dies sharing a cache), empty when the device has none.
    domains: Vec<UnitSet>,
    min_partition_size: usize,
    alignment: usize,
    capabilities: Capabilities,
}

/// Everything [`Topology::new`] needs.
#[derive(Debug, Clone)]
pub struct TopologySpec {
    /// The vendor's label, lower case, as the backend names it (shown to users, never matched on).
    pub vendor: String,
    /// Human-readable device name.
    pub device_name: String,
    /// The execution unit's short name as the vendor writes it (shown to users, never matched on).
    pub unit_name: String,
    /// Total units.
    pub unit_count: usize,
    /// Leaves as produced by the one start-up split.
    pub leaves: Vec<UnitSet>,
    /// Hardware groupings of units, may be empty.
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
        if spec.vendor.trim().is_empty() || spec.unit_name.trim().is_empty() {
            return bad(format!("empty vendor ({:?}) or unit name ({:?}) label", spec.vendor, spec.unit_name));
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
            unit_name: spec.unit_name,
            unit_count: spec.unit_count,
            leaves: spec.leaves,
            domains: spec.domains,
            min_partition_size: spec.min_partition_size,
            alignment: spec.alignment,
            capabilities: spec.capabilities,
        })
    }

    /// The vendor's label (lower case), as the backend supplied it.
    pub fn vendor(&self) -> &str {
        &self.vendor
    }
    /// Device name.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }
    /// The execution unit's short name, as the backend supplied it.
    pub fn unit_name(&self) -> &str {
        &self.unit_name
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
    /// Hardware unit groupings; empty when none.
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
            "{} ({}, backend {}{}): {} {}s, min partition {}, alignment {}",
            self.device_name,
            self.vendor,
            caps.backend,
            if caps.simulated { ", SIMULATED" } else { "" },
            self.unit_count,
            self.unit_name,
            self.min_partition_size,
            self.alignment
        )?;
        if let Some(v) = caps.driver_version {
            writeln!(f, "  driver version {v}")?;
        }
        writeln!(f, "  {} leaves:", self.leaves.len())?;
        for (i, leaf) in self.leaves.iter().enumerate() {
            writeln!(f, "    leaf {i:>2}: {:>3} {}s  {}", leaf.len(), self.unit_name, leaf.display(&self.unit_name))?;
        }
        for (i, d) in self.domains.iter().enumerate() {
            writeln!(f, "  domain {i}: {} {}s", d.len(), self.unit_name)?;
        }
        for n in &caps.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}
