//! Timed functions (`--func`): per process, thread and function, the calls and the
//! distribution of their inclusive durations (a recursive call's own, and its outer
//! calls' including it), and the calls still running when asked. Pure: records in,
//! views out.

use std::collections::HashMap;

use rtm_common::{FuncCall, FuncEvent};
use serde::Serialize;

use super::view::{FuncCounters, FunctionRow, FunctionThreadRow, FunctionsView};
use crate::{
    config::DEFAULT_MAX_FUNC_ROWS,
    model::dist::{Dist, HistogramBudget},
};

/// A function the probes time; its index in [`FuncModel::functions`] is its probes'
/// cookie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimedFunction {
    /// Its symbol.
    pub name: String,
    /// The file that defines it, as the target names it.
    pub module: String,
    /// Its address in that file (ELF virtual address).
    pub address: u64,
    /// Where the probes went, bytes past its first instruction (0: at its entry).
    pub probe_offset: u64,
}

/// One (process, thread, function).
#[derive(Debug, Clone, Default)]
struct Row {
    /// Every call's inclusive duration.
    time: Dist,
    /// Of those, calls made while an outer call of the same function was running on the
    /// thread (recursion).
    recursive: u64,
    /// Total duration of the outermost calls only (recursion counted once).
    outer_ns: u64,
}

/// A call still running: its thread, function, and start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningCall {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Function index.
    pub function: u32,
    /// When it entered (CLOCK_MONOTONIC ns).
    pub start_ns: u64,
}

/// The timed calls seen so far.
#[derive(Debug, Clone)]
pub struct FuncModel {
    functions: Vec<TimedFunction>,
    rows: HashMap<(u32, u32, u32), Row>,
    max_rows: usize,
    budget: HistogramBudget,
    /// Calls of rows past the cap: counted, not kept.
    over_cap: u64,
    /// Records naming no known function.
    unknown: u64,
}

impl Default for FuncModel {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FUNC_ROWS)
    }
}

impl FuncModel {
    /// An empty model keeping at most `max_rows` (process, thread, function) rows.
    pub fn new(max_rows: usize) -> Self {
        Self {
            functions: Vec::new(),
            rows: HashMap::new(),
            max_rows,
            budget: HistogramBudget::new(max_rows),
            over_cap: 0,
            unknown: 0,
        }
    }

    /// The functions the probes time, by index.
    pub fn set_functions(&mut self, functions: Vec<TimedFunction>) {
        self.functions = functions;
    }

    /// The functions, by index.
    pub fn functions(&self) -> &[TimedFunction] {
        &self.functions
    }

    /// Whether anything is timed.
    pub fn is_active(&self) -> bool {
        !self.functions.is_empty()
    }

    /// Counts a thread's finished calls.
    pub fn apply(&mut self, ev: &FuncEvent) {
        for c in ev.calls() {
            self.call(ev.header.pid, ev.header.tid, c);
        }
    }

    /// Counts one finished call of thread `tid` of `pid`.
    pub fn call(&mut self, pid: u32, tid: u32, c: &FuncCall) {
        if c.function as usize >= self.functions.len() {
            self.unknown += 1;
            return;
        }
        let key = (pid, tid, c.function);
        let full = self.rows.len() >= self.max_rows;
        let row = match self.rows.get_mut(&key) {
            Some(r) => r,
            None if full => {
                self.over_cap += 1;
                return;
            }
            None => self.rows.entry(key).or_default(),
        };
        let ns = c.end_ns.saturating_sub(c.start_ns);
        row.time.record(ns, &mut self.budget);
        if c.recursion > 0 {
            row.recursive += 1;
        } else {
            row.outer_ns = row.outer_ns.saturating_add(ns);
        }
    }

    /// Forgets the processes `pids` (exited, in a daemon).
    pub fn forget(&mut self, pids: &std::collections::HashSet<u32>) {
        self.rows.retain(|k, _| !pids.contains(&k.0));
    }

    /// The view: per function and per thread, with `running` (the calls in flight now)
    /// counted as running at `now_ns`; `thread_name` names threads.
    pub fn view(
        &self,
        running: &[RunningCall],
        now_ns: u64,
        thread_name: &mut dyn FnMut(u32, u32) -> Option<String>,
    ) -> FunctionsView {
        let mut threads: Vec<FunctionThreadRow> = Vec::with_capacity(self.rows.len());
        let mut per_function: Vec<(Dist, u64, u64, u32, u64, u64)> =
            vec![Default::default(); self.functions.len()];
        let mut running_of: HashMap<(u32, u32, u32), (u64, u64)> = HashMap::new();
        for r in running {
            if r.function as usize >= self.functions.len() {
                continue;
            }
            let e = running_of.entry((r.pid, r.tid, r.function)).or_default();
            e.0 += 1;
            e.1 = e.1.max(now_ns.saturating_sub(r.start_ns));
        }
        let mut keys: Vec<_> = self.rows.keys().chain(running_of.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let (pid, tid, f) = key;
            let row = self.rows.get(&key).cloned().unwrap_or_default();
            let (running, running_longest_ns) = running_of.get(&key).copied().unwrap_or_default();
            let pf = &mut per_function[f as usize];
            pf.0.merge(&row.time);
            pf.1 += row.recursive;
            pf.2 = pf.2.saturating_add(row.outer_ns);
            pf.3 += 1;
            pf.4 += running;
            pf.5 = pf.5.max(running_longest_ns);
            threads.push(FunctionThreadRow {
                function: f,
                name: self.functions[f as usize].name.clone(),
                pid,
                tid,
                thread: thread_name(pid, tid),
                time: row.time.summary(),
                recursive_calls: row.recursive,
                outer_ns: row.outer_ns,
                running,
                running_longest_ns,
            });
        }
        threads.sort_by(|a, b| {
            b.outer_ns
                .cmp(&a.outer_ns)
                .then(b.time.count.cmp(&a.time.count))
                .then((a.function, a.pid, a.tid).cmp(&(b.function, b.pid, b.tid)))
        });
        let mut functions: Vec<FunctionRow> = self
            .functions
            .iter()
            .zip(per_function)
            .enumerate()
            .map(
                |(i, (f, (time, recursive, outer_ns, n, running, longest)))| FunctionRow {
                    index: i as u32,
                    name: f.name.clone(),
                    module: f.module.clone(),
                    address: f.address,
                    probe_offset: f.probe_offset,
                    threads: n,
                    time: time.summary(),
                    recursive_calls: recursive,
                    outer_ns,
                    running,
                    running_longest_ns: longest,
                },
            )
            .collect();
        functions.sort_by(|a, b| b.outer_ns.cmp(&a.outer_ns).then(a.index.cmp(&b.index)));
        FunctionsView {
            functions,
            threads,
            counters: FuncCounters {
                rows_over_cap: self.over_cap,
                unknown_function: self.unknown,
                histograms_refused: self.budget.refused,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use rtm_common::{EventHeader, EventKind};

    use super::*;

    fn f(name: &str) -> TimedFunction {
        TimedFunction {
            name: name.into(),
            module: "/bin/app".into(),
            address: 0x1000,
            probe_offset: 0,
        }
    }

    /// A record of one call (as a thread's exit would send it).
    fn call(tid: u32, function: u32, start: u64, end: u64, recursion: u16) -> FuncEvent {
        let mut calls = [FuncCall::default(); rtm_common::FUNC_BATCH];
        calls[0] = FuncCall {
            start_ns: start,
            end_ns: end,
            function,
            depth: recursion,
            recursion,
        };
        FuncEvent {
            header: EventHeader {
                kind: EventKind::Func as u32,
                cpu: 0,
                ts_ns: end,
                pid: 10,
                tid,
            },
            count: 1,
            pad: 0,
            calls,
        }
    }

    /// A batch counts each of its calls, and only those `count` says it holds.
    #[test]
    fn a_record_counts_each_call_it_holds() {
        let mut m = FuncModel::new(16);
        m.set_functions(vec![f("work")]);
        let mut ev = call(11, 0, 0, 1_000, 0);
        for (i, c) in ev.calls.iter_mut().enumerate() {
            c.start_ns = i as u64 * 10;
            c.end_ns = i as u64 * 10 + 5;
        }
        ev.count = 3;
        m.apply(&ev);
        let v = m.view(&[], 100, &mut |_, _| None);
        assert_eq!(v.threads[0].time.count, 3);
        ev.count = 99;
        m.apply(&ev);
        let v = m.view(&[], 100, &mut |_, _| None);
        assert_eq!(v.threads[0].time.count, 3 + rtm_common::FUNC_BATCH as u64);
    }

    #[test]
    fn counts_per_thread_and_function_with_recursion_once() {
        let mut m = FuncModel::new(16);
        m.set_functions(vec![f("work"), f("fib")]);
        m.apply(&call(11, 0, 0, 1_000, 0));
        m.apply(&call(11, 0, 2_000, 4_000, 0));
        m.apply(&call(12, 0, 0, 10_000, 0));
        // fib(2) -> fib(1): the inner returns first.
        m.apply(&call(11, 1, 100, 200, 1));
        m.apply(&call(11, 1, 50, 300, 0));
        m.apply(&call(11, 9, 0, 1, 0));
        let v = m.view(
            &[RunningCall {
                pid: 10,
                tid: 13,
                function: 0,
                start_ns: 5_000,
            }],
            8_000,
            &mut |_, t| Some(format!("t{t}")),
        );
        let work = v.functions.iter().find(|r| r.name == "work").unwrap();
        assert_eq!(
            (
                work.time.count,
                work.time.total_ns,
                work.threads,
                work.running
            ),
            (3, 13_000, 3, 1)
        );
        assert_eq!(work.running_longest_ns, 3_000);
        let fib = v.functions.iter().find(|r| r.name == "fib").unwrap();
        assert_eq!(
            (fib.time.count, fib.recursive_calls, fib.outer_ns),
            (2, 1, 250)
        );
        let t11 = v
            .threads
            .iter()
            .find(|r| r.tid == 11 && r.function == 0)
            .unwrap();
        assert_eq!((t11.time.count, t11.time.max_ns), (2, Some(2_000)));
        assert_eq!(t11.thread.as_deref(), Some("t11"));
        assert_eq!(v.counters.unknown_function, 1);
    }

    #[test]
    fn rows_past_the_cap_are_counted_not_kept() {
        let mut m = FuncModel::new(2);
        m.set_functions(vec![f("work")]);
        for tid in 0..5 {
            m.apply(&call(tid, 0, 0, 10, 0));
        }
        m.apply(&call(0, 0, 0, 10, 0));
        let v = m.view(&[], 0, &mut |_, _| None);
        assert_eq!(v.threads.len(), 2);
        assert_eq!(v.counters.rows_over_cap, 3);
        assert_eq!(v.functions[0].time.count, 3);
    }
}
