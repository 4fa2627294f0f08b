//! What vitamin learns once per launched function handle: its parameter layout, whether the
//! handle is a `CUfunction` or a `CUkernel`, its threads-per-block limit and its name.
//!
//! The layout comes from `cuFuncGetParamInfo(f, i, &offset, &size)` for `i = 0, 1, ...` until the
//! first index past the end, which the driver answers with `CUDA_ERROR_INVALID_VALUE` (FACTS.md).
//! If the very first query fails otherwise, the handle may be a `CUkernel` (the launch APIs accept
//! both): the same loop runs with `cuKernelGetParamInfo`. A handle neither answers for has no known
//! layout; its launches take the native path. The result is cached per handle for the process
//! (a handle stays one function while its module is loaded; a module unloaded and a new one loaded
//! at the same address would have to agree on the layout, which vitamin does not detect).
//!
//! Cluster dimensions compiled into the function are read once too (a launch of such a function is a
//! cluster launch whatever its attributes say).
//!
//! The dynamic-shared-memory limit is not cached: `cuFuncSetAttribute` (not hooked) may raise it
//! between launches, so it is read at each launch that asks for dynamic shared memory.

use std::ffi::c_int;
use std::sync::Arc;

use vitamin_hal::{Dim3, FunctionKind, ParamLayout};

use super::{capture, driver};
use crate::ffi::{CUresult, CUDA_SUCCESS};

/// `CUDA_ERROR_INVALID_VALUE`: the end of the parameter list.
const INVALID_VALUE: CUresult = 1;
/// Parameter lists longer than this are not modelled (CUDA allows 32 764 bytes of parameters).
const MAX_PARAMS: usize = 8192;

pub use vitamin_runtime::client::functions::{FunctionInfo, Functions};

type ParamInfoFn = unsafe fn(*mut std::ffi::c_void, usize, *mut usize, *mut usize) -> CUresult;

/// The layout through one query function: `Ok(layout)` or the error of the first failing index.
fn layout_with(query: ParamInfoFn, f: usize) -> Result<Vec<ParamLayout>, CUresult> {
    let mut layout = Vec::new();
    for i in 0..MAX_PARAMS {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: a handle the application launched with and valid out pointers.
        match unsafe { query(f as *mut _, i, &mut offset, &mut size) } {
            CUDA_SUCCESS => {
                let (Ok(offset), Ok(size)) = (u32::try_from(offset), u32::try_from(size)) else {
                    return Err(INVALID_VALUE);
                };
                layout.push(ParamLayout { offset, size });
            }
            INVALID_VALUE => return Ok(layout),
            e => return Err(e),
        }
    }
    Err(INVALID_VALUE)
}

/// The info of handle `f` from the process's cache, discovered from the driver on first use.
pub fn get(functions: &Functions, f: usize, device: c_int) -> Arc<FunctionInfo> {
    functions.get(f, || discover(f, device))
}

fn discover(f: usize, device: c_int) -> FunctionInfo {
    // A `CUkernel` handle might make `cuFuncGetParamInfo` fail at index 0 with
    // CUDA_ERROR_INVALID_VALUE, which also means "no parameters": an empty answer is therefore
    // confirmed with `cuKernelGetParamInfo`, which fails for a `CUfunction`.
    let (kind, layout) = match layout_with(driver::func_get_param_info, f) {
        Ok(l) if !l.is_empty() => (FunctionKind::Function, Some(l)),
        as_function => match (as_function, layout_with(driver::kernel_get_param_info, f)) {
            (Ok(empty), Err(_)) => (FunctionKind::Function, Some(empty)),
            (Ok(empty), Ok(k)) if k.is_empty() => (FunctionKind::Function, Some(empty)),
            (_, Ok(k)) => (FunctionKind::Kernel, Some(k)),
            (Err(_), Err(_)) => (FunctionKind::Function, None),
        },
    };
    let max_threads = attribute(kind, f, device, driver::FUNC_MAX_THREADS_PER_BLOCK);
    let cluster: Vec<u32> =
        (0..3).map(|i| attribute(kind, f, device, driver::FUNC_REQUIRED_CLUSTER_WIDTH + i).unwrap_or(0)).collect();
    let required_cluster = cluster.iter().all(|&c| c > 0).then(|| Dim3::new(cluster[0], cluster[1], cluster[2]));
    let name = crate::state::kernel_name(f);
    FunctionInfo {
        kind,
        layout: layout.map(Arc::from),
        max_threads_per_block: max_threads,
        required_cluster,
        spins_on_peers: capture::spins_on_peers(&name),
        occupancy: Default::default(),
        name: Box::leak(name.into_boxed_str()),
    }
}

/// A function attribute (`CU_FUNC_ATTRIBUTE_*`) through the query matching the handle's kind.
pub fn attribute(kind: FunctionKind, f: usize, device: c_int, attr: c_int) -> Option<u32> {
    let mut v: c_int = 0;
    // SAFETY: a handle the application launched with and a valid out pointer.
    let r = unsafe {
        match kind {
            FunctionKind::Kernel => driver::kernel_get_attribute(&mut v, attr, f as *mut _, device),
            _ => driver::func_get_attribute(&mut v, attr, f as *mut _),
        }
    };
    (r == CUDA_SUCCESS && v >= 0).then_some(v as u32)
}
