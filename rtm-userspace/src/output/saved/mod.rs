//! A trace as the JSON document holds it (docs/json-format.md), read back for the
//! outputs that render it: `rtm-trace report FILE.json` (text, HTML, DOT) and the
//! `--html` / `--dot` sinks, which build the same document from the final snapshot. Only
//! what those outputs show is read; unknown fields are ignored, so later additions to
//! the format do not break it, and a different format version is refused by name.
//!
//! The fields are those of docs/json-format.md, documented there once.
#![allow(missing_docs)]

mod read;
mod reduce;

pub use read::object_start;

use rtm_common::Primitive;
use serde::Deserialize;

use super::{RunInfo, json};
use crate::analyses::mpi::merged::PartInfo;
use crate::model::{
    EdgeView, ObjectView, Sections, ThreadView, WaitsForView, Window,
    blocked::{DeadlockView, Undecided},
    stacks::StacksView,
    sync::ModelCounters,
    views::{
        CallSiteView,
        snapshot::{HeldByRow, LockOrderView},
    },
};

/// Why a document cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SavedError {
    /// Not a JSON document rtm-trace wrote.
    #[error("{path} is not a JSON document written by rtm-trace --json: {why}")]
    NotOurs {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// Written in another version of the format.
    #[error(
        "{path} was written in version {version} of rtm-trace's JSON format (by rtm-trace \
         {tool}); this rtm-trace ({ours}) reads version {reads}: render it with the \
         rtm-trace that wrote it, or trace again"
    )]
    Version {
        /// The file.
        path: String,
        /// Its format version.
        version: u64,
        /// The tool that wrote it.
        tool: String,
        /// This build's version.
        ours: &'static str,
        /// The format version this build reads.
        reads: u32,
    },
}

/// A field that may be `null` in a document (a merged one leaves some empty): its
/// default then.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// The sync graph as the document holds it: the model's own views, in the order the
/// snapshot listed them (objects and threads most waiting first).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SyncGraph {
    #[serde(deserialize_with = "nullable")]
    pub window: Window,
    #[serde(deserialize_with = "nullable")]
    pub threads: Vec<ThreadView>,
    #[serde(deserialize_with = "nullable")]
    pub objects: Vec<ObjectView>,
    #[serde(deserialize_with = "nullable")]
    pub edges: Vec<EdgeView>,
    #[serde(deserialize_with = "nullable")]
    pub waits_for: Vec<WaitsForView>,
    #[serde(deserialize_with = "nullable")]
    pub call_sites: Vec<CallSiteView>,
    #[serde(deserialize_with = "nullable")]
    pub model: ModelCounters,
    /// Waits by call stack, when any were captured.
    pub stacks: Option<StacksView>,
    #[serde(deserialize_with = "nullable")]
    pub held_by: Vec<HeldByRow>,
    pub lock_order: Option<LockOrderView>,
    #[serde(deserialize_with = "nullable")]
    pub deadlocks: Vec<DeadlockView>,
    #[serde(deserialize_with = "nullable")]
    pub cannot_tell: Vec<Undecided>,
    #[serde(deserialize_with = "nullable")]
    pub go_processes: Vec<u32>,
    /// Counts over every object, thread and waits-for row, when the lists hold only
    /// what the text report shows or names (a run's own report: see `reduce.rs`);
    /// None when they hold everything (a document read from its JSON).
    #[serde(skip)]
    pub totals: Option<ObjectTotals>,
}

/// What the text report counts over every object, thread and waits-for row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ObjectTotals {
    /// Objects.
    pub objects: usize,
    /// Locks shown in the main table (`is_lock`).
    pub locks: usize,
    /// Futex words waited on for work (`is_active`, idle).
    pub idle_words: usize,
    /// Futex words (no probed call's objects).
    pub futex_words: u64,
    /// Their sleeps.
    pub futex_sleeps: u64,
    /// Threads.
    pub threads: usize,
    /// Threads whose creation was seen.
    pub children: usize,
    /// Waiter -> waker rows.
    pub waits_for: usize,
}

impl ObjectTotals {
    /// Adds one object.
    pub fn add(&mut self, o: &ObjectView) {
        self.objects += 1;
        if is_lock(o) {
            self.locks += 1;
        }
        if o.kind == Primitive::Futex {
            self.futex_words += 1;
            self.futex_sleeps += o.counts.contended;
            if is_active(o) && o.is_idle() {
                self.idle_words += 1;
            }
        }
    }
}

impl SyncGraph {
    /// What the report counts over every object.
    pub fn totals(&self) -> ObjectTotals {
        self.totals.unwrap_or_else(|| {
            let mut t = ObjectTotals {
                threads: self.threads.len(),
                children: self.threads.iter().filter(|t| t.parent.is_some()).count(),
                waits_for: self.waits_for.len(),
                ..ObjectTotals::default()
            };
            for o in &self.objects {
                t.add(o);
            }
            t
        })
    }

    /// The trace's length, ns.
    pub fn duration_ns(&self) -> u64 {
        self.window.end_ns.saturating_sub(self.window.start_ns)
    }

    /// The object of a kind at an address, when listed.
    pub fn find(&self, pid: u32, addr: u64, kind: Primitive) -> Option<&ObjectView> {
        self.objects
            .iter()
            .find(|o| o.pid == pid && o.addr == addr && o.kind == kind)
    }

    /// The name a thread is shown by: "tid name" ("tid ?" when it has none).
    pub fn thread_label(&self, pid: u32, tid: u32) -> String {
        let name = self
            .threads
            .iter()
            .find(|t| t.pid == pid && t.tid == tid)
            .and_then(|t| t.name.as_deref())
            .unwrap_or("?");
        format!("{tid} {name}")
    }
}

/// Whether an object kept anyone waiting or was used at all: a futex word whose waits
/// all returned without sleeping kept nobody waiting, and is in no table of contention.
pub fn is_active(o: &ObjectView) -> bool {
    let c = &o.counts;
    if o.kind == Primitive::Futex {
        c.contended.saturating_add(c.timeouts) > 0
    } else {
        c.acquisitions
            .saturating_add(c.waits)
            .saturating_add(c.failed_trylocks)
            .saturating_add(c.timeouts)
            > 0
    }
}

/// Objects shown in the main lock table: locks and futex words that were acquired,
/// waited on, or failed a trylock or a timed call.
pub fn is_lock(o: &ObjectView) -> bool {
    is_active(o)
        && matches!(
            o.kind,
            Primitive::Mutex | Primitive::Spin | Primitive::RwLock | Primitive::Futex
        )
        && !o.is_idle()
}

/// The document: what `--json` writes, read back; every text, HTML and DOT output
/// renders it.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    pub format: String,
    pub version: u64,
    pub tool_version: String,
    /// The run's facts (empty in a merged job's document).
    pub run: RunInfo,
    pub sync_graph: SyncGraph,
    /// The sections of the analyses in `analyses/` (timed functions, MPI, ...), by key.
    pub sections: Sections,
    /// A merged job's parts (`rtm-trace merge --json`): it has no sync graph.
    pub merged_from: Vec<PartInfo>,
    /// What limits the traced work (none in documents written before findings were).
    pub findings: Vec<crate::output::findings::Finding>,
}

/// Read field by field, so that an analysis's section is kept under its key (as the
/// document holds it) and any other field this build does not know is skipped unread;
/// `null` reads as empty where a merged document leaves a part empty.
impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = Doc;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an rtm-trace document")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Doc, A::Error> {
                fn or_empty<'de, A: serde::de::MapAccess<'de>, T: Default + Deserialize<'de>>(
                    m: &mut A,
                ) -> Result<T, A::Error> {
                    Ok(m.next_value::<Option<T>>()?.unwrap_or_default())
                }
                let mut doc = Doc::default();
                while let Some(key) = m.next_key::<std::borrow::Cow<'de, str>>()? {
                    match &*key {
                        "format" => doc.format = m.next_value()?,
                        "version" => doc.version = m.next_value()?,
                        "tool_version" => doc.tool_version = m.next_value()?,
                        "run" => doc.run = or_empty(&mut m)?,
                        "sync_graph" => doc.sync_graph = or_empty(&mut m)?,
                        "merged_from" => doc.merged_from = or_empty(&mut m)?,
                        "findings" => doc.findings = or_empty(&mut m)?,
                        other => match crate::analyses::kind(other) {
                            // A merged document leaves a part's section null.
                            Some(k) => match m.next_value()? {
                                serde_json::Value::Null => {}
                                v => doc.sections.insert(k.key, v),
                            },
                            None => {
                                m.next_value::<serde::de::IgnoredAny>()?;
                            }
                        },
                    }
                }
                Ok(doc)
            }
        }
        d.deserialize_map(Fields)
    }
}

impl Doc {
    /// The document of a run as `--json` writes it, read back: what every output of
    /// the run renders, so that each shows what the JSON holds and nothing else.
    pub fn of(
        run: &RunInfo,
        snapshot: &crate::model::Snapshot,
    ) -> Result<Doc, crate::output::dest::DestError> {
        let bytes = json::to_vec(run, snapshot);
        Doc::parse(&bytes, "the trace").map_err(|e| crate::output::dest::DestError::Io {
            path: "the trace's document".into(),
            source: std::io::Error::other(e.to_string()),
        })
    }

    /// The name a thread is shown by: "tid name".
    pub fn thread_label(&self, pid: u32, tid: u32) -> String {
        self.sync_graph.thread_label(pid, tid)
    }
}

impl crate::analyses::Names for Doc {
    fn process(&self, pid: u32) -> Option<String> {
        self.run
            .targets
            .iter()
            .find(|t| t.pid == pid)
            .and_then(|t| t.comm.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_format_or_version_is_refused_by_name() {
        let e = Doc::parse(
            br#"{"format":"rtm-trace","version":0,"tool_version":"0.0.1"}"#,
            "old.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("version 0") && e.contains("0.0.1") && e.contains("reads version 1"),
            "{e}"
        );
        let e = Doc::parse(br#"{"format":"other"}"#, "x.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not a JSON document written by rtm-trace"),
            "{e}"
        );
        let e = Doc::parse(b"{", "x.json").unwrap_err().to_string();
        assert!(e.contains("x.json"), "{e}");
    }

    #[test]
    fn a_document_reads_back() {
        let d = Doc::parse(
            br#"{"format":"rtm-trace","version":1,"tool_version":"x","run":{"mode":"full","host":"h","targets":[{"pid":5,"comm":"app"}]},
                "sync_graph":{"objects":[{"pid":5,"kind":"mutex","addr":"0x10","name":"m","acquisitions":3,"wait":{"count":1,"total_ns":7}}],
                "threads":[{"pid":5,"tid":6,"name":"w"}],"future_field":1}}"#,
            "t.json",
        )
        .unwrap();
        assert_eq!(d.sync_graph.objects[0].label(), "m");
        assert_eq!(d.sync_graph.objects[0].wait.total_ns, 7);
        assert_eq!(d.thread_label(5, 6), "6 w");
        assert_eq!(d.run.targets[0].comm.as_deref(), Some("app"));
    }
}
