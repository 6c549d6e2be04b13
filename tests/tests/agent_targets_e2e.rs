//! The agent's targets against another local user: processes `nobody` starts named like
//! the target neither take its place under a `uid` rule nor go unnoticed when they fill
//! the slots of a rule without one.

use std::{
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use rtm_tests::{
    Proc, TempDir,
    agent::{Agent, sample, samples, wait_for},
    can_trace, rtm_bin, run, spawn,
};

/// `nobody`'s uid and gid on Debian.
const NOBODY: u32 = 65534;
/// The command name the target and its lookalikes share.
const BAIT: &str = "rtm-svc-bait";

/// A copy of sleep(1) named BAIT, in a directory every user may read.
fn bait(dir: &TempDir) -> PathBuf {
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join(BAIT);
    std::fs::copy("/usr/bin/sleep", &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Starts `n` baits as `uid`.
fn start_baits(bin: &Path, n: usize, uid: u32) -> Vec<Proc> {
    (0..n)
        .map(|_| spawn(Command::new(bin).arg("600").uid(uid).gid(uid)))
        .collect()
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

#[test]
fn a_uid_rule_keeps_another_users_lookalikes_out() {
    if !can_trace("a_uid_rule_keeps_another_users_lookalikes_out") {
        return;
    }
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

#[test]
fn full_slots_say_which_rule_turned_targets_away() {
    if !can_trace("full_slots_say_which_rule_turned_targets_away") {
        return;
    }
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
