//! End-to-end: what the agent's series mean does not depend on the mode. One program
//! traced in both modes at once (a full-mode rule beside the contention default): the
//! same lock has the same `kind` in both, its sleeps and wait time are there in both,
//! its acquisitions (exact) in full mode only, and every series says its `mode`. Also:
//! the median Prometheus reads from the sleep histogram's buckets agrees with the
//! one-shot trace's per-lock median on the same process; the monitoring mixin's
//! (deploy/mixin) recording rules, evaluated by that Prometheus, carry the agent's
//! labels; and every metric the mixin uses is one a real agent exports.

use std::{
    collections::BTreeSet,
    io::Write,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::{
    agent::{Agent, Prometheus, samples, wait_for},
    *,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(one_lock_has_one_kind_in_both_modes_and_acquisitions_only_in_full, Root),
    e2e!(the_bucket_median_agrees_with_the_one_shot_trace, Root),
];

const T: Duration = Duration::from_secs(120);

/// mutex_workload at its gate: `threads` threads, `iters` each, 200 us holds.
fn gated(threads: &str, iters: &str) -> (Proc, LineWatch) {
    let mut p = spawn(Command::new(workload("mutex_workload")).args([
        "--threads",
        threads,
        "--iters",
        iters,
        "--hold-us",
        "200",
        "--private",
        "0",
        "--wait-stdin",
        "--linger-ms",
        "6000",
    ]));
    let mut lines = LineWatch::new(p.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    (p, lines)
}

fn one_lock_has_one_kind_in_both_modes_and_acquisitions_only_in_full() {
    let dir = TempDir::new("agent-modes");
    let agent = Agent::start(
        &dir,
        17490,
        "[[agent.select]]\ncomm = \"mutex_workload\"\ncmdline = \"--threads 3\"\nmode = \"full\"\n\
         [[agent.select]]\ncomm = \"mutex_workload\"\n",
    );
    let mut apps = vec![gated("3", "100"), gated("2", "100")];
    wait_for("both traced", Duration::from_secs(30), || {
        samples(&agent.scrape(), "rtm_target_info{").len() == 2
    });
    for (p, _) in &mut apps {
        writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
    }
    for (_, lines) in &mut apps {
        lines.wait_for("truth", T);
    }
    let lock = |name: &str, mode: &str| {
        format!(
            "{name}{{target=\"mutex_workload\",container_id=\"\",mode=\"{mode}\",lock=\"shared_lock\","
        )
    };
    let mut scrape = String::new();
    wait_for(
        "300 acquisitions of shared_lock in full mode",
        Duration::from_secs(30),
        || {
            scrape = agent.scrape();
            samples(&scrape, &lock("rtm_lock_acquisitions_total", "full"))
                .first()
                .is_some_and(|s| s.1 == 300.0)
        },
    );
    // Settled: the last waits of both are in.
    std::thread::sleep(Duration::from_secs(2));
    let scrape = agent.scrape();
    let mut kinds = BTreeSet::new();
    for mode in ["full", "contention"] {
        let sleeps = samples(&scrape, &lock("rtm_lock_sleeps_total", mode));
        let waited = samples(&scrape, &lock("rtm_lock_wait_seconds_total", mode));
        println!("{mode}: sleeps {sleeps:?}; waited {waited:?}");
        assert_eq!(sleeps.len(), 1, "{mode}: {scrape}");
        assert!(sleeps[0].1 > 0.0 && waited[0].1 > 0.0, "{mode}: {scrape}");
        // A lock's sleeps are among the process's futex sleeps.
        let all = samples(
            &scrape,
            &format!(
                "rtm_futex_sleeps_total{{target=\"mutex_workload\",container_id=\"\",mode=\"{mode}\"}}"
            ),
        );
        assert!(all[0].1 >= sleeps[0].1, "{mode}: {all:?} {sleeps:?}");
        let labels = &sleeps[0].0;
        let kind = labels
            .split("kind=\"")
            .nth(1)
            .and_then(|k| k.split('"').next())
            .unwrap();
        kinds.insert(kind.to_owned());
    }
    assert_eq!(
        kinds,
        BTreeSet::from(["mutex".to_owned()]),
        "one kind in both modes"
    );
    assert!(
        samples(&scrape, "rtm_lock_acquisitions_total{")
            .iter()
            .all(|s| s.0.contains("mode=\"full\"")),
        "acquisitions outside full mode: {scrape}"
    );
    assert!(
        !scrape.contains("kind=\"futex\"") && !scrape.contains("kind=\"thread\""),
        "{scrape}"
    );
    // A join is a thread's exit in both modes.
    for (series, _) in samples(&scrape, "rtm_lock_sleeps_total{") {
        assert_eq!(
            series.contains("kind=\"join\""),
            series.contains("lock=\"thread exit\""),
            "{series}"
        );
    }
    // Every metric the mixin's rules and dashboard use is one this agent exports.
    // Its samples' names, and the families it declares (some, like attach errors,
    // have no sample until something happens).
    let mut exported: BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    for l in scrape.lines() {
        if let Some(name) = l.strip_prefix("# TYPE ").and_then(|t| t.split(' ').next()) {
            exported.insert(name.to_owned());
            exported.insert(format!("{name}_total"));
        }
    }
    let missing: Vec<String> = rtm_tests::mixin::metric_names()
        .into_iter()
        .filter(|n| !exported.contains(n) && !rtm_tests::mixin::optional(n))
        .collect();
    assert!(
        missing.is_empty(),
        "the mixin uses metrics the agent does not export: {missing:?}"
    );
    for (p, _) in apps {
        assert!(p.wait_output(T).status.success());
    }
}

/// The median `histogram_quantile` reads from the exported buckets (Prometheus's own
/// linear interpolation) is within 25% of the one-shot trace's median for the lock, on
/// the same process traced by both at once (buckets a power of ten apart read a 190 us
/// median as 399 us).
fn the_bucket_median_agrees_with_the_one_shot_trace() {
    let dir = TempDir::new("agent-quantile");
    let agent = Agent::start(&dir, 17491, "[[agent.select]]\ncomm = \"mutex_workload\"\n");
    // The mixin's rules evaluated on what it scrapes.
    let prom = Prometheus::with_rules(
        &dir,
        19491,
        &agent.addr,
        Some(&rtm_tests::mixin::file("rules.yml")),
    );
    let (mut app, mut lines) = gated("4", "400");
    let pid = app.pid().to_string();
    wait_for("the target in Prometheus", Duration::from_secs(30), || {
        prom.query("rtm_target_processes").len() == 1
    });
    let json = dir.join("oneshot.json");
    let oneshot = spawn(
        Command::new(rtm_bin())
            .args(["--pid", &pid, "--json"])
            .arg(&json),
    );
    // The one-shot's probes are in once its first report line is out (it prints as it
    // attaches); give it the moment a load takes.
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(3));
    writeln!(app.child.stdin.as_mut().unwrap(), "go").unwrap();
    lines.wait_for("truth", T);
    let q = "histogram_quantile(0.5, sum by (le) (rtm_futex_sleep_seconds_bucket{target=\"mutex_workload\"}))";
    let count = "rtm_futex_sleep_seconds_count{target=\"mutex_workload\"}";
    let mut last = -1.0;
    wait_for("the sleeps to settle", Duration::from_secs(20), || {
        let v = prom.query(count).first().map_or(0.0, |r| r.1);
        let settled = v > 0.0 && v == last;
        last = v;
        if !settled {
            std::thread::sleep(Duration::from_millis(1200));
        }
        settled
    });
    let p50 = prom.query(q)[0].1;
    // The mixin's recording rules, on real series: the lock's rate is recorded with
    // its labels (its value may be 0: the lock's series began with its first waits),
    // and the target's median from the buckets (over 5 minutes: the same sleeps).
    let recorded = |q: &str| {
        let mut got = Vec::new();
        wait_for(q, Duration::from_secs(10), || {
            got = prom.query(q);
            !got.is_empty()
        });
        println!("{q}: {got:?}");
        got
    };
    let lock = recorded(
        "lock:rtm_lock_wait_seconds:rate5m{target=\"mutex_workload\",lock=\"shared_lock\"}",
    );
    assert_eq!(lock[0].0["kind"], "mutex", "{lock:?}");
    assert_eq!(lock[0].0["mode"], "contention", "{lock:?}");
    let median = recorded("target:rtm_futex_sleep_seconds:p50_5m{target=\"mutex_workload\"}");
    within(
        median[0].1 * 1e6,
        p50 * 1e6,
        0.25,
        "the mixin's recorded median vs the query's (us)",
    );
    let out = oneshot.wait_output(T);
    assert!(out.status.success(), "{out:?} after {:?}", start.elapsed());
    assert!(app.wait_output(T).status.success());
    let doc = read_json(&json);
    let lock = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "shared_lock")
        .unwrap_or_else(|| panic!("no shared_lock in {doc}"));
    let truth = lock["wait"]["p50_ns"].as_f64().unwrap() / 1e9;
    println!(
        "median sleep: histogram_quantile over the agent's buckets {:.1} us; one-shot trace's shared_lock median {:.1} us ({} sleeps in the histogram)",
        p50 * 1e6,
        truth * 1e6,
        last
    );
    within(
        p50 * 1e6,
        truth * 1e6,
        0.25,
        "bucket median vs the one-shot's (us)",
    );
}
