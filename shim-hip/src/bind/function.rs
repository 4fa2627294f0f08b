//! What bind mode learns once per launched function: its parameter layout, threads-per-block
//! limit and name, and for a host stub (`hipLaunchKernel`'s `function_address`) what to launch.
//!
//! The layout comes from `hipKernelGetParamInfo(f, i, &offset, &size)` for `i = 0, 1, ...` until
//! the first index past the end (`hipErrorInvalidValue`), where the runtime has it (ROCm 7);
//! otherwise from the metadata of the code objects the application loaded
//! ([`crate::codeobj`]: `hipModuleLoadData*`, `hipModuleLoad`, `__hipRegisterFatBinary`), by
//! kernel name. A host stub is mapped to its runtime function with `hipGetFuncBySymbol` where the
//! runtime has it (ROCm 6) and launched as that function; otherwise it is launched as itself
//! (`FunctionKind::Kernel`: hal-hip issues `hipLaunchKernel` with the stub). Without a layout a
//! launch takes the native path (correct, not late-bound). Results are cached per handle for the
//! process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use vitamin_hal::{FunctionKind, ParamLayout};
pub use vitamin_runtime::client::functions::{FunctionInfo, Functions};

use super::driver;

/// Parameter lists longer than this are not modelled.
const MAX_PARAMS: usize = 4096;

/// Layouts read from code objects, by kernel name (`None`: two images disagree, so neither is
/// trusted).
static FROM_CODE_OBJECTS: Mutex<Option<HashMap<String, Option<Vec<ParamLayout>>>>> = Mutex::new(None);

/// Adds the layouts of one loaded image.
pub fn note_image(layouts: crate::codeobj::Layouts) {
    let mut g = FROM_CODE_OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let known = g.get_or_insert_with(HashMap::new);
    for (name, layout) in layouts {
        match known.get(&name) {
            Some(Some(l)) if *l != layout => {
                known.insert(name, None);
            }
            Some(_) => {}
            None => {
                known.insert(name, Some(layout));
            }
        }
    }
}

/// The layout of kernel `name` from the loaded code objects.
pub fn code_object_layout(name: &str) -> Option<Vec<ParamLayout>> {
    FROM_CODE_OBJECTS.lock().unwrap_or_else(|e| e.into_inner()).as_ref()?.get(name).cloned().flatten()
}

/// The per-process caches.
#[derive(Debug, Default)]
pub struct Cache {
    functions: Functions,
    stubs: Mutex<HashMap<usize, Option<usize>>>,
}

impl Cache {
    /// The handle to launch for `handle` (a runtime function, or a host stub when `stub`) and
    /// its info.
    pub fn launchable(&self, handle: usize, stub: bool, max_threads: u32) -> (usize, Arc<FunctionInfo>) {
        if !stub {
            return (
                handle,
                self.functions.get(handle, || discover(handle, FunctionKind::Function, handle, max_threads)),
            );
        }
        match self.function_of_stub(handle) {
            Some(f) => (f, self.functions.get(f, || discover(f, FunctionKind::Function, handle, max_threads))),
            None => {
                (handle, self.functions.get(handle, || discover(handle, FunctionKind::Kernel, handle, max_threads)))
            }
        }
    }

    fn function_of_stub(&self, stub: usize) -> Option<usize> {
        if let Some(&f) = self.stubs.lock().unwrap_or_else(|e| e.into_inner()).get(&stub) {
            return f;
        }
        let f = driver::function_of_stub(stub);
        self.stubs.lock().unwrap_or_else(|e| e.into_inner()).insert(stub, f);
        f
    }
}

/// The layout of runtime function `f` from `hipKernelGetParamInfo`, or `None` if the runtime
/// cannot say.
pub fn runtime_layout(f: usize) -> Option<Vec<ParamLayout>> {
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

/// The info of `handle` of `kind` (`name_of`: the handle whose name the interposer noted).
fn discover(handle: usize, kind: FunctionKind, name_of: usize, max_threads: u32) -> FunctionInfo {
    let name = crate::state::kernel_name(name_of);
    let runtime = match kind {
        FunctionKind::Function => runtime_layout(handle),
        _ => None,
    };
    FunctionInfo {
        kind,
        layout: runtime.or_else(|| code_object_layout(&name)).map(Arc::from),
        max_threads_per_block: Some(max_threads),
        required_cluster: None,
        spins_on_peers: vitamin_runtime::client::capture::spins_on_peers(&name),
        occupancy: Default::default(),
        name: Box::leak(name.into_boxed_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(offset: u32, size: u32) -> ParamLayout {
        ParamLayout { offset, size }
    }

    #[test]
    fn images_that_disagree_on_a_kernel_are_not_trusted_for_it() {
        let image = |k: &[(&str, Vec<ParamLayout>)]| k.iter().map(|(n, l)| (n.to_string(), l.clone())).collect();
        note_image(image(&[("fn_test_a", vec![p(0, 8)]), ("fn_test_b", vec![p(0, 4)])]));
        note_image(image(&[("fn_test_a", vec![p(0, 8)]), ("fn_test_b", vec![p(0, 8)])]));
        assert_eq!(code_object_layout("fn_test_a"), Some(vec![p(0, 8)]), "the same layout twice");
        assert_eq!(code_object_layout("fn_test_b"), None, "two layouts for one name");
        note_image(image(&[("fn_test_b", vec![p(0, 4)])]));
        assert_eq!(code_object_layout("fn_test_b"), None, "stays untrusted");
        assert_eq!(code_object_layout("fn_test_unknown"), None);
    }
}
