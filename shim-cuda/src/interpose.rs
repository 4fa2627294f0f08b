//! The exported `dlsym`: the route by which dynamically loading clients (PyTorch's statically
//! linked cudart copies fetching `cuGetProcAddress_v2`, Triton's launcher fetching
//! `cuLaunchKernelEx`, cudarc) reach the driver.
//!
//! Contract:
//! - The real `dlsym` is resolved once (`dlvsym`, see [`crate::real`]) and always called first,
//!   with the caller's arguments; its answer is returned unchanged unless the name is a driver
//!   symbol (`cu[A-Z]...`) that the table hooks, found by the real lookup (non-null).
//! - Then the answer is a hook variant bound to exactly the pointer the real lookup returned
//!   (or the pointer itself if it already is the shim's, as for `RTLD_DEFAULT` lookups that find
//!   the shim's own exports).
//! - Re-entry (the real `dlsym`, or anything the hook calls, calling `dlsym` again on the same
//!   thread) is answered by the real `dlsym` alone. The hook allocates nothing, so it is safe
//!   under allocator interposers that call `dlsym` from `malloc`.
//! - `RTLD_NEXT` lookups: glibc resolves `RTLD_NEXT` relative to the *caller's* object, which it
//!   finds from `dlsym`'s return address. A Rust wrapper would make every such lookup start after
//!   the shim, so another interposer loaded after it would find itself and recurse forever. On
//!   x86-64 the exported `dlsym` is therefore a naked trampoline: `RTLD_NEXT` requests jump
//!   straight into glibc's `dlsym` with the caller's return address intact (they are never
//!   hooked), everything else tail-jumps into [`dlsym_hook`]. On other architectures the shim
//!   calls glibc itself and `RTLD_NEXT` lookups resolve relative to the shim (documented
//!   limitation).

use std::ffi::{c_char, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::config::LogLevel;
use crate::guard;
use crate::hooks::{self, Substitution};
use crate::real;
use crate::state::{vlog, STATS};
use crate::table;

/// Interposed `dlsym` (x86-64: a trampoline preserving the caller's return address).
///
/// # Safety
/// glibc's `dlsym` contract: `handle` is a handle from `dlopen` or a pseudo-handle, `name` a
/// NUL-terminated string.
#[cfg(target_arch = "x86_64")]
#[no_mangle]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // rdi = handle, rsi = name. RTLD_NEXT is (void *)-1.
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 2f",
        "jmp {hook}", // tail call: the hook returns straight to our caller
        "2:",
        "push rdi", // entry rsp is 8 mod 16; two pushes and 8 bytes realign it for the call
        "push rsi",
        "sub rsp, 8",
        "call {next}", // returns glibc's dlsym, or 0
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 3f",
        "jmp rax", // glibc sees the caller's return address
        "3:",
        "ret", // rax = 0: NULL
        hook = sym dlsym_hook,
        next = sym dlsym_for_next,
    )
}

/// Interposed `dlsym` (portable version; `RTLD_NEXT` resolves relative to the shim).
///
/// # Safety
/// glibc's `dlsym` contract.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: forwarded contract.
    unsafe { dlsym_hook(handle, name) }
}

/// glibc's `dlsym` as an address (0 if unresolvable), for the trampoline's `RTLD_NEXT` path.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
extern "C" fn dlsym_for_next() -> usize {
    catch_unwind(|| real::dlsym_fn().map_or(0, |f| f as usize)).unwrap_or(0)
}

/// The `dlsym` hook proper (see the module docs).
///
/// # Safety
/// glibc's `dlsym` contract.
unsafe extern "C" fn dlsym_hook(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let Some(real_dlsym) = real::dlsym_fn() else {
        return std::ptr::null_mut();
    };
    // SAFETY: forwarding the caller's arguments to glibc's dlsym.
    let p = unsafe { real_dlsym(handle, name) };
    if p.is_null() || name.is_null() {
        return p;
    }
    // SAFETY: `name` is NUL-terminated; the && chain stops at the first mismatch, so no byte past
    // the terminator is read.
    let driver_like = unsafe {
        *name == b'c' as c_char && *name.add(1) == b'u' as c_char && (*name.add(2) as u8).is_ascii_uppercase()
    };
    if !driver_like {
        return p;
    }
    let Some(_entered) = guard::enter() else {
        return p;
    };
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: NUL-terminated per dlsym's contract.
        let symbol = unsafe { CStr::from_ptr(name) }.to_bytes();
        substitute_symbol(symbol, p)
    }))
    .unwrap_or(p)
}

fn substitute_symbol(symbol: &[u8], p: *mut c_void) -> *mut c_void {
    let Some(id) = table::by_symbol(symbol) else {
        STATS.dlsym_passed.bump();
        return p;
    };
    match hooks::substitute(id, p as usize) {
        Substitution::Hooked(h) => {
            STATS.dlsym_substituted.bump();
            vlog!(LogLevel::Debug, "dlsym({}) -> hook", id.spec().symbol);
            h as *mut c_void
        }
        Substitution::AlreadyOurs => {
            STATS.dlsym_own.bump();
            p
        }
        Substitution::SlotsFull => p,
    }
}
