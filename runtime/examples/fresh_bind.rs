//! How long one dispatcher round takes to bind a *fresh* ready op (nothing in flight, the first op
//! after the application waited): record one op, time `Dispatcher::pump`, run to idle, repeat.
//! Simulated H200 pool (59 nodes), Throughput-Oriented and Exclusive policies, a 1-block and a
//! 528-block kernel (the one Throughput widens). The figure includes the simulator's own submit
//! cost; it is a CPU-speed yardstick between machines (docs/results/shim-bind-overhead.md:
//! 0.74-0.90 us on the build machine, 1.5-2.3 us on the H200 host).
//!
//! Then the same for launch-first eager binding (Throughput only: `VirtualContext::record_launched_first`
//! with `Dispatcher::launch_fresh_native` and `commit_native`, the shim's default for fresh plain
//! launches): the time until the simulated native launch is issued, and the whole call.
//!
//! Run: `cargo run --release -p vitamin-runtime --example fresh_bind`
use std::sync::Arc;
use std::time::Instant;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::{StreamKind, VctxId, VirtualContext};

/// The simulator's `busy` kernel over `blocks` blocks of 256 threads.
fn busy(sim: &SimBackend, blocks: u32) -> Arc<OpDesc> {
    Arc::new(OpDesc::Kernel(KernelLaunch::new(
        sim.kernel("busy").unwrap(),
        Dim3::x(blocks),
        Dim3::x(256),
        0,
        KernelArgs::pack(&[&100u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )))
}

fn main() {
    for policy in [PolicyKind::Throughput, PolicyKind::Exclusive] {
        for blocks in [1u32, 528] {
            let sim = SimBackend::preset("h200").unwrap();
            let desc = busy(&sim, blocks);
            let mut d = Dispatcher::new(sim, policy.build(0), Profiles::new("sim"), DispatchConfig::default()).unwrap();
            let v = Arc::new(VirtualContext::new(VctxId(0)));
            d.register(v.clone(), "p", ClientClass::BestEffort);
            let s = v.create_stream(StreamKind::NonBlocking, 0);
            let mut total = std::time::Duration::ZERO;
            let n = 20000;
            for _ in 0..n {
                v.record_op(s, desc.clone()).unwrap();
                let t = Instant::now();
                d.pump().unwrap();
                total += t.elapsed();
                d.run_until_idle().unwrap();
            }
            println!("{policy:?} blocks {blocks}: {:.3} us per fresh-op round", total.as_secs_f64() * 1e6 / n as f64);
        }
    }
    for blocks in [1u32, 528] {
        let sim = SimBackend::preset("h200").unwrap();
        let probe = busy(&sim, blocks);
        let mut d =
            Dispatcher::new(sim, PolicyKind::Throughput.build(0), Profiles::new("sim"), DispatchConfig::default())
                .unwrap();
        let v = Arc::new(VirtualContext::new(VctxId(0)));
        d.register(v.clone(), "p", ClientClass::BestEffort);
        let s = v.create_stream(StreamKind::NonBlocking, 0);
        let (mut to_issue, mut whole) = (std::time::Duration::ZERO, std::time::Duration::ZERO);
        let n = 20000;
        let mut launched = 0;
        for _ in 0..n {
            let t = Instant::now();
            let mut issued_at = None;
            let dref = &mut d;
            let r = v
                .record_launched_first(
                    s,
                    || {
                        let mut issue = |token| {
                            issued_at = Some(t.elapsed());
                            vitamin_hal::sim::issue_native(token, probe.clone())
                        };
                        match dref.launch_fresh_native(0, &probe, &mut issue)? {
                            Ok(l) => Some((probe.clone(), (dref, l))),
                            Err(e) => panic!("simulated launch failed: {e}"),
                        }
                    },
                    |op, desc, (dref, l)| dref.commit_native(l, op, desc.clone()),
                )
                .unwrap();
            whole += t.elapsed();
            if r.is_some() {
                launched += 1;
                to_issue += issued_at.expect("issued");
            } else {
                v.record_op(s, probe.clone()).unwrap();
            }
            d.run_until_idle().unwrap();
        }
        println!(
            "launch-first blocks {blocks}: {launched} of {n} launched first; {:.3} us to the launch, {:.3} us per call",
            to_issue.as_secs_f64() * 1e6 / launched.max(1) as f64,
            whole.as_secs_f64() * 1e6 / n as f64
        );
    }
}
