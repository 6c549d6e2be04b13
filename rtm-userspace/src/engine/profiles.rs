//! Contention profiles while tracing (the agent's `/debug/pprof/contention`): the
//! waits' stacks counted since the trace began, or over a window of time opened on
//! request and closed when it is over, named as the final report names them.

use std::{cell::RefCell, collections::HashMap};

use rtm_common::Primitive;

use super::Engine;
use crate::model::{
    stacks::{MAX_STACK_ROWS, MAX_WINDOWS, StackTable, StacksView},
    wait_kind::WaitKind,
};

/// What a profile request asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileAsk {
    /// The waits since the trace began (of the processes still remembered).
    SinceStart,
    /// Start counting window `id` now.
    Open(u64),
    /// End window `id`: its waits.
    Close(u64),
}

/// A profile's rows, named, and what each word's waits are for.
#[derive(Debug, Default)]
pub struct ProfileData {
    /// The rows, most wait first (at most `MAX_STACK_ROWS`, the rest summed).
    pub view: StacksView,
    /// Each row's word (pid, address): what its waits are for, where its name says.
    pub kinds: HashMap<(u32, u64), WaitKind>,
}

/// Why a profile cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileRefused {
    /// Stacks are not taken (`[stacks] enabled = false` or a rate of 0).
    #[error("call stacks are off in this trace's config ([stacks] enabled = false or rate = 0)")]
    StacksOff,
    /// As many windows are open as may be.
    #[error("{MAX_WINDOWS} profiles are being taken already; try again when one is done")]
    Busy,
    /// No such window (the engine restarted, or it was closed).
    #[error("the profile's window is not open")]
    NoWindow,
}

impl Engine {
    /// Answers a profile request: `Ok(None)` for a window opened.
    pub(super) fn profile(
        &mut self,
        ask: ProfileAsk,
    ) -> Result<Option<ProfileData>, ProfileRefused> {
        let stacks = &self.config.stacks;
        if !stacks.enabled || stacks.rate == crate::config::StackRate::PerSecond(0) {
            return Err(ProfileRefused::StacksOff);
        }
        match ask {
            ProfileAsk::Open(id) => {
                if self.state.stacks.open_window(id) {
                    Ok(None)
                } else {
                    Err(ProfileRefused::Busy)
                }
            }
            ProfileAsk::Close(id) => {
                self.state.take_answers();
                let window = self
                    .state
                    .stacks
                    .close_window(id)
                    .ok_or(ProfileRefused::NoWindow)?;
                Ok(Some(self.name_rows(Some(&window))))
            }
            ProfileAsk::SinceStart => {
                self.state.take_answers();
                Ok(Some(self.name_rows(None)))
            }
        }
    }

    /// The named rows of `window`, or of the whole trace's table.
    fn name_rows(&mut self, window: Option<&StackTable>) -> ProfileData {
        let state = &mut self.state;
        let table = window.unwrap_or(&state.stacks);
        let objects = RefCell::new(&mut state.namer);
        let code = &mut state.code;
        let view = StacksView::build(
            table,
            MAX_STACK_ROWS,
            &mut |pid, addr| objects.borrow_mut().name(pid, addr, Primitive::Futex),
            &mut |pid, addr| code.name(&mut objects.borrow_mut(), pid, addr),
            &mut |pid, addr| objects.borrow_mut().locate(pid, addr).map(|l| l.file.path),
        );
        let kinds = view
            .rows
            .iter()
            .filter_map(|r| {
                let kind = WaitKind::of_name(r.object_name.as_deref()?)?;
                Some(((r.pid, r.object), kind))
            })
            .collect();
        ProfileData { view, kinds }
    }
}
