//! The real HIP runtime's functions, resolved once per symbol.
//!
//! The runtime is the library `VITAMIN_HIP_LIBRARY` names (opened with `dlopen`, so a library
//! the application already loaded from that path is the same one), else the next definition after
//! this library in the loader's search order (`dlsym(RTLD_NEXT, ..)`): the `libamdhip64` the
//! application linked or opened. Each hook caches its pointer in an atomic; a symbol the runtime
//! lacks stays unresolved and the hook returns `hipErrorSharedObjectSymbolNotFound`.

use std::ffi::{c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// `VITAMIN_HIP_LIBRARY` (shared with hal-hip).
pub use vitamin_hal_hip::driver::LIBRARY_ENV;

/// Where symbols are looked up: a `dlopen` handle, or `RTLD_NEXT`.
fn handle() -> usize {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        let Some(path) = std::env::var_os(LIBRARY_ENV).filter(|p| !p.is_empty()) else {
            return libc::RTLD_NEXT as usize;
        };
        let Ok(c) = CString::new(path.as_encoded_bytes()) else { return libc::RTLD_NEXT as usize };
        // SAFETY: a NUL-terminated path; dlopen has no other preconditions.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if h.is_null() {
            libc::RTLD_NEXT as usize
        } else {
            h as usize
        }
    })
}

/// The real runtime's `symbol`, if it has one.
pub fn lookup(symbol: &str) -> Option<usize> {
    let symbol = CString::new(symbol).ok()?;
    // SAFETY: a valid handle (dlopen's, or the RTLD_NEXT pseudo-handle) and a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle() as *mut c_void, symbol.as_ptr()) };
    (!p.is_null()).then_some(p as usize)
}

/// One hook's cached real pointer (0: not resolved yet, 1: missing).
#[derive(Debug)]
pub struct Slot(AtomicUsize);

const MISSING: usize = 1;

impl Slot {
    /// Unresolved.
    pub const fn new() -> Slot {
        Slot(AtomicUsize::new(0))
    }

    /// The real function, resolving `symbol` on first use.
    #[inline]
    pub fn get(&self, symbol: &str) -> Option<usize> {
        self.get_any(&[symbol])
    }

    /// The real function of the first of `symbols` the runtime defines, resolved on first use (a
    /// function some runtimes export under another name: `hipExtModuleLaunchKernel`, C++-named in
    /// HIP 5.2).
    #[inline]
    pub fn get_any(&self, symbols: &[&str]) -> Option<usize> {
        match self.0.load(Ordering::Acquire) {
            0 => {
                let p = symbols.iter().find_map(|s| lookup(s)).unwrap_or(MISSING);
                self.0.store(p, Ordering::Release);
                (p != MISSING).then_some(p)
            }
            MISSING => None,
            p => Some(p),
        }
    }
}

impl Default for Slot {
    fn default() -> Self {
        Slot::new()
    }
}

/// The file of the real runtime (the library defining `hipStreamCreate`), so that the pool's
/// backend loads the same library as the application: `VITAMIN_HIP_LIBRARY` if set, else the
/// loader's answer for the real function.
pub fn library_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(LIBRARY_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let f = lookup("hipStreamCreate")?;
    // SAFETY: an all-zero Dl_info is a valid out value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: any address may be asked about; `info` is a valid out pointer.
    if unsafe { libc::dladdr(f as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr returns a NUL-terminated file name the loader owns.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_takes_the_first_name_the_loader_knows_and_keeps_its_answer() {
        // No runtime here: RTLD_NEXT finds the C library's symbols.
        let s = Slot::new();
        let malloc = lookup("malloc").expect("the C library defines malloc");
        assert_eq!(s.get_any(&["vitaminNoSuchSymbol", "malloc", "free"]), Some(malloc));
        assert_eq!(s.get("free"), Some(malloc), "resolved once: the first answer stays");
        let missing = Slot::new();
        assert_eq!(missing.get_any(&["vitaminNoSuchSymbol", "vitaminNorThis"]), None);
        assert_eq!(missing.get("malloc"), None, "a missing function stays missing");
    }
}
