//! The HTML page's MPI tab: the communication matrix (bytes, messages, time in calls;
//! by node above 64 ranks) and the collectives with their arrival spread (a sortable
//! table whose rows the tab carries).

use std::fmt::Write as _;

use serde::Deserialize as _;
use serde_json::json;

use super::view::RankGraphView;
use crate::format::{count, ns, svg, text::markup};

/// Ranks shown one by one in the matrix; above it, aggregated by host.
const MATRIX_RANKS: usize = 64;
/// Collectives carried in the table.
const MAX_COLLECTIVES: usize = 500;

/// The tab, from the document's `task_graph`.
pub(super) fn render(
    v: &serde_json::Value,
    _: &dyn crate::analyses::Names,
    p: &mut String,
) -> Result<(), serde_json::Error> {
    let tg = RankGraphView::deserialize(v)?;
    let by_host = tg.ranks.len() > MATRIX_RANKS;
    let key_of = |r: Option<i32>| -> String {
        match r {
            Some(r) if by_host => tg
                .ranks
                .iter()
                .find(|x| x.rank == Some(r))
                .map_or_else(|| "?".into(), |x| x.host.clone()),
            Some(r) => format!("rank {r}"),
            None => "?".into(),
        }
    };
    let mut labels: Vec<String> = tg.ranks.iter().map(|r| key_of(r.rank)).collect();
    labels.sort_by_key(|l| (l.len(), l.clone()));
    labels.dedup();
    let idx = |l: &str| labels.iter().position(|x| x == l);
    let n = labels.len();
    let mut m = [
        vec![vec![0.0; n]; n],
        vec![vec![0.0; n]; n],
        vec![vec![0.0; n]; n],
    ];
    for e in &tg.edges {
        let (Some(i), Some(j)) = (idx(&key_of(e.src)), idx(&key_of(e.dst))) else {
            continue;
        };
        let s = e
            .sent
            .clone()
            .or_else(|| e.received.clone())
            .unwrap_or_default();
        m[0][i][j] += s.bytes as f64;
        m[1][i][j] += s.messages as f64;
        m[2][i][j] += s.time_ns as f64;
    }
    let _ = write!(
        p,
        "<section id=\"mpi\"><h2>MPI communication matrix{}</h2>",
        if by_host {
            format!(" (aggregated by node: {} ranks)", tg.ranks.len())
        } else {
            String::new()
        }
    );
    p.push_str(&svg::heatmap(&labels, &m[0], "bytes", &|v| {
        format!("{} bytes", count(v as u64))
    }));
    p.push_str(&svg::heatmap(&labels, &m[1], "messages", &|v| {
        format!("{} messages", count(v as u64))
    }));
    p.push_str(&svg::heatmap(&labels, &m[2], "time in calls", &|v| {
        ns(v as u64)
    }));
    let rows: Vec<serde_json::Value> = tg
        .collectives
        .iter()
        .take(MAX_COLLECTIVES)
        .map(|c| {
            json!({
                "function": c.function, "ranks": c.ranks, "instances": c.instances,
                "time_ns": c.time_ns, "mean_spread_ns": c.mean_spread_ns,
                "max_spread_ns": c.max_spread_ns,
            })
        })
        .collect();
    // The rows ride in an attribute, escaped as markup: the page's script reads them.
    let _ = write!(
        p,
        "<h2>Collectives: arrival spread is the wait for the last rank</h2><div \
         id=\"collectives-table\" data-rows=\"{}\"></div></section>",
        markup(&serde_json::to_string(&rows).expect("JSON values serialize"))
    );
    Ok(())
}
