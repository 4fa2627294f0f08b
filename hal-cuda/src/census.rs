//! `%smid` census: which physical SMs a launch bound to a partition really runs on.
//!
//! A census kernel (`smid_census` in `kernels/cuda`) writes each block's `%smid` after spinning
//! briefly, with 8 blocks per SM of the **whole device**, so a partition that leaked onto more
//! SMs than it owns would show it. [`check_nodes`] verifies the contract of the leaf numbering:
//! each leaf's physical set has the leaf's size, leaves are pairwise disjoint, and every node runs
//! on exactly the union of its leaves' physical sets.
//!
//! The **graph census** ([`check_graph_nodes`]) asks the same of graph launches: a graph captured
//! in the primary context (census kernels, sequential and on parallel branches) launched as one op
//! (`OpDesc::Graph`) on a partition's green-context stream; which SMs do its kernels use? Each
//! node's answer is compared with a plain census launch on that node, and the same graph launched
//! on the primary context is the control (it should cover the device). Each node also launches the
//! graph with its per-partition copies ([`crate::copies`]): the copy's kernels should use exactly
//! the node's SMs.
//!
//! `%smid` is virtualized under MPS; run the census without MPS.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::Serialize;
use vitamin_hal::{
    Backend, Dim3, GraphLaunch, HalError, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc, PhysicalPartition,
};

use crate::copies::CudaGraphCopies;
use crate::graph::CapturedGraph;
use crate::{CudaBackend, CudaPartition};

/// Nanoseconds each census block spins so that blocks spread over every SM.
const SPIN_NS: u32 = 20_000;
/// Census blocks per SM of the whole device.
const BLOCKS_PER_DEVICE_SM: u32 = 8;

/// The physical SMs (`%smid` values) a launch on `part`'s lane 0 used.
pub fn physical_sms(backend: &CudaBackend, part: &CudaPartition) -> Result<BTreeSet<u32>, HalError> {
    let blocks = backend.topology().unit_count() as u32 * BLOCKS_PER_DEVICE_SM;
    let out = backend.alloc(blocks as usize * 4)?;
    let result = (|| {
        backend.write(out, &vec![0xff; blocks as usize * 4])?;
        let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
            backend.kernel("smid_census")?,
            Dim3::x(blocks),
            Dim3::x(32),
            0,
            KernelArgs::pack(&[&out.to_le_bytes(), &SPIN_NS.to_le_bytes()]),
            LaunchAttributes::none(),
        )));
        let fence = part.submit(0, &op)?;
        part.wait_for(fence)?;
        let bytes = backend.read(out, blocks as usize * 4)?;
        let ids: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if let Some(b) = ids.iter().position(|&v| v == u32::MAX) {
            return Err(HalError::Async(format!("census block {b} wrote nothing")));
        }
        Ok(ids.into_iter().collect())
    })();
    backend.free(out)?;
    result
}

/// One node's census.
#[derive(Debug, Clone, Serialize)]
pub struct NodeCensus {
    /// The node's logical units (`SM 0-15`).
    pub units: String,
    /// Logical size.
    pub size: usize,
    /// Distinct physical SMs its launch used.
    pub physical: Vec<u32>,
    /// Whether `physical` is exactly the union of its leaves' physical sets.
    pub exact: bool,
}

/// The census of a pool.
#[derive(Debug, Clone, Serialize)]
pub struct CensusReport {
    /// Physical SM set of each leaf, in leaf order.
    pub leaves: Vec<Vec<u32>>,
    /// Whether every leaf used exactly its size in SMs and leaves are pairwise disjoint.
    pub leaves_disjoint_and_sized: bool,
    /// Every node.
    pub nodes: Vec<NodeCensus>,
    /// Whether every node used exactly its leaves' SMs.
    pub all_exact: bool,
}

/// Runs the census on every leaf, then on every node (`parts[i]` realizes `nodes[i]`).
pub fn check_nodes(backend: &CudaBackend, parts: &[&CudaPartition]) -> Result<CensusReport, HalError> {
    let top = backend.topology().clone();
    let mut leaves = Vec::new();
    for leaf in top.leaves() {
        let p = match parts.iter().find(|p| p.units() == leaf) {
            Some(p) => physical_sms(backend, p)?,
            None => physical_sms(backend, &backend.create_partition(leaf, 1)?)?,
        };
        leaves.push(p);
    }
    let mut seen = BTreeSet::new();
    let mut ok = true;
    for (leaf, phys) in top.leaves().iter().zip(&leaves) {
        ok &= phys.len() == leaf.len() && phys.is_disjoint(&seen);
        seen.extend(phys.iter().copied());
    }
    let mut nodes = Vec::new();
    for p in parts {
        let phys = physical_sms(backend, p)?;
        let expected: BTreeSet<u32> = top
            .leaves()
            .iter()
            .zip(&leaves)
            .filter(|(l, _)| l.is_subset(p.units()))
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        nodes.push(NodeCensus {
            units: p.units().display(top.unit_name()).to_string(),
            size: p.units().len(),
            exact: phys == expected,
            physical: phys.into_iter().collect(),
        });
    }
    Ok(CensusReport {
        leaves: leaves.into_iter().map(|s| s.into_iter().collect()).collect(),
        leaves_disjoint_and_sized: ok,
        all_exact: nodes.iter().all(|n| n.exact),
        nodes,
    })
}

// ---- graphs -----------------------------------------------------------------------------------

/// Census kernels in the census graph: one, then two on parallel branches.
pub const GRAPH_KERNELS: usize = 3;

/// The physical SMs each kernel of a census graph used, when the graph (captured in the primary
/// context: one census kernel, then two on parallel branches, each writing its own slice) is
/// launched as **one op**, `OpDesc::Graph`, on `part`'s lane 0. `on` = `None` launches it on the
/// primary context instead (the control: all SMs). With `copies`, the launch carries the graph's
/// per-partition copies ([`crate::copies`]), as the shim's launches of a confinable graph do.
pub fn graph_physical_sms(
    backend: &CudaBackend,
    on: Option<&CudaPartition>,
    copies: bool,
) -> Result<Vec<BTreeSet<u32>>, HalError> {
    let blocks = backend.topology().unit_count() as u32 * BLOCKS_PER_DEVICE_SM;
    let slice = blocks as usize * 4;
    let out = backend.alloc(slice * GRAPH_KERNELS)?;
    let result = (|| {
        backend.write(out, &vec![0xff; slice * GRAPH_KERNELS])?;
        let f = backend.kernel("smid_census")?;
        let launch = |k: usize| {
            let dst = out + (k * slice) as u64;
            KernelLaunch::new(
                f.clone(),
                Dim3::x(blocks),
                Dim3::x(32),
                0,
                KernelArgs::pack(&[&dst.to_le_bytes(), &SPIN_NS.to_le_bytes()]),
                LaunchAttributes::none(),
            )
        };
        let graph = CapturedGraph::capture(backend, &[vec![launch(0)], vec![launch(1), launch(2)]])?;
        match on {
            Some(part) => {
                let mut launch = GraphLaunch::new(graph.exec_handle(), "smid census graph");
                if copies {
                    // SAFETY: both handles are the live graph and executable graph just captured.
                    let c = unsafe { CudaGraphCopies::snapshot(graph.graph_handle(), graph.exec_handle(), 0) }
                        .map_err(|e| HalError::Unsupported { backend: "cuda", reason: e.to_string() })?;
                    launch = launch.with_copies(c);
                }
                let op = Arc::new(OpDesc::Graph(launch));
                let fence = part.submit(0, &op)?;
                part.wait_for(fence)?;
            }
            None => graph.launch_on_primary()?,
        }
        let bytes = backend.read(out, slice * GRAPH_KERNELS)?;
        let ids: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if let Some(b) = ids.iter().position(|&v| v == u32::MAX) {
            return Err(HalError::Async(format!(
                "graph census kernel {} block {} wrote nothing",
                b / blocks as usize,
                b % blocks as usize
            )));
        }
        Ok(ids.chunks(blocks as usize).map(|k| k.iter().copied().collect()).collect())
    })();
    backend.free(out)?;
    result
}

/// One node's graph census.
#[derive(Debug, Clone, Serialize)]
pub struct GraphNodeCensus {
    /// The node's logical units.
    pub units: String,
    /// Logical size.
    pub size: usize,
    /// Physical SMs a plain kernel launch on this node used (the reference).
    pub kernel_physical: Vec<u32>,
    /// Physical SMs each kernel of the graph used when the graph was launched on this node.
    pub graph_kernels_physical: Vec<Vec<u32>>,
    /// Whether every kernel of the graph stayed within `kernel_physical`.
    pub within: bool,
    /// Whether every kernel of the graph used exactly `kernel_physical`.
    pub exact: bool,
    /// Physical SMs each kernel used when the launch carried the graph's per-partition copies.
    pub copy_kernels_physical: Vec<Vec<u32>>,
    /// Whether every kernel of the copy used exactly `kernel_physical`.
    pub copy_exact: bool,
}

/// The graph census of some nodes, with the control launch on the primary context.
#[derive(Debug, Clone, Serialize)]
pub struct GraphCensusReport {
    /// Every node tried.
    pub nodes: Vec<GraphNodeCensus>,
    /// Distinct physical SMs the graph's kernels used when launched on the primary context.
    pub primary_context_sms: usize,
    /// SMs of the device.
    pub device_sms: usize,
    /// Whether every node's graph kernels stayed within its SMs.
    pub all_within: bool,
    /// Whether every node's graph kernels used exactly its SMs.
    pub all_exact: bool,
    /// Whether every node's copy of the graph used exactly its SMs.
    pub all_copies_exact: bool,
}

impl GraphCensusReport {
    /// Pretty JSON (for results files).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Launches the census graph as one op on each of `parts` and compares the SMs its kernels used
/// with a plain census launch on the same partition; then once on the primary context.
pub fn check_graph_nodes(backend: &CudaBackend, parts: &[&CudaPartition]) -> Result<GraphCensusReport, HalError> {
    let kind = backend.topology().unit_name();
    let mut nodes = Vec::new();
    for p in parts {
        let reference = physical_sms(backend, p)?;
        let kernels = graph_physical_sms(backend, Some(p), false)?;
        let copied = graph_physical_sms(backend, Some(p), true)?;
        nodes.push(GraphNodeCensus {
            copy_exact: copied.iter().all(|k| *k == reference),
            copy_kernels_physical: copied.into_iter().map(|k| k.into_iter().collect()).collect(),
            units: p.units().display(kind).to_string(),
            size: p.units().len(),
            within: kernels.iter().all(|k| k.is_subset(&reference)),
            exact: kernels.iter().all(|k| *k == reference),
            graph_kernels_physical: kernels.into_iter().map(|k| k.into_iter().collect()).collect(),
            kernel_physical: reference.into_iter().collect(),
        });
    }
    let primary: BTreeSet<u32> = graph_physical_sms(backend, None, false)?.into_iter().flatten().collect();
    Ok(GraphCensusReport {
        all_within: nodes.iter().all(|n| n.within),
        all_exact: nodes.iter().all(|n| n.exact),
        all_copies_exact: nodes.iter().all(|n| n.copy_exact),
        nodes,
        primary_context_sms: primary.len(),
        device_sms: backend.topology().unit_count(),
    })
}
