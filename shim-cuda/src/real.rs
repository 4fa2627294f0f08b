//! Finding the real functions: glibc's `dlsym`, the driver library, and each hook's forward target.
//!
//! - **Real `dlsym`**: `dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34")`, falling back to the original
//!   symbol version of the architecture (`GLIBC_2.2.5` on x86-64, `GLIBC_2.17` on aarch64). The
//!   shim exports its own `dlsym`, so a plain `dlsym(RTLD_NEXT, "dlsym")` would call itself; `dlvsym`
//!   is not interposed, and asking for a version makes glibc return its own definition. Resolved
//!   once (an atomic), on first use, never at load time; a thread that re-enters while resolving
//!   gets `None` instead of recursing.
//! - **The driver**: `dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)` (the copy the application
//!   already loaded), else a fresh `dlopen` (only an exported hook that the application called
//!   directly needs this, so the application links libcuda anyway).
//! - **Forward targets**. A hook reached through the shim's exported symbol forwards to the
//!   driver's symbol of the same name (the *canonical* pointer, `dlsym(libcuda, name)`). A hook
//!   handed out in place of a pointer `p` that `dlsym` or `cuGetProcAddress` returned forwards to
//!   exactly `p`: each hook has [`VARIANTS`] variant functions, each bound to one slot holding one
//!   such `p` (claimed first-come, never changed). Observe mode thus calls precisely the function
//!   the application would have called, even where the driver hands out internal entry points that
//!   differ from its exported symbols. If all slots of a hook are taken by different pointers, the
//!   next pointer is passed through unhooked (counted as `slots_full`).

use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::table::{HookId, HOOK_COUNT};

/// Signature of `dlsym`.
pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Variant functions (and forward slots) per hook.
pub const VARIANTS: usize = 4;

/// How a hook was reached, i.e. which forward target it uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Through the shim's exported symbol: forward to the driver's symbol of the same name.
    Export,
    /// Through variant `n`, handed out for the pointer in slot `n`.
    Variant(usize),
}

static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
static LIBCUDA: AtomicUsize = AtomicUsize::new(0);
static CANONICAL: [AtomicUsize; HOOK_COUNT] = [const { AtomicUsize::new(0) }; HOOK_COUNT];
static SLOTS: [[AtomicUsize; VARIANTS]; HOOK_COUNT] = [const { [const { AtomicUsize::new(0) }; VARIANTS] }; HOOK_COUNT];

thread_local! {
    static RESOLVING_DLSYM: Cell<bool> = const { Cell::new(false) };
}

#[cfg(target_arch = "x86_64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.2.5"];
#[cfg(target_arch = "aarch64")]
const DLSYM_VERSIONS: [&CStr; 2] = [c"GLIBC_2.34", c"GLIBC_2.17"];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const DLSYM_VERSIONS: [&CStr; 1] = [c"GLIBC_2.34"];

/// glibc's `dlsym`, resolved once.
#[inline]
pub fn dlsym_fn() -> Option<DlsymFn> {
    let p = REAL_DLSYM.load(Ordering::Acquire);
    if p != 0 {
        // SAFETY: only non-null results of dlvsym(.., "dlsym", ..) are stored: glibc's dlsym,
        // which has this signature.
        return Some(unsafe { std::mem::transmute::<usize, DlsymFn>(p) });
    }
    resolve_dlsym()
}

#[cold]
fn resolve_dlsym() -> Option<DlsymFn> {
    let reentered = RESOLVING_DLSYM.try_with(|r| r.replace(true)).unwrap_or(true);
    if reentered {
        return None;
    }
    let mut found = 0usize;
    for version in DLSYM_VERSIONS {
        // SAFETY: dlvsym takes a pseudo-handle and two NUL-terminated strings; it does not go
        // through the shim's dlsym.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !p.is_null() {
            found = p as usize;
            break;
        }
    }
    let _ = RESOLVING_DLSYM.try_with(|r| r.set(false));
    if found == 0 {
        return None;
    }
    REAL_DLSYM.store(found, Ordering::Release);
    // SAFETY: as in dlsym_fn: glibc's dlsym.
    Some(unsafe { std::mem::transmute::<usize, DlsymFn>(found) })
}

/// Calls glibc's `dlsym(handle, name)`; null if it cannot be resolved.
///
/// # Safety
/// `handle` is a handle returned by `dlopen` and not closed, or a pseudo-handle
/// (`RTLD_DEFAULT`, `RTLD_NEXT`).
pub unsafe fn real_dlsym(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match dlsym_fn() {
        // SAFETY: glibc's dlsym with a valid handle (caller's contract) and a C string.
        Some(f) => unsafe { f(handle, name.as_ptr()) },
        None => std::ptr::null_mut(),
    }
}

/// The driver library's handle (see the module docs), or `None` if no libcuda can be loaded.
pub fn libcuda() -> Option<*mut c_void> {
    let h = LIBCUDA.load(Ordering::Acquire);
    if h != 0 {
        return Some(h as *mut c_void);
    }
    for flags in [libc::RTLD_NOW | libc::RTLD_NOLOAD, libc::RTLD_NOW | libc::RTLD_LOCAL] {
        for name in [c"libcuda.so.1", c"libcuda.so"] {
            // SAFETY: dlopen with a NUL-terminated name and valid flags.
            let h = unsafe { libc::dlopen(name.as_ptr(), flags) };
            if !h.is_null() {
                // A racing thread may store the same handle (dlopen returns one handle per
                // object); the extra reference is harmless.
                LIBCUDA.store(h as usize, Ordering::Release);
                return Some(h);
            }
        }
    }
    None
}

/// `dlsym(libcuda, name)` for a name in the table (at most 63 bytes).
pub fn driver_symbol(name: &str) -> Option<usize> {
    let mut buf = [0u8; 64];
    let bytes = name.as_bytes();
    if bytes.len() >= buf.len() {
        return None;
    }
    buf[..bytes.len()].copy_from_slice(bytes);
    let cname = CStr::from_bytes_until_nul(&buf).ok()?;
    // SAFETY: libcuda() returns a handle from dlopen that is never closed.
    let p = unsafe { real_dlsym(libcuda()?, cname) };
    (!p.is_null()).then_some(p as usize)
}

/// The driver's exported function for a hook (resolved once).
pub fn canonical(id: HookId) -> Option<usize> {
    let slot = &CANONICAL[id.index()];
    let p = slot.load(Ordering::Acquire);
    if p != 0 {
        return Some(p);
    }
    let p = driver_symbol(id.spec().symbol)?;
    slot.store(p, Ordering::Release);
    Some(p)
}

/// The forward target of a hook reached through `route`.
#[inline]
pub fn target(id: HookId, route: Route) -> Option<usize> {
    match route {
        Route::Export => canonical(id),
        Route::Variant(n) => match SLOTS[id.index()][n].load(Ordering::Acquire) {
            0 => canonical(id),
            p => Some(p),
        },
    }
}

/// The slot holding `p` for hook `id`, claiming a free one if `p` is new; `None` if all are
/// taken by other pointers.
pub fn claim(id: HookId, p: usize) -> Option<usize> {
    debug_assert_ne!(p, 0);
    for (n, slot) in SLOTS[id.index()].iter().enumerate() {
        match slot.compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(n),
            Err(current) if current == p => return Some(n),
            Err(_) => continue,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_dlsym_is_glibcs() {
        // Resolves a libc symbol through the real dlsym found by dlvsym.
        // SAFETY: a pseudo-handle.
        let p = unsafe { real_dlsym(libc::RTLD_DEFAULT, c"getpid") };
        assert!(!p.is_null(), "glibc's dlsym must resolve getpid");
        assert_eq!(p as usize, libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize);
    }

    #[test]
    fn slots_are_claimed_once_per_pointer() {
        let id = HookId::cuMemcpy3DPeer_ptds; // not used by any other unit test
        let a = claim(id, 0x1000).unwrap();
        assert_eq!(claim(id, 0x1000), Some(a), "same pointer, same slot");
        let b = claim(id, 0x2000).unwrap();
        assert_ne!(a, b);
        assert_eq!(target(id, Route::Variant(a)), Some(0x1000));
        assert_eq!(target(id, Route::Variant(b)), Some(0x2000));
        let c = claim(id, 0x3000).unwrap();
        let d = claim(id, 0x4000).unwrap();
        let distinct: std::collections::HashSet<usize> = [a, b, c, d].into_iter().collect();
        assert_eq!(distinct.len(), VARIANTS, "four pointers, four slots");
        assert_eq!(claim(id, 0x5000), None, "all slots taken");
        assert_eq!(claim(id, 0x3000), Some(c), "known pointers still map");
    }
}
