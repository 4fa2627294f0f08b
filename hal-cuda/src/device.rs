//! [`CudaBackend`]: one device, its primary context, the one start-up split, memory and kernels.
//!
//! Invariants:
//! - The SM resource is split **once** (`cuDevSmResourceSplitByCount` with the device's minimum
//!   partition size) when the backend is created; leaf `i` of the topology is split group `i`, the
//!   remainder (if any) is the last leaf. Every partition's green context is generated from a subset
//!   of exactly these resources, as the driver requires for combining them.
//! - Leaves use **logical** SM indices: leaf `i` covers consecutive indices in split order (H200:
//!   leaf 0 = SM 0-7, ..., leaf 15 = SM 120-131). Which physical SMs (`%smid`) a leaf gets is the
//!   driver's choice; [`crate::census`] reads it.
//! - All memory is allocated in the primary context (kernels on green-context streams use it),
//!   and freed when the backend and all its partitions are gone.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use vitamin_hal::{
    check_union_of_leaves, Backend, Capabilities, FunctionKind, FunctionRef, HalError, Topology, TopologySpec, UnitSet,
};

use crate::driver::{
    self, ctx, event, library, mem, occupancy, resource, CUcontext, CUdevResource, CUdevice, CUevent, CUfunction,
    CUlibrary,
};
use crate::partition::CudaPartition;
use crate::probe::{probe_device, CudaCapabilities};
use crate::submit::Submitter;

/// State shared by the backend and its partitions (partitions keep it alive).
pub(crate) struct Shared {
    pub(crate) device: CUdevice,
    pub(crate) primary: CUcontext,
    pub(crate) caps: CudaCapabilities,
    /// Split outputs, indexed like the topology's leaves.
    pub(crate) leaves: Vec<CUdevResource>,
    /// Idle events for fences.
    events: Mutex<Vec<CUevent>>,
    /// Ops submitted and not yet reported complete, over all partitions.
    pub(crate) outstanding: AtomicU64,
    allocations: Mutex<HashMap<u64, usize>>,
    /// Functions whose launches hold only in the primary context (their raised dynamic shared
    /// memory limit could not be raised in a green context): bound to the primary-context node.
    pub(crate) context_bound: Mutex<std::collections::HashSet<u64>>,
    /// Blocks per SM by (function handle, threads per block, dynamic shared memory).
    occupancy: Mutex<HashMap<(u64, u32, u32), u32>>,
    libraries: Mutex<Vec<CUlibrary>>,
    kernels: OnceLock<Result<HashMap<&'static str, FunctionRef>, HalError>>,
    pub(crate) epoch: Instant,
    /// The submission thread, if started ([`CudaBackend::start_submit_thread`]).
    submitter: OnceLock<Submitter>,
    /// Host-mapped fence words for lanes (memory fences), `None` when lanes use events.
    fence_words: Option<Mutex<FenceWords>>,
    /// Least time between fence queries of a lane the submission thread still feeds, ns
    /// ([`CudaBackend::set_busy_query`]; [`crate::partition::BUSY_QUERY_NS`] by default).
    pub(crate) busy_query_ns: AtomicU64,
    /// Whether the whole-device node's lanes are primary-context streams ([`ROOT_CONTEXT_ENV`]).
    pub(crate) root_on_primary: bool,
    /// How lanes are fenced (memory and hybrid lanes have fence words, from `fence_words`).
    pub(crate) fence_mode: FenceMode,
    /// Hybrid lanes: a waiting thread's poll writes a memory fence whenever none covers the
    /// lane's newest op ([`WAITER_FENCE_ENV`]), not only when a fence is due.
    pub(crate) waiter_cover: bool,
    /// Whether a partition creates every lane's stream with the partition ([`LANE_STREAMS_ENV`]
    /// `start-up`), rather than lane 0's only and the others' at their first submission.
    pub(crate) lanes_at_start: bool,
}

/// Pinned, device-mapped host pages of 64-bit fence words, one per lane: a lane's fence is a
/// `cuStreamWriteValue64` of its newest sequence number to its word, and polling it is a load
/// from host memory, no driver call (FACTS.md: detection as fast as a native spinning wait,
/// measured on the H200). Pages are freed with the backend, after every partition.
pub(crate) struct FenceWords {
    pages: Vec<(*mut u8, driver::CUdeviceptr)>,
    /// Words handed out from the newest page.
    used: usize,
}

// SAFETY: the pages are pinned host memory owned by this table; the pointers are only
// dereferenced through `FenceWord::load` (atomic) and freed once, by `Shared::drop`.
unsafe impl Send for FenceWords {}

/// Fence words per page (4 KiB).
const FENCE_WORDS_PER_PAGE: usize = 512;

/// A lane's fence word: where polls read it and where the device writes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FenceWord {
    host: *const AtomicU64,
    pub(crate) device: driver::CUdeviceptr,
}

// SAFETY: the word is an atomic in pinned host memory, read only through `load`; whoever holds a
// `FenceWord` also holds the `Shared` that owns its page (a partition, or a `LaneProgress`).
unsafe impl Send for FenceWord {}
// SAFETY: as above; concurrent atomic loads are sound.
unsafe impl Sync for FenceWord {}

impl FenceWord {
    /// The newest sequence number the device wrote (Acquire: the work before it completed).
    pub(crate) fn load(&self) -> u64 {
        // SAFETY: the word lives in a page of `Shared::fence_words`, freed only when `Shared` (kept
        // alive by every partition holding this word) drops; AtomicU64 has u64's layout and the
        // page is 8-byte aligned.
        unsafe { (*self.host).load(Ordering::Acquire) }
    }
}

// SAFETY: the raw handles are driver objects usable from any thread; mutable state is behind
// mutexes or atomics.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("device", &self.device).field("leaves", &self.leaves.len()).finish()
    }
}

impl Shared {
    /// Makes the primary context current on this thread.
    pub(crate) fn make_current(&self) -> Result<(), HalError> {
        // SAFETY: the primary context is retained for as long as `self` lives.
        unsafe { ctx::ensure_current(self.primary) }
    }

    /// The submission thread, if started.
    pub(crate) fn submitter(&self) -> Option<&Submitter> {
        self.submitter.get()
    }

    /// Waits until the submission thread (if any) issued everything handed to it.
    pub(crate) fn flush_submissions(&self) {
        if let Some(s) = self.submitter.get() {
            s.flush();
        }
    }

    /// A fresh fence word for a lane (memory fences), `None` when lanes use events.
    pub(crate) fn fence_word(&self) -> Result<Option<FenceWord>, HalError> {
        let Some(words) = &self.fence_words else { return Ok(None) };
        let mut w = words.lock();
        if w.pages.is_empty() || w.used == FENCE_WORDS_PER_PAGE {
            self.make_current()?;
            let page = mem::host_alloc_mapped(FENCE_WORDS_PER_PAGE * 8)?;
            w.pages.push(page);
            w.used = 0;
        }
        let (host, device) = *w.pages.last().expect("a page was just ensured");
        let i = w.used;
        w.used += 1;
        // SAFETY: word `i` lies inside the page of FENCE_WORDS_PER_PAGE words.
        let host = unsafe { host.add(i * 8) }.cast::<AtomicU64>().cast_const();
        Ok(Some(FenceWord { host, device: device + (i * 8) as u64 }))
    }

    /// An idle event (created in the primary context when the pool is empty).
    pub(crate) fn take_event(&self) -> Result<CUevent, HalError> {
        if let Some(e) = self.events.lock().pop() {
            return Ok(e);
        }
        self.make_current()?;
        event::create()
    }

    /// Returns events whose recorded work completed.
    /// Null handles (memory fences' queue entries) are skipped.
    pub(crate) fn return_events(&self, events: impl IntoIterator<Item = CUevent>) {
        self.events.lock().extend(events.into_iter().filter(|e| !e.is_null()));
    }

    /// The `CUfunction` to ask occupancy questions about for a launch handle.
    pub(crate) fn occupancy_function(&self, f: &FunctionRef) -> Result<CUfunction, HalError> {
        match f.kind() {
            FunctionKind::Function => Ok(f.handle() as CUfunction),
            FunctionKind::Kernel => {
                self.make_current()?;
                // SAFETY: a `Kernel` handle is a live `CUkernel` (descriptors carry handles the
                // application or this backend loaded); the primary context is current.
                unsafe { library::function_of(f.handle() as driver::CUkernel) }
            }
            FunctionKind::Simulated => Err(HalError::InvalidPartition(format!(
                "{} is a simulated kernel: it cannot run on a CUDA device",
                f.name()
            ))),
        }
    }

    /// Blocks of `f` with this shape that one SM holds at once (cached).
    pub(crate) fn blocks_per_sm(&self, f: &FunctionRef, threads: u32, smem: u32) -> Result<u32, HalError> {
        let key = (f.handle(), threads, smem);
        if let Some(&n) = self.occupancy.lock().get(&key) {
            return Ok(n);
        }
        let func = self.occupancy_function(f)?;
        // SAFETY: `func` is a live function of the primary context.
        let n = unsafe { occupancy::blocks_per_sm(func, threads, smem) }?;
        self.occupancy.lock().insert(key, n);
        Ok(n)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The submission thread issues its last commands and stops while the context lives.
        drop(self.submitter.take());
        if self.make_current().is_err() {
            tracing::warn!("cuda backend teardown: could not make the primary context current");
        }
        for e in self.events.get_mut().drain(..) {
            // SAFETY: every pooled event is idle (its work completed) and used by nobody else.
            if let Err(err) = unsafe { event::destroy(e) } {
                tracing::warn!(%err, "cuda backend teardown: event");
            }
        }
        if let Some(words) = self.fence_words.take() {
            for (p, _) in words.into_inner().pages {
                // SAFETY: every partition (and so every lane writing these words) is gone and
                // drained; each page is freed once.
                if let Err(err) = unsafe { mem::free_host(p) } {
                    tracing::warn!(%err, "cuda backend teardown: fence words");
                }
            }
        }
        for (p, _) in self.allocations.get_mut().drain() {
            // SAFETY: allocations are freed once, after every partition (and its work) is gone.
            if let Err(err) = unsafe { mem::free(p) } {
                tracing::warn!(%err, "cuda backend teardown: memory");
            }
        }
        for lib in self.libraries.get_mut().drain(..) {
            // SAFETY: no partition remains, so no launch of these kernels is outstanding.
            if let Err(err) = unsafe { library::unload(lib) } {
                tracing::warn!(%err, "cuda backend teardown: library");
            }
        }
        // SAFETY: pairs with the retain in `CudaBackend::with_ordinal`.
        if let Err(err) = unsafe { ctx::release_primary(self.device) } {
            tracing::warn!(%err, "cuda backend teardown: primary context");
        }
    }
}

/// How lanes are fenced ([`FENCE_ENV`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMode {
    /// A 64-bit write to host-mapped memory, polled by a memory load (`VITAMIN_FENCE=memory`, on
    /// devices with 64-bit stream memory operations).
    Memory,
    /// An event, polled with `cuEventQuery` (`VITAMIN_FENCE=event`; also the default on devices
    /// without 64-bit stream memory operations).
    Event,
    /// Events, except the fences a thread waiting in a synchronize call records while it polls
    /// for itself ([`vitamin_hal::PhysicalPartition::poll_for_waiter`]): those are memory writes,
    /// seen by a load (`VITAMIN_FENCE=hybrid`, on devices with 64-bit stream memory operations).
    /// Such a fence usually follows the last op the waiter waits for, where a memory write
    /// costs the GPU nothing between kernels. The default (on devices with 64-bit stream memory
    /// operations): measured on the H200 (docs/results/shim-bind-overhead.md), the 8-kernel operator's synchronize call
    /// returned 0.8 us sooner after its last kernel than with events only.
    Hybrid,
}

/// Environment variable choosing the fence mode ([`FenceMode`]): `hybrid` (the default), `event`
/// or `memory`; without 64-bit stream memory operations lanes use events. Memory fences alone are
/// not the default (docs/results/shim-bind-overhead.md: a memory fence's write costs
/// 1-2.5 us of host time against 0.2-0.7 us for an event record, and widened the GPU gap between
/// dependent kernels by about 2 us against 1.3 us); hybrid lanes write memory only for a waiting
/// thread's fence, usually after the last kernel it waits for (same page).
pub const FENCE_ENV: &str = "VITAMIN_FENCE";

/// A backend setting from the process's configuration (the `VITAMIN_*` variable, else the
/// configuration file's `[advanced]` key: `vitamin_runtime::config`).
fn setting(var: &str) -> Option<String> {
    vitamin_runtime::config::process().get(var)
}

/// Environment variable choosing the context of the whole-device pool node: `primary` (the
/// default) gives that node's lanes streams of the primary context, `green` a green context over
/// every SM like the other nodes. Both run kernels on exactly the node's SMs (all of them); a
/// green context over every SM widened each gap between dependent kernels by about 0.15 us and
/// the 8-kernel operator's GPU span by 1.0 us on the H200 (`bench/gpu/shim/op_gaps.cu`,
/// docs/results/shim-bind-overhead.md).
pub const ROOT_CONTEXT_ENV: &str = "VITAMIN_ROOT_CONTEXT";

/// Whether the whole-device node uses the primary context ([`ROOT_CONTEXT_ENV`]).
fn root_on_primary_from_env() -> bool {
    !matches!(setting(ROOT_CONTEXT_ENV), Some(v) if v.trim().eq_ignore_ascii_case("green"))
}

/// Environment variable choosing when a thread waiting in a synchronize call records a memory
/// fence on a hybrid lane ([`FenceMode::Hybrid`]): `cover` (the default)
/// whenever no memory fence covers the lane's newest op, `due` only when the lane's fencing rule
/// makes a fence due at its poll. With `due`, a lane whose newest ops another thread's poll had
/// already fenced with an event gives the waiter no fence word to spin on: it then polls events
/// until they complete (seen on the H200 in 9 of 420 operators of a traced run: those
/// operators took 3-13 us longer than the median one). `cover` writes one more fence in that case
/// (a memory write behind the lane's newest op). Measured on the H200 (docs/results/shim-bind-overhead.md, 8 interleaved
/// rounds of `bench/gpu/shim/latency_check.sh`): the 8-kernel operator's p95 excess over native
/// +1.19% with `cover` against +2.10% with `due` (medians over rounds), about twice as many fast
/// waits.
pub const WAITER_FENCE_ENV: &str = "VITAMIN_WAITER_FENCE";

fn waiter_cover_from_env() -> bool {
    !matches!(setting(WAITER_FENCE_ENV), Some(v) if v.trim().eq_ignore_ascii_case("due"))
}

/// Setting choosing when a partition's lane streams are created (the `lane_streams` key):
/// `on-demand` (the default) creates lane 0's stream with the partition and every other lane's
/// at its first submission; `start-up` creates them all with the partition. A stream costs
/// device and host memory in every node of the pool, and most nodes of a process's pool never
/// run more than one lane at a time (docs/results/pool-cost.md).
pub const LANE_STREAMS_ENV: &str = "VITAMIN_LANE_STREAMS";

fn lanes_at_start_from_env() -> bool {
    matches!(setting(LANE_STREAMS_ENV), Some(v) if v.trim().eq_ignore_ascii_case("start-up"))
}

fn fence_mode_from_env() -> FenceMode {
    match setting(FENCE_ENV).ok_or(()) {
        Ok(v) if v.trim().eq_ignore_ascii_case("memory") => FenceMode::Memory,
        Ok(v) if v.trim().eq_ignore_ascii_case("event") => FenceMode::Event,
        _ => FenceMode::Hybrid,
    }
}

/// The NVIDIA backend: a device whose partitions are green contexts.
///
/// Cheap to clone (shared state). Creating one probes the driver, retains the primary context and
/// performs the one SM split; it never panics.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    shared: Arc<Shared>,
    topology: Arc<Topology>,
}

/// What realizing a set of pool nodes cost (see [`CudaBackend::realize`]).
#[derive(Debug, Clone, Serialize)]
pub struct RealizationStats {
    /// Partitions created.
    pub partitions: usize,
    /// Lanes per partition.
    pub lanes: usize,
    /// Wall time to create every green context and its streams, in milliseconds.
    pub create_ms: f64,
    /// Device memory the creation took (free memory before minus after), in MiB.
    pub memory_mib: f64,
    /// Device memory after one empty launch on every lane (lazy per-context state), in MiB.
    pub memory_after_first_launch_mib: Option<f64>,
}

impl CudaBackend {
    /// The device chosen by the configuration key `device` (default 0).
    pub fn new() -> Result<Self, HalError> {
        Self::with_ordinal(crate::probe::default_ordinal()?)
    }

    /// Device `ordinal`.
    pub fn with_ordinal(ordinal: i32) -> Result<Self, HalError> {
        let caps = probe_device(ordinal)?;
        let device = driver::device::get(ordinal)?;
        let primary = ctx::retain_primary(device)?;
        // From here on `Shared::drop` releases the primary context and frees what was created.
        let mut shared = Shared {
            device,
            primary,
            caps,
            leaves: Vec::new(),
            events: Mutex::new(Vec::new()),
            outstanding: AtomicU64::new(0),
            allocations: Mutex::new(HashMap::new()),
            context_bound: Mutex::new(Default::default()),
            occupancy: Mutex::new(HashMap::new()),
            libraries: Mutex::new(Vec::new()),
            kernels: OnceLock::new(),
            epoch: Instant::now(),
            submitter: OnceLock::new(),
            fence_words: None,
            busy_query_ns: AtomicU64::new(crate::partition::BUSY_QUERY_NS),
            root_on_primary: root_on_primary_from_env(),
            fence_mode: FenceMode::Event,
            waiter_cover: waiter_cover_from_env(),
            lanes_at_start: lanes_at_start_from_env(),
        };
        let mode = fence_mode_from_env();
        if shared.caps.stream_mem_ops && mode != FenceMode::Event {
            shared.fence_words = Some(Mutex::new(FenceWords { pages: Vec::new(), used: 0 }));
            shared.fence_mode = mode;
        }
        shared.make_current()?;
        let whole = driver::device::sm_resource(device)?;
        let (groups, remainder) = resource::split_by_count(&whole, shared.caps.min_partition_size)?;
        let mut leaves = groups;
        if resource::sm_count(&remainder) > 0 {
            leaves.push(remainder);
        }
        let mut next = 0usize;
        let mut leaf_sets = Vec::with_capacity(leaves.len());
        for r in &leaves {
            let n = resource::sm_count(r) as usize;
            leaf_sets.push(UnitSet::range(next, next + n));
            next += n;
        }
        if next != shared.caps.sm_count as usize {
            return Err(HalError::InvalidTopology(format!(
                "the split's groups and remainder cover {next} SMs but the device has {}",
                shared.caps.sm_count
            )));
        }
        shared.leaves = leaves;
        let caps = &shared.caps;
        let mut notes = vec![
            format!(
                "one cuDevSmResourceSplitByCount(minCount={}): {} leaves; SM indices are logical (leaf i covers \
                 consecutive indices in split order); the %smid census (vitamin determinism) reads the physical SM sets",
                caps.min_partition_size,
                leaf_sets.len()
            ),
            format!("compute capability {}.{}", caps.compute_capability.0, caps.compute_capability.1),
        ];
        notes.push(match (&caps.nvrtc_version, &caps.nvrtc_unavailable) {
            (Some((a, b)), _) => format!("NVRTC {a}.{b} (compiles vitamin's kernels at run time)"),
            (None, Some(why)) => format!("NVRTC unavailable, vitamin's own kernels cannot run: {why}"),
            (None, None) => "NVRTC not probed".into(),
        });
        let topology = Topology::new(TopologySpec {
            vendor: "nvidia".into(),
            device_name: caps.device_name.clone(),
            unit_name: "SM".into(),
            unit_count: caps.sm_count as usize,
            leaves: leaf_sets,
            domains: Vec::new(),
            min_partition_size: caps.min_partition_size as usize,
            alignment: caps.partition_alignment as usize,
            capabilities: Capabilities {
                backend: "cuda".into(),
                simulated: false,
                driver_version: Some(caps.driver_version as u32),
                spatial_partitioning: true,
                cooperative_launch: caps.cooperative_launch,
                clusters: caps.clusters,
                notes,
            },
        })?;
        Ok(CudaBackend { shared: Arc::new(shared), topology: Arc::new(topology) })
    }

    /// Starts the submission thread (see the `submit` module): from then on, submissions that
    /// come less than `burst` after the previous one, or behind pending ones, are issued by that
    /// thread, so the caller's bookkeeping overlaps the driver's launch cost; idle, it spins for
    /// `spin` before it parks. The thread first runs `init` and keeps its result for its life
    /// (the interposer enters its re-entry guard there). Returns `false` if the thread was
    /// already started.
    pub fn start_submit_thread<G: 'static>(
        &self,
        burst: std::time::Duration,
        spin: std::time::Duration,
        init: impl FnOnce() -> G + Send + 'static,
    ) -> Result<bool, HalError> {
        if self.shared.submitter.get().is_some() {
            return Ok(false);
        }
        let s = Submitter::start(self.shared.primary, burst, spin, init)?;
        Ok(self.shared.submitter.set(s).is_ok())
    }

    /// Sets the least time between fence queries of a lane whose commands the submission
    /// thread still holds (default [`crate::partition::BUSY_QUERY_NS`]): a query in the driver
    /// competes with that thread's launches, and a lane fenced every
    /// 64 ops (the lane fence interval) needs a query only about as often as those ops take.
    pub fn set_busy_query(&self, every: std::time::Duration) {
        self.shared.busy_query_ns.store(every.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// The submission thread's counts, if it was started.
    pub fn submission_counts(&self) -> Option<crate::SubmitCounts> {
        self.shared.submitter().map(Submitter::counts)
    }

    /// Waits until the submission thread (if started) issued every submission handed to it, so
    /// that a lane stream's native state reflects every op submitted to it.
    pub fn flush_submissions(&self) {
        self.shared.flush_submissions();
    }

    /// How this backend's lanes are fenced.
    pub fn fence_mode(&self) -> FenceMode {
        self.shared.fence_mode
    }

    /// What the probe found.
    pub fn capabilities(&self) -> &CudaCapabilities {
        &self.shared.caps
    }

    /// The state partitions share (primary context, split, pools).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Allocates `bytes` of device memory in the primary context (freed by [`CudaBackend::free`]
    /// or when the backend and its partitions are gone).
    pub fn alloc(&self, bytes: usize) -> Result<u64, HalError> {
        self.shared.make_current()?;
        let p = mem::alloc(bytes)?;
        self.shared.allocations.lock().insert(p, bytes.max(1));
        Ok(p)
    }

    /// Frees an allocation of [`CudaBackend::alloc`]. The caller ensures no submitted op still
    /// uses it (drain first).
    pub fn free(&self, addr: u64) -> Result<(), HalError> {
        if self.shared.allocations.lock().remove(&addr).is_none() {
            return Err(HalError::InvalidPartition(format!("{addr:#x} is not an allocation of this backend")));
        }
        self.shared.make_current()?;
        // SAFETY: `addr` was allocated here and is freed once (just removed from the table).
        unsafe { mem::free(addr) }
    }

    fn check_range(&self, addr: u64, len: usize) -> Result<(), HalError> {
        let allocs = self.shared.allocations.lock();
        let ok = allocs.iter().any(|(&base, &size)| addr >= base && addr + len as u64 <= base + size as u64);
        if ok || len == 0 {
            Ok(())
        } else {
            Err(HalError::InvalidPartition(format!(
                "{len} bytes at {addr:#x} are not inside one allocation of this backend"
            )))
        }
    }

    /// Copies host bytes to device memory, synchronously. Does not wait for submitted ops.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), HalError> {
        self.check_range(addr, bytes.len())?;
        self.shared.make_current()?;
        // SAFETY: the range lies inside a live allocation of this backend.
        unsafe { mem::write(addr, bytes) }
    }

    /// Copies device memory to the host, synchronously. Does not wait for submitted ops.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, HalError> {
        self.check_range(addr, len)?;
        self.shared.make_current()?;
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside a live allocation of this backend.
        unsafe { mem::read(&mut out, addr) }?;
        Ok(out)
    }

    /// Writes `f32`s.
    pub fn write_f32s(&self, addr: u64, values: &[f32]) -> Result<(), HalError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(addr, &bytes)
    }

    /// Reads `f32`s.
    pub fn read_f32s(&self, addr: u64, count: usize) -> Result<Vec<f32>, HalError> {
        Ok(self.read(addr, count * 4)?.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// `(free, total)` device memory in bytes.
    pub fn memory_info(&self) -> Result<(u64, u64), HalError> {
        self.shared.make_current()?;
        let (f, t) = ctx::mem_info()?;
        Ok((f as u64, t as u64))
    }

    /// Loads a cubin (or NUL-terminated PTX) context-independently and returns the named kernels
    /// as `CUkernel` function references.
    pub fn load_kernels(&self, image: &[u8], names: &[&str]) -> Result<Vec<FunctionRef>, HalError> {
        self.shared.make_current()?;
        let lib = library::load_data(image)?;
        self.shared.libraries.lock().push(lib);
        names
            .iter()
            .map(|&n| {
                let c = CString::new(n).map_err(|_| HalError::InvalidPartition(format!("kernel name {n:?}")))?;
                // SAFETY: `lib` is live until the backend is dropped.
                let k = unsafe { library::kernel(lib, &c) }?;
                Ok(FunctionRef::new(k as u64, FunctionKind::Kernel, n))
            })
            .collect()
    }

    /// A kernel of `vitamin-kernels-cuda` by name (compiled with NVRTC on first use, once per
    /// process and architecture; loaded once per backend).
    pub fn kernel(&self, name: &str) -> Result<FunctionRef, HalError> {
        let table = self.shared.kernels.get_or_init(|| {
            let cubin = builtin_cubin(self.shared.caps.compute_capability)?;
            let names = vitamin_kernels_cuda::all_kernel_names();
            let refs = self.load_kernels(&cubin, &names)?;
            Ok(names.into_iter().zip(refs).collect())
        });
        match table {
            Ok(t) => t.get(name).cloned().ok_or_else(|| {
                HalError::Incompatible(vitamin_hal::Incompatibility::UnknownFunction(format!(
                    "{name} is not a kernel of vitamin-kernels-cuda"
                )))
            }),
            Err(e) => Err(e.clone()),
        }
    }

    /// Creates one partition per node (each a union of leaves) with `lanes` lanes, timing the
    /// creation and measuring the device memory it took. With `first_launch`, also launches the
    /// empty kernel once on every lane and measures memory again.
    pub fn realize(
        &self,
        nodes: &[UnitSet],
        lanes: usize,
        first_launch: bool,
    ) -> Result<(Vec<CudaPartition>, RealizationStats), HalError> {
        let empty = if first_launch { Some(self.kernel("empty_kernel")?) } else { None };
        let (free0, _) = self.memory_info()?;
        let t0 = Instant::now();
        let parts = nodes.iter().map(|u| self.create_partition(u, lanes)).collect::<Result<Vec<_>, _>>()?;
        let create_ms = t0.elapsed().as_secs_f64() * 1e3;
        let (free1, _) = self.memory_info()?;
        let mib = |a: u64, b: u64| (a as f64 - b as f64) / (1024.0 * 1024.0);
        let mut after_launch = None;
        if let Some(f) = empty {
            let op = std::sync::Arc::new(vitamin_hal::OpDesc::Kernel(vitamin_hal::KernelLaunch::new(
                f,
                vitamin_hal::Dim3::x(1),
                vitamin_hal::Dim3::x(32),
                0,
                vitamin_hal::KernelArgs::empty(),
                vitamin_hal::LaunchAttributes::none(),
            )));
            for p in &parts {
                for lane in 0..lanes as u32 {
                    vitamin_hal::PhysicalPartition::submit(p, lane, &op)?;
                }
            }
            for p in &parts {
                vitamin_hal::PhysicalPartition::synchronize(p)?;
                let mut done = Vec::new();
                vitamin_hal::PhysicalPartition::poll(p, &mut done)?;
            }
            after_launch = Some(mib(free0, self.memory_info()?.0));
        }
        let stats = RealizationStats {
            partitions: parts.len(),
            lanes,
            create_ms,
            memory_mib: mib(free0, free1),
            memory_after_first_launch_mib: after_launch,
        };
        Ok((parts, stats))
    }
}

/// Compiled cubins by compute capability.
type CubinCache = Mutex<HashMap<(i32, i32), Arc<Vec<u8>>>>;

/// The kernel library compiled once per process and architecture.
fn builtin_cubin(arch: (i32, i32)) -> Result<Arc<Vec<u8>>, HalError> {
    static CACHE: OnceLock<CubinCache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(c) = cache.lock().get(&arch) {
        return Ok(c.clone());
    }
    let cubin = Arc::new(crate::nvrtc::compile_cubin(vitamin_kernels_cuda::SOURCE, "vitamin_kernels.cu", arch, &[])?);
    cache.lock().insert(arch, cubin.clone());
    Ok(cubin)
}

impl Backend for CudaBackend {
    type Partition = CudaPartition;

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<CudaPartition, HalError> {
        check_union_of_leaves(&self.topology, units)?;
        if lanes == 0 {
            return Err(HalError::InvalidPartition("a partition needs at least one lane".into()));
        }
        let leaves: Vec<usize> =
            self.topology.leaves().iter().enumerate().filter(|(_, l)| l.is_subset(units)).map(|(i, _)| i).collect();
        CudaPartition::create(self.shared.clone(), *units, &leaves, lanes)
    }

    fn now_ns(&self) -> u64 {
        self.shared.epoch.elapsed().as_nanos() as u64
    }

    fn wait_for_progress(&self, timeout: Duration) -> Result<bool, HalError> {
        if self.shared.outstanding.load(Ordering::Acquire) == 0 {
            return Ok(false);
        }
        if timeout < Duration::from_micros(50) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(timeout.min(Duration::from_micros(50)));
        }
        Ok(true)
    }
}
