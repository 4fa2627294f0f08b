//! Pool hot paths on the simulated H200 tree (59 nodes): eligibility of every node for a holder,
//! and lease + release. Target: under 1 us each. Group `pool_h200` is the default pool (conflicts
//! by unit unions), `pool_h200_flat` the same benchmarks on the flat contrast (conflicts by
//! pairwise scans, `pool = "flat"`). Results: docs/results/pool-bench.md.
//!
//! Run: `cargo bench -p vitamin-runtime --bench pool`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use std::sync::Arc;
use vitamin_hal::sim::SimBackend;
use vitamin_hal::{Backend, UnitSet};

use vitamin_runtime::pool::{Conflicts, Hierarchy, HolderId, NodeId, Pool, Reservation};

fn h200_with(conflicts: Conflicts) -> Pool {
    Pool::with_conflicts(Arc::new(Hierarchy::build(SimBackend::preset("h200").unwrap().topology())), conflicts)
}

fn node(p: &Pool, lo: usize, hi: usize) -> NodeId {
    p.hierarchy().find(&UnitSet::range(lo, hi)).expect("H200 node")
}

/// A busy pool: three holders with leases (one draining) and a reservation, leaving SMs 32..64
/// and 96..112 free.
fn busy_h200_with(conflicts: Conflicts) -> Pool {
    let mut p = h200_with(conflicts);
    let (a, b, c) = (HolderId(1), HolderId(2), HolderId(3));
    let n = node(&p, 0, 16);
    p.lease(n, a).unwrap();
    p.begin_submit(n, a).unwrap();
    let n = node(&p, 16, 24);
    p.lease(n, b).unwrap();
    p.begin_submit(n, b).unwrap();
    p.close_gate(n).unwrap();
    p.lease(node(&p, 64, 96), c).unwrap();
    p.reserve(node(&p, 112, 132), Reservation { holder: a, tag: 1 }).unwrap();
    p
}

fn bench(c: &mut Criterion) {
    bench_group(c, "pool_h200", Conflicts::Unions);
    bench_group(c, "pool_h200_flat", Conflicts::Pairwise);
}

fn bench_group(c: &mut Criterion, name: &str, conflicts: Conflicts) {
    let h200 = || h200_with(conflicts);
    let busy_h200 = || busy_h200_with(conflicts);
    let mut g = c.benchmark_group(name);
    let mut out = Vec::with_capacity(64);

    let idle = h200();
    g.bench_function("eligible_all_nodes/idle_pool", |bch| {
        bch.iter(|| {
            idle.eligible(black_box(HolderId(1)), black_box(0), &mut out);
            black_box(out.len())
        })
    });
    let busy = busy_h200();
    g.bench_function("eligible_all_nodes/busy_pool", |bch| {
        bch.iter(|| {
            busy.eligible(black_box(HolderId(1)), black_box(0), &mut out);
            black_box(out.len())
        })
    });
    let ids: Vec<NodeId> = busy.nodes().iter().map(|n| n.id).collect();
    g.bench_function("is_eligible_each_node/busy_pool", |bch| {
        bch.iter(|| ids.iter().filter(|&&id| busy.is_eligible(black_box(id), HolderId(1))).count())
    });

    let mut p = busy_h200();
    let leaf = node(&p, 40, 48);
    g.bench_function("lease_release/leaf_busy_pool", |bch| {
        bch.iter(|| {
            p.lease(black_box(leaf), HolderId(4)).unwrap();
            p.release(black_box(leaf), HolderId(4)).unwrap();
        })
    });
    let mut p = h200();
    let half = node(&p, 0, 64);
    g.bench_function("lease_release/half_idle_pool", |bch| {
        bch.iter(|| {
            p.lease(black_box(half), HolderId(4)).unwrap();
            p.release(black_box(half), HolderId(4)).unwrap();
        })
    });
    let mut p = busy_h200();
    let n = node(&p, 32, 64);
    p.lease(n, HolderId(4)).unwrap();
    g.bench_function("submit_complete/busy_pool", |bch| {
        bch.iter(|| {
            p.begin_submit(black_box(n), HolderId(4)).unwrap();
            black_box(p.complete(black_box(n)).unwrap());
        })
    });
    // Lookahead reclamation round trip: a leased 16-SM node with one op in flight is reclaimed
    // for the 32-SM node above it; the completion drains it and fulfils the reservation, which
    // is then given back (the pool ends as it started).
    let mut p = busy_h200();
    let (inner, target) = (node(&p, 32, 48), node(&p, 32, 64));
    let r = Reservation { holder: HolderId(5), tag: 9 };
    g.bench_function("reclaim_drain_reserve_cycle/busy_pool", |bch| {
        bch.iter(|| {
            p.lease(inner, HolderId(4)).unwrap();
            p.begin_submit(inner, HolderId(4)).unwrap();
            black_box(p.reclaim_for(black_box(target), r).unwrap());
            black_box(p.complete(inner).unwrap());
            p.unreserve(target).unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
