//! Probe: time of one pump round binding a fresh ready op (sim H200), by kernel size.
use std::sync::Arc;
use std::time::Instant;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher};
use vitamin_runtime::policy::{ClientClass, PolicyKind};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::{StreamKind, VctxId, VirtualContext};

fn main() {
    for policy in [PolicyKind::Throughput, PolicyKind::Exclusive] {
        for blocks in [1u32, 528] {
            let sim = SimBackend::h200();
            let desc = Arc::new(OpDesc::Kernel(KernelLaunch::new(
                sim.kernel("busy").unwrap(),
                Dim3::x(blocks),
                Dim3::x(256),
                0,
                KernelArgs::pack(&[&100u32.to_le_bytes()]),
                LaunchAttributes::none(),
            )));
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
}
