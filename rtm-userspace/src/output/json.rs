//! The JSON document: the whole sync graph plus the run's facts, versioned.
//! The format is documented in docs/json-format.md; bump [`VERSION`] on any change that
//! removes or renames a field.

use std::io;

use serde::Serialize;

use super::{
    RunInfo,
    dest::{Dest, DestError},
    sink::{Moment, Sink},
    text::Shown,
};
use crate::{
    analyses::mpi::{RankGraphView, merged::PartInfo},
    config::TraceConfig,
    model::Snapshot,
};

/// Format name, the first field of every document.
pub const FORMAT: &str = "rtm-trace";
/// Format version.
pub const VERSION: u32 = 1;

#[derive(Serialize)]
struct Document<'a> {
    format: &'static str,
    version: u32,
    tool_version: &'static str,
    run: &'a RunInfo,
    sync_graph: &'a Snapshot<'a>,
    /// The analyses' sections (`analyses/`), each a field under its key.
    #[serde(flatten)]
    sections: &'a crate::model::Sections,
    /// What limits the traced work (output/findings.rs).
    findings: Vec<super::findings::Finding>,
}

fn document<'a>(run: &'a RunInfo, snapshot: &'a Snapshot<'a>) -> Document<'a> {
    Document {
        format: FORMAT,
        version: VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        run,
        sync_graph: snapshot,
        sections: &snapshot.sections,
        findings: super::findings::find(snapshot, run.mode == crate::config::Mode::Full),
    }
}

/// The document, compact (for the outputs that read it back: HTML, DOT).
pub fn to_vec(run: &RunInfo, snapshot: &Snapshot) -> Vec<u8> {
    serde_json::to_vec(&document(run, snapshot)).expect("the document serializes")
}

/// Renders the document.
#[cfg(test)]
pub fn to_string(run: &RunInfo, snapshot: &Snapshot) -> String {
    serde_json::to_string_pretty(&document(run, snapshot)).expect("the document serializes")
}

/// Writes the document to `dest`, streamed: a graph of 100,000 objects is hundreds of
/// megabytes of text, never held in memory whole. A file is replaced only once the
/// whole document is written.
pub fn write(dest: &mut Dest, run: &RunInfo, snapshot: &Snapshot) -> Result<(), DestError> {
    dest.write(&mut |w| {
        serde_json::to_writer_pretty(&mut *w, &document(run, snapshot)).map_err(io::Error::from)?;
        w.write_all(b"\n")
    })
}

/// The JSON document as a sink, written once at the end to `output.json`.
pub struct JsonSink {
    dest: Dest,
}

/// The JSON document, when the config names a file for it (checked now).
pub fn sink(c: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    c.output
        .json
        .as_deref()
        .map(|path| {
            Ok(Box::new(JsonSink {
                dest: Dest::check(path)?,
            }) as Box<dyn Sink>)
        })
        .transpose()
}

impl Sink for JsonSink {
    fn name(&self) -> String {
        "the JSON".into()
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        // The tracer's peak memory, up to the moment the document is written.
        let mut run = at.run.clone();
        run.tracer_max_rss_kib = crate::proc::process::peak_rss_kib();
        write(&mut self.dest, &run, at.snapshot)?;
        crate::say!(
            "rtm-trace: wrote {}",
            Shown(&self.dest.path().display().to_string())
        );
        Ok(())
    }
}

#[derive(Serialize)]
struct MergedDocument<'a> {
    format: &'static str,
    version: u32,
    tool_version: &'static str,
    merged_from: &'a [PartInfo],
    task_graph: &'a RankGraphView,
}

/// Writes a merged job's document: its parts and the joined rank graph.
pub fn write_merged(
    dest: &mut Dest,
    parts: &[PartInfo],
    view: &RankGraphView,
) -> Result<(), DestError> {
    let doc = MergedDocument {
        format: FORMAT,
        version: VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        merged_from: parts,
        task_graph: view,
    };
    dest.write(&mut |w| {
        serde_json::to_writer_pretty(&mut *w, &doc).map_err(io::Error::from)?;
        w.write_all(b"\n")
    })
}
