//! Op timeline trace, for latency diagnosis on real hardware (`VITAMIN_TRACE=path` in the shim).
//!
//! Off by default; when off, [`mark`] is one relaxed atomic load. When on, every mark stores a
//! timestamp (ns since [`start`]), a [`Tag`], a small per-thread number and one argument (an op
//! id or a count) into a preallocated ring of atomics: no allocation, no lock, no system call on
//! the marked paths, so the trace perturbs what it measures by tens of nanoseconds per mark. The
//! ring keeps the last `capacity` marks; [`write_csv`] writes them in time order.
//!
//! Hand-written rather than `tracing` spans: a subscriber that timestamps and stores each event
//! costs about a microsecond per event, the size of the gaps being measured.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// What happened at a mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Tag {
    /// An application thread entered a launch call (argument 0).
    LaunchEnter = 1,
    /// The launch call returns (argument: the recorded op id, or 0).
    LaunchExit = 2,
    /// An application thread entered a synchronize call.
    SyncEnter = 3,
    /// The synchronize call returns.
    SyncExit = 4,
    /// The dispatcher calls the backend to submit an op (argument: op id).
    SubmitBegin = 5,
    /// The backend returned (argument: op id).
    SubmitEnd = 6,
    /// A completion poll starts.
    PollBegin = 7,
    /// A completion poll ends (argument: ops completed).
    PollEnd = 8,
    /// Completed ops were satisfied in a virtual context (argument: how many): waiting threads
    /// can see them from here on.
    Satisfied = 9,
    /// A dispatcher round starts.
    RoundBegin = 10,
    /// The round's intake ends (argument: ready ops).
    IntakeEnd = 11,
    /// Binding of ready ops starts (argument: ready ops).
    BindBegin = 12,
    /// A recording thread starts binding its fresh op itself (argument: op id; eager binding).
    EagerBegin = 13,
    /// An application thread built a launch's descriptor (its arguments copied).
    Captured = 14,
    /// An op was recorded in its virtual context (argument: op id), inside the vCtx lock.
    Recorded = 15,
    /// A backend calls the driver to issue an op (the launch, copy, ... itself) or a lane fence
    /// (argument: the stream's handle, with bit 63 set for a fence record; 0 if unknown).
    IssueBegin = 16,
    /// The driver call issuing an op returned.
    IssueEnd = 17,
    /// A thread wakes a parked thread (argument: 1 the submission thread, 2 the dispatcher
    /// thread, 3 threads waiting for completions): a system call, and the woken thread runs
    /// only microseconds later.
    Wake = 18,
    /// A thread found a lock held and waits for it (argument: 1 a virtual context's lock).
    Contended = 19,
    /// A numbered point on a hot path, for finer diagnosis (argument: the point's number, see
    /// [`step`] and its call sites).
    Step = 20,
}

/// Bit 63 of an [`Tag::IssueBegin`] argument: the driver call records a lane fence.
pub const ISSUE_FENCE: u64 = 1 << 63;

/// Every tag with its name in the CSV.
const TAGS: [(Tag, &str); 20] = [
    (Tag::LaunchEnter, "launch_enter"),
    (Tag::LaunchExit, "launch_exit"),
    (Tag::SyncEnter, "sync_enter"),
    (Tag::SyncExit, "sync_exit"),
    (Tag::SubmitBegin, "submit_begin"),
    (Tag::SubmitEnd, "submit_end"),
    (Tag::PollBegin, "poll_begin"),
    (Tag::PollEnd, "poll_end"),
    (Tag::Satisfied, "satisfied"),
    (Tag::RoundBegin, "round_begin"),
    (Tag::IntakeEnd, "intake_end"),
    (Tag::BindBegin, "bind_begin"),
    (Tag::EagerBegin, "eager_begin"),
    (Tag::Captured, "captured"),
    (Tag::Recorded, "recorded"),
    (Tag::IssueBegin, "issue_begin"),
    (Tag::IssueEnd, "issue_end"),
    (Tag::Wake, "wake"),
    (Tag::Contended, "contended"),
    (Tag::Step, "step"),
];

impl Tag {
    /// The tag's name in the CSV.
    pub fn name(self) -> &'static str {
        TAGS.iter().find(|(t, _)| *t == self).map_or("?", |(_, n)| n)
    }

    fn from_u8(v: u8) -> Option<Tag> {
        TAGS.iter().map(|(t, _)| *t).find(|t| *t as u8 == v)
    }
}

struct Ring {
    epoch: Instant,
    /// Three words per mark: time ns, (tag << 32 | thread), argument.
    words: Box<[AtomicU64]>,
    next: AtomicUsize,
    capacity: usize,
}

static ON: AtomicBool = AtomicBool::new(false);
static RING: OnceLock<Ring> = OnceLock::new();
static THREADS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static THREAD: u64 = THREADS.fetch_add(1, Ordering::Relaxed);
}

/// Starts tracing into a ring of `capacity` marks (24 bytes each). Later calls change nothing.
pub fn start(capacity: usize) {
    let capacity = capacity.max(1);
    let ring = RING.get_or_init(|| Ring {
        epoch: Instant::now(),
        words: (0..capacity * 3).map(|_| AtomicU64::new(0)).collect(),
        next: AtomicUsize::new(0),
        capacity,
    });
    let _ = ring;
    ON.store(true, Ordering::Release);
}

/// Whether tracing is on.
#[inline]
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Records `tag` with `arg` now, if tracing is on.
#[inline]
pub fn mark(tag: Tag, arg: u64) {
    if enabled() {
        mark_slow(tag, arg);
    }
}

/// Marks the numbered point `n` of a hot path ([`Tag::Step`]). Points in use: launch capture
/// 1 (stream resolved), 2 (function known), 3 (arguments copied); launch-first 4 (function looked
/// up), 5 (launch checked), 6 (probe ready), 7 (vCtx lock held, the op would be fresh), 8
/// (dispatcher lock taken); eager binding 10 (completions
/// finished, idle leases released), 11 (policy asked), 12 (lease and lane chosen); backend
/// submission 14 (descriptor checked), 15 (context current), 16 (lane locked), 17 (hand-off
/// decided); completion poll 20 (backend polled, before satisfying tokens), 21 (a lane's fence
/// found complete), 23 (vCtx lock held to satisfy completions), 24 (completions satisfied, before
/// wake-ups), 25 (a waiting thread read its ops' fence words reached), 26 (its vCtx lock held to
/// leave them for the next holder), 28 (a holder satisfies ops waiting threads left), 29 (a fresh
/// launch's binding catches up with completions the pool still counts).
#[inline]
pub fn step(n: u64) {
    mark(Tag::Step, n);
}

#[cold]
fn mark_slow(tag: Tag, arg: u64) {
    let Some(r) = RING.get() else { return };
    let t = r.epoch.elapsed().as_nanos() as u64;
    let thread = THREAD.with(|t| *t);
    let i = r.next.fetch_add(1, Ordering::Relaxed) % r.capacity;
    r.words[i * 3].store(t, Ordering::Relaxed);
    r.words[i * 3 + 1].store(((tag as u64) << 32) | (thread & 0xffff_ffff), Ordering::Relaxed);
    r.words[i * 3 + 2].store(arg, Ordering::Relaxed);
}

/// Stops tracing and writes the kept marks as CSV (`t_ns,tag,thread,arg`, in time order) to
/// `out`. Returns how many marks were written (0 if tracing never started).
pub fn write_csv(out: &mut impl Write) -> std::io::Result<usize> {
    ON.store(false, Ordering::Release);
    let Some(r) = RING.get() else { return Ok(0) };
    let n = r.next.load(Ordering::Acquire).min(r.capacity);
    let mut rows: Vec<(u64, Tag, u64, u64)> = (0..n)
        .filter_map(|i| {
            let w = r.words[i * 3 + 1].load(Ordering::Relaxed);
            let tag = Tag::from_u8((w >> 32) as u8)?;
            Some((
                r.words[i * 3].load(Ordering::Relaxed),
                tag,
                w & 0xffff_ffff,
                r.words[i * 3 + 2].load(Ordering::Relaxed),
            ))
        })
        .collect();
    rows.sort_by_key(|row| row.0);
    writeln!(out, "t_ns,tag,thread,arg")?;
    for (t, tag, thread, arg) in &rows {
        writeln!(out, "{t},{},{thread},{arg}", tag.name())?;
    }
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_has_one_distinct_name_and_round_trips() {
        let mut names: Vec<&str> = TAGS.iter().map(|(_, n)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), TAGS.len());
        for (t, n) in TAGS {
            assert_eq!(t.name(), n);
            assert_eq!(Tag::from_u8(t as u8), Some(t));
        }
        assert_eq!(Tag::from_u8(0), None);
    }

    #[test]
    fn marks_come_out_in_time_order_with_their_tags_threads_and_arguments() {
        // Before start, marks are dropped.
        mark(Tag::PollEnd, 99);
        start(8);
        mark(Tag::LaunchEnter, 0);
        mark(Tag::LaunchExit, 7);
        let other = std::thread::spawn(|| mark(Tag::SubmitBegin, 7));
        other.join().unwrap();
        let mut out = Vec::new();
        assert_eq!(write_csv(&mut out).unwrap(), 3);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "t_ns,tag,thread,arg");
        let fields: Vec<Vec<&str>> = lines[1..].iter().map(|l| l.split(',').collect()).collect();
        assert_eq!(fields.iter().map(|f| f[1]).collect::<Vec<_>>(), ["launch_enter", "launch_exit", "submit_begin"]);
        assert_eq!(fields[1][3], "7");
        assert_eq!(fields[0][2], fields[1][2], "same thread");
        assert_ne!(fields[1][2], fields[2][2], "another thread");
        let times: Vec<u64> = fields.iter().map(|f| f[0].parse().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        // Writing stopped the trace: later marks are dropped.
        mark(Tag::PollBegin, 0);
        let mut again = Vec::new();
        assert_eq!(write_csv(&mut again).unwrap(), 3);
    }
}
