//! Stream family: creation and destruction, queries, synchronization, event waits, priority and
//! flags, callbacks, and stream capture.
//!
//! Observe mode counts every call; successful capture begins and ends are tracked so that
//! launches can tell whether their stream was capturing (see `state::record_launch`). Capture
//! state is never answered by the shim: queries go to the driver unchanged.

use std::ffi::{c_int, c_uint, c_void};

use crate::bind::calls;
use crate::ffi::{
    CUevent, CUgraph, CUgraphNode, CUresult, CUstream, CUstreamCallback, CUstreamCaptureMode, CUstreamCaptureStatus,
    Cuuint64, CUDA_SUCCESS,
};
use crate::hooks::driver_hooks;
use crate::state::ACTIVE_CAPTURES;
use crate::table::HookId;

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`: the capture ended, invalidated.
const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;

driver_hooks! {
    fn [cuStreamCreate] (stream_out: *mut CUstream, flags: c_uint) | calls::stream_create;
    fn [cuStreamCreateWithPriority] (stream_out: *mut CUstream, flags: c_uint, priority: c_int)
        | calls::stream_create_with_priority;
    fn [cuStreamDestroy cuStreamDestroy_v2] (stream: CUstream) | calls::stream_destroy;
    fn [cuStreamQuery cuStreamQuery_ptsz] (stream: CUstream) | calls::stream_query;
    fn [cuStreamSynchronize cuStreamSynchronize_ptsz] (stream: CUstream) | calls::stream_synchronize;
    fn [cuStreamWaitEvent cuStreamWaitEvent_ptsz] (stream: CUstream, event: CUevent, flags: c_uint)
        | calls::stream_wait_event;
    fn [cuStreamGetPriority cuStreamGetPriority_ptsz] (stream: CUstream, priority: *mut c_int);
    fn [cuStreamGetFlags cuStreamGetFlags_ptsz] (stream: CUstream, flags: *mut c_uint);
    fn [cuStreamAddCallback cuStreamAddCallback_ptsz] (
        stream: CUstream,
        callback: CUstreamCallback,
        user_data: *mut c_void,
        flags: c_uint,
    ) | calls::stream_add_callback;
    fn [cuStreamBeginCapture cuStreamBeginCapture_ptsz] (stream: CUstream) => observe_begin_v1 | calls::begin_capture;
    fn [cuStreamBeginCapture_v2 cuStreamBeginCapture_v2_ptsz] (stream: CUstream, mode: CUstreamCaptureMode)
        => observe_begin | calls::begin_capture_v2;
    fn [cuStreamBeginCaptureToGraph cuStreamBeginCaptureToGraph_ptsz] (
        stream: CUstream,
        graph: CUgraph,
        dependencies: *const CUgraphNode,
        dependency_data: *const c_void,
        num_dependencies: usize,
        mode: CUstreamCaptureMode,
    ) => observe_begin_to_graph | calls::begin_capture_to_graph;
    fn [cuStreamEndCapture cuStreamEndCapture_ptsz] (stream: CUstream, graph_out: *mut CUgraph) => observe_end;
    fn [cuStreamIsCapturing cuStreamIsCapturing_ptsz] (stream: CUstream, status: *mut CUstreamCaptureStatus);
    fn [cuStreamGetCaptureInfo cuStreamGetCaptureInfo_ptsz] (
        stream: CUstream,
        status_out: *mut CUstreamCaptureStatus,
        id_out: *mut Cuuint64,
    );
    fn [cuStreamGetCaptureInfo_v2 cuStreamGetCaptureInfo_v2_ptsz] (
        stream: CUstream,
        status_out: *mut CUstreamCaptureStatus,
        id_out: *mut Cuuint64,
        graph_out: *mut CUgraph,
        dependencies_out: *mut *const CUgraphNode,
        num_dependencies_out: *mut usize,
    );
    fn [cuStreamGetCaptureInfo_v3 cuStreamGetCaptureInfo_v3_ptsz] (
        stream: CUstream,
        status_out: *mut CUstreamCaptureStatus,
        id_out: *mut Cuuint64,
        graph_out: *mut CUgraph,
        dependencies_out: *mut *const CUgraphNode,
        edge_data_out: *mut *const c_void,
        num_dependencies_out: *mut usize,
    );
}

fn began(result: CUresult) {
    if result == CUDA_SUCCESS {
        ACTIVE_CAPTURES.bump();
    }
}

fn observe_begin_v1(_id: HookId, result: CUresult, _stream: CUstream) {
    began(result);
}

fn observe_begin(_id: HookId, result: CUresult, _stream: CUstream, _mode: CUstreamCaptureMode) {
    began(result);
}

fn observe_begin_to_graph(
    _id: HookId,
    result: CUresult,
    _stream: CUstream,
    _graph: CUgraph,
    _dependencies: *const CUgraphNode,
    _dependency_data: *const c_void,
    _num_dependencies: usize,
    _mode: CUstreamCaptureMode,
) {
    began(result);
}

fn observe_end(_id: HookId, result: CUresult, _stream: CUstream, _graph_out: *mut CUgraph) {
    // Success and "invalidated" both end the capture; other errors (not capturing, wrong
    // thread) leave it running.
    if result == CUDA_SUCCESS || result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED {
        ACTIVE_CAPTURES.drop_one();
    }
}
