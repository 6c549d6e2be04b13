//! End-to-end: contention mode as it runs in production. Waits are summed in the kernel,
//! begin at their sleep (no program on system calls) and have their stacks sampled;
//! the counts must still be the kernel's own, which bpftrace counts on the same process
//! at the same time, and the sampled stacks must stand for the waits they were chosen
//! among.

use std::{
    collections::HashMap,
    io::Write,
    process::{Command, Stdio},
    time::Duration,
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(summed_waits_are_the_kernels_futex_waits, Root),
    e2e!(sampled_stacks_estimate_what_every_stack_shows, Root),
    e2e!(the_report_says_how_waits_were_collected, Root),
];

const T: Duration = Duration::from_secs(120);

/// bpftrace's count of process `$1`'s futex waits, by result.
const BPFTRACE: &str = "tracepoint:syscalls:sys_enter_futex /pid == $1 && \
    ((args->op & 127) == 0 || (args->op & 127) == 9)/ { @w[tid] = 1; } \
    tracepoint:syscalls:sys_exit_futex /@w[tid]/ { @ret[args->ret] = count(); delete(@w[tid]); } \
    tracepoint:syscalls:sys_enter_getppid /pid == $2/ { printf(\"attached\\n\"); }";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `@ret[R]: N` lines of bpftrace's output.
fn by_result(out: &str) -> HashMap<i64, u64> {
    out.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().strip_prefix("@ret[")?.split_once("]: ")?;
            Some((k.parse().ok()?, v.trim().parse().ok()?))
        })
        .collect()
}

/// Runs `bench_shapes --gate ARGS` under rtm-trace (`options`) with bpftrace counting its
/// futex waits from before the gate opens; returns rtm-trace's document and bpftrace's
/// counts by result.
fn both(options: &[&str], args: &[&str]) -> (Value, HashMap<i64, u64>) {
    let dir = TempDir::new("prod");
    let json = dir.join("t.json");
    let mut tracer = spawn(
        Command::new(rtm_bin())
            .arg("--json")
            .arg(&json)
            .args(["-o", "/dev/null"])
            .args(options)
            .arg("--")
            .arg(workload("bench_shapes"))
            .arg("--gate")
            .args(args)
            .stdin(Stdio::piped()),
    );
    let mut out = LineWatch::new(tracer.child.stdout.take().unwrap());
    let line = out.wait_for("ready ", T);
    let pid = line.trim().trim_start_matches("ready ").to_owned();
    let me = std::process::id().to_string();
    let mut bt = spawn(Command::new("bpftrace").args(["-e", BPFTRACE, &pid, &me]));
    let mut bt_out = LineWatch::new(bt.child.stdout.take().unwrap());
    bt_out.wait_for("Attaching", T);
    // bpftrace says "Attaching" before it attaches (seconds on emulated CPUs); its last
    // probe, attached last, answers this process's getppid once all are.
    let asked = std::time::Instant::now();
    while bt_out
        .try_wait_for("attached", Duration::from_millis(200))
        .is_none()
    {
        assert!(
            asked.elapsed() < T,
            "bpftrace did not attach: {:?}",
            bt_out.seen
        );
        // SAFETY: a system call without arguments.
        unsafe { libc::getppid() };
    }
    tracer
        .child
        .stdin
        .take()
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    out.wait_for("ops=", T);
    let result = tracer.wait_output(T);
    assert!(
        result.status.success(),
        "rtm-trace: {}",
        text(&result.stderr)
    );
    bt.signal(libc::SIGINT);
    let counts = bt_out.rest(T).join("\n");
    (read_json(&json), by_result(&counts))
}

fn futex_waits(doc: &Value) -> u64 {
    doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "futex")
        .filter_map(|o| o["waits"].as_u64())
        .sum()
}

/// Summed in the kernel, begun at their sleep: every futex wait that did not return at
/// once (EAGAIN: the word had changed) is counted, as the kernel returned it (to within
/// one in 50,000: see below); with --unslept those too, exactly; and with a sums map too
/// small for them, the rest go one by one and the report says so.
fn summed_waits_are_the_kernels_futex_waits() {
    for (options, shape) in [
        (&[][..], &["pingpong", "1"][..]),
        (&[][..], &["hammer", "8", "1", "3000"][..]),
        (&["--unslept"][..], &["hammer", "8", "1", "3000"][..]),
        // Two threads waking each other: two entries, one more than the map holds.
        (&["--futex-sums", "1"][..], &["pingpong", "1"][..]),
    ] {
        let (doc, kernel) = both(options, shape);
        let eagain = kernel.get(&-11).copied().unwrap_or(0);
        let all: u64 = kernel.values().sum();
        let ours = futex_waits(&doc);
        let lost = &doc["run"]["losses"];
        println!("{options:?} {shape:?}: rtm-trace {ours}, kernel {kernel:?}, losses {lost}");
        assert_eq!(lost["ring_full"], 0, "{lost}");
        if options.contains(&"--unslept") {
            assert_eq!(ours, all, "every futex wait, the kernel's {kernel:?}");
        } else {
            // Begun at their sleep, with no program on the system call, a wait is told
            // apart from the next one by its wake and its sleep alone: when a wake and a
            // sleep of one thread race on two CPUs, a wait is now and then counted once
            // too many or too few (8 of 45 runs of up to 100,000 waits were off, each by
            // one wait; bpftrace's programs missed nothing). Within that; with system
            // call programs (above) it is exact.
            let kernels = all - eagain;
            let slack = 2 + kernels / 50_000;
            assert!(
                ours.abs_diff(kernels) <= slack,
                "waits that did not return EAGAIN: {ours} vs the kernel's {kernels} \
                 (within {slack}): {kernel:?}"
            );
        }
        // How contended a run is depends on how often its threads run at once (in the
        // kernel matrix's emulated guest a hammer run made 71 waits, counted exactly):
        // the count is compared above; here only that there was something to compare.
        assert!(all - eagain > 0, "no wait slept: nothing compared ({kernel:?})");
        if options.contains(&"--futex-sums") {
            assert!(lost["agg_full"].as_u64().unwrap() > 0, "{lost}");
        } else {
            assert_eq!(lost["agg_full"], 0, "{lost}");
        }
    }
}

/// Weighted waits of the stacks through each call site, as a share of both.
fn site_share(doc: &Value) -> (f64, u64, u64) {
    let rows = doc["sync_graph"]["stacks"]["rows"].as_array().unwrap();
    let (mut a, mut b, mut samples, mut waits) = (0u64, 0u64, 0u64, 0u64);
    for r in rows {
        let waiter: Vec<&str> = r["waiter"]
            .as_array()
            .map(|a| a.iter().filter_map(|f| f.as_str()).collect())
            .unwrap_or_default();
        let w = r["waits"].as_u64().unwrap();
        samples += r["samples"].as_u64().unwrap();
        waits += w;
        if waiter.iter().any(|f| f.starts_with("site_a+")) {
            a += w;
        } else if waiter.iter().any(|f| f.starts_with("site_b+")) {
            b += w;
        }
    }
    assert!(a + b > 0, "no stacks through site_a or site_b: {rows:#?}");
    (a as f64 / (a + b) as f64, samples, waits)
}

/// The exact waits on the two locks of `two_sites`, as a share: lock_a's (site_a's).
fn lock_share(stdout: &str, doc: &Value) -> (f64, u64) {
    let addr = |key: &str| -> String {
        stdout
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
            .to_owned()
    };
    let waits_on = |a: &str| -> u64 {
        doc["sync_graph"]["objects"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["addr"].as_str() == Some(a))
            .filter_map(|o| o["waits"].as_u64())
            .sum()
    };
    let (a, b) = (waits_on(&addr("lock_a")), waits_on(&addr("lock_b")));
    assert!(a > 100 && b > 10, "contended locks: {a} and {b} waits");
    (a as f64 / (a + b) as f64, a + b)
}

/// Stacks taken at a low rate stand for the waits they were chosen among: the share of
/// waits whose stacks pass through each of two call sites (2:1 by the program's
/// design, each site with its own lock) is the exact share the per-lock counts give in
/// the same run, within four standard errors (at least 0.05) at a quarter of the waits per
/// second; with every stack, within 0.02.
fn sampled_stacks_estimate_what_every_stack_shows() {
    let run = |rate: &str| {
        let started = std::time::Instant::now();
        let (stdout, doc) = trace_json(
            &["-o", "/dev/null", "--stack-rate", rate],
            &workload("two_sites"),
            &["6", "8000"],
        );
        let secs = started.elapsed().as_secs_f64();
        assert!(stdout.contains("site_a="), "{stdout}");
        let (exact, exact_waits) = lock_share(&stdout, &doc);
        let (share, samples, waits) = site_share(&doc);
        println!(
            "rate {rate}: site_a {share:.3} of ~{waits} waits from {samples} samples; \
             exact {exact:.3} of {exact_waits}, in {secs:.2} s"
        );
        (share, samples, waits, exact, exact_waits, secs)
    };
    let (share, samples, waits, exact, _, secs) = run("all");
    assert_eq!(samples, waits, "every wait's stacks, weight 1 each");
    assert!(
        (share - exact).abs() <= 0.02,
        "every stack: {share:.3} vs {exact:.3}"
    );
    // A rate well under the waits per second this machine just managed (over the whole
    // run, attach included, so under the true rate): on a loaded machine the workload
    // waits less often, and a fixed rate would take every wait.
    let rate = ((waits as f64 / secs / 4.0) as u64).max(10);
    let (share, samples, waits, exact, exact_waits, _) = run(&rate.to_string());
    assert!(
        samples * 2 < waits,
        "the low rate sampled: {samples} samples for ~{waits} waits"
    );
    // Four standard errors of a share estimated from this many samples, and no less
    // than 0.05.
    let tol = (4.0 * (exact * (1.0 - exact) / samples as f64).sqrt()).max(0.05);
    assert!(
        (share - exact).abs() <= tol,
        "site_a's share {share:.3} sampled vs {exact:.3} counted (within {tol:.3})"
    );
    // The estimate of all waits is near the exact count.
    let ratio = waits as f64 / exact_waits as f64;
    assert!(
        (0.85..=1.15).contains(&ratio),
        "{waits} estimated vs {exact_waits}"
    );
}

/// The map of sums and the reader never hold up the trace's end: a run with its own
/// measure of time gets all its waits, none lost, and the report says how they were
/// collected.
fn the_report_says_how_waits_were_collected() {
    let dir = TempDir::new("collect");
    let out = run(
        Command::new(rtm_bin())
            .arg("-o")
            .arg(dir.join("r.txt"))
            .arg("--json")
            .arg(dir.join("t.json"))
            .arg("--")
            .arg(workload("bench_shapes"))
            .args(["pingpong", "1"]),
        T,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = std::fs::read_to_string(dir.join("r.txt")).unwrap();
    assert!(report.contains("no program on any system call"), "{report}");
    assert!(
        report.contains("call stacks were sampled, at most 200"),
        "{report}"
    );
    let doc = read_json(&dir.join("t.json"));
    let c = &doc["run"]["collection"];
    assert_eq!(c["summed"], true, "{c}");
    assert_eq!(c["syscall_entry"], false, "{c}");
    assert_eq!(c["stack_rate"], 200, "{c}");
}
