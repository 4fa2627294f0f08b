//! `vitamin pool [--json]`: the hierarchical pool the chosen device would get (sim when no GPU).
//!
//! Text: one line per tree node in depth-first order, indented by depth (id, kind, size, units,
//! remainder link), then the remainder nodes, then the node count.
//!
//! JSON (stable; fields are only ever added), schema `vitamin.pool.v1`:
//! ```json
//! {
//!   "schema": "vitamin.pool.v1",
//!   "probes": [ { "backend": "cuda", "usable": false, "reason": "..." }, ... ],  // as in `vitamin info`
//!   "device": { "name": "NVIDIA H200 (simulated)", "vendor": "nvidia", "unit_kind": "sm",
//!               "unit_count": 132, "backend": "sim", "simulated": true },
//!   "node_count": 59,
//!   "counts": { "leaf": 16, "internal": 15, "remainder": 28 },
//!   "root": 0,
//!   "leaves": [4, 5, ...],                      // leaf node ids in topology order
//!   "nodes": [                                  // indexed by id
//!     { "id": 0, "kind": "internal", "depth": 0, "size": 132,
//!       "units": [[0, 131]],                    // inclusive unit ranges
//!       "units_display": "SM 0-131",
//!       "parent": null, "children": [1, 16], "remainder": null }, ...
//!   ]
//! }
//! ```
//! `kind` is `leaf`, `internal` or `remainder`; `parent`/`remainder` are ids or `null`;
//! a remainder node's `remainder` is the node it complements.

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::{json, Value};
use vitamin_hal::Topology;
use vitamin_runtime::pool::{Hierarchy, Node, NodeKind};

use crate::backends::{self, BackendChoice, ProbeReport};

/// Runs `vitamin pool`.
pub fn run(choice: BackendChoice, sim: vitamin_hal::sim::SimDevice, json: bool) -> Result<()> {
    let (backend, reports) = backends::select(choice, sim)?;
    let top = backend.topology();
    let hierarchy = Hierarchy::build(top);
    if json {
        println!("{}", serde_json::to_string_pretty(&to_json(&reports, top, &hierarchy))?);
    } else {
        print!("{}", render(&reports, top, &hierarchy));
    }
    Ok(())
}

fn node_line(h: &Hierarchy, n: &Node, indent: usize) -> String {
    let kind = h.unit_name();
    let mut line = format!(
        "{:indent$}{:<5} {:<9} {:>4} {}s  {}",
        "",
        n.id.to_string(),
        n.kind.name(),
        n.size(),
        kind,
        n.units.display(kind),
        indent = indent
    );
    match (n.kind, n.remainder) {
        (NodeKind::Remainder, Some(of)) => {
            let _ = write!(line, "  = device minus {of}");
        }
        (_, Some(r)) => {
            let _ = write!(line, "  remainder {r} ({} {}s)", h.node(r).size(), kind);
        }
        (_, None) => {}
    }
    line
}

/// The text form.
pub fn render(probes: &[ProbeReport], top: &Topology, h: &Hierarchy) -> String {
    let mut s = String::new();
    for r in probes.iter().filter(|r| !r.usable || r.backend == "sim") {
        let _ = writeln!(s, "backend {}: {}", r.backend, r.reason.as_deref().unwrap_or("usable"));
    }
    let caps = top.capabilities();
    let _ = writeln!(
        s,
        "device: {} (backend {}{}): {} {}s in {} leaves",
        top.device_name(),
        caps.backend,
        if caps.simulated { ", SIMULATED" } else { "" },
        top.unit_count(),
        top.unit_name(),
        top.leaves().len()
    );
    let _ = writeln!(s, "\npool tree (binary split of the leaves; each node's remainder = device minus the node):");
    for n in h.tree_preorder() {
        let _ = writeln!(s, "{}", node_line(h, n, 2 + 2 * usize::from(n.depth)));
    }
    if h.remainders().next().is_some() {
        let _ = writeln!(s, "\nremainder nodes:");
        for n in h.remainders() {
            let _ = writeln!(s, "{}", node_line(h, n, 2));
        }
    }
    let _ = writeln!(
        s,
        "\n{} nodes: {} leaves, {} internal, {} remainders",
        h.len(),
        h.count(NodeKind::Leaf),
        h.count(NodeKind::Internal),
        h.count(NodeKind::Remainder)
    );
    s
}

/// The JSON form (shape documented at the top of this file).
pub fn to_json(probes: &[ProbeReport], top: &Topology, h: &Hierarchy) -> Value {
    let caps = top.capabilities();
    let nodes: Vec<Value> = h
        .nodes()
        .iter()
        .map(|n| {
            json!({
                "id": n.id,
                "kind": n.kind,
                "depth": n.depth,
                "size": n.size(),
                "units": n.units.runs().map(|(a, b)| [a, b]).collect::<Vec<_>>(),
                "units_display": n.units.display(h.unit_name()).to_string(),
                "parent": n.parent,
                "children": n.children.as_slice(),
                "remainder": n.remainder,
            })
        })
        .collect();
    json!({
        "schema": "vitamin.pool.v1",
        "probes": probes,
        "device": {
            "name": top.device_name(),
            "vendor": top.vendor(),
            "unit_kind": top.unit_name().to_ascii_lowercase(),
            "unit_count": top.unit_count(),
            "backend": caps.backend,
            "simulated": caps.simulated,
        },
        "node_count": h.len(),
        "counts": {
            "leaf": h.count(NodeKind::Leaf),
            "internal": h.count(NodeKind::Internal),
            "remainder": h.count(NodeKind::Remainder),
        },
        "root": h.root(),
        "leaves": h.leaves(),
        "nodes": nodes,
    })
}

#[cfg(test)]
mod tests {
    use vitamin_hal::sim::SimBackend;
    use vitamin_hal::Backend;

    use super::*;

    #[test]
    fn h200_text_and_json() {
        let b = SimBackend::preset("h200").unwrap();
        let top = b.topology();
        let h = Hierarchy::build(top);
        let probes = [ProbeReport { backend: "sim", usable: true, reason: Some("requested".into()) }];
        let text = render(&probes, top, &h);
        assert!(text.starts_with("backend sim: requested\ndevice: NVIDIA H200 (simulated) (backend sim, SIMULATED)"));
        assert!(text.contains("59 nodes: 16 leaves, 15 internal, 28 remainders"), "{text}");
        // Root line, unindented past the base, and a leaf line with its 124-SM remainder.
        assert!(text.lines().any(|l| l.starts_with("  #0    internal   132 SMs  SM 0-131")), "{text}");
        assert!(text.lines().any(|l| l.contains("leaf") && l.contains("SM 0-7") && l.contains("(124 SMs)")), "{text}");
        assert!(text.lines().any(|l| l.contains("remainder") && l.contains("SM 8-131  = device minus")), "{text}");

        let v = to_json(&probes, top, &h);
        assert_eq!(v["schema"], "vitamin.pool.v1");
        assert_eq!(v["probes"][0]["backend"], "sim");
        assert_eq!(v["node_count"], 59);
        assert_eq!(v["device"]["unit_kind"], "sm");
        assert_eq!(v["device"]["unit_count"], 132);
        assert_eq!(v["counts"]["remainder"], 28);
        let nodes = v["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 59);
        assert_eq!(nodes[0]["units"], json!([[0, 131]]));
        assert_eq!(nodes[0]["remainder"], Value::Null);
        assert_eq!(nodes[0]["children"].as_array().unwrap().len(), 2);
        let leaves = v["leaves"].as_array().unwrap();
        assert_eq!(leaves.len(), 16);
        let last_leaf = &nodes[leaves[15].as_u64().unwrap() as usize];
        assert_eq!((last_leaf["kind"].as_str(), last_leaf["size"].as_u64()), (Some("leaf"), Some(12)));
        assert_eq!(last_leaf["units"], json!([[120, 131]]));
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(n["id"], i);
        }
    }

    #[test]
    fn mi300x_pool_over_xcd_balanced_leaves() {
        let b = vitamin_hal::sim::SimDevice::named("mi300x").unwrap().backend();
        let top = b.topology();
        let h = Hierarchy::build(top);
        let probes = [ProbeReport { backend: "sim", usable: true, reason: Some("requested".into()) }];
        let text = render(&probes, top, &h);
        assert!(text.contains("AMD Instinct MI300X (simulated)"), "{text}");
        assert!(text.contains("71 nodes: 19 leaves, 18 internal, 34 remainders"), "{text}");
        assert!(text.lines().any(|l| l.contains("leaf") && l.contains("CU 0-15") && l.contains("(288 CUs)")), "{text}");
        let v = to_json(&probes, top, &h);
        assert_eq!((v["device"]["unit_kind"].as_str(), v["device"]["unit_count"].as_u64()), (Some("cu"), Some(304)));
    }
}
