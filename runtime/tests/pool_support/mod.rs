//! Shared helpers of the pool tests: topologies (presets and random) and a reference builder
//! of the expected hierarchy, written independently of `runtime::pool`.
#![allow(dead_code)] // each test file uses a different subset

use proptest::prelude::*;
use vitamin_hal::sim::{SimConfig, SimPreset};
use vitamin_hal::{Capabilities, Topology, TopologySpec, UnitSet};

/// A topology from a simulated-device preset.
pub fn topology_of(config: SimConfig) -> Topology {
    topology(&config.vendor, &config.unit_name, config.unit_count, config.leaves)
}

pub fn h200() -> Topology {
    topology_of(SimPreset::named("h200").unwrap().config())
}

pub fn mi300x() -> Topology {
    topology_of(SimPreset::named("mi300x").unwrap().config())
}

pub fn topology(vendor: &str, unit_name: &str, unit_count: usize, leaves: Vec<UnitSet>) -> Topology {
    let min = leaves.iter().map(UnitSet::len).min().unwrap_or(1);
    Topology::new(TopologySpec {
        vendor: vendor.into(),
        device_name: "test device".into(),
        unit_name: unit_name.into(),
        unit_count,
        leaves,
        domains: Vec::new(),
        min_partition_size: min,
        alignment: min,
        capabilities: Capabilities {
            backend: "test".into(),
            simulated: true,
            driver_version: None,
            spatial_partitioning: true,
            cooperative_launch: false,
            clusters: false,
            notes: Vec::new(),
        },
    })
    .expect("generated topologies are valid")
}

/// Random topologies: up to `max_leaves` leaves of random (unequal) sizes over a random
/// permutation of the units (so leaves need not be contiguous), at most 512 units.
pub fn arb_topology(max_leaves: usize) -> impl Strategy<Value = Topology> {
    (prop::collection::vec(1usize..=24, 1..=max_leaves), any::<bool>(), any::<u64>()).prop_map(
        |(mut sizes, shuffle, seed)| {
            // Cap the total at 512 units.
            let mut total = 0;
            sizes.retain(|&s| {
                total += s;
                total <= vitamin_hal::MAX_UNITS
            });
            let unit_count: usize = sizes.iter().sum();
            let mut order: Vec<usize> = (0..unit_count).collect();
            if shuffle {
                // Small deterministic Fisher-Yates from the seed (xorshift).
                let mut s = seed | 1;
                for i in (1..order.len()).rev() {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    order.swap(i, (s % (i as u64 + 1)) as usize);
                }
            }
            let mut leaves = Vec::new();
            let mut at = 0;
            for s in sizes {
                leaves.push(order[at..at + s].iter().copied().collect());
                at += s;
            }
            topology("test", "SM", unit_count, leaves)
        },
    )
}

/// What a node of the expected hierarchy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RefKind {
    Leaf,
    Internal,
    Remainder,
}

/// The expected hierarchy as a plain list of (units, kind), from the rule in the issue:
/// recursive binary split of the leaf list with mid = lo + ceil((hi-lo)/2), plus a remainder
/// per non-root tree node unless the complement already is a tree node. No ordering promised.
pub fn reference_nodes(top: &Topology) -> Vec<(UnitSet, RefKind)> {
    fn split(leaves: &[UnitSet], out: &mut Vec<(UnitSet, RefKind)>) {
        let units = leaves.iter().fold(UnitSet::EMPTY, |a, l| a | *l);
        if leaves.len() == 1 {
            out.push((units, RefKind::Leaf));
            return;
        }
        out.push((units, RefKind::Internal));
        let mid = leaves.len().div_ceil(2);
        split(&leaves[..mid], out);
        split(&leaves[mid..], out);
    }
    let mut tree = Vec::new();
    split(top.leaves(), &mut tree);
    let device = top.all_units();
    let mut all = tree.clone();
    for (u, _) in &tree {
        let c = device.difference(u);
        if !c.is_empty() && !tree.iter().any(|(t, _)| *t == c) {
            all.push((c, RefKind::Remainder));
        }
    }
    all
}
