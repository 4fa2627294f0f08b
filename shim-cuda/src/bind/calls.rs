//! The bind-mode handlers of the hooks (FFI shell): what each intercepted call becomes.
//!
//! Every handler has the hook's C arguments after `(id, real)`, where `real` performs the call the
//! application made, unchanged. Each starts with [`get`]: if bind mode is not (yet) running in this
//! process, the call is simply forwarded. The rules are in the module docs of [`crate::bind`].

// The handlers mirror C driver signatures of up to 11 parameters.
#![allow(clippy::too_many_arguments)]

use std::ffi::{c_int, c_uchar, c_uint, c_ushort, c_void};
use std::sync::Arc;

use smallvec::SmallVec;
use vitamin_hal::{Copy, Dim3, Endpoint, Fill, FunctionRef, HostFunction, KernelArgs, KernelLaunch, OpDesc};
pub(crate) use vitamin_runtime::client::native::NativeClass;
use vitamin_runtime::trace::{self, Tag};

use super::capture::{self, AttributeBytes, Decline, FunctionLimits, Geometry};
use super::function::FunctionInfo;
use super::handles::{
    classify_stream, event_entry, memory_from_type, plan_copy, CopyKind, CopyPlan, EventEntry, Memory, Recorder,
};
use super::{code, driver, function, get, get_for_event, get_for_stream, stream_kind, Bind, Target};
use crate::config::LogLevel;
use crate::ffi::{
    CUarray, CUcontext, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUhostFn, CUlaunchConfig,
    CUresult, CUstream, CUstreamCallback, CUstreamCaptureMode, CUDA_ERROR_NOT_READY, CUDA_SUCCESS,
};
use crate::state::vlog;
use crate::table::HookId;

/// Largest `extra` argument buffer vitamin copies (CUDA allows 32 764 bytes of parameters).
const MAX_ARG_BUFFER: usize = 1 << 16;
/// Most launch attributes vitamin copies.
const MAX_ATTRIBUTES: usize = 64;
/// `sizeof(CUlaunchAttribute)`: a 4-byte id, 4 bytes of padding, a 64-byte value.
const ATTRIBUTE_SIZE: usize = 72;

fn per_thread(id: HookId) -> bool {
    id.spec().flavor.is_per_thread()
}

fn record(b: &Bind, s: vitamin_runtime::StreamId, desc: OpDesc) -> CUresult {
    match b.record(s, desc) {
        Ok(_) => CUDA_SUCCESS,
        Err(e) => code(&e),
    }
}

// ---- launches ------------------------------------------------------------------------------

/// A launch as the application made it.
struct LaunchCall {
    f: CUfunction,
    geometry: Geometry,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    attrs: *const c_void,
    num_attrs: c_uint,
    cooperative: bool,
}

/// One launch, top to bottom: its stream, its validation (once), launch-first when it applies,
/// else the descriptor copied and recorded; what vitamin declines takes the native path.
fn launch(id: HookId, real: &dyn Fn() -> CUresult, c: LaunchCall) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(c.stream, pt) else { return real() };
    trace::mark(Tag::LaunchEnter, 0);
    let s = match b.target(c.stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => return real(),
        Ok(Target::Native(s)) => return b.native(Some(s), c.stream, pt, true, real),
        Ok(Target::Record(s)) => s,
    };
    trace::step(1);
    let captured = check_launch(b, &c).and_then(|info| {
        if let Some(result) = launch_first(b, s, &c, &info) {
            return Ok(Err(result));
        }
        copy_launch(b, &c, &info).map(Ok)
    });
    match captured {
        Ok(Err(launched_first)) => launched_first,
        Ok(Ok(k)) => {
            trace::mark(Tag::Captured, 0);
            b.counters.kernels.bump();
            record(b, s, OpDesc::Kernel(k))
        }
        Err(d) => {
            match &d {
                Decline::Invalid(_) => b.counters.invalid_launches.bump(),
                Decline::Unmodelled(_) => b.counters.native_unmodelled.bump(),
            }
            vlog!(LogLevel::Debug, "{}: {d}; the driver handles it", id.spec().symbol);
            b.native(Some(s), c.stream, pt, true, real)
        }
    }
}

/// Launch-first eager binding (`launch_first`, on by default): a plain kernel launch (no
/// `extra` buffer, attributes, cooperative flag or dynamic shared memory) that [`check_launch`]
/// accepted and whose arguments are all given is handed to the client runtime's
/// [`launch_first`](vitamin_runtime::client::Client::launch_first), which launches it on a lane
/// with the application's argument pointers before the descriptor is copied. `None`: not
/// applicable, the usual path follows; otherwise the call's result (the driver's error when it
/// refused the launch, nothing recorded).
fn launch_first(b: &Bind, s: vitamin_runtime::StreamId, c: &LaunchCall, info: &FunctionInfo) -> Option<CUresult> {
    if !c.extra.is_null() || c.num_attrs > 0 || c.cooperative || c.geometry.shared_mem_bytes != 0 {
        return None;
    }
    trace::step(4);
    let layout = info.layout.as_ref()?;
    if info.required_cluster.is_some() || info.spins_on_peers {
        return None; // compiled-in clusters, collectives: placed by the dispatcher
    }
    if !layout.is_empty() {
        if c.params.is_null() {
            return None;
        }
        // SAFETY: kernelParams holds one pointer per parameter (driver contract).
        if (0..layout.len()).any(|i| unsafe { *c.params.add(i) }.is_null()) {
            return None;
        }
    }
    let g = &c.geometry;
    let dims = |d: Dim3| [d.x, d.y, d.z];
    let launch = |stream: u64| {
        // SAFETY: `c.f` is the application's function handle, `stream` the lane's stream
        // handed over by the backend, and `c.params` the application's one pointer per parameter
        // (checked non-null above), valid for this call: the launch the application asked for,
        // on another stream.
        unsafe {
            vitamin_hal_cuda::launch_native(
                c.f as u64,
                dims(g.grid),
                dims(g.block),
                0,
                stream,
                if layout.is_empty() { std::ptr::null_mut() } else { c.params },
            )
        }
    };
    let capture = || copy_launch(b, c, info).ok().map(OpDesc::Kernel);
    let f = FunctionRef::with_static_name(c.f as u64, info.kind, info.name);
    match b.launch_first(s, f, g.grid, g.block, launch, capture)? {
        Ok(()) => Some(CUDA_SUCCESS),
        Err(vitamin_hal::HalError::Driver { code, .. }) => Some(code as CUresult),
        Err(e) => {
            vlog!(LogLevel::Debug, "launch-first launch failed: {e}");
            Some(crate::ffi::CUDA_ERROR_UNKNOWN)
        }
    }
}

/// Validates a launch the way the driver does before accepting it (the one validation of every
/// launch): a function vitamin knows the layout of, a shape within the device's and the
/// function's limits.
fn check_launch(b: &Bind, c: &LaunchCall) -> Result<Arc<FunctionInfo>, Decline> {
    if c.f.is_null() {
        return Err(Decline::Invalid("null function".into()));
    }
    let info = function::get(&b.functions, c.f as usize, b.device);
    trace::step(2);
    if info.layout.is_none() {
        return Err(Decline::Unmodelled(format!("no parameter layout for {}", info.name)));
    }
    let max_dynamic_shared_bytes = if c.geometry.shared_mem_bytes == 0 {
        0
    } else {
        function::attribute(info.kind, c.f as usize, b.device, driver::FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES)
            .ok_or_else(|| Decline::Unmodelled("the function's dynamic shared memory limit is unknown".into()))?
    };
    let limits = FunctionLimits {
        max_threads_per_block: info.max_threads_per_block.unwrap_or(capture::SHAPE.max_block[0]),
        max_dynamic_shared_bytes,
        device: capture::SHAPE,
    };
    capture::validate(&c.geometry, &limits)?;
    Ok(info)
}

/// Builds the immutable descriptor of a launch [`check_launch`] accepted, copying everything the
/// application passed by pointer, and checks what only its arguments and attributes tell.
fn copy_launch(b: &Bind, c: &LaunchCall, info: &FunctionInfo) -> Result<KernelLaunch, Decline> {
    let Some(layout) = info.layout.clone() else {
        return Err(Decline::Unmodelled(format!("no parameter layout for {}", info.name)));
    };
    if !c.params.is_null() && !c.extra.is_null() {
        return Err(Decline::Invalid("both kernelParams and extra".into()));
    }
    let args = if !c.extra.is_null() {
        // SAFETY: `extra` is the application's CU_LAUNCH_PARAM_END-terminated array of words;
        // `parse_extra` reads it in order and stops at the terminator (or after MAX_EXTRA_WORDS).
        let words = (0usize..).map(|i| unsafe { *c.extra.add(i) } as usize);
        let e = capture::parse_extra(words)?;
        // SAFETY: CU_LAUNCH_PARAM_BUFFER_SIZE's value points to a size_t (driver contract).
        let size = unsafe { *(e.size_ptr as *const usize) };
        if size > MAX_ARG_BUFFER {
            return Err(Decline::Unmodelled(format!("argument buffer of {size} bytes")));
        }
        // SAFETY: the application's packed argument buffer of `size` bytes (driver contract).
        let buffer = unsafe { std::slice::from_raw_parts(e.buffer as *const u8, size) };
        capture::args_from_buffer(&layout, buffer)?
    } else if layout.is_empty() {
        KernelArgs::empty()
    } else {
        if c.params.is_null() {
            return Err(Decline::Invalid(format!("{} takes {} parameters; none were given", info.name, layout.len())));
        }
        let mut values: SmallVec<[&[u8]; 16]> = SmallVec::new();
        for (i, p) in layout.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter (driver contract).
            let ptr = unsafe { *c.params.add(i) } as *const u8;
            if ptr.is_null() {
                return Err(Decline::Invalid(format!("parameter {i} is a null pointer")));
            }
            // SAFETY: the pointer addresses the parameter's value of `size` bytes (driver contract).
            values.push(unsafe { std::slice::from_raw_parts(ptr, p.size as usize) });
        }
        capture::pack_params(&layout, &values)?
    };
    trace::step(3);
    let n = c.num_attrs as usize;
    if n > 0 && c.attrs.is_null() {
        return Err(Decline::Invalid(format!("{n} launch attributes at a null pointer")));
    }
    if n > MAX_ATTRIBUTES {
        return Err(Decline::Unmodelled(format!("{n} launch attributes")));
    }
    let mut attrs: SmallVec<[AttributeBytes; 4]> = SmallVec::new();
    if n > 0 {
        // SAFETY: `attrs` points to `numAttrs` CUlaunchAttribute structs of ATTRIBUTE_SIZE bytes.
        let raw = unsafe { std::slice::from_raw_parts(c.attrs as *const u8, n * ATTRIBUTE_SIZE) };
        for a in raw.chunks_exact(ATTRIBUTE_SIZE) {
            let mut value = [0u8; 64];
            value.copy_from_slice(&a[8..]);
            attrs.push(AttributeBytes { id: u32::from_le_bytes([a[0], a[1], a[2], a[3]]), value });
        }
    }
    let attributes = capture::decode_attributes(&attrs, c.cooperative)?.with_coresident(info.spins_on_peers);
    // Cooperative and cluster launches are bound, to nodes that can hold them (the dispatcher's
    // `can_execute` filter). What the driver would refuse synchronously is refused here, against
    // the whole device, so such a launch takes the native path and gets the driver's own error.
    let g = &c.geometry;
    let threads = g.block.volume() as u32;
    // The occupancy: the policies' size model counts waves with it; co-residency checks need it.
    let resident =
        info.occupancy.get(threads, g.shared_mem_bytes, || b.blocks_per_sm(c.f as usize, threads, g.shared_mem_bytes));
    let constrained = capture::check_constraints(
        g,
        &attributes,
        info.required_cluster,
        b.limits,
        || resident,
        |cluster| b.max_active_clusters(c.f as usize, g, cluster),
    );
    match constrained {
        Ok(true) => b.counters.cooperative_or_cluster.bump(),
        Ok(false) => {}
        Err(d @ Decline::Unmodelled(_)) => {
            b.counters.native_constrained.bump();
            return Err(d);
        }
        Err(d) => return Err(d),
    }
    Ok(KernelLaunch::new(
        FunctionRef::with_static_name(c.f as u64, info.kind, info.name),
        g.grid,
        g.block,
        g.shared_mem_bytes,
        args,
        attributes,
    )
    .with_resident_per_unit(resident.unwrap_or(0)))
}

fn geometry(grid: [c_uint; 3], block: [c_uint; 3], smem: c_uint) -> Geometry {
    Geometry {
        grid: Dim3::new(grid[0], grid[1], grid[2]),
        block: Dim3::new(block[0], block[1], block[2]),
        shared_mem_bytes: smem,
    }
}

pub(crate) fn launch_kernel(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let c = LaunchCall {
        f,
        geometry: geometry([gx, gy, gz], [bx, by, bz], smem),
        stream,
        params,
        extra,
        attrs: std::ptr::null(),
        num_attrs: 0,
        cooperative: false,
    };
    launch(id, real, c)
}

pub(crate) fn launch_cooperative_kernel(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let c = LaunchCall {
        f,
        geometry: geometry([gx, gy, gz], [bx, by, bz], smem),
        stream,
        params,
        extra: std::ptr::null_mut(),
        attrs: std::ptr::null(),
        num_attrs: 0,
        cooperative: true,
    };
    launch(id, real, c)
}

pub(crate) fn launch_kernel_ex(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    if config.is_null() {
        return real(); // the driver reports the error
    }
    // SAFETY: a non-null CUlaunchConfig from the application (driver contract); copied.
    let cfg = unsafe { config.read() };
    let c = LaunchCall {
        f,
        geometry: geometry(
            [cfg.grid_dim_x, cfg.grid_dim_y, cfg.grid_dim_z],
            [cfg.block_dim_x, cfg.block_dim_y, cfg.block_dim_z],
            cfg.shared_mem_bytes,
        ),
        stream: cfg.h_stream,
        params,
        extra,
        attrs: cfg.attrs,
        num_attrs: cfg.num_attrs,
        cooperative: false,
    };
    launch(id, real, c)
}

pub(crate) fn launch_host_func(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    stream: CUstream,
    func: CUhostFn,
    user_data: *mut c_void,
) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(stream, pt) else { return real() };
    let s = match b.target(stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => return real(),
        Ok(Target::Native(s)) => return b.native(Some(s), stream, pt, true, real),
        Ok(Target::Record(s)) => s,
    };
    let Some(func) = func else {
        return b.native(Some(s), stream, pt, true, real); // the driver rejects a null function
    };
    let (f, user) = (func as usize, user_data as usize);
    let host = HostFunction::new("cuLaunchHostFunc", move || {
        // SAFETY: `f` is the application's CUhostFn, called once with its user data, after the
        // stream's earlier work completed, as the driver would.
        let f = unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(*mut c_void)>(f) };
        // SAFETY: as above.
        unsafe { f(user as *mut c_void) }
    });
    b.counters.host_functions.bump();
    record(b, s, OpDesc::Host(host))
}

// ---- copies and fills ------------------------------------------------------------------------

fn memory(addr: u64) -> (Memory, u64) {
    (memory_from_type(driver::memory_type(addr)), addr)
}

fn copy(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    kind: CopyKind,
    dst: u64,
    src: u64,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(stream, pt) else { return real() };
    let s = match b.target(stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => return real(),
        Ok(Target::Native(s)) => return b.native(Some(s), stream, pt, true, real),
        Ok(Target::Record(s)) => s,
    };
    if bytes == 0 {
        return real(); // nothing to order; the driver validates the arguments
    }
    let op = match plan_copy(kind, memory(dst), memory(src), bytes as u64) {
        CopyPlan::Async { dst, src } => Copy::new(dst, src, bytes as u64),
        CopyPlan::Stage { dst } => {
            // SAFETY: the application's source buffer of `bytes` bytes, read now as the driver
            // reads a pageable source before the call returns.
            let Some(data) = b.stage(unsafe { std::slice::from_raw_parts(src as *const u8, bytes) }) else {
                return b.native(Some(s), stream, pt, true, real); // staging is full: synchronously
            };
            b.counters.staged_copies.bump();
            b.counters.staged_bytes.add(bytes as u64);
            Copy::new(dst, Endpoint::Staged(data), bytes as u64)
        }
        CopyPlan::Native(why) => {
            vlog!(LogLevel::Trace, "{}: {why}; native path", id.spec().symbol);
            b.counters.native_unmodelled.bump();
            return b.native(Some(s), stream, pt, true, real);
        }
    };
    match op {
        Ok(c) => {
            b.counters.copies.bump();
            record(b, s, OpDesc::Copy(c))
        }
        Err(_) => b.native(Some(s), stream, pt, true, real),
    }
}

pub(crate) fn memcpy_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    copy(id, real, CopyKind::Unified, dst, src, bytes, stream)
}

pub(crate) fn memcpy_htod_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    copy(id, real, CopyKind::HostToDevice, dst, src as u64, bytes, stream)
}

pub(crate) fn memcpy_dtoh_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    copy(id, real, CopyKind::DeviceToHost, dst as u64, src, bytes, stream)
}

pub(crate) fn memcpy_dtod_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CUresult {
    copy(id, real, CopyKind::DeviceToDevice, dst, src, bytes, stream)
}

fn fill(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: u64,
    value: u32,
    element: u8,
    count: usize,
    stream: CUstream,
) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(stream, pt) else { return real() };
    let s = match b.target(stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => return real(),
        Ok(Target::Native(s)) => return b.native(Some(s), stream, pt, true, real),
        Ok(Target::Record(s)) => s,
    };
    if count == 0 {
        return real();
    }
    if memory(dst).0 == Memory::Unknown {
        return b.native(Some(s), stream, pt, true, real); // not device memory: the driver answers
    }
    match Fill::new(dst, value, element, count as u64) {
        Ok(f) => {
            b.counters.fills.bump();
            record(b, s, OpDesc::Fill(f))
        }
        Err(_) => b.native(Some(s), stream, pt, true, real),
    }
}

pub(crate) fn memset_d8_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: CUdeviceptr,
    value: c_uchar,
    count: usize,
    stream: CUstream,
) -> CUresult {
    fill(id, real, dst, u32::from(value), 1, count, stream)
}

pub(crate) fn memset_d16_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: CUdeviceptr,
    value: c_ushort,
    count: usize,
    stream: CUstream,
) -> CUresult {
    fill(id, real, dst, u32::from(value), 2, count, stream)
}

pub(crate) fn memset_d32_async(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    dst: CUdeviceptr,
    value: c_uint,
    count: usize,
    stream: CUstream,
) -> CUresult {
    fill(id, real, dst, value, 4, count, stream)
}

/// The native path for a stream-ordered call vitamin does not model (drain, call, wait).
fn native_async(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream, wait_after: bool) -> CUresult {
    let Some(b) = get_for_stream(stream, per_thread(id)) else { return real() };
    b.counters.native_unmodelled.bump();
    b.native_on_stream(stream, per_thread(id), wait_after, real)
}

/// The bind handler of every generated `Native` hook (see [`NativeClass`]).
pub(crate) fn native_call(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream, class: NativeClass) -> CUresult {
    match class {
        NativeClass::Query => real(),
        // Never starts bind mode (an unload at exit would realize the pool). The context, module
        // or library may be any device's: every started device forgets its function handles and
        // synchronizes logically first.
        NativeClass::Lifetime => {
            let mut logical = Ok(());
            super::for_each_started(|b| {
                b.end_of_lifetime();
                if let Err(e) = b.synchronize_device() {
                    logical = Err(e);
                }
            });
            let r = real();
            match logical {
                Err(e) => code(&e),
                Ok(()) => r,
            }
        }
        NativeClass::Wait => {
            let r = native_async(id, real, stream, false);
            let handed = get_for_stream(stream, per_thread(id))
                .and_then(|b| Some((b, b.known_stream(classify_stream(stream as usize, per_thread(id)))?)));
            if let (CUDA_SUCCESS, Some((b, s))) = (r, handed) {
                b.hand_to_driver(s);
            }
            r
        }
        _ => native_async(id, real, stream, class == NativeClass::Enqueue),
    }
}

/// The native path for a synchronous call on the default stream (legacy, or per-thread for the
/// `_ptds` variants): the drain gives it the default stream's implicit ordering.
fn default_stream_call(id: HookId, real: &dyn Fn() -> CUresult) -> CUresult {
    let Some(b) = get() else { return real() };
    b.counters.native_unmodelled.bump();
    b.native_on_stream(std::ptr::null_mut(), per_thread(id), true, real)
}

/// Handlers of stream-ordered calls that take the native path; the stream is the last argument.
macro_rules! native_stream_calls {
    ($($name:ident ($($arg:ident: $ty:ty),*) wait $wait:expr;)*) => {$(
        pub(crate) fn $name(id: HookId, real: &dyn Fn() -> CUresult, $($arg: $ty,)* stream: CUstream) -> CUresult {
            $(let _ = $arg;)*
            native_async(id, real, stream, $wait)
        }
    )*};
}

native_stream_calls! {
    native_copy_desc_async(copy: *const c_void) wait true;
    memcpy_peer_async(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize) wait true;
    memcpy_htoa_async(dst: CUarray, dst_offset: usize, src: *const c_void, bytes: usize) wait true;
    memcpy_atoh_async(dst: *mut c_void, src: CUarray, src_offset: usize, bytes: usize) wait true;
    memset_d2d8_async(dst: CUdeviceptr, pitch: usize, value: c_uchar, width: usize, height: usize) wait true;
    memset_d2d16_async(dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize) wait true;
    memset_d2d32_async(dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize) wait true;
    mem_free_async(ptr: CUdeviceptr) wait true;
}

/// Handlers of synchronous calls on the default stream (native path).
macro_rules! default_stream_calls {
    ($($name:ident ($($arg:ident: $ty:ty),*);)*) => {$(
        pub(crate) fn $name(id: HookId, real: &dyn Fn() -> CUresult, $($arg: $ty),*) -> CUresult {
            $(let _ = $arg;)*
            default_stream_call(id, real)
        }
    )*};
}

default_stream_calls! {
    sync_copy_dd(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize);
    sync_copy_hd(dst: CUdeviceptr, src: *const c_void, bytes: usize);
    sync_copy_dh(dst: *mut c_void, src: CUdeviceptr, bytes: usize);
    sync_copy_desc(copy: *const c_void);
    sync_copy_peer(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, bytes: usize);
    sync_copy_ha(dst: CUarray, dst_offset: usize, src: *const c_void, bytes: usize);
    sync_copy_ah(dst: *mut c_void, src: CUarray, src_offset: usize, bytes: usize);
    sync_copy_ad(dst: CUdeviceptr, src: CUarray, src_offset: usize, bytes: usize);
    sync_copy_da(dst: CUarray, dst_offset: usize, src: CUdeviceptr, bytes: usize);
    sync_copy_aa(dst: CUarray, dst_offset: usize, src: CUarray, src_offset: usize, bytes: usize);
    sync_set_d8(dst: CUdeviceptr, value: c_uchar, count: usize);
    sync_set_d16(dst: CUdeviceptr, value: c_ushort, count: usize);
    sync_set_d32(dst: CUdeviceptr, value: c_uint, count: usize);
    sync_set_2d8(dst: CUdeviceptr, pitch: usize, value: c_uchar, width: usize, height: usize);
    sync_set_2d16(dst: CUdeviceptr, pitch: usize, value: c_ushort, width: usize, height: usize);
    sync_set_2d32(dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize);
}

/// `cuMemFree`/`cuMemFreeHost`: the driver's implicit device synchronization, then the free.
fn free_after_device_sync(real: &dyn Fn() -> CUresult) -> CUresult {
    // The memory may be any device's: every started device synchronizes logically.
    if get().is_none() {
        return real();
    }
    super::for_each_started(|b| b.synchronize_before_free());
    real()
}

pub(crate) fn mem_free(_id: HookId, real: &dyn Fn() -> CUresult, _ptr: CUdeviceptr) -> CUresult {
    free_after_device_sync(real)
}

pub(crate) fn mem_free_host(_id: HookId, real: &dyn Fn() -> CUresult, _ptr: *mut c_void) -> CUresult {
    free_after_device_sync(real)
}

/// `cuIpcCloseMemHandle`: unmaps memory another process exported, so it is a free for the ops that
/// read or write it. Natively those ops are in the driver's queues before the call; under bind
/// mode they may still wait for their binding, and ran after the unmapping: torch_ipc's importer,
/// which closes the handle as soon as it drops the received tensor, faulted with
/// `CUDA_ERROR_ILLEGAL_ADDRESS` through a daemon under MPS (docs/results/apps-suite.md, run 20)
/// and read wrong values when its launches took the dispatcher's path (run 21). So every started
/// device synchronizes logically first, as for `cuMemFree`.
pub(crate) fn ipc_close_mem_handle(_id: HookId, real: &dyn Fn() -> CUresult, _ptr: CUdeviceptr) -> CUresult {
    free_after_device_sync(real)
}

// ---- graphs --------------------------------------------------------------------------------

/// Per-partition copies of the executable graphs instantiated in bind mode whose every node a copy
/// can hold, by executable-graph handle ([`vitamin_hal_cuda::CudaGraphCopies`]). A launch takes its
/// graph's entry along; a change to the executable graph replaces or drops the entry (launches
/// recorded before keep theirs, which match the graph as they launched it).
static GRAPH_COPIES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<usize, GraphCopies>>> =
    std::sync::LazyLock::new(Default::default);

/// The copies map (a panic while it was held left it consistent: every change is one insert or
/// remove).
fn graph_copies() -> std::sync::MutexGuard<'static, std::collections::HashMap<usize, GraphCopies>> {
    GRAPH_COPIES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One executable graph's copies and the instantiation flags they were made with.
#[derive(Clone)]
struct GraphCopies {
    copies: Arc<vitamin_hal_cuda::CudaGraphCopies>,
    flags: u64,
}

/// After executable graph `exec` was instantiated from `graph` with `flags` (or updated from it):
/// snapshots the graph for per-partition copies, or forgets any earlier entry of that handle when
/// the graph cannot be confined (it then runs on the whole device, as before copies existed).
fn snapshot_graph(exec: CUgraphExec, graph: CUgraph, flags: u64) {
    if exec.is_null() || graph.is_null() || vitamin_hal_cuda::driver::load().is_err() {
        return;
    }
    // SAFETY: the application just instantiated (or updated) `exec` from the live `graph`, and by
    // the driver's own contract does not change `graph` concurrently with that call.
    let made = unsafe { vitamin_hal_cuda::CudaGraphCopies::snapshot(graph as u64, exec as u64, flags) };
    let mut map = graph_copies();
    match made {
        Ok(copies) => {
            map.insert(exec as usize, GraphCopies { copies, flags });
        }
        Err(why) => {
            map.remove(&(exec as usize));
            vlog!(LogLevel::Debug, "graph {exec:p} runs on the whole device: {why}");
        }
    }
}

/// `cuGraphInstantiateWithFlags`: passes through, then snapshots the graph for per-partition copies.
pub(crate) fn graph_instantiate(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec_out: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS && !exec_out.is_null() {
        // SAFETY: the driver wrote the new executable graph through the application's pointer.
        snapshot_graph(unsafe { *exec_out }, graph, flags);
    }
    r
}

/// `cuGraphInstantiateWithParams`: as [`graph_instantiate`], with the flags read from the
/// parameters (`CUDA_GRAPH_INSTANTIATE_PARAMS` begins with its 64-bit `flags`).
pub(crate) fn graph_instantiate_with_params(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec_out: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut c_void,
) -> CUresult {
    let r = real();
    if r == CUDA_SUCCESS && !exec_out.is_null() && !params.is_null() {
        // SAFETY: the driver accepted `params` as a live CUDA_GRAPH_INSTANTIATE_PARAMS, whose first
        // member is the 64-bit flags word; it wrote the executable graph through `exec_out`.
        let (exec, flags) = unsafe { (*exec_out, params.cast::<u64>().read_unaligned()) };
        snapshot_graph(exec, graph, flags);
    }
    r
}

/// The copies a launch of `exec` takes along, if its graph can be confined.
fn graph_copies_of(exec: CUgraphExec) -> Option<Arc<dyn vitamin_hal::PartitionCopies>> {
    let c = graph_copies().get(&(exec as usize)).map(|g| g.copies.clone())?;
    Some(c)
}

/// `cuGraphLaunch`: one op on the logical stream (the dispatcher binds it, as a whole, to one pool
/// node: a partition's own copy of the graph where the graph has copies, else the whole device).
/// It is ordered behind the previous launch of the same executable graph through the
/// graph's logical ordering event, as the driver orders launches of one executable graph.
pub(crate) fn graph_launch(id: HookId, real: &dyn Fn() -> CUresult, exec: CUgraphExec, stream: CUstream) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(stream, pt) else { return real() };
    let s = match b.target(stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => return real(), // captured into the application's graph
        Ok(Target::Native(s)) => {
            // The driver orders this launch behind the graph's earlier launches only once it holds them.
            if let Err(e) = b.wait_graph_launches_submitted(exec as usize) {
                return code(&e);
            }
            if let Err(e) = b.wait_for_logical_events(s).and_then(|()| b.wait_graph_order(s, exec as usize)) {
                return code(&e);
            }
            return b.native(Some(s), stream, pt, true, real);
        }
        Ok(Target::Record(s)) => s,
    };
    if exec.is_null() {
        return b.native(Some(s), stream, pt, true, real); // the driver reports the invalid handle
    }
    match b.record_graph_launch_with(s, exec as usize, graph_copies_of(exec)) {
        Ok(_) => CUDA_SUCCESS,
        Err(e) => code(&e),
    }
}

/// A call that changes or destroys executable graph `exec`: waits for the submission of its
/// deferred launches, then passes through.
fn graph_exec_changed(real: &dyn Fn() -> CUresult, exec: CUgraphExec) -> CUresult {
    if get().is_none() {
        return real();
    }
    // Launched on any device's streams: each started device waits for its deferred launches.
    let mut waited = Ok(());
    super::for_each_started(|b| {
        if let Err(e) = b.wait_graph_launches_submitted(exec as usize) {
            waited = Err(e);
        }
    });
    if let Err(e) = waited {
        return code(&e);
    }
    real()
}

/// A call that changes executable graph `exec` node by node: its copies no longer match it, so
/// launches from now on run the application's graph on the whole device.
fn graph_exec_nodes_changed(real: &dyn Fn() -> CUresult, exec: CUgraphExec) -> CUresult {
    let r = graph_exec_changed(real, exec);
    graph_copies().remove(&(exec as usize));
    r
}

/// `cuGraphExecUpdate(_v2)`: after a successful update the copies are made from the new graph
/// (with the flags of the instantiation); after a failed one, none are kept.
fn graph_exec_updated(real: &dyn Fn() -> CUresult, exec: CUgraphExec, graph: CUgraph) -> CUresult {
    let r = graph_exec_changed(real, exec);
    let had = graph_copies().remove(&(exec as usize));
    if let (CUDA_SUCCESS, Some(old)) = (r, had) {
        snapshot_graph(exec, graph, old.flags);
    }
    r
}

pub(crate) fn graph_exec_destroy(_id: HookId, real: &dyn Fn() -> CUresult, exec: CUgraphExec) -> CUresult {
    let r = graph_exec_changed(real, exec);
    if r == CUDA_SUCCESS {
        graph_copies().remove(&(exec as usize));
    }
    if r == CUDA_SUCCESS && get().is_some() {
        super::for_each_started(|b| b.destroy_graph_exec(exec as usize));
    }
    r
}

/// `cuGraphUpload`: waits for the submission of the graph's deferred launches (the driver orders an
/// upload behind them), then passes through on the application's stream. An upload changes nothing
/// the application can observe, so its stream's logical work is not drained.
pub(crate) fn graph_upload(id: HookId, real: &dyn Fn() -> CUresult, exec: CUgraphExec, stream: CUstream) -> CUresult {
    if get().is_some() && super::capturing(stream, per_thread(id)) {
        return real();
    }
    graph_exec_changed(real, exec)
}

pub(crate) fn graph_exec_update_v1(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    graph: CUgraph,
    _error_node_out: *mut CUgraphNode,
    _result_out: *mut c_int,
) -> CUresult {
    graph_exec_updated(real, exec, graph)
}

pub(crate) fn graph_exec_update(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    graph: CUgraph,
    _result_info: *mut c_void,
) -> CUresult {
    graph_exec_updated(real, exec, graph)
}

pub(crate) fn graph_exec_node_params(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    _node: CUgraphNode,
    _params: *const c_void,
) -> CUresult {
    graph_exec_nodes_changed(real, exec)
}

pub(crate) fn graph_exec_node_params_in_ctx(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    _node: CUgraphNode,
    _params: *const c_void,
    _ctx: CUcontext,
) -> CUresult {
    graph_exec_nodes_changed(real, exec)
}

pub(crate) fn graph_exec_child_graph(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    _node: CUgraphNode,
    _child: CUgraph,
) -> CUresult {
    graph_exec_nodes_changed(real, exec)
}

pub(crate) fn graph_exec_node_event(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    _node: CUgraphNode,
    _event: CUevent,
) -> CUresult {
    graph_exec_nodes_changed(real, exec)
}

pub(crate) fn graph_exec_node_enabled(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    exec: CUgraphExec,
    _node: CUgraphNode,
    _enabled: c_uint,
) -> CUresult {
    graph_exec_nodes_changed(real, exec)
}

// ---- streams -------------------------------------------------------------------------------

fn created_stream(real: &dyn Fn() -> CUresult, out: *mut CUstream, flags: c_uint, priority: c_int) -> CUresult {
    let r = real();
    let Some(b) = get() else { return r };
    if r == CUDA_SUCCESS && !out.is_null() {
        // SAFETY: the driver just wrote the new handle through the application's out pointer.
        let handle = unsafe { *out } as usize;
        b.register_stream(handle, stream_kind(flags), priority);
    }
    r
}

pub(crate) fn stream_create(_id: HookId, real: &dyn Fn() -> CUresult, out: *mut CUstream, flags: c_uint) -> CUresult {
    created_stream(real, out, flags, 0)
}

pub(crate) fn stream_create_with_priority(
    _id: HookId,
    real: &dyn Fn() -> CUresult,
    out: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CUresult {
    created_stream(real, out, flags, priority)
}

pub(crate) fn stream_destroy(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream) -> CUresult {
    let Some(b) = get_for_stream(stream, per_thread(id)) else { return real() };
    b.destroy_stream(stream as usize, real, |&r| r == CUDA_SUCCESS)
}

fn stream_wait(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream, block: bool) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(stream, pt) else { return real() };
    if super::capturing(stream, pt) {
        b.counters.capturing.bump();
        return real();
    }
    let Some(s) = b.known_stream(classify_stream(stream as usize, pt)) else {
        return real(); // a stream vitamin never saw holds no logical work
    };
    let logical = if block { b.synchronize_stream(s).map(|()| true) } else { b.query_stream(s) };
    match logical {
        // Native work too: a stream handed to the driver, or another context's.
        Ok(true) if b.elsewhere(s) => real(),
        Ok(true) => CUDA_SUCCESS,
        Ok(false) => CUDA_ERROR_NOT_READY,
        Err(e) => code(&e),
    }
}

pub(crate) fn stream_query(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream) -> CUresult {
    stream_wait(id, real, stream, false)
}

pub(crate) fn stream_synchronize(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream) -> CUresult {
    stream_wait(id, real, stream, true)
}

pub(crate) fn stream_wait_event(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    stream: CUstream,
    event: CUevent,
    _flags: c_uint,
) -> CUresult {
    let pt = per_thread(id);
    let Some(b) = get_for_stream(stream, pt) else { return real() };
    let s = match b.target(stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => return real(),
        Ok(Target::Record(s) | Target::Native(s)) => s,
    };
    let entry = b.registry().event(event as usize);
    if entry.is_none() {
        // A cross-device wait: the event was recorded logically on another device. Its record
        // completes first (a bounded host wait), so everything `s` does after this call follows
        // it; the driver then checks the handles as it would natively.
        if let Some((owner, e)) = super::logical_event_elsewhere(b, event as usize) {
            b.counters.cross_device_waits.bump();
            if let Err(err) = owner.synchronize_event(e) {
                return code(&err);
            }
            return real();
        }
    }
    match entry {
        Some(EventEntry { id: e, recorder: Recorder::Logical | Recorder::Never, .. }) => match b.wait_event(s, e) {
            Ok(()) => CUDA_SUCCESS,
            Err(err) => code(&err),
        },
        // Recorded by the driver (or unknown): the driver orders the native stream, and the host
        // waits for the event so that later logical ops of `s` follow it too.
        _ => {
            if let Err(e) = b.drain(s) {
                return e;
            }
            let r = real();
            if r == CUDA_SUCCESS && !super::capturing(stream, pt) {
                // SAFETY: the application's event, which the driver just accepted.
                let w = unsafe { driver::event_synchronize(event) };
                if w != CUDA_SUCCESS {
                    return w;
                }
            }
            r
        }
    }
}

pub(crate) fn stream_add_callback(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    stream: CUstream,
    _callback: CUstreamCallback,
    _user_data: *mut c_void,
    _flags: c_uint,
) -> CUresult {
    native_async(id, real, stream, true)
}

pub(crate) fn begin_capture(id: HookId, real: &dyn Fn() -> CUresult, stream: CUstream) -> CUresult {
    native_async(id, real, stream, false)
}

pub(crate) fn begin_capture_v2(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    stream: CUstream,
    _mode: CUstreamCaptureMode,
) -> CUresult {
    native_async(id, real, stream, false)
}

pub(crate) fn begin_capture_to_graph(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    stream: CUstream,
    _graph: CUgraph,
    _dependencies: *const CUgraphNode,
    _dependency_data: *const c_void,
    _num_dependencies: usize,
    _mode: CUstreamCaptureMode,
) -> CUresult {
    native_async(id, real, stream, false)
}

// ---- events --------------------------------------------------------------------------------

pub(crate) fn event_create(_id: HookId, real: &dyn Fn() -> CUresult, out: *mut CUevent, flags: c_uint) -> CUresult {
    let r = real();
    let Some(b) = get() else { return r };
    if r == CUDA_SUCCESS && !out.is_null() {
        // SAFETY: the driver just wrote the new handle through the application's out pointer.
        let handle = unsafe { *out } as usize;
        b.register_event(handle, |e| event_entry(e, flags));
    }
    r
}

fn event_record_impl(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    event: CUevent,
    stream: CUstream,
    flags: c_uint,
) -> CUresult {
    let pt = per_thread(id);
    let handle = event as usize;
    let Some(b) = get_for_event(handle) else { return real() };
    let Some((mapped, entry)) = b.registry().event_id(handle) else {
        return b.native_on_stream(stream, pt, false, real); // an event vitamin never saw
    };
    let s = match b.target(stream, pt) {
        Err(e) => return e,
        Ok(Target::Forward) => {
            let r = real();
            if r == CUDA_SUCCESS {
                b.note_native_record(mapped, entry, None);
            }
            return r;
        }
        Ok(Target::Native(s)) => s,
        Ok(Target::Record(s)) if entry.records_natively(flags) => s,
        Ok(Target::Record(s)) => {
            return match b.record_event(mapped, entry, s) {
                Ok(()) => CUDA_SUCCESS,
                Err(e) => code(&e),
            };
        }
    };
    // Native record (timing or interprocess event, record flags, legacy stream during a capture):
    // after the drain the stream holds nothing, so the driver's timestamp is when its work ended.
    let r = b.native(Some(s), stream, pt, false, real);
    if r == CUDA_SUCCESS {
        b.note_native_record(mapped, entry, Some(s));
    }
    r
}

pub(crate) fn event_record(id: HookId, real: &dyn Fn() -> CUresult, event: CUevent, stream: CUstream) -> CUresult {
    event_record_impl(id, real, event, stream, 0)
}

pub(crate) fn event_record_with_flags(
    id: HookId,
    real: &dyn Fn() -> CUresult,
    event: CUevent,
    stream: CUstream,
    flags: c_uint,
) -> CUresult {
    event_record_impl(id, real, event, stream, flags)
}

fn event_wait(real: &dyn Fn() -> CUresult, event: CUevent, block: bool) -> CUresult {
    let Some(b) = get_for_event(event as usize) else { return real() };
    let entry = b.registry().event(event as usize);
    let Some(EventEntry { id, recorder: Recorder::Logical, .. }) = entry else {
        return real(); // never recorded, recorded natively, or unknown: the driver knows
    };
    if block {
        match b.synchronize_event(id) {
            Ok(()) => CUDA_SUCCESS,
            Err(e) => code(&e),
        }
    } else {
        match b.query_event(id) {
            Ok(true) => CUDA_SUCCESS,
            Ok(false) => CUDA_ERROR_NOT_READY,
            Err(e) => code(&e),
        }
    }
}

pub(crate) fn event_query(_id: HookId, real: &dyn Fn() -> CUresult, event: CUevent) -> CUresult {
    event_wait(real, event, false)
}

pub(crate) fn event_synchronize(_id: HookId, real: &dyn Fn() -> CUresult, event: CUevent) -> CUresult {
    event_wait(real, event, true)
}

pub(crate) fn event_destroy(_id: HookId, real: &dyn Fn() -> CUresult, event: CUevent) -> CUresult {
    let Some(b) = get_for_event(event as usize) else { return real() };
    b.destroy_event(event as usize, real, |&r| r == CUDA_SUCCESS)
}

// ---- context -------------------------------------------------------------------------------

fn device_sync_then(real: &dyn Fn() -> CUresult) -> CUresult {
    let Some(b) = get() else { return real() };
    let logical = b.synchronize_device();
    let r = real();
    match logical {
        Err(e) => code(&e),
        Ok(()) => r,
    }
}

pub(crate) fn ctx_synchronize(_id: HookId, real: &dyn Fn() -> CUresult) -> CUresult {
    device_sync_then(real)
}

pub(crate) fn ctx_synchronize_v2(_id: HookId, real: &dyn Fn() -> CUresult, _ctx: CUcontext) -> CUresult {
    device_sync_then(real)
}
