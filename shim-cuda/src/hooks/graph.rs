//! Graph family: launch (replay) and upload of instantiated graphs. A successful launch is one
//! graph launch in the census (captured if issued into a capturing stream), however many kernels
//! the graph holds.

use crate::bind::calls;
use crate::ffi::{CUgraphExec, CUresult, CUstream, CUDA_SUCCESS};
use crate::hooks::driver_hooks;
use crate::state;
use crate::table::HookId;

driver_hooks! {
    fn [cuGraphLaunch cuGraphLaunch_ptsz] (graph_exec: CUgraphExec, stream: CUstream) => observe_graph_launch
        | calls::graph_exec_on_stream;
    fn [cuGraphUpload cuGraphUpload_ptsz] (graph_exec: CUgraphExec, stream: CUstream) | calls::graph_exec_on_stream;
}

fn observe_graph_launch(id: HookId, result: CUresult, _graph_exec: CUgraphExec, stream: CUstream) {
    if result == CUDA_SUCCESS {
        state::record_graph_launch(id, stream);
    }
}
