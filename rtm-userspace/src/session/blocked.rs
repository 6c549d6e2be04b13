//! `rtm-trace --pid N --blocked`: who is blocked now, on what, held by whom, and the
//! deadlocks among them, in one snapshot from /proc and the targets' memory (no probes:
//! it works on a process that hung before rtm-trace came, in well under a second).

use super::SessionError;
use crate::{
    config::TraceConfig,
    engine::blocked::snapshot,
    output::{blocked_report, dest::Dest, text::Shown},
};

/// Runs `--blocked` on the targets of `config`; returns the exit code: 3 when there is
/// a deadlock, 4 when one cannot be ruled out (threads wait to acquire something whose
/// holder cannot be known), else 0.
pub fn run(config: &TraceConfig) -> Result<i32, SessionError> {
    let mut report_to = match &config.output.report {
        Some(p) => Dest::check(p)?,
        None => Dest::stdout(),
    };
    let mut json_to = config.output.json.as_deref().map(Dest::check).transpose()?;
    let view = snapshot(&config.targets.pids);
    for c in &view.cycles {
        crate::say!("rtm-trace: {}", blocked_report::cycle_line(&view, c));
    }
    let text = blocked_report::render(&view, config.output.top);
    let report = report_to.write(&mut |w| w.write_all(text.as_bytes()));
    if let Some(dest) = &mut json_to {
        let doc = blocked_report::json(&view);
        dest.write(&mut |w| w.write_all(doc.as_bytes()))?;
        crate::say!(
            "rtm-trace: wrote {}",
            Shown(&dest.path().display().to_string())
        );
    }
    report?;
    Ok(if !view.cycles.is_empty() {
        3
    } else if !view.cannot_tell.is_empty() {
        4
    } else {
        0
    })
}
