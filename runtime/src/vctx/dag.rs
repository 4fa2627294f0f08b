//! The token DAG: live ops, their predecessor counts, and the ready / continuable queues.
//!
//! Pure bookkeeping with no locking; [`VirtualContext`](super::VirtualContext) owns one behind
//! its lock. Every operation is O(number of edges touched): readiness is pushed to dependents
//! when a token retires, never found by scanning.
//!
//! ## Invariants
//! - A node is *live* from `insert` until it *retires*; the table holds exactly the live nodes,
//!   so its size is bounded by the ops recorded and not yet retired. Unknown ids count as retired.
//! - `pending` = live predecessors; `unsubmitted` = live predecessors not yet submitted.
//! - A node retires when it is *completed* (`satisfy`) and `pending == 0`. Hence a retired op's
//!   predecessors retired before it, and by induction all its happens-before ancestors: an op
//!   satisfied early (possible under lane continuation, when completions of different lanes are
//!   observed out of order) stays live, "completed", until its predecessors retire.
//! - A node enters the ready queue exactly once, when `pending` reaches 0 without it having been
//!   submitted; [`Dag::take_ready`] hands it out at most once. A node submitted before it became
//!   ready (lane continuation) is never handed out as ready.
//! - A node enters the continuable queue at most once, when it is not submitted, `pending > 0`
//!   and `unsubmitted == 0`. Once true this stays true until it becomes ready or is submitted, so
//!   [`Dag::take_continuable`] reports each such op exactly once unless it became ready or was
//!   submitted first.
//! - Queue entries of nodes that retired or were submitted are skipped lazily; a queue is
//!   compacted when it grows past twice the live table, so memory stays bounded even if a caller
//!   never drains a queue.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use smallvec::SmallVec;
use vitamin_hal::OpDesc;

use super::ids::{IdMap, OpId, StreamId};
use super::table::Table;

/// The result of recording an op: its id (token) and its direct predecessors that were still
/// unsatisfied at recording time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The op's id and completion token.
    pub op: OpId,
    /// Its live (unsatisfied) direct happens-before predecessors, ascending, without duplicates.
    /// Empty means the op was ready at once.
    pub preds: SmallVec<[OpId; 4]>,
}

/// An op whose predecessors all retired: eligible for binding to a physical context.
#[derive(Debug, Clone)]
pub struct ReadyOp {
    /// The op.
    pub op: OpId,
    /// The logical stream it was recorded on.
    pub stream: StreamId,
    /// That stream's priority at creation (lower = higher priority, as in both vendors' drivers).
    pub priority: i32,
    /// The immutable descriptor, exactly as recorded.
    pub desc: Arc<OpDesc>,
}

/// An op that is not ready but whose unsatisfied predecessors have all been submitted: a
/// candidate for lane continuation (DESIGN.md), which the dispatcher may bind early.
#[derive(Debug, Clone)]
pub struct ContinuableOp {
    /// The op.
    pub op: OpId,
    /// The logical stream it was recorded on.
    pub stream: StreamId,
    /// That stream's priority.
    pub priority: i32,
    /// The immutable descriptor.
    pub desc: Arc<OpDesc>,
    /// Its direct predecessors still unsatisfied when this report was taken, all submitted.
    pub pending_preds: SmallVec<[OpId; 4]>,
}

#[derive(Debug)]
struct Node {
    /// The descriptor until the op is submitted; then the dispatcher holds it. Dropped by the
    /// thread marking the op submitted, which holds it warm (the dispatcher, or a thread that
    /// launched the op itself), not by whichever thread retires it: a thread waiting in a
    /// synchronize call and retiring the ops it waited for would otherwise decrement reference
    /// counts that the dispatcher and submission threads wrote last, one cache-line transfer
    /// per op (about 0.2 us each on the H200 host, `bench/probes/host/c2c_probe.c`).
    desc: Option<Arc<OpDesc>>,
    stream: StreamId,
    priority: i32,
    /// Direct predecessors live at recording time (ascending).
    preds: SmallVec<[OpId; 4]>,
    /// Ops that have this one among their `preds`.
    dependents: SmallVec<[OpId; 4]>,
    pending: u32,
    unsubmitted: u32,
    submitted: bool,
    completed: bool,
    handed_out: bool,
    continuable_queued: bool,
}

/// What a mutation did that the owner must act on (wake-ups), accumulated until taken.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Effects {
    /// A watched op retired (or, watched for submission, was submitted): blocked host threads
    /// must re-check.
    pub(crate) woke_watched: bool,
    /// The ready or continuable queue received an entry.
    pub(crate) new_work: bool,
    /// An op was submitted by the thread that recorded it (eagerly): a parked dispatcher must
    /// wake to observe its completion, though there is no work for it to take.
    pub(crate) submitted_eagerly: bool,
}

/// Buckets of [`LiveByStream`].
const LIVE_BUCKETS: usize = 64;

/// Live ops per bucket of logical streams (stream id modulo [`LIVE_BUCKETS`]), readable without
/// the vCtx lock: a hint for a launching thread that an op recorded on a stream now would have
/// a live predecessor (its bucket counts a live op), so it need not take the lock to find out
/// (launch-first, whose lock-held freshness check a dependent chain fails at every launch).
/// Counts change under the lock only; a reader may see a stale count.
#[derive(Debug)]
pub(crate) struct LiveByStream([AtomicU32; LIVE_BUCKETS]);

impl Default for LiveByStream {
    fn default() -> Self {
        LiveByStream(std::array::from_fn(|_| AtomicU32::new(0)))
    }
}

impl LiveByStream {
    fn bucket(&self, s: StreamId) -> &AtomicU32 {
        &self.0[s.0 as usize % LIVE_BUCKETS]
    }
    /// Whether stream `s`'s bucket counted a live op when read (see the type's docs).
    pub(crate) fn any(&self, s: StreamId) -> bool {
        self.bucket(s).load(Ordering::Relaxed) > 0
    }
}

/// The live ops of one virtual context and the edges between them.
#[derive(Debug)]
pub(crate) struct Dag {
    nodes: Table<Node>,
    live: Arc<LiveByStream>,
    next: u64,
    ready: VecDeque<OpId>,
    continuable: VecDeque<OpId>,
    /// Ops some blocked host thread waits on, with the number of such waiters.
    watched: IdMap<OpId, u32>,
    /// Ops some blocked host thread waits to see submitted, with the number of such waiters.
    watched_submission: IdMap<OpId, u32>,
    effects: Effects,
    scratch: Vec<OpId>,
}

/// Queues are compacted when longer than this and than twice the live table.
const COMPACT_MIN: usize = 64;

impl Default for Dag {
    fn default() -> Self {
        Dag {
            nodes: Table::default(),
            live: Arc::default(),
            next: 1,
            ready: VecDeque::new(),
            continuable: VecDeque::new(),
            watched: IdMap::default(),
            watched_submission: IdMap::default(),
            effects: Effects::default(),
            scratch: Vec::new(),
        }
    }
}

impl Dag {
    /// Whether `op` is recorded and not yet retired (its token is unsatisfied).
    pub(crate) fn is_live(&self, op: OpId) -> bool {
        self.nodes.contains(op)
    }

    /// The live-op counts per stream bucket, shared for reading without the lock.
    pub(crate) fn live_by_stream(&self) -> Arc<LiveByStream> {
        self.live.clone()
    }

    /// Number of live ops.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The stream `op` was recorded on, while it is live.
    pub(crate) fn stream_of(&self, op: OpId) -> Option<StreamId> {
        self.nodes.get(op).map(|n| n.stream)
    }

    /// Whether a queue holds entries (possibly stale ones).
    pub(crate) fn has_work(&self) -> bool {
        !self.ready.is_empty() || !self.continuable.is_empty()
    }

    /// Returns and clears the accumulated effects.
    /// Whether the effects not yet taken include new work.
    pub(crate) fn pending_new_work(&self) -> bool {
        self.effects.new_work
    }

    /// The op just recorded was submitted by its recording thread: the ready entry it got is
    /// no work for the dispatcher (its queue entry is skipped when taken), so the new-work
    /// effect goes back to `had_work`, what it was before the op was recorded.
    pub(crate) fn recorded_op_submitted_eagerly(&mut self, op: OpId, had_work: bool) {
        self.effects.new_work = had_work;
        self.effects.submitted_eagerly = true;
        self.mark_submitted(op);
    }

    pub(crate) fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    /// Records a new op depending on the live ops among `candidates` (duplicates and retired
    /// ids are dropped) and queues it as ready or continuable if it already is.
    pub(crate) fn insert(
        &mut self,
        stream: StreamId,
        priority: i32,
        desc: Arc<OpDesc>,
        candidates: &mut SmallVec<[OpId; 8]>,
    ) -> Recorded {
        let op = OpId(self.next);
        self.next += 1;
        if candidates.len() > 1 {
            candidates.sort_unstable();
            candidates.dedup();
        }
        let mut preds = SmallVec::new();
        let mut unsubmitted = 0;
        for &c in candidates.iter() {
            if let Some(p) = self.nodes.get_mut(c) {
                p.dependents.push(op);
                unsubmitted += u32::from(!p.submitted);
                preds.push(c);
            }
        }
        let pending = preds.len() as u32;
        let mut node = Node {
            desc: Some(desc),
            stream,
            priority,
            preds,
            dependents: SmallVec::new(),
            pending,
            unsubmitted,
            submitted: false,
            completed: false,
            handed_out: false,
            continuable_queued: false,
        };
        if pending == 0 {
            self.push_ready(op);
        } else if unsubmitted == 0 {
            node.continuable_queued = true;
            self.push_continuable(op);
        }
        let recorded = Recorded { op, preds: node.preds.clone() };
        self.live.bucket(stream).fetch_add(1, Ordering::Relaxed);
        self.nodes.insert(op, node);
        recorded
    }

    /// Notes that `op` was handed to a backend lane. Idempotent; unknown ids are ignored.
    pub(crate) fn mark_submitted(&mut self, op: OpId) {
        let Some(n) = self.nodes.get_mut(op) else { return };
        if n.submitted {
            return;
        }
        n.submitted = true;
        n.desc = None;
        if !self.watched_submission.is_empty() && self.watched_submission.contains_key(&op) {
            self.effects.woke_watched = true;
        }
        // Borrow the dependents out of the node (no allocation on this per-op path) and put
        // them back afterwards; a node is never its own dependent.
        let dependents = std::mem::take(&mut n.dependents);
        for &d in &dependents {
            let Some(dn) = self.nodes.get_mut(d) else { continue };
            dn.unsubmitted -= 1;
            if dn.unsubmitted == 0 && dn.pending > 0 && !dn.submitted && !dn.continuable_queued {
                dn.continuable_queued = true;
                self.push_continuable(d);
            }
        }
        if let Some(n) = self.nodes.get_mut(op) {
            n.dependents = dependents;
        }
    }

    /// Physical completion of `op`: retires it (and any early-completed dependents this
    /// unblocks) once its predecessors have retired. Idempotent; unknown ids are ignored.
    /// Returns the op's stream if it was live and not yet completed.
    pub(crate) fn satisfy(&mut self, op: OpId) -> Option<StreamId> {
        let n = self.nodes.get_mut(op)?;
        if n.completed {
            return None;
        }
        n.completed = true;
        let stream = n.stream;
        if n.pending == 0 {
            self.retire(op);
        } else {
            // Completed before its predecessors were observed complete: it counts as
            // submitted (it ran) and retires with its last predecessor.
            self.mark_submitted(op);
        }
        Some(stream)
    }

    /// Physical completion of `op` **and of every live ancestor** (the caller observed that all
    /// of them ran, e.g. `op` completed on a FIFO lane that every live ancestor of a submitted op
    /// shares): satisfies them oldest first, so each retires at once. Unknown ids are ignored.
    pub(crate) fn satisfy_with_ancestors(&mut self, op: OpId) {
        let mut stack = vec![op];
        let mut all = Vec::new();
        while let Some(id) = stack.pop() {
            let Some(n) = self.nodes.get(id) else { continue };
            if all.contains(&id) {
                continue;
            }
            all.push(id);
            stack.extend(n.preds.iter().copied());
        }
        all.sort_unstable();
        for id in all {
            self.satisfy(id);
        }
    }

    fn retire(&mut self, first: OpId) {
        let mut stack = std::mem::take(&mut self.scratch);
        stack.push(first);
        while let Some(id) = stack.pop() {
            let Some(n) = self.nodes.remove(id) else { continue };
            self.live.bucket(n.stream).fetch_sub(1, Ordering::Relaxed);
            if (!self.watched.is_empty() && self.watched.contains_key(&id))
                || (!self.watched_submission.is_empty() && self.watched_submission.contains_key(&id))
            {
                self.effects.woke_watched = true;
            }
            for d in n.dependents {
                let Some(dn) = self.nodes.get_mut(d) else { continue };
                dn.pending -= 1;
                if !n.submitted {
                    dn.unsubmitted -= 1;
                }
                if dn.pending == 0 {
                    if dn.completed {
                        stack.push(d);
                    } else if !dn.submitted {
                        self.push_ready(d);
                    }
                } else if dn.unsubmitted == 0 && !dn.submitted && !dn.continuable_queued {
                    dn.continuable_queued = true;
                    self.push_continuable(d);
                }
            }
        }
        self.scratch = stack;
    }

    fn push_ready(&mut self, op: OpId) {
        self.ready.push_back(op);
        self.effects.new_work = true;
        if self.ready.len() > COMPACT_MIN && self.ready.len() > 2 * self.nodes.len() {
            let nodes = &self.nodes;
            self.ready.retain(|id| nodes.get(*id).is_some_and(|n| !n.submitted && !n.handed_out));
        }
    }

    fn push_continuable(&mut self, op: OpId) {
        self.continuable.push_back(op);
        self.effects.new_work = true;
        if self.continuable.len() > COMPACT_MIN && self.continuable.len() > 2 * self.nodes.len() {
            let nodes = &self.nodes;
            self.continuable.retain(|id| nodes.get(*id).is_some_and(|n| !n.submitted && n.pending > 0));
        }
    }

    /// Appends the ops that became ready since the last call, in the order they became ready.
    pub(crate) fn take_ready(&mut self, out: &mut Vec<ReadyOp>) {
        while let Some(id) = self.ready.pop_front() {
            let Some(n) = self.nodes.get_mut(id) else { continue };
            if n.submitted || n.handed_out {
                continue;
            }
            // Present until submitted.
            let Some(desc) = n.desc.clone() else { continue };
            n.handed_out = true;
            out.push(ReadyOp { op: id, stream: n.stream, priority: n.priority, desc });
        }
    }

    /// Appends the ops that became continuable since the last call and still are.
    pub(crate) fn take_continuable(&mut self, out: &mut Vec<ContinuableOp>) {
        while let Some(id) = self.continuable.pop_front() {
            let Some(n) = self.nodes.get(id) else { continue };
            if n.submitted || n.pending == 0 {
                continue;
            }
            // Present until submitted.
            let Some(desc) = n.desc.clone() else { continue };
            let pending_preds = n.preds.iter().copied().filter(|p| self.nodes.contains(*p)).collect();
            out.push(ContinuableOp { op: id, stream: n.stream, priority: n.priority, desc, pending_preds });
        }
    }

    /// Whether `op` was handed to a backend lane, retired, or was never recorded.
    pub(crate) fn is_submitted(&self, op: OpId) -> bool {
        self.nodes.get(op).is_none_or(|n| n.submitted)
    }

    /// Registers one blocked waiter for the submission of `op`: its submission or retirement sets
    /// [`Effects::woke_watched`].
    pub(crate) fn watch_submission(&mut self, op: OpId) {
        *self.watched_submission.entry(op).or_insert(0) += 1;
    }

    /// Removes one waiter registered with [`Dag::watch_submission`].
    pub(crate) fn unwatch_submission(&mut self, op: OpId) {
        if let Some(c) = self.watched_submission.get_mut(&op) {
            *c -= 1;
            if *c == 0 {
                self.watched_submission.remove(&op);
            }
        }
    }

    /// Registers one blocked waiter on `op`: its retirement sets [`Effects::woke_watched`].
    pub(crate) fn watch(&mut self, op: OpId) {
        *self.watched.entry(op).or_insert(0) += 1;
    }

    /// Removes one waiter registered with [`Dag::watch`].
    pub(crate) fn unwatch(&mut self, op: OpId) {
        if let Some(c) = self.watched.get_mut(&op) {
            *c -= 1;
            if *c == 0 {
                self.watched.remove(&op);
            }
        }
    }

    /// Checks the counters against the edges (tests only).
    #[cfg(test)]
    pub(crate) fn check_consistency(&self) {
        for (id, n) in self.nodes.values() {
            let live: Vec<_> = n.preds.iter().filter_map(|p| self.nodes.get(*p)).collect();
            assert_eq!(n.pending as usize, live.len(), "{id}: pending count");
            assert_eq!(n.unsubmitted as usize, live.iter().filter(|p| !p.submitted).count(), "{id}: unsubmitted");
            for p in &n.preds {
                if let Some(pn) = self.nodes.get(*p) {
                    assert!(pn.dependents.contains(&id), "{p} lacks dependent {id}");
                }
            }
            assert!(!(n.completed && n.pending == 0), "{id} completed with no pending preds but not retired");
        }
        let mut per_bucket = [0u32; LIVE_BUCKETS];
        for (_, n) in self.nodes.values() {
            per_bucket[n.stream.0 as usize % LIVE_BUCKETS] += 1;
        }
        for (b, want) in per_bucket.iter().enumerate() {
            assert_eq!(self.live.0[b].load(Ordering::Relaxed), *want, "live ops of stream bucket {b}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vitamin_hal::Marker;

    fn desc() -> Arc<OpDesc> {
        Arc::new(OpDesc::Marker(Marker::Barrier))
    }

    fn ins(d: &mut Dag, preds: &[OpId]) -> Recorded {
        let mut c: SmallVec<[OpId; 8]> = preds.iter().copied().collect();
        d.insert(StreamId(1), 0, desc(), &mut c)
    }

    fn ready(d: &mut Dag) -> Vec<OpId> {
        let mut v = Vec::new();
        d.take_ready(&mut v);
        v.into_iter().map(|r| r.op).collect()
    }

    fn continuable(d: &mut Dag) -> Vec<(OpId, Vec<OpId>)> {
        let mut v = Vec::new();
        d.take_continuable(&mut v);
        v.into_iter().map(|c| (c.op, c.pending_preds.to_vec())).collect()
    }

    #[test]
    fn chain_releases_in_order_and_table_empties() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[a]);
        assert_eq!(b.preds.as_slice(), &[a]);
        assert_eq!(ready(&mut d), vec![a]);
        d.satisfy(a);
        assert_eq!(ready(&mut d), vec![b.op]);
        d.satisfy(b.op);
        assert_eq!(d.len(), 0);
        d.check_consistency();
    }

    #[test]
    fn duplicates_and_retired_candidates_are_dropped() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[]).op;
        d.satisfy(a);
        let c = ins(&mut d, &[b, a, b, OpId(999)]);
        assert_eq!(c.preds.as_slice(), &[b]);
        d.check_consistency();
    }

    #[test]
    fn satisfying_with_ancestors_retires_the_whole_live_history_and_nothing_else() {
        let mut d = Dag::default();
        // a -> b -> d and a -> c -> d (a diamond), plus an unrelated e.
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[a]).op;
        let c = ins(&mut d, &[a]).op;
        let x = ins(&mut d, &[b, c]).op;
        let e = ins(&mut d, &[]).op;
        let after = ins(&mut d, &[x]).op;
        assert_eq!(ready(&mut d), vec![a, e]);
        d.satisfy_with_ancestors(x);
        assert!(![a, b, c, x].iter().any(|&o| d.is_live(o)), "x and every ancestor retired");
        assert!(d.is_live(e), "an unrelated op stays live");
        assert_eq!(ready(&mut d), vec![after], "x's dependent became ready");
        // Unknown and already retired ids are ignored.
        d.satisfy_with_ancestors(OpId(999));
        d.satisfy_with_ancestors(x);
        assert_eq!(d.len(), 2);
        d.check_consistency();
    }

    #[test]
    fn early_completion_waits_for_predecessors() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[a]).op;
        let c = ins(&mut d, &[b]).op;
        assert_eq!(ready(&mut d), vec![a]);
        d.mark_submitted(a);
        assert_eq!(continuable(&mut d), vec![(b, vec![a])]);
        d.mark_submitted(b);
        assert_eq!(continuable(&mut d), vec![(c, vec![b])]);
        // b's completion is observed before a's: b stays live and c is not ready.
        d.satisfy(b);
        assert!(d.is_live(b));
        assert!(ready(&mut d).is_empty());
        d.check_consistency();
        d.satisfy(a);
        assert!(!d.is_live(a) && !d.is_live(b));
        assert_eq!(ready(&mut d), vec![c]);
        d.check_consistency();
    }

    #[test]
    fn submitted_before_ready_is_never_handed_out() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[a]).op;
        assert_eq!(ready(&mut d), vec![a]);
        d.mark_submitted(a);
        d.mark_submitted(b);
        d.satisfy(a);
        assert!(ready(&mut d).is_empty(), "b was continued, not ready");
        assert!(continuable(&mut d).is_empty(), "b was submitted");
        d.satisfy(b);
        assert_eq!(d.len(), 0);
    }

    #[test]
    fn continuable_reported_once_and_not_after_ready() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[]).op;
        let c = ins(&mut d, &[a, b]).op;
        d.mark_submitted(a);
        assert!(continuable(&mut d).is_empty(), "b not submitted yet");
        d.mark_submitted(b);
        d.mark_submitted(b);
        assert_eq!(continuable(&mut d), vec![(c, vec![a, b])]);
        assert!(continuable(&mut d).is_empty());
        d.satisfy(a);
        d.satisfy(b);
        assert!(continuable(&mut d).is_empty());
        // a and b were submitted without being taken: only c is handed out.
        assert_eq!(ready(&mut d), vec![c]);
    }

    #[test]
    fn undrained_queues_stay_bounded() {
        let mut d = Dag::default();
        for _ in 0..10_000 {
            let a = ins(&mut d, &[]).op;
            d.satisfy(a);
        }
        assert_eq!(d.len(), 0);
        assert!(d.ready.len() <= COMPACT_MIN + 1, "ready queue holds {}", d.ready.len());
    }

    #[test]
    fn watched_retirement_is_reported() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[]).op;
        d.watch(b);
        d.take_effects();
        d.satisfy(a);
        assert!(!d.take_effects().woke_watched);
        d.satisfy(b);
        assert!(d.take_effects().woke_watched);
        d.unwatch(b);
        assert!(d.watched.is_empty());
    }

    #[test]
    fn watched_submission_is_reported_and_retirement_counts() {
        let mut d = Dag::default();
        let a = ins(&mut d, &[]).op;
        let b = ins(&mut d, &[a]).op;
        d.watch_submission(b);
        d.watch(a);
        d.take_effects();
        // Submitting an op watched only for retirement wakes nobody (syncs pay no extra wake-ups).
        d.mark_submitted(a);
        assert!(!d.take_effects().woke_watched);
        assert!(d.is_submitted(a) && !d.is_submitted(b));
        d.mark_submitted(b);
        assert!(d.take_effects().woke_watched, "b's submission wakes its waiter");
        d.mark_submitted(b);
        assert!(!d.take_effects().woke_watched, "idempotent");
        d.unwatch_submission(b);
        assert!(d.watched_submission.is_empty());
        // An op that retires unsubmitted (failed at intake) wakes a submission waiter too.
        let c = ins(&mut d, &[]).op;
        d.watch_submission(c);
        d.take_effects();
        d.satisfy(c);
        assert!(d.take_effects().woke_watched);
        assert!(d.is_submitted(c), "retired counts as submitted");
        d.unwatch_submission(c);
        d.check_consistency();
    }
}
