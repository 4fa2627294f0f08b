//! Happens-before rules: logical streams, events and their generations, as frontiers of tokens.
//!
//! Each stream keeps a *frontier*: the tokens the next action on it must follow (its last op,
//! plus the generations of events waited on since). Recording an op makes it depend on the
//! frontier and replaces the frontier with the new op. The legacy default stream adds the
//! implicit synchronization the drivers document for it ("stream synchronization behavior"):
//!
//! > When an action is taken in the legacy stream such as a kernel launch or a stream wait on
//! > an event, the legacy stream first waits on all blocking streams, the action is queued in
//! > the legacy stream, and then all blocking streams wait on the legacy stream.
//!
//! Realized with two cheap rules instead of touching every stream on every action:
//! - every action on the legacy stream (op, event record, event wait) first *absorbs* the
//!   frontiers of the blocking streams that had an action since the previous absorption (the
//!   `dirty` list; the others are already covered) into the legacy frontier;
//! - every op on a blocking stream also depends on the legacy frontier, and marks its stream
//!   dirty (as does an event wait on it).
//!
//! Per-thread default streams count as blocking streams (the documentation: "The per-thread
//! default stream is not a non-blocking stream and will synchronize with the legacy default
//! stream if both are used in a program"); they are unordered with every other stream.
//! Non-blocking streams are exempt from both rules. Both vendors' null streams document the same
//! behaviour.
//!
//! Events: a record creates a new immutable generation whose tokens are the ones an op recorded
//! at that point of the stream would depend on (an event recorded on an empty or completed
//! stream, or never recorded, is complete). A wait copies the tokens of the generation current
//! at the time of the wait into the waiting stream's frontier, so re-recording the event later
//! cannot retarget it. No marker ops are created: event records and waits never reach the
//! dispatcher.
//!
//! Destruction follows the native documentation: a destroyed stream's or event's handle is
//! invalid at once, while work already recorded completes normally. Frontiers of destroyed
//! streams are kept (pruned of retired tokens) so that device synchronization still waits for
//! them, and, for a blocking stream, so that the next legacy action still follows them.

use std::collections::hash_map::Entry;
use std::sync::Arc;

use smallvec::SmallVec;
use vitamin_hal::OpDesc;

use super::dag::{Dag, Recorded};
use super::error::{Handle, VctxError};
use super::ids::{EventId, IdMap, OpId, StreamId, StreamKind};

/// Tokens an action must follow.
pub(crate) type Frontier = SmallVec<[OpId; 2]>;

#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) kind: StreamKind,
    pub(crate) priority: i32,
    pub(crate) frontier: Frontier,
    /// Had an action since the legacy stream last absorbed it (blocking kinds only).
    dirty: bool,
    /// First asynchronous failure of an op recorded on this stream (sticky).
    pub(crate) error: Option<VctxError>,
}

impl Stream {
    fn new(kind: StreamKind, priority: i32) -> Self {
        Stream { kind, priority, frontier: Frontier::new(), dirty: false, error: None }
    }
}

#[derive(Debug, Default)]
struct Event {
    generation: u64,
    tokens: Frontier,
}

/// All streams and events of one virtual context.
#[derive(Debug)]
pub(crate) struct Order {
    legacy: Stream,
    streams: IdMap<StreamId, Stream>,
    next_stream: u32,
    per_thread: IdMap<u64, StreamId>,
    /// Blocking streams with an action since the last legacy absorption.
    dirty: Vec<StreamId>,
    /// Frontiers of destroyed blocking streams that the next legacy action must still follow.
    legacy_orphans: Vec<OpId>,
    /// Frontiers of all destroyed streams (device synchronization waits for them).
    orphans: Vec<OpId>,
    events: IdMap<EventId, Event>,
    next_event: u32,
}

impl Default for Order {
    fn default() -> Self {
        Order {
            legacy: Stream::new(StreamKind::LegacyDefault, 0),
            streams: IdMap::default(),
            next_stream: 1,
            per_thread: IdMap::default(),
            dirty: Vec::new(),
            legacy_orphans: Vec::new(),
            orphans: Vec::new(),
            events: IdMap::default(),
            next_event: 1,
        }
    }
}

fn prune(tokens: &mut Frontier, dag: &Dag) {
    tokens.retain(|t| dag.is_live(*t));
}

fn prune_dedup(tokens: &mut Frontier, dag: &Dag) {
    prune(tokens, dag);
    if tokens.len() > 1 {
        tokens.sort_unstable();
        tokens.dedup();
    }
}

impl Order {
    pub(crate) fn stream(&self, s: StreamId) -> Result<&Stream, VctxError> {
        if s == StreamId::LEGACY {
            return Ok(&self.legacy);
        }
        self.streams.get(&s).ok_or(VctxError::InvalidHandle(Handle::Stream(s)))
    }

    fn stream_mut(&mut self, s: StreamId) -> Result<&mut Stream, VctxError> {
        if s == StreamId::LEGACY {
            return Ok(&mut self.legacy);
        }
        self.streams.get_mut(&s).ok_or(VctxError::InvalidHandle(Handle::Stream(s)))
    }

    fn fresh_stream_id(&mut self) -> StreamId {
        loop {
            let id = StreamId(self.next_stream);
            self.next_stream = self.next_stream.wrapping_add(1).max(1);
            if !self.streams.contains_key(&id) {
                return id;
            }
        }
    }

    /// Creates a blocking or non-blocking stream.
    pub(crate) fn create_stream(&mut self, kind: StreamKind, priority: i32) -> StreamId {
        debug_assert!(matches!(kind, StreamKind::Blocking | StreamKind::NonBlocking));
        let id = self.fresh_stream_id();
        self.streams.insert(id, Stream::new(kind, priority));
        id
    }

    /// The per-thread default stream of `thread`, created on first use.
    pub(crate) fn per_thread(&mut self, thread: u64) -> StreamId {
        if let Some(s) = self.per_thread.get(&thread) {
            return *s;
        }
        let id = self.fresh_stream_id();
        self.streams.insert(id, Stream::new(StreamKind::PerThreadDefault { thread }, 0));
        self.per_thread.insert(thread, id);
        id
    }

    /// Destroys a created stream; default streams cannot be destroyed.
    pub(crate) fn destroy_stream(&mut self, s: StreamId, dag: &Dag) -> Result<(), VctxError> {
        match self.stream(s)?.kind {
            StreamKind::Blocking | StreamKind::NonBlocking => {}
            StreamKind::LegacyDefault | StreamKind::PerThreadDefault { .. } => {
                return Err(VctxError::InvalidHandle(Handle::Stream(s)))
            }
        }
        self.remove_stream(s, dag);
        Ok(())
    }

    /// Per-thread default streams live now.
    pub(crate) fn per_thread_count(&self) -> usize {
        self.per_thread.len()
    }

    /// Forgets the per-thread default stream of an exited thread (its recorded work completes).
    pub(crate) fn release_per_thread(&mut self, thread: u64, dag: &Dag) {
        if let Some(s) = self.per_thread.remove(&thread) {
            self.remove_stream(s, dag);
        }
    }

    fn remove_stream(&mut self, s: StreamId, dag: &Dag) {
        let Some(mut st) = self.streams.remove(&s) else { return };
        prune(&mut st.frontier, dag);
        self.orphans.retain(|t| dag.is_live(*t));
        self.orphans.extend_from_slice(&st.frontier);
        if st.dirty {
            self.legacy_orphans.retain(|t| dag.is_live(*t));
            self.legacy_orphans.extend_from_slice(&st.frontier);
        }
    }

    /// Folds the frontiers of dirty blocking streams (and destroyed ones) into the legacy
    /// frontier: "the legacy stream first waits on all blocking streams".
    fn absorb_into_legacy(&mut self, dag: &Dag) {
        let Order { legacy, streams, dirty, legacy_orphans, .. } = self;
        for s in dirty.drain(..) {
            if let Some(st) = streams.get_mut(&s) {
                st.dirty = false;
                legacy.frontier.extend(st.frontier.iter().copied().filter(|t| dag.is_live(*t)));
            }
        }
        legacy.frontier.extend(legacy_orphans.drain(..).filter(|t| dag.is_live(*t)));
        prune_dedup(&mut legacy.frontier, dag);
    }

    fn mark_dirty(&mut self, s: StreamId) {
        if let Some(st) = self.streams.get_mut(&s) {
            if st.kind.syncs_with_legacy() && !st.dirty {
                st.dirty = true;
                self.dirty.push(s);
            }
        }
    }

    /// Records an op on `s` with its happens-before predecessors and makes it the stream's tail.
    pub(crate) fn record_op(&mut self, s: StreamId, dag: &mut Dag, desc: Arc<OpDesc>) -> Result<Recorded, VctxError> {
        let mut candidates: SmallVec<[OpId; 8]> = SmallVec::new();
        if s == StreamId::LEGACY {
            self.absorb_into_legacy(dag);
            candidates.extend(self.legacy.frontier.drain(..));
            let recorded = dag.insert(s, self.legacy.priority, desc, &mut candidates);
            self.legacy.frontier.push(recorded.op);
            return Ok(recorded);
        }
        let Order { legacy, streams, dirty, .. } = self;
        let st = streams.get_mut(&s).ok_or(VctxError::InvalidHandle(Handle::Stream(s)))?;
        if st.kind.syncs_with_legacy() {
            // "then all blocking streams wait on the legacy stream". A stream that is not dirty
            // was absorbed by the legacy stream after its last action: its own frontier is
            // covered by the legacy frontier, so only the latter becomes direct predecessors.
            prune(&mut legacy.frontier, dag);
            if st.dirty {
                candidates.extend(st.frontier.drain(..));
            } else {
                st.frontier.clear();
                st.dirty = true;
                dirty.push(s);
            }
            candidates.extend_from_slice(&legacy.frontier);
        } else {
            candidates.extend(st.frontier.drain(..));
        }
        let recorded = dag.insert(s, st.priority, desc, &mut candidates);
        st.frontier.push(recorded.op);
        Ok(recorded)
    }

    /// Whether an op recorded on `s` now would have no live predecessor (would be ready at once).
    pub(crate) fn would_be_fresh(&mut self, s: StreamId, dag: &Dag) -> Result<bool, VctxError> {
        Ok(self.capture(s, dag)?.is_empty())
    }

    /// Whether an op recorded on `s` now would have no live predecessor once the ops in
    /// `completed` (established complete, with their ancestors, but not yet satisfied in `dag`)
    /// are: every token it would depend on is one of them.
    pub(crate) fn would_be_fresh_after(
        &mut self,
        s: StreamId,
        dag: &Dag,
        completed: &[OpId],
    ) -> Result<bool, VctxError> {
        Ok(self.capture(s, dag)?.iter().all(|t| completed.contains(t)))
    }

    /// The tokens an op recorded on `s` now would depend on (legacy: after absorption).
    fn capture(&mut self, s: StreamId, dag: &Dag) -> Result<Frontier, VctxError> {
        if s == StreamId::LEGACY {
            self.absorb_into_legacy(dag);
            return Ok(self.legacy.frontier.clone());
        }
        let st = self.streams.get(&s).ok_or(VctxError::InvalidHandle(Handle::Stream(s)))?;
        let mut tokens = st.frontier.clone();
        if st.kind.syncs_with_legacy() {
            tokens.extend_from_slice(&self.legacy.frontier);
        }
        prune_dedup(&mut tokens, dag);
        Ok(tokens)
    }

    /// Creates an event (never recorded: complete).
    pub(crate) fn create_event(&mut self) -> EventId {
        loop {
            let id = EventId(self.next_event);
            self.next_event = self.next_event.wrapping_add(1).max(1);
            if let Entry::Vacant(slot) = self.events.entry(id) {
                slot.insert(Event::default());
                return id;
            }
        }
    }

    /// Destroys an event; waits already issued keep their generation.
    pub(crate) fn destroy_event(&mut self, e: EventId) -> Result<(), VctxError> {
        self.events.remove(&e).map(|_| ()).ok_or(VctxError::InvalidHandle(Handle::Event(e)))
    }

    /// Records a new generation of `e` on `s`; returns its number (1 for the first record).
    pub(crate) fn record_event(&mut self, e: EventId, s: StreamId, dag: &Dag) -> Result<u64, VctxError> {
        if !self.events.contains_key(&e) {
            return Err(VctxError::InvalidHandle(Handle::Event(e)));
        }
        let tokens = self.capture(s, dag)?;
        let ev = self.events.get_mut(&e).ok_or(VctxError::InvalidHandle(Handle::Event(e)))?;
        ev.generation += 1;
        ev.tokens = tokens;
        Ok(ev.generation)
    }

    /// Makes later actions on `s` follow the generation of `e` current now.
    pub(crate) fn wait_event(&mut self, s: StreamId, e: EventId, dag: &Dag) -> Result<(), VctxError> {
        let ev = self.events.get(&e).ok_or(VctxError::InvalidHandle(Handle::Event(e)))?;
        let mut tokens = ev.tokens.clone();
        prune(&mut tokens, dag);
        self.stream(s)?;
        if s == StreamId::LEGACY {
            self.absorb_into_legacy(dag);
        }
        let st = self.stream_mut(s)?;
        st.frontier.extend(tokens);
        prune_dedup(&mut st.frontier, dag);
        self.mark_dirty(s);
        Ok(())
    }

    /// The tokens of the generation of `e` current now, and that generation's number.
    pub(crate) fn event_tokens(&self, e: EventId) -> Result<(u64, Frontier), VctxError> {
        let ev = self.events.get(&e).ok_or(VctxError::InvalidHandle(Handle::Event(e)))?;
        Ok((ev.generation, ev.tokens.clone()))
    }

    /// Every token device synchronization must wait for: all frontiers, live and orphaned.
    pub(crate) fn all_tokens(&self, dag: &Dag) -> Vec<OpId> {
        let mut all: Vec<OpId> = self.legacy.frontier.to_vec();
        for st in self.streams.values() {
            all.extend_from_slice(&st.frontier);
        }
        all.extend_from_slice(&self.orphans);
        all.retain(|t| dag.is_live(*t));
        all
    }

    /// Records the first asynchronous failure on `s`, if the stream still exists.
    pub(crate) fn set_stream_error(&mut self, s: StreamId, error: &VctxError) {
        if let Ok(st) = self.stream_mut(s) {
            st.error.get_or_insert_with(|| error.clone());
        }
    }

    /// Number of live streams (the legacy default stream included) and events.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.streams.len() + 1, self.events.len())
    }
}
