//! `--html FILE` and `--dot FILE` while tracing: at the end, the JSON document is made
//! in memory and rendered as `rtm-trace report FILE.json --html/--dot` renders a saved
//! one, so a trace and its saved document always look the same.

use super::{
    dest::{Dest, DestError},
    dot, html, json,
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

/// An output rendered from the final document.
pub struct Rendered {
    dest: Dest,
    kind: Kind,
}

/// The HTML report and the DOT graphs, when the config names files for them.
pub fn sink(c: &TraceConfig) -> Result<Option<Box<dyn Sink>>, DestError> {
    // Two outputs from one line of `SINKS`: one sink writes both.
    let html = c.output.html.as_deref().map(Dest::check).transpose()?;
    let dot = c.output.dot.as_deref().map(Dest::check).transpose()?;
    let mut sinks: Vec<Rendered> = Vec::new();
    if let Some(dest) = html {
        sinks.push(Rendered {
            dest,
            kind: Kind::Html,
        });
    }
    if let Some(dest) = dot {
        sinks.push(Rendered {
            dest,
            kind: Kind::Dot,
        });
    }
    Ok((!sinks.is_empty()).then(|| Box::new(Both(sinks)) as Box<dyn Sink>))
}

/// The rendered outputs asked for.
struct Both(Vec<Rendered>);

impl Sink for Both {
    fn name(&self) -> String {
        self.0
            .iter()
            .map(|r| match r.kind {
                Kind::Html => "the HTML report",
                Kind::Dot => "the DOT graphs",
            })
            .collect::<Vec<_>>()
            .join(" and ")
    }

    fn finish(&mut self, at: &Moment) -> Result<(), DestError> {
        let bytes = json::to_vec(at.run, at.snapshot);
        let doc = Doc::parse(&bytes, "the trace").map_err(|e| DestError::Io {
            path: self.name(),
            source: std::io::Error::other(e.to_string()),
        })?;
        drop(bytes);
        let mut first = Ok(());
        for r in &mut self.0 {
            let text = match r.kind {
                Kind::Html => html::render(&doc),
                Kind::Dot => dot::render(&doc),
            };
            match r.dest.write(&mut |w| w.write_all(text.as_bytes())) {
                Ok(()) => crate::say!(
                    "rtm-trace: wrote {} ({} KiB)",
                    Shown(&r.dest.path().display().to_string()),
                    text.len() / 1024
                ),
                Err(e) if first.is_ok() => first = Err(e),
                Err(_) => {}
            }
        }
        first
    }
}
