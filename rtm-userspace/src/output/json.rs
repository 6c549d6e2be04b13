//! The JSON document: the whole sync graph plus the run's facts, versioned.
//! The format is documented in docs/json-format.md; bump [`VERSION`] on any change that
//! removes or renames a field.

use std::{io::Write, path::Path};

use serde::Serialize;

use super::RunInfo;
use crate::model::Snapshot;

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
    #[serde(skip_serializing_if = "Option::is_none")]
    task_graph: Option<&'a crate::model::TaskView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ambient: Option<&'a crate::model::ambient::AmbientView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counters: Option<&'a crate::model::counters::CountersView>,
}

/// Errors writing JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// The file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn document<'a>(run: &'a RunInfo, snapshot: &'a Snapshot<'a>) -> Document<'a> {
    Document {
        format: FORMAT,
        version: VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        run,
        sync_graph: snapshot,
        task_graph: snapshot.tasks.as_ref(),
        ambient: snapshot.ambient.as_ref(),
        counters: snapshot.counters.as_ref(),
    }
}

/// Renders the document.
pub fn to_string(run: &RunInfo, snapshot: &Snapshot) -> String {
    serde_json::to_string_pretty(&document(run, snapshot)).expect("the document serializes")
}

/// Writes the document to `path` (atomically: a temporary file renamed into place),
/// streamed: a graph of 100,000 objects is hundreds of megabytes of text, never held
/// in memory whole.
pub fn write(path: &Path, run: &RunInfo, snapshot: &Snapshot) -> Result<(), JsonError> {
    let err = |source| JsonError::Write {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("json.tmp");
    let f = std::fs::File::create(&tmp).map_err(err)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
    serde_json::to_writer_pretty(&mut w, &document(run, snapshot))
        .map_err(|e| err(std::io::Error::other(e)))?;
    w.write_all(b"\n").map_err(err)?;
    let f = w.into_inner().map_err(|e| err(e.into_error()))?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

#[derive(Serialize)]
struct MergedDocument<'a> {
    format: &'static str,
    version: u32,
    tool_version: &'static str,
    merged_from: &'a [super::merged::PartInfo],
    task_graph: &'a crate::model::TaskView,
}

/// Writes a merged job's document: its parts and the joined task graph.
pub fn write_merged(
    path: &Path,
    parts: &[super::merged::PartInfo],
    view: &crate::model::TaskView,
) -> Result<(), JsonError> {
    let doc = MergedDocument {
        format: FORMAT,
        version: VERSION,
        tool_version: env!("CARGO_PKG_VERSION"),
        merged_from: parts,
        task_graph: view,
    };
    let text = serde_json::to_string_pretty(&doc).expect("the document serializes");
    write_text(path, &text)
}

fn write_text(path: &Path, text: &str) -> Result<(), JsonError> {
    let err = |source| JsonError::Write {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.write_all(b"\n"))
        .and_then(|_| f.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}
