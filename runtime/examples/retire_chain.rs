//! How long a thread takes to retire an 8-op dependent chain it waited for (`VirtualContext::
//! satisfy_all` of the chain, oldest first, as the dispatcher's poll does), when the ops were
//! marked submitted by the same thread and when by another thread (the dispatcher's, as in bind
//! mode): the second case adds the cache-line transfers of the ops' DAG nodes. Medians of 2000
//! chains each, in ns per chain.
//!
//! Run: `cargo run --release -p vitamin-runtime --example retire_chain`
use std::sync::Arc;
use std::time::Instant;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::{OpId, StreamKind, VctxId, VirtualContext};

const CHAIN: usize = 8;
const REPS: usize = 2000;

fn main() {
    let sim = SimBackend::preset("h200").unwrap();
    let desc = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        sim.kernel("busy").unwrap(),
        Dim3::x(1),
        Dim3::x(256),
        0,
        KernelArgs::pack(&[&100u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )));
    for (name, other_thread) in [("same thread", false), ("marked by another thread", true)] {
        let v = Arc::new(VirtualContext::new(VctxId(0)));
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        let mut times = Vec::with_capacity(REPS);
        for _ in 0..REPS {
            let ops: Vec<OpId> = (0..CHAIN).map(|_| v.record_op(s, desc.clone()).unwrap().op).collect();
            if other_thread {
                let (v2, ops2) = (v.clone(), ops.clone());
                std::thread::spawn(move || ops2.iter().for_each(|&op| v2.mark_submitted(op))).join().unwrap();
            } else {
                ops.iter().for_each(|&op| v.mark_submitted(op));
            }
            let t0 = Instant::now();
            v.satisfy_all(&ops);
            times.push(t0.elapsed().as_nanos() as u64);
            assert_eq!(v.outstanding(), 0);
        }
        times.sort_unstable();
        println!("{name}: retiring {CHAIN} ops p50 {} ns, p90 {} ns", times[REPS / 2], times[REPS * 9 / 10]);
    }
}
