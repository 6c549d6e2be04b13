//! `rtm-trace report FILE.json`: a saved trace rendered again (the text report, and the
//! HTML report and DOT graphs on request), with no tracing and no root.

use crate::{
    cli::ReportCli,
    output::{
        dest::Dest,
        dot, html, report,
        saved::Doc,
        text::{Shown, path_shown},
    },
};

use super::{SessionError, input};

/// Renders `cli.file`; returns the exit code.
pub fn report(cli: ReportCli) -> Result<i32, SessionError> {
    // Every destination is checked before the (possibly large) document is read.
    let mut out = match &cli.output {
        Some(p) => Dest::check(p)?,
        None => Dest::stdout(),
    };
    let mut html_dest = cli.html.as_deref().map(Dest::check).transpose()?;
    let mut dot_dest = cli.dot.as_deref().map(Dest::check).transpose()?;
    let shown = path_shown(&cli.file);
    // Streamed: memory follows what the document holds, not the file's size (junk
    // is refused from its first bytes; see Doc::read).
    let file = input::Bounded::open(&cli.file, input::MAX_PART_BYTES).map_err(|source| {
        SessionError::Io {
            what: format!("cannot read {shown}"),
            source,
        }
    })?;
    let doc = Doc::read(file, &shown)?;
    let page = html_dest.as_ref().map(|_| html::render(&doc));
    if let (Some(d), Some(page)) = (&mut html_dest, page) {
        d.write(&mut |w| w.write_all(page.as_bytes()))?;
        crate::say!(
            "rtm-trace: wrote {} ({} KiB)",
            Shown(&d.path().display().to_string()),
            page.len() / 1024
        );
    }
    if let Some(d) = &mut dot_dest {
        let graphs = dot::render(&doc);
        d.write(&mut |w| w.write_all(graphs.as_bytes()))?;
        crate::say!(
            "rtm-trace: wrote {}",
            Shown(&d.path().display().to_string())
        );
    }
    let text = report::render(&doc, cli.top.max(1), None);
    out.write(&mut |w| w.write_all(text.as_bytes()))?;
    Ok(0)
}
