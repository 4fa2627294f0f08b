//! The binding timeline: which op ran on which pool node and lane, when. Written as Chrome trace
//! JSON (opens in Perfetto / chrome://tracing): one process per pool node, one thread per lane.

use std::io::Write;
use std::path::Path;

use serde::Serialize;

/// [`Span::node`] of ops that ran on the service partition.
pub const SERVICE_NODE: u16 = u16::MAX;

/// One executed op.
#[derive(Debug, Clone, Serialize)]
pub struct Span {
    /// Op label (kernel name or kind).
    pub name: String,
    /// Client name.
    pub client: String,
    /// Client index (its [`HolderId`](crate::pool::HolderId) number: registration order).
    pub holder: u32,
    /// The op's id (its token) within that client's vCtx ([`OpId`](crate::vctx::OpId) number).
    pub op: u64,
    /// Pool node id; [`SERVICE_NODE`] for the service partition (copies, fills, host functions).
    pub node: u16,
    /// Lane within the node.
    pub lane: u32,
    /// Submission to the backend lane, ns.
    pub submitted_ns: u64,
    /// Start (submission, or previous completion on the lane if later), ns.
    pub start_ns: u64,
    /// Completion observed, ns.
    pub end_ns: u64,
    /// Whether it was bound by lane continuation.
    pub continued: bool,
}

/// A recorded timeline.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    /// Spans in completion order.
    pub spans: Vec<Span>,
    /// Node labels (`node 3: SM 0-15`) by node id.
    pub node_labels: Vec<String>,
}

impl Timeline {
    /// Writes Chrome trace JSON: a `process_name` record per node label, then one complete (`X`)
    /// event per span, the service partition's spans on the last label's process. Streamed event
    /// by event (a daemon's timeline holds up to 600,000 spans, about 100 MB of JSON).
    pub fn write_chrome_trace(&self, path: &Path) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        self.write_chrome_trace_to(&mut f)?;
        f.flush()
    }

    /// [`write_chrome_trace`](Self::write_chrome_trace) to any writer.
    pub fn write_chrome_trace_to(&self, w: &mut impl Write) -> std::io::Result<()> {
        #[derive(Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        #[derive(Serialize)]
        struct Meta<'a> {
            name: &'static str,
            ph: &'static str,
            pid: usize,
            args: Name<'a>,
        }
        #[derive(Serialize)]
        struct Args<'a> {
            client: &'a str,
            op: u64,
            continued: bool,
        }
        #[derive(Serialize)]
        struct Event<'a> {
            name: &'a str,
            cat: &'a str,
            ph: &'static str,
            pid: usize,
            tid: u32,
            ts: f64,
            dur: f64,
            args: Args<'a>,
        }
        let service_pid = self.node_labels.len().saturating_sub(1);
        w.write_all(b"{\"traceEvents\":[")?;
        let mut first = true;
        let mut sep = |w: &mut dyn Write| -> std::io::Result<()> {
            if !std::mem::take(&mut first) {
                w.write_all(b",")?;
            }
            Ok(())
        };
        for (pid, label) in self.node_labels.iter().enumerate() {
            sep(w)?;
            serde_json::to_writer(&mut *w, &Meta { name: "process_name", ph: "M", pid, args: Name { name: label } })?;
        }
        for s in &self.spans {
            sep(w)?;
            let event = Event {
                name: &s.name,
                cat: &s.client,
                ph: "X",
                pid: if s.node == SERVICE_NODE { service_pid } else { usize::from(s.node) },
                tid: s.lane,
                ts: s.start_ns as f64 / 1000.0,
                dur: s.end_ns.saturating_sub(s.start_ns) as f64 / 1000.0,
                args: Args { client: &s.client, op: s.op, continued: s.continued },
            };
            serde_json::to_writer(&mut *w, &event)?;
        }
        w.write_all(b"],\"displayTimeUnit\":\"ns\"}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(name: &str, node: u16, start_ns: u64, end_ns: u64) -> Span {
        Span {
            name: name.into(),
            client: "app".into(),
            holder: 0,
            op: 7,
            node,
            lane: 2,
            submitted_ns: start_ns,
            start_ns,
            end_ns,
            continued: true,
        }
    }

    /// The trace is one JSON object: a `process_name` record per node label, then each span as a
    /// complete event in microseconds on its node's process (the service partition's on the last).
    #[test]
    fn the_trace_is_json_with_one_event_per_span() {
        let t = Timeline {
            spans: vec![span("gemm", 1, 2_000, 5_500), span("copy", SERVICE_NODE, 6_000, 6_000)],
            node_labels: vec!["node 0".into(), "node 1".into(), "service".into()],
        };
        let mut out = Vec::new();
        t.write_chrome_trace_to(&mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(v["displayTimeUnit"], "ns");
        let ev = v["traceEvents"].as_array().unwrap();
        assert_eq!(ev.len(), 5);
        assert_eq!(
            (ev[2]["ph"].as_str(), ev[2]["pid"].as_u64(), ev[2]["args"]["name"].as_str()),
            (Some("M"), Some(2), Some("service"))
        );
        let gemm = &ev[3];
        assert_eq!(
            (gemm["name"].as_str(), gemm["ph"].as_str(), gemm["pid"].as_u64(), gemm["tid"].as_u64()),
            (Some("gemm"), Some("X"), Some(1), Some(2))
        );
        assert_eq!((gemm["ts"].as_f64(), gemm["dur"].as_f64()), (Some(2.0), Some(3.5)));
        assert_eq!(
            (gemm["cat"].as_str(), gemm["args"]["op"].as_u64(), gemm["args"]["continued"].as_bool()),
            (Some("app"), Some(7), Some(true))
        );
        assert_eq!(ev[4]["pid"].as_u64(), Some(2), "the service partition's spans on the last process");
        // No label, no span: still a valid, empty trace.
        let mut out = Vec::new();
        Timeline::default().write_chrome_trace_to(&mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["traceEvents"].as_array().map(Vec::len), Some(0));
    }
}
