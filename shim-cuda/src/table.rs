//! The hook table: every driver function the interposer intercepts, with its ABI versions and
//! per-thread-default-stream variants. Pure data and lookups; no FFI.
//!
//! One row per **exported driver symbol** (one ABI): `cuMemcpyHtoD_v2` (ABI introduced in CUDA
//! 3.2 = 3020) and `cuMemcpyHtoD_v2_ptds` (7000, per-thread default stream) are two rows of the
//! base name `cuMemcpyHtoD`. The rows come from `cudaTypedefs.h` (`PFN_<base>_v<abi>[_ptsz|_ptds]`)
//! and the versioning macros of `cuda.h` (CUDA 13.0); the test `header_cross_check` verifies them
//! against those headers when they are present.
//!
//! Three routes reach a row:
//! - `dlsym(handle, "cuMemcpyHtoD_v2")` and direct linking name the exported symbol: [`by_symbol`].
//! - `cuGetProcAddress("cuMemcpyHtoD", &p, version, flags)` names the base, a CUDA version and a
//!   flag: [`for_proc_address`] applies the driver's documented rule (the newest ABI introduced at
//!   or before `version`; with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` the newest
//!   per-thread variant, else the legacy one).
//!
//! Invariants (tested): symbols are unique; (base, abi, flavor) is unique; a per-thread row's symbol
//! ends in `_ptsz`/`_ptds`; every older ABI of a hooked base that vitamin does not hook is listed
//! in [`KNOWN_UNHOOKED`], so a lookup at an old version never lands on a newer, incompatible
//! signature; a lookup that is ambiguous or carries unknown flag bits matches nothing (the real
//! pointer is then passed through untouched).

/// The API family of a hook: one module of `crate::hooks` each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// Kernel launches and host functions.
    Launch,
    /// Streams: create/destroy/query/sync/wait, priority/flags, callbacks, stream capture.
    Stream,
    /// Events.
    Event,
    /// Copies, fills, frees.
    Memory,
    /// Graph launch and upload, and the calls that change or destroy an executable graph.
    Graph,
    /// Context synchronization.
    Ctx,
    /// The driver's entry-point lookup itself (`cuGetProcAddress`).
    Entry,
}

impl Family {
    /// Lower-case name used in the census JSON.
    pub fn name(self) -> &'static str {
        match self {
            Family::Launch => "launch",
            Family::Stream => "stream",
            Family::Event => "event",
            Family::Memory => "memory",
            Family::Graph => "graph",
            Family::Ctx => "ctx",
            Family::Entry => "entry",
        }
    }
}

/// Which default-stream semantics an ABI variant has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// The legacy default stream (the plain symbol).
    Legacy,
    /// Per-thread default stream, synchronous API (`_ptds`).
    Ptds,
    /// Per-thread default stream, asynchronous API (`_ptsz`).
    Ptsz,
}

impl Flavor {
    /// Whether this is a per-thread-default-stream variant.
    pub fn is_per_thread(self) -> bool {
        !matches!(self, Flavor::Legacy)
    }
}

/// One hooked driver symbol.
#[derive(Debug, Clone, Copy)]
pub struct SymbolSpec {
    /// Its id (= its index in [`HOOKS`]).
    pub id: HookId,
    /// The exported symbol, e.g. `cuMemcpyHtoD_v2_ptds`.
    pub symbol: &'static str,
    /// The base name `cuGetProcAddress` is asked for, e.g. `cuMemcpyHtoD`.
    pub base: &'static str,
    /// The CUDA version that introduced this ABI (1000 * major + 10 * minor).
    pub abi: u32,
    /// Default-stream flavor.
    pub flavor: Flavor,
    /// API family (hook module).
    pub family: Family,
}

/// An ABI of a hooked base that vitamin does not hook (old 32-bit-pointer variants).
#[derive(Debug, Clone, Copy)]
pub struct KnownAbi {
    /// Exported symbol.
    pub symbol: &'static str,
    /// Base name.
    pub base: &'static str,
    /// CUDA version that introduced it.
    pub abi: u32,
    /// Default-stream flavor.
    pub flavor: Flavor,
}

/// Calls `$callback! { [Family module symbol "base" abi Flavor] ... }` with every hooked row.
///
/// The single source of the hook list: [`HookId`], [`HOOKS`] and the registry of hook functions in
/// `crate::hooks` are all generated from it, so they cannot drift apart.
macro_rules! for_each_hook {
    ($callback:ident) => {
        $callback! {
            // ---- launch: kernels, cooperative kernels, host functions
            [Launch launch cuLaunchKernel "cuLaunchKernel" 4000 Legacy]
            [Launch launch cuLaunchKernel_ptsz "cuLaunchKernel" 7000 Ptsz]
            [Launch launch cuLaunchKernelEx "cuLaunchKernelEx" 11060 Legacy]
            [Launch launch cuLaunchKernelEx_ptsz "cuLaunchKernelEx" 11060 Ptsz]
            [Launch launch cuLaunchCooperativeKernel "cuLaunchCooperativeKernel" 9000 Legacy]
            [Launch launch cuLaunchCooperativeKernel_ptsz "cuLaunchCooperativeKernel" 9000 Ptsz]
            [Launch launch cuLaunchHostFunc "cuLaunchHostFunc" 10000 Legacy]
            [Launch launch cuLaunchHostFunc_ptsz "cuLaunchHostFunc" 10000 Ptsz]
            // ---- stream: lifetime, queries, sync, ordering, callbacks, capture
            [Stream stream cuStreamCreate "cuStreamCreate" 2000 Legacy]
            [Stream stream cuStreamCreateWithPriority "cuStreamCreateWithPriority" 5050 Legacy]
            [Stream stream cuStreamDestroy "cuStreamDestroy" 2000 Legacy]
            [Stream stream cuStreamDestroy_v2 "cuStreamDestroy" 4000 Legacy]
            [Stream stream cuStreamQuery "cuStreamQuery" 2000 Legacy]
            [Stream stream cuStreamQuery_ptsz "cuStreamQuery" 7000 Ptsz]
            [Stream stream cuStreamSynchronize "cuStreamSynchronize" 2000 Legacy]
            [Stream stream cuStreamSynchronize_ptsz "cuStreamSynchronize" 7000 Ptsz]
            [Stream stream cuStreamWaitEvent "cuStreamWaitEvent" 3020 Legacy]
            [Stream stream cuStreamWaitEvent_ptsz "cuStreamWaitEvent" 7000 Ptsz]
            [Stream stream cuStreamGetPriority "cuStreamGetPriority" 5050 Legacy]
            [Stream stream cuStreamGetPriority_ptsz "cuStreamGetPriority" 7000 Ptsz]
            [Stream stream cuStreamGetFlags "cuStreamGetFlags" 5050 Legacy]
            [Stream stream cuStreamGetFlags_ptsz "cuStreamGetFlags" 7000 Ptsz]
            [Stream stream cuStreamAddCallback "cuStreamAddCallback" 5000 Legacy]
            [Stream stream cuStreamAddCallback_ptsz "cuStreamAddCallback" 7000 Ptsz]
            [Stream stream cuStreamBeginCapture "cuStreamBeginCapture" 10000 Legacy]
            [Stream stream cuStreamBeginCapture_ptsz "cuStreamBeginCapture" 10000 Ptsz]
            [Stream stream cuStreamBeginCapture_v2 "cuStreamBeginCapture" 10010 Legacy]
            [Stream stream cuStreamBeginCapture_v2_ptsz "cuStreamBeginCapture" 10010 Ptsz]
            [Stream stream cuStreamBeginCaptureToGraph "cuStreamBeginCaptureToGraph" 12030 Legacy]
            [Stream stream cuStreamBeginCaptureToGraph_ptsz "cuStreamBeginCaptureToGraph" 12030 Ptsz]
            [Stream stream cuStreamEndCapture "cuStreamEndCapture" 10000 Legacy]
            [Stream stream cuStreamEndCapture_ptsz "cuStreamEndCapture" 10000 Ptsz]
            [Stream stream cuStreamIsCapturing "cuStreamIsCapturing" 10000 Legacy]
            [Stream stream cuStreamIsCapturing_ptsz "cuStreamIsCapturing" 10000 Ptsz]
            [Stream stream cuStreamGetCaptureInfo "cuStreamGetCaptureInfo" 10010 Legacy]
            [Stream stream cuStreamGetCaptureInfo_ptsz "cuStreamGetCaptureInfo" 10010 Ptsz]
            [Stream stream cuStreamGetCaptureInfo_v2 "cuStreamGetCaptureInfo" 11030 Legacy]
            [Stream stream cuStreamGetCaptureInfo_v2_ptsz "cuStreamGetCaptureInfo" 11030 Ptsz]
            [Stream stream cuStreamGetCaptureInfo_v3 "cuStreamGetCaptureInfo" 12030 Legacy]
            [Stream stream cuStreamGetCaptureInfo_v3_ptsz "cuStreamGetCaptureInfo" 12030 Ptsz]
            // ---- event
            [Event event cuEventCreate "cuEventCreate" 2000 Legacy]
            [Event event cuEventRecord "cuEventRecord" 2000 Legacy]
            [Event event cuEventRecord_ptsz "cuEventRecord" 7000 Ptsz]
            [Event event cuEventRecordWithFlags "cuEventRecordWithFlags" 11010 Legacy]
            [Event event cuEventRecordWithFlags_ptsz "cuEventRecordWithFlags" 11010 Ptsz]
            [Event event cuEventQuery "cuEventQuery" 2000 Legacy]
            [Event event cuEventSynchronize "cuEventSynchronize" 2000 Legacy]
            [Event event cuEventElapsedTime "cuEventElapsedTime" 2000 Legacy]
            [Event event cuEventElapsedTime_v2 "cuEventElapsedTime" 12080 Legacy]
            [Event event cuEventDestroy "cuEventDestroy" 2000 Legacy]
            [Event event cuEventDestroy_v2 "cuEventDestroy" 4000 Legacy]
            // ---- memory: asynchronous copies
            [Memory memory cuMemcpyAsync "cuMemcpyAsync" 4000 Legacy]
            [Memory memory cuMemcpyAsync_ptsz "cuMemcpyAsync" 7000 Ptsz]
            [Memory memory cuMemcpyHtoDAsync_v2 "cuMemcpyHtoDAsync" 3020 Legacy]
            [Memory memory cuMemcpyHtoDAsync_v2_ptsz "cuMemcpyHtoDAsync" 7000 Ptsz]
            [Memory memory cuMemcpyDtoHAsync_v2 "cuMemcpyDtoHAsync" 3020 Legacy]
            [Memory memory cuMemcpyDtoHAsync_v2_ptsz "cuMemcpyDtoHAsync" 7000 Ptsz]
            [Memory memory cuMemcpyDtoDAsync_v2 "cuMemcpyDtoDAsync" 3020 Legacy]
            [Memory memory cuMemcpyDtoDAsync_v2_ptsz "cuMemcpyDtoDAsync" 7000 Ptsz]
            [Memory memory cuMemcpy2DAsync_v2 "cuMemcpy2DAsync" 3020 Legacy]
            [Memory memory cuMemcpy2DAsync_v2_ptsz "cuMemcpy2DAsync" 7000 Ptsz]
            [Memory memory cuMemcpy3DAsync_v2 "cuMemcpy3DAsync" 3020 Legacy]
            [Memory memory cuMemcpy3DAsync_v2_ptsz "cuMemcpy3DAsync" 7000 Ptsz]
            [Memory memory cuMemcpyPeerAsync "cuMemcpyPeerAsync" 4000 Legacy]
            [Memory memory cuMemcpyPeerAsync_ptsz "cuMemcpyPeerAsync" 7000 Ptsz]
            [Memory memory cuMemcpy3DPeerAsync "cuMemcpy3DPeerAsync" 4000 Legacy]
            [Memory memory cuMemcpy3DPeerAsync_ptsz "cuMemcpy3DPeerAsync" 7000 Ptsz]
            [Memory memory cuMemcpyHtoAAsync_v2 "cuMemcpyHtoAAsync" 3020 Legacy]
            [Memory memory cuMemcpyHtoAAsync_v2_ptsz "cuMemcpyHtoAAsync" 7000 Ptsz]
            [Memory memory cuMemcpyAtoHAsync_v2 "cuMemcpyAtoHAsync" 3020 Legacy]
            [Memory memory cuMemcpyAtoHAsync_v2_ptsz "cuMemcpyAtoHAsync" 7000 Ptsz]
            // ---- memory: synchronous copies
            [Memory memory cuMemcpy "cuMemcpy" 4000 Legacy]
            [Memory memory cuMemcpy_ptds "cuMemcpy" 7000 Ptds]
            [Memory memory cuMemcpyHtoD_v2 "cuMemcpyHtoD" 3020 Legacy]
            [Memory memory cuMemcpyHtoD_v2_ptds "cuMemcpyHtoD" 7000 Ptds]
            [Memory memory cuMemcpyDtoH_v2 "cuMemcpyDtoH" 3020 Legacy]
            [Memory memory cuMemcpyDtoH_v2_ptds "cuMemcpyDtoH" 7000 Ptds]
            [Memory memory cuMemcpyDtoD_v2 "cuMemcpyDtoD" 3020 Legacy]
            [Memory memory cuMemcpyDtoD_v2_ptds "cuMemcpyDtoD" 7000 Ptds]
            [Memory memory cuMemcpy2D_v2 "cuMemcpy2D" 3020 Legacy]
            [Memory memory cuMemcpy2D_v2_ptds "cuMemcpy2D" 7000 Ptds]
            [Memory memory cuMemcpy2DUnaligned_v2 "cuMemcpy2DUnaligned" 3020 Legacy]
            [Memory memory cuMemcpy2DUnaligned_v2_ptds "cuMemcpy2DUnaligned" 7000 Ptds]
            [Memory memory cuMemcpy3D_v2 "cuMemcpy3D" 3020 Legacy]
            [Memory memory cuMemcpy3D_v2_ptds "cuMemcpy3D" 7000 Ptds]
            [Memory memory cuMemcpyPeer "cuMemcpyPeer" 4000 Legacy]
            [Memory memory cuMemcpyPeer_ptds "cuMemcpyPeer" 7000 Ptds]
            [Memory memory cuMemcpy3DPeer "cuMemcpy3DPeer" 4000 Legacy]
            [Memory memory cuMemcpy3DPeer_ptds "cuMemcpy3DPeer" 7000 Ptds]
            [Memory memory cuMemcpyHtoA_v2 "cuMemcpyHtoA" 3020 Legacy]
            [Memory memory cuMemcpyHtoA_v2_ptds "cuMemcpyHtoA" 7000 Ptds]
            [Memory memory cuMemcpyAtoH_v2 "cuMemcpyAtoH" 3020 Legacy]
            [Memory memory cuMemcpyAtoH_v2_ptds "cuMemcpyAtoH" 7000 Ptds]
            [Memory memory cuMemcpyAtoD_v2 "cuMemcpyAtoD" 3020 Legacy]
            [Memory memory cuMemcpyAtoD_v2_ptds "cuMemcpyAtoD" 7000 Ptds]
            [Memory memory cuMemcpyDtoA_v2 "cuMemcpyDtoA" 3020 Legacy]
            [Memory memory cuMemcpyDtoA_v2_ptds "cuMemcpyDtoA" 7000 Ptds]
            [Memory memory cuMemcpyAtoA_v2 "cuMemcpyAtoA" 3020 Legacy]
            [Memory memory cuMemcpyAtoA_v2_ptds "cuMemcpyAtoA" 7000 Ptds]
            // ---- memory: fills
            [Memory memory cuMemsetD8_v2 "cuMemsetD8" 3020 Legacy]
            [Memory memory cuMemsetD8_v2_ptds "cuMemsetD8" 7000 Ptds]
            [Memory memory cuMemsetD16_v2 "cuMemsetD16" 3020 Legacy]
            [Memory memory cuMemsetD16_v2_ptds "cuMemsetD16" 7000 Ptds]
            [Memory memory cuMemsetD32_v2 "cuMemsetD32" 3020 Legacy]
            [Memory memory cuMemsetD32_v2_ptds "cuMemsetD32" 7000 Ptds]
            [Memory memory cuMemsetD2D8_v2 "cuMemsetD2D8" 3020 Legacy]
            [Memory memory cuMemsetD2D8_v2_ptds "cuMemsetD2D8" 7000 Ptds]
            [Memory memory cuMemsetD2D16_v2 "cuMemsetD2D16" 3020 Legacy]
            [Memory memory cuMemsetD2D16_v2_ptds "cuMemsetD2D16" 7000 Ptds]
            [Memory memory cuMemsetD2D32_v2 "cuMemsetD2D32" 3020 Legacy]
            [Memory memory cuMemsetD2D32_v2_ptds "cuMemsetD2D32" 7000 Ptds]
            [Memory memory cuMemsetD8Async "cuMemsetD8Async" 3020 Legacy]
            [Memory memory cuMemsetD8Async_ptsz "cuMemsetD8Async" 7000 Ptsz]
            [Memory memory cuMemsetD16Async "cuMemsetD16Async" 3020 Legacy]
            [Memory memory cuMemsetD16Async_ptsz "cuMemsetD16Async" 7000 Ptsz]
            [Memory memory cuMemsetD32Async "cuMemsetD32Async" 3020 Legacy]
            [Memory memory cuMemsetD32Async_ptsz "cuMemsetD32Async" 7000 Ptsz]
            [Memory memory cuMemsetD2D8Async "cuMemsetD2D8Async" 3020 Legacy]
            [Memory memory cuMemsetD2D8Async_ptsz "cuMemsetD2D8Async" 7000 Ptsz]
            [Memory memory cuMemsetD2D16Async "cuMemsetD2D16Async" 3020 Legacy]
            [Memory memory cuMemsetD2D16Async_ptsz "cuMemsetD2D16Async" 7000 Ptsz]
            [Memory memory cuMemsetD2D32Async "cuMemsetD2D32Async" 3020 Legacy]
            [Memory memory cuMemsetD2D32Async_ptsz "cuMemsetD2D32Async" 7000 Ptsz]
            // ---- memory: frees
            [Memory memory cuMemFree_v2 "cuMemFree" 3020 Legacy]
            [Memory memory cuMemFreeHost "cuMemFreeHost" 2000 Legacy]
            [Memory memory cuMemFreeAsync "cuMemFreeAsync" 11020 Legacy]
            [Memory memory cuMemFreeAsync_ptsz "cuMemFreeAsync" 11020 Ptsz]
            // ---- graph
            [Graph graph cuGraphLaunch "cuGraphLaunch" 10000 Legacy]
            [Graph graph cuGraphLaunch_ptsz "cuGraphLaunch" 10000 Ptsz]
            [Graph graph cuGraphUpload "cuGraphUpload" 11010 Legacy]
            [Graph graph cuGraphUpload_ptsz "cuGraphUpload" 11010 Ptsz]
            // ---- graph: calls that change or destroy an executable graph (they wait for the
            // submission of its deferred launches in bind mode)
            [Graph graph cuGraphExecDestroy "cuGraphExecDestroy" 10000 Legacy]
            [Graph graph cuGraphExecUpdate "cuGraphExecUpdate" 10020 Legacy]
            [Graph graph cuGraphExecUpdate_v2 "cuGraphExecUpdate" 12000 Legacy]
            [Graph graph cuGraphExecKernelNodeSetParams "cuGraphExecKernelNodeSetParams" 10010 Legacy]
            [Graph graph cuGraphExecKernelNodeSetParams_v2 "cuGraphExecKernelNodeSetParams" 12000 Legacy]
            [Graph graph cuGraphExecMemcpyNodeSetParams "cuGraphExecMemcpyNodeSetParams" 10020 Legacy]
            [Graph graph cuGraphExecMemsetNodeSetParams "cuGraphExecMemsetNodeSetParams" 10020 Legacy]
            [Graph graph cuGraphExecHostNodeSetParams "cuGraphExecHostNodeSetParams" 10020 Legacy]
            [Graph graph cuGraphExecChildGraphNodeSetParams "cuGraphExecChildGraphNodeSetParams" 11010 Legacy]
            [Graph graph cuGraphExecEventRecordNodeSetEvent "cuGraphExecEventRecordNodeSetEvent" 11010 Legacy]
            [Graph graph cuGraphExecEventWaitNodeSetEvent "cuGraphExecEventWaitNodeSetEvent" 11010 Legacy]
            [Graph graph cuGraphExecExternalSemaphoresSignalNodeSetParams "cuGraphExecExternalSemaphoresSignalNodeSetParams" 11020 Legacy]
            [Graph graph cuGraphExecExternalSemaphoresWaitNodeSetParams "cuGraphExecExternalSemaphoresWaitNodeSetParams" 11020 Legacy]
            [Graph graph cuGraphExecBatchMemOpNodeSetParams "cuGraphExecBatchMemOpNodeSetParams" 11070 Legacy]
            [Graph graph cuGraphExecNodeSetParams "cuGraphExecNodeSetParams" 12020 Legacy]
            [Graph graph cuGraphNodeSetEnabled "cuGraphNodeSetEnabled" 11060 Legacy]
            // ---- ctx
            [Ctx ctx cuCtxSynchronize "cuCtxSynchronize" 2000 Legacy]
            [Ctx ctx cuCtxSynchronize_v2 "cuCtxSynchronize" 13000 Legacy]
            // ---- entry points (answered with the wrapper itself, incl. the self-lookup)
            [Entry entry cuGetProcAddress "cuGetProcAddress" 11030 Legacy]
            [Entry entry cuGetProcAddress_v2 "cuGetProcAddress" 12000 Legacy]
        }
    };
}
pub(crate) use for_each_hook;

macro_rules! define_table {
    ($([$fam:ident $module:ident $sym:ident $base:literal $abi:literal $flavor:ident])*) => {
        /// One hooked driver symbol; its discriminant indexes [`HOOKS`] and the counters.
        #[allow(non_camel_case_types, missing_docs)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum HookId {
            $($sym),*
        }

        /// Number of hooked symbols.
        pub const HOOK_COUNT: usize = [$(HookId::$sym),*].len();

        /// Every hooked symbol, indexed by [`HookId`].
        pub static HOOKS: [SymbolSpec; HOOK_COUNT] = [
            $(SymbolSpec {
                id: HookId::$sym,
                symbol: stringify!($sym),
                base: $base,
                abi: $abi,
                flavor: Flavor::$flavor,
                family: Family::$fam,
            }),*
        ];
    };
}
for_each_hook!(define_table);

impl HookId {
    /// This hook's row.
    pub fn spec(self) -> &'static SymbolSpec {
        &HOOKS[self as usize]
    }

    /// Index into per-hook arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

macro_rules! known {
    ($($symbol:literal $base:literal $abi:literal $flavor:ident;)*) => {
        &[$(KnownAbi { symbol: $symbol, base: $base, abi: $abi, flavor: Flavor::$flavor }),*]
    };
}

/// Older ABIs of hooked bases that vitamin does not hook: the 32-bit-pointer (`CUdeviceptr_v1`,
/// `unsigned int` size) variants of CUDA 2.x/3.0. A `cuGetProcAddress` request old enough to
/// select one of these gets the real pointer back untouched.
pub static KNOWN_UNHOOKED: &[KnownAbi] = known! {
    "cuMemcpyHtoDAsync" "cuMemcpyHtoDAsync" 2000 Legacy;
    "cuMemcpyDtoHAsync" "cuMemcpyDtoHAsync" 2000 Legacy;
    "cuMemcpyDtoDAsync" "cuMemcpyDtoDAsync" 3000 Legacy;
    "cuMemcpy2DAsync" "cuMemcpy2DAsync" 2000 Legacy;
    "cuMemcpy3DAsync" "cuMemcpy3DAsync" 2000 Legacy;
    "cuMemcpyHtoAAsync" "cuMemcpyHtoAAsync" 2000 Legacy;
    "cuMemcpyAtoHAsync" "cuMemcpyAtoHAsync" 2000 Legacy;
    "cuMemcpyHtoD" "cuMemcpyHtoD" 2000 Legacy;
    "cuMemcpyDtoH" "cuMemcpyDtoH" 2000 Legacy;
    "cuMemcpyDtoD" "cuMemcpyDtoD" 2000 Legacy;
    "cuMemcpy2D" "cuMemcpy2D" 2000 Legacy;
    "cuMemcpy2DUnaligned" "cuMemcpy2DUnaligned" 2000 Legacy;
    "cuMemcpy3D" "cuMemcpy3D" 2000 Legacy;
    "cuMemcpyHtoA" "cuMemcpyHtoA" 2000 Legacy;
    "cuMemcpyAtoH" "cuMemcpyAtoH" 2000 Legacy;
    "cuMemcpyAtoD" "cuMemcpyAtoD" 2000 Legacy;
    "cuMemcpyDtoA" "cuMemcpyDtoA" 2000 Legacy;
    "cuMemcpyAtoA" "cuMemcpyAtoA" 2000 Legacy;
    "cuMemsetD8" "cuMemsetD8" 2000 Legacy;
    "cuMemsetD16" "cuMemsetD16" 2000 Legacy;
    "cuMemsetD32" "cuMemsetD32" 2000 Legacy;
    "cuMemsetD2D8" "cuMemsetD2D8" 2000 Legacy;
    "cuMemsetD2D16" "cuMemsetD2D16" 2000 Legacy;
    "cuMemsetD2D32" "cuMemsetD2D32" 2000 Legacy;
    "cuMemFree" "cuMemFree" 2000 Legacy;
};

/// Whether `name` looks like a driver API symbol: `cu` followed by an upper-case letter.
///
/// `cudaMalloc`, `cudnnCreate`, `cublasSgemm`, `cufftPlan1d` are not (third byte lower case), so
/// the `dlsym` hook never considers runtime or library symbols.
pub fn is_driver_name(name: &[u8]) -> bool {
    name.len() > 2 && name[0] == b'c' && name[1] == b'u' && name[2].is_ascii_uppercase()
}

/// The hook for an exported symbol name (the `dlsym` and direct-link routes).
pub fn by_symbol(symbol: &[u8]) -> Option<HookId> {
    if !is_driver_name(symbol) {
        return None;
    }
    HOOKS.iter().find(|s| s.symbol.as_bytes() == symbol).map(|s| s.id)
}

/// One ABI of a base name, hooked or not.
#[derive(Debug, Clone, Copy)]
struct Abi {
    abi: u32,
    flavor: Flavor,
    hook: Option<HookId>,
}

fn abis_of(base: &[u8]) -> impl Iterator<Item = Abi> + '_ {
    let hooked = HOOKS.iter().filter(move |s| s.base.as_bytes() == base).map(|s| Abi {
        abi: s.abi,
        flavor: s.flavor,
        hook: Some(s.id),
    });
    let unhooked = KNOWN_UNHOOKED.iter().filter(move |k| k.base.as_bytes() == base).map(|k| Abi {
        abi: k.abi,
        flavor: k.flavor,
        hook: None,
    });
    hooked.chain(unhooked)
}

/// The hook for a `cuGetProcAddress(base, &p, version, flags)` request, if the ABI the driver
/// returns for it is one vitamin hooks.
///
/// The driver's rule (cuda.h, `cuGetProcAddress`): the newest ABI of `base` introduced at or before
/// `version`; with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` the newest per-thread variant,
/// falling back to the legacy one when the base has none. `CU_GET_PROC_ADDRESS_DEFAULT` (0) is
/// treated as legacy. Legacy and per-thread variants share one signature, so a wrong guess between
/// them would only mislabel a counter; the version decides the signature and is exact.
///
/// Returns `None` (pass the real pointer through) for unknown bases, versions older than every
/// ABI, flags other than 0/1/2, and the ambiguous case of a per-thread variant older than the
/// newest legacy ABI at that version.
pub fn for_proc_address(base: &[u8], version: i32, flags: u64) -> Option<HookId> {
    let per_thread = match flags {
        0 | CU_GET_PROC_ADDRESS_LEGACY_STREAM => false,
        CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM => true,
        _ => return None,
    };
    if !is_driver_name(base) || version < 0 {
        return None;
    }
    let version = version as u32;
    let newest =
        |pt: bool| abis_of(base).filter(|a| a.abi <= version && a.flavor.is_per_thread() == pt).max_by_key(|a| a.abi);
    let legacy = newest(false);
    let chosen = if per_thread {
        match (newest(true), legacy) {
            (Some(pt), Some(l)) if l.abi > pt.abi => return None,
            (Some(pt), _) => Some(pt),
            (None, l) => l,
        }
    } else {
        legacy
    };
    chosen.and_then(|a| a.hook)
}

use crate::ffi::{CU_GET_PROC_ADDRESS_LEGACY_STREAM, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn ids_index_the_table() {
        assert_eq!(HOOKS.len(), HOOK_COUNT);
        for (i, s) in HOOKS.iter().enumerate() {
            assert_eq!(s.id as usize, i, "{} is out of place", s.symbol);
            assert_eq!(s.id.spec().symbol, s.symbol);
        }
    }

    #[test]
    fn symbols_and_abis_are_unique() {
        let mut symbols = HashSet::new();
        let mut abis = HashSet::new();
        for (symbol, base, abi, flavor) in HOOKS
            .iter()
            .map(|s| (s.symbol, s.base, s.abi, s.flavor))
            .chain(KNOWN_UNHOOKED.iter().map(|k| (k.symbol, k.base, k.abi, k.flavor)))
        {
            assert!(symbols.insert(symbol), "duplicate symbol {symbol}");
            assert!(abis.insert((base, abi, flavor)), "duplicate ABI {base} {abi} {flavor:?}");
        }
    }

    #[test]
    fn symbol_names_follow_the_cuda_h_convention() {
        for s in &HOOKS {
            assert!(s.symbol.starts_with(s.base), "{} does not start with {}", s.symbol, s.base);
            let rest = &s.symbol[s.base.len()..];
            let (version_part, suffix) = match s.flavor {
                Flavor::Legacy => (rest, ""),
                Flavor::Ptds => (rest.strip_suffix("_ptds").expect("ptds suffix"), "_ptds"),
                Flavor::Ptsz => (rest.strip_suffix("_ptsz").expect("ptsz suffix"), "_ptsz"),
            };
            assert!(
                version_part.is_empty() || (version_part.starts_with("_v") && version_part[2..].parse::<u8>().is_ok()),
                "{}: unexpected version part {version_part:?}{suffix}",
                s.symbol
            );
            assert!(is_driver_name(s.symbol.as_bytes()));
        }
    }

    #[test]
    fn every_required_api_is_hooked() {
        let bases: HashSet<&str> = HOOKS.iter().map(|s| s.base).collect();
        for required in [
            "cuLaunchKernel",
            "cuLaunchKernelEx",
            "cuLaunchCooperativeKernel",
            "cuStreamCreate",
            "cuStreamCreateWithPriority",
            "cuStreamDestroy",
            "cuStreamQuery",
            "cuStreamSynchronize",
            "cuStreamWaitEvent",
            "cuStreamGetPriority",
            "cuStreamGetFlags",
            "cuEventCreate",
            "cuEventRecord",
            "cuEventRecordWithFlags",
            "cuEventQuery",
            "cuEventSynchronize",
            "cuEventElapsedTime",
            "cuEventDestroy",
            "cuMemcpyAsync",
            "cuMemcpyHtoDAsync",
            "cuMemcpyDtoHAsync",
            "cuMemcpyDtoDAsync",
            "cuMemcpy",
            "cuMemcpyHtoD",
            "cuMemcpyDtoH",
            "cuMemsetD8Async",
            "cuMemsetD32",
            "cuLaunchHostFunc",
            "cuStreamAddCallback",
            "cuCtxSynchronize",
            "cuStreamBeginCapture",
            "cuStreamEndCapture",
            "cuStreamIsCapturing",
            "cuGraphLaunch",
            "cuGraphUpload",
            "cuGraphExecDestroy",
            "cuGraphExecUpdate",
            "cuGraphExecKernelNodeSetParams",
            "cuMemFree",
            "cuMemFreeAsync",
            "cuGetProcAddress",
        ] {
            assert!(bases.contains(required), "{required} is not hooked");
        }
        // Passed through untouched by design.
        assert!(by_symbol(b"cuGetExportTable").is_none());
        assert!(for_proc_address(b"cuGetExportTable", 13000, 0).is_none());
    }

    #[test]
    fn driver_name_filter() {
        for yes in ["cuLaunchKernel", "cuInit", "cuGetProcAddress_v2", "cuD"] {
            assert!(is_driver_name(yes.as_bytes()), "{yes}");
        }
        for no in ["cudaMalloc", "cudnnCreate", "cublasSgemm", "cufftPlan1d", "cu", "cu_", "Cu", "", "printf", "cuda"] {
            assert!(!is_driver_name(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn measured_requests_resolve() {
        // The requests FACTS.md recorded under PyTorch 2.11 (static cudart bootstrapping).
        let id = |b: &str, v, f| for_proc_address(b.as_bytes(), v, f).map(|id| id.spec().symbol);
        assert_eq!(id("cuLaunchKernel", 4000, 0), Some("cuLaunchKernel"));
        assert_eq!(id("cuLaunchKernel", 7000, 2), Some("cuLaunchKernel_ptsz"));
        assert_eq!(id("cuLaunchKernel", 13000, 1), Some("cuLaunchKernel"));
        assert_eq!(id("cuCtxSynchronize", 2000, 0), Some("cuCtxSynchronize"));
        assert_eq!(id("cuCtxSynchronize", 13000, 0), Some("cuCtxSynchronize_v2"));
        assert_eq!(id("cuCtxSynchronize", 12090, 2), Some("cuCtxSynchronize"));
        assert_eq!(id("cuGetProcAddress", 12000, 0), Some("cuGetProcAddress_v2"));
        assert_eq!(id("cuGetProcAddress", 11030, 0), Some("cuGetProcAddress"));
        assert_eq!(id("cuGetProcAddress", 11020, 0), None);
        assert_eq!(id("cuMemcpyHtoD", 13000, 2), Some("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(id("cuMemcpyHtoD", 3020, 2), Some("cuMemcpyHtoD_v2"));
        assert_eq!(id("cuMemcpyHtoD", 3010, 0), None, "the 32-bit ABI is not hooked");
        assert_eq!(id("cuStreamGetCaptureInfo", 11080, 2), Some("cuStreamGetCaptureInfo_v2_ptsz"));
        assert_eq!(id("cuStreamBeginCapture", 10000, 0), Some("cuStreamBeginCapture"));
        assert_eq!(id("cuLaunchKernel", 13000, 3), None, "unknown flag combination");
        assert_eq!(id("cuLaunchKernel", -1, 0), None);
        assert_eq!(id("cuLaunchKernel", 3999, 0), None);
    }

    /// Reference model: the ABIs of a base as plain tuples, chosen by sorting.
    fn model(base: &str, version: i32, flags: u64) -> Option<&'static str> {
        if !matches!(flags, 0..=2) || version < 0 {
            return None;
        }
        let mut all: Vec<(u32, bool, Option<&'static str>)> = HOOKS
            .iter()
            .filter(|s| s.base == base)
            .map(|s| (s.abi, s.flavor.is_per_thread(), Some(s.symbol)))
            .chain(KNOWN_UNHOOKED.iter().filter(|k| k.base == base).map(|k| (k.abi, false, None)))
            .filter(|a| a.0 as i64 <= version as i64)
            .collect();
        all.sort();
        let last_legacy = all.iter().rev().find(|a| !a.1).copied();
        let last_pt = all.iter().rev().find(|a| a.1).copied();
        let pick = if flags == 2 {
            match (last_pt, last_legacy) {
                (Some(p), Some(l)) if l.0 > p.0 => return None,
                (Some(p), _) => Some(p),
                (None, l) => l,
            }
        } else {
            last_legacy
        };
        pick.and_then(|a| a.2)
    }

    fn any_base() -> impl Strategy<Value = String> {
        let known: Vec<String> = HOOKS.iter().map(|s| s.base.to_string()).collect();
        prop_oneof![
            4 => proptest::sample::select(known),
            1 => "cu[A-Z][a-zA-Z]{0,12}",
            1 => "[a-z]{0,6}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn proc_address_matches_model(base in any_base(), version in -100i32..14000, flags in 0u64..5) {
            let got = for_proc_address(base.as_bytes(), version, flags).map(|id| id.spec().symbol);
            prop_assert_eq!(got, model(&base, version, flags));
        }

        #[test]
        fn proc_address_result_is_consistent(base in any_base(), version in 0i32..14000, flags in 0u64..3) {
            if let Some(id) = for_proc_address(base.as_bytes(), version, flags) {
                let s = id.spec();
                prop_assert_eq!(s.base, base.as_str());
                prop_assert!(s.abi as i32 <= version);
                // Nothing of the same flavor class is newer and still allowed.
                let newer = abis_of(base.as_bytes())
                    .any(|a| a.flavor.is_per_thread() == s.flavor.is_per_thread() && a.abi > s.abi && a.abi as i32 <= version);
                prop_assert!(!newer);
                if flags != 2 {
                    prop_assert!(!s.flavor.is_per_thread());
                }
            }
        }

        #[test]
        fn by_symbol_only_finds_rows(name in "cu[A-Z][a-zA-Z0-9_]{0,24}") {
            match by_symbol(name.as_bytes()) {
                Some(id) => prop_assert_eq!(id.spec().symbol, name.as_str()),
                None => prop_assert!(HOOKS.iter().all(|s| s.symbol != name)),
            }
        }
    }

    #[test]
    fn every_row_is_found_by_its_own_symbol_and_version() {
        for s in &HOOKS {
            assert_eq!(by_symbol(s.symbol.as_bytes()), Some(s.id));
            let flags = if s.flavor.is_per_thread() { 2 } else { 0 };
            assert_eq!(for_proc_address(s.base.as_bytes(), s.abi as i32, flags), Some(s.id), "{}", s.symbol);
        }
    }

    /// Every lookup the static cudart of CUDA 13.0 makes while bootstrapping (recorded through
    /// the fake driver) resolves: hooked bases land on the row introduced at exactly the
    /// requested version, with the per-thread flavor iff flag 2; other names pass through.
    #[test]
    fn cudart13_bootstrap_requests_resolve_exactly() {
        let text = include_str!("../tests/data/cudart13_proc_requests.txt");
        let (mut hooked, mut passed) = (0, 0);
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (name, version, flags) = (w[0], w[1].parse::<i32>().unwrap(), w[2].parse::<u64>().unwrap());
            match for_proc_address(name.as_bytes(), version, flags) {
                Some(id) => {
                    let s = id.spec();
                    assert_eq!((s.base, s.abi as i32), (name, version), "{line}");
                    assert_eq!(s.flavor.is_per_thread(), flags == 2, "{line}");
                    hooked += 1;
                }
                None => {
                    assert!(HOOKS.iter().all(|s| s.base != name), "{line}: a hooked base must resolve");
                    passed += 1;
                }
            }
        }
        assert!(hooked >= 90 && passed >= 300, "{hooked} hooked, {passed} passed through");
    }

    /// Checks the table against the real `cudaTypedefs.h` and `cuda.h` when they are available
    /// (`CUDA_INCLUDE_DIR`, else /usr/local/cuda/include). Skips, saying so, when they are not.
    #[test]
    fn header_cross_check() {
        let dir = std::env::var_os("CUDA_INCLUDE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| "/usr/local/cuda/include".into());
        let (Ok(typedefs), Ok(cuda_h)) =
            (std::fs::read_to_string(dir.join("cudaTypedefs.h")), std::fs::read_to_string(dir.join("cuda.h")))
        else {
            eprintln!(
                "SKIPPED header_cross_check: no cudaTypedefs.h/cuda.h in {} (set CUDA_INCLUDE_DIR)",
                dir.display()
            );
            return;
        };
        // Every PFN_<base>_v<abi>[_ptsz|_ptds] typedef.
        let mut pfns: HashSet<(String, u32, Flavor)> = HashSet::new();
        for tok in typedefs.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let Some(rest) = tok.strip_prefix("PFN_") else { continue };
            let (rest, flavor) = if let Some(r) = rest.strip_suffix("_ptsz") {
                (r, Flavor::Ptsz)
            } else if let Some(r) = rest.strip_suffix("_ptds") {
                (r, Flavor::Ptds)
            } else {
                (rest, Flavor::Legacy)
            };
            if let Some((base, v)) = rest.rsplit_once("_v") {
                if let Ok(v) = v.parse::<u32>() {
                    pfns.insert((base.to_string(), v, flavor));
                }
            }
        }
        let table: HashSet<(String, u32, Flavor)> = HOOKS
            .iter()
            .map(|s| (s.base.to_string(), s.abi, s.flavor))
            .chain(KNOWN_UNHOOKED.iter().map(|k| (k.base.to_string(), k.abi, k.flavor)))
            .collect();
        for row in &table {
            assert!(pfns.contains(row), "table row {row:?} has no PFN typedef");
        }
        let bases: HashSet<&str> = HOOKS.iter().map(|s| s.base).collect();
        for pfn in pfns.iter().filter(|p| bases.contains(p.0.as_str())) {
            assert!(table.contains(pfn), "PFN {pfn:?} of a hooked base is missing from the table");
        }
        // The newest symbol of each hooked base, from cuda.h's versioning macros.
        let mut macros = 0;
        for line in cuda_h.lines() {
            let mut words = line.split_whitespace();
            if words.next() != Some("#define") {
                continue;
            }
            let (Some(base), Some(target)) = (words.next(), words.next()) else { continue };
            if !bases.contains(base) {
                continue;
            }
            let (inner, suffix) = if let Some(t) = target.strip_prefix("__CUDA_API_PTDS(") {
                (t.trim_end_matches(')'), "_ptds")
            } else if let Some(t) = target.strip_prefix("__CUDA_API_PTSZ(") {
                (t.trim_end_matches(')'), "_ptsz")
            } else {
                (target, "")
            };
            if !inner.starts_with(base) {
                continue; // cuGraphInstantiate -> cuGraphInstantiateWithFlags and similar renames
            }
            macros += 1;
            let newest_legacy =
                HOOKS.iter().filter(|s| s.base == base && !s.flavor.is_per_thread()).max_by_key(|s| s.abi);
            assert_eq!(newest_legacy.map(|s| s.symbol), Some(inner), "cuda.h maps {base} to {inner}");
            if !suffix.is_empty() {
                let pt = format!("{inner}{suffix}");
                assert!(by_symbol(pt.as_bytes()).is_some(), "cuda.h has {pt}, the table does not");
            }
        }
        assert!(macros > 30, "only {macros} cuda.h versioning macros matched: parser out of date?");
        eprintln!(
            "header_cross_check: {} PFN typedefs, {} table rows, {macros} cuda.h macros checked",
            pfns.len(),
            table.len()
        );
    }
}
