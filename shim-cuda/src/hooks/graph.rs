//! Graph family: launch (replay) and upload of instantiated graphs, and the calls that change or
//! destroy an executable graph. A successful launch is one graph launch in the census (captured if
//! issued into a capturing stream), however many kernels the graph holds.
//!
//! In bind mode a launch becomes one vCtx op (`calls::graph_launch`); upload and the calls that
//! change or destroy the executable graph first wait until that graph's deferred launches were
//! submitted (`calls::graph_exec_changed`), then pass through. An instantiation passes through and
//! then snapshots the graph for per-partition copies (`calls::graph_instantiate`).

use std::ffi::{c_int, c_uint, c_void};

use crate::bind::calls;
use crate::ffi::{CUcontext, CUevent, CUgraph, CUgraphExec, CUgraphNode, CUresult, CUstream, CUDA_SUCCESS};
use crate::hooks::driver_hooks;
use crate::state;
use crate::table::HookId;

driver_hooks! {
    fn [cuGraphLaunch cuGraphLaunch_ptsz] (graph_exec: CUgraphExec, stream: CUstream) => observe_graph_launch
        | calls::graph_launch;
    fn [cuGraphUpload cuGraphUpload_ptsz] (graph_exec: CUgraphExec, stream: CUstream) | calls::graph_upload;
    fn [cuGraphInstantiateWithFlags] (graph_exec_out: *mut CUgraphExec, graph: CUgraph, flags: u64)
        | calls::graph_instantiate;
    fn [cuGraphInstantiateWithParams cuGraphInstantiateWithParams_ptsz] (
        graph_exec_out: *mut CUgraphExec,
        graph: CUgraph,
        params: *mut c_void,
    ) | calls::graph_instantiate_with_params;
    fn [cuGraphExecDestroy] (graph_exec: CUgraphExec) | calls::graph_exec_destroy;
    fn [cuGraphExecUpdate] (
        graph_exec: CUgraphExec,
        graph: CUgraph,
        error_node_out: *mut CUgraphNode,
        result_out: *mut c_int,
    ) | calls::graph_exec_update_v1;
    fn [cuGraphExecUpdate_v2] (graph_exec: CUgraphExec, graph: CUgraph, result_info: *mut c_void)
        | calls::graph_exec_update;
    fn [
        cuGraphExecKernelNodeSetParams cuGraphExecKernelNodeSetParams_v2 cuGraphExecHostNodeSetParams
        cuGraphExecExternalSemaphoresSignalNodeSetParams cuGraphExecExternalSemaphoresWaitNodeSetParams
        cuGraphExecBatchMemOpNodeSetParams cuGraphExecNodeSetParams
    ] (graph_exec: CUgraphExec, node: CUgraphNode, params: *const c_void) | calls::graph_exec_node_params;
    fn [cuGraphExecMemcpyNodeSetParams cuGraphExecMemsetNodeSetParams] (
        graph_exec: CUgraphExec,
        node: CUgraphNode,
        params: *const c_void,
        ctx: CUcontext,
    ) | calls::graph_exec_node_params_in_ctx;
    fn [cuGraphExecChildGraphNodeSetParams] (graph_exec: CUgraphExec, node: CUgraphNode, child: CUgraph)
        | calls::graph_exec_child_graph;
    fn [cuGraphExecEventRecordNodeSetEvent cuGraphExecEventWaitNodeSetEvent] (
        graph_exec: CUgraphExec,
        node: CUgraphNode,
        event: CUevent,
    ) | calls::graph_exec_node_event;
    fn [cuGraphNodeSetEnabled] (graph_exec: CUgraphExec, node: CUgraphNode, enabled: c_uint)
        | calls::graph_exec_node_enabled;
}

fn observe_graph_launch(id: HookId, result: CUresult, _graph_exec: CUgraphExec, stream: CUstream) {
    if result == CUDA_SUCCESS {
        state::record_graph_launch(id, stream);
    }
}
