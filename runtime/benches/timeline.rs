//! Writing a binding timeline as Chrome trace JSON (`Timeline::write_chrome_trace_to`), against
//! the reference it replaced: one `serde_json::Value` per event, the whole tree built in memory
//! and then serialized. A daemon keeps up to 600,000 spans (`vitamin daemon --timeline`); with
//! the reference, a daemon holding about 100 MB of spans took over 15 s to stop
//! (docs/results/eval.md, mixed-graph runs 5-6).
//!
//! Both write [`SPANS`] spans over 59 node labels into memory (the file system is left out).
//! Run: `cargo bench -p vitamin-runtime --bench timeline`. Results: docs/results/timeline-write.md.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use vitamin_runtime::dispatch::{Span, Timeline, SERVICE_NODE};

/// Spans per written timeline.
const SPANS: usize = 100_000;

fn timeline() -> Timeline {
    let spans = (0..SPANS as u64)
        .map(|i| Span {
            name: format!("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_{}>", i % 97),
            client: if i % 3 == 0 { "decoder".into() } else { "resnet50".into() },
            holder: (i % 3 == 0) as u32,
            op: i,
            node: if i % 11 == 0 { SERVICE_NODE } else { (i % 59) as u16 },
            lane: (i % 4) as u32,
            submitted_ns: 1_000 * i,
            start_ns: 1_000 * i + 10,
            end_ns: 1_000 * i + 900,
            continued: i % 2 == 0,
        })
        .collect();
    let node_labels = (0..60).map(|n| format!("node {n}: SM {}-{}", n * 2, n * 2 + 1)).collect();
    Timeline { spans, node_labels }
}

/// The replaced writer: a `serde_json::Value` per event, then the whole tree.
fn value_tree(t: &Timeline, out: &mut Vec<u8>) {
    let mut events = Vec::with_capacity(t.spans.len() + t.node_labels.len());
    for (id, label) in t.node_labels.iter().enumerate() {
        events.push(serde_json::json!({ "name": "process_name", "ph": "M", "pid": id, "args": { "name": label } }));
    }
    for s in &t.spans {
        events.push(serde_json::json!({
            "name": s.name,
            "cat": s.client,
            "ph": "X",
            "pid": if s.node == SERVICE_NODE { t.node_labels.len().saturating_sub(1) } else { usize::from(s.node) },
            "tid": s.lane,
            "ts": s.start_ns as f64 / 1000.0,
            "dur": (s.end_ns.saturating_sub(s.start_ns)) as f64 / 1000.0,
            "args": { "client": s.client, "op": s.op, "continued": s.continued },
        }));
    }
    serde_json::to_writer(out, &serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" })).unwrap();
}

fn main() {
    let t = timeline();
    // Both writers produce the same trace (key order aside).
    let (mut a, mut b) = (Vec::new(), Vec::new());
    value_tree(&t, &mut a);
    t.write_chrome_trace_to(&mut b).unwrap();
    let (va, vb): (serde_json::Value, serde_json::Value) =
        (serde_json::from_slice(&a).unwrap(), serde_json::from_slice(&b).unwrap());
    assert_eq!(va, vb, "the streamed trace differs from the reference");
    println!("{SPANS} spans: {} bytes of JSON", b.len());

    let mut c = Criterion::default().configure_from_args().sample_size(10);
    let mut g = c.benchmark_group("timeline_write");
    g.throughput(Throughput::Elements(SPANS as u64));
    let mut buf = Vec::with_capacity(b.len());
    g.bench_function("streamed", |bench| {
        bench.iter(|| {
            buf.clear();
            t.write_chrome_trace_to(&mut buf).unwrap();
            black_box(buf.len())
        })
    });
    g.bench_function("value_tree", |bench| {
        bench.iter(|| {
            buf.clear();
            value_tree(&t, &mut buf);
            black_box(buf.len())
        })
    });
    g.finish();
    c.final_summary();
}
