//! The timed-functions section of the document: what `--json` writes under
//! `functions`, read back by every output.

use serde::{Deserialize, Serialize};

use crate::model::dist::DistSummary;

/// Timed functions, for the outputs (and read back from a saved trace).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FunctionsView {
    /// One per function probed, most time in outermost calls first.
    pub functions: Vec<FunctionRow>,
    /// One per (process, thread, function) with calls, most time first.
    pub threads: Vec<FunctionThreadRow>,
    /// What was not counted.
    pub counters: FuncCounters,
}

/// A function over every thread.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FunctionRow {
    /// Its index (the probes' cookie).
    pub index: u32,
    /// Its symbol.
    pub name: String,
    /// The file that defines it.
    pub module: String,
    /// Its address in the file.
    pub address: u64,
    /// Where the probes went past its entry.
    pub probe_offset: u64,
    /// Threads that called it (or were in it at the end).
    pub threads: u32,
    /// Every returned call's inclusive duration.
    pub time: DistSummary,
    /// Calls made inside a running call of the same function (recursion).
    pub recursive_calls: u64,
    /// Total duration of the outermost calls (recursion counted once).
    pub outer_ns: u64,
    /// Calls still running at the end.
    pub running: u64,
    /// How long the longest of those had run.
    pub running_longest_ns: u64,
}

/// A function on one thread.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FunctionThreadRow {
    /// The function's index.
    pub function: u32,
    /// Its symbol.
    pub name: String,
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// The thread's name, when known.
    pub thread: Option<String>,
    /// Every returned call's inclusive duration.
    pub time: DistSummary,
    /// Calls made inside a running call of the same function.
    pub recursive_calls: u64,
    /// Total duration of the outermost calls.
    pub outer_ns: u64,
    /// Calls still running at the end.
    pub running: u64,
    /// How long the longest of those had run.
    pub running_longest_ns: u64,
}

/// What the function timing could not count.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct FuncCounters {
    /// Calls of (process, thread, function) rows past the cap.
    pub rows_over_cap: u64,
    /// Records naming a function index that is not in the table.
    pub unknown_function: u64,
    /// Rows without percentiles (histogram budget spent).
    pub histograms_refused: u64,
}
