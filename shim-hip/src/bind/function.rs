//! What bind mode learns once per launched function: its parameter layout, threads-per-block
//! limit and name, and for a host stub (`hipLaunchKernel`'s `function_address`) the runtime
//! function it stands for.
//!
//! The layout comes from `hipKernelGetParamInfo(f, i, &offset, &size)` for `i = 0, 1, ...` until
//! the first index past the end (`hipErrorInvalidValue`); a host stub is first mapped to its
//! function with `hipGetFuncBySymbol`. Both are newer than HIP 5.2 (ROCm 6 and 7): on a runtime
//! without them no layout is known and launches take the native path (correct, not late-bound).
//! Reading the layout from the code object's metadata (`amdhsa.kernels[].args`), which 5.2 would
//! need, is not implemented. Results are cached per handle for the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use vitamin_hal::{FunctionKind, ParamLayout};
pub use vitamin_runtime::client::functions::{FunctionInfo, Functions};

use super::driver;

/// Parameter lists longer than this are not modelled.
const MAX_PARAMS: usize = 4096;

/// The per-process caches.
#[derive(Debug, Default)]
pub struct Cache {
    functions: Functions,
    stubs: Mutex<HashMap<usize, Option<usize>>>,
}

impl Cache {
    /// The info of runtime function `f` (`name_of`: the handle whose name was noted).
    pub fn function(&self, f: usize, name_of: usize, max_threads: u32) -> Arc<FunctionInfo> {
        self.functions.get(f, || discover(f, name_of, max_threads))
    }

    /// The runtime function of host stub `stub`, if the runtime can say.
    pub fn stub(&self, stub: usize) -> Option<usize> {
        if let Some(&f) = self.stubs.lock().unwrap_or_else(|e| e.into_inner()).get(&stub) {
            return f;
        }
        let f = driver::function_of_stub(stub);
        self.stubs.lock().unwrap_or_else(|e| e.into_inner()).insert(stub, f);
        f
    }
}

/// The layout of `f`'s parameters, or `None` if the runtime cannot say.
pub fn layout(f: usize) -> Option<Vec<ParamLayout>> {
    let mut layout = Vec::new();
    for i in 0..MAX_PARAMS {
        match driver::param_info(f, i) {
            driver::ParamInfo::Param(offset, size) => {
                let (Ok(offset), Ok(size)) = (u32::try_from(offset), u32::try_from(size)) else { return None };
                layout.push(ParamLayout { offset, size });
            }
            driver::ParamInfo::End => return Some(layout),
            driver::ParamInfo::Unknown => return None,
        }
    }
    None
}

fn discover(f: usize, name_of: usize, max_threads: u32) -> FunctionInfo {
    FunctionInfo {
        kind: FunctionKind::Function,
        layout: layout(f).map(Arc::from),
        max_threads_per_block: Some(max_threads),
        required_cluster: None,
        name: Box::leak(crate::state::kernel_name(name_of).into_boxed_str()),
    }
}
