//! MPI: ranks, the messages and bytes between them, collectives and their arrival
//! spread, and each rank's share of time inside MPI.
//!
//! - `graph.rs` (and `graph/comms.rs`): the rank graph the MPI call records add up to
//!   (pure);
//! - `view.rs`: the document's `task_graph` section (the JSON keeps that name; the
//!   code calls it the rank graph);
//! - `text.rs`: the report's MPI sections; `html.rs`: the page's MPI tab (the
//!   communication matrix, the collectives); `dot.rs`: the ranks and their traffic in
//!   the DOT file;
//! - `merge.rs`, `merged.rs`: sections written on several nodes joined into one job
//!   (`rtm-trace merge`), and the merged job's report;
//! - here: the analysis the engine drives, and its entry in [`super::KINDS`].
//!
//! The kernel side is the MPI uprobes (`probes/mpi.rs`, rtm-ebpf's `mpi.rs`), whose
//! records are `Event::Mpi`; a rank's job, world rank and size come from its launcher's
//! environment, which the analysis asks for at a process's first MPI call.

mod dot;
pub(crate) mod graph;
mod html;
pub(crate) mod merge;
pub(crate) mod merged;
pub(crate) mod series;
mod text;
pub(crate) mod view;

use std::collections::HashSet;

pub(crate) use graph::RankGraph;
pub(crate) use series::RankSummary;
pub(crate) use view::{RankGraphView, TrafficEdge};

use rtm_common::decode::Event;

use super::{Analysis, Asks, At, HtmlTab, Kind, Sections};
use crate::config::TraceConfig;

/// Its entry in the table of analyses.
pub(crate) static KIND: Kind = Kind {
    key: KEY,
    new,
    text: text::section,
    html: Some(HtmlTab {
        id: "mpi",
        label: "MPI",
        shown: super::always,
        render: html::render,
    }),
    dot: Some(dot::render),
};

/// The section's key in the document.
const KEY: &str = "task_graph";

fn new(_: &TraceConfig) -> Option<Box<dyn Analysis>> {
    Some(Box::new(Mpi::default()))
}

/// The analysis: the rank graph, and the processes whose environment was asked for.
#[derive(Default)]
struct Mpi {
    graph: RankGraph,
    asked: HashSet<u32>,
}

impl Analysis for Mpi {
    fn kind(&self) -> &'static Kind {
        &KIND
    }

    fn event(&mut self, event: &Event, asks: &mut Asks) {
        if let Event::Mpi(m) = event {
            let pid = m.raw.header.pid;
            // A rank's job and rank, at its first MPI call (unless its exec or the
            // attach read them already).
            if self.asked.insert(pid) {
                asks.environment(pid);
            }
            self.graph.apply(m);
        }
    }

    fn forget(&mut self, pids: &HashSet<u32>) {
        self.asked.retain(|p| !pids.contains(p));
    }

    fn section(&self, at: &mut At<'_>) -> Option<serde_json::Value> {
        if self.graph.is_empty() {
            return None;
        }
        let view = RankGraphView::build(&self.graph, at.environment, at.host);
        Some(serde_json::to_value(view).expect("the section serializes"))
    }
}

/// The rank graph of a document's sections, when MPI was traced (and the section
/// reads).
pub(crate) fn of(sections: &Sections) -> Option<RankGraphView> {
    sections.view(KEY)
}
