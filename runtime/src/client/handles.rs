//! Application handles and logical state, the pure part: which logical stream an application's
//! stream handle names, what the client knows about each event, the executable graphs it
//! launched, and how a copy is turned into an op.
//!
//! ## Streams
//! A stream argument is the legacy default stream, the calling thread's per-thread default stream
//! or an application stream handle ([`StreamRef`]; the interposer classifies its vendor's special
//! handle values). Streams created through the hooks are registered with their flags and priority
//! when created (the application keeps the driver's handle, so every call vitamin does not defer
//! still works); a stream first seen in an op (created through a route vitamin does not hook) is
//! registered then, with the flags the driver reports.
//!
//! ## Events
//! An [`EventEntry`] says whether the event's current generation is **logical** (recorded through
//! the vCtx: queries, synchronization and waits are answered from logical state) or **native**
//! (recorded by the driver: timing and interprocess events after draining their stream, records
//! on capturing streams, records with flags), in which case every use goes to the driver too.
//!
//! ## Executable graphs
//! A [`GraphExecEntry`] per executable graph launched in bind mode: a hidden logical event that
//! orders every launch of that executable graph behind its previous launch (the driver does so
//! natively, whatever the streams), and the launches recorded as ops that may not have been
//! submitted yet, which a call changing or destroying the executable graph waits for.
//!
//! ## Epochs
//! The driver reuses handle values after a destroy. Every mapping the [`Registry`] makes gets a
//! [`Registered`] id: the handle value and an epoch that grows each time that value is mapped
//! anew. An update made through an id whose epoch is gone ([`Registry::set_recorder`],
//! [`Registry::remove_event`] and friends) changes nothing, so a thread that looked an event up
//! before another thread destroyed it and the driver handed the same value to a new event can
//! never retarget the new entry (wgpu-core's registry does the same with index + epoch ids).
//!
//! ## Copies
//! [`plan_copy`] decides from what the driver says about both addresses: device or pinned memory
//! on both ends becomes an asynchronous copy op; a pageable source of at most [`STAGE_MAX_BYTES`]
//! is staged (copied at the call, as the driver copies it into a staging buffer); a larger pageable
//! source takes the native path, which returns once the copy is complete. Natively the driver
//! stages a pageable source through bounded staging buffers, so a large copy returns only when
//! most of it has reached the device; matching that keeps programs that (knowingly or not) depend
//! on it as they are, and bounds the host memory that staging holds. A pageable destination (the
//! data must be there when the call returns) or an address the driver does not know as device
//! memory where device memory is required takes the native path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use smallvec::SmallVec;
use vitamin_hal::Endpoint;

use crate::vctx::{EventId, OpId, StreamId};

/// What a stream argument names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamRef {
    /// The legacy default stream.
    Legacy,
    /// The calling thread's per-thread default stream.
    PerThread,
    /// An application stream handle.
    Handle(usize),
}

/// The id of one mapping of an application handle: the handle value and the epoch of this
/// mapping (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Registered {
    /// The application's handle value.
    pub handle: usize,
    /// How many times this value had been mapped before this mapping.
    pub epoch: u32,
}

/// Handle values mapped to entries, each mapping with its epoch.
#[derive(Debug)]
struct Epochs<V> {
    live: HashMap<usize, (u32, V)>,
    /// The next epoch of every value ever mapped (kept after a removal).
    next: HashMap<usize, u32>,
}

impl<V> Default for Epochs<V> {
    fn default() -> Self {
        Epochs { live: HashMap::new(), next: HashMap::new() }
    }
}

impl<V> Epochs<V> {
    fn insert(&mut self, handle: usize, value: V) -> Registered {
        let next = self.next.entry(handle).or_insert(0);
        let epoch = *next;
        *next = next.wrapping_add(1);
        self.live.insert(handle, (epoch, value));
        Registered { handle, epoch }
    }
    fn get(&self, handle: usize) -> Option<(Registered, &V)> {
        self.live.get(&handle).map(|(epoch, v)| (Registered { handle, epoch: *epoch }, v))
    }
    fn get_mut(&mut self, id: Registered) -> Option<&mut V> {
        self.live.get_mut(&id.handle).filter(|(epoch, _)| *epoch == id.epoch).map(|(_, v)| v)
    }
    fn remove(&mut self, handle: usize) -> Option<V> {
        self.live.remove(&handle).map(|(_, v)| v)
    }
    fn remove_id(&mut self, id: Registered) -> Option<V> {
        self.get_mut(id)?;
        self.remove(id.handle)
    }
    fn len(&self) -> usize {
        self.live.len()
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
    /// Created with timing enabled: its records are native (timestamps).
    pub timing: bool,
    /// Created for interprocess use: other processes may wait on it natively.
    pub interprocess: bool,
    /// Who recorded the current generation.
    pub recorder: Recorder,
}

impl EventEntry {
    /// A fresh entry for an event created with (or without) timing and interprocess use.
    pub fn new(id: EventId, timing: bool, interprocess: bool) -> Self {
        EventEntry { id, timing, interprocess, recorder: Recorder::Never }
    }

    /// Whether a record of this event (with `record_flags`, 0 for a plain record) must be native.
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
    streams: Epochs<StreamId>,
    events: Epochs<EventEntry>,
    graph_execs: HashMap<usize, GraphExecEntry>,
}

impl Registry {
    /// The logical stream of an application stream handle.
    pub fn stream(&self, handle: usize) -> Option<StreamId> {
        self.streams.get(handle).map(|(_, s)| *s)
    }
    /// Maps a handle (a new stream, or a handle the driver reused after a destroy).
    pub fn add_stream(&mut self, handle: usize, id: StreamId) -> Registered {
        self.streams.insert(handle, id)
    }
    /// Forgets a destroyed stream.
    pub fn remove_stream(&mut self, handle: usize) -> Option<StreamId> {
        self.streams.remove(handle)
    }
    /// The logical stream of a stream handle with the id of its mapping.
    pub fn stream_id(&self, handle: usize) -> Option<(Registered, StreamId)> {
        self.streams.get(handle).map(|(id, s)| (id, *s))
    }
    /// Forgets the stream mapped as `id`, if that mapping is still the live one.
    pub fn remove_stream_id(&mut self, id: Registered) -> Option<StreamId> {
        self.streams.remove_id(id)
    }
    /// The logical events whose current generation was recorded through the vCtx.
    pub fn logically_recorded_events(&self) -> Vec<EventId> {
        self.events.live.values().filter(|(_, e)| e.recorder == Recorder::Logical).map(|(_, e)| e.id).collect()
    }
    /// The entry of an application event handle.
    pub fn event(&self, handle: usize) -> Option<EventEntry> {
        self.events.get(handle).map(|(_, e)| *e)
    }
    /// The entry of an application event handle with the id of its mapping.
    pub fn event_id(&self, handle: usize) -> Option<(Registered, EventEntry)> {
        self.events.get(handle).map(|(id, e)| (id, *e))
    }
    /// Maps an event handle.
    pub fn add_event(&mut self, handle: usize, entry: EventEntry) -> Registered {
        self.events.insert(handle, entry)
    }
    /// Notes who recorded the current generation of the event mapped as `id` (nothing if that
    /// mapping is gone).
    pub fn set_recorder(&mut self, id: Registered, recorder: Recorder) {
        if let Some(e) = self.events.get_mut(id) {
            e.recorder = recorder;
        }
    }
    /// Forgets a destroyed event.
    pub fn remove_event(&mut self, handle: usize) -> Option<EventEntry> {
        self.events.remove(handle)
    }
    /// Forgets the event mapped as `id`, if that mapping is still the live one.
    pub fn remove_event_id(&mut self, id: Registered) -> Option<EventEntry> {
        self.events.remove_id(id)
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

/// Destroys application stream `handle` with `destroy` (the driver's call; `ok` says whether it
/// succeeded) and forgets the mapping it had: looked up before the driver frees the handle, removed after by
/// its id, so a stream another thread creates meanwhile, to which the driver hands the same value,
/// keeps its own mapping. Returns the call's result and the logical stream the destroyed handle
/// named (`None`: unknown handle, or the driver refused).
pub fn destroy_stream_mapping<R>(
    registry: &Mutex<Registry>,
    handle: usize,
    destroy: impl FnOnce() -> R,
    ok: impl FnOnce(&R) -> bool,
) -> (R, Option<StreamId>) {
    let lock = || registry.lock().unwrap_or_else(|e| e.into_inner());
    let found = lock().stream_id(handle);
    let r = destroy();
    let gone = found.filter(|_| ok(&r)).map(|(id, stream)| {
        lock().remove_stream_id(id);
        stream
    });
    (r, gone)
}

/// As [`destroy_stream_mapping`], for an application event.
pub fn destroy_event_mapping<R>(
    registry: &Mutex<Registry>,
    handle: usize,
    destroy: impl FnOnce() -> R,
    ok: impl FnOnce(&R) -> bool,
) -> (R, Option<EventEntry>) {
    let lock = || registry.lock().unwrap_or_else(|e| e.into_inner());
    let found = lock().event_id(handle);
    let r = destroy();
    let gone = found.filter(|_| ok(&r)).map(|(id, entry)| {
        lock().remove_event_id(id);
        entry
    });
    (r, gone)
}

/// What the driver says about an address (its memory-type query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// Device or managed memory.
    Device,
    /// Page-locked host memory the driver knows (allocated or registered through it).
    Pinned,
    /// An address the driver does not know: pageable host memory (or an invalid pointer).
    Unknown,
}

impl Memory {
    /// The endpoint of a copy at `addr` in this memory.
    pub fn endpoint(self, addr: u64) -> Endpoint {
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
    /// Host to device: device destination, host source.
    HostToDevice,
    /// Device to host: host destination, device source.
    DeviceToHost,
    /// Device to device: device on both ends.
    DeviceToDevice,
    /// Unified addressing: either end anywhere.
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

/// The staged pageable bytes of copies still in flight, bounded (`max_staged_bytes`): a staged
/// buffer counts while any descriptor holds it (the op's, until it retired and the dispatcher
/// let it go), found by a weak reference, so nothing has to report its release. At most one
/// entry per staged copy alive, and the outstanding-op bound keeps those few (about 1024).
#[derive(Debug)]
pub struct StagingBudget {
    max: u64,
    /// Staged buffers possibly still alive, with their sizes.
    live: Vec<(std::sync::Weak<[u8]>, u64)>,
    /// Sum of the sizes in `live` (an upper bound on the bytes alive).
    bytes: u64,
    /// Length of `live` after its last pruning: pruned again when it has doubled.
    pruned_len: usize,
}

impl StagingBudget {
    /// A budget of `max` bytes.
    pub fn new(max: u64) -> StagingBudget {
        StagingBudget { max, live: Vec::new(), bytes: 0, pruned_len: 0 }
    }

    /// A staged copy of `data`, or `None` when it would take the bytes alive past the bound.
    pub fn stage(&mut self, data: &[u8]) -> Option<std::sync::Arc<[u8]>> {
        let n = data.len() as u64;
        if self.bytes.saturating_add(n) > self.max || self.live.len() >= 2 * self.pruned_len.max(32) {
            self.prune();
        }
        if self.bytes.saturating_add(n) > self.max {
            return None;
        }
        let staged: std::sync::Arc<[u8]> = std::sync::Arc::from(data);
        self.live.push((std::sync::Arc::downgrade(&staged), n));
        self.bytes += n;
        Some(staged)
    }

    /// Bytes counted as staged and alive (an upper bound; exact right after a pruning).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn prune(&mut self) {
        self.live.retain(|(w, _)| w.strong_count() > 0);
        self.bytes = self.live.iter().map(|(_, n)| n).sum();
        self.pruned_len = self.live.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a model that keeps every buffer's size while it is held: the bytes alive never
        /// exceed the bound, a request is refused only when the bytes alive plus it would, and
        /// released buffers make room again.
        #[test]
        fn the_staging_budget_bounds_the_bytes_alive(
            max in 0u64..4096,
            steps in proptest::collection::vec((0usize..600, any::<bool>(), any::<prop::sample::Index>()), 1..300),
        ) {
            let mut budget = StagingBudget::new(max);
            let mut held: Vec<std::sync::Arc<[u8]>> = Vec::new();
            for (size, release, which) in steps {
                if release && !held.is_empty() {
                    held.swap_remove(which.index(held.len()));
                    continue;
                }
                let alive: u64 = held.iter().map(|b| b.len() as u64).sum();
                let data = vec![7u8; size];
                match budget.stage(&data) {
                    Some(b) => {
                        prop_assert!(alive + size as u64 <= max, "{alive} + {size} staged past {max}");
                        prop_assert_eq!(&b[..], &data[..]);
                        held.push(b);
                    }
                    None => prop_assert!(alive + size as u64 > max, "refused {size} with {alive} of {max} alive"),
                }
                let now: u64 = held.iter().map(|b| b.len() as u64).sum();
                prop_assert!(now <= max && budget.bytes() >= now);
            }
        }
    }

    #[test]
    fn event_flags() {
        let timing = EventEntry::new(EventId(1), true, false);
        assert!(timing.timing && timing.records_natively(0));
        let plain = EventEntry::new(EventId(2), false, false);
        assert!(!plain.records_natively(0));
        assert!(plain.records_natively(1), "a record with flags");
        let ipc = EventEntry::new(EventId(3), false, true);
        assert!(ipc.records_natively(0));
        assert_eq!(plain.recorder, Recorder::Never);
    }

    #[test]
    fn registry_maps_and_forgets() {
        let mut r = Registry::default();
        r.add_stream(0x10, StreamId(3));
        let e = r.add_event(0x20, EventEntry::new(EventId(4), false, false));
        assert_eq!(r.stream(0x10), Some(StreamId(3)));
        r.set_recorder(e, Recorder::Logical);
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
    fn an_id_from_before_a_destroy_never_touches_the_reused_handle() {
        let mut r = Registry::default();
        let old = r.add_event(0x20, EventEntry::new(EventId(4), false, false));
        assert_eq!(r.event_id(0x20).map(|(id, _)| id), Some(old));
        // Destroyed, and the driver hands the same value to a new event.
        r.remove_event(0x20);
        let new = r.add_event(0x20, EventEntry::new(EventId(5), false, false));
        assert_eq!(new.handle, old.handle);
        assert_ne!(new.epoch, old.epoch);
        r.set_recorder(old, Recorder::Native);
        assert_eq!(r.event(0x20).unwrap().recorder, Recorder::Never, "the stale id changed nothing");
        assert_eq!(r.remove_event_id(old), None);
        assert_eq!(r.event(0x20).map(|e| e.id), Some(EventId(5)));
        r.set_recorder(new, Recorder::Logical);
        assert_eq!(r.event(0x20).unwrap().recorder, Recorder::Logical);
        assert_eq!(r.remove_event_id(new).map(|e| e.id), Some(EventId(5)));
    }

    /// Threads create and destroy streams and events while the "driver" hands out the lowest free
    /// handle value (so values are reused at once): every thread's mapping stays its own until it
    /// destroys it, and nothing is left at the end.
    #[test]
    fn a_handle_reused_while_another_thread_destroys_keeps_its_new_mapping() {
        let registry = Mutex::new(Registry::default());
        let driver = Mutex::new(Vec::<usize>::new()); // handle values in use
        let next_id = std::sync::atomic::AtomicU32::new(1);
        let create = || {
            let mut used = driver.lock().unwrap();
            let h = (1..).find(|h| !used.contains(h)).unwrap();
            used.push(h);
            h
        };
        let free = |h: usize| driver.lock().unwrap().retain(|&x| x != h);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..2000 {
                        let id = next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let (s, e) = (create(), create());
                        registry.lock().unwrap().add_stream(s, StreamId(id));
                        registry.lock().unwrap().add_event(e, EventEntry::new(EventId(id), false, false));
                        std::thread::yield_now();
                        assert_eq!(registry.lock().unwrap().stream(s), Some(StreamId(id)), "another thread took it");
                        assert_eq!(registry.lock().unwrap().event(e).map(|x| x.id), Some(EventId(id)));
                        let (_, gone) = destroy_stream_mapping(
                            &registry,
                            s,
                            || {
                                free(s);
                                std::thread::yield_now(); // another thread may get `s` now
                            },
                            |_| true,
                        );
                        assert_eq!(gone, Some(StreamId(id)));
                        let (_, gone) = destroy_event_mapping(
                            &registry,
                            e,
                            || {
                                free(e);
                                std::thread::yield_now();
                            },
                            |_| true,
                        );
                        assert_eq!(gone.map(|x| x.id), Some(EventId(id)));
                    }
                });
            }
        });
        assert_eq!(registry.lock().unwrap().counts(), (0, 0));
        // A failed destroy keeps the mapping.
        let h = create();
        registry.lock().unwrap().add_stream(h, StreamId(0));
        assert_eq!(destroy_stream_mapping(&registry, h, || 801, |&r| r == 0), (801, None));
        assert_eq!(registry.lock().unwrap().stream(h), Some(StreamId(0)));
        // An unknown handle is still destroyed by the driver.
        let mut called = false;
        let (_, gone) = destroy_event_mapping(&registry, 0x999, || called = true, |_| true);
        assert_eq!(gone, None);
        assert!(called);
    }

    /// The registry against a model that keeps every mapping ever made: an update through an id
    /// applies exactly when that id is the live mapping of its handle.
    #[derive(Debug, Clone)]
    enum Step {
        Add(usize),
        Remove(usize),
        SetRecorder(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (0usize..4).prop_map(Step::Add),
            (0usize..4).prop_map(Step::Remove),
            (0usize..64).prop_map(Step::SetRecorder),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn epochs_match_a_model_of_every_mapping(steps in proptest::collection::vec(step(), 0..60)) {
            let mut r = Registry::default();
            // Every id handed out, and the live id per handle.
            let mut ids: Vec<Registered> = Vec::new();
            let mut live: HashMap<usize, (Registered, Recorder)> = HashMap::new();
            for (n, s) in steps.into_iter().enumerate() {
                match s {
                    Step::Add(h) => {
                        let id = r.add_event(h, EventEntry::new(EventId(n as u32), false, false));
                        prop_assert!(ids.iter().all(|old| *old != id), "an id is never handed out twice");
                        ids.push(id);
                        live.insert(h, (id, Recorder::Never));
                    }
                    Step::Remove(h) => {
                        prop_assert_eq!(r.remove_event(h).is_some(), live.remove(&h).is_some());
                    }
                    Step::SetRecorder(i) => {
                        let Some(&id) = ids.get(i % ids.len().max(1)) else { continue };
                        r.set_recorder(id, Recorder::Logical);
                        if let Some(entry) = live.get_mut(&id.handle).filter(|(live_id, _)| *live_id == id) {
                            entry.1 = Recorder::Logical;
                        }
                    }
                }
                for h in 0..4 {
                    prop_assert_eq!(r.event(h).map(|e| e.recorder), live.get(&h).map(|(_, rec)| *rec));
                }
            }
        }
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
