//! Driving a running engine from anywhere: commands through a channel, the summary
//! through a watch.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::{EngineError, Summary, Target};
use crate::output::{EndReason, TargetInfo};

/// What a handle asks of the running engine.
pub(super) enum Command {
    Add(
        Vec<Target>,
        oneshot::Sender<Result<Vec<TargetInfo>, EngineError>>,
    ),
    Remove(u32),
    Forget(Vec<super::ProcKey>),
    Stop(EndReason),
    /// Into the in-kernel filter at once (true), or out of it again (false): a process
    /// caught at its exec whose attach comes later.
    Admit(u32, bool, Option<u64>),
    Profile(
        super::ProfileAsk,
        oneshot::Sender<Result<Option<super::ProfileData>, super::ProfileRefused>>,
    ),
}

/// Drives a running engine from anywhere (another task or thread): add and remove
/// targets, stop it, watch its summary.
#[derive(Clone)]
pub struct EngineHandle {
    pub(super) commands: mpsc::UnboundedSender<Command>,
    pub(super) summary: watch::Receiver<Arc<Summary>>,
}

impl EngineHandle {
    /// Starts tracing `targets`; resolves once they are attached.
    pub async fn add(&self, targets: Vec<Target>) -> Result<Vec<TargetInfo>, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Add(targets, tx))
            .map_err(|_| EngineError::Stopped)?;
        rx.await.map_err(|_| EngineError::Stopped)?
    }

    /// Stops tracing `pid` (and the processes followed from it).
    pub fn remove(&self, pid: u32) -> Result<(), EngineError> {
        self.commands
            .send(Command::Remove(pid))
            .map_err(|_| EngineError::Stopped)
    }

    /// Forgets processes that no longer run (see [`super::Engine::forget`]).
    pub fn forget(&self, keys: Vec<super::ProcKey>) -> Result<(), EngineError> {
        self.commands
            .send(Command::Forget(keys))
            .map_err(|_| EngineError::Stopped)
    }

    /// Ends [`Engine::run`] with `reason`.
    pub fn stop(&self, reason: EndReason) -> Result<(), EngineError> {
        self.commands
            .send(Command::Stop(reason))
            .map_err(|_| EngineError::Stopped)
    }

    /// Answers a profile request (see [`super::ProfileAsk`]); `Ok(None)` for a window
    /// opened; Err(None): the engine is gone.
    pub async fn profile(
        &self,
        ask: super::ProfileAsk,
    ) -> Result<Option<super::ProfileData>, Option<super::ProfileRefused>> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Profile(ask, tx))
            .map_err(|_| None)?;
        rx.await.map_err(|_| None)?.map_err(Some)
    }

    /// Puts `pid` (which started at `start`, when known) into the in-kernel filter now
    /// and makes it a target, before its attach: a process caught at its exec whose
    /// library probes wait for the loader (probes already placed for every process
    /// mapping its library count its calls from the first).
    pub fn admit(&self, pid: u32, start: Option<u64>) {
        let _ = self.commands.send(Command::Admit(pid, true, start));
    }

    /// Takes an admitted `pid` out again when it is not traced after all.
    pub fn unadmit(&self, pid: u32) {
        let _ = self.commands.send(Command::Admit(pid, false, None));
    }

    /// Ends profile window `id` without waiting for it (its client went away).
    pub fn close_window(&self, id: u64) {
        let (tx, _) = oneshot::channel();
        let _ = self
            .commands
            .send(Command::Profile(super::ProfileAsk::Close(id), tx));
    }

    /// The summary published on every tick.
    pub fn summary(&self) -> watch::Receiver<Arc<Summary>> {
        self.summary.clone()
    }
}
