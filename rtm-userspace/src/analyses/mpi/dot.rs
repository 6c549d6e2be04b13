//! The ranks and the bytes between them in the DOT file.

use std::fmt::Write as _;

use serde::Deserialize as _;

use super::view::RankGraphView;
use crate::format::{count, dot::quote};

/// MPI edges drawn (by bytes).
const MAX_EDGES: usize = 200;

/// The rank graph, as a cluster of the DOT file's graph, from the document's
/// `task_graph`.
pub(super) fn render(v: &serde_json::Value, out: &mut String) -> Result<(), serde_json::Error> {
    let tg = RankGraphView::deserialize(v)?;
    out.push_str("  subgraph cluster_tasks {\n    label=\"MPI task graph: bytes sent\";\n");
    for r in &tg.ranks {
        if let Some(rank) = r.rank {
            let _ = writeln!(
                out,
                "    r{rank} [shape=circle, label={}];",
                quote(&format!("rank {rank}\n{}", r.host))
            );
        }
    }
    let mut te: Vec<_> = tg.edges.iter().collect();
    te.sort_by_key(|e| std::cmp::Reverse(e.sent.as_ref().map_or(0, |s| s.bytes)));
    for e in te.iter().take(MAX_EDGES) {
        let (Some(s), Some(d)) = (e.src, e.dst) else {
            continue;
        };
        let t = e
            .sent
            .clone()
            .or_else(|| e.received.clone())
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    r{s} -> r{d} [label={}];",
            quote(&format!("{} msgs, {} B", count(t.messages), count(t.bytes)))
        );
    }
    out.push_str("  }\n");
    Ok(())
}
