//! `rtm-trace merge`: reads the parts several nodes wrote, checks they belong to one job
//! and joins their task graphs (the model does the joining), then writes the report and
//! the JSON.

use std::path::Path;

use crate::{
    cli::MergeCli,
    model::task_merge::{self, Part},
    output::{json, merged},
};

use super::SessionError;

fn part_err(path: &Path, problem: impl Into<String>) -> SessionError {
    SessionError::Part {
        path: path.display().to_string(),
        problem: problem.into(),
    }
}

/// Reads one part: an rtm-trace JSON document with a task graph.
fn read_part(path: &Path) -> Result<Part, SessionError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| part_err(path, format!("cannot read it: {e}")))?;
    let doc: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| part_err(path, format!("not JSON ({e})")))?;
    if doc["format"] != json::FORMAT {
        return Err(part_err(
            path,
            "not an rtm-trace JSON document (write parts with rtm-trace --json)",
        ));
    }
    let version = doc["version"]
        .as_u64()
        .ok_or_else(|| part_err(path, "no format version"))? as u32;
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
    let tasks = doc
        .get("task_graph")
        .filter(|t| !t.is_null())
        .ok_or_else(|| {
            part_err(
                path,
                "no task_graph: no MPI calls were traced in this part (was the MPI \
                 library probed? see the run's messages)",
            )
        })?;
    let view = serde_json::from_value(tasks.clone())
        .map_err(|e| part_err(path, format!("task_graph unreadable: {e}")))?;
    Ok(Part {
        name: path.display().to_string(),
        version,
        view,
    })
}

/// Runs `rtm-trace merge`; returns the exit code.
pub fn merge(cli: MergeCli) -> Result<i32, SessionError> {
    let parts = cli
        .parts
        .iter()
        .map(|p| read_part(p))
        .collect::<Result<Vec<_>, _>>()?;
    let view = task_merge::merge(&parts, json::VERSION)?;
    let infos = merged::part_infos(&parts);
    let text = merged::render(&infos, &view, cli.top);
    match &cli.output {
        Some(path) => std::fs::write(path, &text).map_err(|source| SessionError::Io {
            what: format!("writing {}", path.display()),
            source,
        })?,
        None => print!("{text}"),
    }
    if let Some(path) = &cli.json {
        json::write_merged(path, &infos, &view)?;
        eprintln!("rtm-trace: wrote {}", path.display());
    }
    Ok(0)
}
