//! [`HipBackend`]: one device, its leaf layout, the stream bound, memory and modules.
//!
//! Invariants:
//! - The leaves are fixed when the backend is created ([`crate::probe::leaf_layout`]); a
//!   partition is any union of them, realized as CU-masked streams whose mask is exactly the
//!   union's bits.
//! - Streams are counted against [`StreamLimits`] when a partition is created and released when
//!   it is dropped; a partition over the bound is refused, and nothing is left behind.
//! - Every calling thread makes the backend's device current (`hipSetDevice`) before a call
//!   (a thread-local check).

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::CString;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use vitamin_hal::{
    check_union_of_leaves, Backend, Capabilities, FunctionKind, FunctionRef, HalError, Topology, TopologySpec, UnitSet,
};

use crate::driver::{self, Api, HipEvent, HipModule};
use crate::green::PartitionRealization;
use crate::partition::HipPartition;
use crate::probe::{layout_for, probe_library, HipCapabilities};
use crate::settings;

/// The stream bound (configuration keys `max_lanes`, `max_streams`). Each CU-masked stream gets a hardware queue of its own (FACTS.md), and
/// queues are a finite resource: the kernel driver caps the queues of a process, and the
/// hardware scheduler keeps only some resident at once, time-multiplexing the rest
/// (oversubscription, which FACTS.md says degrades performance). A pool therefore has a bounded
/// stream count: at most `max_lanes` per partition and `max_streams` in all.
///
/// The defaults (8 lanes, 512 streams) admit the runtime's default pool on an MI300X (71 nodes x
/// 4 lanes + 8 service lanes = 292 streams); they are not measured on AMD hardware, where a ROCm
/// host run should measure how launch latency grows with the queue count and lower them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Most lanes (streams) one partition may have.
    pub max_lanes: usize,
    /// Most streams all partitions of the backend may have together.
    pub max_streams: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits { max_lanes: 8, max_streams: 512 }
    }
}

impl StreamLimits {
    /// The defaults with the process's configuration applied (`max_lanes`, `max_streams`).
    pub fn from_config() -> Result<Self, HalError> {
        Self::from_lookup(&settings::process)
    }

    /// The defaults with the values `get` gives for `max_lanes` and `max_streams` applied.
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, HalError> {
        let mut l = StreamLimits::default();
        for (key, slot) in [(settings::MAX_LANES, &mut l.max_lanes), (settings::MAX_STREAMS, &mut l.max_streams)] {
            if let Some(v) = settings::value(get, key) {
                *slot = v.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                    HalError::InvalidPartition(format!(
                        "configuration key {key} = {v:?} is not a positive number of streams"
                    ))
                })?;
            }
        }
        Ok(l)
    }

    /// Whether a partition of `lanes` lanes fits when `in_use` streams exist: `Ok` or why not.
    pub fn admit(&self, in_use: usize, lanes: usize) -> Result<(), HalError> {
        if lanes == 0 {
            return Err(HalError::InvalidPartition("a partition needs at least one lane".into()));
        }
        if lanes > self.max_lanes {
            return Err(HalError::InvalidPartition(format!(
                "{lanes} lanes requested, at most {} per partition (configuration key {}): each lane is a hardware \
                 queue",
                self.max_lanes,
                settings::MAX_LANES
            )));
        }
        if in_use + lanes > self.max_streams {
            return Err(HalError::InvalidPartition(format!(
                "{lanes} more streams would make {} but the pool is bounded to {} (configuration key {}): each \
                 CU-masked stream is a hardware queue; use fewer lanes per node or a larger leaf ({})",
                in_use + lanes,
                self.max_streams,
                settings::MAX_STREAMS,
                settings::LEAF_UNITS
            )));
        }
        Ok(())
    }
}

/// How lanes are fenced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMode {
    /// `hipEventRecord` after a lane's newest op, polled with `hipEventQuery` (the default).
    Event,
    /// `hipStreamWriteValue64` of the lane's newest sequence number into mapped host memory,
    /// polled by a load (configuration `fence = "memory"`, where the runtime has it).
    Memory,
}

impl FenceMode {
    /// The mode the configuration key `fence` asks for: `memory`, or `event` (also for `hybrid`,
    /// the key's default, whose waiter fences this backend does not have, and when unset).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Self, HalError> {
        match settings::value(get, settings::FENCE).map(|v| v.to_ascii_lowercase()).as_deref() {
            None | Some("event" | "hybrid") => Ok(FenceMode::Event),
            Some("memory") => Ok(FenceMode::Memory),
            Some(v) => Err(HalError::InvalidPartition(format!(
                "configuration key {} = {v:?}: use event or memory",
                settings::FENCE
            ))),
        }
    }
}

/// State shared by the backend and its partitions (partitions keep it alive).
pub(crate) struct Shared {
    pub(crate) api: Arc<Api>,
    pub(crate) ordinal: i32,
    pub(crate) caps: HipCapabilities,
    pub(crate) limits: StreamLimits,
    /// Streams of live partitions.
    pub(crate) streams: AtomicUsize,
    /// Ops submitted and not yet reported complete, over all partitions.
    pub(crate) outstanding: AtomicU64,
    pub(crate) fence_mode: FenceMode,
    /// How partitions are realized (resolved: `Auto` only where green contexts exist).
    pub(crate) partitions: PartitionRealization,
    events: Mutex<Vec<HipEvent>>,
    allocations: Mutex<HashMap<u64, usize>>,
    host_allocations: Mutex<Vec<u64>>,
    modules: Mutex<Vec<HipModule>>,
    /// Blocks per CU by (function, threads per block, dynamic shared memory).
    occupancy: Mutex<HashMap<(u64, u32, u32), u32>>,
    pub(crate) epoch: Instant,
    /// The runtime library given explicitly (hipRTC is looked for there first).
    library: Option<String>,
}

// SAFETY: the raw handles (events, modules) are runtime objects usable from any thread; mutable
// state is behind mutexes or atomics.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("ordinal", &self.ordinal).field("streams", &self.streams).finish()
    }
}

thread_local! {
    static CURRENT: Cell<i32> = const { Cell::new(-1) };
}

impl Shared {
    /// Makes the backend's device current on this thread.
    pub(crate) fn make_current(&self) -> Result<(), HalError> {
        if CURRENT.with(Cell::get) == self.ordinal {
            return Ok(());
        }
        // SAFETY: the ordinal was validated by the probe.
        self.api.check("hipSetDevice", unsafe { (self.api.hipSetDevice)(self.ordinal) })?;
        CURRENT.with(|c| c.set(self.ordinal));
        Ok(())
    }

    /// An idle event (created when the pool is empty).
    pub(crate) fn take_event(&self) -> Result<HipEvent, HalError> {
        if let Some(e) = self.events.lock().pop() {
            return Ok(e);
        }
        self.make_current()?;
        let mut e = std::ptr::null_mut();
        // SAFETY: out-pointer is a live local; DisableTiming is a valid flag.
        self.api.check("hipEventCreateWithFlags", unsafe {
            (self.api.hipEventCreateWithFlags)(&mut e, driver::EVENT_DISABLE_TIMING)
        })?;
        Ok(e)
    }

    /// Returns events whose recorded work completed.
    pub(crate) fn return_events(&self, events: impl IntoIterator<Item = HipEvent>) {
        self.events.lock().extend(events);
    }

    /// Blocks of `f` with this shape one CU holds at once (cached).
    pub(crate) fn blocks_per_cu(&self, f: &FunctionRef, threads: u32, smem: u32) -> Result<u32, HalError> {
        if f.kind() != FunctionKind::Function {
            return Err(HalError::Incompatible(vitamin_hal::Incompatibility::UnknownFunction(format!(
                "{} is not a HIP function handle",
                f.name()
            ))));
        }
        let key = (f.handle(), threads, smem);
        if let Some(&n) = self.occupancy.lock().get(&key) {
            return Ok(n);
        }
        self.make_current()?;
        let mut n = 0;
        // SAFETY: the handle is a live hipFunction_t (descriptors carry handles this backend or
        // the application loaded); the out-pointer is a live local.
        self.api.check("hipModuleOccupancyMaxActiveBlocksPerMultiprocessor", unsafe {
            (self.api.hipModuleOccupancyMaxActiveBlocksPerMultiprocessor)(
                &mut n,
                f.handle() as driver::HipFunction,
                threads as i32,
                smem as usize,
            )
        })?;
        let n = n.max(0) as u32;
        self.occupancy.lock().insert(key, n);
        Ok(n)
    }

    /// A zeroed 8-byte word of mapped host memory for a memory fence: (host, device) addresses.
    pub(crate) fn fence_word(&self) -> Result<(u64, u64), HalError> {
        let (Some(alloc), Some(map)) = (self.api.hipHostMalloc, self.api.hipHostGetDevicePointer) else {
            return Err(HalError::Unsupported {
                backend: driver::BACKEND,
                reason: "memory fences need hipHostMalloc and hipHostGetDevicePointer".into(),
            });
        };
        self.make_current()?;
        let mut host = std::ptr::null_mut();
        // SAFETY: out-pointer is a live local; mapped | portable are valid flags.
        self.api.check("hipHostMalloc", unsafe {
            alloc(&mut host, 64, driver::HOST_MALLOC_MAPPED | driver::HOST_MALLOC_PORTABLE)
        })?;
        self.host_allocations.lock().push(host as u64);
        // SAFETY: `host` holds 64 bytes just allocated and used by nobody else.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, 64) };
        let mut dev = std::ptr::null_mut();
        // SAFETY: `host` is a mapped allocation; the out-pointer is a live local.
        self.api.check("hipHostGetDevicePointer", unsafe { map(&mut dev, host, 0) })?;
        Ok((host as u64, dev as u64))
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if self.make_current().is_err() {
            tracing::warn!("hip backend teardown: could not make the device current");
        }
        let api = &self.api;
        for e in self.events.get_mut().drain(..) {
            // SAFETY: every pooled event is idle and used by nobody else.
            let _ = unsafe { (api.hipEventDestroy)(e) };
        }
        for (p, _) in self.allocations.get_mut().drain() {
            // SAFETY: every partition (and its work) is gone; each allocation is freed once.
            let _ = unsafe { (api.hipFree)(p as *mut _) };
        }
        if let Some(free) = api.hipHostFree {
            for p in self.host_allocations.get_mut().drain(..) {
                // SAFETY: the fence words' streams are destroyed (every partition is gone).
                let _ = unsafe { free(p as *mut _) };
            }
        }
        for m in self.modules.get_mut().drain(..) {
            // SAFETY: no partition remains, so no launch of these functions is outstanding.
            let _ = unsafe { (api.hipModuleUnload)(m) };
        }
    }
}

/// The AMD backend: a device whose partitions are sets of CU-masked streams.
///
/// Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct HipBackend {
    shared: Arc<Shared>,
    topology: Arc<Topology>,
}

impl HipBackend {
    /// The device chosen by the configuration key `device` (default 0), with the stream bound and
    /// fence mode from the configuration.
    pub fn new() -> Result<Self, HalError> {
        Self::with_ordinal(crate::probe::default_ordinal()?)
    }

    /// Device `ordinal`.
    pub fn with_ordinal(ordinal: i32) -> Result<Self, HalError> {
        let limits = StreamLimits::from_config()?;
        Self::with_limits(ordinal, limits)
    }

    /// Device `ordinal` with an explicit stream bound.
    pub fn with_limits(ordinal: i32, limits: StreamLimits) -> Result<Self, HalError> {
        Self::with_library(None, ordinal, limits)
    }

    /// Device `ordinal` of the HIP runtime at `library` (a path; `None`: the default search), with
    /// an explicit stream bound. Tests use it to load the test double without touching the
    /// environment.
    pub fn with_library(library: Option<&Path>, ordinal: i32, limits: StreamLimits) -> Result<Self, HalError> {
        let partitions = PartitionRealization::from_lookup(&settings::process)?;
        Self::with_partitions(library, ordinal, limits, partitions)
    }

    /// [`HipBackend::with_library`] with the partition realization given (instead of the
    /// configuration key `partitions`). `GreenContext` on a runtime without green contexts is
    /// `Unsupported`; `Auto` uses them where the probe finds them.
    pub fn with_partitions(
        library: Option<&Path>,
        ordinal: i32,
        limits: StreamLimits,
        partitions: PartitionRealization,
    ) -> Result<Self, HalError> {
        let library = library.map(|p| p.to_string_lossy().into_owned());
        let caps = probe_library(library.as_deref(), ordinal)?;
        let api = driver::load_from(library.as_deref())?;
        let fence_mode = match FenceMode::from_lookup(&settings::process)? {
            FenceMode::Memory if !caps.stream_write_value64 => {
                return Err(HalError::Unsupported {
                    backend: driver::BACKEND,
                    reason: format!(
                        "configuration key {} = \"memory\", but this HIP runtime lacks hipStreamWriteValue64",
                        settings::FENCE
                    ),
                });
            }
            mode => mode,
        };
        let partitions = match partitions {
            PartitionRealization::GreenContext if !caps.green_contexts => {
                return Err(HalError::Unsupported {
                    backend: driver::BACKEND,
                    reason: format!(
                        "partitions = \"green-context\", but {} lacks HIP green contexts (ROCm 7.14+: {})",
                        caps.library,
                        driver::GREEN_CONTEXT_SYMBOLS.join(", ")
                    ),
                });
            }
            PartitionRealization::Auto if !caps.green_contexts => PartitionRealization::CuMask,
            p => p,
        };
        let layout = layout_for(&caps)?;
        let mut notes = vec![
            format!(
                "{} CUs, {} XCD(s){}: {} leaves of {} consecutive CU-mask bits (granule {}); mask bit i is on XCD i mod {}",
                caps.cu_count,
                caps.xcds,
                if caps.wgp_mode { ", WGP mode (CU pairs)" } else { "" },
                layout.leaves.len(),
                layout.leaf_size,
                layout.granule,
                caps.xcds
            ),
            format!(
                "partitions are {}; at most {} lanes each and {} streams in all",
                match partitions {
                    PartitionRealization::CuMask => "CU-masked streams (hipExtStreamCreateWithCUMask)",
                    PartitionRealization::GreenContext => "HIP green contexts (hipExecutionCtxStreamCreate)",
                    PartitionRealization::Auto => {
                        "HIP green contexts (hipExecutionCtxStreamCreate), a node they cannot realize CU-masked \
                         streams"
                    }
                },
                limits.max_lanes,
                limits.max_streams
            ),
            format!("HIP runtime {} from {}; architecture {}", caps.runtime_version_string(), caps.library, caps.arch),
        ];
        if !caps.module_cooperative_launch {
            notes.push("no hipModuleLaunchCooperativeKernel (ROCm 6+): cooperative launches are refused".into());
        }
        notes.push(match (&caps.rtc_version, &caps.rtc_unavailable) {
            (Some((a, b)), _) => format!("hipRTC {a}.{b}"),
            (None, Some(why)) => format!("hipRTC unavailable: {why}"),
            (None, None) => "hipRTC not probed".into(),
        });
        notes.push("not validated on AMD hardware: CI runs this backend on a test double (docs/amd.md)".into());
        let topology = Topology::new(TopologySpec {
            vendor: "amd".into(),
            device_name: caps.device_name.clone(),
            unit_name: "CU".into(),
            unit_count: caps.cu_count as usize,
            leaves: layout.leaves,
            domains: layout.domains,
            min_partition_size: layout.leaf_size,
            alignment: layout.granule,
            capabilities: Capabilities {
                backend: "hip".into(),
                simulated: false,
                driver_version: u32::try_from(caps.runtime_version).ok(),
                spatial_partitioning: true,
                cooperative_launch: caps.cooperative_launch && caps.module_cooperative_launch,
                clusters: false,
                notes,
            },
        })?;
        let shared = Shared {
            api,
            ordinal,
            caps,
            limits,
            streams: AtomicUsize::new(0),
            outstanding: AtomicU64::new(0),
            fence_mode,
            partitions,
            events: Mutex::new(Vec::new()),
            allocations: Mutex::new(HashMap::new()),
            host_allocations: Mutex::new(Vec::new()),
            modules: Mutex::new(Vec::new()),
            occupancy: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            library,
        };
        shared.make_current()?;
        Ok(HipBackend { shared: Arc::new(shared), topology: Arc::new(topology) })
    }

    /// What the probe found.
    pub fn capabilities(&self) -> &HipCapabilities {
        &self.shared.caps
    }

    /// The stream bound in force.
    pub fn stream_limits(&self) -> StreamLimits {
        self.shared.limits
    }

    /// Streams of live partitions.
    pub fn streams_in_use(&self) -> usize {
        self.shared.streams.load(Ordering::Acquire)
    }

    /// How partitions are realized (`Auto` only where the runtime has green contexts).
    pub fn partition_realization(&self) -> PartitionRealization {
        self.shared.partitions
    }

    /// How lanes are fenced.
    pub fn fence_mode(&self) -> FenceMode {
        self.shared.fence_mode
    }

    /// Allocates `bytes` of device memory (freed by [`HipBackend::free`] or with the backend).
    pub fn alloc(&self, bytes: usize) -> Result<u64, HalError> {
        self.shared.make_current()?;
        let mut p = std::ptr::null_mut();
        // SAFETY: out-pointer is a live local.
        self.shared.api.check("hipMalloc", unsafe { (self.shared.api.hipMalloc)(&mut p, bytes.max(1)) })?;
        self.shared.allocations.lock().insert(p as u64, bytes.max(1));
        Ok(p as u64)
    }

    /// Frees an allocation of [`HipBackend::alloc`]. The caller ensures no submitted op still uses
    /// it (drain first).
    pub fn free(&self, addr: u64) -> Result<(), HalError> {
        if self.shared.allocations.lock().remove(&addr).is_none() {
            return Err(HalError::InvalidPartition(format!("{addr:#x} is not an allocation of this backend")));
        }
        self.shared.make_current()?;
        // SAFETY: allocated here and freed once (just removed from the table).
        self.shared.api.check("hipFree", unsafe { (self.shared.api.hipFree)(addr as *mut _) })
    }

    fn check_range(&self, addr: u64, len: usize) -> Result<(), HalError> {
        let allocs = self.shared.allocations.lock();
        let inside = allocs.iter().any(|(&b, &s)| addr >= b && addr.saturating_add(len as u64) <= b + s as u64);
        if inside || len == 0 {
            Ok(())
        } else {
            Err(HalError::InvalidPartition(format!(
                "{len} bytes at {addr:#x} are not inside one allocation of this backend"
            )))
        }
    }

    /// Copies host bytes to device memory, synchronously.
    pub fn write(&self, addr: u64, bytes: &[u8]) -> Result<(), HalError> {
        self.check_range(addr, bytes.len())?;
        self.shared.make_current()?;
        // SAFETY: the range lies inside a live allocation; `bytes` is a live slice.
        self.shared.api.check("hipMemcpy", unsafe {
            (self.shared.api.hipMemcpy)(addr as *mut _, bytes.as_ptr().cast(), bytes.len(), driver::MEMCPY_DEFAULT)
        })
    }

    /// Copies device memory to the host, synchronously.
    pub fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, HalError> {
        self.check_range(addr, len)?;
        self.shared.make_current()?;
        let mut out = vec![0u8; len];
        // SAFETY: the range lies inside a live allocation; `out` holds `len` bytes.
        self.shared.api.check("hipMemcpy", unsafe {
            (self.shared.api.hipMemcpy)(out.as_mut_ptr().cast(), addr as *const _, len, driver::MEMCPY_DEFAULT)
        })?;
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
        let (mut f, mut t) = (0usize, 0usize);
        // SAFETY: out-pointers are live locals.
        self.shared.api.check("hipMemGetInfo", unsafe { (self.shared.api.hipMemGetInfo)(&mut f, &mut t) })?;
        Ok((f as u64, t as u64))
    }

    /// Loads a code object and returns the named functions (`FunctionKind::Function` handles).
    pub fn load_module(&self, image: &[u8], names: &[&str]) -> Result<Vec<FunctionRef>, HalError> {
        self.shared.make_current()?;
        // A NUL after the image: harmless for an ELF code object, and the end of a text one.
        let mut owned = image.to_vec();
        owned.push(0);
        let mut m = std::ptr::null_mut();
        // SAFETY: `owned` is live for the call (the runtime copies or parses the image at load).
        self.shared.api.check("hipModuleLoadData", unsafe {
            (self.shared.api.hipModuleLoadData)(&mut m, owned.as_ptr().cast())
        })?;
        self.shared.modules.lock().push(m);
        names
            .iter()
            .map(|&n| {
                let c = CString::new(n).map_err(|_| HalError::InvalidPartition(format!("kernel name {n:?}")))?;
                let mut f = std::ptr::null_mut();
                // SAFETY: `m` is live until the backend is dropped; `c` is NUL-terminated.
                self.shared.api.check("hipModuleGetFunction", unsafe {
                    (self.shared.api.hipModuleGetFunction)(&mut f, m, c.as_ptr())
                })?;
                Ok(FunctionRef::new(f as u64, FunctionKind::Function, n))
            })
            .collect()
    }

    /// Launches `f` with the caller's own parameter pointers on `stream` (a lane's native stream
    /// as handed to a [`vitamin_hal::PhysicalPartition::submit_native`] closure):
    /// `hipModuleLaunchKernel` with no `extra`, exactly the launch the caller describes.
    ///
    /// # Safety
    /// `f` is a live `hipFunction_t`, `stream` the handle the closure received, and `params` holds
    /// one pointer per parameter of `f` (or is null when it takes none), each valid for the call.
    pub unsafe fn launch_native(
        &self,
        f: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: u64,
        params: *mut *mut std::ffi::c_void,
    ) -> Result<(), HalError> {
        let api = &self.shared.api;
        // SAFETY: forwarded from the caller's contract above.
        api.check("hipModuleLaunchKernel", unsafe {
            (api.hipModuleLaunchKernel)(
                f as driver::HipFunction,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream as driver::HipStream,
                params,
                std::ptr::null_mut(),
            )
        })
    }

    /// Compiles `source` with hipRTC for this device's architecture and loads the named functions.
    pub fn compile_and_load(&self, source: &str, file: &str, names: &[&str]) -> Result<Vec<FunctionRef>, HalError> {
        let code = crate::rtc::compile_for(self.shared.library.as_deref(), source, file, &self.shared.caps.arch, &[])?;
        self.load_module(&code, names)
    }
}

impl Backend for HipBackend {
    type Partition = HipPartition;

    fn topology(&self) -> &Topology {
        &self.topology
    }

    fn create_partition(&self, units: &UnitSet, lanes: usize) -> Result<HipPartition, HalError> {
        check_union_of_leaves(&self.topology, units)?;
        let s = &self.shared;
        let mut in_use = s.streams.load(Ordering::Acquire);
        loop {
            s.limits.admit(in_use, lanes)?;
            match s.streams.compare_exchange(in_use, in_use + lanes, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => in_use = now,
            }
        }
        let whole = *units == self.topology.all_units();
        // The partition releases its reservation when dropped, also when creation fails.
        HipPartition::create(self.shared.clone(), *units, whole, lanes)
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// `admit` against the plain rule: 1..=max_lanes lanes, and the total within max_streams.
        #[test]
        fn admission_matches_the_bound(max_lanes in 1usize..16, max_streams in 1usize..600, in_use in 0usize..700, lanes in 0usize..20) {
            let l = StreamLimits { max_lanes, max_streams };
            let ok = lanes >= 1 && lanes <= max_lanes && in_use + lanes <= max_streams;
            prop_assert_eq!(l.admit(in_use, lanes).is_ok(), ok);
        }
    }

    #[test]
    fn refusals_name_the_knob() {
        let l = StreamLimits { max_lanes: 4, max_streams: 10 };
        let e = l.admit(8, 4).unwrap_err().to_string();
        assert!(e.contains("max_streams") && e.contains("12"), "{e}");
        let e = l.admit(0, 5).unwrap_err().to_string();
        assert!(e.contains("max_lanes"), "{e}");
    }

    fn map(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn limits_and_fences_come_from_the_configuration() {
        assert_eq!(StreamLimits::from_lookup(&map(&[])), Ok(StreamLimits::default()));
        let l = StreamLimits::from_lookup(&map(&[("max_streams", "24"), ("max_lanes", " 2 ")]));
        assert_eq!(l, Ok(StreamLimits { max_lanes: 2, max_streams: 24 }));
        for bad in ["0", "-1", "many"] {
            let e = StreamLimits::from_lookup(&map(&[("max_streams", bad)])).unwrap_err().to_string();
            assert!(e.contains("max_streams") && e.contains(bad), "{e}");
        }
        assert_eq!(FenceMode::from_lookup(&map(&[])), Ok(FenceMode::Event));
        assert_eq!(FenceMode::from_lookup(&map(&[("fence", "hybrid")])), Ok(FenceMode::Event));
        assert_eq!(FenceMode::from_lookup(&map(&[("fence", "Memory")])), Ok(FenceMode::Memory));
        let e = FenceMode::from_lookup(&map(&[("fence", "fast")])).unwrap_err().to_string();
        assert!(e.contains("fence") && e.contains("fast"), "{e}");
    }
}
