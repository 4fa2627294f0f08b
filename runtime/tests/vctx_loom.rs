//! loom models of the virtual context's notify/wait protocol.
//!
//! All state of a [`VirtualContext`] sits behind one mutex; the only cross-thread protocol is
//! "blocked host thread / dispatcher waits on a condition variable, a mutation under the lock
//! wakes it after unlocking". Under `--cfg loom` the context's lock and condition variables are
//! loom's, so these models explore every interleaving of those operations and fail on a lost
//! wake-up (loom reports the deadlock) or a wrong answer. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p vitamin-runtime --test vctx_loom --release --target-dir target/loom
//! ```
#![cfg(loom)]

use std::sync::Arc;
use std::time::Duration;

use loom::thread;
use vitamin_hal::{Marker, OpDesc};
use vitamin_runtime::{StreamKind, VctxId, VirtualContext};

fn op() -> Arc<OpDesc> {
    Arc::new(OpDesc::Marker(Marker::Barrier))
}

/// A stream synchronize racing the completion of the stream's only op always returns, and only
/// after the op retired.
#[test]
fn stream_sync_is_woken_by_satisfy() {
    loom::model(|| {
        let ctx = Arc::new(VirtualContext::new(VctxId(0)));
        let s = ctx.create_stream(StreamKind::NonBlocking, 0);
        let a = ctx.record_op(s, op()).unwrap().op;
        let c2 = Arc::clone(&ctx);
        let waiter = thread::spawn(move || {
            c2.stream_synchronize(s).unwrap();
            assert!(c2.is_complete(a));
        });
        let mut buf = Vec::new();
        ctx.take_ready(&mut buf);
        ctx.satisfy(buf[0].op);
        waiter.join().unwrap();
    });
}

/// A dispatcher parked in `wait_for_work` is woken by a record that makes an op ready, and a
/// host thread synchronizing on that op is woken by the dispatcher's completion.
#[test]
fn dispatcher_is_woken_by_record_and_host_by_completion() {
    loom::model(|| {
        let ctx = Arc::new(VirtualContext::new(VctxId(0)));
        let s = ctx.create_stream(StreamKind::Blocking, 0);
        let c2 = Arc::clone(&ctx);
        let dispatcher = thread::spawn(move || {
            let mut buf = Vec::new();
            while buf.is_empty() {
                c2.wait_for_work(Duration::from_secs(3600));
                c2.take_ready(&mut buf);
            }
            c2.mark_submitted(buf[0].op);
            c2.satisfy(buf[0].op);
        });
        ctx.record_op(s, op()).unwrap();
        ctx.stream_synchronize(s).unwrap();
        assert_eq!(ctx.outstanding(), 0);
        dispatcher.join().unwrap();
    });
}

/// Completions of a continued chain observed out of order by two pollers: an event sync on the
/// later op returns only once both retired, whichever order the pollers run in.
#[test]
fn out_of_order_completions_release_waiters_once_all_retired() {
    loom::model(|| {
        let ctx = Arc::new(VirtualContext::new(VctxId(0)));
        let s = ctx.create_stream(StreamKind::NonBlocking, 0);
        let a = ctx.record_op(s, op()).unwrap().op;
        let b = ctx.record_op(s, op()).unwrap().op;
        let e = ctx.create_event();
        ctx.record_event(e, s).unwrap();
        ctx.mark_submitted(a);
        ctx.mark_submitted(b);
        let pollers: Vec<_> = [a, b]
            .into_iter()
            .map(|x| {
                let c = Arc::clone(&ctx);
                thread::spawn(move || c.satisfy(x))
            })
            .collect();
        ctx.event_synchronize(e).unwrap();
        assert!(ctx.is_complete(a) && ctx.is_complete(b));
        for p in pollers {
            p.join().unwrap();
        }
    });
}
