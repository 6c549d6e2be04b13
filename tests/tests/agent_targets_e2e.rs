//! The agent's targets against another local user and against PID reuse: processes
//! `nobody` starts named like the target neither take its place under a `uid` rule nor
//! go unnoticed when they fill the slots of a rule without one; and a process that gets
//! an exited target's pid within its grace period never shows in that target's series.

use std::{
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use rtm_tests::{
    Proc, TempDir,
    agent::{Agent, sample, samples, wait_for},
    rtm_bin, run, spawn, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(a_uid_rule_keeps_another_users_lookalikes_out, Root),
    e2e!(full_slots_say_which_rule_turned_targets_away, Root),
    e2e!(a_pid_given_again_never_relabels_the_exited_targets_series, Root),
];

/// `nobody`'s uid and gid on Debian.
const NOBODY: u32 = 65534;
/// The command name the target and its lookalikes share.
const BAIT: &str = "rtm-svc-bait";

/// A copy of sleep(1) named BAIT, in a directory every user may read.
fn bait(dir: &TempDir) -> PathBuf {
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy_as(dir, Path::new("/usr/bin/sleep"), BAIT)
}

/// Starts `n` baits as `uid`.
fn start_baits(bin: &Path, n: usize, uid: u32) -> Vec<Proc> {
    (0..n)
        .map(|_| spawn(Command::new(bin).arg("600").uid(uid).gid(uid)))
        .collect()
}

/// A copy of sleep(1) or of a workload under another name (its command name).
fn copy_as(dir: &TempDir, from: &Path, name: &str) -> PathBuf {
    let bin = dir.join(name);
    std::fs::copy(from, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// The pids of the traced processes, from `rtm_target_info`.
fn traced_pids(scrape: &str) -> Vec<u32> {
    samples(scrape, "rtm_target_info{")
        .iter()
        .filter_map(|(l, _)| {
            let at = l.find("pid=\"")? + 5;
            l[at..].split('"').next()?.parse().ok()
        })
        .collect()
}

/// The real uid of a process, from /proc (the test's own truth).
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap()
}

fn a_uid_rule_keeps_another_users_lookalikes_out() {
    let dir = TempDir::new("agent-uid");
    let bin = bait(&dir);
    // An unknown user is refused when the file is loaded, by field.
    let config = dir.join("bad.toml");
    std::fs::write(
        &config,
        format!("[[agent.select]]\ncomm = \"{BAIT}\"\nuser = \"no-such-user-rtm\"\n"),
    )
    .unwrap();
    let out = run(
        Command::new(rtm_bin())
            .args(["agent", "--check-config", "--config"])
            .arg(&config),
        Duration::from_secs(30),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("agent.select[0].user: no user"), "{err}");

    // `nobody`'s lookalikes first, more than the slots; then root's target.
    let planted = start_baits(&bin, 12, NOBODY);
    let agent = Agent::start(
        &dir,
        17485,
        &format!("max_targets = 4\n[[agent.select]]\ncomm = \"{BAIT}\"\nuser = \"root\"\n"),
    );
    let target = spawn(Command::new(&bin).arg("600"));
    assert!(planted.iter().all(|p| uid_of(p.pid()) == NOBODY));
    assert_eq!(uid_of(target.pid()), 0);
    wait_for("root's target traced", Duration::from_secs(30), || {
        traced_pids(&agent.scrape()) == [target.pid()]
    });
    // Two more rescans: still root's alone, nothing turned away.
    std::thread::sleep(Duration::from_secs(5));
    let scrape = agent.scrape();
    assert_eq!(traced_pids(&scrape), [target.pid()], "{scrape}");
    assert_eq!(sample(&scrape, "rtm_targets{state=\"running\"}"), Some(1.0));
    assert!(
        samples(&scrape, "rtm_targets_turned_away_total").is_empty(),
        "{scrape}"
    );
}

fn full_slots_say_which_rule_turned_targets_away() {
    let dir = TempDir::new("agent-slots");
    let bin = bait(&dir);
    let agent = Agent::start(
        &dir,
        17486,
        &format!(
            "max_targets = 4\n[[agent.select]]\ncomm = \"other-rtm-svc\"\n[[agent.select]]\ncomm = \"{BAIT}\"\n"
        ),
    );
    let away = |scrape: &str| {
        sample(scrape, "rtm_targets_turned_away_total{rule=\"select[1]\"}").unwrap_or(0.0)
    };
    let _planted = start_baits(&bin, 12, NOBODY);
    wait_for(
        "8 of 12 lookalikes turned away",
        Duration::from_secs(30),
        || away(&agent.scrape()) == 8.0,
    );
    // The real target comes too late: it is turned away as well, and counted.
    let target = spawn(Command::new(&bin).arg("600"));
    wait_for("root's target turned away", Duration::from_secs(30), || {
        away(&agent.scrape()) == 9.0
    });
    // Two more rescans: each process is counted once.
    std::thread::sleep(Duration::from_secs(5));
    let scrape = agent.scrape();
    assert_eq!(away(&scrape), 9.0, "{scrape}");
    assert_eq!(
        sample(&scrape, "rtm_attach_errors_total{reason=\"max_targets\"}"),
        Some(9.0)
    );
    let traced = traced_pids(&scrape);
    assert_eq!(traced.len(), 4, "{scrape}");
    assert!(traced.iter().all(|p| uid_of(*p) == NOBODY), "{traced:?}");
    assert!(!traced.contains(&target.pid()));
    // The log names the rule and its matchers, once (rate-limited).
    agent.proc.signal(libc::SIGTERM);
    let out = agent.proc.wait_output(Duration::from_secs(30));
    let log = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("target slots taken"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(&format!("agent.select[1] (comm = \"{BAIT}\")"))
            && lines[0].contains("uid or user"),
        "{}",
        lines[0]
    );
}

/// Starts `cmd` as process `pid`, through /proc/sys/kernel/ns_last_pid. Other
/// processes of the machine may take the pid first: tried again until it is had.
fn spawn_as_pid(pid: u32, cmd: impl Fn() -> Command) -> Proc {
    for _ in 0..500 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).unwrap();
        let p = spawn(&mut cmd());
        if p.pid() == pid {
            return p;
        }
    }
    panic!("pid {pid} could not be had again in 500 tries");
}

/// The series of a scrape that belong to target `target`.
fn series_of<'a>(scrape: &'a str, target: &str) -> Vec<&'a str> {
    let label = format!("target=\"{target}\"");
    scrape.lines().filter(|l| l.contains(&label)).collect()
}

/// Runs a many_locks copy (4 threads on 2 locks for `ms`) to its end.
fn run_locks(mut p: Proc) {
    let mut lines = rtm_tests::LineWatch::new(p.child.stdout.take().unwrap());
    lines.wait_for("ready", Duration::from_secs(30));
    use std::io::Write as _;
    writeln!(p.child.stdin.as_mut().unwrap(), "go").unwrap();
    let out = p.wait_output(Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
}

fn a_pid_given_again_never_relabels_the_exited_targets_series() {
    const OLD: &str = "rtm-reuse-old";
    let dir = TempDir::new("agent-reuse");
    let locks = workload("many_locks");
    let old_bin = copy_as(&dir, &locks, OLD);
    let a_bin = copy_as(&dir, &locks, "unrelA");
    let b_bin = copy_as(&dir, &locks, "unrelB");
    // unrelA is not selected, unrelB is (it is traced as its own target). The grace
    // outlasts both.
    let agent = Agent::start(
        &dir,
        17487,
        &format!(
            "grace = 60.0\n[[agent.select]]\ncomm = \"{OLD}\"\n[[agent.select]]\ncomm = \"unrelB\"\n"
        ),
    );
    let waits = |scrape: &str| {
        sample(scrape, &format!("rtm_futex_waits_total{{target=\"{OLD}\""))
            .expect("the old target's waits")
    };

    // The target: traced, contended, then gone (reaped).
    let old = spawn(Command::new(&old_bin).args(["4", "2", "800"]));
    let pid = old.pid();
    wait_for("the target traced", Duration::from_secs(30), || {
        traced_pids(&agent.scrape()).contains(&pid)
    });
    run_locks(old);
    wait_for("the target seen exited", Duration::from_secs(30), || {
        sample(&agent.scrape(), "rtm_targets{state=\"exited\"}") == Some(1.0)
    });
    std::thread::sleep(Duration::from_secs(2));
    let before = agent.scrape();
    let at_exit = waits(&before);
    let labels_before = series_of(&before, OLD).len();
    assert!(at_exit > 0.0 && labels_before > 0, "{before}");
    println!("{OLD} (PID {pid}) exited with {at_exit} waits, {labels_before} series");

    // An unrelated process gets the pid, contends, exits; nothing of it is traced.
    let a = spawn_as_pid(pid, || {
        let mut c = Command::new(&a_bin);
        c.args(["4", "2", "1500"]);
        c
    });
    run_locks(a);
    std::thread::sleep(Duration::from_secs(3));
    let scrape = agent.scrape();
    assert!(!scrape.contains("unrelA"), "{scrape}");
    assert_eq!(waits(&scrape), at_exit, "the old target's waits moved");
    assert!(!traced_pids(&scrape).contains(&pid), "{scrape}");

    // Another gets it and is selected: traced as its own target, apart.
    let b = spawn_as_pid(pid, || {
        let mut c = Command::new(&b_bin);
        c.args(["4", "2", "1500"]);
        c
    });
    wait_for("unrelB traced", Duration::from_secs(30), || {
        let s = agent.scrape();
        samples(&s, "rtm_target_info{")
            .iter()
            .any(|(l, _)| l.contains("target=\"unrelB\"") && l.contains(&format!("pid=\"{pid}\"")))
    });
    run_locks(b);
    wait_for("unrelB's waits", Duration::from_secs(30), || {
        sample(&agent.scrape(), "rtm_futex_waits_total{target=\"unrelB\"").is_some_and(|w| w > 0.0)
    });
    std::thread::sleep(Duration::from_secs(2));
    let scrape = agent.scrape();
    let old_series = series_of(&scrape, OLD);
    assert!(!old_series.is_empty(), "the old target's series went early");
    for l in &old_series {
        assert!(!l.contains("unrel"), "{l}");
    }
    assert_eq!(waits(&scrape), at_exit, "the old target's waits moved");
    println!(
        "unrelB: {} series of its own",
        series_of(&scrape, "unrelB").len()
    );
}
