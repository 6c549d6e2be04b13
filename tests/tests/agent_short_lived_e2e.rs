//! End-to-end: processes that live a hundred milliseconds or less, started after the
//! agent, are traced or counted as missed, never lost in silence. The agent keeps its
//! programs loaded while select rules exist (`keep_loaded`, the default), so contention
//! mode traces such a process from its exec; full mode places its probes once the
//! loader has mapped the C library (looked at 1, 2, 4, 8 ... ms after the exec), and a
//! process that ended first is counted in `rtm_targets_missed_total`. The programs'
//! own counts of their lock acquisitions are the truth the full-mode figures are held
//! to.

use std::{process::Command, time::Duration};

use rtm_tests::{
    agent::{Agent, sample, samples, wait_for},
    *,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(short_lived_processes_are_traced_from_their_exec_in_contention_mode, Root),
    e2e!(short_lived_processes_in_full_mode_are_traced_or_counted_as_missed, Root),
];

const T: Duration = Duration::from_secs(60);

/// Runs mutex_workload once to its end (2 threads, `iters` each on shared_lock, 200 us
/// holds); returns its own count of shared_lock acquisitions.
fn short_run(iters: u32) -> u64 {
    let out = run(
        Command::new(workload("mutex_workload")).args([
            "--threads",
            "2",
            "--iters",
            &iters.to_string(),
            "--hold-us",
            "200",
            "--private",
            "0",
        ]),
        T,
    );
    assert!(out.status.success());
    truths(&String::from_utf8_lossy(&out.stdout))
        .iter()
        .map(|t| t.get("shared"))
        .sum()
}

/// Waits until the in-kernel process filter is empty again: every process that went
/// in (at its exec, from the exec watcher) came out at its end, so no later process
/// given its pid is traced unasked.
fn filter_emptied(agent: &Agent) {
    let mut left = None;
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_for("the process filter empty", T, || {
            left = sample(&agent.scrape(), "rtm_bpf_map_entries{map=\"TRACED_TGIDS\"}");
            left == Some(0.0)
        })
    }));
    assert!(
        waited.is_ok(),
        "entries left in the process filter: {left:?}"
    );
}

fn missed(scrape: &str) -> f64 {
    samples(scrape, "rtm_targets_missed_total{")
        .iter()
        .map(|s| s.1)
        .sum()
}

fn short_lived_processes_are_traced_from_their_exec_in_contention_mode() {
    let dir = TempDir::new("agent-short");
    let agent = Agent::start(
        &dir,
        17540,
        "grace = 600.0\n[[agent.select]]\ncomm = \"mutex_workload\"\n",
    );
    let runs = 3;
    for _ in 0..runs {
        short_run(200);
    }
    let mut scrape = String::new();
    wait_for("the three runs attached", T, || {
        scrape = agent.scrape();
        sample(&scrape, "rtm_attached_total") == Some(runs as f64)
    });
    let sleeps: f64 = samples(
        &scrape,
        "rtm_lock_sleeps_total{target=\"mutex_workload\",container_id=\"\",mode=\"contention\",lock=\"shared_lock\"",
    )
    .iter()
    .map(|s| s.1)
    .sum();
    println!("{runs} runs of ~100 ms: {runs} attached, {sleeps} sleeps on shared_lock");
    assert!(sleeps > 0.0, "{scrape}");
    assert_eq!(missed(&scrape), 0.0, "{scrape}");
    filter_emptied(&agent);
}

fn short_lived_processes_in_full_mode_are_traced_or_counted_as_missed() {
    let dir = TempDir::new("agent-short-full");
    let agent = Agent::start(
        &dir,
        17541,
        "grace = 600.0\n[[agent.select]]\ncomm = \"mutex_workload\"\nmode = \"full\"\n",
    );
    let attached = |s: &str| sample(s, "rtm_attached_total").unwrap_or(0.0);
    let errors = |s: &str| -> f64 {
        samples(s, "rtm_attach_errors_total{")
            .iter()
            .map(|s| s.1)
            .sum()
    };
    let acquisitions = |s: &str| -> f64 {
        samples(
            s,
            "rtm_lock_acquisitions_total{target=\"mutex_workload\",container_id=\"\",mode=\"full\",lock=\"shared_lock\"",
        )
        .iter()
        .map(|s| s.1)
        .sum()
    };
    let settled = |what: &str, n: f64| -> String {
        let mut scrape = String::new();
        wait_for(what, T, || {
            scrape = agent.scrape();
            attached(&scrape) + missed(&scrape) + errors(&scrape) >= n
        });
        // The last run's records are in.
        std::thread::sleep(Duration::from_secs(2));
        agent.scrape()
    };
    // The first places the probes on the C library for every process that maps it
    // (its early calls come before them); each later one is in the filter from its
    // exec, and the probes count its calls from its first.
    short_run(200);
    let scrape = settled("the first run attached", 1.0);
    let before = acquisitions(&scrape);
    let runs = 8;
    let mut truth = 0;
    for _ in 0..runs {
        truth += short_run(200);
        std::thread::sleep(Duration::from_millis(300));
    }
    let scrape = settled("the runs attached", 1.0 + runs as f64);
    let counted = acquisitions(&scrape) - before;
    println!(
        "{runs} runs of ~100 ms: {} attached, {} missed; {counted} acquisitions of \
         shared_lock counted, {truth} made",
        attached(&scrape) - 1.0,
        missed(&scrape)
    );
    assert_eq!(
        attached(&scrape) + missed(&scrape),
        1.0 + runs as f64,
        "{scrape}"
    );
    assert!(counted <= truth as f64, "{counted} counted, {truth} made");
    assert!(
        counted >= 0.95 * truth as f64,
        "traced from their exec: {counted} counted of {truth} made"
    );

    // Runs of ~20 ms back to back: traced, or counted as missed; never lost.
    let (so_far, quick) = (attached(&scrape) + missed(&scrape), 10);
    for _ in 0..quick {
        short_run(50);
    }
    let scrape = settled("every quick run attached or missed", so_far + quick as f64);
    assert_eq!(errors(&scrape), 0.0, "{scrape}");
    let total = attached(&scrape) + missed(&scrape) - so_far;
    println!(
        "{quick} runs of ~20 ms: {total} attached or missed ({} missed in all)",
        missed(&scrape)
    );
    assert_eq!(total, quick as f64, "{scrape}");
    filter_emptied(&agent);
}
