//! `rtm-trace --live` (`rtm-trace top`): a terminal view of the trace as it runs, fed
//! by the engine's summary each interval. Its own thread owns the terminal (raw mode,
//! the alternate screen) and gives it back as it was, whatever happens; q or Ctrl-C
//! stops tracing, and the report is printed once the view is gone.

mod app;
#[cfg(test)]
mod tests;

use std::{
    io::{self, IsTerminal as _},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use ratatui::{
    DefaultTerminal,
    crossterm::event::{self, Event, KeyEventKind},
};

pub use self::app::{Action, App};
use crate::{engine::EngineHandle, output::EndReason};

/// Rows per list the view asks of the engine (sorted and filtered here).
pub const ROWS: usize = 500;

/// Why the view cannot start.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Standard output is not a terminal.
    #[error(
        "the live view needs a terminal on standard output (it is redirected); drop \
         --live, or write the results with -o, --json or --html"
    )]
    NotATerminal,
    /// The terminal could not be set up.
    #[error("cannot set up the terminal for the live view: {0}")]
    Terminal(#[from] io::Error),
}

/// The running view.
pub struct Live {
    quit: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Whether the view can run here: standard output is a terminal (checked before
/// anything is launched or attached).
pub fn check() -> Result<(), LiveError> {
    if io::stdout().is_terminal() {
        Ok(())
    } else {
        Err(LiveError::NotATerminal)
    }
}

/// Starts the view on the terminal, watching `handle`'s summaries.
pub fn start(handle: EngineHandle) -> Result<Live, LiveError> {
    check()?;
    let terminal = ratatui::try_init()?;
    let quit = Arc::new(AtomicBool::new(false));
    let stop = quit.clone();
    let thread = std::thread::Builder::new()
        .name("rtm-live".into())
        .spawn(move || {
            let r = run(terminal, &handle, &stop);
            ratatui::restore();
            if let Err(e) = r {
                crate::say!("rtm-trace: the live view stopped: {e}");
            }
        })?;
    Ok(Live {
        quit,
        thread: Some(thread),
    })
}

fn run(mut terminal: DefaultTerminal, handle: &EngineHandle, quit: &AtomicBool) -> io::Result<()> {
    let mut summaries = handle.summary();
    let mut app = App::new(summaries.borrow_and_update().clone());
    while !quit.load(Ordering::Relaxed) {
        if summaries.has_changed().unwrap_or(false) {
            app.update(summaries.borrow_and_update().clone());
        }
        terminal.draw(|f| app.draw(f))?;
        // Short polls: a summary or the end of the trace is seen within 100 ms.
        if event::poll(Duration::from_millis(100))?
            && let Event::Key(k) = event::read()?
            && k.kind == KeyEventKind::Press
            && app.key(k) == Action::Quit
        {
            let _ = handle.stop(EndReason::Signal);
            break;
        }
    }
    Ok(())
}

impl Live {
    /// Closes the view and gives the terminal back.
    pub fn finish(mut self) {
        self.close();
    }

    fn close(&mut self) {
        self.quit.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.close();
    }
}
