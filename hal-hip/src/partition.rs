//! [`HipPartition`]: one pool node realized as N CU-masked streams (its lanes); submission,
//! fences, teardown.
//!
//! ## Realization
//! Where the backend realizes partitions over HIP green contexts ([`crate::green`]: the probe
//! found them and the configuration does not say `cu-mask`), a node's lanes are streams of one
//! green context holding exactly its CUs (`hipExecutionCtxStreamCreate`, CU-masked streams
//! underneath), checked like the others below; a node green contexts cannot express falls back to
//! the CU-masked streams described next. A failing stream creation fails the partition on either
//! path (queues run out for both alike).
//!
//! Every lane is a stream from `hipExtStreamCreateWithCUMask` with exactly the node's CU bits
//! (the whole-device node too, with every bit, so that all lanes have the same stream semantics),
//! created once and never reconfigured: a mask change preempts queues device-wide (FACTS.md).
//! Each mask is read back with `hipExtStreamGetCUMask`; a stream whose mask differs (the runtime
//! ANDs masks with `ROC_GLOBAL_CU_MASK` / `HSA_CU_MASK`) fails the creation, since its work would
//! not run on the node's CUs. A lane that fails to create fails the partition; the streams made
//! before it are destroyed, and the stream reservation is released.
//!
//! ## Submission
//! A descriptor is submitted exactly as described: a kernel with `hipModuleLaunchKernel` (same
//! function, grid, block, dynamic shared memory; one parameter pointer per parameter into the
//! descriptor's argument bytes; a host stub, `FunctionKind::Kernel`, with `hipLaunchKernel`), a
//! cooperative kernel with `hipModuleLaunchCooperativeKernel`
//! (only on the whole-device node: CU masks do not apply to cooperative launches, FACTS.md), a copy
//! with `hipMemcpyAsync`, a fill with `hipMemsetD{8,16,32}Async`, a host function with
//! `hipLaunchHostFunc` (or `hipStreamAddCallback` on HIP 5.2, which lacks it), a graph with
//! `hipGraphLaunch` (whole-device node only), a marker with nothing.
//!
//! ## Fences
//! A lane's ops complete in order, so one fence after its newest op covers all before it. A lone
//! submission on a lane with no fence in flight is fenced at once; otherwise a poll fences a lane
//! that has unfenced ops and no fence in flight, or [`FENCE_EVERY`] unfenced ops and fewer than
//! [`MAX_FENCES`] in flight. A fence is an event (`hipEventRecord`, polled with
//! `hipEventQuery`) or, with the configuration's `fence = "memory"`, a `hipStreamWriteValue64` of the lane's
//! newest sequence number into a mapped host word that polls read with a load (the stream is
//! asked for asynchronous errors every [`ERROR_CHECK_NS`] while the word lags). An asynchronous
//! failure (the runtime's error from the query) is returned by the next poll or synchronize as
//! `HalError::AsyncDriver` with the runtime's error code and name (a panicking host function:
//! `HalError::Async`).
//!
//! ## Teardown
//! Dropping a partition synchronizes every lane, returns its events and destroys its streams.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use vitamin_hal::{
    Endpoint, Fence, HalError, HostFunction, Incompatibility, KernelLaunch, LaneId, LaneProgress, OpDesc,
    PhysicalPartition, UnitSet,
};

use crate::device::{FenceMode, Shared};
use crate::driver::{self, Api, HipError, HipEvent, HipStream};
use crate::green::{GreenContext, PartitionRealization, Realization};

/// A lane with this many unfenced ops gets another fence even while one is in flight.
pub const FENCE_EVERY: u64 = 64;
/// Most fences in flight per lane.
pub const MAX_FENCES: usize = 4;
/// Memory fences: least time between error queries of a lane whose word lags, ns.
pub const ERROR_CHECK_NS: u64 = 100_000;

/// Per-lane state, guarded by the lane's mutex.
struct Lane {
    stream: HipStream,
    /// Newest submitted sequence number.
    submitted: u64,
    /// Newest sequence number covered by a fence.
    fenced: u64,
    /// Newest sequence number reported complete.
    completed: u64,
    /// Fences in flight, oldest first: the sequence number each covers and its event (null for a
    /// memory fence).
    fences: VecDeque<(u64, HipEvent)>,
    /// Staged host bytes that must outlive the copies reading them.
    keepalive: VecDeque<(u64, Arc<[u8]>)>,
    /// Memory fences: the lane's word (host address, device address).
    word: Option<(u64, u64)>,
    /// Memory fences: when the stream was last asked for errors.
    last_error_check_ns: u64,
}

// SAFETY: the stream and events are runtime handles usable from any thread; the lane is touched
// only under its mutex.
unsafe impl Send for Lane {}

impl Lane {
    fn word_value(&self) -> Option<u64> {
        // SAFETY: the word is 8 aligned bytes of mapped host memory owned by `Shared`, which the
        // partition keeps alive; the device writes it, so it is read atomically.
        self.word.map(|(host, _)| unsafe { &*(host as *const AtomicU64) }.load(Ordering::Acquire))
    }
}

/// What a host-function callback receives.
struct HostCall {
    function: HostFunction,
    errors: Arc<Mutex<Option<String>>>,
}

fn run_host_call(user: *mut c_void) {
    // SAFETY: `user` is the `Box<HostCall>` leaked by `issue`; the runtime calls back exactly once.
    let call = unsafe { Box::from_raw(user.cast::<HostCall>()) };
    let f = call.function.clone();
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f.invoke())).is_err() {
        call.errors.lock().get_or_insert_with(|| format!("host function {} panicked", call.function.name()));
    }
}

unsafe extern "C" fn host_fn_trampoline(user: *mut c_void) {
    run_host_call(user);
}

unsafe extern "C" fn stream_callback_trampoline(_stream: HipStream, _status: HipError, user: *mut c_void) {
    run_host_call(user);
}

/// A pool node realized as CU-masked streams (made directly or by a green context).
pub struct HipPartition {
    units: UnitSet,
    whole_device: bool,
    /// The CU mask every lane was created with (32-bit words, bit i = logical CU i).
    mask: Vec<u32>,
    lanes: Vec<Mutex<Lane>>,
    shared: Arc<Shared>,
    /// Streams reserved against the bound (released on drop).
    reserved: usize,
    host_errors: Arc<Mutex<Option<String>>>,
    realization: Realization,
    /// The node's green context, when its lanes are its streams (dropped after them).
    green: Option<GreenContext>,
}

// SAFETY: handles are runtime objects usable from any thread; mutable state is behind mutexes.
unsafe impl Send for HipPartition {}
// SAFETY: as above.
unsafe impl Sync for HipPartition {}

impl std::fmt::Debug for HipPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipPartition").field("units", &self.units).field("lanes", &self.lanes.len()).finish()
    }
}

/// The CU mask of `units` as `words` 32-bit words.
pub fn cu_mask(units: &UnitSet, cu_count: usize) -> Vec<u32> {
    let mut words = vec![0u32; cu_count.div_ceil(32).max(1)];
    for u in units.iter().filter(|&u| u < cu_count) {
        words[u / 32] |= 1 << (u % 32);
    }
    words
}

/// Why a green-context realization did not happen.
enum GreenFailure {
    /// The node cannot be realized over a green context (the reason); CU masks can.
    Fallback(String),
    /// A failure that CU masks would meet as well (a stream creation, a fence word).
    Error(HalError),
}

impl From<HalError> for GreenFailure {
    fn from(e: HalError) -> Self {
        GreenFailure::Error(e)
    }
}

impl HipPartition {
    /// Creates `lanes` streams with `units`' mask: over a green context of the node's CUs where
    /// the backend realizes partitions so (falling back to CU-masked streams, with the reason
    /// logged, when it cannot and the configuration says `auto`), else CU-masked streams. `lanes`
    /// streams are already reserved against the bound; the partition releases them when dropped
    /// (also when creation fails here).
    pub(crate) fn create(
        shared: Arc<Shared>,
        units: UnitSet,
        whole_device: bool,
        lanes: usize,
    ) -> Result<HipPartition, HalError> {
        let mask = cu_mask(&units, shared.caps.cu_count as usize);
        let mut part = HipPartition {
            units,
            whole_device,
            mask,
            lanes: Vec::with_capacity(lanes),
            shared,
            reserved: lanes,
            host_errors: Arc::new(Mutex::new(None)),
            realization: Realization::CuMask,
            green: None,
        };
        part.shared.make_current()?;
        let choice = part.shared.partitions;
        if choice != PartitionRealization::CuMask {
            match part.create_green_lanes(lanes) {
                Ok(()) => return Ok(part),
                Err(GreenFailure::Error(e)) => return Err(e),
                Err(GreenFailure::Fallback(reason)) => {
                    part.destroy_lanes();
                    part.green = None;
                    if choice == PartitionRealization::GreenContext {
                        return Err(HalError::Unsupported {
                            backend: driver::BACKEND,
                            reason: format!("partitions = \"green-context\": node {:?}: {reason}", part.units),
                        });
                    }
                    tracing::warn!(
                        units = ?part.units,
                        %reason,
                        "hip: this node cannot be realized over a green context; using CU-masked streams"
                    );
                }
            }
        }
        let api = part.shared.api.clone();
        for _ in 0..lanes {
            let mut s = std::ptr::null_mut();
            // SAFETY: out-pointer is a live local; the mask holds `len` words.
            api.check("hipExtStreamCreateWithCUMask", unsafe {
                (api.hipExtStreamCreateWithCUMask)(&mut s, part.mask.len() as u32, part.mask.as_ptr())
            })?;
            part.add_lane(s)?;
            part.check_mask(s)?;
        }
        Ok(part)
    }

    /// Creates the green context and its `lanes` streams.
    fn create_green_lanes(&mut self, lanes: usize) -> Result<(), GreenFailure> {
        let cu_count = self.shared.caps.cu_count as usize;
        let ctx = GreenContext::create(&self.shared.api, self.shared.ordinal, &self.units, cu_count)
            .map_err(GreenFailure::Fallback)?;
        let green = self.green.insert(ctx);
        let mut streams = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            match green.create_stream() {
                Ok(s) => streams.push(s),
                Err(e) => {
                    let err = self.shared.api.check("hipExecutionCtxStreamCreate", e).unwrap_err();
                    for s in streams {
                        self.add_lane(s)?;
                    }
                    return Err(GreenFailure::Error(err));
                }
            }
        }
        for s in streams {
            self.add_lane(s)?;
            match self.check_mask(s) {
                Ok(()) => {}
                Err(HalError::InvalidPartition(why)) => return Err(GreenFailure::Fallback(why)),
                Err(e) => return Err(GreenFailure::Error(e)),
            }
        }
        self.realization = Realization::GreenContext;
        Ok(())
    }

    /// Adds a lane on the new stream `s` (destroyed with the partition from now on).
    fn add_lane(&mut self, s: HipStream) -> Result<(), HalError> {
        let word = match self.shared.fence_mode {
            FenceMode::Memory => Some(self.shared.fence_word()),
            FenceMode::Event => None,
        };
        self.lanes.push(Mutex::new(Lane {
            stream: s,
            submitted: 0,
            fenced: 0,
            completed: 0,
            fences: VecDeque::new(),
            keepalive: VecDeque::new(),
            word: None,
            last_error_check_ns: 0,
        }));
        if let Some(w) = word {
            self.lanes.last().expect("just pushed").lock().word = Some(w?);
        }
        Ok(())
    }

    /// Reads back `s`'s CU mask: `InvalidPartition` when it is not the node's.
    fn check_mask(&self, s: HipStream) -> Result<(), HalError> {
        let api = self.api();
        let mut back = vec![0u32; self.mask.len()];
        // SAFETY: `s` is live; `back` holds `len` words.
        api.check("hipExtStreamGetCUMask", unsafe {
            (api.hipExtStreamGetCUMask)(s, back.len() as u32, back.as_mut_ptr())
        })?;
        if back != self.mask {
            return Err(HalError::InvalidPartition(format!(
                "a stream created with CU mask {} reads back {}: the runtime restricts CUs (is ROC_GLOBAL_CU_MASK \
                 or HSA_CU_MASK set?), so its work would not run on exactly the node's CUs",
                mask_hex(&self.mask),
                mask_hex(&back)
            )));
        }
        Ok(())
    }

    /// Destroys the lanes' streams (no op was submitted to them).
    fn destroy_lanes(&mut self) {
        let api = self.shared.api.clone();
        for l in self.lanes.drain(..) {
            let st = l.into_inner();
            // SAFETY: the stream is live, idle and never used again.
            if let Err(e) = api.check("hipStreamDestroy", unsafe { (api.hipStreamDestroy)(st.stream) }) {
                tracing::warn!(error = %e, "hip partition: destroying a green-context stream");
            }
        }
    }

    /// How this partition's streams were made.
    pub fn realization(&self) -> Realization {
        self.realization
    }

    /// The CU mask of every lane (32-bit words, least significant first).
    pub fn cu_mask(&self) -> &[u32] {
        &self.mask
    }

    /// The native stream of `lane` (for an interposer's own launches and for tests).
    pub fn stream(&self, lane: LaneId) -> Option<u64> {
        self.lanes.get(lane as usize).map(|l| l.lock().stream as u64)
    }

    /// Whether this partition holds every CU (where cooperative launches and graphs go).
    pub fn is_whole_device(&self) -> bool {
        self.whole_device
    }

    fn api(&self) -> &Api {
        &self.shared.api
    }

    fn check_kernel(&self, k: &KernelLaunch) -> Result<(), Incompatibility> {
        let caps = &self.shared.caps;
        let threads = k.block().volume();
        let (g, b) = (k.grid(), k.block());
        if threads == 0 || threads > u64::from(caps.max_threads_per_block) || k.blocks() == 0 {
            return Err(Incompatibility::InvalidLaunch(format!(
                "grid {g} x block {b} (blocks need 1..={} threads)",
                caps.max_threads_per_block
            )));
        }
        let a = k.attributes();
        if a.cluster().is_some() {
            return Err(Incompatibility::InvalidLaunch("AMD GPUs have no thread-block clusters".into()));
        }
        if a.priority().is_some() || !a.raw().is_empty() {
            return Err(Incompatibility::InvalidLaunch(
                "launch attributes other than cooperative cannot be passed to hipModuleLaunchKernel".into(),
            ));
        }
        match k.function().kind() {
            vitamin_hal::FunctionKind::Function => {}
            // A host stub (`hipLaunchKernel`'s function address), launched with hipLaunchKernel.
            vitamin_hal::FunctionKind::Kernel if !a.cooperative() && self.api().hipLaunchKernel.is_some() => {}
            _ => {
                return Err(Incompatibility::UnknownFunction(format!(
                    "{} is not a HIP function (or a host stub this runtime launches)",
                    k.function().name()
                )))
            }
        }
        if a.cooperative() && !caps.module_cooperative_launch {
            return Err(Incompatibility::InvalidLaunch(
                "cooperative launch of a module function needs hipModuleLaunchCooperativeKernel (ROCm 6+)".into(),
            ));
        }
        // A kernel that spins on peers runs anywhere the whole device is (as the application
        // launched it); on a CU-masked part of it, only where the masked CUs hold its grid.
        if a.needs_coresidency() && !(a.coresident() && !a.cooperative() && self.whole_device) {
            // Cooperative, or a kernel that spins on peers (launched plainly: CU masks apply to
            // it): every block resident at once on this partition's CUs.
            let per_cu = self
                .shared
                .blocks_per_cu(k.function(), threads as u32, k.shared_mem_bytes())
                .map_err(|e| Incompatibility::InvalidLaunch(format!("occupancy query failed: {e}")))?;
            let capacity = u64::from(per_cu) * self.units.len() as u64;
            if k.blocks() > capacity {
                return Err(Incompatibility::NotCoResident { blocks: k.blocks(), capacity });
            }
        }
        if a.cooperative() && !self.whole_device {
            return Err(Incompatibility::WholeDevice {
                what: "a cooperative launch (CU masks do not apply to it)".into(),
                units: self.units.len(),
                device: caps.cu_count as usize,
            });
        }
        Ok(())
    }

    /// Records a fence after `st`'s newest op.
    fn fence(&self, st: &mut Lane) -> Result<(), HalError> {
        let api = self.api();
        match st.word {
            Some((_, dev)) => {
                let write = api.hipStreamWriteValue64.ok_or_else(|| {
                    driver::unsupported("memory fences need hipStreamWriteValue64, which this runtime lacks")
                })?;
                // SAFETY: the stream is live; `dev` is the device address of the lane's mapped word,
                // alive as long as `Shared`.
                api.check("hipStreamWriteValue64", unsafe { write(st.stream, dev as *mut c_void, st.submitted, 0) })?;
                st.fences.push_back((st.submitted, std::ptr::null_mut()));
            }
            None => {
                let e = self.shared.take_event()?;
                // SAFETY: the event and stream are live.
                if let Err(err) = api.check("hipEventRecord", unsafe { (api.hipEventRecord)(e, st.stream) }) {
                    self.shared.return_events([e]);
                    return Err(err);
                }
                st.fences.push_back((st.submitted, e));
            }
        }
        st.fenced = st.submitted;
        Ok(())
    }

    fn submit_on(&self, lane: LaneId, what: Submission<'_>) -> Result<Fence, HalError> {
        let l = self.lanes.get(lane as usize).ok_or(HalError::InvalidLane { lane, lanes: self.lanes.len() })?;
        self.shared.make_current()?;
        let mut st = l.lock();
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
        match what {
            Submission::Desc(op) => issue(self.api(), st.stream, op, &self.host_errors)?,
            Submission::Native(f) => f(st.stream as u64)?,
        }
        st.submitted += 1;
        if let Some(b) = staged {
            let seq = st.submitted;
            st.keepalive.push_back((seq, b));
        }
        self.shared.outstanding.fetch_add(1, Ordering::AcqRel);
        let fence = Fence { lane, seq: st.submitted };
        if st.fences.is_empty() {
            // A lone submission is fenced at once, so that its completion is seen as soon as it
            // ends; a failed record is left to the next poll.
            if let Err(e) = self.fence(&mut st) {
                tracing::debug!(error = %e, "fence at submission failed; the next poll fences");
            }
        }
        Ok(fence)
    }

    /// The newest sequence number of `st` known complete, querying its fences oldest first.
    fn completed_upto(&self, lane: LaneId, st: &mut Lane) -> Result<u64, HalError> {
        let api = self.api();
        let mut done = st.completed;
        if let Some(w) = st.word_value() {
            done = done.max(w.min(st.submitted));
            if done < st.fenced {
                let now = self.shared.epoch.elapsed().as_nanos() as u64;
                if now.saturating_sub(st.last_error_check_ns) >= ERROR_CHECK_NS {
                    st.last_error_check_ns = now;
                    // SAFETY: the stream is live.
                    let r = unsafe { (api.hipStreamQuery)(st.stream) };
                    if r != driver::SUCCESS && r != driver::ERROR_NOT_READY {
                        return Err(api.async_error(&format!("work on lane {lane} of {}", self.units), r));
                    }
                }
            }
            return Ok(done);
        }
        for &(upto, e) in &st.fences {
            // SAFETY: events in the queue are live.
            match unsafe { (api.hipEventQuery)(e) } {
                driver::SUCCESS => done = upto,
                driver::ERROR_NOT_READY => break,
                r => return Err(api.async_error(&format!("work on lane {lane} of {}", self.units), r)),
            }
        }
        Ok(done)
    }

    fn poll_lanes(&self, completed: &mut Vec<Fence>, record: bool) -> Result<usize, HalError> {
        if let Some(why) = self.host_errors.lock().clone() {
            return Err(HalError::Async(why));
        }
        self.shared.make_current()?;
        let before = completed.len();
        for (i, l) in self.lanes.iter().enumerate() {
            let mut st = l.lock();
            if record && fence_due(st.submitted - st.fenced, st.fences.len()) {
                self.fence(&mut st)?;
            }
            let upto = self.completed_upto(i as LaneId, &mut st)?;
            if upto > st.completed {
                completed.extend((st.completed + 1..=upto).map(|seq| Fence { lane: i as LaneId, seq }));
                self.shared.outstanding.fetch_sub(upto - st.completed, Ordering::AcqRel);
                st.completed = upto;
                while st.fences.front().is_some_and(|&(s, _)| s <= upto) {
                    let (_, e) = st.fences.pop_front().expect("checked non-empty");
                    if !e.is_null() {
                        self.shared.return_events([e]);
                    }
                }
                while st.keepalive.front().is_some_and(|(s, _)| *s <= upto) {
                    st.keepalive.pop_front();
                }
            }
        }
        Ok(completed.len() - before)
    }
}

/// Whether a poll fences a lane with `unfenced` ops after its newest fence and `in_flight` fences
/// not yet seen complete: it has unfenced ops and no fence in flight, or [`FENCE_EVERY`] unfenced
/// ops and fewer than [`MAX_FENCES`] in flight.
fn fence_due(unfenced: u64, in_flight: usize) -> bool {
    unfenced > 0 && (in_flight == 0 || (unfenced >= FENCE_EVERY && in_flight < MAX_FENCES))
}

/// What [`HipPartition::submit_on`] issues.
enum Submission<'a> {
    Desc(&'a Arc<OpDesc>),
    Native(&'a mut dyn FnMut(u64) -> Result<(), HalError>),
}

fn mask_hex(words: &[u32]) -> String {
    words.iter().rev().map(|w| format!("{w:08x}")).collect()
}

/// Issues `op` on stream `s` (one runtime call; see the module docs).
fn issue(api: &Api, s: HipStream, op: &OpDesc, errors: &Arc<Mutex<Option<String>>>) -> Result<(), HalError> {
    match op {
        OpDesc::Kernel(k) => launch_kernel(api, s, k),
        OpDesc::Copy(c) => {
            let addr = |e: &Endpoint| match e {
                Endpoint::Device(a) | Endpoint::Host(a) => *a,
                Endpoint::Staged(b) => b.as_ptr() as u64,
            };
            // SAFETY: device and host addresses are the application's promise (as natively);
            // staged bytes are kept alive by the lane until the copy's fence completes.
            api.check("hipMemcpyAsync", unsafe {
                (api.hipMemcpyAsync)(
                    addr(c.dst()) as *mut c_void,
                    addr(c.src()) as *const c_void,
                    c.bytes() as usize,
                    driver::MEMCPY_DEFAULT,
                    s,
                )
            })
        }
        OpDesc::Fill(f) => {
            let dst = f.dst() as *mut c_void;
            let n = f.count() as usize;
            match f.element_size() {
                // SAFETY: the destination is the application's device memory, as natively.
                1 => api.check("hipMemsetD8Async", unsafe { (api.hipMemsetD8Async)(dst, f.value() as u8, n, s) }),
                // SAFETY: as above.
                2 => api.check("hipMemsetD16Async", unsafe { (api.hipMemsetD16Async)(dst, f.value() as u16, n, s) }),
                // SAFETY: as above.
                _ => api.check("hipMemsetD32Async", unsafe { (api.hipMemsetD32Async)(dst, f.value() as i32, n, s) }),
            }
        }
        OpDesc::Host(h) => {
            let call = Box::new(HostCall { function: h.clone(), errors: errors.clone() });
            let user = Box::into_raw(call).cast::<c_void>();
            let r = match api.hipLaunchHostFunc {
                // SAFETY: `s` is live; the trampoline takes ownership of `user` exactly once.
                Some(f) => api.check("hipLaunchHostFunc", unsafe { f(s, host_fn_trampoline, user) }),
                // SAFETY: as above; flags must be 0.
                None => api.check("hipStreamAddCallback", unsafe {
                    (api.hipStreamAddCallback)(s, stream_callback_trampoline, user, 0)
                }),
            };
            if r.is_err() {
                // SAFETY: the runtime did not take the callback, so the box is still ours.
                drop(unsafe { Box::from_raw(user.cast::<HostCall>()) });
            }
            r
        }
        OpDesc::Graph(g) => {
            // SAFETY: the executable graph is the application's live handle, as natively.
            api.check("hipGraphLaunch", unsafe { (api.hipGraphLaunch)(g.graph_exec() as *mut c_void, s) })
        }
        OpDesc::Marker(_) => Ok(()),
    }
}

/// Launches `k` unchanged on `s`: `hipModuleLaunchKernel`, `hipModuleLaunchCooperativeKernel` for
/// a cooperative launch, or `hipLaunchKernel` for a host stub (`FunctionKind::Kernel`), with one
/// parameter pointer per parameter into its argument bytes.
fn launch_kernel(api: &Api, s: HipStream, k: &KernelLaunch) -> Result<(), HalError> {
    let args = k.args();
    let base = args.bytes().as_ptr();
    // The runtime only reads through these pointers; `KernelArgs::from_layout` checked bounds.
    let mut params: Vec<*mut c_void> =
        args.params().iter().map(|p| base.wrapping_add(p.offset as usize).cast_mut().cast()).collect();
    let params_ptr = if params.is_empty() { std::ptr::null_mut() } else { params.as_mut_ptr() };
    let (g, b) = (k.grid(), k.block());
    if k.function().kind() == vitamin_hal::FunctionKind::Kernel {
        let launch = api.hipLaunchKernel.ok_or_else(|| {
            HalError::Incompatible(Incompatibility::UnknownFunction("this runtime has no hipLaunchKernel".into()))
        })?;
        let dim = |d: vitamin_hal::Dim3| driver::Dim3 { x: d.x, y: d.y, z: d.z };
        // SAFETY: the handle is the application's host stub (registered with the runtime by its
        // start-up code), `s` a live stream of this partition, `params` one pointer per parameter
        // into bytes alive for the call.
        return api.check("hipLaunchKernel", unsafe {
            launch(k.function().handle() as *const c_void, dim(g), dim(b), params_ptr, k.shared_mem_bytes() as usize, s)
        });
    }
    let f = k.function().handle() as driver::HipFunction;
    if k.attributes().cooperative() {
        let launch = api.hipModuleLaunchCooperativeKernel.ok_or_else(|| {
            HalError::Incompatible(Incompatibility::InvalidLaunch(
                "cooperative launch needs hipModuleLaunchCooperativeKernel (ROCm 6+)".into(),
            ))
        })?;
        // SAFETY: `f` is the descriptor's live function, `s` a live stream of this partition,
        // `params` one pointer per parameter into bytes alive for the call (copied at launch).
        return api.check("hipModuleLaunchCooperativeKernel", unsafe {
            launch(f, g.x, g.y, g.z, b.x, b.y, b.z, k.shared_mem_bytes(), s, params_ptr)
        });
    }
    // SAFETY: as above; no `extra` buffer.
    api.check("hipModuleLaunchKernel", unsafe {
        (api.hipModuleLaunchKernel)(
            f,
            g.x,
            g.y,
            g.z,
            b.x,
            b.y,
            b.z,
            k.shared_mem_bytes(),
            s,
            params_ptr,
            std::ptr::null_mut(),
        )
    })
}

impl PhysicalPartition for HipPartition {
    fn units(&self) -> &UnitSet {
        &self.units
    }

    fn lanes(&self) -> usize {
        self.lanes.len()
    }

    fn can_execute(&self, op: &OpDesc) -> Result<(), Incompatibility> {
        match op {
            OpDesc::Kernel(k) => self.check_kernel(k),
            // Whether a graph's kernels honour the launching stream's CU mask is not known (not
            // checked on AMD hardware): only the whole device accounts for them truthfully.
            OpDesc::Graph(_) if !self.whole_device => Err(Incompatibility::WholeDevice {
                what: "a HIP graph launch".into(),
                units: self.units.len(),
                device: self.shared.caps.cu_count as usize,
            }),
            _ => Ok(()),
        }
    }

    fn submit(&self, lane: LaneId, op: &Arc<OpDesc>) -> Result<Fence, HalError> {
        if lane as usize >= self.lanes.len() {
            return Err(HalError::InvalidLane { lane, lanes: self.lanes.len() });
        }
        self.can_execute(op)?;
        self.submit_on(lane, Submission::Desc(op))
    }

    fn submit_native(
        &self,
        lane: LaneId,
        issue: &mut dyn FnMut(u64) -> Result<(), HalError>,
    ) -> Result<Fence, HalError> {
        self.submit_on(lane, Submission::Native(issue))
    }

    fn poll(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll_lanes(completed, true)
    }

    fn poll_observing(&self, completed: &mut Vec<Fence>) -> Result<usize, HalError> {
        self.poll_lanes(completed, false)
    }

    fn lane_progress(&self, lane: LaneId, seq: u64) -> Option<LaneProgress> {
        let st = self.lanes.get(lane as usize)?.lock();
        let (host, _) = st.word?;
        if st.fenced < seq {
            return None;
        }
        let keep = self.shared.clone();
        Some(LaneProgress::new(move || {
            // The word's page is freed only with `Shared`, which `keep` holds.
            let _ = &keep;
            // SAFETY: as in `Lane::word_value`.
            unsafe { &*(host as *const AtomicU64) }.load(Ordering::Acquire)
        }))
    }

    fn synchronize(&self) -> Result<(), HalError> {
        self.shared.make_current()?;
        let api = self.api();
        for (i, l) in self.lanes.iter().enumerate() {
            let s = l.lock().stream;
            // SAFETY: the stream is live (destroyed only on drop).
            let r = unsafe { (api.hipStreamSynchronize)(s) };
            if r != driver::SUCCESS {
                return Err(api.async_error(&format!("work on lane {i} of {}", self.units), r));
            }
        }
        if let Some(why) = self.host_errors.lock().clone() {
            return Err(HalError::Async(why));
        }
        Ok(())
    }
}

impl Drop for HipPartition {
    fn drop(&mut self) {
        let _ = self.shared.make_current();
        let api = self.shared.api.clone();
        for l in self.lanes.drain(..) {
            let st = l.into_inner();
            // SAFETY: the stream is live; draining before destroying it.
            let _ = unsafe { (api.hipStreamSynchronize)(st.stream) };
            self.shared.outstanding.fetch_sub(st.submitted - st.completed, Ordering::AcqRel);
            self.shared.return_events(st.fences.iter().map(|&(_, e)| e).filter(|e| !e.is_null()));
            // SAFETY: drained and never used again.
            if let Err(e) = api.check("hipStreamDestroy", unsafe { (api.hipStreamDestroy)(st.stream) }) {
                tracing::warn!(error = %e, "hip partition teardown: stream");
            }
        }
        self.shared.streams.fetch_sub(self.reserved, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_are_due_for_unfenced_work_within_the_in_flight_bound() {
        assert!(!fence_due(0, 0), "nothing to fence");
        assert!(fence_due(1, 0));
        assert!(!fence_due(FENCE_EVERY - 1, 1), "one in flight covers a short burst");
        assert!(fence_due(FENCE_EVERY, 1));
        assert!(!fence_due(10 * FENCE_EVERY, MAX_FENCES), "never more than MAX_FENCES in flight");
    }

    #[test]
    fn masks_are_little_endian_words() {
        let m = cu_mask(&UnitSet::range(0, 16), 304);
        assert_eq!(m.len(), 10);
        assert_eq!(m[0], 0xffff);
        assert!(m[1..].iter().all(|&w| w == 0));
        let m = cu_mask(&UnitSet::range(288, 304), 304);
        assert_eq!(m[9], 0xffff);
        assert_eq!(mask_hex(&[1, 2]), "0000000200000001");
        let all = cu_mask(&UnitSet::first_n(304), 304);
        assert_eq!(all.iter().map(|w| w.count_ones()).sum::<u32>(), 304);
    }
}
