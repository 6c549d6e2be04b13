//! What-if estimates checked against the real change: a program with knobs (whatif.c:
//! threads, rounds, the hold, the work outside the lock) and the demo (its audit hold)
//! are traced in full mode, the first finding's estimate for a halved hold is read from
//! the JSON, then the program is run untraced with the hold as it was and halved; the
//! estimate must be within 20% of the speedup the program measures with its own clock.
//! Traced and untraced runs alternate (traced, as is, halved; three times) and the
//! medians are compared, so a burst of load on the machine decides neither side.
//!
//! When other processes keep the CPUs busy (a CPU hog, a build), the time outside the
//! lock is mostly queueing for a CPU, which the model holds fixed: the tool then makes no
//! estimate and says why (`what_if_withheld`), and a traced run checks that instead,
//! against its own `cpu` finding, printing the speedup the change really gave.

use std::{process::Command, time::Duration};

use rtm_tests::{TempDir, Value, read_json, rtm_bin, run, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(a_lock_bound_program_nearly_doubles_as_predicted, Root),
    e2e!(a_program_busy_outside_its_lock_gains_about_nothing_as_predicted, Root),
    e2e!(a_lock_near_saturation_gains_what_the_queue_model_predicts, Root),
    e2e!(the_demo_predicts_what_halving_its_audit_hold_buys, Root),
];

/// Rounds of (traced, as is, halved).
const ROUNDS: usize = 3;
/// How far the estimate may be from the measured speedup.
const WITHIN: f64 = 0.20;

/// The elapsed time the program prints: `elapsed_ns=N` (whatif) or `in X s` (demo).
fn elapsed_s(program: &str, args: &[&str]) -> f64 {
    let out = run(
        Command::new(workload(program)).args(args),
        Duration::from_secs(120),
    );
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    if let Some(v) = text.split("elapsed_ns=").nth(1) {
        let n: f64 = v.split_whitespace().next().unwrap().parse().unwrap();
        return n / 1e9;
    }
    let secs = text
        .rsplit(" in ")
        .next()
        .and_then(|t| t.trim().strip_suffix(" s"))
        .unwrap_or_else(|| panic!("no elapsed time in {text:?}"));
    secs.parse().unwrap()
}

/// The speedup the program measures when `halved` replaces `as_is`.
fn measured_speedup(program: &str, as_is: &[&str], halved: &[&str]) -> f64 {
    elapsed_s(program, as_is) / elapsed_s(program, halved)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n.is_multiple_of(2) {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    } else {
        v[n / 2]
    }
}

/// The machine's busy CPU time so far, seconds (/proc/stat).
fn busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").expect("/proc/stat");
    let ticks: Vec<f64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .expect("cpu line")
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle and iowait.
    let busy = ticks[..8].iter().sum::<f64>() - ticks[3] - ticks[4];
    // SAFETY: sysconf has no preconditions.
    busy / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// Runs `cmd` (its output to files in `dir`) to its exit; returns whether it succeeded,
/// its stderr and the CPU seconds it and its children (the traced workload) used, from
/// wait4: this process's other children (tests running beside this one) not counted.
fn run_counting_cpu(dir: &TempDir, cmd: &mut Command) -> (bool, String, f64) {
    struct Reap(u32, bool);
    impl Drop for Reap {
        fn drop(&mut self) {
            if !self.1 {
                // SAFETY: our own child, not reaped yet, so the pid is still its.
                unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
            }
        }
    }
    let file = |name: &str| std::fs::File::create(dir.join(name)).expect("output file");
    #[expect(
        clippy::zombie_processes,
        reason = "reaped by wait4 below, which also returns what it used"
    )]
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(file("out.txt"))
        .stderr(file("err.txt"))
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    let mut reap = Reap(child.id(), false);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    // SAFETY: a zeroed rusage is a valid value to be written over.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut status = 0;
    loop {
        // SAFETY: wait4 writes the status and the usage it is given.
        let r = unsafe { libc::wait4(reap.0 as i32, &mut status, libc::WNOHANG, &mut usage) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r > 0 {
            reap.1 = true;
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{cmd:?} did not exit in 120 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let stderr = std::fs::read_to_string(dir.join("err.txt")).unwrap_or_default();
    (ok, stderr, t(usage.ru_utime) + t(usage.ru_stime))
}

/// Traces `program args` in full mode; returns the JSON document and the share of the
/// machine's busy CPU time during it that was other processes', as this test measured.
fn traced(dir: &TempDir, program: &str, args: &[&str]) -> (Value, f64) {
    let json = dir.join("t.json");
    let busy0 = busy_seconds();
    let (ok, stderr, ours) = run_counting_cpu(
        dir,
        Command::new(rtm_bin())
            .args(["-m", "full", "-o"])
            .arg(dir.join("r.txt"))
            .arg("--json")
            .arg(&json)
            .arg("--")
            .arg(workload(program))
            .args(args),
    );
    let busy = busy_seconds() - busy0;
    assert!(ok, "{stderr}");
    let others = ((busy - ours) / busy.max(1e-9)).clamp(0.0, 1.0);
    println!(
        "traced run: {busy:.2} CPU s busy on the machine, {ours:.2} s of it the tracer's and \
         its workload's, {:.1}% other processes'",
        others * 100.0
    );
    println!(
        "{}",
        std::fs::read_to_string(dir.join("r.txt"))
            .unwrap()
            .lines()
            .skip_while(|l| !l.starts_with("Findings"))
            .take_while(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    );
    (read_json(&json), others)
}

/// What a traced run said about the change.
enum Said {
    /// The first finding's what-if: (estimate, low, high).
    Estimate(f64, f64, f64),
    /// No estimate, and why: other processes kept the CPUs busy.
    Withheld(String),
}

/// What the traced run `doc` said, and its first finding. `others`: the share of the
/// machine's busy CPU time during it that this test measured as other processes'.
fn said(doc: &Value, others: f64) -> (Said, Value) {
    let findings = doc["findings"].as_array().expect("findings");
    let first = findings[0].clone();
    if let Some(why) = first["what_if_withheld"].as_str() {
        // Only when the run's own system statistics saw the CPUs busy with other work;
        // and then no finding shows a number.
        let cpu = findings
            .iter()
            .find(|f| f["kind"] == "cpu")
            .unwrap_or_else(|| panic!("estimate withheld without a cpu finding: {first:#}"));
        let title = cpu["title"].as_str().unwrap();
        assert!(title.contains("mostly by other processes"), "{cpu:#}");
        assert!(
            findings.iter().all(|f| f["what_if"].is_null()),
            "a what-if beside a withheld one: {findings:#?}"
        );
        assert!(why.starts_with("not estimated: other processes"), "{why}");
        // And the test's own measure agrees (the tool withholds below half).
        assert!(
            others >= 0.4,
            "withheld, but other processes had only {:.1}% of the busy CPU time: {why}",
            others * 100.0
        );
        return (Said::Withheld(format!("{why} [{title}]")), first);
    }
    let w = &first["what_if"];
    assert!(w.is_object(), "no what-if on the first finding: {first:#}");
    let f = |k: &str| w[k].as_f64().unwrap();
    assert!(f("low") <= f("speedup") && f("speedup") <= f("high"), "{w}");
    (Said::Estimate(f("speedup"), f("low"), f("high")), first)
}

/// Traces `program as_is` and runs it as is and halved, [`ROUNDS`] times; checks the
/// median estimate against the median measured speedup of the same rounds. Returns them
/// and the first finding of the last traced run that made an estimate, or None when
/// fewer than two runs made one (other processes kept the CPUs busy: each such run was
/// checked to say so).
fn check(name: &str, program: &str, as_is: &[&str], halved: &[&str]) -> Option<(f64, f64, Value)> {
    let dir = TempDir::new(name);
    let (mut predicted, mut measured, mut first) = (Vec::new(), Vec::new(), Value::Null);
    let mut withheld = Vec::new();
    for _ in 0..ROUNDS {
        let (doc, others) = traced(&dir, program, as_is);
        let (said, f) = said(&doc, others);
        let m = measured_speedup(program, as_is, halved);
        match said {
            Said::Estimate(p, low, high) => {
                println!("{name}: predicted x{p:.3} [{low:.3}-{high:.3}], measured x{m:.3}");
                predicted.push(p);
                measured.push(m);
                first = f;
            }
            Said::Withheld(why) => {
                println!("{name}: no estimate ({why}), measured x{m:.3}");
                withheld.push(m);
            }
        }
    }
    if predicted.len() < 2 {
        println!(
            "{name}: {} of {ROUNDS} traced runs withheld the estimate, as they must with the \
             CPUs busy with other work; halving the hold gave x{:.3} ({withheld:.3?})",
            withheld.len(),
            median(withheld.clone())
        );
        assert!(withheld.len() + predicted.len() == ROUNDS);
        return None;
    }
    let (p, m) = (median(predicted.clone()), median(measured.clone()));
    println!(
        "{name}: median predicted x{p:.3}, median measured x{m:.3} ({} of {ROUNDS} runs)",
        predicted.len()
    );
    assert!(
        (p / m - 1.0).abs() <= WITHIN,
        "{name}: predicted x{p:.3} ({predicted:.3?}) but halving the hold gave x{m:.3} \
         ({measured:.3?}): {first:#}"
    );
    Some((p, m, first))
}

fn a_lock_bound_program_nearly_doubles_as_predicted() {
    // 4 threads want a lock held 300 us after 300 us outside it (sleeping, as if on
    // I/O): the lock is busy all the time and sets the pace.
    let Some((predicted, measured, first)) = check(
        "whatif-lock-bound",
        "whatif",
        &["4", "500", "300", "300", "sleep"],
        &["4", "500", "150", "300", "sleep"],
    ) else {
        return;
    };
    assert_eq!(first["kind"], "lock", "{first:#}");
    assert!(measured > 1.4 && predicted > 1.4, "{predicted} {measured}");
}

fn a_program_busy_outside_its_lock_gains_about_nothing_as_predicted() {
    // 2 threads computing 2 ms between 20 us holds: no lock limits it, and the estimate
    // (on the "no lock limits" finding) says about 1.0x.
    let Some((predicted, _, first)) = check(
        "whatif-cpu-bound",
        "whatif",
        &["2", "300", "20", "2000", "spin"],
        &["2", "300", "10", "2000", "spin"],
    ) else {
        return;
    };
    assert_eq!(first["kind"], "none", "{first:#}");
    assert!((0.97..1.05).contains(&predicted), "{predicted}");
}

fn a_lock_near_saturation_gains_what_the_queue_model_predicts() {
    // 4 threads, 200 us holds after 500 us outside: the lock is busy most of the time,
    // and how long the queues are decides the gain.
    check(
        "whatif-mixed",
        "whatif",
        &["4", "500", "200", "500", "sleep"],
        &["4", "500", "100", "500", "sleep"],
    );
}

fn the_demo_predicts_what_halving_its_audit_hold_buys() {
    let Some((_, _, first)) = check(
        "whatif-demo",
        "demo",
        &["--audit-us", "2000"],
        &["--audit-us", "1000"],
    ) else {
        return;
    };
    assert!(
        first["what_if"]["change"]
            .as_str()
            .unwrap()
            .starts_with("the hold of audit_lock (locked at demo.c:"),
        "{first:#}"
    );
}
