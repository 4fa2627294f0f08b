//! Executable graphs built by stream capture in the primary context, as applications build them
//! (PyTorch's CUDA graphs, `cudaStreamBeginCapture`): for the graph census ([`crate::census`]) and
//! GPU tests of graph launches on partitions (`OpDesc::Graph` through
//! [`PhysicalPartition::submit`](vitamin_hal::PhysicalPartition::submit)).
//!
//! [`CapturedGraph::capture`] takes **stages** of kernel launches: stages run one after another,
//! the launches of one stage on parallel branches (forked from and joined back into the origin
//! stream with events), so the graph has both sequential and concurrent kernel nodes.

use std::sync::Arc;

use vitamin_hal::{HalError, KernelLaunch};

use crate::device::Shared;
use crate::driver::{capture, event, stream, CUevent, CUgraph, CUgraphExec, CUstream};
use crate::partition::launch_kernel;
use crate::CudaBackend;

/// A captured graph and its executable graph; both are destroyed on drop (after their launches
/// completed: the caller waits for them, as with any device work it submits).
pub struct CapturedGraph {
    shared: Arc<Shared>,
    graph: CUgraph,
    exec: CUgraphExec,
    /// The primary-context stream the capture started on, kept for [`CapturedGraph::launch_on_primary`].
    origin: CUstream,
    kernels: usize,
}

// SAFETY: graph, executable graph and stream are driver handles usable from any thread.
unsafe impl Send for CapturedGraph {}
// SAFETY: as above; nothing is mutated through `&self` except by the driver.
unsafe impl Sync for CapturedGraph {}

impl std::fmt::Debug for CapturedGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapturedGraph").field("exec", &self.exec).field("kernels", &self.kernels).finish()
    }
}

/// Streams and events made for one capture, released whatever happens.
struct Scratch {
    streams: Vec<CUstream>,
    events: Vec<CUevent>,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for &e in &self.events {
            // SAFETY: events created by this capture, used only by it.
            let _ = unsafe { event::destroy(e) };
        }
        for &s in &self.streams {
            // SAFETY: streams created by this capture; their captured work is in the graph, none runs.
            let _ = unsafe { stream::destroy(s) };
        }
    }
}

impl CapturedGraph {
    /// Captures `stages` of launches (see the module docs) in the primary context, instantiates the
    /// graph and returns it. The launches are recorded unchanged into kernel nodes.
    pub fn capture(backend: &CudaBackend, stages: &[Vec<KernelLaunch>]) -> Result<CapturedGraph, HalError> {
        let shared = backend.shared().clone();
        shared.make_current()?;
        let width = stages.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let origin = capture::stream_create()?;
        // The origin stream is scratch too until the graph is made (then the graph owns it).
        let mut scratch = Scratch { streams: vec![origin], events: Vec::new() };
        for _ in 1..width {
            scratch.streams.push(capture::stream_create()?);
        }
        // Events are created before the capture starts (one fork per stage with branches, one join
        // per branch), so that nothing but stream work happens while capturing.
        let needed: usize = stages.iter().filter(|s| s.len() > 1).map(Vec::len).sum();
        for _ in 0..needed {
            scratch.events.push(event::create()?);
        }
        // SAFETY: `origin` is live and idle.
        unsafe { capture::begin(origin) }?;
        let captured = (|| {
            let mut events = scratch.events.iter().copied();
            for stage in stages {
                let Some((first, rest)) = stage.split_first() else { continue };
                if rest.is_empty() {
                    launch_kernel(origin, first)?;
                    continue;
                }
                // Fork: each branch stream waits for the work so far, runs its launch, and the
                // origin stream (running the stage's first launch meanwhile) joins them all.
                let fork = events.next().expect("counted above");
                // SAFETY: live event and capturing stream.
                unsafe { event::record(fork, origin) }?;
                let mut joins = Vec::with_capacity(rest.len());
                for (k, branch) in rest.iter().zip(&scratch.streams[1..]) {
                    // SAFETY: live handles; waiting on an event recorded in the capture joins the
                    // branch stream into it.
                    unsafe { capture::wait_event(*branch, fork) }?;
                    launch_kernel(*branch, k)?;
                    let join = events.next().expect("counted above");
                    // SAFETY: live handles.
                    unsafe { event::record(join, *branch) }?;
                    joins.push(join);
                }
                launch_kernel(origin, first)?;
                for join in joins {
                    // SAFETY: live handles.
                    unsafe { capture::wait_event(origin, join) }?;
                }
            }
            Ok::<(), HalError>(())
        })();
        // End the capture whatever happened, so that the stream is usable (and destroyable) again.
        // SAFETY: `origin` is capturing.
        let ended = unsafe { capture::end(origin) };
        let graph = match (captured, ended) {
            (Ok(()), Ok(g)) => g,
            (Err(e), Ok(g)) => {
                // SAFETY: just captured, never instantiated.
                let _ = unsafe { capture::destroy_graph(g) };
                return Err(e);
            }
            (Err(e), Err(_)) | (Ok(()), Err(e)) => return Err(e),
        };
        // SAFETY: `graph` was just captured.
        let exec = match unsafe { capture::instantiate(graph) } {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: as above.
                let _ = unsafe { capture::destroy_graph(graph) };
                return Err(e);
            }
        };
        scratch.streams.remove(0); // the origin stream now belongs to the graph
        let kernels = stages.iter().map(Vec::len).sum();
        Ok(CapturedGraph { shared, graph, exec, origin, kernels })
    }

    /// The executable graph's handle (what `OpDesc::Graph` carries).
    pub fn exec_handle(&self) -> u64 {
        self.exec as u64
    }

    /// The captured graph's handle (what [`crate::CudaGraphCopies::snapshot`] clones).
    pub fn graph_handle(&self) -> u64 {
        self.graph as u64
    }

    /// Kernel nodes in the graph.
    pub fn kernels(&self) -> usize {
        self.kernels
    }

    /// Launches the graph on the primary-context stream it was captured on (all SMs: the control
    /// for the census) and waits for it.
    pub fn launch_on_primary(&self) -> Result<(), HalError> {
        self.shared.make_current()?;
        // SAFETY: the executable graph and the stream are live (owned by `self`).
        unsafe { crate::driver::launch::graph(self.exec as u64, self.origin) }?;
        // SAFETY: as above.
        unsafe { stream::synchronize(self.origin) }
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        if self.shared.make_current().is_err() {
            tracing::warn!("captured graph teardown: could not make the primary context current");
        }
        // SAFETY: owned handles, destroyed once; the stream's launches are waited for first.
        unsafe {
            let _ = stream::synchronize(self.origin);
            let _ = capture::destroy_exec(self.exec);
            let _ = capture::destroy_graph(self.graph);
            let _ = stream::destroy(self.origin);
        }
    }
}
