//! `--html FILE` and `--dot FILE` while tracing: at the end, the JSON document is made
//! in memory and rendered as `rtm-trace report FILE.json --html/--dot` renders a saved
//! one, so a trace and its saved document always look the same.

use super::{
    dest::{Dest, DestError},
    dot, html,
    saved::Doc,
    sink::{Moment, Sink},
    text::Shown,
};
use crate::config::TraceConfig;

/// What a rendered output is.
#[derive(Clone, Copy)]
enum Kind {
    Html,
    Dot,
}

/// The outputs rendered from the final document: one sink for both (one line of
/// `SINKS`), the document made once.
pub struct Rendered(Vec<(Kind, Dest)>);

/// The HTML report and the DOT graphs, when the config names files for them.
pub fn sink(c: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    let mut outputs = Vec::new();
    for (kind, path) in [(Kind::Html, &c.output.html), (Kind::Dot, &c.output.dot)] {
        if let Some(p) = path {
            outputs.push((kind, Dest::check(p)?));
        }
    }
    Ok((!outputs.is_empty()).then(|| Box::new(Rendered(outputs)) as Box<dyn Sink>))
}

impl Sink for Rendered {
    fn name(&self) -> String {
        self.0
            .iter()
            .map(|(kind, _)| match kind {
                Kind::Html => "the HTML report",
                Kind::Dot => "the DOT graphs",
            })
            .collect::<Vec<_>>()
            .join(" and ")
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        let doc = Doc::of(at.run, at.snapshot)?;
        let mut first = Ok(());
        for (kind, dest) in &mut self.0 {
            let text = match kind {
                Kind::Html => html::render(&doc),
                Kind::Dot => dot::render(&doc),
            };
            match dest.write(&mut |w| w.write_all(text.as_bytes())) {
                Ok(()) => crate::say!(
                    "rtm-trace: wrote {} ({} KiB)",
                    Shown(&dest.path().display().to_string()),
                    text.len() / 1024
                ),
                Err(e) if first.is_ok() => first = Err(e),
                Err(_) => {}
            }
        }
        first
    }
}
