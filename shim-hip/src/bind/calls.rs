//! The bind-mode handlers of the hooks (FFI shell): what each intercepted call becomes.
//!
//! Every handler has the hook's C arguments after `(id, real)`, where `real` makes the call the
//! application made, unchanged. Each starts with [`get`]: if bind mode is not running in this
//! process, the call is forwarded. The rules are in [`crate::bind`]'s module docs.

// The handlers mirror HIP signatures of up to 11 parameters.
#![allow(clippy::too_many_arguments)]

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Arc;

use smallvec::SmallVec;
use vitamin_hal::{Copy, Endpoint, Fill, FunctionKind, FunctionRef, HostFunction, KernelArgs, KernelLaunch, OpDesc};
use vitamin_runtime::client::capture::{self, Decline, FunctionLimits, Geometry, ShapeLimits};
use vitamin_runtime::client::handles::{plan_copy, CopyKind, CopyPlan, EventEntry, Memory, Recorder};
use vitamin_runtime::config::LogLevel;
use vitamin_runtime::StreamId;

use super::function::FunctionInfo;
use super::{
    classify_stream, code, driver, get, get_for_event, get_for_stream, is_capturing, stream_kind, Bind, Target,
};
use crate::ffi::*;
use crate::hooks::HookId;
use crate::state::vlog;

/// Launch shapes vitamin accepts without asking the runtime (a larger one takes the native path,
/// where the runtime answers): 1024 threads along each block axis, grids below 2^31 x 2^16 x 2^16.
const SHAPE: ShapeLimits = ShapeLimits { max_block: [1024, 1024, 1024], max_grid: [i32::MAX as u32, 65535, 65535] };
/// Dynamic shared memory vitamin accepts without asking the runtime: 64 KiB, the LDS of every
/// CDNA and RDNA CU (a larger request takes the native path).
const MAX_DYNAMIC_SHARED: u32 = 64 * 1024;

/// The largest `extra` argument buffer vitamin copies (kernel arguments are at most a few KiB; a
/// larger claimed size takes the native path, where the runtime reads what it needs).
const MAX_ARG_BYTES: usize = 64 * 1024;

fn record(b: &Bind, s: StreamId, desc: OpDesc) -> HipError {
    match b.record(s, desc) {
        Ok(_) => HIP_SUCCESS,
        Err(e) => code(&e),
    }
}

/// The logical stream of an asynchronous call, or the call's answer (forwarded while capturing,
/// the runtime's error for a handle it does not know).
fn stream_target(b: &Bind, id: HookId, stream: HipStream, real: &dyn Fn() -> HipError) -> Result<StreamId, HipError> {
    match b.target(stream, id.per_thread()) {
        Err(e) => Err(e),
        Ok(Target::Forward) => Err(real()),
        Ok(Target::Native) => Err(b.native_on_stream(stream, id.per_thread(), true, real)),
        Ok(Target::Record(s)) => Ok(s),
    }
}

/// The native path for a stream-ordered call vitamin does not model (drain, call, wait).
pub(crate) fn native_on(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    b.counters.native_unmodelled.bump();
    b.native_on_stream(stream, id.per_thread(), true, real)
}

// ---- launches ------------------------------------------------------------------------------

/// A launch as the application made it: a runtime function (`hipModuleLaunchKernel`) or a host
/// stub (`hipLaunchKernel`).
struct LaunchCall {
    /// The runtime function, or the host stub.
    handle: usize,
    stub: bool,
    geometry: Geometry,
    stream: HipStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    /// Events the runtime records around the kernel (`hipExtLaunchKernel`,
    /// `hipExtModuleLaunchKernel`), if any.
    timed: Option<Timed>,
}

/// The start and stop events of an extended launch (either may be null).
#[derive(Debug, Clone, Copy)]
struct Timed {
    start: HipEvent,
    stop: HipEvent,
}

/// One launch, top to bottom: its stream, its validation (once), launch-first when it applies,
/// else the descriptor copied and recorded; what vitamin declines takes the native path. A
/// launch with events is bound only by launch-first (the runtime records the events around the
/// kernel on the lane it runs on); otherwise it takes the native path, on the application's
/// stream. Either way the events are the runtime's from then on (their queries, waits and
/// timings are answered by it).
fn launch(id: HookId, real: &dyn Fn() -> HipError, c: LaunchCall) -> HipError {
    let Some(b) = get_for_stream(c.stream, id.per_thread()) else { return real() };
    let s = match stream_target(b, id, c.stream, real) {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let captured = check_launch(b, &c).and_then(|(f, info)| {
        if let Some(result) = launch_first(b, s, &c, f, &info) {
            return Ok(Err(result));
        }
        if c.timed.is_some() {
            return Err(Decline::Unmodelled("events around the kernel, and launch-first did not apply".into()));
        }
        copy_launch(&c, f, &info).map(Ok)
    });
    let result = match captured {
        Ok(Err(launched_first)) => launched_first,
        Ok(Ok(k)) => {
            b.counters.kernels.bump();
            record(b, s, OpDesc::Kernel(k))
        }
        Err(d @ Decline::Invalid(_)) => {
            b.counters.invalid_launches.bump();
            vlog!(LogLevel::Debug, "{}: {d}; the runtime answers it", id.symbol());
            // The runtime's own answer, even when the stream's earlier work failed
            // asynchronously: that failure is the next synchronization's to report (it stays
            // recorded), as natively, not this call's. The drain still orders the call after
            // that work, in case the runtime accepts the launch after all.
            let _ = b.drain(s);
            let r = real();
            if r == HIP_SUCCESS {
                let w = driver::native_stream_synchronize(c.stream as usize);
                if w != HIP_SUCCESS {
                    return w;
                }
            }
            r
        }
        Err(d) => {
            b.counters.native_unmodelled.bump();
            vlog!(LogLevel::Debug, "{}: {d}; the runtime handles it", id.symbol());
            b.native(Some(s), c.stream, true, real)
        }
    };
    if let (Some(t), HIP_SUCCESS) = (c.timed, result) {
        note_native_events(b, s, t);
    }
    result
}

/// The events of a launch the runtime recorded them around: recorded natively, after the
/// kernel's op on logical stream `s`.
fn note_native_events(b: &Bind, s: StreamId, t: Timed) {
    for e in [t.start, t.stop].into_iter().filter(|e| !e.is_null()) {
        // The registry's lock is released before the record is noted (which takes it again).
        let found = b.registry().event_id(e as usize);
        if let Some((mapped, entry)) = found {
            b.note_native_record(mapped, entry, Some(s));
        }
    }
}

/// Validates a launch the way the runtime does before accepting it: a function vitamin knows the
/// layout of, a shape within the device's and the function's limits, a well-formed `extra`
/// array. Returns the handle to launch (a runtime function, or the host stub itself) and its
/// info.
fn check_launch(b: &Bind, c: &LaunchCall) -> Result<(usize, Arc<FunctionInfo>), Decline> {
    if c.handle == 0 {
        return Err(Decline::Invalid("null function".into()));
    }
    if !c.extra.is_null() {
        if !c.params.is_null() {
            return Err(Decline::Unmodelled("both kernel parameters and an `extra` array".into()));
        }
        extra_buffer(c.extra)?;
    }
    let (f, info) = b.functions.launchable(c.handle, c.stub, b.max_threads);
    if info.layout.is_none() {
        return Err(Decline::Unmodelled(format!("no parameter layout for {}", info.name)));
    }
    let limits = FunctionLimits {
        max_threads_per_block: info.max_threads_per_block.unwrap_or(b.max_threads),
        max_dynamic_shared_bytes: MAX_DYNAMIC_SHARED,
        device: SHAPE,
    };
    capture::validate(&c.geometry, &limits)?;
    Ok((f, info))
}

/// Where an `extra` array's entries say the packed argument buffer is: `[BUFFER_POINTER, buffer,
/// BUFFER_SIZE, &size, END]`, the only form the runtime takes (ROCm/clr
/// `hipamd/src/hip_module.cpp`, `ihipLaunchKernelCommand`: it checks entries 0, 2 and 4 in that
/// order and answers `hipErrorInvalidValue` otherwise). `entry(i)` reads entry `i`; entries
/// after the first mismatch are not read (a shorter array is the application's error, which the
/// runtime reports without reading past it either). Returns `(buffer, &size)`.
pub fn parse_extra(entry: impl Fn(usize) -> usize) -> Result<(usize, usize), Decline> {
    let bad = || Decline::Invalid("an `extra` array not of the form {BUFFER_POINTER, p, BUFFER_SIZE, &n, END}".into());
    for (i, want) in
        [(0, HIP_LAUNCH_PARAM_BUFFER_POINTER), (2, HIP_LAUNCH_PARAM_BUFFER_SIZE), (4, HIP_LAUNCH_PARAM_END)]
    {
        if entry(i) != want {
            return Err(bad());
        }
    }
    let (buffer, size) = (entry(1), entry(3));
    if size == 0 {
        return Err(Decline::Invalid("a null buffer size in an `extra` array".into()));
    }
    Ok((buffer, size))
}

/// The packed argument buffer of a launch's `extra` array.
fn extra_buffer<'a>(extra: *mut *mut c_void) -> Result<&'a [u8], Decline> {
    // SAFETY: `extra` is the application's array, read entry by entry up to the first mismatch
    // with the form the runtime requires (which reads the same entries).
    let (buffer, size) = parse_extra(|i| unsafe { *extra.add(i) } as usize)?;
    // SAFETY: entry 3 points at the buffer's size (the form just checked).
    let len = unsafe { *(size as *const usize) };
    if len == 0 {
        return Ok(&[]);
    }
    if buffer == 0 {
        return Err(Decline::Invalid(format!("a null argument buffer of {len} bytes")));
    }
    if len > MAX_ARG_BYTES {
        return Err(Decline::Unmodelled(format!("an argument buffer of {len} bytes")));
    }
    // SAFETY: the application's buffer of `len` bytes (runtime contract).
    Ok(unsafe { std::slice::from_raw_parts(buffer as *const u8, len) })
}

/// Launch-first eager binding: a launch without dynamic shared memory whose arguments are all
/// given is handed to the client runtime, which launches it on a lane with the application's
/// argument pointers (kernel parameters or `extra` array) and events before the descriptor is
/// copied. `None`: not applicable.
fn launch_first(b: &Bind, s: StreamId, c: &LaunchCall, f: usize, info: &FunctionInfo) -> Option<HipError> {
    if c.geometry.shared_mem_bytes != 0 || info.spins_on_peers {
        return None; // a collective is placed by the dispatcher (the whole device, no lease)
    }
    let layout = info.layout.as_ref()?;
    if !layout.is_empty() && c.extra.is_null() {
        if c.params.is_null() {
            return None;
        }
        // SAFETY: the argument array holds one pointer per parameter (runtime contract).
        if (0..layout.len()).any(|i| unsafe { *c.params.add(i) }.is_null()) {
            return None;
        }
    }
    let g = &c.geometry;
    let params = if layout.is_empty() && c.extra.is_null() { std::ptr::null_mut() } else { c.params };
    let extra = c.extra;
    let stub = info.kind == FunctionKind::Kernel;
    let timed = c.timed;
    // The work sizes of a grid of whole work-groups, for `hipExtModuleLaunchKernel`.
    let global = [(g.grid.x, g.block.x), (g.grid.y, g.block.y), (g.grid.z, g.block.z)].map(|(n, b)| n.checked_mul(b));
    let global = match global {
        [Some(x), Some(y), Some(z)] => [x, y, z],
        _ if !stub && timed.is_some() => return None,
        _ => [0; 3],
    };
    let launch = |stream: u64| {
        let dim = |d: vitamin_hal::Dim3| Dim3 { x: d.x, y: d.y, z: d.z };
        let lane = stream as HipStream;
        // SAFETY: `f` is the application's function (or host stub), `stream` the lane's stream
        // handed over by the backend, `params` / `extra` the application's arguments (checked
        // above) and its events, valid for this call: the launch the application asked for, on
        // another stream.
        let r = unsafe {
            match (stub, timed) {
                (true, None) => driver::launch_kernel(f as *const c_void, dim(g.grid), dim(g.block), params, 0, lane),
                (true, Some(t)) => driver::ext_launch_kernel(
                    f as *const c_void,
                    dim(g.grid),
                    dim(g.block),
                    params,
                    0,
                    lane,
                    t.start,
                    t.stop,
                    0,
                ),
                (false, None) => driver::module_launch_kernel(
                    f as HipFunction,
                    g.grid.x,
                    g.grid.y,
                    g.grid.z,
                    g.block.x,
                    g.block.y,
                    g.block.z,
                    0,
                    lane,
                    params,
                    extra,
                ),
                (false, Some(t)) => driver::ext_module_launch_kernel(
                    f as HipFunction,
                    global,
                    [g.block.x, g.block.y, g.block.z],
                    0,
                    lane,
                    params,
                    extra,
                    t.start,
                    t.stop,
                    0,
                ),
            }
        };
        let call = match (stub, timed.is_some()) {
            (true, false) => "hipLaunchKernel",
            (true, true) => "hipExtLaunchKernel",
            (false, false) => "hipModuleLaunchKernel",
            (false, true) => "hipExtModuleLaunchKernel",
        };
        match r.unwrap_or(HIP_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND) {
            HIP_SUCCESS => Ok(()),
            code => Err(vitamin_hal::HalError::Driver { call, code, name: format!("hipError {code}") }),
        }
    };
    let capture = || copy_launch(c, f, info).ok().map(OpDesc::Kernel);
    let fref = FunctionRef::with_static_name(f as u64, info.kind, info.name);
    match b.launch_first(s, fref, g.grid, g.block, launch, capture)? {
        Ok(()) => Some(HIP_SUCCESS),
        Err(vitamin_hal::HalError::Driver { code, .. }) => Some(code),
        Err(e) => {
            vlog!(LogLevel::Debug, "launch-first launch failed: {e}");
            Some(HIP_ERROR_UNKNOWN)
        }
    }
}

/// Builds the immutable descriptor of a launch [`check_launch`] accepted, copying the argument
/// values the application passed by pointer (or its `extra` buffer, whole).
fn copy_launch(c: &LaunchCall, f: usize, info: &FunctionInfo) -> Result<KernelLaunch, Decline> {
    let Some(layout) = info.layout.clone() else {
        return Err(Decline::Unmodelled(format!("no parameter layout for {}", info.name)));
    };
    let args = if !c.extra.is_null() {
        capture::args_from_buffer(&layout, extra_buffer(c.extra)?)?
    } else if layout.is_empty() {
        KernelArgs::empty()
    } else {
        if c.params.is_null() {
            return Err(Decline::Invalid(format!("{} takes {} parameters; none were given", info.name, layout.len())));
        }
        let mut values: SmallVec<[&[u8]; 16]> = SmallVec::new();
        for (i, p) in layout.iter().enumerate() {
            // SAFETY: the argument array holds one pointer per parameter (runtime contract).
            let ptr = unsafe { *c.params.add(i) } as *const u8;
            if ptr.is_null() {
                return Err(Decline::Invalid(format!("parameter {i} is a null pointer")));
            }
            // SAFETY: the pointer addresses the parameter's value of `size` bytes (runtime contract).
            values.push(unsafe { std::slice::from_raw_parts(ptr, p.size as usize) });
        }
        capture::pack_params(&layout, &values)?
    };
    let g = &c.geometry;
    // The occupancy, for the policies' size model (a host stub without a runtime function is
    // `FunctionKind::Kernel`).
    let threads = g.block.volume() as u32;
    let stub = info.kind == FunctionKind::Kernel;
    let resident =
        info.occupancy.get(threads, g.shared_mem_bytes, || driver::blocks_per_cu(f, stub, threads, g.shared_mem_bytes));
    Ok(KernelLaunch::new(
        FunctionRef::with_static_name(f as u64, info.kind, info.name),
        g.grid,
        g.block,
        g.shared_mem_bytes,
        args,
        vitamin_hal::LaunchAttributes::default().with_coresident(info.spins_on_peers),
    )
    .with_resident_per_unit(resident.unwrap_or(0)))
}

fn geometry(grid: [u32; 3], block: [u32; 3], smem: usize) -> Result<Geometry, ()> {
    Ok(Geometry {
        grid: vitamin_hal::Dim3::new(grid[0], grid[1], grid[2]),
        block: vitamin_hal::Dim3::new(block[0], block[1], block[2]),
        shared_mem_bytes: u32::try_from(smem).map_err(|_| ())?,
    })
}

fn stub_launch(
    id: HookId,
    real: &dyn Fn() -> HipError,
    f: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    smem: usize,
    stream: HipStream,
    timed: Option<Timed>,
) -> HipError {
    let Ok(geometry) = geometry(grid.array(), block.array(), smem) else {
        return native_on(id, real, stream); // the runtime answers
    };
    let c = LaunchCall {
        handle: f as usize,
        stub: true,
        geometry,
        stream,
        params: args,
        extra: std::ptr::null_mut(),
        timed,
    };
    launch(id, real, c)
}

pub(crate) fn launch_kernel(
    id: HookId,
    real: &dyn Fn() -> HipError,
    f: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    smem: usize,
    stream: HipStream,
) -> HipError {
    stub_launch(id, real, f, grid, block, args, smem, stream, None)
}

/// The events of an extended launch, `None` when it has neither.
fn timed(start: HipEvent, stop: HipEvent) -> Option<Timed> {
    (!start.is_null() || !stop.is_null()).then_some(Timed { start, stop })
}

/// `hipExtLaunchKernel`: `hipLaunchKernel` with events the runtime records around the kernel
/// (bound by launch-first, else the native path); flags (`hipExtAnyOrderLaunch`) take the
/// native path.
pub(crate) fn ext_launch_kernel(
    id: HookId,
    real: &dyn Fn() -> HipError,
    f: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    smem: usize,
    stream: HipStream,
    start: HipEvent,
    stop: HipEvent,
    flags: c_int,
) -> HipError {
    if flags != 0 {
        return native_on_noting(id, real, stream, timed(start, stop));
    }
    stub_launch(id, real, f, grid, block, args, smem, stream, timed(start, stop))
}

pub(crate) fn module_launch_kernel(
    id: HookId,
    real: &dyn Fn() -> HipError,
    f: HipFunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    smem: c_uint,
    stream: HipStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError {
    let Ok(geometry) = geometry([gx, gy, gz], [bx, by, bz], smem as usize) else {
        return native_on(id, real, stream);
    };
    let c = LaunchCall { handle: f as usize, stub: false, geometry, stream, params, extra, timed: None };
    launch(id, real, c)
}

/// The grid and block of a `hipExtModuleLaunchKernel` launch (global work sizes in threads, local
/// ones per work-group) when it is a grid of whole work-groups, i.e. exactly the
/// `hipModuleLaunchKernel` launch of that grid and block. As the runtime does (ROCm/clr
/// `ihipModuleLaunchKernel`), a local size above the global one is first cut to it. `None`: a
/// zero size (the runtime's error) or a partial last work-group (which the runtime either runs,
/// for a kernel without uniform work-group size, or refuses): not a plain launch, so the native
/// path.
pub fn ext_work_groups(global: [u32; 3], local: [u32; 3]) -> Option<([u32; 3], [u32; 3])> {
    let mut grid = [0; 3];
    let mut block = [0; 3];
    for i in 0..3 {
        if global[i] == 0 || local[i] == 0 {
            return None;
        }
        block[i] = local[i].min(global[i]);
        if !global[i].is_multiple_of(block[i]) {
            return None;
        }
        grid[i] = global[i] / block[i];
    }
    Some((grid, block))
}

/// `hipExtModuleLaunchKernel`: a grid of whole work-groups without flags is
/// `hipModuleLaunchKernel` of that grid, with the events (if any) recorded around it by the
/// runtime on the stream it runs on; anything else takes the native path.
pub(crate) fn ext_module_launch_kernel(
    id: HookId,
    real: &dyn Fn() -> HipError,
    f: HipFunction,
    global_x: u32,
    global_y: u32,
    global_z: u32,
    local_x: u32,
    local_y: u32,
    local_z: u32,
    smem: usize,
    stream: HipStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    start: HipEvent,
    stop: HipEvent,
    flags: u32,
) -> HipError {
    let t = timed(start, stop);
    let shape = ext_work_groups([global_x, global_y, global_z], [local_x, local_y, local_z]);
    let Some((grid, block)) = shape.filter(|_| flags == 0) else {
        return native_on_noting(id, real, stream, t);
    };
    let Ok(geometry) = geometry(grid, block, smem) else {
        return native_on_noting(id, real, stream, t);
    };
    let c = LaunchCall { handle: f as usize, stub: false, geometry, stream, params, extra, timed: t };
    launch(id, real, c)
}

/// The native path for a launch that may record events: they are the runtime's afterwards.
fn native_on_noting(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream, t: Option<Timed>) -> HipError {
    let r = native_on(id, real, stream);
    if let (Some(t), HIP_SUCCESS, Some(b)) = (t, r, get()) {
        if let Ok(Target::Record(s)) = b.target(stream, id.per_thread()) {
            note_native_events(b, s, t);
        }
    }
    r
}

/// What a launch's attributes (`hipLaunchKernelExC`, `hipDrvLaunchKernelEx`) make of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributePlan {
    /// None that changes the launch (no attributes, or `cooperative = 0`): a plain launch.
    Plain,
    /// `hipLaunchAttributeCooperative` non-zero: a cooperative launch, on the whole device (CU
    /// masks do not confine one), as `hipLaunchCooperativeKernel`.
    Cooperative,
    /// An attribute vitamin does not model (this id): the launch takes the native path, unbound,
    /// in the application's stream order.
    Unmodelled(u32),
}

/// The plan for a launch with `attrs`. Every attribute but `cooperative` makes the launch
/// unmodelled (never dropped): priority, access-policy windows, synchronization policy, memory
/// sync domains and any id this build does not know.
pub fn attribute_plan(attrs: &[LaunchAttribute]) -> AttributePlan {
    let mut plan = AttributePlan::Plain;
    for a in attrs {
        match a.id {
            HIP_LAUNCH_ATTRIBUTE_COOPERATIVE if a.int_value() == 0 => {}
            HIP_LAUNCH_ATTRIBUTE_COOPERATIVE => plan = AttributePlan::Cooperative,
            other => return AttributePlan::Unmodelled(other),
        }
    }
    plan
}

/// The most attributes vitamin reads from a launch configuration (more: the native path).
const MAX_ATTRIBUTES: u32 = 64;

/// The attributes of a launch configuration, or `None` when they cannot be read (a null array
/// with a non-zero count, or too many): the native path, where the runtime answers.
fn attributes<'a>(attrs: *const LaunchAttribute, n: u32) -> Option<&'a [LaunchAttribute]> {
    match (n, attrs.is_null()) {
        (0, _) => Some(&[]),
        (_, true) => None,
        (n, false) if n > MAX_ATTRIBUTES => None,
        // SAFETY: the configuration's array of `n` attributes (runtime contract).
        (n, false) => Some(unsafe { std::slice::from_raw_parts(attrs, n as usize) }),
    }
}

/// The path of an extensible launch on `stream` whose attributes are not plain.
fn attributed_native(
    id: HookId,
    real: &dyn Fn() -> HipError,
    stream: HipStream,
    plan: Option<AttributePlan>,
) -> HipError {
    vlog!(LogLevel::Debug, "{}: attributes {plan:?}; the runtime launches it on the application's stream", id.symbol());
    native_on(id, real, stream)
}

/// `hipLaunchKernelExC` (ROCm 6): without attributes that change it, `hipLaunchKernel` of the
/// configuration's grid, block, shared memory and stream; a cooperative one, or one with an
/// attribute vitamin does not model, takes the native path.
pub(crate) fn launch_kernel_ex_c(
    id: HookId,
    real: &dyn Fn() -> HipError,
    config: *const LaunchConfig,
    f: *const c_void,
    args: *mut *mut c_void,
) -> HipError {
    if config.is_null() {
        return real(); // the runtime reports the invalid value; nothing is enqueued
    }
    // SAFETY: the application's configuration (runtime contract).
    let c = unsafe { *config };
    match attributes(c.attrs, c.num_attrs).map(attribute_plan) {
        Some(AttributePlan::Plain) => {
            stub_launch(id, real, f, c.grid, c.block, args, c.dynamic_smem_bytes, c.stream, None)
        }
        plan => attributed_native(id, real, c.stream, plan),
    }
}

/// `hipDrvLaunchKernelEx` (ROCm 6): without attributes that change it, `hipModuleLaunchKernel`
/// of the configuration; a cooperative one, or one with an attribute vitamin does not model,
/// takes the native path.
pub(crate) fn drv_launch_kernel_ex(
    id: HookId,
    real: &dyn Fn() -> HipError,
    config: *const DrvLaunchConfig,
    f: HipFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError {
    if config.is_null() {
        return real();
    }
    // SAFETY: the application's configuration (runtime contract).
    let c = unsafe { *config };
    match attributes(c.attrs, c.num_attrs).map(attribute_plan) {
        Some(AttributePlan::Plain) => module_launch_kernel(
            id,
            real,
            f,
            c.grid_x,
            c.grid_y,
            c.grid_z,
            c.block_x,
            c.block_y,
            c.block_z,
            c.shared_mem_bytes,
            c.stream,
            params,
            extra,
        ),
        plan => attributed_native(id, real, c.stream, plan),
    }
}

// ---- host functions ------------------------------------------------------------------------

/// A host-function op calling `call` (an application callback) when the work before it on its
/// logical stream completed.
fn host_function(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream, call: HostFunction) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    let s = match stream_target(b, id, stream, real) {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    b.counters.host_functions.bump();
    record(b, s, OpDesc::Host(call))
}

/// `hipStreamAddCallback`: the callback receives the application's stream handle and
/// `hipSuccess` (a failure of earlier work is reported by the next synchronization instead).
pub(crate) fn stream_add_callback(
    id: HookId,
    real: &dyn Fn() -> HipError,
    stream: HipStream,
    callback: HipStreamCallback,
    user: *mut c_void,
    flags: c_uint,
) -> HipError {
    let Some(cb) = callback.filter(|_| flags == 0) else {
        return native_on(id, real, stream); // the runtime reports the invalid value
    };
    let (stream_value, user) = (stream as usize, user as usize);
    let call = HostFunction::new("hipStreamAddCallback", move || {
        // SAFETY: the application's callback with the stream and user data it registered, called
        // once, after the work before it completed (as the runtime would).
        unsafe { cb(stream_value as HipStream, HIP_SUCCESS, user as *mut c_void) }
    });
    host_function(id, real, stream, call)
}

pub(crate) fn launch_host_func(
    id: HookId,
    real: &dyn Fn() -> HipError,
    stream: HipStream,
    f: HipHostFn,
    user: *mut c_void,
) -> HipError {
    let Some(f) = f else { return native_on(id, real, stream) };
    let user = user as usize;
    // SAFETY: the application's host function with its user data, called once, in stream order.
    let call = HostFunction::new("hipLaunchHostFunc", move || unsafe { f(user as *mut c_void) });
    host_function(id, real, stream, call)
}

// ---- graphs --------------------------------------------------------------------------------

/// `hipGraphLaunch`: one op, ordered behind the previous launch of the same executable graph.
pub(crate) fn graph_launch(id: HookId, real: &dyn Fn() -> HipError, exec: *mut c_void, stream: HipStream) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    let s = match stream_target(b, id, stream, real) {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    if exec.is_null() {
        return b.native(Some(s), stream, true, real); // the runtime reports the invalid handle
    }
    match b.record_graph_launch(s, exec as usize) {
        Ok(_) => HIP_SUCCESS,
        Err(e) => code(&e),
    }
}

pub(crate) fn graph_exec_destroy(_id: HookId, real: &dyn Fn() -> HipError, exec: *mut c_void) -> HipError {
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
    let r = real();
    if r == HIP_SUCCESS {
        super::for_each_started(|b| b.destroy_graph_exec(exec as usize));
    }
    r
}

// ---- copies and fills ----------------------------------------------------------------------

/// What the runtime says about an address.
fn memory(p: u64) -> (Memory, u64) {
    let m = match driver::memory_type(p) {
        Some(HIP_MEMORY_TYPE_HOST) => Memory::Pinned,
        Some(_) => Memory::Device,
        None => Memory::Unknown,
    };
    (m, p)
}

fn copy(
    id: HookId,
    real: &dyn Fn() -> HipError,
    kind: CopyKind,
    dst: u64,
    src: u64,
    bytes: usize,
    stream: HipStream,
) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    let s = match stream_target(b, id, stream, real) {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    if bytes == 0 || dst == 0 || src == 0 {
        return b.native(Some(s), stream, true, real); // the runtime validates the arguments
    }
    let op = match plan_copy(kind, memory(dst), memory(src), bytes as u64) {
        CopyPlan::Async { dst, src } => Copy::new(dst, src, bytes as u64),
        CopyPlan::Stage { dst } => {
            // SAFETY: the application's source of `bytes` bytes, read now, as the runtime reads a
            // pageable source before an asynchronous copy returns.
            let data: Arc<[u8]> = Arc::from(unsafe { std::slice::from_raw_parts(src as *const u8, bytes) });
            b.counters.staged_copies.bump();
            b.counters.staged_bytes.add(bytes as u64);
            Copy::new(dst, Endpoint::Staged(data), bytes as u64)
        }
        CopyPlan::Native(why) => {
            vlog!(LogLevel::Trace, "{}: {why}; native path", id.symbol());
            b.counters.native_unmodelled.bump();
            return b.native(Some(s), stream, true, real);
        }
    };
    match op {
        Ok(c) => {
            b.counters.copies.bump();
            record(b, s, OpDesc::Copy(c))
        }
        Err(_) => b.native(Some(s), stream, true, real),
    }
}

pub(crate) fn memcpy_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    _kind: c_int,
    stream: HipStream,
) -> HipError {
    // Unified addressing: the runtime infers the direction from the addresses (as vitamin does).
    copy(id, real, CopyKind::Unified, dst as u64, src as u64, bytes, stream)
}

pub(crate) fn memcpy_htod_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    src: *mut c_void,
    bytes: usize,
    stream: HipStream,
) -> HipError {
    copy(id, real, CopyKind::HostToDevice, dst as u64, src as u64, bytes, stream)
}

pub(crate) fn memcpy_dtoh_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    src: *mut c_void,
    bytes: usize,
    stream: HipStream,
) -> HipError {
    copy(id, real, CopyKind::DeviceToHost, dst as u64, src as u64, bytes, stream)
}

pub(crate) fn memcpy_dtod_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    src: *mut c_void,
    bytes: usize,
    stream: HipStream,
) -> HipError {
    copy(id, real, CopyKind::DeviceToDevice, dst as u64, src as u64, bytes, stream)
}

fn fill(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: u64,
    value: u32,
    element: u8,
    count: usize,
    stream: HipStream,
) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    let s = match stream_target(b, id, stream, real) {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    if count == 0 || memory(dst).0 == Memory::Unknown {
        return b.native(Some(s), stream, true, real); // nothing to order, or not device memory
    }
    match Fill::new(dst, value, element, count as u64) {
        Ok(f) => {
            b.counters.fills.bump();
            record(b, s, OpDesc::Fill(f))
        }
        Err(_) => b.native(Some(s), stream, true, real),
    }
}

pub(crate) fn memset_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    value: c_int,
    bytes: usize,
    stream: HipStream,
) -> HipError {
    // hipMemsetAsync sets bytes to the value's low byte.
    fill(id, real, dst as u64, (value as u32) & 0xff, 1, bytes, stream)
}

pub(crate) fn memset_d8_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    value: u8,
    count: usize,
    stream: HipStream,
) -> HipError {
    fill(id, real, dst as u64, u32::from(value), 1, count, stream)
}

pub(crate) fn memset_d16_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    value: u16,
    count: usize,
    stream: HipStream,
) -> HipError {
    fill(id, real, dst as u64, u32::from(value), 2, count, stream)
}

pub(crate) fn memset_d32_async(
    id: HookId,
    real: &dyn Fn() -> HipError,
    dst: *mut c_void,
    value: c_int,
    count: usize,
    stream: HipStream,
) -> HipError {
    fill(id, real, dst as u64, value as u32, 4, count, stream)
}

/// A synchronous call on the default stream (legacy, or the thread's for `_spt`): the drain
/// gives it the default stream's implicit ordering; it is complete when it returns.
fn default_stream_call(id: HookId, real: &dyn Fn() -> HipError) -> HipError {
    let Some(b) = get() else { return real() };
    b.counters.native_unmodelled.bump();
    b.native_on_stream(std::ptr::null_mut(), id.per_thread(), false, real)
}

pub(crate) fn legacy_sync_call3(
    id: HookId,
    real: &dyn Fn() -> HipError,
    _a: *mut c_void,
    _b: impl Sized,
    _c: usize,
) -> HipError {
    default_stream_call(id, real)
}

pub(crate) fn legacy_sync_call4(
    id: HookId,
    real: &dyn Fn() -> HipError,
    _dst: *mut c_void,
    _src: *const c_void,
    _bytes: usize,
    _kind: c_int,
) -> HipError {
    default_stream_call(id, real)
}

/// `hipFree`/`hipHostFree`: the runtime's implicit device synchronization, then the free.
pub(crate) fn free_after_sync(_id: HookId, real: &dyn Fn() -> HipError, _ptr: *mut c_void) -> HipError {
    // The memory may be any device's: every started device synchronizes logically.
    if get().is_none() {
        return real();
    }
    super::for_each_started(|b| b.synchronize_before_free());
    real()
}

// ---- streams -------------------------------------------------------------------------------

fn created_stream(real: &dyn Fn() -> HipError, out: *mut HipStream, flags: c_uint, priority: c_int) -> HipError {
    let r = real();
    let Some(b) = get() else { return r };
    if r == HIP_SUCCESS && !out.is_null() {
        // SAFETY: the runtime just wrote the new handle through the application's out pointer.
        let handle = unsafe { *out } as usize;
        b.register_stream(handle, stream_kind(flags), priority);
    }
    r
}

pub(crate) fn stream_create(_id: HookId, real: &dyn Fn() -> HipError, out: *mut HipStream) -> HipError {
    created_stream(real, out, 0, 0)
}

pub(crate) fn stream_create_with_flags(
    _id: HookId,
    real: &dyn Fn() -> HipError,
    out: *mut HipStream,
    flags: c_uint,
) -> HipError {
    created_stream(real, out, flags, 0)
}

pub(crate) fn stream_create_with_priority(
    _id: HookId,
    real: &dyn Fn() -> HipError,
    out: *mut HipStream,
    flags: c_uint,
    priority: c_int,
) -> HipError {
    created_stream(real, out, flags, priority)
}

/// `hipExtStreamCreateWithCUMask` by the application: a blocking stream of its own. Its launches
/// are late-bound like any other stream's (the pool's nodes, not the application's mask, decide
/// where they run: the mask is a placement request vitamin replaces, as it does for every stream).
pub(crate) fn stream_create_with_cu_mask(
    _id: HookId,
    real: &dyn Fn() -> HipError,
    out: *mut HipStream,
    _words: u32,
    _mask: *const u32,
) -> HipError {
    created_stream(real, out, 0, 0)
}

pub(crate) fn stream_destroy(_id: HookId, real: &dyn Fn() -> HipError, stream: HipStream) -> HipError {
    let Some(b) = get_for_stream(stream, false) else { return real() };
    // Work already recorded on it still completes (and still counts for device sync). The
    // mapping is looked up before the runtime frees the handle, so a stream another thread gets
    // with the same value meanwhile keeps its own mapping.
    b.destroy_stream(stream as usize, real, |&r| r == HIP_SUCCESS)
}

/// `hipStreamBeginCapture`: the stream's logical work is drained first (captured work must follow
/// it, as natively), then the capture begins; from then on the stream's work is forwarded
/// unchanged into the application's graph. No native wait after it: a capturing stream may not
/// be synchronized.
pub(crate) fn begin_capture(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream, _mode: c_int) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    b.counters.native_unmodelled.bump();
    b.native_on_stream(stream, id.per_thread(), false, real)
}

fn stream_wait(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream, block: bool) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    if is_capturing(stream) {
        b.counters.capturing.bump();
        return real();
    }
    let Some(s) = b.known_stream(classify_stream(stream as usize, id.per_thread())) else {
        return real(); // a stream vitamin never saw holds no logical work
    };
    if block {
        match b.synchronize_stream(s) {
            Ok(()) => HIP_SUCCESS,
            Err(e) => code(&e),
        }
    } else {
        match b.query_stream(s) {
            Ok(true) => HIP_SUCCESS,
            Ok(false) => HIP_ERROR_NOT_READY,
            Err(e) => code(&e),
        }
    }
}

pub(crate) fn stream_query(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream) -> HipError {
    stream_wait(id, real, stream, false)
}

pub(crate) fn stream_synchronize(id: HookId, real: &dyn Fn() -> HipError, stream: HipStream) -> HipError {
    stream_wait(id, real, stream, true)
}

pub(crate) fn stream_wait_event(
    id: HookId,
    real: &dyn Fn() -> HipError,
    stream: HipStream,
    event: HipEvent,
    _flags: c_uint,
) -> HipError {
    let Some(b) = get_for_stream(stream, id.per_thread()) else { return real() };
    let s = match stream_target(b, id, stream, real) {
        Ok(s) => s,
        Err(answer) => return answer,
    };
    let entry = b.registry().event(event as usize);
    if entry.is_none() {
        // A cross-device wait: the event was recorded logically on another device. Its record
        // completes first (a bounded host wait), so what `s` does after this call follows it;
        // the runtime then checks the handles as it would natively.
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
            Ok(()) => HIP_SUCCESS,
            Err(err) => code(&err),
        },
        // Recorded by the runtime (or unknown): the runtime orders the native stream, and the
        // host waits for the event so that later logical ops of `s` follow it too.
        _ => {
            if let Err(e) = b.drain(s) {
                return e;
            }
            let r = real();
            if r == HIP_SUCCESS {
                let w = driver::native_event_synchronize(event as usize);
                if w != HIP_SUCCESS {
                    return w;
                }
            }
            r
        }
    }
}

// ---- events --------------------------------------------------------------------------------

fn created_event(real: &dyn Fn() -> HipError, out: *mut HipEvent, flags: c_uint) -> HipError {
    let r = real();
    let Some(b) = get() else { return r };
    if r == HIP_SUCCESS && !out.is_null() {
        // SAFETY: the runtime just wrote the new handle through the application's out pointer.
        let handle = unsafe { *out } as usize;
        b.register_event(handle, |e| {
            EventEntry::new(e, flags & HIP_EVENT_DISABLE_TIMING == 0, flags & HIP_EVENT_INTERPROCESS != 0)
        });
    }
    r
}

pub(crate) fn event_create(_id: HookId, real: &dyn Fn() -> HipError, out: *mut HipEvent) -> HipError {
    created_event(real, out, 0)
}

pub(crate) fn event_create_with_flags(
    _id: HookId,
    real: &dyn Fn() -> HipError,
    out: *mut HipEvent,
    flags: c_uint,
) -> HipError {
    created_event(real, out, flags)
}

pub(crate) fn event_record(id: HookId, real: &dyn Fn() -> HipError, event: HipEvent, stream: HipStream) -> HipError {
    let Some(b) = get_for_event(event as usize) else { return real() };
    let Some((mapped, entry)) = b.registry().event_id(event as usize) else {
        return b.native_on_stream(stream, id.per_thread(), false, real); // an event vitamin never saw
    };
    let s = match b.target(stream, id.per_thread()) {
        Err(e) => return e,
        Ok(Target::Forward) => {
            let r = real();
            if r == HIP_SUCCESS {
                b.note_native_record(mapped, entry, None);
            }
            return r;
        }
        Ok(Target::Native) => {
            let r = b.native_on_stream(stream, id.per_thread(), false, real);
            if r == HIP_SUCCESS {
                b.note_native_record(mapped, entry, None);
            }
            return r;
        }
        Ok(Target::Record(s)) if entry.records_natively(0) => s,
        Ok(Target::Record(s)) => {
            return match b.record_event(mapped, entry, s) {
                Ok(()) => HIP_SUCCESS,
                Err(e) => code(&e),
            };
        }
    };
    // A timing or interprocess event: recorded by the runtime after the drain, so its timestamp
    // is when the stream's work ended.
    let r = b.native(Some(s), stream, false, real);
    if r == HIP_SUCCESS {
        b.note_native_record(mapped, entry, Some(s));
    }
    r
}

fn event_wait(real: &dyn Fn() -> HipError, event: HipEvent, block: bool) -> HipError {
    let Some(b) = get_for_event(event as usize) else { return real() };
    let entry = b.registry().event(event as usize);
    let Some(EventEntry { id, recorder: Recorder::Logical, .. }) = entry else {
        return real(); // never recorded, recorded natively, or unknown: the runtime knows
    };
    if block {
        match b.synchronize_event(id) {
            Ok(()) => HIP_SUCCESS,
            Err(e) => code(&e),
        }
    } else {
        match b.query_event(id) {
            Ok(true) => HIP_SUCCESS,
            Ok(false) => HIP_ERROR_NOT_READY,
            Err(e) => code(&e),
        }
    }
}

pub(crate) fn event_query(_id: HookId, real: &dyn Fn() -> HipError, event: HipEvent) -> HipError {
    event_wait(real, event, false)
}

pub(crate) fn event_synchronize(_id: HookId, real: &dyn Fn() -> HipError, event: HipEvent) -> HipError {
    event_wait(real, event, true)
}

pub(crate) fn event_destroy(_id: HookId, real: &dyn Fn() -> HipError, event: HipEvent) -> HipError {
    let Some(b) = get_for_event(event as usize) else { return real() };
    b.destroy_event(event as usize, real, |&r| r == HIP_SUCCESS)
}

// ---- device --------------------------------------------------------------------------------

pub(crate) fn device_synchronize(_id: HookId, real: &dyn Fn() -> HipError) -> HipError {
    let Some(b) = get() else { return real() };
    let logical = b.synchronize_device();
    let r = real();
    match logical {
        Err(e) => code(&e),
        Ok(()) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attribute(id: u32, value: i32) -> LaunchAttribute {
        let mut val = [0u8; 64];
        val[..4].copy_from_slice(&value.to_ne_bytes());
        LaunchAttribute { id, pad: [0; 4], val }
    }

    #[test]
    fn attributes_other_than_a_plain_cooperative_flag_are_never_dropped() {
        assert_eq!(attribute_plan(&[]), AttributePlan::Plain);
        assert_eq!(attribute_plan(&[attribute(HIP_LAUNCH_ATTRIBUTE_COOPERATIVE, 0)]), AttributePlan::Plain);
        assert_eq!(attribute_plan(&[attribute(HIP_LAUNCH_ATTRIBUTE_COOPERATIVE, 1)]), AttributePlan::Cooperative);
        let prio = attribute(HIP_LAUNCH_ATTRIBUTE_PRIORITY, 1);
        assert_eq!(attribute_plan(&[prio]), AttributePlan::Unmodelled(HIP_LAUNCH_ATTRIBUTE_PRIORITY));
        // Whatever comes first, an unmodelled attribute wins over cooperative.
        let coop = attribute(HIP_LAUNCH_ATTRIBUTE_COOPERATIVE, 1);
        assert_eq!(attribute_plan(&[coop, prio]), AttributePlan::Unmodelled(HIP_LAUNCH_ATTRIBUTE_PRIORITY));
        assert_eq!(attribute_plan(&[prio, coop]), AttributePlan::Unmodelled(HIP_LAUNCH_ATTRIBUTE_PRIORITY));
        assert_eq!(attribute_plan(&[attribute(99, 0)]), AttributePlan::Unmodelled(99));
        for id in [HIP_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, HIP_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY] {
            assert_eq!(attribute_plan(&[attribute(id, 0)]), AttributePlan::Unmodelled(id));
        }
    }

    #[test]
    fn extra_arrays_of_the_one_form_the_runtime_takes() {
        let (buf, size) = (0x1000, 0x2000);
        let good = [HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_BUFFER_SIZE, size, HIP_LAUNCH_PARAM_END];
        assert_eq!(parse_extra(|i| good[i]).ok(), Some((buf, size)));
        // The form without its size (three entries): entry 4 is never read.
        let short = [HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_END];
        assert!(matches!(parse_extra(|i| short[i]), Err(Decline::Invalid(_))));
        let swapped = [HIP_LAUNCH_PARAM_BUFFER_SIZE, size, HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_END];
        assert!(matches!(parse_extra(|i| swapped[i]), Err(Decline::Invalid(_))));
        let no_size = [HIP_LAUNCH_PARAM_BUFFER_POINTER, buf, HIP_LAUNCH_PARAM_BUFFER_SIZE, 0, HIP_LAUNCH_PARAM_END];
        assert!(matches!(parse_extra(|i| no_size[i]), Err(Decline::Invalid(_))));
    }

    #[test]
    fn ext_work_groups_examples() {
        assert_eq!(ext_work_groups([4096, 1, 1], [256, 1, 1]), Some(([16, 1, 1], [256, 1, 1])));
        assert_eq!(ext_work_groups([100, 6, 1], [256, 4, 1]), None, "6 rows in blocks of 4: a partial work-group");
        assert_eq!(ext_work_groups([100, 8, 1], [256, 4, 1]), Some(([1, 2, 1], [100, 4, 1])), "local cut to global");
        assert_eq!(ext_work_groups([4000, 1, 1], [256, 1, 1]), None);
        assert_eq!(ext_work_groups([0, 1, 1], [1, 1, 1]), None);
        assert_eq!(ext_work_groups([1, 1, 1], [1, 0, 1]), None);
    }

    proptest! {
        /// Against the runtime's definition (ROCm/clr `ihipModuleLaunchKernel`: the local size
        /// cut to the global one, then the global size in whole work-groups): an answer is
        /// exactly that launch; `None` exactly when some axis is zero or not whole.
        #[test]
        fn ext_work_groups_is_the_runtime_launch(
            global in proptest::array::uniform3(0u32..5000),
            local in proptest::array::uniform3(0u32..1100),
        ) {
            let whole = (0..3).all(|i| global[i] > 0 && local[i] > 0 && global[i].is_multiple_of(local[i].min(global[i])));
            match ext_work_groups(global, local) {
                Some((grid, block)) => {
                    prop_assert!(whole);
                    for i in 0..3 {
                        prop_assert_eq!(block[i], local[i].min(global[i]));
                        prop_assert_eq!(u64::from(grid[i]) * u64::from(block[i]), u64::from(global[i]));
                    }
                }
                None => prop_assert!(!whole),
            }
        }
    }
}
