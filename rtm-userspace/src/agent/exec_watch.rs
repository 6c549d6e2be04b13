//! Exec events read on a thread of their own. Each process that execs is read from /proc
//! at once (a short-lived one may be gone a few milliseconds later), checked against
//! the rules, and a selected one is put into its engine's in-kernel filter at once, so
//! the probes already in place count its calls from its first (its own attach follows,
//! from discovery, whatever the agent's loop is busy with). Discovery gets what was read:
//! a selected process that ended before discovery came to it is counted as missed,
//! never lost in silence.

use tokio::sync::mpsc;

use super::{
    discovery::{ProcInfo, Selector},
    proc_events::{ProcEvent, ProcEvents},
};
use crate::{
    config::Mode,
    engine::EngineHandle,
    probes::{FilterIds, FilterWriter},
};

/// What the watcher saw.
#[derive(Debug)]
pub enum Seen {
    /// A process exec'd: what /proc said of it then (None: gone already, or not
    /// readable).
    Exec {
        /// The process.
        pid: u32,
        /// Read at once.
        info: Option<Box<ProcInfo>>,
        /// A select rule matched: it was put into its engine's filter.
        admitted: bool,
    },
    /// Events were lost (a full socket buffer): everything is to be looked at again.
    Lost,
}

/// Where a selected process goes: the engine of its rule's mode (`handles`, by mode;
/// `default_mode` for a rule that names none), whose in-kernel filter the watcher
/// writes itself where `filters` names its maps (the programs are loaded already:
/// `keep_loaded`).
pub struct Admit {
    /// The engines, by mode.
    pub handles: Vec<(Mode, EngineHandle)>,
    /// The file's mode.
    pub default_mode: Mode,
    /// The engines' filters by mode.
    pub filters: Vec<(Mode, FilterIds)>,
}

/// Subscribes to the process connector and starts the watcher; its findings come
/// through the receiver. The thread ends when the receiver is dropped. The socket is
/// the thread's own runtime's: its readiness never waits on the agent's loop.
pub fn spawn(selector: Selector, admit: Admit) -> std::io::Result<mpsc::UnboundedReceiver<Seen>> {
    let (tx, rx) = mpsc::unbounded_channel();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let events = {
        let _in = rt.enter();
        ProcEvents::open()?
    };
    std::thread::Builder::new()
        .name("rtm-exec".into())
        .spawn(move || {
            // Opened here: the mapping of the filter's bytes is this thread's.
            let writers: Vec<(Mode, FilterWriter)> = admit
                .filters
                .iter()
                .filter_map(|(m, ids)| match FilterWriter::open(*ids) {
                    Ok(w) => Some((*m, w)),
                    Err(e) => {
                        crate::say!(
                            "rtm-trace agent: the exec watcher cannot write the process filter ({e}): processes go in at their attach"
                        );
                        None
                    }
                })
                .collect();
            rt.block_on(watch(events, selector, admit, writers, tx))
        })?;
    Ok(rx)
}

async fn watch(
    mut events: ProcEvents,
    selector: Selector,
    admit: Admit,
    mut writers: Vec<(Mode, FilterWriter)>,
    tx: mpsc::UnboundedSender<Seen>,
) {
    loop {
        let seen = match events.next().await {
            Ok(evs) => evs
                .into_iter()
                .filter_map(|ev| match ev {
                    ProcEvent::Exec { pid } => Some(pid),
                    ProcEvent::Fork { .. } => None,
                })
                .map(|pid| {
                    let info = ProcInfo::read(pid);
                    let mut admitted = false;
                    if let Some(i) = &info
                        && let Some((_, rule)) = selector.rule_for(i)
                    {
                        let mode = rule.mode.unwrap_or(admit.default_mode);
                        if let Some((_, w)) = writers.iter_mut().find(|(m, _)| *m == mode)
                            && w.admit(pid)
                            && crate::proc::process::start_ticks(pid, pid) != Some(i.start)
                        {
                            // It ended before it went in: nothing would take it out
                            // (its exit has run), and its pid may name another
                            // process later.
                            w.remove(pid);
                        }
                        if let Some((_, h)) = admit.handles.iter().find(|(m, _)| *m == mode) {
                            h.admit(pid, Some(i.start));
                            admitted = true;
                        }
                    }
                    Seen::Exec {
                        pid,
                        info: info.map(Box::new),
                        admitted,
                    }
                })
                .collect(),
            Err(_) => vec![Seen::Lost],
        };
        for s in seen {
            if tx.send(s).is_err() {
                return;
            }
        }
    }
}
