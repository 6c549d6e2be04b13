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

    /// The summary published on every tick.
    pub fn summary(&self) -> watch::Receiver<Arc<Summary>> {
        self.summary.clone()
    }
}
