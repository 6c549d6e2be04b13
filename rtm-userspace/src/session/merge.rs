//! `rtm-trace merge`: reads the parts several nodes wrote, checks they belong to one job
//! and joins their rank graphs (the model does the joining), then writes the report and
//! the JSON.

use std::path::Path;

use crate::{
    analyses::mpi::{
        merge::{self, Part},
        merged,
    },
    cli::MergeCli,
    output::{dest::Dest, json, text::Shown},
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

/// Reads one part: an rtm-trace JSON document with a rank graph.
fn read_part(path: &Path) -> Result<Part, SessionError> {
    let input = super::input::Bounded::open(path, super::input::MAX_PART_BYTES)
        .map_err(|e| part_err(path, format!("cannot read it: {e}")))?;
    parse_part(path, input)
}

/// Parses a part from `input`, named `path`.
fn parse_part(path: &Path, input: impl std::io::Read) -> Result<Part, SessionError> {
    let mut input = std::io::BufReader::with_capacity(1 << 16, input);
    // Junk (whitespace, zeros, a bare string) is refused before anything is kept.
    crate::output::saved::object_start(&mut input)
        .map_err(|why| part_err(path, format!("not an rtm-trace JSON document: {why}")))?;
    let input = std::io::Read::chain(&b"{"[..], input);
    let doc: PartDocument =
        serde_json::from_reader(input).map_err(|e| match e.io_error_kind() {
            Some(_) => part_err(path, format!("cannot read it: {e}")),
            None => part_err(path, format!("not JSON ({e})")),
        })?;
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
        return Err(merge::MergeError::Version {
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
    // Destinations are checked before anything is read.
    let mut report_to = match &cli.output {
        Some(p) => Dest::check(p)?,
        None => Dest::stdout(),
    };
    let mut json_to = cli.json.as_deref().map(Dest::check).transpose()?;
    let parts = cli
        .parts
        .iter()
        .map(|p| read_part(p))
        .collect::<Result<Vec<_>, _>>()?;
    let view = merge::merge(&parts, json::VERSION)?;
    let infos = merged::part_infos(&parts);
    let text = merged::render(&infos, &view, cli.top);
    // The report first, then the JSON, whatever became of the report.
    let report = report_to.write(&mut |w| w.write_all(text.as_bytes()));
    if let Some(dest) = &mut json_to {
        json::write_merged(dest, &infos, &view)?;
        crate::say!(
            "rtm-trace: wrote {}",
            Shown(&dest.path().display().to_string())
        );
    }
    report?;
    Ok(0)
}

/// Property tests: any part, random or a real one with any values, is read and merged
/// or refused with a message, never a panic; sums saturate.
#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;

    /// A part as `rtm-trace --json` writes it, with the given numbers.
    fn part(rank: i64, big: u64, ranks: usize) -> String {
        let edge = |src: i64, dst: i64| {
            serde_json::json!({
                "src": src, "dst": dst,
                "sent": {"messages": big, "bytes": big, "unknown_size": big, "time_ns": big,
                         "bandwidth_mb_s": 1.0, "sizes": [[0, big], [8, big]]},
                "received": null
            })
        };
        serde_json::json!({
            "format": "rtm-trace", "version": json::VERSION,
            "task_graph": {
                "ranks": [{"rank": rank, "pid": 7, "host": "h", "job": "j", "world_size": 4,
                           "implementation": null, "span_ns": big,
                           "calls": big, "time_in_mpi_ns": big, "mpi_share": 0.5,
                           "calls_per_sec": 1.0, "functions": []}],
                "edges": [edge(rank, rank + 1), edge(rank + 1, rank)],
                "collectives": [{"comm_id": 0, "function": "barrier", "ranks": ranks,
                                 "calls": big, "bytes": big, "time_ns": big, "root": null,
                                 "instances": ranks, "mean_spread_ns": big,
                                 "max_spread_ns": big, "most_often_last": null}],
                "open_requests": ranks,
                "counters": {"unknown_source": big, "untranslated_peer": big,
                             "untracked_comms": big, "proc_null": big,
                             "unmatched_completions": big, "truncated_requests": big,
                             "dropped_over_limits": big}
            }
        })
        .to_string()
    }

    proptest! {
        #[test]
        fn any_bytes_are_refused_cleanly(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            prop_assert!(parse_part(Path::new("p"), bytes.as_slice()).is_err());
        }

        #[test]
        fn real_parts_with_any_numbers_merge_or_are_refused(
            big in prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), any::<u64>()],
            ranks in prop_oneof![Just(usize::MAX), 0usize..4],
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        ) {
            let mut parts = Vec::new();
            for rank in [0, 2] {
                let mut text = part(rank, big, ranks).into_bytes();
                for (i, v) in &edits {
                    let at = i.index(text.len());
                    text[at] = *v;
                }
                if let Ok(p) = parse_part(Path::new("p"), text.as_slice()) {
                    parts.push(p);
                }
            }
            if let Ok(view) = merge::merge(&parts, json::VERSION) {
                let infos = merged::part_infos(&parts);
                let text = merged::render(&infos, &view, 10);
                prop_assert!(crate::format::text::is_inert(&text));
            }
        }
    }

    #[test]
    fn the_sample_part_is_read() {
        let p = parse_part(Path::new("p"), part(0, 5, 2).as_bytes()).unwrap();
        assert_eq!(p.view.ranks.len(), 1);
        let q = parse_part(Path::new("q"), part(2, u64::MAX, 2).as_bytes()).unwrap();
        let view = merge::merge(&[p, q], json::VERSION).unwrap();
        // Sums saturate instead of wrapping.
        assert_eq!(view.counters.unknown_source, u64::MAX);
        assert_eq!(view.collectives[0].bytes, u64::MAX);
    }
}
