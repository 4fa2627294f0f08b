//! Concurrency test: several host threads record ops on their own streams (blocking,
//! non-blocking, per-thread default, and the legacy default stream), link them with events
//! across threads, and synchronize, while a dispatcher thread takes ready and continuable ops
//! and two completion pollers complete them in random orders (continued ops possibly before
//! their predecessors).
//!
//! Every readiness and completion gets a timestamp from one global clock. Afterwards the test
//! checks, for every op handed out as ready, that it became ready after every transitive
//! happens-before ancestor (stream order, event edges, legacy-stream edges) was satisfied;
//! inline, that each stream/event/device synchronization returned only after the work it covers
//! was satisfied; and that everything completes (a watchdog fails the test instead of hanging).
//! A second run installs a wait assist that establishes the awaited ops complete once every op
//! recorded up to them is (by the "device" timestamps, before the pollers satisfy them), so
//! synchronize calls also return on their own and leave the ops to the next lock holder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use vitamin_hal::{Marker, OpDesc};
use vitamin_runtime::{EventId, OpId, StreamId, StreamKind, VctxId, VirtualContext};

const SUBMITTERS: usize = 4;
const OPS_PER_SUBMITTER: usize = 400;
const LEGACY_OPS: usize = 100;
const MAX_OPS: usize = SUBMITTERS * OPS_PER_SUBMITTER + LEGACY_OPS + 16;
const UNSET: u64 = u64::MAX;

struct Shared {
    ctx: VirtualContext,
    clock: AtomicU64,
    ready_at: Vec<AtomicU64>,
    done_at: Vec<AtomicU64>,
    /// Highest op id whose `record_op` returned (ids below it were recorded before).
    recorded_upto: AtomicU64,
    submitters_done: AtomicBool,
    /// Synchronize calls the wait assist ended.
    assisted: AtomicU64,
}

impl Shared {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }
    fn done(&self, op: OpId) -> bool {
        self.done_at[op.0 as usize].load(Ordering::SeqCst) != UNSET
    }
    fn record(&self, s: StreamId) -> OpId {
        let op = self.ctx.record_op(s, Arc::new(OpDesc::Marker(Marker::Barrier))).expect("record").op;
        self.recorded_upto.fetch_max(op.0, Ordering::SeqCst);
        op
    }
}

/// What one submitter recorded: its stream's ops in order, and the event edges it created.
struct Log {
    stream_kind: StreamKind,
    ops: Vec<OpId>,
    event_edges: Vec<(OpId, OpId)>,
}

fn submitter(sh: Arc<Shared>, i: usize, events: Vec<EventId>, rx: mpsc::Receiver<OpId>, tx: mpsc::Sender<OpId>) -> Log {
    let kind = match i {
        1 => StreamKind::NonBlocking,
        2 => StreamKind::PerThreadDefault { thread: 2 },
        _ => StreamKind::Blocking,
    };
    let s = sh.ctx.create_stream(kind, 0);
    let mut rng = ChaCha8Rng::seed_from_u64(i as u64);
    let mut log = Log { stream_kind: kind, ops: Vec::new(), event_edges: Vec::new() };
    let mut waited: Vec<OpId> = Vec::new();
    for k in 0..OPS_PER_SUBMITTER {
        // Wait on whatever the previous submitter announced: later ops follow its op.
        while let Ok(theirs) = rx.try_recv() {
            sh.ctx.wait_event(s, events[(i + SUBMITTERS - 1) % SUBMITTERS]).expect("wait");
            waited.push(theirs);
        }
        let op = sh.record(s);
        for w in waited.drain(..) {
            log.event_edges.push((w, op));
        }
        log.ops.push(op);
        if k % 10 == 9 {
            sh.ctx.record_event(events[i], s).expect("record event");
            let _ = tx.send(op);
        }
        if k % 50 == 49 {
            sh.ctx.stream_synchronize(s).expect("stream sync");
            for o in &log.ops {
                assert!(sh.done(*o), "stream sync returned before {o} was satisfied");
            }
        }
        if k % 100 == 99 {
            sh.ctx.event_synchronize(events[i]).expect("event sync");
            assert!(sh.done(op), "event sync returned before {op} was satisfied");
        }
        if rng.gen_bool(0.05) {
            thread::yield_now();
        }
    }
    log
}

fn legacy_submitter(sh: Arc<Shared>) -> Vec<OpId> {
    let mut ops = Vec::new();
    for k in 0..LEGACY_OPS {
        ops.push(sh.record(StreamId::LEGACY));
        if k % 3 == 0 {
            thread::sleep(Duration::from_micros(200));
        }
    }
    ops
}

fn device_syncer(sh: Arc<Shared>) {
    for _ in 0..20 {
        let upto = sh.recorded_upto.load(Ordering::SeqCst);
        sh.ctx.device_synchronize().expect("device sync");
        for id in 1..=upto {
            assert!(sh.done(OpId(id)), "device sync returned before op{id} was satisfied");
        }
        thread::sleep(Duration::from_millis(2));
    }
}

/// The submission thread: binds ready ops, and continues some continuable ones (as lane
/// continuation would), handing them to the "device" (the in-flight list). One per context,
/// as in the runtime's design: a continuable report is a snapshot that only the thread acting on
/// it may turn into a submission.
fn dispatcher(sh: Arc<Shared>, in_flight: Arc<Mutex<Vec<OpId>>>) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(100);
    let mut ready = Vec::new();
    let mut continuable = Vec::new();
    let mut continued = 0;
    loop {
        sh.ctx.wait_for_work(Duration::from_millis(1));
        sh.ctx.take_ready(&mut ready);
        for r in ready.drain(..) {
            sh.ready_at[r.op.0 as usize].store(sh.tick(), Ordering::SeqCst);
            sh.ctx.mark_submitted(r.op);
            in_flight.lock().unwrap().push(r.op);
        }
        sh.ctx.take_continuable(&mut continuable);
        for c in continuable.drain(..) {
            if rng.gen_bool(0.5) {
                sh.ctx.mark_submitted(c.op);
                in_flight.lock().unwrap().push(c.op);
                continued += 1;
            }
        }
        if sh.submitters_done.load(Ordering::SeqCst) && sh.ctx.outstanding() == 0 {
            return continued;
        }
    }
}

/// A completion poller: completes random in-flight ops in random order (continued ops possibly
/// before their predecessors, as completions of different lanes may be observed). With `late`,
/// a fifth of the ops complete on the "device" well before the poller satisfies them, as when a
/// completion is observed late.
fn poller(sh: Arc<Shared>, in_flight: Arc<Mutex<Vec<OpId>>>, seed: u64, late: bool) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    loop {
        let picked = {
            let mut f = in_flight.lock().unwrap();
            if f.is_empty() {
                None
            } else {
                let i = rng.gen_range(0..f.len());
                Some(f.swap_remove(i))
            }
        };
        match picked {
            Some(op) => {
                sh.done_at[op.0 as usize].store(sh.tick(), Ordering::SeqCst);
                if late && rng.gen_bool(0.2) {
                    thread::sleep(Duration::from_micros(200));
                }
                sh.ctx.satisfy(op);
            }
            None if sh.submitters_done.load(Ordering::SeqCst) && sh.ctx.outstanding() == 0 => return,
            None => thread::sleep(Duration::from_micros(rng.gen_range(0..50))),
        }
    }
}

#[test]
fn threads_submitting_and_completing_preserve_happens_before() {
    scenario(false);
}

#[test]
fn waiters_that_return_on_their_own_preserve_happens_before() {
    scenario(true);
}

fn scenario(assisted: bool) {
    let sh = Arc::new(Shared {
        ctx: VirtualContext::new(VctxId(3)),
        clock: AtomicU64::new(1),
        ready_at: (0..MAX_OPS).map(|_| AtomicU64::new(UNSET)).collect(),
        done_at: (0..MAX_OPS).map(|_| AtomicU64::new(UNSET)).collect(),
        recorded_upto: AtomicU64::new(0),
        submitters_done: AtomicBool::new(false),
        assisted: AtomicU64::new(0),
    });
    if assisted {
        // Every op recorded up to the last awaited one completed on the "device" (ancestors have
        // smaller ids), though the pollers may not have satisfied them yet.
        let weak = Arc::downgrade(&sh);
        sh.ctx.set_sync_spin(Duration::from_millis(20));
        assert!(sh.ctx.set_wait_assist(Box::new(move |ops: &[OpId]| {
            let Some(sh) = weak.upgrade() else { return false };
            let last = ops.iter().map(|o| o.0).max().unwrap_or(0);
            let done = (1..=last).all(|id| sh.done(OpId(id)));
            if done {
                sh.assisted.fetch_add(1, Ordering::SeqCst);
            } else {
                thread::yield_now();
            }
            done
        })));
    }
    let events: Vec<EventId> = (0..SUBMITTERS).map(|_| sh.ctx.create_event()).collect();
    let (finished_tx, finished_rx) = mpsc::channel();
    let sh2 = Arc::clone(&sh);
    // Runs the whole scenario on a helper thread so the test thread can act as a watchdog.
    thread::spawn(move || {
        let sh = sh2;
        let in_flight = Arc::new(Mutex::new(Vec::new()));
        let dispatcher = {
            let (sh, f) = (Arc::clone(&sh), Arc::clone(&in_flight));
            thread::spawn(move || dispatcher(sh, f))
        };
        let pollers: Vec<_> = (0..2)
            .map(|d| {
                let (sh, f) = (Arc::clone(&sh), Arc::clone(&in_flight));
                thread::spawn(move || poller(sh, f, 200 + d, assisted))
            })
            .collect();
        let mut txs = Vec::new();
        let mut rxs = Vec::new();
        for _ in 0..SUBMITTERS {
            let (tx, rx) = mpsc::channel();
            txs.push(tx);
            rxs.push(Some(rx));
        }
        let submitters: Vec<_> = (0..SUBMITTERS)
            .map(|i| {
                let sh = Arc::clone(&sh);
                let events = events.clone();
                let rx = rxs[i].take().expect("receiver");
                let tx = txs[(i + 1) % SUBMITTERS].clone();
                thread::spawn(move || submitter(sh, i, events, rx, tx))
            })
            .collect();
        let legacy = {
            let sh = Arc::clone(&sh);
            thread::spawn(move || legacy_submitter(sh))
        };
        let syncer = {
            let sh = Arc::clone(&sh);
            thread::spawn(move || device_syncer(sh))
        };
        let logs: Vec<Log> = submitters.into_iter().map(|h| h.join().expect("submitter")).collect();
        let legacy_ops = legacy.join().expect("legacy submitter");
        syncer.join().expect("device syncer");
        sh.submitters_done.store(true, Ordering::SeqCst);
        let continued = dispatcher.join().expect("dispatcher");
        for p in pollers {
            p.join().expect("poller");
        }
        let _ = finished_tx.send((logs, legacy_ops, continued));
    });
    let (logs, legacy_ops, continued) =
        finished_rx.recv_timeout(Duration::from_secs(120)).expect("scenario did not finish: lost wake-up or deadlock");

    assert_eq!(sh.ctx.outstanding(), 0);
    sh.ctx.device_synchronize().unwrap();

    // Expected direct edges: stream order, event edges, legacy-stream edges.
    let mut preds: HashMap<OpId, Vec<OpId>> = HashMap::new();
    let mut edge = |a: OpId, b: OpId| preds.entry(b).or_default().push(a);
    for log in &logs {
        for w in log.ops.windows(2) {
            edge(w[0], w[1]);
        }
        for &(a, b) in &log.event_edges {
            edge(a, b);
        }
    }
    for w in legacy_ops.windows(2) {
        edge(w[0], w[1]);
    }
    for log in logs.iter().filter(|l| l.stream_kind.syncs_with_legacy()) {
        for &l in &legacy_ops {
            // The stream's last op before l precedes l; l precedes the stream's first op after it.
            if let Some(&b) = log.ops.iter().rev().find(|o| **o < l) {
                edge(b, l);
            }
            if let Some(&b) = log.ops.iter().find(|o| **o > l) {
                edge(l, b);
            }
        }
    }
    let total = logs.iter().map(|l| l.ops.len()).sum::<usize>() + legacy_ops.len();
    assert_eq!(sh.recorded_upto.load(Ordering::SeqCst) as usize, total);

    // Latest satisfaction among all transitive ancestors, in id order (preds have smaller ids).
    let mut anc_done: Vec<u64> = vec![0; total + 1];
    let mut handed_out = 0;
    for id in 1..=total as u64 {
        let op = OpId(id);
        let done = sh.done_at[id as usize].load(Ordering::SeqCst);
        assert_ne!(done, UNSET, "{op} never completed");
        let mut latest = 0;
        for a in preds.get(&op).map(Vec::as_slice).unwrap_or(&[]) {
            assert!(*a < op, "edge {a} -> {op} goes backwards");
            latest = latest.max(sh.done_at[a.0 as usize].load(Ordering::SeqCst)).max(anc_done[a.0 as usize]);
        }
        anc_done[id as usize] = latest;
        let ready = sh.ready_at[id as usize].load(Ordering::SeqCst);
        if ready != UNSET {
            handed_out += 1;
            assert!(ready > latest, "{op} became ready before one of its ancestors was satisfied");
        }
    }
    assert_eq!(handed_out + continued, total, "every op is either handed out as ready or continued");
    let interleaved =
        legacy_ops.iter().filter(|l| logs.iter().any(|g| g.ops.first() < Some(l) && g.ops.last() > Some(l))).count();
    let event_edges: usize = logs.iter().map(|l| l.event_edges.len()).sum();
    let ended_by_assist = sh.assisted.load(Ordering::SeqCst);
    if assisted {
        assert!(ended_by_assist > 0, "no synchronize call returned on the wait assist");
    }
    eprintln!(
        "STATS ops {total} continued {continued} legacy-interleaved {interleaved} event-edges {event_edges} \
         ended by the assist {ended_by_assist}"
    );
}
