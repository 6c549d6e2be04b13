//! `rtm-trace merge`: reads the parts several nodes wrote, checks they belong to one job
//! and joins their task graphs (the model does the joining), then writes the report and
//! the JSON.

use std::path::Path;

use crate::{
    cli::MergeCli,
    model::task_merge::{self, Part},
    output::{json, merged, text::Shown},
};

use super::SessionError;

fn part_err(path: &Path, problem: impl Into<String>) -> SessionError {
    SessionError::Part {
        path: path.display().to_string(),
        problem: problem.into(),
    }
}

/// What `merge` reads of a part: the rest of the document (the sync graph, which may be
/// hundreds of MiB) is skipped as it streams by.
#[derive(serde::Deserialize)]
struct PartDocument {
    format: Option<serde_json::Value>,
    version: Option<serde_json::Value>,
    task_graph: Option<serde_json::Value>,
}

/// Reads one part: an rtm-trace JSON document with a task graph.
fn read_part(path: &Path) -> Result<Part, SessionError> {
    let input = super::input::Bounded::open(path, super::input::MAX_PART_BYTES)
        .map_err(|e| part_err(path, format!("cannot read it: {e}")))?;
    let doc: PartDocument =
        serde_json::from_reader(std::io::BufReader::with_capacity(1 << 16, input)).map_err(
            |e| match e.io_error_kind() {
                Some(_) => part_err(path, format!("cannot read it: {e}")),
                None => part_err(path, format!("not JSON ({e})")),
            },
        )?;
    if doc.format.as_ref().and_then(|f| f.as_str()) != Some(json::FORMAT) {
        return Err(part_err(
            path,
            "not an rtm-trace JSON document (write parts with rtm-trace --json)",
        ));
    }
    let version = doc
        .version
        .as_ref()
        .and_then(|v| v.as_u64())
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| part_err(path, "no valid format version"))?;
    if version != json::VERSION {
        // Checked again by the model with the others; said here before parsing a
        // layout this build may not know.
        return Err(task_merge::MergeError::Version {
            name: path.display().to_string(),
            found: version,
            supported: json::VERSION,
        }
        .into());
    }
    let tasks = doc.task_graph.filter(|t| !t.is_null()).ok_or_else(|| {
        part_err(
            path,
            "no task_graph: no MPI calls were traced in this part (was the MPI \
             library probed? see the run's messages)",
        )
    })?;
    let view = serde_json::from_value(tasks)
        .map_err(|e| part_err(path, format!("task_graph unreadable: {e}")))?;
    Ok(Part {
        name: path.display().to_string(),
        version,
        view,
    })
}

/// Runs `rtm-trace merge`; returns the exit code.
pub fn merge(cli: MergeCli) -> Result<i32, SessionError> {
    // A part read from a pipe gives up at Ctrl-C.
    crate::interrupt::install().map_err(|source| SessionError::Io {
        what: "signal handlers".into(),
        source,
    })?;
    let mut outputs = super::Outputs::check(cli.output.as_deref(), cli.json.as_deref())?;
    let parts = cli
        .parts
        .iter()
        .map(|p| read_part(p))
        .collect::<Result<Vec<_>, _>>()?;
    let view = task_merge::merge(&parts, json::VERSION)?;
    let infos = merged::part_infos(&parts);
    let text = merged::render(&infos, &view, cli.top);
    // The report first, then the JSON, whatever became of the report.
    let report = outputs.report.write(&mut |w| w.write_all(text.as_bytes()));
    if let Some(dest) = &mut outputs.json {
        json::write_merged(dest, &infos, &view)?;
        crate::say!(
            "rtm-trace: wrote {}",
            Shown(&dest.path().display().to_string())
        );
    }
    report?;
    Ok(0)
}
