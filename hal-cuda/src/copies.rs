//! Per-partition copies of an application's executable graph.
//!
//! A kernel node of a CUDA graph runs in the context the node names, not on the launching
//! stream's green context; a node whose `func` is null runs its `kern` (a `CUkernel`) in the
//! node's `ctx`, and an instantiated graph cannot be moved to another context
//! (docs/results/graph-ctx-probe.md). So confining a graph to a partition takes an executable graph
//! of its own: a copy of the application's graph whose kernel nodes name the partition's green
//! context, instantiated once per partition, at the first launch bound there.
//!
//! [`CudaGraphCopies::snapshot`] clones the graph the application just instantiated (the
//! application may change or destroy its graph afterwards; the executable graph keeps what it
//! was), or says why the graph cannot be confined. The copies live as long as the last launch that
//! holds them ([`vitamin_hal::GraphLaunch::copies`]); dropping them destroys each copy (the driver
//! finishes a destroyed executable graph's launches in flight) and the snapshot.
//!
//! Kernel nodes in thread-block clusters are copied like any other, but a partition runs the
//! copy only if it places each such node's cluster shape ([`CudaGraphCopies::cluster_nodes`],
//! checked as for a cluster launch); a cooperative kernel node keeps the graph on the whole device.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use vitamin_hal::{
    Dim3, FunctionKind, FunctionRef, HalError, KernelArgs, KernelLaunch, LaunchAttributes, PartitionCopies,
};

use crate::driver::graphs::{self, CUgraphNode};
use crate::driver::{capture, CUcontext, CUgraph, CUgraphExec};

/// `CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH`: such a graph is launched from the device too.
const DEVICE_LAUNCH: u64 = 4;
/// The instantiation flags a copy keeps: auto-free on launch (1) and node priorities (8). The
/// upload flag belongs to `cuGraphInstantiateWithParams` alone; device launch is refused above.
const KEPT_FLAGS: u64 = 1 | 8;

/// How many graphs were snapshotted or refused, and how many copies were made, failed or fell
/// back to the application's own executable graph at launch (process-wide, for the census).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct GraphCopyCounts {
    /// Executable graphs whose every node a copy can hold.
    pub confinable: u64,
    /// Executable graphs left to the whole device (a node kind, kernel or flag no copy holds).
    pub whole_device: u64,
    /// Of those: a node kind no copy holds (child graph, memory node, ...).
    pub node_kind: u64,
    /// Of those: a kernel node naming a module function (no `CUkernel`).
    pub module_function: u64,
    /// Of those: a cooperative kernel node.
    pub cooperative: u64,
    /// Of those: instantiated for device-side launch.
    pub device_launch: u64,
    /// Of those: the driver refused a query or the clone.
    pub driver: u64,
    /// Confinable graphs with kernel nodes in thread-block clusters (copied only to partitions
    /// that place every such node's cluster shape).
    pub clustered: u64,
    /// Copies instantiated (one per graph and partition).
    pub copies: u64,
    /// Copies whose making failed (the launch then used the application's executable graph).
    pub failed: u64,
    /// Launches of a copy the driver refused, relaunched as the application's executable graph.
    pub fallbacks: u64,
}

static CONFINABLE: AtomicU64 = AtomicU64::new(0);
static WHOLE_DEVICE: AtomicU64 = AtomicU64::new(0);
static NODE_KIND: AtomicU64 = AtomicU64::new(0);
static MODULE_FUNCTION: AtomicU64 = AtomicU64::new(0);
static COOPERATIVE: AtomicU64 = AtomicU64::new(0);
static DEVICE_LAUNCH_COUNT: AtomicU64 = AtomicU64::new(0);
static DRIVER: AtomicU64 = AtomicU64::new(0);
static CLUSTERED: AtomicU64 = AtomicU64::new(0);
/// The distinct reasons graphs stayed on the whole device (at most [`MAX_REASONS`]), for the census.
static REASONS: Mutex<Vec<String>> = Mutex::new(Vec::new());
const MAX_REASONS: usize = 8;
static COPIES: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// The process's counts so far.
pub fn graph_copy_counts() -> GraphCopyCounts {
    GraphCopyCounts {
        confinable: CONFINABLE.load(Ordering::Relaxed),
        whole_device: WHOLE_DEVICE.load(Ordering::Relaxed),
        node_kind: NODE_KIND.load(Ordering::Relaxed),
        module_function: MODULE_FUNCTION.load(Ordering::Relaxed),
        cooperative: COOPERATIVE.load(Ordering::Relaxed),
        device_launch: DEVICE_LAUNCH_COUNT.load(Ordering::Relaxed),
        driver: DRIVER.load(Ordering::Relaxed),
        clustered: CLUSTERED.load(Ordering::Relaxed),
        copies: COPIES.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
        fallbacks: FALLBACKS.load(Ordering::Relaxed),
    }
}

/// The distinct reasons executable graphs of this process stayed on the whole device (the first
/// few), for the census.
pub fn graph_copy_reasons() -> Vec<String> {
    REASONS.lock().clone()
}

/// Why a graph stays on the whole device, or the driver error met while looking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotConfinable {
    /// A node kind no copy holds (child graph, memory allocation or free, external semaphore,
    /// batched memory operation, conditional).
    #[error("the graph holds a node of kind {0} (only kernel, copy, fill, host, empty and event nodes are copied)")]
    NodeKind(u32),
    /// A kernel node with no `CUkernel` (a function loaded with `cuModuleLoad*`).
    #[error("a kernel node names a module function with no CUkernel, which only its own context runs")]
    ModuleFunction,
    /// A cooperative kernel node.
    #[error("a kernel node is a cooperative launch")]
    Cooperative,
    /// Instantiated for device-side launch.
    #[error("the graph was instantiated for device-side launch")]
    DeviceLaunch,
    /// The driver refused a query or the clone.
    #[error("{0}")]
    Driver(String),
}

impl From<HalError> for NotConfinable {
    fn from(e: HalError) -> Self {
        NotConfinable::Driver(e.to_string())
    }
}

/// The snapshot of one executable graph's source and its copies, by green context.
pub struct CudaGraphCopies {
    /// The application's executable graph: launched where no copy can be made or launched.
    original: u64,
    /// A clone of the application's graph as it was instantiated (owned).
    snapshot: CUgraph,
    /// The application's instantiation flags, less those a copy does not keep.
    flags: u64,
    /// Kernel nodes in the snapshot.
    kernels: usize,
    /// Its kernel nodes in thread-block clusters (distinct function and shape).
    clusters: Vec<KernelLaunch>,
    /// One copy per green context (`CUcontext` as an integer); `None` where making it failed.
    made: Mutex<HashMap<usize, Option<u64>>>,
}

// SAFETY: the snapshot and the copies are driver handles usable from any thread; the map is behind
// a mutex, and the snapshot is only cloned (a read) under that mutex.
unsafe impl Send for CudaGraphCopies {}
// SAFETY: as above.
unsafe impl Sync for CudaGraphCopies {}

impl std::fmt::Debug for CudaGraphCopies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaGraphCopies")
            .field("original", &format_args!("{:#x}", self.original))
            .field("kernels", &self.kernels)
            .field("copies", &self.made.lock().len())
            .finish()
    }
}

impl PartitionCopies for CudaGraphCopies {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl CudaGraphCopies {
    /// Snapshots `graph`, which the application has just instantiated as `exec` with `flags`, if a
    /// copy can hold every node; else says why not (and the graph runs on the whole device).
    ///
    /// # Safety
    /// `graph` must be a live graph and `exec` the executable graph just instantiated from it;
    /// no other thread may change `graph` during the call (the application's own contract for
    /// instantiation).
    pub unsafe fn snapshot(graph: u64, exec: u64, flags: u64) -> Result<Arc<CudaGraphCopies>, NotConfinable> {
        // SAFETY: forwarded from the caller.
        let r = unsafe { Self::snapshot_inner(graph as CUgraph, exec, flags) };
        let counter = match &r {
            Ok(_) => &CONFINABLE,
            Err(NotConfinable::NodeKind(_)) => &NODE_KIND,
            Err(NotConfinable::ModuleFunction) => &MODULE_FUNCTION,
            Err(NotConfinable::Cooperative) => &COOPERATIVE,
            Err(NotConfinable::DeviceLaunch) => &DEVICE_LAUNCH_COUNT,
            Err(NotConfinable::Driver(_)) => &DRIVER,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        match &r {
            Ok(c) if !c.clusters.is_empty() => {
                CLUSTERED.fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => {
                WHOLE_DEVICE.fetch_add(1, Ordering::Relaxed);
                let why = e.to_string();
                let mut reasons = REASONS.lock();
                if reasons.len() < MAX_REASONS && !reasons.contains(&why) {
                    tracing::info!(graph = exec, reason = %why, "an executable graph runs on the whole device only");
                    reasons.push(why);
                }
            }
        }
        r
    }

    unsafe fn snapshot_inner(graph: CUgraph, exec: u64, flags: u64) -> Result<Arc<CudaGraphCopies>, NotConfinable> {
        if flags & DEVICE_LAUNCH != 0 {
            return Err(NotConfinable::DeviceLaunch);
        }
        // SAFETY: `graph` is live (caller).
        let (kernels, clusters) = unsafe { check_nodes(graph) }?;
        // SAFETY: as above.
        let snapshot = unsafe { graphs::clone(graph) }?;
        Ok(Arc::new(CudaGraphCopies {
            original: exec,
            snapshot,
            flags: flags & KEPT_FLAGS,
            kernels,
            clusters,
            made: Mutex::new(HashMap::new()),
        }))
    }

    /// The application's executable graph.
    pub fn original(&self) -> u64 {
        self.original
    }

    /// Kernel nodes in the graph.
    pub fn kernels(&self) -> usize {
        self.kernels
    }

    /// The kernel nodes that run in thread-block clusters, one per distinct function and shape, as
    /// launches (no arguments): a partition runs a copy only if it places every one of them.
    pub fn cluster_nodes(&self) -> &[KernelLaunch] {
        &self.clusters
    }

    /// The copy whose kernel nodes run in `ctx` (made at the first call for that context), or
    /// `None` if it cannot be made (then the caller launches [`Self::original`]; the failure is
    /// remembered and logged once per context). `raise(kern, bytes)` raises a kernel's dynamic
    /// shared memory limit in that context before a node asking for `bytes` is instantiated there.
    pub(crate) fn exec_for(&self, ctx: CUcontext, raise: &dyn Fn(u64, u32) -> Result<(), HalError>) -> Option<u64> {
        let mut made = self.made.lock();
        *made.entry(ctx as usize).or_insert_with(|| {
            // SAFETY: the snapshot is owned and live; `ctx` is a live green context's CUcontext.
            match unsafe { self.make(ctx, raise) } {
                Ok(e) => {
                    COPIES.fetch_add(1, Ordering::Relaxed);
                    Some(e as u64)
                }
                Err(e) => {
                    FAILED.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, graph = self.original, "no copy of the graph for a partition: it runs on the whole device there");
                    None
                }
            }
        })
    }

    /// Clones the snapshot, points every kernel node at `ctx` (`func` null, `kern` kept), and
    /// instantiates the clone (which is then destroyed: an executable graph does not need it).
    unsafe fn make(
        &self,
        ctx: CUcontext,
        raise: &dyn Fn(u64, u32) -> Result<(), HalError>,
    ) -> Result<CUgraphExec, HalError> {
        // SAFETY: the snapshot is live (owned until drop).
        let g = unsafe { graphs::clone(self.snapshot) }?;
        let r = (|| {
            // SAFETY: `g` is the live clone made above.
            for node in unsafe { graphs::nodes(g) }? {
                // SAFETY: `node` belongs to `g`.
                if unsafe { graphs::node_type(node) }? != graphs::KERNEL {
                    continue;
                }
                // SAFETY: a kernel node of `g`.
                let mut p = unsafe { graphs::kernel_params(node) }?;
                raise(p.kern as u64, p.sharedMemBytes)?;
                p.func = std::ptr::null_mut();
                p.ctx = ctx;
                // SAFETY: `p` holds the node's own argument pointers, valid while `g` lives.
                unsafe { graphs::set_kernel_params(node, &p) }?;
            }
            // SAFETY: `g` is live.
            unsafe { graphs::instantiate(g, self.flags) }
        })();
        // SAFETY: the clone is ours and no longer needed.
        if let Err(e) = unsafe { capture::destroy_graph(g) } {
            tracing::debug!(error = %e, "destroying a graph clone failed");
        }
        r
    }

    /// Counts a launch of a copy that the driver refused and that ran as the original instead.
    pub(crate) fn note_fallback(&self) {
        FALLBACKS.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for CudaGraphCopies {
    fn drop(&mut self) {
        for exec in self.made.get_mut().values().flatten() {
            // SAFETY: each copy is ours; the driver finishes its launches in flight.
            if let Err(e) = unsafe { capture::destroy_exec(*exec as CUgraphExec) } {
                tracing::debug!(error = %e, "destroying a graph copy failed");
            }
        }
        // SAFETY: the snapshot is ours and no longer used.
        if let Err(e) = unsafe { capture::destroy_graph(self.snapshot) } {
            tracing::debug!(error = %e, "destroying a graph snapshot failed");
        }
    }
}

/// Whether a copy can hold every node of `graph`; if so, the number of kernel nodes and its
/// kernel nodes in thread-block clusters.
///
/// # Safety
/// `graph` must be live.
unsafe fn check_nodes(graph: CUgraph) -> Result<(usize, Vec<KernelLaunch>), NotConfinable> {
    let mut kernels = 0;
    let mut clusters: Vec<KernelLaunch> = Vec::new();
    // SAFETY: the caller guarantees `graph`.
    let nodes: Vec<CUgraphNode> = unsafe { graphs::nodes(graph) }?;
    for node in nodes {
        // SAFETY: `node` belongs to the live graph.
        let kind = unsafe { graphs::node_type(node) }?;
        if !graphs::COPYABLE.contains(&kind) {
            return Err(NotConfinable::NodeKind(kind));
        }
        if kind != graphs::KERNEL {
            continue;
        }
        // SAFETY: a kernel node of the live graph.
        let p = unsafe { graphs::kernel_params(node) }?;
        if p.kern.is_null() {
            return Err(NotConfinable::ModuleFunction);
        }
        // SAFETY: as above.
        let (cooperative, cluster) = unsafe { graphs::kernel_coresidency(node) };
        if cooperative {
            return Err(NotConfinable::Cooperative);
        }
        if let Some([x, y, z]) = cluster {
            let k = KernelLaunch::new(
                FunctionRef::with_static_name(p.kern as u64, FunctionKind::Kernel, "a graph's cluster kernel node"),
                Dim3 { x: p.gridDimX, y: p.gridDimY, z: p.gridDimZ },
                Dim3 { x: p.blockDimX, y: p.blockDimY, z: p.blockDimZ },
                p.sharedMemBytes,
                KernelArgs::pack(&[]),
                LaunchAttributes::new(false, Some(Dim3 { x, y, z }), None, Vec::new()),
            );
            if !clusters.iter().any(|c| same_shape(c, &k)) {
                clusters.push(k);
            }
        }
        kernels += 1;
    }
    Ok((kernels, clusters))
}

/// Same function, grid, block, dynamic shared memory and cluster shape.
fn same_shape(a: &KernelLaunch, b: &KernelLaunch) -> bool {
    a.function().handle() == b.function().handle()
        && a.grid() == b.grid()
        && a.block() == b.block()
        && a.shared_mem_bytes() == b.shared_mem_bytes()
        && a.attributes().cluster() == b.attributes().cluster()
}
