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
    /// Writes Chrome trace JSON.
    pub fn write_chrome_trace(&self, path: &Path) -> std::io::Result<()> {
        let mut events = Vec::with_capacity(self.spans.len() + self.node_labels.len());
        for (id, label) in self.node_labels.iter().enumerate() {
            events.push(serde_json::json!({
                "name": "process_name", "ph": "M", "pid": id, "args": { "name": label }
            }));
        }
        for s in &self.spans {
            events.push(serde_json::json!({
                "name": s.name,
                "cat": s.client,
                "ph": "X",
                "pid": if s.node == SERVICE_NODE { self.node_labels.len().saturating_sub(1) } else { usize::from(s.node) },
                "tid": s.lane,
                "ts": s.start_ns as f64 / 1000.0,
                "dur": (s.end_ns.saturating_sub(s.start_ns)) as f64 / 1000.0,
                "args": { "client": s.client, "op": s.op, "continued": s.continued },
            }));
        }
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        serde_json::to_writer(&mut f, &serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ns" }))?;
        f.flush()
    }
}
