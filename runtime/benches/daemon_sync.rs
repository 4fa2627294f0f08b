//! The first launch after a synchronize, through the daemon: one iteration records one small
//! kernel on a stream, dispatches it and synchronizes the stream (the shape of the 8-kernel
//! operator's first launch, and of every training step's first launch after `.item()`). Host time
//! per iteration on the simulated H200 (its virtual time is free), three configurations side by
//! side, rounds interleaved:
//! - `in-process`: the dispatcher decides alone;
//! - `daemon, no linger`: every drained lease is released at the daemon's next round, so each
//!   iteration's launch waits for a binding (a round trip);
//! - `daemon, linger`: drained leases linger ([`DEFAULT_LEASE_LINGER_NS`]), so the launch goes out
//!   at once on the lease the view shows open (launch-first).
//!
//! `cargo bench -p vitamin-runtime --bench daemon_sync` (`VITAMIN_SYNC_BENCH_ITERS`, default
//! 2000 per round; 5 rounds). The daemon runs in this process on its own thread. Prints median and
//! p95 per round and the median over rounds. Results: docs/results/daemon-bench.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, Dim3, KernelArgs, KernelLaunch, LaunchAttributes, OpDesc};
use vitamin_runtime::daemon::client::{ConnectOptions, DaemonClient};
use vitamin_runtime::daemon::decide::DEFAULT_LEASE_LINGER_NS;
use vitamin_runtime::daemon::server::{Daemon, DaemonConfig};
use vitamin_runtime::dispatch::{DispatchConfig, Dispatcher, Remote};
use vitamin_runtime::policy::{AnyPolicy, ClientClass, PolicyKind};
use vitamin_runtime::profile::Profiles;
use vitamin_runtime::vctx::{StreamKind, VctxId, VirtualContext};

type Disp = Dispatcher<SimBackend, AnyPolicy>;

fn setup(daemon: Option<&Daemon>) -> (SimBackend, Disp, Arc<VirtualContext>) {
    let d = SimBackend::preset("h200").unwrap();
    let config = DispatchConfig::default();
    let lanes = config.lanes_per_node as u16;
    let mut disp =
        Dispatcher::new(d.clone(), PolicyKind::Throughput.build(1), Profiles::new("bench"), config).expect("pool");
    let v = Arc::new(VirtualContext::new(VctxId(1)));
    disp.register(v.clone(), "bench", ClientClass::BestEffort);
    if let Some(daemon) = daemon {
        let c = DaemonClient::connect(ConnectOptions {
            socket: daemon.socket().to_path_buf(),
            name: "bench".into(),
            device: 0,
            topology: d.topology().clone(),
            class: ClientClass::BestEffort,
            lanes,
            timeout: Duration::from_secs(5),
        })
        .expect("connect");
        disp.attach_remote(Remote::new(c)).expect("same pool");
    }
    (d, disp, v)
}

fn daemon(tag: &str, linger_ns: u64) -> Daemon {
    let dir = std::env::temp_dir().join(format!("vitamin-sync-bench-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = DaemonConfig::new(dir.join("d.sock"));
    cfg.decide.lease_linger_ns = linger_ns;
    Daemon::start(cfg).expect("daemon")
}

/// Per-iteration host times, ns.
fn run(d: &SimBackend, disp: &mut Disp, v: &VirtualContext, iters: usize) -> Vec<u64> {
    let f = d.kernel("busy").expect("sim kernel");
    let op = Arc::new(OpDesc::Kernel(KernelLaunch::new(
        f,
        Dim3::x(132 * 4),
        Dim3::x(128),
        0,
        KernelArgs::pack(&[&1_000u32.to_le_bytes()]),
        LaunchAttributes::none(),
    )));
    let s = v.create_stream(StreamKind::NonBlocking, 0);
    let mut out = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        v.record_op(s, op.clone()).unwrap();
        while v.outstanding() > 0 {
            disp.run_until_idle().expect("dispatch");
        }
        v.stream_synchronize(s).unwrap();
        out.push(t.elapsed().as_nanos() as u64);
    }
    out
}

fn pct(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e3
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let iters: usize = std::env::var("VITAMIN_SYNC_BENCH_ITERS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let rounds = 5;
    let (d0, d1) = (daemon("nolinger", 0), daemon("linger", DEFAULT_LEASE_LINGER_NS));
    let mut setups =
        [("in-process", setup(None)), ("daemon, no linger", setup(Some(&d0))), ("daemon, linger", setup(Some(&d1)))];
    let mut medians: Vec<Vec<(f64, f64)>> = vec![Vec::new(); setups.len()];
    for (_, (d, disp, v)) in setups.iter_mut() {
        run(d, disp, v, iters / 10); // warm-up
    }
    for round in 0..rounds {
        // Interleaved, rotating the order each round.
        for k in 0..setups.len() {
            let i = (k + round) % setups.len();
            let (name, (d, disp, v)) = &mut setups[i];
            let mut t = run(d, disp, v, iters);
            let (p50, p95) = (pct(&mut t, 0.5), pct(&mut t, 0.95));
            println!("round {} {name:<18} p50 {p50:8.1} us  p95 {p95:8.1} us", round + 1);
            medians[i].push((p50, p95));
        }
    }
    println!("\nmedian over {rounds} rounds of {iters} iterations (record + dispatch + stream synchronize):");
    for (i, (name, (_, disp, _))) in setups.iter().enumerate() {
        let mut p50: Vec<u64> = medians[i].iter().map(|m| (m.0 * 1e3) as u64).collect();
        let mut p95: Vec<u64> = medians[i].iter().map(|m| (m.1 * 1e3) as u64).collect();
        let launched = disp.remote().map_or(0, |r| r.launched);
        println!(
            "  {name:<18} p50 {:8.1} us  p95 {:8.1} us  (launched first: {launched})",
            pct(&mut p50, 0.5),
            pct(&mut p95, 0.5)
        );
    }
}
