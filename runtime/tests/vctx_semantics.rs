//! Scenario tests of the virtual context's ordering rules, errors and blocking calls, each
//! written from the native API's documented behaviour.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use vitamin_hal::{HostFunction, Marker, OpDesc};
use vitamin_runtime::vctx::Handle;
use vitamin_runtime::{EventId, OpId, StreamId, StreamKind, VctxError, VctxId, VirtualContext};

fn op() -> Arc<OpDesc> {
    Arc::new(OpDesc::Marker(Marker::Barrier))
}

fn ready(ctx: &VirtualContext) -> Vec<OpId> {
    let mut v = Vec::new();
    ctx.take_ready(&mut v);
    v.into_iter().map(|r| r.op).collect()
}

fn ctx() -> VirtualContext {
    VirtualContext::new(VctxId(7))
}

#[test]
fn stream_order_is_a_chain_and_streams_are_independent() {
    let c = ctx();
    let s1 = c.create_stream(StreamKind::NonBlocking, 0);
    let s2 = c.create_stream(StreamKind::NonBlocking, 0);
    let a = c.record_op(s1, op()).unwrap();
    let b = c.record_op(s1, op()).unwrap();
    let x = c.record_op(s2, op()).unwrap();
    assert!(a.preds.is_empty() && x.preds.is_empty());
    assert_eq!(b.preds.as_slice(), &[a.op]);
    assert!(a.op < b.op && b.op < x.op, "ids increase in recording order");
    assert_eq!(ready(&c), vec![a.op, x.op]);
    c.mark_submitted(a.op);
    c.satisfy(a.op);
    assert_eq!(ready(&c), vec![b.op]);
}

#[test]
fn legacy_stream_example_from_the_driver_documentation() {
    // k_1<<<1, 1, 0, s>>>(); k_2<<<1, 1>>>(); k_3<<<1, 1, 0, s>>>();
    // "k_2 will block on k_1 and k_3 will block on k_2."
    let c = ctx();
    let s = c.create_stream(StreamKind::Blocking, 0);
    let k1 = c.record_op(s, op()).unwrap();
    let k2 = c.record_op(c.legacy_default_stream(), op()).unwrap();
    let k3 = c.record_op(s, op()).unwrap();
    assert_eq!(k2.preds.as_slice(), &[k1.op]);
    assert_eq!(k3.preds.as_slice(), &[k2.op], "k3 follows k2 (and k1 through it)");
}

#[test]
fn legacy_stream_orders_blocking_streams_with_each_other() {
    // An action on the legacy stream waits for all blocking streams, then all blocking streams
    // wait for it: b1 on s1, legacy op, b2 on s2 => b1 -> legacy -> b2.
    let c = ctx();
    let s1 = c.create_stream(StreamKind::Blocking, 0);
    let s2 = c.create_stream(StreamKind::Blocking, 0);
    let b1 = c.record_op(s1, op()).unwrap();
    let l = c.record_op(StreamId::LEGACY, op()).unwrap();
    let b2 = c.record_op(s2, op()).unwrap();
    assert_eq!(l.preds.as_slice(), &[b1.op]);
    assert_eq!(b2.preds.as_slice(), &[l.op]);
}

#[test]
fn non_blocking_streams_are_exempt_from_the_legacy_stream() {
    let c = ctx();
    let nb = c.create_stream(StreamKind::NonBlocking, 0);
    let n1 = c.record_op(nb, op()).unwrap();
    let l = c.record_op(StreamId::LEGACY, op()).unwrap();
    let n2 = c.record_op(nb, op()).unwrap();
    assert!(l.preds.is_empty(), "legacy op must not wait for a non-blocking stream");
    assert_eq!(n2.preds.as_slice(), &[n1.op], "non-blocking op must not wait for the legacy stream");
}

#[test]
fn per_thread_default_streams_sync_with_legacy_but_not_with_each_other() {
    let c = ctx();
    let t1 = c.per_thread_default_stream(1);
    let t2 = c.per_thread_default_stream(2);
    assert_eq!(t1, c.per_thread_default_stream(1), "created once per thread");
    assert_eq!(c.create_stream(StreamKind::PerThreadDefault { thread: 2 }, 5), t2);
    assert_eq!(c.stream_kind(t1).unwrap(), StreamKind::PerThreadDefault { thread: 1 });
    let a = c.record_op(t1, op()).unwrap();
    let b = c.record_op(t2, op()).unwrap();
    assert!(b.preds.is_empty(), "per-thread streams are unordered with each other");
    let l = c.record_op(StreamId::LEGACY, op()).unwrap();
    assert_eq!(l.preds.as_slice(), &[a.op, b.op]);
    let a2 = c.record_op(t1, op()).unwrap();
    assert!(a2.preds.contains(&l.op));
    assert!(c.destroy_stream(t1).is_err(), "a default stream cannot be destroyed");
}

#[test]
fn event_wait_binds_the_generation_visible_at_the_wait() {
    let c = ctx();
    let s1 = c.create_stream(StreamKind::NonBlocking, 0);
    let s2 = c.create_stream(StreamKind::NonBlocking, 0);
    let e = c.create_event();
    let a = c.record_op(s1, op()).unwrap();
    assert_eq!(c.record_event(e, s1).unwrap(), 1);
    c.wait_event(s2, e).unwrap();
    // Re-record after more work: the earlier wait must still point at `a` only.
    let b = c.record_op(s1, op()).unwrap();
    assert_eq!(c.record_event(e, s1).unwrap(), 2);
    let x = c.record_op(s2, op()).unwrap();
    assert_eq!(x.preds.as_slice(), &[a.op], "wait was retargeted to generation 2");
    assert_eq!(ready(&c), vec![a.op]);
    c.satisfy(a.op);
    assert_eq!(ready(&c), vec![b.op, x.op]);
    assert!(!c.event_query(e).unwrap(), "generation 2 (after b) is pending");
    c.satisfy(b.op);
    assert!(c.event_query(e).unwrap());
}

#[test]
fn unrecorded_or_empty_stream_events_are_complete() {
    let c = ctx();
    let s = c.create_stream(StreamKind::Blocking, 0);
    let e = c.create_event();
    assert!(c.event_query(e).unwrap());
    assert_eq!(c.event_generation(e).unwrap(), 0);
    c.event_synchronize(e).unwrap();
    c.wait_event(s, e).unwrap();
    assert!(c.record_op(s, op()).unwrap().preds.is_empty());
    let e2 = c.create_event();
    let s2 = c.create_stream(StreamKind::NonBlocking, 0);
    c.record_event(e2, s2).unwrap();
    assert!(c.event_query(e2).unwrap(), "recorded on an empty stream");
}

#[test]
fn event_recorded_on_a_blocking_stream_covers_pending_legacy_work() {
    let c = ctx();
    let s = c.create_stream(StreamKind::Blocking, 0);
    let l = c.record_op(StreamId::LEGACY, op()).unwrap();
    let e = c.create_event();
    c.record_event(e, s).unwrap();
    assert!(!c.event_query(e).unwrap(), "the record is an action of a blocking stream: it follows legacy work");
    assert!(c.stream_query(s).unwrap(), "but the blocking stream itself holds no work");
    c.satisfy(l.op);
    assert!(c.event_query(e).unwrap());
}

#[test]
fn wait_on_the_legacy_stream_absorbs_blocking_streams() {
    // A stream wait on an event on the legacy stream is an action: it first waits for blocking streams.
    let c = ctx();
    let s1 = c.create_stream(StreamKind::Blocking, 0);
    let s2 = c.create_stream(StreamKind::Blocking, 0);
    let b1 = c.record_op(s1, op()).unwrap();
    let e = c.create_event();
    c.wait_event(StreamId::LEGACY, e).unwrap();
    assert!(!c.stream_query(StreamId::LEGACY).unwrap());
    let b2 = c.record_op(s2, op()).unwrap();
    assert_eq!(b2.preds.as_slice(), &[b1.op]);
}

#[test]
fn misuse_returns_native_errors() {
    let c = ctx();
    let unknown = StreamId(4242);
    assert_eq!(c.record_op(unknown, op()).unwrap_err(), VctxError::InvalidHandle(Handle::Stream(unknown)));
    assert_eq!(c.stream_query(unknown).unwrap_err(), VctxError::InvalidHandle(Handle::Stream(unknown)));
    assert!(c.destroy_stream(StreamId::LEGACY).is_err());
    let s = c.create_stream(StreamKind::Blocking, -1);
    assert_eq!(c.stream_priority(s).unwrap(), -1);
    c.destroy_stream(s).unwrap();
    assert!(matches!(c.destroy_stream(s), Err(VctxError::InvalidHandle(Handle::Stream(x))) if x == s));
    assert!(c.record_op(s, op()).is_err());
    assert!(c.stream_synchronize(s).is_err());
    let e = c.create_event();
    c.destroy_event(e).unwrap();
    let ie = VctxError::InvalidHandle(Handle::Event(e));
    assert_eq!(c.wait_event(StreamId::LEGACY, e).unwrap_err(), ie);
    assert_eq!(c.record_event(e, StreamId::LEGACY).unwrap_err(), ie);
    assert_eq!(c.event_query(e).unwrap_err(), ie);
    assert_eq!(c.event_synchronize(e).unwrap_err(), ie);
    assert_eq!(c.destroy_event(e).unwrap_err(), ie);
    assert_eq!(c.event_query(EventId(999)).unwrap_err(), VctxError::InvalidHandle(Handle::Event(EventId(999))));
    let live = c.create_event();
    assert!(c.record_event(live, unknown).is_err());
    assert!(c.wait_event(unknown, live).is_err());
    // Unknown tokens are satisfied and may be satisfied/submitted/failed harmlessly.
    c.satisfy(OpId(123_456));
    c.mark_submitted(OpId(123_456));
    assert!(c.is_complete(OpId(123_456)));
    assert!(format!("{}", VctxError::InvalidHandle(Handle::Stream(s))).contains("does not exist"));
}

#[test]
fn destroyed_stream_and_event_with_pending_work_behave_natively() {
    let c = ctx();
    let s = c.create_stream(StreamKind::Blocking, 0);
    let other = c.create_stream(StreamKind::NonBlocking, 0);
    let a = c.record_op(s, op()).unwrap();
    let e = c.create_event();
    c.record_event(e, s).unwrap();
    c.wait_event(other, e).unwrap();
    c.destroy_event(e).unwrap();
    c.destroy_stream(s).unwrap();
    // The wait survives the event's destruction; the work survives the stream's.
    let x = c.record_op(other, op()).unwrap();
    assert_eq!(x.preds.as_slice(), &[a.op]);
    // The next legacy op still follows the destroyed blocking stream's work.
    let l = c.record_op(StreamId::LEGACY, op()).unwrap();
    assert_eq!(l.preds.as_slice(), &[a.op]);
    assert!(!c.device_synchronize_timeout(Duration::ZERO).unwrap());
    assert_eq!(ready(&c), vec![a.op]);
    c.satisfy(a.op);
    assert_eq!(ready(&c), vec![x.op, l.op]);
    c.satisfy(x.op);
    c.satisfy(l.op);
    assert_eq!(c.outstanding(), 0);
    c.device_synchronize().unwrap();
    // Device synchronization covers a destroyed non-blocking stream's pending work too.
    let nb = c.create_stream(StreamKind::NonBlocking, 0);
    let y = c.record_op(nb, op()).unwrap();
    c.destroy_stream(nb).unwrap();
    assert!(!c.device_synchronize_timeout(Duration::ZERO).unwrap());
    assert_eq!(ready(&c), vec![y.op]);
    c.satisfy(y.op);
    assert!(c.device_synchronize_timeout(Duration::ZERO).unwrap());
}

#[test]
fn async_failure_is_sticky_on_its_stream_and_the_device() {
    let c = ctx();
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let t = c.create_stream(StreamKind::NonBlocking, 0);
    let a = c.record_op(s, op()).unwrap();
    let b = c.record_op(s, op()).unwrap();
    assert_eq!(ready(&c), vec![a.op]);
    c.fail(a.op, "illegal address".into());
    assert_eq!(ready(&c), vec![b.op], "a failed op is satisfied and releases its dependents");
    let err = c.stream_query(s).unwrap_err();
    assert!(matches!(&err, VctxError::LaunchFailed { op, stream: Some(st), message, .. }
        if *op == a.op && *st == s && message == "illegal address"));
    c.satisfy(b.op);
    assert_eq!(c.stream_synchronize(s).unwrap_err(), err, "sticky");
    assert_eq!(c.device_synchronize().unwrap_err(), err);
    assert!(c.stream_query(t).unwrap(), "other streams are unaffected");
    assert_eq!(c.sticky_error(), Some(err));
}

#[test]
fn host_functions_and_synchronous_ops_are_stream_ordered() {
    let c = Arc::new(ctx());
    let s = c.create_stream(StreamKind::Blocking, 0);
    let ran = Arc::new(AtomicBool::new(false));
    let r2 = Arc::clone(&ran);
    let k = c.record_op(s, op()).unwrap();
    let h = c.record_op(s, Arc::new(OpDesc::Host(HostFunction::new("cb", move || r2.store(true, Ordering::SeqCst)))));
    let h = h.unwrap();
    assert_eq!(h.preds.as_slice(), &[k.op]);
    // A minimal dispatcher: runs host functions, satisfies everything it is handed.
    let d = Arc::clone(&c);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    let dispatcher = thread::spawn(move || {
        let mut buf = Vec::new();
        while !stop2.load(Ordering::SeqCst) {
            d.wait_for_work(Duration::from_millis(20));
            d.take_ready(&mut buf);
            for r in buf.drain(..) {
                if let OpDesc::Host(f) = &*r.desc {
                    f.invoke();
                }
                d.mark_submitted(r.op);
                d.satisfy(r.op);
            }
        }
    });
    let sync_op = c.record_synchronous_op(s, op()).unwrap();
    assert!(ran.load(Ordering::SeqCst), "the host function ran before the later synchronous op completed");
    assert!(c.is_complete(sync_op) && c.is_complete(h.op));
    stop.store(true, Ordering::SeqCst);
    dispatcher.join().unwrap();
}

#[test]
fn blocking_syncs_wake_when_their_tokens_retire() {
    let c = Arc::new(ctx());
    let s = c.create_stream(StreamKind::Blocking, 0);
    let a = c.record_op(s, op()).unwrap();
    let e = c.create_event();
    c.record_event(e, s).unwrap();
    let mut waiters = Vec::new();
    for kind in 0..3 {
        let c2 = Arc::clone(&c);
        waiters.push(thread::spawn(move || match kind {
            0 => c2.stream_synchronize(s),
            1 => c2.event_synchronize(e),
            _ => c2.device_synchronize(),
        }));
    }
    thread::sleep(Duration::from_millis(30));
    assert!(waiters.iter().all(|w| !w.is_finished()), "a sync returned before its token retired");
    // Re-recording the event on later work does not extend the pending event sync.
    let b = c.record_op(s, op()).unwrap();
    c.record_event(e, s).unwrap();
    c.satisfy(a.op);
    let event_waiter = waiters.remove(1);
    event_waiter.join().unwrap().unwrap();
    c.satisfy(b.op);
    for w in waiters {
        w.join().unwrap().unwrap();
    }
    assert!(c.stream_synchronize_timeout(s, Duration::from_millis(1)).unwrap());
}

#[test]
fn timeouts_report_pending_work() {
    let c = ctx();
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let a = c.record_op(s, op()).unwrap();
    assert!(!c.stream_synchronize_timeout(s, Duration::from_millis(5)).unwrap());
    assert!(!c.device_synchronize_timeout(Duration::from_millis(5)).unwrap());
    assert!(c.wait_for_work(Duration::from_millis(5)), "a is ready");
    ready(&c);
    assert!(!c.wait_for_work(Duration::from_millis(5)));
    c.satisfy(a.op);
    assert!(c.stream_synchronize_timeout(s, Duration::from_millis(5)).unwrap());
}

#[test]
fn memory_is_bounded_by_live_state() {
    let c = ctx();
    let s = c.create_stream(StreamKind::Blocking, 0);
    let mut buf = Vec::new();
    for i in 0..20_000u32 {
        let t = c.create_stream(if i % 2 == 0 { StreamKind::Blocking } else { StreamKind::NonBlocking }, 0);
        let e = c.create_event();
        let r = c.record_op(t, op()).unwrap();
        c.record_event(e, t).unwrap();
        c.wait_event(s, e).unwrap();
        c.destroy_event(e).unwrap();
        c.destroy_stream(t).unwrap();
        let x = c.record_op(s, op()).unwrap();
        if i % 100 == 0 {
            c.record_op(StreamId::LEGACY, op()).unwrap();
        }
        c.take_ready(&mut buf);
        for o in buf.drain(..) {
            c.satisfy(o.op);
        }
        c.take_ready(&mut buf);
        for o in buf.drain(..) {
            c.satisfy(o.op);
        }
        assert!(c.is_complete(r.op) && c.is_complete(x.op));
    }
    assert_eq!(c.outstanding(), 0);
    let dbg = format!("{c:?}");
    assert!(dbg.contains("streams: 2") && dbg.contains("events: 0"), "{dbg}");
}

#[test]
fn failure_of_a_retired_op_is_recorded_for_the_device_only() {
    let c = ctx();
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let a = c.record_op(s, op()).unwrap();
    c.satisfy(a.op);
    c.fail(a.op, "late report".into());
    assert!(c.stream_query(s).unwrap(), "the op's stream is no longer known");
    let err = c.device_synchronize().unwrap_err();
    assert!(matches!(&err, VctxError::LaunchFailed { stream: None, .. }), "{err:?}");
    assert!(!err.to_string().contains(" on "), "no stream to name: {err}");
    // The first failure stays the sticky one.
    let b = c.record_op(s, op()).unwrap();
    c.fail(b.op, "second".into());
    assert_eq!(c.sticky_error(), Some(err));
    assert!(c.stream_query(s).is_err());
}

#[test]
fn per_thread_default_stream_of_an_exited_thread_is_released() {
    let c = ctx();
    let t = c.per_thread_default_stream(9);
    let a = c.record_op(t, op()).unwrap();
    c.release_per_thread_default_stream(9);
    assert!(c.stream_query(t).is_err(), "handle released");
    assert!(!c.device_synchronize_timeout(Duration::ZERO).unwrap(), "its work still counts");
    let l = c.record_op(StreamId::LEGACY, op()).unwrap();
    assert_eq!(l.preds.as_slice(), &[a.op], "and still orders the legacy stream");
    assert_ne!(c.per_thread_default_stream(9), t, "a new thread with the same key gets a new stream");
}

/// `wait_submitted` (what `cuGraphExecDestroy` after a deferred `cuGraphLaunch` waits for): it
/// returns once every op was handed to a backend lane, without waiting for completion; retired,
/// failed and unknown ops count as submitted.
#[test]
fn waiting_for_submission_wakes_on_submission_not_completion() {
    let c = Arc::new(ctx());
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let a = c.record_op(s, op()).unwrap().op;
    let b = c.record_op(s, op()).unwrap().op;
    assert!(!c.is_submitted(a) && !c.is_submitted(b));
    assert!(c.is_submitted(OpId(999)), "an unknown op counts as submitted");
    assert!(!c.wait_submitted_timeout(&[a, b], Duration::from_millis(20)), "nothing was submitted");

    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (c, done) = (c.clone(), done.clone());
        thread::spawn(move || {
            c.wait_submitted(&[a, b]);
            done.store(true, Ordering::SeqCst);
        })
    };
    c.mark_submitted(a);
    thread::sleep(Duration::from_millis(30));
    assert!(!done.load(Ordering::SeqCst), "returned before b was submitted");
    // b is submitted early (lane continuation) while a still runs: enough, although neither completed.
    c.mark_submitted(b);
    waiter.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    assert!(c.is_submitted(b) && !c.is_complete(b), "submitted, still running");
    assert!(c.wait_submitted_timeout(&[a, b], Duration::ZERO));

    // An op that fails without ever being submitted (rejected at intake) retires: no hang.
    let x = c.record_op(s, op()).unwrap().op;
    let waiter = {
        let c = c.clone();
        thread::spawn(move || c.wait_submitted(&[x]))
    };
    thread::sleep(Duration::from_millis(10));
    c.satisfy(a);
    c.satisfy(b);
    c.fail(x, "no node can run it".into());
    waiter.join().unwrap();
    assert!(c.is_submitted(x) && c.is_complete(x));
    assert_eq!(c.blocked_threads(), 0);
}

#[test]
fn a_wait_assist_that_saw_the_ops_run_retires_them_and_their_live_history() {
    let c = ctx();
    c.set_sync_spin(Duration::from_secs(5));
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let ops: Vec<OpId> = (0..3).map(|_| c.record_op(s, op()).unwrap().op).collect();
    // The first is bound, the other two continued behind it on the same lane: all submitted.
    assert_eq!(ready(&c), vec![ops[0]]);
    for &o in &ops {
        c.mark_submitted(o);
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    assert!(c.set_wait_assist(Box::new(move |awaited: &[OpId]| {
        let mut v = seen2.lock().unwrap();
        v.push(awaited.to_vec());
        // Pretend the lane drained on the third turn.
        v.len() >= 3
    })));
    c.stream_synchronize(s).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3, "the sync returned as soon as the assist reported the drain");
    assert!(seen.iter().all(|a| a == &[ops[2]]), "the assist is asked about the stream's tail: {seen:?}");
    assert_eq!(c.outstanding(), 0, "the tail and its ancestors retired");
    assert!(c.stream_query(s).unwrap());
    // A completion observed later by the dispatcher is ignored.
    c.satisfy_all(&ops);
    assert_eq!(c.outstanding(), 0);
}

/// A waiting thread whose assist established its ops complete returns without retiring them;
/// the next holder of the context's lock does. A launch-first recording that depends on nothing
/// else launches before that retirement (the first launch after a synchronize call), and one
/// that depends on other live work retires them and is refused as usual.
#[test]
fn ops_a_waiter_established_complete_retire_at_the_next_lock_and_after_a_launch_first() {
    let c = ctx();
    c.set_sync_spin(Duration::from_secs(5));
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let other = c.create_stream(StreamKind::NonBlocking, 0);
    let ops: Vec<OpId> = (0..3).map(|_| c.record_op(s, op()).unwrap().op).collect();
    let running = c.record_op(other, op()).unwrap().op;
    assert_eq!(ready(&c), vec![ops[0], running]);
    for &o in ops.iter().chain([&running]) {
        c.mark_submitted(o);
    }
    assert!(c.set_wait_assist(Box::new(|_: &[OpId]| true)));
    c.stream_synchronize(s).unwrap();
    // Launch-first on the synchronized stream: fresh, launched, then recorded with no
    // predecessor; the three ops are retired by then.
    let mut launched = false;
    let (rec, ()) = c
        .record_launched_first(
            s,
            || {
                launched = true;
                Some((op(), ()))
            },
            |_, _, ()| (),
        )
        .unwrap()
        .expect("fresh after the wait");
    assert!(launched && rec.preds.is_empty());
    assert!(ops.iter().all(|&o| c.is_complete(o)));
    assert_eq!(c.outstanding(), 2, "the launched op and the one still running on the other stream");
    // Behind live work (an event recorded after `running`): never launched first.
    let e = c.create_event();
    c.record_event(e, other).unwrap();
    c.wait_event(s, e).unwrap();
    let refused =
        c.record_launched_first(s, || -> Option<(Arc<OpDesc>, ())> { panic!("not fresh") }, |_, _, ()| ()).unwrap();
    assert!(refused.is_none());
    // And a wait that leaves its ops for the next lock, followed by a query: complete.
    let t = c.record_op(other, op()).unwrap().op;
    c.mark_submitted(t);
    c.stream_synchronize(other).unwrap();
    assert!(c.stream_query(other).unwrap() && c.is_complete(t) && c.is_complete(running));
}

/// `record_op_eager` offers an op with no live predecessor (fresh), or one whose live
/// predecessors are all submitted (with them), before any other thread can see it; a taken op
/// counts as submitted (never handed out, its successors are continuable), a refused one takes
/// the usual path; an op behind an unsubmitted predecessor is never offered.
#[test]
fn eager_recording_offers_fresh_and_continuable_ops_and_a_taken_op_is_never_handed_out() {
    let c = ctx();
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let mut offered = Vec::new();
    let (a, taken) = c
        .record_op_eager(s, op(), |id, _, preds| {
            offered.push((id, preds.to_vec()));
            true
        })
        .unwrap();
    assert!(taken && a.preds.is_empty());
    assert_eq!(offered, vec![(a.op, vec![])]);
    assert!(c.is_submitted(a.op), "a taken op counts as submitted");
    assert!(ready(&c).is_empty(), "a taken op is never handed out");
    // Behind a live but submitted op: offered with it; refused, it is continuable as usual.
    let (b, taken) = c
        .record_op_eager(s, op(), |id, _, preds| {
            offered.push((id, preds.to_vec()));
            false
        })
        .unwrap();
    assert!(!taken);
    assert_eq!(b.preds.as_slice(), &[a.op]);
    assert_eq!(offered[1], (b.op, vec![a.op]));
    // Behind b, which is neither submitted nor complete: never offered.
    let (x, taken) = c.record_op_eager(s, op(), |_, _, _| panic!("x waits for an unsubmitted op")).unwrap();
    assert!(!taken);
    assert_eq!(x.preds.as_slice(), &[b.op]);
    let mut cont = Vec::new();
    c.take_continuable(&mut cont);
    assert_eq!(cont.iter().map(|x| x.op).collect::<Vec<_>>(), vec![b.op]);
    c.satisfy(a.op);
    c.mark_submitted(b.op);
    c.satisfy(b.op);
    c.mark_submitted(x.op);
    c.satisfy(x.op);
    // Fresh again but refused by the submitter: handed out as usual.
    let (d, taken) = c.record_op_eager(s, op(), |_, _, _| false).unwrap();
    assert!(!taken);
    assert_eq!(ready(&c), vec![d.op]);
    assert_eq!(c.outstanding(), 1);
}

/// `record_launched_first` runs its launch only for an op that would be fresh, before the op is
/// recorded; a launched op is recorded as submitted (never handed out) and committed with its
/// id; a declined launch records nothing.
#[test]
fn launch_first_recording_launches_only_fresh_ops_and_records_them_submitted() {
    let c = ctx();
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let mut committed = Vec::new();
    let (a, ()) = c
        .record_launched_first(s, || Some((op(), 7u32)), |id, _, t| committed.push((id, t)))
        .unwrap()
        .expect("a fresh op on an empty stream is launched");
    assert!(a.preds.is_empty());
    assert_eq!(committed, vec![(a.op, 7)]);
    assert!(c.is_submitted(a.op), "a launched op counts as submitted");
    assert!(ready(&c).is_empty(), "a launched op is never handed out");
    // Behind a live op: the launch does not run, nothing is recorded.
    let before = c.outstanding();
    let r = c.record_launched_first(s, || -> Option<(Arc<OpDesc>, ())> { panic!("not fresh") }, |_, _, ()| ()).unwrap();
    assert!(r.is_none());
    assert_eq!(c.outstanding(), before);
    c.satisfy(a.op);
    // Fresh again but the launch declines: nothing recorded.
    let r = c.record_launched_first(s, || -> Option<(Arc<OpDesc>, ())> { None }, |_, _, ()| ()).unwrap();
    assert!(r.is_none());
    assert_eq!(c.outstanding(), 0);
    // An unknown stream is an error, as for any record.
    let bogus = StreamId(u32::MAX);
    assert!(c.record_launched_first(bogus, || -> Option<(Arc<OpDesc>, ())> { None }, |_, _, ()| ()).is_err());
}

/// A waiter on a thread where the wait assist cannot act (its scope says no: in bind mode,
/// another device's context is current) waits like one without an assist: the assist is never
/// called and the waiter does not count as assisting, so the dispatcher keeps recording the
/// fences its completion is observed by. (Counted as assisting, it left every fence to a thread
/// that never polls: a program synchronizing on device 1's event with device 0 current hung on
/// one CPU, shim-cuda/tests/bind_devices.rs.)
#[test]
fn a_waiter_outside_the_assists_scope_is_a_plain_waiter() {
    let marker = || Arc::new(OpDesc::Marker(Marker::Barrier));
    let c = Arc::new(ctx());
    c.set_sync_spin(Duration::from_secs(5));
    let called = Arc::new(AtomicBool::new(false));
    {
        let called = called.clone();
        assert!(c.set_wait_assist(Box::new(move |_ops: &[OpId]| {
            called.store(true, Ordering::SeqCst);
            false
        })));
    }
    // In scope on every thread but the waiter's.
    assert!(c.set_wait_assist_scope(Box::new(|| thread::current().name() != Some("elsewhere"))));
    let s = c.create_stream(StreamKind::NonBlocking, 0);
    let op = c.record_op(s, marker()).expect("record").op;
    let waiter = {
        let c = c.clone();
        thread::Builder::new().name("elsewhere".into()).spawn(move || c.stream_synchronize(s)).expect("spawn")
    };
    while !c.has_waiters() {
        thread::yield_now();
    }
    // Well inside its 5 s spin window.
    thread::sleep(Duration::from_millis(50));
    assert!(c.has_waiters(), "still waiting");
    assert!(!c.has_assisting_waiters(), "a waiter the assist cannot help does not count as assisting");
    assert!(!called.load(Ordering::SeqCst), "the assist is not called outside its scope");
    c.satisfy(op);
    waiter.join().expect("no panic").expect("synchronized");
    assert!(!c.has_waiters());
}

/// A dispatcher leaves lane fences to waiting threads only while they poll for themselves: a
/// waiter spinning with the wait assist counts as assisting, a parked one (or one without an
/// assist) only as a waiter.
#[test]
fn only_waiters_spinning_with_the_wait_assist_count_as_assisting() {
    let marker = || Arc::new(OpDesc::Marker(Marker::Barrier));
    // With a wait assist: assisting while it spins.
    let assisted = Arc::new(ctx());
    let called = Arc::new(AtomicBool::new(false));
    let seen_assisting = Arc::new(AtomicBool::new(false));
    {
        let weak = Arc::downgrade(&assisted);
        let (called, seen) = (called.clone(), seen_assisting.clone());
        assert!(assisted.set_wait_assist(Box::new(move |_ops: &[OpId]| {
            if let Some(c) = weak.upgrade() {
                seen.fetch_or(c.has_assisting_waiters(), Ordering::SeqCst);
            }
            called.store(true, Ordering::SeqCst);
            false
        })));
    }
    let s = assisted.create_stream(StreamKind::NonBlocking, 0);
    let op = assisted.record_op(s, marker()).expect("record").op;
    let waiter = {
        let c = assisted.clone();
        thread::spawn(move || c.stream_synchronize(s))
    };
    while !called.load(Ordering::SeqCst) {
        thread::yield_now();
    }
    assert!(seen_assisting.load(Ordering::SeqCst), "a waiter running the assist counts as assisting");
    assisted.satisfy(op);
    waiter.join().expect("no panic").expect("synchronized");
    assert!(!assisted.has_assisting_waiters() && !assisted.has_waiters());

    // Without one, parked at once: a waiter, not assisting.
    let plain = Arc::new(ctx());
    plain.set_sync_spin(Duration::ZERO);
    let s = plain.create_stream(StreamKind::NonBlocking, 0);
    let op = plain.record_op(s, marker()).expect("record").op;
    let waiter = {
        let c = plain.clone();
        thread::spawn(move || c.stream_synchronize(s))
    };
    while !plain.has_waiters() {
        thread::yield_now();
    }
    assert!(!plain.has_assisting_waiters(), "a parked waiter polls nothing");
    plain.satisfy(op);
    waiter.join().expect("no panic").expect("synchronized");
}
