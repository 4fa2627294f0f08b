//! [`CudaPartition`]: one green context with N lanes (its streams); submission, fences, teardown.
//! Lane 0's stream is created with the partition, the others' at their first submission unless
//! `lane_streams = "start-up"` ([`crate::device::LANE_STREAMS_ENV`]): a stream costs about
//! 0.5 MiB of device memory (docs/results/pool-cost.md) and most nodes never use a second lane.
//! The whole-device node's lanes are primary-context streams instead (a primary-context kernel
//! may use every SM, which is exactly that node; measured faster between dependent kernels), unless
//! `VITAMIN_ROOT_CONTEXT=green` ([`crate::device::ROOT_CONTEXT_ENV`]).
//!
//! ## Submission
//! A descriptor is submitted exactly as described: a kernel with `cuLaunchKernelEx` (same
//! function, grid, block, dynamic shared memory, attributes; one parameter pointer per parameter,
//! pointing into the descriptor's argument bytes; `cuLaunchKernel` when it has no attributes), a copy with `cuMemcpyAsync`, a fill with
//! `cuMemsetD{8,16,32}Async`, a host function with `cuLaunchHostFunc`, a graph with
//! `cuGraphLaunch`, a marker with nothing at all (it completes with its lane's earlier work).
//!
//! ## Fences
//! Submitting records no fence per op: a lane's ops complete in order, so one fence after the
//! newest op covers everything before it. A lane has few fences in flight (each is a command the
//! GPU runs between the lane's kernels): a lone submission issued directly on a lane without a
//! fence in flight is fenced at once (its completion is then seen as soon as it ends), and so is
//! every [`FENCE_EVERY`]-th unfenced submission while fewer than [`MAX_FENCES`] fences are in
//! flight (a burst of continued ops is then reported complete in steps, not all at once when the
//! lane ran dry); otherwise [`PhysicalPartition::poll`] fences a lane that has unfenced ops and
//! no fence in flight, or [`FENCE_EVERY`] unfenced ops and fewer than [`MAX_FENCES`] fences in
//! flight ([`PhysicalPartition::poll_observing`] records none: the runtime's dispatcher thread
//! polls that way while a waiting application thread polls for itself, so that the lane's
//! stream sees the driver calls of the thread that launches on it next). A fence is
//! an event from a shared pool, queried oldest first, or with `VITAMIN_FENCE=memory`
//! a `cuStreamWriteValue64` of the lane's newest sequence number into its pinned, device-mapped
//! host word, read without a driver call (the stream is asked for asynchronous errors every
//! [`ERROR_CHECK_NS`] while the word does not advance). Hybrid fences (the default,
//! [`crate::FenceMode::Hybrid`]) are events, except those recorded by a thread waiting in a
//! synchronize call ([`PhysicalPartition::poll_for_waiter`]), which are memory writes: such a
//! fence usually follows the last op the waiter waits for, so the write costs nothing between
//! kernels, and the waiter sees the completion with a load. With the submission thread
//! (`crate::submit`), launches and fences may be issued by that thread; an event fence is queried
//! only once its record was issued.
//!
//! ## Teardown
//! Dropping a partition synchronizes every lane (drain), destroys the streams, returns the events
//! to the pool and destroys the green context (`cuGreenCtxDestroy` does not destroy streams).

use std::collections::{HashMap, VecDeque};
use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use smallvec::SmallVec;
use vitamin_hal::trace::{self, Tag};
use vitamin_hal::{
    Endpoint, Fence, GraphLaunch, HalError, HostFunction, Incompatibility, KernelLaunch, LaneId, LaneProgress, OpDesc,
    PhysicalPartition, UnitSet,
};

use crate::copies::CudaGraphCopies;

use crate::device::{FenceWord, Shared};
use crate::driver::{self, event, green, launch, mem, occupancy, resource, stream, CUevent, CUgreenCtx, CUstream};
use crate::submit::{Command, Errors, HandOff, Submitter};

/// A lane with this many unfenced ops gets another fence even while one is in flight.
pub const FENCE_EVERY: u64 = 64;
/// Most fence events in flight per lane.
pub const MAX_FENCES: usize = 4;
/// Least time between fence queries of a lane whose commands the submission thread still holds.
pub const BUSY_QUERY_NS: u64 = 20_000;
/// Memory fences: while a lane's fence word does not advance, its stream is asked for
/// asynchronous errors (a failed kernel never lets the write run) at most this often.
pub const ERROR_CHECK_NS: u64 = 100_000;

/// How long [`CudaPartition::wait_for`] waits before reporting a hang.
pub const WAIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Largest block the hardware runs (threads).
const MAX_BLOCK_THREADS: u64 = 1024;
/// Largest (non-portable) cluster on Hopper, in blocks.
const MAX_CLUSTER_BLOCKS: u64 = 16;
/// Dynamic shared memory a launch may use without raising the function's limit (48 KiB).
const DEFAULT_DYNAMIC_SHARED: u32 = 48 * 1024;

/// Per-lane state, guarded by the lane's mutex.
struct Lane {
    stream: CUstream,
    /// Sequence number of the newest submitted op.
    submitted: u64,
    /// Newest sequence number covered by a recorded event.
    fenced: u64,
    /// Newest sequence number reported complete.
    completed: u64,
    /// Recorded events, oldest first, with the sequence number each covers and the submission
    /// thread's ticket of the record (0: recorded directly).
    events: VecDeque<(u64, CUevent, u64)>,
    /// Host bytes that must outlive the ops that read them (staged copies).
    keepalive: VecDeque<(u64, Arc<[u8]>)>,
    /// Ticket of the newest command of this lane handed to the submission thread (0: none).
    last_ticket: u64,
    /// When this lane's fences were last queried while the submission thread held some of its
    /// commands, or (memory fences) when its stream was last asked for errors (backend clock, ns).
    last_query_ns: u64,
    /// The lane's fence word (memory or hybrid fences; `None`: event fences).
    word: Option<FenceWord>,
    /// Hybrid fences: the word is written only by waiters' fences, events fence the rest.
    hybrid: bool,
}

// SAFETY: a stream and events are driver handles usable from any thread; the lane is only touched
// under its mutex.
unsafe impl Send for Lane {}

impl Lane {
    /// Whether a memory fence (a null event) in flight covers sequence number `seq`.
    fn word_covers(&self, seq: u64) -> bool {
        self.events.iter().any(|&(upto, e, _)| e.is_null() && upto >= seq)
    }
}

/// (function handle, cluster dims, threads per block, dynamic shared memory).
type ClusterKey = (u64, [u32; 3], u32, u32);

/// What a host-function callback receives.
struct HostCall {
    function: HostFunction,
    errors: Errors,
}

unsafe extern "C" fn host_trampoline(user: *mut c_void) {
    // SAFETY: `user` is the `Box<HostCall>` leaked by `submit`; the driver calls this exactly once.
    let call = unsafe { Box::from_raw(user.cast::<HostCall>()) };
    let f = call.function.clone();
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.invoke())).is_err() {
        call.errors
            .lock()
            .get_or_insert_with(|| HalError::Async(format!("host function {} panicked", call.function.name())));
    }
}

/// The context a partition's lanes belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NodeContext {
    /// A green context over the node's leaves (every node but the whole device's, by default).
    Green(CUgreenCtx),
    /// The primary context: the whole-device node, whose SMs are all of them.
    Primary,
    /// Torn down.
    Closed,
}

/// A pool node realized as a green context (or, for the whole device, the primary context) with
/// its lanes.
pub struct CudaPartition {
    units: UnitSet,
    leaves: Vec<usize>,
    context: NodeContext,
    lanes: Box<[Mutex<Lane>]>,
    shared: Arc<Shared>,
    errors: Errors,
    /// This partition's error slot number with the submission thread (registered at the first
    /// hand-off).
    slot: OnceLock<u32>,
    /// Max active clusters by launch shape.
    clusters: Mutex<HashMap<ClusterKey, u32>>,
    /// Dynamic shared memory limit raised in this partition's green context, per function handle.
    dynamic_shared: Mutex<HashMap<u64, u32>>,
}

// SAFETY: the green context is a driver handle usable from any thread; mutable state is behind
// mutexes.
unsafe impl Send for CudaPartition {}
// SAFETY: as above.
unsafe impl Sync for CudaPartition {}

impl std::fmt::Debug for CudaPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaPartition").field("units", &self.units).field("lanes", &self.lanes.len()).finish()
    }
}

impl CudaPartition {
    /// Builds the green context over split leaves `leaves` and `lanes` streams in it.
    pub(crate) fn create(
        shared: Arc<Shared>,
        units: UnitSet,
        leaves: &[usize],
        lanes: usize,
    ) -> Result<CudaPartition, HalError> {
        shared.make_current()?;
        // Every leaf: the split's groups and remainder cover the device (checked at start-up).
        let whole_device = leaves.len() == shared.leaves.len();
        let context = if whole_device && shared.root_on_primary {
            NodeContext::Primary
        } else {
            let resources: Vec<_> = leaves.iter().map(|&i| shared.leaves[i]).collect();
            let desc = resource::generate_desc(&resources)?;
            NodeContext::Green(green::create(desc, shared.device)?)
        };
        // Build the partition first so that its `Drop` cleans up whatever a later step leaves.
        let mut part = CudaPartition {
            units,
            leaves: leaves.to_vec(),
            context,
            lanes: Box::new([]),
            shared,
            errors: Arc::new(Mutex::new(None)),
            slot: OnceLock::new(),
            clusters: Mutex::new(HashMap::new()),
            dynamic_shared: Mutex::new(HashMap::new()),
        };
        let realized = match context {
            // SAFETY: `g` is live.
            NodeContext::Green(g) => resource::sm_count(&unsafe { green::sm_resource(g) }?) as usize,
            _ => part.shared.caps.sm_count as usize,
        };
        if realized != units.len() {
            return Err(HalError::InvalidPartition(format!(
                "the driver realized {realized} SMs for a node of {} SMs ({units})",
                units.len()
            )));
        }
        let mut made = Vec::with_capacity(lanes);
        for i in 0..lanes {
            let made_lane = part.shared.fence_word().and_then(|word| {
                // Lane 0's stream always exists (occupancy questions are asked on it); the others'
                // wait for their first submission unless `lane_streams = "start-up"`.
                let stream =
                    if i == 0 || part.shared.lanes_at_start { part.new_stream()? } else { std::ptr::null_mut() };
                Ok(Mutex::new(Lane {
                    stream,
                    submitted: 0,
                    fenced: 0,
                    completed: 0,
                    events: VecDeque::new(),
                    keepalive: VecDeque::new(),
                    last_ticket: 0,
                    last_query_ns: 0,
                    hybrid: word.is_some() && part.shared.fence_mode == crate::FenceMode::Hybrid,
                    word,
                }))
            });
            match made_lane {
                Ok(l) => made.push(l),
                Err(e) => {
                    part.lanes = made.into_boxed_slice();
                    return Err(e);
                }
            }
        }
        part.lanes = made.into_boxed_slice();
        Ok(part)
    }

    /// A new stream for a lane of this partition: in its green context, or of the primary
    /// context for the whole-device node.
    fn new_stream(&self) -> Result<CUstream, HalError> {
        match self.context {
            // SAFETY: `g` is live (a partition's context lives until its teardown).
            NodeContext::Green(g) => unsafe { green::stream_create(g, 0) },
            NodeContext::Primary => {
                self.shared.make_current()?;
                stream::create()
            }
            NodeContext::Closed => Err(HalError::InvalidPartition("the partition was torn down".into())),
        }
    }

    /// This partition's error slot number with the submission thread `sub`.
    fn slot(&self, sub: &Submitter) -> u32 {
        *self.slot.get_or_init(|| sub.register_slot(self.errors.clone()))
    }

    /// Indices of the split leaves this partition is made of.
    pub fn leaves(&self) -> &[usize] {
        &self.leaves
    }

    /// Polls until `fence` has completed (yielding in between) and returns every fence the polls
    /// reported, `fence` included unless an earlier poll already reported it. Gives up with
    /// `HalError::Async` after [`WAIT_TIMEOUT`].
    pub fn wait_for(&self, fence: Fence) -> Result<Vec<Fence>, HalError> {
        let lane = self
            .lanes
            .get(fence.lane as usize)
            .ok_or(HalError::InvalidLane { lane: fence.lane, lanes: self.lanes.len() })?;
        let start = std::time::Instant::now();
        let mut done = Vec::new();
        loop {
            self.poll(&mut done)?;
            if lane.lock().completed >= fence.seq {
                return Ok(done);
            }
            if start.elapsed() > WAIT_TIMEOUT {
                return Err(HalError::Async(format!(
                    "fence {fence:?} did not complete within {WAIT_TIMEOUT:?}: a kernel may be hung"
                )));
            }
            std::thread::yield_now();
        }
    }

    /// Whether this partition's lanes are primary-context streams (the whole-device node, see
    /// [`crate::device::ROOT_CONTEXT_ENV`]) rather than a green context's.
    pub fn on_primary_context(&self) -> bool {
        self.context == NodeContext::Primary
    }

    /// The raw stream of `lane` (for benchmarks comparing with direct driver calls).
    pub fn raw_stream(&self, lane: LaneId) -> Option<u64> {
        self.lanes.get(lane as usize).map(|l| l.lock().stream).filter(|s| !s.is_null()).map(|s| s as u64)
    }

    fn check_kernel(&self, k: &KernelLaunch) -> Result<(), Incompatibility> {
        let (grid, block) = (k.grid(), k.block());
        let threads = block.volume();
        if threads == 0 || threads > MAX_BLOCK_THREADS || grid.volume() == 0 {
            return Err(Incompatibility::InvalidLaunch(format!(
                "grid {grid} x block {block} (blocks need 1..={MAX_BLOCK_THREADS} threads, grids at least one block)"
            )));
        }
        if k.function().kind() == vitamin_hal::FunctionKind::Simulated {
            return Err(Incompatibility::UnknownFunction(format!("{} is a simulated kernel", k.function().name())));
        }
        let attrs = k.attributes();
        if attrs.needs_coresidency() {
            let per_sm = self
                .shared
                .blocks_per_sm(k.function(), threads as u32, k.shared_mem_bytes())
                .map_err(|e| Incompatibility::InvalidLaunch(format!("occupancy of {}: {e}", k.function().name())))?;
            let capacity = u64::from(per_sm) * self.units.len() as u64;
            if k.blocks() > capacity {
                return Err(Incompatibility::NotCoResident { blocks: k.blocks(), capacity });
            }
        }
        self.check_cluster(k)?;
        self.check_dynamic_shared(k)
    }

    /// A launch in thread-block clusters runs here only if this partition's SMs hold at least one
    /// cluster of its shape.
    fn check_cluster(&self, k: &KernelLaunch) -> Result<(), Incompatibility> {
        let Some(c) = k.attributes().cluster() else { return Ok(()) };
        let cb = c.volume();
        if cb == 0 || cb > MAX_CLUSTER_BLOCKS {
            return Err(Incompatibility::InvalidLaunch(format!("cluster {c} outside 1..={MAX_CLUSTER_BLOCKS} blocks")));
        }
        if self.max_active_clusters(k)? == 0 {
            return Err(Incompatibility::ClusterShape { cluster_blocks: cb, units: self.units.len() });
        }
        Ok(())
    }

    /// A launch asking for more than 48 KiB of dynamic shared memory is valid only where the
    /// function's limit was raised. The application raised it in its own (primary) context
    /// (`cuFuncSetAttribute` / `cudaFuncSetAttribute`); a green context has its own instance of the
    /// function whose limit stays at the default, and the launch fails there with
    /// `CUDA_ERROR_INVALID_VALUE` (seen on the H200 with cuDNN's convolution kernels:
    /// docs/results/apps-suite.md). So before the first such launch of a function on this partition,
    /// the limit is raised in the green context too; if the driver refuses, the function is kept
    /// on the primary-context node from then on ([`Incompatibility::ContextBound`]).
    fn check_dynamic_shared(&self, k: &KernelLaunch) -> Result<(), Incompatibility> {
        let bytes = k.shared_mem_bytes();
        let NodeContext::Green(g) = self.context else { return Ok(()) };
        if bytes <= DEFAULT_DYNAMIC_SHARED {
            return Ok(());
        }
        let handle = k.function().handle();
        let bound = |why: String| Incompatibility::ContextBound { function: k.function().name().to_string(), why };
        if self.shared.context_bound.lock().contains(&handle) {
            return Err(bound("its dynamic shared memory limit could not be raised in a green context".into()));
        }
        let is_kernel = k.function().kind() == vitamin_hal::FunctionKind::Kernel;
        // SAFETY: the handle is the descriptor's live function.
        match unsafe { self.raise_dynamic_shared(g, handle, is_kernel, bytes) } {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!(function = k.function().name(), bytes, error = %e,
                    "could not raise the dynamic shared memory limit in a green context; the function runs on the whole-device node");
                self.shared.context_bound.lock().insert(handle);
                Err(bound(e.to_string()))
            }
        }
    }

    /// Raises function `handle`'s dynamic shared memory limit to `bytes` in green context `g` (this
    /// partition's), once per function and size.
    ///
    /// # Safety
    /// `handle` must be a live `CUkernel` (`is_kernel`) or `CUfunction`.
    unsafe fn raise_dynamic_shared(
        &self,
        g: CUgreenCtx,
        handle: u64,
        is_kernel: bool,
        bytes: u32,
    ) -> Result<(), HalError> {
        let mut raised = self.dynamic_shared.lock();
        if raised.get(&handle).is_some_and(|&b| b >= bytes) {
            return Ok(());
        }
        // SAFETY: the green context is live (this partition is open); the caller guarantees the handle.
        unsafe { driver::func::raise_dynamic_shared_in(g, handle, is_kernel, bytes) }?;
        raised.insert(handle, bytes);
        Ok(())
    }

    /// After a launch on this partition failed with `CUDA_ERROR_INVALID_VALUE` although the
    /// application's context accepted it (capture validated it there): a launch that needs a raised
    /// limit is kept on the primary-context node from then on. Returns the incompatibility to
    /// report instead of the driver error, or `None` when the failure is not of that kind.
    fn context_refused(&self, k: &KernelLaunch, e: &HalError) -> Option<Incompatibility> {
        let invalid_value = matches!(e, HalError::Driver { code: 1, .. });
        if !invalid_value
            || !matches!(self.context, NodeContext::Green(_))
            || k.shared_mem_bytes() <= DEFAULT_DYNAMIC_SHARED
        {
            return None;
        }
        tracing::warn!(function = k.function().name(), bytes = k.shared_mem_bytes(), error = %e,
            "a launch valid in the application's context failed in a green context; the function runs on the whole-device node");
        self.shared.context_bound.lock().insert(k.function().handle());
        Some(Incompatibility::ContextBound { function: k.function().name().to_string(), why: e.to_string() })
    }

    /// How many clusters of `k`'s shape this partition's SMs hold at once (cached).
    fn max_active_clusters(&self, k: &KernelLaunch) -> Result<u32, Incompatibility> {
        let c = k.attributes().cluster().unwrap_or(vitamin_hal::Dim3::x(1));
        let key = (k.function().handle(), [c.x, c.y, c.z], k.block().volume() as u32, k.shared_mem_bytes());
        if let Some(&n) = self.clusters.lock().get(&key) {
            return Ok(n);
        }
        let bad = |e: HalError| Incompatibility::InvalidLaunch(format!("cluster occupancy: {e}"));
        self.shared.make_current().map_err(bad)?;
        let f = self.shared.occupancy_function(k.function()).map_err(bad)?;
        let mut attrs = [launch::RawLaunchAttribute::new(4, &cluster_bytes(c))];
        let (b, g) = (k.block(), k.grid());
        let stream = self.lanes[0].lock().stream;
        let cfg = launch::config([g.x, g.y, g.z], [b.x, b.y, b.z], k.shared_mem_bytes(), stream, &mut attrs);
        // SAFETY: `f` is a live function, the stream belongs to this live green context (so the
        // query sees this partition's SMs), and `attrs` outlives the call.
        let n = match unsafe { occupancy::max_active_clusters(f, &cfg) } {
            Ok(n) => n,
            Err(e) => {
                // Some drivers refuse a green-context stream here: ask for the whole device (null
                // stream = primary context) and scale by this partition's share of the SMs.
                tracing::debug!(%e, "cluster occupancy on a green-context stream; asking for the device");
                let cfg = launch::config(
                    [g.x, g.y, g.z],
                    [b.x, b.y, b.z],
                    k.shared_mem_bytes(),
                    std::ptr::null_mut(),
                    &mut attrs,
                );
                // SAFETY: as above, with the primary context's null stream (current on this thread).
                let device = unsafe { occupancy::max_active_clusters(f, &cfg) }.map_err(bad)?;
                let total = self.shared.caps.sm_count.max(1) as u64;
                (u64::from(device) * self.units.len() as u64 / total) as u32
            }
        };
        self.clusters.lock().insert(key, n);
        Ok(n)
    }

    /// [`PhysicalPartition::poll`] (`fence`: also records lane fences),
    /// [`PhysicalPartition::poll_for_waiter`] (`fence` and `waiter`: a hybrid lane's fences are
    /// then memory writes) or [`PhysicalPartition::poll_observing`] (only observes the fences
    /// already recorded).
    fn poll_lanes(&self, completed: &mut Vec<Fence>, fence: bool, waiter: bool) -> Result<usize, HalError> {
        if let Some(e) = self.errors.lock().take() {
            return Err(e);
        }
        let mut n = 0u64;
        for (i, l) in self.lanes.iter().enumerate() {
            let mut st = l.lock();
            if st.completed == st.submitted {
                continue;
            }
            if fence {
                self.fence_lane(&mut st, waiter)?;
            }
            let done = match st.word {
                // Memory and hybrid fences: reading the word costs no driver call.
                Some(word) => {
                    let now = self.shared.epoch.elapsed().as_nanos() as u64;
                    if st.hybrid {
                        self.hybrid_completed(&mut st, word, now)?
                    } else {
                        self.word_completed(&mut st, word, now)?
                    }
                }
                None => {
                    if self.query_deferred(&mut st) {
                        continue;
                    }
                    self.completed_upto(&st, st.completed)?
                }
            };
            let Some(upto) = done else { continue };
            trace::step(21);
            let mut idle = SmallVec::<[CUevent; 4]>::new();
            while st.events.front().is_some_and(|&(seq, _, _)| seq <= upto) {
                idle.push(st.events.pop_front().expect("non-empty").1);
            }
            self.shared.return_events(idle);
            completed.extend((st.completed + 1..=upto).map(|seq| Fence { lane: i as LaneId, seq }));
            n += upto - st.completed;
            st.completed = upto;
            while st.keepalive.front().is_some_and(|(seq, _)| *seq <= upto) {
                st.keepalive.pop_front();
            }
            // Fence what was submitted since, so the next poll can see it complete.
            if fence {
                self.fence_lane(&mut st, waiter)?;
            }
        }
        self.shared.outstanding.fetch_sub(n, Ordering::AcqRel);
        Ok(n as usize)
    }

    /// Records an event after the lane's newest op when it has unfenced ops and no event in
    /// flight, or at least [`FENCE_EVERY`] unfenced ops and fewer than [`MAX_FENCES`] events in
    /// flight. Few fences: every event recorded between two dependent kernels is a command the
    /// GPU executes between them, so recording one per poll while a chain is being continued
    /// would slow the chain itself. But not one per backlog either: a single fence behind a deep
    /// backlog reports it complete all at once, only after the lane ran dry, so the dispatcher
    /// (bounded by its continuation depth) could not refill the lane in time (measured on the
    /// H200 with the submission thread: a 10,000-kernel chain ran at the depth's pace).
    ///
    /// `waiter`: recorded for a thread waiting in a synchronize call; on a hybrid lane it is then
    /// a memory write (seen by a load; it usually follows the last op the waiter waits for,
    /// where it costs the GPU nothing between kernels), else an event.
    ///
    /// With [`crate::device::WAITER_FENCE_ENV`]`=cover` (the default), a waiter's poll on a hybrid lane also
    /// records a memory fence when none covers the lane's newest op ([`waiter_word_due`]), so that
    /// the waiter has a word to spin on even when events fence everything it waits for.
    fn fence_lane(&self, lane: &mut Lane, waiter: bool) -> Result<(), HalError> {
        let cover = waiter
            && lane.hybrid
            && self.shared.waiter_cover
            && waiter_word_due(lane.submitted, lane.completed, lane.events.len(), lane.word_covers(lane.submitted));
        if !cover && !fence_due(lane.submitted - lane.fenced, lane.events.len()) {
            return Ok(());
        }
        // Memory fence: the lane writes its newest sequence number to its word (no event).
        let (event, command) = match lane.word {
            Some(word) if !lane.hybrid || waiter => (
                std::ptr::null_mut(),
                Command::Write { stream: lane.stream, addr: word.device, value: lane.submitted, slot: 0 },
            ),
            _ => {
                let e = self.shared.take_event()?;
                (e, Command::Record { event: e, stream: lane.stream, slot: 0 })
            }
        };
        let ticket = match self.shared.submitter() {
            // Behind handed-off submissions: the fence must follow them.
            Some(sub) if !sub.idle() => {
                let t = sub.push(command.with_slot(self.slot(sub)));
                lane.last_ticket = t;
                t
            }
            _ => {
                trace::mark(Tag::IssueBegin, command.trace_arg());
                let recorded = command.run(&|| self.errors.clone());
                trace::mark(Tag::IssueEnd, 0);
                if let Err(err) = recorded {
                    self.shared.return_events([event]);
                    return Err(err);
                }
                0
            }
        };
        lane.events.push_back((lane.submitted, event, ticket));
        lane.fenced = lane.submitted;
        Ok(())
    }

    /// Memory fences: the newest sequence number the lane's word reports beyond what was already
    /// reported (a load, no driver call). While it does not advance, the stream is asked for
    /// asynchronous errors every [`ERROR_CHECK_NS`] (`now` on the backend clock): a failed kernel
    /// never lets the write run, and the error must not wait for ever.
    fn word_completed(&self, lane: &mut Lane, word: FenceWord, now: u64) -> Result<Option<u64>, HalError> {
        let v = word.load();
        if v > lane.completed {
            lane.last_query_ns = now;
            return Ok(Some(v));
        }
        if now.saturating_sub(lane.last_query_ns) >= ERROR_CHECK_NS {
            lane.last_query_ns = now;
            // SAFETY: the stream is live. An idle stream has run the write too: read again.
            if unsafe { stream::query(lane.stream) }? {
                let v = word.load();
                return Ok((v > lane.completed).then_some(v));
            }
        }
        Ok(None)
    }

    /// Hybrid fences: the newest sequence number the lane's word reports (a load), then its
    /// event fences beyond that, oldest first, up to the first not complete (one query each,
    /// see [`completed_upto`](Self::completed_upto)). While the oldest fence not seen complete is
    /// a memory write, the stream is asked for asynchronous errors every [`ERROR_CHECK_NS`] (as
    /// [`word_completed`](Self::word_completed) does). Events are queried at most every
    /// `busy_query_ns` while the submission thread still holds commands of the lane.
    fn hybrid_completed(&self, lane: &mut Lane, word: FenceWord, now: u64) -> Result<Option<u64>, HalError> {
        let w = word.load();
        let mut done = (w > lane.completed).then_some(w);
        let completed = lane.completed;
        let reached = |done: Option<u64>| done.unwrap_or(completed);
        let Some((_, e, _)) = lane.events.iter().find(|&&(upto, _, _)| upto > reached(done)).copied() else {
            return Ok(done);
        };
        if e.is_null() {
            // The oldest fence not seen complete is a memory write: the word, and the stream's
            // errors every ERROR_CHECK_NS.
            if done.is_none() {
                done = self.word_completed(lane, word, now)?;
            }
        } else if !self.query_deferred(lane) {
            done = self.completed_upto(lane, reached(done))?.or(done);
        }
        Ok(done)
    }

    /// Whether this poll skips querying `lane`'s fence events: while the submission thread still
    /// holds commands of the lane, nobody can be waiting for the lane's newest op to complete
    /// yet, so its fences are queried at most every `busy_query_ns` (enough to refill
    /// continuation depth) instead of at every poll, which would compete with the submission
    /// thread's launches in the driver.
    fn query_deferred(&self, lane: &mut Lane) -> bool {
        if self.shared.submitter().is_some_and(|sub| sub.executed() < lane.last_ticket) {
            let now = self.shared.epoch.elapsed().as_nanos() as u64;
            if now.saturating_sub(lane.last_query_ns) < self.shared.busy_query_ns.load(Ordering::Relaxed) {
                return true;
            }
            lane.last_query_ns = now;
        }
        false
    }

    /// The sequence number the lane's fence event covers, if that event completed (one query,
    /// about 1.3 us on the H200, FACTS.md). An event whose record the submission thread has not
    /// issued yet (or failed to issue) is not queried: an event never recorded reports complete.
    /// Queries the lane's fences oldest first and stops at the first not complete (a lane's ops
    /// complete in order): one query per poll while the oldest runs.
    /// Issues (or hands off) one submission on `lane` (see [`PhysicalPartition::submit`] and
    /// [`PhysicalPartition::submit_native`]): a native launch is only ever issued directly, and
    /// refused ([`HalError::Busy`]) while earlier hand-offs are pending, since its argument
    /// pointers are the caller's and live only during its call.
    /// The launch of this partition's copy of graph `g`, made at its first launch here: for a
    /// green-context partition short of the whole device and a graph that carries copies. `None`:
    /// launch `g` itself (the whole device's node, a graph without copies, or a copy that could not
    /// be made, which `CudaGraphCopies` logs once).
    fn graph_copy(&self, g: &GraphLaunch) -> Option<GraphLaunch> {
        let copies = cuda_copies(g)?;
        let NodeContext::Green(gc) = self.context else { return None };
        if self.units.len() >= self.shared.caps.sm_count as usize {
            return None;
        }
        // SAFETY: the green context lives as long as this partition.
        let ctx = match unsafe { driver::graphs::green_context(gc) } {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no CUcontext for a green context: the graph runs on the whole device");
                return None;
            }
        };
        // A kernel node asking for more than the default dynamic shared memory needs the limit
        // raised in this green context too (as `check_dynamic_shared` does for a launch).
        let raise = |kern: u64, bytes: u32| {
            if bytes <= DEFAULT_DYNAMIC_SHARED {
                return Ok(());
            }
            // SAFETY: `kern` is a kernel node's live CUkernel (the snapshot holds it).
            unsafe { self.raise_dynamic_shared(gc, kern, true, bytes) }
        };
        copies.exec_for(ctx, &raise).map(|exec| g.retargeted(exec))
    }

    fn submit_on(&self, lane: LaneId, what: Submission<'_>) -> Result<Fence, HalError> {
        let l = self.lanes.get(lane as usize).ok_or(HalError::InvalidLane { lane, lanes: self.lanes.len() })?;
        trace::step(14);
        self.shared.make_current()?;
        trace::step(15);
        let mut st = l.lock();
        if st.stream.is_null() {
            st.stream = self.new_stream()?;
        }
        trace::step(16);
        let sub = self.shared.submitter();
        let decision = sub.map_or(HandOff::Direct, |s| s.should_hand_off());
        trace::step(17);
        let staged = match &what {
            Submission::Desc(op) => match &***op {
                OpDesc::Copy(c) => match c.src() {
                    Endpoint::Staged(b) => Some(b.clone()),
                    _ => None,
                },
                _ => None,
            },
            Submission::Native(_) => None,
        };
        let direct = match (sub, decision, what) {
            (Some(sub), HandOff::Yes, Submission::Desc(op)) => {
                st.last_ticket = sub.push(Command::Issue { stream: st.stream, op: op.clone(), slot: self.slot(sub) });
                false
            }
            (Some(_), HandOff::Yes, Submission::Native(_)) => {
                return Err(HalError::Busy("earlier submissions are not issued yet".into()));
            }
            (_, _, what) => {
                trace::mark(Tag::IssueBegin, st.stream as u64);
                let issued = match what {
                    Submission::Desc(op) => issue(st.stream, op, &|| self.errors.clone()),
                    Submission::Native(f) => f(st.stream as u64),
                };
                trace::mark(Tag::IssueEnd, 0);
                if let Err(e) = issued {
                    if let (Some(sub), HandOff::DirectThenWake) = (sub, decision) {
                        sub.wake();
                    }
                    return Err(e);
                }
                true
            }
        };
        if let Some(b) = staged {
            let seq = st.submitted + 1;
            st.keepalive.push_back((seq, b));
        }
        st.submitted += 1;
        self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
        let fence = Fence { lane, seq: st.submitted };
        // A lone submission (issued here, the lane without a fence in flight) is fenced at once:
        // the fence then runs right behind the op, and its completion is seen as soon as the op
        // ends instead of after the next poll's record (measured on the H200: a launch-sync loop
        // otherwise waited for a fence recorded after its kernel had finished). A failed record
        // is left to the next poll, which records again.
        // And a lane receiving a burst (a chain continued many ops in one dispatcher round) is
        // fenced every FENCE_EVERY submissions: a poll would only fence it after the round,
        // with one fence behind the whole burst (up to the continuation depth), so the lane ran
        // dry before its first completion was seen (measured on the H200: in one traced
        // 10,000-kernel chain, completions of 255 ops at a time and the submission thread idle
        // for a sixth of it).
        if fence_at_submission(st.submitted - st.fenced, st.events.len(), direct) {
            if let Err(e) = self.fence_lane(&mut st, false) {
                tracing::debug!(error = %e, "fence record at submission failed; the next poll fences");
            }
        }
        drop(st);
        if let (Some(sub), HandOff::DirectThenWake) = (sub, decision) {
            sub.wake();
        }
        Ok(fence)
    }

    ///
    /// Only fences beyond sequence number `after` are considered, and a memory fence (a hybrid
    /// lane's null event) ends the scan: its word tells.
    fn completed_upto(&self, lane: &Lane, after: u64) -> Result<Option<u64>, HalError> {
        let mut done = None;
        for &(upto, e, ticket) in lane.events.iter().filter(|&&(upto, _, _)| upto > after) {
            if e.is_null() {
                break;
            }
            if ticket > 0 {
                let issued = self.shared.submitter().is_none_or(|sub| sub.executed() >= ticket);
                if !issued || self.errors.lock().is_some() {
                    break;
                }
            }
            // SAFETY: events in the lane's queue are live.
            if !unsafe { event::query(e) }? {
                break;
            }
            done = Some(upto);
        }
        Ok(done)
    }
}

/// Whether a lane with `unfenced` ops after its newest fence and `in_flight` fences not yet
/// seen complete gets a fence (from a poll): it has unfenced ops and no fence in flight, or
/// [`FENCE_EVERY`] unfenced ops and fewer than [`MAX_FENCES`] fences in flight.
fn fence_due(unfenced: u64, in_flight: usize) -> bool {
    unfenced > 0 && (in_flight == 0 || (unfenced >= FENCE_EVERY && in_flight < MAX_FENCES))
}

/// Whether a waiting thread's poll on a hybrid lane records a memory fence although none is due
/// ([`crate::device::WAITER_FENCE_ENV`]`=cover`, the default): the lane has ops not seen complete
/// (`submitted` > `completed`), no memory fence covers the newest (`covered`), and fewer than
/// [`MAX_FENCES`] fences are in flight.
fn waiter_word_due(submitted: u64, completed: u64, in_flight: usize, covered: bool) -> bool {
    submitted > completed && !covered && in_flight < MAX_FENCES
}

/// Whether a submission just made (issued `direct`ly or handed off) gets a fence at once: a lone
/// direct submission on a lane without a fence in flight, or the [`FENCE_EVERY`]-th unfenced op
/// while fewer than [`MAX_FENCES`] are in flight.
fn fence_at_submission(unfenced: u64, in_flight: usize, direct: bool) -> bool {
    fence_due(unfenced, in_flight) && ((direct && in_flight == 0) || unfenced >= FENCE_EVERY)
}

/// What [`CudaPartition::submit_on`] issues: a descriptor, or a launch the caller makes itself on
/// the lane's stream (its handle as an integer).
enum Submission<'a> {
    Desc(&'a Arc<OpDesc>),
    Native(&'a mut dyn FnMut(u64) -> Result<(), HalError>),
}

/// Issues `op` on stream `s` (one driver call; see the module docs). Host functions report panics
/// into `errors`. Staged copy sources must be kept alive by the caller until the op completes.
pub(crate) fn issue(s: CUstream, op: &OpDesc, errors: &dyn Fn() -> Errors) -> Result<(), HalError> {
    match op {
        OpDesc::Kernel(k) => launch_kernel(s, k),
        OpDesc::Copy(c) => {
            let addr = |e: &Endpoint| match e {
                Endpoint::Device(a) | Endpoint::Host(a) => *a,
                Endpoint::Staged(b) => b.as_ptr() as u64,
            };
            // SAFETY: device and host addresses are the application's promise (as with the
            // native call); staged bytes are kept alive by the lane until the copy's fence completes.
            unsafe { mem::copy_async(addr(c.dst()), addr(c.src()), c.bytes() as usize, s) }
        }
        OpDesc::Fill(f) => {
            // SAFETY: the destination is the application's device memory, as natively.
            unsafe { mem::fill_async(f.dst(), f.value(), f.element_size(), f.count() as usize, s) }
        }
        OpDesc::Host(h) => {
            let call = Box::new(HostCall { function: h.clone(), errors: errors() });
            let user = Box::into_raw(call).cast::<c_void>();
            // SAFETY: `s` is live; the trampoline takes ownership of `user` exactly once.
            let r = unsafe { launch::host_func(s, host_trampoline, user) };
            if r.is_err() {
                // SAFETY: the driver did not take the callback, so the box is still ours.
                drop(unsafe { Box::from_raw(user.cast::<HostCall>()) });
            }
            r
        }
        OpDesc::Graph(g) => {
            // SAFETY: the executable graph is the application's live handle, as natively, or a
            // copy that `g` keeps alive (`CudaGraphCopies` destroys its copies on drop).
            let r = unsafe { launch::graph(g.graph_exec(), s) };
            match (r, cuda_copies(g)) {
                (Err(e), Some(c)) if c.original() != g.graph_exec() => {
                    // A copy the driver refuses (a kernel that does not fit the partition as
                    // launched): the application's own graph runs instead, on the whole device.
                    tracing::warn!(error = %e, graph = c.original(), "a graph copy's launch failed; launching the application's graph");
                    c.note_fallback();
                    // SAFETY: as above.
                    unsafe { launch::graph(c.original(), s) }
                }
                (r, _) => r,
            }
        }
        OpDesc::Marker(_) => Ok(()),
    }
}

/// The CUDA copies a graph launch carries, if any.
fn cuda_copies(g: &GraphLaunch) -> Option<&CudaGraphCopies> {
    g.copies().and_then(|c| c.as_any().downcast_ref::<CudaGraphCopies>())
}

/// Launches `f` with the caller's own parameter pointers on `stream`, a lane's native stream as
/// handed to a [`PhysicalPartition::submit_native`] closure: `cuLaunchKernel` with no `extra`
/// and no attributes, exactly the launch the caller describes.
///
/// # Safety
/// `f` is a live `CUfunction` or `CUkernel` handle, `stream` the handle the closure received, and
/// `params` holds one pointer per parameter of `f` (or is null when it takes none), each valid
/// for the duration of the call (the driver copies the values at launch).
pub unsafe fn launch_native(
    f: u64,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem_bytes: u32,
    stream: u64,
    params: *mut *mut c_void,
) -> Result<(), HalError> {
    // SAFETY: forwarded from the caller's contract above.
    unsafe { launch::kernel(f as driver::CUfunction, grid, block, shared_mem_bytes, stream as CUstream, params) }
}

/// Launches `k` unchanged on stream `s` with `cuLaunchKernelEx` (its function, grid, block, dynamic
/// shared memory, attributes; one parameter pointer per parameter into its argument bytes), or with
/// `cuLaunchKernel` when it has no attributes.
pub(crate) fn launch_kernel(s: CUstream, k: &KernelLaunch) -> Result<(), HalError> {
    let args = k.args();
    let base = args.bytes().as_ptr();
    let mut params: SmallVec<[*mut c_void; 16]> = args
        .params()
        .iter()
        // The driver only reads through these pointers; `from_layout` checked the bounds.
        .map(|p| base.wrapping_add(p.offset as usize).cast_mut().cast::<c_void>())
        .collect();
    let a = k.attributes();
    let mut attrs: SmallVec<[launch::RawLaunchAttribute; 4]> = SmallVec::new();
    if a.cooperative() {
        attrs.push(launch::RawLaunchAttribute::new(2, &1i32.to_le_bytes()));
    }
    if let Some(c) = a.cluster() {
        attrs.push(launch::RawLaunchAttribute::new(4, &cluster_bytes(c)));
    }
    if let Some(p) = a.priority() {
        attrs.push(launch::RawLaunchAttribute::new(8, &p.to_le_bytes()));
    }
    for r in a.raw() {
        attrs.push(launch::RawLaunchAttribute::new(r.id, &r.value));
    }
    let (g, b) = (k.grid(), k.block());
    let params_ptr = if params.is_empty() { std::ptr::null_mut() } else { params.as_mut_ptr() };
    if attrs.is_empty() {
        // SAFETY: as below; without attributes `cuLaunchKernel` is the same launch.
        return unsafe {
            launch::kernel(
                k.function().handle() as driver::CUfunction,
                [g.x, g.y, g.z],
                [b.x, b.y, b.z],
                k.shared_mem_bytes(),
                s,
                params_ptr,
            )
        };
    }
    let cfg = launch::config([g.x, g.y, g.z], [b.x, b.y, b.z], k.shared_mem_bytes(), s, &mut attrs);
    // SAFETY: the function handle is a live CUfunction or CUkernel (the descriptor's), `s` is a
    // live stream of this partition, `params` holds one pointer per parameter into the
    // descriptor's argument bytes (alive for the call; the driver copies them at launch), and
    // `attrs` outlives the call.
    unsafe { launch::kernel_ex(&cfg, k.function().handle() as driver::CUfunction, params_ptr) }
}

fn cluster_bytes(c: vitamin_hal::Dim3) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&c.x.to_le_bytes());
    b[4..8].copy_from_slice(&c.y.to_le_bytes());
    b[8..].copy_from_slice(&c.z.to_le_bytes());
    b
}

impl PhysicalPartition for CudaPartition {
    fn units(&self) -> &UnitSet {
        &self.units
    }

    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn can_execute(&self, op: &OpDesc) -> Result<(), Incompatibility> {
        match op {
            OpDesc::Kernel(k) => self.check_kernel(k),
            // Measured on the H200 (docs/results/shim-bind-suite.md, graph census): a graph
            // instantiated in the primary context and launched on a green-context stream runs its
            // kernels on all 132 SMs, not the green context's. Only the whole device accounts for
            // that truthfully, so a graph is bound to a node holding every SM, unless it carries
            // copies ([`crate::copies`]): then this partition runs its own copy.
            OpDesc::Graph(g) if self.units.len() < self.shared.caps.sm_count as usize => match cuda_copies(g) {
                None => Err(Incompatibility::WholeDevice {
                    what: "a CUDA graph launch".into(),
                    units: self.units.len(),
                    device: self.shared.caps.sm_count as usize,
                }),
                // A copy runs its cluster kernel nodes here only if this partition places each
                // node's cluster shape, as for a cluster launch of its own.
                Some(c) => c.cluster_nodes().iter().try_for_each(|k| self.check_cluster(k)),
            },
            _ => Ok(()),
        }
    }

    fn submit(&self, lane: LaneId, op: &Arc<OpDesc>) -> Result<Fence, HalError> {
        if let OpDesc::Graph(g) = &**op {
            if let Some(copy) = self.graph_copy(g) {
                return self.submit_on(lane, Submission::Desc(&Arc::new(OpDesc::Graph(copy))));
            }
        }
        let OpDesc::Kernel(k) = &**op else { return self.submit_on(lane, Submission::Desc(op)) };
        self.check_kernel(k)?;
        self.submit_on(lane, Submission::Desc(op))
            .map_err(|e| self.context_refused(k, &e).map(HalError::Incompatible).unwrap_or(e))
    }

    fn submit_native(
        &self,
        lane: LaneId,
        issue: &mut dyn FnMut(u64) -> Result<(), HalError>,
    ) -> Result<Fence, HalError> {
        self.submit_on(lane, Submission::Native(issue))
    }

    fn poll(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll_lanes(completed, true, false)
    }

    fn poll_for_waiter(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll_lanes(completed, true, true)
    }

    fn lane_progress(&self, lane: LaneId, seq: u64) -> Option<LaneProgress> {
        let st = self.lanes.get(lane as usize)?.lock();
        let word = st.word?;
        // Only memory fences advance the word: one covering `seq` must be recorded (or handed
        // to the submission thread). One already seen complete has left the queue: the poll
        // that saw it reported `seq`.
        if !st.word_covers(seq) {
            return None;
        }
        let keep = self.shared.clone();
        Some(LaneProgress::new(move || {
            // The page holding the word is freed only with `Shared`, which `keep` holds.
            let _ = &keep;
            word.load()
        }))
    }

    fn poll_observing(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll_lanes(completed, false, false)
    }

    fn synchronize(&self) -> Result<(), HalError> {
        self.shared.flush_submissions();
        for l in self.lanes.iter() {
            let s = l.lock().stream;
            if s.is_null() {
                continue;
            }
            // SAFETY: the stream lives as long as the partition.
            unsafe { stream::synchronize(s) }.map_err(|e| match e.native_code() {
                Some(code) => HalError::AsyncDriver { code, message: e.to_string() },
                None => HalError::Async(e.to_string()),
            })?;
        }
        match self.errors.lock().take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl CudaPartition {
    /// Drains every lane, destroys the streams and the green context, and reports the first
    /// failure (dropping does the same but can only log failures). Idempotent.
    pub fn close(mut self) -> Result<(), HalError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), HalError> {
        if self.context == NodeContext::Closed {
            return Ok(());
        }
        self.shared.flush_submissions();
        let mut first: Option<HalError> = None;
        let mut note = |r: Result<(), HalError>| {
            if let Err(e) = r {
                tracing::warn!(err = %e, "green context teardown");
                first.get_or_insert(e);
            }
        };
        note(self.shared.make_current());
        for l in self.lanes.iter_mut() {
            let st = l.get_mut();
            if st.stream.is_null() {
                continue;
            }
            // SAFETY: the stream is live; draining before destruction is required.
            note(unsafe { stream::synchronize(st.stream) });
            // SAFETY: drained and never used again.
            note(unsafe { stream::destroy(st.stream) });
            self.shared.return_events(st.events.drain(..).map(|(_, e, _)| e));
            self.shared.outstanding.fetch_sub(st.submitted - st.completed, Ordering::AcqRel);
        }
        self.lanes = Box::new([]);
        if let NodeContext::Green(g) = self.context {
            // SAFETY: every stream of the green context was drained and destroyed above.
            note(unsafe { green::destroy(g) });
        }
        self.context = NodeContext::Closed;
        first.map_or(Ok(()), Err)
    }
}

impl Drop for CudaPartition {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Step {
        /// A submission, issued directly or handed off.
        Submit { direct: bool },
        /// A poll that sees this many of the oldest fences complete (then fences as polls do).
        Poll { complete: usize },
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => any::<bool>().prop_map(|direct| Step::Submit { direct }),
            1 => (0usize..=MAX_FENCES).prop_map(|complete| Step::Poll { complete }),
        ]
    }

    proptest! {
        /// A lane's fences, modelled as the sequence numbers they cover: however submissions and
        /// polls interleave (a burst of hundreds of submissions between two polls included), no
        /// more than FENCE_EVERY ops are ever left unfenced while fewer than MAX_FENCES fences are
        /// in flight, fences never exceed MAX_FENCES, and each covers newer ops than the last.
        #[test]
        fn bursts_are_fenced_every_fence_every_ops(steps in proptest::collection::vec(step(), 1..600)) {
            let (mut submitted, mut fenced) = (0u64, 0u64);
            let mut fences: VecDeque<u64> = VecDeque::new();
            for s in steps {
                match s {
                    Step::Submit { direct } => {
                        submitted += 1;
                        if fence_at_submission(submitted - fenced, fences.len(), direct) {
                            fences.push_back(submitted);
                            fenced = submitted;
                        }
                        prop_assert!(submitted - fenced < FENCE_EVERY || fences.len() == MAX_FENCES,
                            "{} unfenced ops with {} fences in flight", submitted - fenced, fences.len());
                    }
                    Step::Poll { complete } => {
                        for _ in 0..complete.min(fences.len()) {
                            fences.pop_front();
                        }
                        if fence_due(submitted - fenced, fences.len()) {
                            fences.push_back(submitted);
                            fenced = submitted;
                        }
                    }
                }
                prop_assert!(fences.len() <= MAX_FENCES);
                prop_assert!(fences.iter().zip(fences.iter().skip(1)).all(|(a, b)| a < b));
            }
        }
    }

    #[test]
    fn a_lone_direct_submission_is_fenced_at_once_and_a_handed_off_one_waits() {
        assert!(fence_at_submission(1, 0, true));
        assert!(!fence_at_submission(1, 0, false));
        assert!(!fence_at_submission(1, 1, true));
        assert!(fence_at_submission(FENCE_EVERY, 1, false));
        assert!(!fence_at_submission(FENCE_EVERY, MAX_FENCES, false));
    }

    #[test]
    fn a_waiter_covers_the_newest_op_with_a_word_unless_one_does_or_nothing_is_outstanding() {
        // The traced operator of docs/results/shim-bind-overhead.md: 8 ops, an event (recorded by
        // another thread's poll) covers them, no word does: the waiter's poll writes one although
        // no fence is due.
        assert!(!fence_due(0, 1));
        assert!(waiter_word_due(8, 1, 1, false));
        // A word already covers the newest op, or everything was seen complete: nothing more.
        assert!(!waiter_word_due(8, 1, 2, true));
        assert!(!waiter_word_due(8, 8, 0, false));
        // Never beyond the bound on fences in flight.
        assert!(!waiter_word_due(8, 1, MAX_FENCES, false));
    }
}
