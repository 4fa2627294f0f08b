//! Entry-point family: `cuGetProcAddress` (CUDA 11.3 ABI) and `cuGetProcAddress_v2` (12.0 ABI).
//!
//! The real lookup runs first, unchanged. Only when it succeeded with a non-null pointer and the
//! table says the (name, version, flags) request selects an ABI vitamin hooks, the pointer is
//! replaced by a hook variant bound to exactly that pointer. This includes the self-lookup of
//! `"cuGetProcAddress"`, which each statically linked cudart makes before resolving everything
//! else: answering it with the wrapper is what makes all later lookups visible. Everything else
//! (`cuGetExportTable`, names vitamin does not hook, failed lookups, unknown flags) is returned
//! exactly as the driver answered. Substitution happens in every mode; counting only in observe.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::config::LogLevel;
use crate::ffi::{CUdriverProcAddressQueryResult, CUresult, Cuuint64, CUDA_SUCCESS};
use crate::hooks::{driver_hooks, substitute, Substitution};
use crate::state::{vlog, STATS};
use crate::table::{self, HookId};

driver_hooks! {
    fn [cuGetProcAddress] (symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: Cuuint64)
        => observe_v1;
    fn [cuGetProcAddress_v2] (
        symbol: *const c_char,
        pfn: *mut *mut c_void,
        cuda_version: c_int,
        flags: Cuuint64,
        symbol_status: *mut CUdriverProcAddressQueryResult,
    ) => observe_v2;
}

fn observe_v1(
    id: HookId,
    result: CUresult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: Cuuint64,
) {
    answer(id, result, symbol, pfn, version, flags);
}

fn observe_v2(
    id: HookId,
    result: CUresult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: Cuuint64,
    _symbol_status: *mut CUdriverProcAddressQueryResult,
) {
    answer(id, result, symbol, pfn, version, flags);
}

/// Replaces `*pfn` with a hook where one applies.
fn answer(
    _id: HookId,
    result: CUresult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: Cuuint64,
) {
    if result != CUDA_SUCCESS || symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: the driver just wrote through `pfn` successfully, so it is a valid pointer to a
    // function-pointer slot owned by the caller.
    let p = unsafe { *pfn };
    if p.is_null() {
        return;
    }
    // SAFETY: the driver accepted `symbol` as a NUL-terminated C string.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let Some(hook) = table::for_proc_address(name, version, flags) else {
        if table::is_driver_name(name) {
            STATS.proc_passed.bump();
        }
        return;
    };
    match substitute(hook, p as usize) {
        Substitution::Hooked(h) => {
            // SAFETY: as above, a valid slot the caller gave the driver to fill.
            unsafe { *pfn = h as *mut c_void };
            STATS.proc_substituted.bump();
            vlog!(
                LogLevel::Debug,
                "cuGetProcAddress({}, {version}, {flags}) -> {}",
                hook.spec().base,
                hook.spec().symbol
            );
        }
        Substitution::AlreadyOurs | Substitution::SlotsFull => {}
    }
}
