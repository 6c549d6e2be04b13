//! Timed functions (`--func`): the calls of the functions the user named, per thread,
//! with the distribution of their inclusive durations and the calls still running.
//!
//! - `model.rs`: what the timed-call records add up to (pure);
//! - `view.rs`: the document's `functions` section;
//! - `text.rs`: the report's "Timed functions" section;
//! - `html.rs`: the HTML page's "Timed functions" tab;
//! - here: the analysis the engine drives, and its entry in [`super::KINDS`].
//!
//! The kernel side is the `--func` uprobes (`probes/funcs.rs`, rtm-ebpf's `func.rs`),
//! whose records are `Event::Func`.

mod html;
mod model;
mod text;
mod view;

pub(crate) use model::{FuncModel, RunningCall, TimedFunction};

use rtm_common::decode::Event;

use super::{Analysis, Asks, At, HtmlTab, Kernel, Kind};
use crate::config::TraceConfig;

/// Its entry in the table of analyses.
pub(crate) static KIND: Kind = Kind {
    key: "functions",
    new,
    text: text::render,
    html: Some(HtmlTab {
        id: "functions",
        label: "Timed functions",
        shown: super::always,
        render: html::render,
    }),
    dot: None,
};

fn new(config: &TraceConfig) -> Option<Box<dyn Analysis>> {
    Some(Box::new(Functions(FuncModel::new(
        config.functions.max_rows,
    ))))
}

/// The analysis: the model of the timed calls.
struct Functions(FuncModel);

impl Analysis for Functions {
    fn kind(&self) -> &'static Kind {
        &KIND
    }

    fn event(&mut self, event: &Event, _: &mut Asks) {
        if let Event::Func(f) = event {
            self.0.apply(f);
        }
    }

    fn attached(&mut self, kernel: &dyn Kernel) {
        let timed = kernel.timed_functions();
        if timed.len() != self.0.functions().len() {
            self.0.set_functions(timed);
        }
    }

    fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.0.forget(pids);
    }

    fn section(&self, at: &mut At<'_>) -> Option<serde_json::Value> {
        // A section only when functions were asked for (and found).
        if !self.0.is_active() {
            return None;
        }
        let running = at.kernel.running_calls();
        let view = self.0.view(&running, at.end_ns, at.thread_name);
        Some(serde_json::to_value(view).expect("the section serializes"))
    }
}
