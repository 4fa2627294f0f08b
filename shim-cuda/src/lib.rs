//! # libvitamin_cuda.so: the CUDA interposer
//!
//! Loaded with `LD_PRELOAD` (by `vitamin run`), the library sits between an unmodified CUDA
//! application and the driver. **Bind mode** (the default, [`bind`]): asynchronous work (kernel
//! launches, cooperative and cluster ones included, graph launches, copies, fills, host functions)
//! becomes ops of a virtual context, late-bound by an in-process coordinator to the green-context
//! pool, while the application sees native semantics; if bind mode cannot start (no green
//! contexts, not the primary context), the process runs in observe mode and the census says why.
//! **Observe mode** (`VITAMIN_MODE=observe`): every intercepted call is forwarded unchanged (same
//! function the application would have called, same arguments, same result). Both count calls per
//! API and launches per kernel configuration, writing a census JSON at exit when `VITAMIN_CENSUS`
//! asks for one (see [`config`], the client runtime's configuration).
//!
//! ## Routes to the driver, all intercepted
//! 1. Direct linking: the library exports every hooked driver symbol (`cuLaunchKernel`,
//!    `cuMemcpyHtoD_v2_ptds`, ...; the list is [`table::HOOKS`]). Preloaded, these win symbol
//!    resolution; each forwards to libcuda's symbol of the same name.
//! 2. `dlsym(handle, "cu...")` (Triton, cudarc, cudart's bootstrap): the exported `dlsym`
//!    ([`interpose`]) calls the real one and substitutes hooks for hooked `cu[A-Z]` names.
//! 3. `cuGetProcAddress` / `cuGetProcAddress_v2` (every cudart, static or shared): the real lookup
//!    runs, then hooked (name, ABI version, per-thread flag) requests get a hook, including the
//!    self-lookup of `"cuGetProcAddress"`. `cuGetExportTable` passes through untouched.
//!
//! ## Invariants
//! - Observe mode never changes a call: a hook calls exactly the pointer the application would
//!   have called ([`real`]) with the arguments unchanged and returns its result. Bind mode never
//!   changes a launch: what it submits is the application's descriptor, copied at the call.
//! - Nothing happens at load time: no constructors, threads or allocation; state is initialized by
//!   the first intercepted call ([`state`]). Nothing is printed unless `VITAMIN_LOG` asks.
//! - Every exported function body runs inside `catch_unwind`; a re-entered hook only forwards
//!   ([`guard`]). After `fork`, the child resets its counters and writes its own census.
//!
//! ## Layout
//! What every interposer needs (the logical handle registry, the capture rules, the record and
//! wait paths, the coordinator thread, the census tables, the configuration) is the client
//! runtime's, [`vitamin_runtime::client`]; this crate keeps what is CUDA's. Pure logic (tested
//! without a GPU): [`table`] (the hook table and lookups), [`guard`], [`census`] (per-hook
//! counters), [`bind::capture`] and [`bind::handles`] (CUDA's `extra` arrays, launch attributes and
//! handle values). FFI: [`ffi`] (types), [`real`] (real functions), [`state`] (process state,
//! exit, fork), [`interpose`] (`dlsym`), [`bind`] (the bind-mode handlers and the client's view of
//! the driver, [`bind::CudaNative`]), and `hooks/` with one module per API family (launch, stream,
//! event, memory, graph, ctx, entry), generated from C signatures.
#![warn(missing_docs)]

pub mod bind;
pub mod census;
pub mod config;
pub mod ffi;
pub mod guard;
mod hooks;
pub mod interpose;
pub mod real;
pub mod state;
pub mod table;
