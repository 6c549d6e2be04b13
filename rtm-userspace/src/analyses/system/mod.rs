//! System statistics and performance counters: the system and the traced processes over
//! time, and what the counters counted. Two analyses, one folder, both fed by the
//! engine's sampler (which owns the reading: /proc and the perf file descriptors) on
//! its own timer, through [`Analysis::sampled`]:
//!
//! - `system` (section `ambient`): samples turned into intervals of rates and shares
//!   (`interval`, `ambient`), the trouble the thresholds flag in them (`thresholds`),
//!   the report's System section (`text`) and the page's System tab (`html`);
//! - `counters` (section `counters`): the readings as outputs show them (`counters`)
//!   and the report's Counters section (`text`).

// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod ambient;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod counters;
mod html;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod interval;
mod text;
// Statistics records whose fields are the kernel's own figures (/proc, perf, BPF
// fdinfo), named as there and described by their type's doc.
#[allow(missing_docs)]
pub(crate) mod thresholds;

use std::collections::HashSet;

use rtm_common::decode::Event;
use serde_json::Value;

use self::{ambient::Ambient, counters::CountersView, interval::Interval};
use super::{Analysis, Asks, At, HtmlTab, Kind, Sections};
use crate::{
    config::TraceConfig,
    readers::{
        ambient::RawSample,
        counters::{Reading, Scope, Unavailable},
    },
};

/// The system statistics: the section `ambient`.
pub(crate) static KIND: Kind = Kind {
    key: KEY,
    new: new_system,
    text: text::system_section,
    html: Some(HtmlTab {
        id: "system",
        label: "System",
        shown: html::shown,
        render: html::render,
    }),
    dot: None,
};

/// The performance counters: the section `counters`.
pub(crate) static COUNTERS: Kind = Kind {
    key: "counters",
    new: new_counters,
    text: text::counters_section,
    html: None,
    dot: None,
};

/// The system statistics' key in the document.
const KEY: &str = "ambient";

/// One sample of the system, read by the engine's sampler.
pub(crate) struct Sample {
    /// /proc's figures for the system and the traced processes.
    pub system: RawSample,
    /// The counters' readings.
    pub counters: CounterReadings,
}

/// What the counters read, and what they could not count.
#[derive(Clone)]
pub(crate) struct CounterReadings {
    /// The events asked for.
    pub events: Vec<&'static str>,
    /// Those that cannot be counted here, and why.
    pub unavailable: Vec<Unavailable>,
    /// Each scope's reading of each event.
    pub readings: Vec<(Scope, &'static str, Reading)>,
    /// Threads without counters of their own (over the cap).
    pub threads_not_counted: u64,
    /// Whether the traced processes have counters of their own.
    pub per_target: bool,
}

/// The system over the run. Its model starts at the first sample.
struct System {
    period_ns: u64,
    hz: u64,
    thresholds: thresholds::Thresholds,
    model: Option<Ambient>,
}

fn new_system(config: &TraceConfig) -> Option<Box<dyn Analysis>> {
    Some(Box::new(System {
        period_ns: config.sample_every().as_nanos() as u64,
        hz: crate::readers::ambient::ticks_per_second(),
        thresholds: config.thresholds.clone(),
        model: None,
    }))
}

impl Analysis for System {
    fn kind(&self) -> &'static Kind {
        &KIND
    }

    fn event(&mut self, _: &Event, _: &mut Asks) {}

    fn sampled(&mut self, sample: &Sample) {
        let (period, hz) = (self.period_ns, self.hz);
        let thresholds = &self.thresholds;
        let model = self.model.get_or_insert_with(|| {
            Ambient::new(sample.system.t_ns, period, hz, thresholds.clone())
        });
        model.push(sample.system.clone());
    }

    fn forget(&mut self, pids: &HashSet<u32>) {
        if let Some(m) = &mut self.model {
            m.forget(pids);
        }
    }

    /// None until the first sample: a front end that samples nothing (the agent) has
    /// no system section.
    fn section(&self, _: &mut At<'_>) -> Option<Value> {
        let view = self.model.as_ref()?.view();
        Some(serde_json::to_value(view).expect("the system statistics serialize"))
    }
}

/// The counters' last readings.
struct Counters(Option<CounterReadings>);

fn new_counters(_: &TraceConfig) -> Option<Box<dyn Analysis>> {
    Some(Box::new(Counters(None)))
}

impl Analysis for Counters {
    fn kind(&self) -> &'static Kind {
        &COUNTERS
    }

    fn event(&mut self, _: &Event, _: &mut Asks) {}

    fn sampled(&mut self, sample: &Sample) {
        self.0 = Some(sample.counters.clone());
    }

    fn section(&self, _: &mut At<'_>) -> Option<Value> {
        let c = self.0.as_ref()?;
        let view = CountersView::build(
            &c.events,
            c.unavailable.clone(),
            &c.readings,
            c.threads_not_counted,
            c.per_target,
        );
        Some(serde_json::to_value(view).expect("the counters serialize"))
    }
}

/// The system statistics of a document, read back from their section.
pub(crate) fn of(sections: &Sections) -> Option<ambient::AmbientView> {
    sections.view(KEY)
}

/// The last interval closed, from the section (for the published summary): the last of
/// the series, read without the rest.
pub(crate) fn latest(sections: &Sections) -> Option<Interval> {
    let last = sections.get(KEY)?.get("intervals")?.as_array()?.last()?;
    serde::Deserialize::deserialize(last).ok()
}
