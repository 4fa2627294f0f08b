//! Application handles and logical state, the pure part: which logical stream a `CUstream` names,
//! what vitamin knows about each `CUevent`, and how a copy is turned into an op.
//!
//! ## Streams
//! - `NULL` is the legacy default stream for the legacy API variants and the calling thread's
//!   per-thread default stream for the `_ptsz`/`_ptds` variants; `CU_STREAM_LEGACY` (`0x1`) and
//!   `CU_STREAM_PER_THREAD` (`0x2`) mean the same in every variant ([`classify_stream`]).
//! - Every other handle is an application stream. Streams created through the hooks are registered
//!   with their flags and priority when created (the application keeps the driver's handle, so
//!   every call vitamin does not defer still works); a stream first seen in an op (created through a
//!   route vitamin does not hook) is registered then, with the flags the driver reports.
//!
//! ## Events
//! An [`EventEntry`] says whether the event's current generation is **logical** (recorded through
//! the vCtx: queries, synchronization and waits are answered from logical state) or **native**
//! (recorded by the driver: timing and interprocess events after draining their stream, records
//! on capturing streams, records with flags), in which case every use goes to the driver too.
//!
//! ## Executable graphs
//! A [`GraphExecEntry`] per `CUgraphExec` launched in bind mode: a hidden logical event that
//! orders every launch of that executable graph behind its previous launch (the driver does so
//! natively, whatever the streams), and the launches recorded as ops that may not have been
//! submitted yet, which a call changing or destroying the executable graph waits for.
//!
//! ## Copies
//! [`plan_copy`] decides from what the driver says about both addresses: device or pinned memory
//! on both ends becomes an asynchronous copy op; a pageable source of at most [`STAGE_MAX_BYTES`]
//! is staged (copied at the call, as the driver copies it into a staging buffer); a larger pageable
//! source takes the native path, which returns once the copy is complete. Natively the driver
//! stages a pageable source through bounded staging buffers, so a large copy returns only when
//! most of it has reached the device; matching that keeps programs that (knowingly or not) depend
//! on it as they are, and bounds the host memory that staging holds. A pageable destination (the data must be there when the call returns) or an
//! address the driver does not know as device memory where device memory is required takes the
//! native path.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use smallvec::SmallVec;
use vitamin_hal::Endpoint;
use vitamin_runtime::{EventId, OpId, StreamId};

/// `CU_STREAM_LEGACY`.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`.
pub const CU_STREAM_PER_THREAD: usize = 0x2;
/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: u32 = 0x1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: u32 = 0x2;
/// `CU_EVENT_INTERPROCESS`.
pub const CU_EVENT_INTERPROCESS: u32 = 0x4;

/// What a `CUstream` argument names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamRef {
    /// The legacy default stream.
    Legacy,
    /// The calling thread's per-thread default stream.
    PerThread,
    /// An application stream handle.
    Handle(usize),
}

/// Classifies a stream argument of a hook whose variant is per-thread (`_ptsz`/`_ptds`) or not.
pub fn classify_stream(handle: usize, per_thread_variant: bool) -> StreamRef {
    match handle {
        0 if per_thread_variant => StreamRef::PerThread,
        0 | CU_STREAM_LEGACY => StreamRef::Legacy,
        CU_STREAM_PER_THREAD => StreamRef::PerThread,
        h => StreamRef::Handle(h),
    }
}

/// Who recorded an event's current generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorder {
    /// Never recorded (complete; waits are no-ops natively and logically).
    Never,
    /// Recorded through the vCtx.
    Logical,
    /// Recorded by the driver: uses of the event go to the driver.
    Native,
}

/// What vitamin knows about one application event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventEntry {
    /// The logical event.
    pub id: EventId,
    /// Created without `CU_EVENT_DISABLE_TIMING`: its records are native (timestamps).
    pub timing: bool,
    /// Created with `CU_EVENT_INTERPROCESS`: other processes may wait on it natively.
    pub interprocess: bool,
    /// Who recorded the current generation.
    pub recorder: Recorder,
}

impl EventEntry {
    /// A fresh entry for an event created with `flags`.
    pub fn new(id: EventId, flags: u32) -> Self {
        EventEntry {
            id,
            timing: flags & CU_EVENT_DISABLE_TIMING == 0,
            interprocess: flags & CU_EVENT_INTERPROCESS != 0,
            recorder: Recorder::Never,
        }
    }

    /// Whether a record of this event (with `record_flags`, 0 for `cuEventRecord`) must be native.
    pub fn records_natively(&self, record_flags: u32) -> bool {
        self.timing || self.interprocess || record_flags != 0
    }
}

/// What vitamin knows about one executable graph launched in bind mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphExecEntry {
    /// Logical event recorded after each launch; the next launch, on any stream, waits on it.
    pub order: EventId,
    /// Name of its launch ops (timelines, logs).
    pub name: Arc<str>,
    /// Launches recorded as ops, not known to be submitted yet (oldest first).
    pub pending: SmallVec<[OpId; 2]>,
}

impl GraphExecEntry {
    /// A new entry ordering launches through the logical event `order`.
    pub fn new(handle: usize, order: EventId) -> Self {
        GraphExecEntry { order, name: Arc::from(format!("graph {handle:#x}")), pending: SmallVec::new() }
    }

    /// Notes a launch recorded as `op`, first forgetting the launches `submitted` says were handed to
    /// the backend (so the list stays as short as the launches actually held back).
    pub fn note_launch(&mut self, op: OpId, submitted: impl Fn(OpId) -> bool) {
        self.pending.retain(|o| !submitted(*o));
        self.pending.push(op);
    }
}

/// Application stream, event and executable-graph handles mapped to logical ones.
#[derive(Debug, Default)]
pub struct Registry {
    streams: HashMap<usize, StreamId>,
    events: HashMap<usize, EventEntry>,
    graph_execs: HashMap<usize, GraphExecEntry>,
}

impl Registry {
    /// The logical stream of an application stream handle.
    pub fn stream(&self, handle: usize) -> Option<StreamId> {
        self.streams.get(&handle).copied()
    }
    /// Maps a handle (a new stream, or a handle the driver reused after a destroy).
    pub fn add_stream(&mut self, handle: usize, id: StreamId) {
        self.streams.insert(handle, id);
    }
    /// Forgets a destroyed stream.
    pub fn remove_stream(&mut self, handle: usize) -> Option<StreamId> {
        self.streams.remove(&handle)
    }
    /// The entry of an application event handle.
    pub fn event(&self, handle: usize) -> Option<EventEntry> {
        self.events.get(&handle).copied()
    }
    /// Maps an event handle.
    pub fn add_event(&mut self, handle: usize, entry: EventEntry) {
        self.events.insert(handle, entry);
    }
    /// Notes who recorded an event's current generation.
    pub fn set_recorder(&mut self, handle: usize, recorder: Recorder) {
        if let Some(e) = self.events.get_mut(&handle) {
            e.recorder = recorder;
        }
    }
    /// Forgets a destroyed event.
    pub fn remove_event(&mut self, handle: usize) -> Option<EventEntry> {
        self.events.remove(&handle)
    }
    /// `(streams, events)` mapped now.
    pub fn counts(&self) -> (usize, usize) {
        (self.streams.len(), self.events.len())
    }
    /// The entry of an executable graph, if it was launched in bind mode.
    pub fn graph_exec(&self, handle: usize) -> Option<&GraphExecEntry> {
        self.graph_execs.get(&handle)
    }
    /// The entry of an executable graph, created (with the event `make_order` returns) at its first
    /// launch.
    pub fn graph_exec_or_insert(&mut self, handle: usize, make_order: impl FnOnce() -> EventId) -> &mut GraphExecEntry {
        self.graph_execs.entry(handle).or_insert_with(|| GraphExecEntry::new(handle, make_order()))
    }
    /// Forgets a destroyed executable graph.
    pub fn remove_graph_exec(&mut self, handle: usize) -> Option<GraphExecEntry> {
        self.graph_execs.remove(&handle)
    }
    /// Executable graphs mapped now.
    pub fn graph_exec_count(&self) -> usize {
        self.graph_execs.len()
    }
}

/// What the driver says about an address (`CU_POINTER_ATTRIBUTE_MEMORY_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Device or managed memory.
    Device,
    /// Page-locked host memory the driver knows (`cuMemAllocHost`, `cuMemHostRegister`).
    Pinned,
    /// An address the driver does not know: pageable host memory (or an invalid pointer).
    Unknown,
}

impl Memory {
    /// From `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`'s answer: `None` if the query failed.
    pub fn from_memory_type(t: Option<u32>) -> Memory {
        match t {
            Some(1) => Memory::Pinned, // CU_MEMORYTYPE_HOST
            Some(_) => Memory::Device, // DEVICE, ARRAY, UNIFIED
            None => Memory::Unknown,
        }
    }
    fn endpoint(self, addr: u64) -> Endpoint {
        match self {
            Memory::Pinned => Endpoint::Host(addr),
            _ => Endpoint::Device(addr),
        }
    }
}

/// How a copy is issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyPlan {
    /// An asynchronous copy op between two driver-known addresses.
    Async {
        /// Destination.
        dst: Endpoint,
        /// Source.
        src: Endpoint,
    },
    /// Copy the pageable source now, then an asynchronous copy op from the staged bytes.
    Stage {
        /// Destination.
        dst: Endpoint,
    },
    /// Native path (drain the stream, call the driver, wait): why.
    Native(&'static str),
}

/// Which addresses a copy entry point requires to be driver-known device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// `cuMemcpyHtoDAsync`: device destination, host source.
    HostToDevice,
    /// `cuMemcpyDtoHAsync`: host destination, device source.
    DeviceToHost,
    /// `cuMemcpyDtoDAsync`: device on both ends.
    DeviceToDevice,
    /// `cuMemcpyAsync`: unified addressing, either end anywhere.
    Unified,
}

/// Largest pageable source staged for an asynchronous copy op (64 KiB); larger ones are copied
/// synchronously on the native path (see the module docs).
pub const STAGE_MAX_BYTES: u64 = 64 * 1024;

/// Decides how to issue a copy of `bytes` from `src` to `dst` (see the module docs).
pub fn plan_copy(kind: CopyKind, dst: (Memory, u64), src: (Memory, u64), bytes: u64) -> CopyPlan {
    use Memory::*;
    let needs_device_dst = matches!(kind, CopyKind::HostToDevice | CopyKind::DeviceToDevice);
    let needs_device_src = matches!(kind, CopyKind::DeviceToHost | CopyKind::DeviceToDevice);
    if needs_device_dst && dst.0 == Unknown {
        return CopyPlan::Native("destination is not device memory the driver knows");
    }
    if needs_device_src && src.0 == Unknown {
        return CopyPlan::Native("source is not device memory the driver knows");
    }
    if dst.0 == Unknown {
        return CopyPlan::Native("pageable destination: the data must be there when the call returns");
    }
    if src.0 == Unknown && bytes > STAGE_MAX_BYTES {
        return CopyPlan::Native("pageable source larger than the staging bound: copied synchronously");
    }
    if src.0 == Unknown {
        return CopyPlan::Stage { dst: dst.0.endpoint(dst.1) };
    }
    CopyPlan::Async { dst: dst.0.endpoint(dst.1), src: src.0.endpoint(src.1) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_stream_handles() {
        assert_eq!(classify_stream(0, false), StreamRef::Legacy);
        assert_eq!(classify_stream(0, true), StreamRef::PerThread);
        for pt in [false, true] {
            assert_eq!(classify_stream(CU_STREAM_LEGACY, pt), StreamRef::Legacy);
            assert_eq!(classify_stream(CU_STREAM_PER_THREAD, pt), StreamRef::PerThread);
            assert_eq!(classify_stream(0x7f00_1000, pt), StreamRef::Handle(0x7f00_1000));
        }
    }

    #[test]
    fn event_flags() {
        let timing = EventEntry::new(EventId(1), 0);
        assert!(timing.timing && timing.records_natively(0));
        let plain = EventEntry::new(EventId(2), CU_EVENT_DISABLE_TIMING);
        assert!(!plain.records_natively(0));
        assert!(plain.records_natively(1), "CU_EVENT_RECORD_EXTERNAL");
        let ipc = EventEntry::new(EventId(3), CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
        assert!(ipc.records_natively(0));
        assert_eq!(plain.recorder, Recorder::Never);
    }

    #[test]
    fn registry_maps_and_forgets() {
        let mut r = Registry::default();
        r.add_stream(0x10, StreamId(3));
        r.add_event(0x20, EventEntry::new(EventId(4), CU_EVENT_DISABLE_TIMING));
        assert_eq!(r.stream(0x10), Some(StreamId(3)));
        r.set_recorder(0x20, Recorder::Logical);
        assert_eq!(r.event(0x20).unwrap().recorder, Recorder::Logical);
        // A handle reused by the driver after a destroy maps to the new stream.
        r.add_stream(0x10, StreamId(9));
        assert_eq!(r.stream(0x10), Some(StreamId(9)));
        assert_eq!(r.remove_stream(0x10), Some(StreamId(9)));
        assert_eq!(r.stream(0x10), None);
        assert!(r.remove_event(0x20).is_some());
        assert_eq!(r.counts(), (0, 0));
    }

    #[test]
    fn graph_execs_keep_only_launches_not_yet_submitted() {
        let mut r = Registry::default();
        let mut made = 0;
        let e = r.graph_exec_or_insert(0xe0, || {
            made += 1;
            EventId(5)
        });
        assert_eq!((e.order, &*e.name), (EventId(5), "graph 0xe0"));
        e.note_launch(OpId(1), |_| false);
        e.note_launch(OpId(2), |_| false);
        assert_eq!(e.pending.as_slice(), &[OpId(1), OpId(2)]);
        // Op 1 was submitted meanwhile: forgotten at the next launch.
        e.note_launch(OpId(3), |o| o == OpId(1));
        assert_eq!(e.pending.as_slice(), &[OpId(2), OpId(3)]);
        // The second launch of the same handle reuses the entry and its ordering event.
        let again = r.graph_exec_or_insert(0xe0, || unreachable!("created once"));
        assert_eq!(again.order, EventId(5));
        assert_eq!(made, 1);
        assert_eq!(r.graph_exec_count(), 1);
        assert_eq!(r.remove_graph_exec(0xe0).map(|e| e.pending.len()), Some(2));
        assert!(r.graph_exec(0xe0).is_none());
    }

    fn any_memory() -> impl Strategy<Value = Memory> {
        prop_oneof![Just(Memory::Device), Just(Memory::Pinned), Just(Memory::Unknown)]
    }
    fn any_kind() -> impl Strategy<Value = CopyKind> {
        prop_oneof![
            Just(CopyKind::HostToDevice),
            Just(CopyKind::DeviceToHost),
            Just(CopyKind::DeviceToDevice),
            Just(CopyKind::Unified)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// The copy rules, checked against their statement: never defer a copy into pageable memory
        /// (the application reads it when the call returns), always stage a pageable source (it may
        /// reuse its buffer when the call returns), never invent device memory.
        #[test]
        fn copy_plans_keep_the_native_guarantees(kind in any_kind(), d in any_memory(), s in any_memory(), a in 1u64..1 << 40, b in 1u64..1 << 40, n in 1u64..1 << 24) {
            let plan = plan_copy(kind, (d, a), (s, b), n);
            match &plan {
                CopyPlan::Async { dst, src } => {
                    prop_assert!(d != Memory::Unknown && s != Memory::Unknown);
                    prop_assert_eq!(dst, &d.endpoint(a));
                    prop_assert_eq!(src, &s.endpoint(b));
                }
                CopyPlan::Stage { dst } => {
                    prop_assert_eq!(s, Memory::Unknown);
                    prop_assert!(n <= STAGE_MAX_BYTES, "staging is bounded");
                    prop_assert!(d != Memory::Unknown);
                    prop_assert!(matches!(kind, CopyKind::HostToDevice | CopyKind::Unified));
                    prop_assert_eq!(dst, &d.endpoint(a));
                }
                CopyPlan::Native(_) => prop_assert!(
                    d == Memory::Unknown
                        || (s == Memory::Unknown && (n > STAGE_MAX_BYTES || matches!(kind, CopyKind::DeviceToHost | CopyKind::DeviceToDevice)))
                ),
            }
        }
    }

    #[test]
    fn copy_examples() {
        use Memory::*;
        assert_eq!(
            plan_copy(CopyKind::HostToDevice, (Device, 1), (Unknown, 2), 4096),
            CopyPlan::Stage { dst: Endpoint::Device(1) }
        );
        assert!(matches!(plan_copy(CopyKind::DeviceToHost, (Unknown, 1), (Device, 2), 4), CopyPlan::Native(_)));
        assert_eq!(
            plan_copy(CopyKind::DeviceToHost, (Pinned, 1), (Device, 2), 4),
            CopyPlan::Async { dst: Endpoint::Host(1), src: Endpoint::Device(2) }
        );
        assert!(matches!(plan_copy(CopyKind::DeviceToDevice, (Device, 1), (Pinned, 2), 4), CopyPlan::Async { .. }));
        assert!(matches!(plan_copy(CopyKind::HostToDevice, (Unknown, 1), (Pinned, 2), 4), CopyPlan::Native(_)));
        assert!(matches!(
            plan_copy(CopyKind::HostToDevice, (Device, 1), (Unknown, 2), STAGE_MAX_BYTES + 1),
            CopyPlan::Native(_)
        ));
    }
}
