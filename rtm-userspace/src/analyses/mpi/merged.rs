//! The report and JSON facts of a merged job (`rtm-trace merge`).

use std::fmt::Write as _;

use serde::Serialize;

use super::{merge::Part, text, view::RankGraphView};
use crate::format::text::Shown;

/// What each part contributed.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PartInfo {
    /// The file.
    pub file: String,
    /// Hosts its ranks ran on.
    pub hosts: Vec<String>,
    /// Its world ranks (unidentified ones left out).
    pub ranks: Vec<i32>,
    /// Its job id, where the launcher told.
    pub job: Option<String>,
}

/// Summarizes the parts.
pub fn part_infos(parts: &[Part]) -> Vec<PartInfo> {
    parts
        .iter()
        .map(|p| {
            let mut hosts: Vec<String> = p.view.ranks.iter().map(|r| r.host.clone()).collect();
            hosts.sort();
            hosts.dedup();
            let mut ranks: Vec<i32> = p.view.ranks.iter().filter_map(|r| r.rank).collect();
            ranks.sort_unstable();
            PartInfo {
                file: p.name.clone(),
                hosts,
                ranks,
                job: p.view.ranks.iter().find_map(|r| r.job.clone()),
            }
        })
        .collect()
}

/// Renders the merged report.
pub fn render(parts: &[PartInfo], view: &RankGraphView, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== rtm-trace: merged task graph ==");
    let job = parts.iter().find_map(|p| p.job.as_deref()).unwrap_or("?");
    let _ = writeln!(out, "job {}: {} parts", Shown(job), parts.len());
    for p in parts {
        let ranks: Vec<String> = p.ranks.iter().map(i32::to_string).collect();
        let _ = writeln!(
            out,
            "  {}: host {}, ranks {}",
            Shown(&p.file),
            Shown(&p.hosts.join(", ")),
            if ranks.is_empty() {
                "none identified".into()
            } else {
                ranks.join(" ")
            }
        );
    }
    text::render(&mut out, view, top);
    let _ = writeln!(
        out,
        "\nNotes\n  - collective arrival spreads are within each node (clocks of different nodes \
         are not comparable)"
    );
    out
}
