//! `rtm-trace agent`: the fleet front end of the engine. A long-running daemon that
//! finds the processes its config selects (a /proc scan at start and every
//! `discovery_interval`, and at once on the exec events of the kernel's process
//! connector), traces them in contention mode (their forks followed from birth), and
//! serves their metrics over HTTP for Prometheus. Nothing is attached while nothing
//! matches: the engine loads its programs with the first target and releases them
//! `grace` after the last is gone. An exited process's series stay for `grace`, then
//! the engine forgets it, so memory does not grow with churn.

pub mod cgroup;
pub mod discovery;
pub mod exposition;
pub mod http;
pub mod metrics;
pub mod proc_events;
pub mod profiles;
pub mod top;
pub mod web;

mod run;

pub use run::run;
