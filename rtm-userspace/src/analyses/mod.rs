//! Analyses as vertical slices. Each folder here is one analysis:
//!
//! - what it keeps of the decoded events (its model, pure: records in, views out);
//! - its section of the JSON document (serde types, written by `--json` under the
//!   analysis's key and read back by every output);
//! - its section of the text report, rendered from the document;
//! - its [`Kind`]: the key, how to make it for a run, how to render its section.
//!
//! The engine knows analyses only through [`Analysis`] and [`Analyses`] (events in,
//! sections out), the document carries their sections by key ([`Sections`]), and the
//! report renders them in the order of [`KINDS`]. Adding an analysis is a folder here
//! and a line in [`KINDS`]; what it needs from the kernel side (probes, records) is
//! asked for through [`Kernel`].
//!
//! Timed functions (`--func`), MPI, and the system statistics with the counters are
//! here; the sync graph, call stacks and blocked threads are still in `model/` and
//! `output/` (docs/how-it-works.md).
//!
//! Layer: after `config` (an analysis is made for a run's config), before `output`
//! (which renders the sections) and `engine` (which drives the analyses); text layout
//! comes from `format`.

pub(crate) mod functions;
pub(crate) mod mpi;
pub(crate) mod system;

use std::collections::{HashMap, HashSet};

use rtm_common::decode::Event;
use serde_json::Value;

pub(crate) use crate::model::Sections;
use crate::{config::TraceConfig, proc::process::RankEnv};

/// What an analysis may ask the kernel side for (the engine's source answers).
pub trait Kernel {
    /// The functions the probes time (`--func`), by index.
    fn timed_functions(&self) -> Vec<functions::TimedFunction> {
        Vec::new()
    }

    /// The timed calls in flight now.
    fn running_calls(&self) -> Vec<functions::RunningCall> {
        Vec::new()
    }
}

/// What an analysis asks for while it takes an event: facts read from /proc off the
/// event path (by the engine's naming worker), in by the next snapshot.
#[derive(Debug, Default)]
pub(crate) struct Asks {
    /// Processes whose launcher's environment is wanted.
    pub environments: Vec<u32>,
}

impl Asks {
    /// The launcher's environment of `pid` (an MPI rank's job, rank and size); read
    /// once per program (again after an exec), whoever asks.
    pub fn environment(&mut self, pid: u32) {
        self.environments.push(pid);
    }
}

/// What an analysis's section is made with, at a snapshot.
pub(crate) struct At<'a> {
    /// The end of the window the snapshot covers (CLOCK_MONOTONIC ns).
    pub end_ns: u64,
    /// This node's host name.
    pub host: &'a str,
    /// What each traced process's launcher put in its environment, where read.
    pub environment: &'a HashMap<u32, RankEnv>,
    /// The kernel side.
    pub kernel: &'a dyn Kernel,
    /// A thread's name, as the sync graph knows it (or /proc).
    pub thread_name: &'a mut dyn FnMut(u32, u32) -> Option<String>,
}

/// One analysis of a run, driven by the engine.
pub(crate) trait Analysis: Send {
    /// What it is.
    fn kind(&self) -> &'static Kind;

    /// A decoded event, in the order read, after the sync graph took it in. Runs on
    /// the event path: it must be quick; what it needs from /proc it asks for.
    fn event(&mut self, event: &Event, asks: &mut Asks);

    /// Targets were attached: what the kernel side now traces for it.
    fn attached(&mut self, _kernel: &dyn Kernel) {}

    /// The engine's sampler read the system (every `--every`, and at each exit and the
    /// end), when the front end samples it.
    fn sampled(&mut self, _sample: &system::Sample) {}

    /// The processes `pids` are gone (in a daemon): their state may go.
    fn forget(&mut self, _pids: &HashSet<u32>) {}

    /// Its section of the document; None when it has nothing to say (not asked for).
    fn section(&self, at: &mut At<'_>) -> Option<Value>;
}

/// A kind of analysis: its entry in [`KINDS`].
pub(crate) struct Kind {
    /// Its section's key in the document (a field of the JSON's top level).
    pub key: &'static str,
    /// The analysis for a run of `config`; None when the run does not ask for it.
    pub new: fn(&TraceConfig) -> Option<Box<dyn Analysis>>,
    /// Renders its section (as the document holds it) into the text report, at most
    /// `top` rows per table; an error says the section is not of this kind's shape.
    pub text: fn(&Value, &mut String, usize) -> Result<(), serde_json::Error>,
    /// Its tab of the HTML page, if it has one.
    pub html: Option<HtmlTab>,
    /// Its part of the DOT file (a `subgraph` inside the one `digraph`), if it has one.
    pub dot: Option<Render>,
}

/// Renders a section (as the document holds it) into an output; an error says the
/// section is not of its kind's shape.
pub(crate) type Render = fn(&Value, &mut String) -> Result<(), serde_json::Error>;

/// What a renderer may ask of the rest of the document: the names the document gives
/// what it traced, made once and shown the same in every output.
pub(crate) trait Names {
    /// A traced process's name (its command), where known.
    fn process(&self, pid: u32) -> Option<String>;
}

/// A document that names nothing (a renderer's own tests).
#[cfg(test)]
pub(crate) struct NoNames;

#[cfg(test)]
impl Names for NoNames {
    fn process(&self, _: u32) -> Option<String> {
        None
    }
}

/// An analysis's tab of the HTML page.
pub(crate) struct HtmlTab {
    /// The element id of its `<section>` (unique in the page).
    pub id: &'static str,
    /// The tab's label.
    pub label: &'static str,
    /// Whether the section has anything to show (else no tab).
    pub shown: fn(&Value) -> bool,
    /// Renders the section (as the document holds it) as one `<section id=ID>`; every
    /// string the target controls escaped (`format::text::markup`).
    pub render: fn(&Value, &dyn Names, &mut String) -> Result<(), serde_json::Error>,
}

/// For a tab shown whenever its section is there.
pub(crate) fn always(_: &Value) -> bool {
    true
}

/// Every analysis, in the order of their sections in the document and the report.
pub(crate) static KINDS: &[&Kind] = &[
    &functions::KIND,
    &mpi::KIND,
    &system::KIND,
    &system::COUNTERS,
];

/// The kind whose section is `key`.
pub(crate) fn kind(key: &str) -> Option<&'static Kind> {
    KINDS.iter().copied().find(|k| k.key == key)
}

/// The analyses of one run.
#[derive(Default)]
pub(crate) struct Analyses(Vec<Box<dyn Analysis>>);

impl Analyses {
    /// Those `config` asks for.
    pub fn new(config: &TraceConfig) -> Self {
        Self(KINDS.iter().filter_map(|k| (k.new)(config)).collect())
    }

    /// An event to each.
    pub fn event(&mut self, event: &Event, asks: &mut Asks) {
        for a in &mut self.0 {
            a.event(event, asks);
        }
    }

    /// Targets were attached.
    pub fn attached(&mut self, kernel: &dyn Kernel) {
        for a in &mut self.0 {
            a.attached(kernel);
        }
    }

    /// A sample of the system.
    pub fn sampled(&mut self, sample: &system::Sample) {
        for a in &mut self.0 {
            a.sampled(sample);
        }
    }

    /// Processes gone.
    pub fn forget(&mut self, pids: &HashSet<u32>) {
        for a in &mut self.0 {
            a.forget(pids);
        }
    }

    /// Their sections now.
    pub fn sections(&self, at: &mut At<'_>) -> Sections {
        let mut out = Sections::default();
        for a in &self.0 {
            if let Some(v) = a.section(at) {
                out.insert(a.kind().key, v);
            }
        }
        out
    }
}

/// The HTML page's tabs for the sections of a document: (id, label).
pub(crate) fn html_tabs(sections: &Sections) -> Vec<(&'static str, &'static str)> {
    KINDS
        .iter()
        .filter_map(|k| Some((sections.get(k.key)?, k.html.as_ref()?)))
        .filter(|(v, h)| (h.shown)(v))
        .map(|(_, h)| (h.id, h.label))
        .collect()
}

/// Renders the HTML page's sections for the sections of a document, in the order of
/// [`html_tabs`]; one that is not of its kind's shape is said, not rendered.
pub(crate) fn html(sections: &Sections, names: &dyn Names, page: &mut String) {
    use std::fmt::Write as _;
    for k in KINDS {
        let (Some(v), Some(h)) = (sections.get(k.key), k.html.as_ref()) else {
            continue;
        };
        if !(h.shown)(v) {
            continue;
        }
        let mut part = String::new();
        match (h.render)(v, names, &mut part) {
            Ok(()) => page.push_str(&part),
            Err(e) => {
                let _ = write!(
                    page,
                    "<section id=\"{}\"><p>The document's {} cannot be read: {}</p></section>",
                    h.id,
                    k.key,
                    crate::format::text::markup(&e.to_string())
                );
            }
        }
    }
}

/// Renders the sections of a document into the text report, in the order of
/// [`KINDS`]; a section that is not of its kind's shape is said, not rendered.
pub(crate) fn text(sections: &Sections, out: &mut String, top: usize) {
    use std::fmt::Write as _;
    for k in KINDS {
        if let Some(v) = sections.get(k.key)
            && let Err(e) = (k.text)(v, out, top)
        {
            let _ = writeln!(out, "\n(the document's {} cannot be read: {e})", k.key);
        }
    }
}

/// Renders the analyses' parts of the DOT file, in the order of [`KINDS`]; a section
/// that is not of its kind's shape is said in a comment, not drawn.
pub(crate) fn dot(sections: &Sections, out: &mut String) {
    use std::fmt::Write as _;
    for k in KINDS {
        let (Some(v), Some(render)) = (sections.get(k.key), k.dot) else {
            continue;
        };
        let mut part = String::new();
        match render(v, &mut part) {
            Ok(()) => out.push_str(&part),
            Err(e) => {
                // A DOT comment ends at the line's end: the error is one line.
                let why: String = e
                    .to_string()
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c })
                    .collect();
                let _ = writeln!(out, "  // the document's {} cannot be read: {why}", k.key);
            }
        }
    }
}
