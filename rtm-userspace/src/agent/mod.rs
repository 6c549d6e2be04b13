//! `rtm-trace agent`: the fleet front end of the engine. A long-running daemon that
//! finds the processes its config selects (a /proc scan at start and every
//! `discovery_interval`, and at once on the exec events of the kernel's process
//! connector), traces them in contention mode (their forks followed from birth), and
//! serves their metrics and contention profiles over HTTP for Prometheus, Parca or
//! Pyroscope. With `keep_loaded` (the default) the engines load their programs at
//! start while select rules exist, and a process that execs is put into the in-kernel
//! filter from the exec watcher's thread, so one that lives milliseconds is traced from
//! its exec; otherwise the programs load with the first target and go `grace` after the
//! last. An exited process's series stay for `grace`, then the engine forgets it, so
//! memory does not grow with churn.

pub(crate) mod cgroup;
pub(crate) mod discovery;
pub(crate) mod exec_watch;
pub(crate) mod exposition;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod proc_events;
pub(crate) mod profiles;
pub(crate) mod top_n;
pub(crate) mod web;

mod run;
mod targets;

pub use run::run;
