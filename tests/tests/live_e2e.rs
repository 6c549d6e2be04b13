//! The live view end to end, in a real terminal (tmux): it shows the workload's lock,
//! sorts, pauses visibly, drills into the lock, and q stops tracing and writes the
//! report while the traced program runs on to its own end.

use std::{
    process::Command,
    thread::sleep,
    time::{Duration, Instant},
};

use rtm_tests::{TempDir, rtm_bin, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(the_live_view_sorts_pauses_drills_in_and_quits_in_a_terminal, Root),
    e2e!(interval_summaries_are_not_printed_into_the_live_view, Root),
];

struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux runs (cargo xtask setup installs it)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "live"])
    }

    /// Waits (up to a minute: a loaded machine is slow) for the screen to show `what`.
    fn wait_for(&self, what: &str) -> String {
        let start = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the screen never showed {what:?}:\n{s}"
            );
            sleep(Duration::from_millis(200));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "live"];
        args.extend_from_slice(keys);
        self.cmd(&args);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.cmd(&["kill-server"]);
    }
}

/// The "traced" time in the header line.
fn traced(screen: &str) -> String {
    screen
        .lines()
        .next()
        .and_then(|l| l.split("traced").next())
        .unwrap_or_default()
        .to_owned()
}

fn the_live_view_sorts_pauses_drills_in_and_quits_in_a_terminal() {
    let dir = TempDir::new("live");
    let report = dir.join("report.txt");
    let exit = dir.join("exit");
    let command = format!(
        "{} --live -m full -o {} -- {} --threads 4 --iters 20000 --hold-us 100; echo $? > {}; sleep 60",
        rtm_bin().display(),
        report.display(),
        workload("mutex_workload").display(),
        exit.display()
    );
    let t = Tmux {
        socket: format!("rtm-live-{}", std::process::id()),
    };
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "live",
        "-x",
        "160",
        "-y",
        "40",
        &command,
    ]);

    let s = t.wait_for("shared_lock");
    assert!(s.contains("top locks") && s.contains("waited v"), "{s}");
    // The header says what limits the work: the lock the workload contends.
    t.wait_for("finding: mutex shared_lock holds up");
    // Sort by acquisitions (two columns left of time waited).
    t.keys(&["Left", "Left"]);
    t.wait_for("acquired v");
    // Pause: the state says so, and the numbers stop moving.
    t.keys(&["p"]);
    let paused = t.wait_for("[PAUSED]");
    sleep(Duration::from_millis(2500));
    assert_eq!(traced(&t.screen()), traced(&paused), "frozen while paused");
    t.keys(&["p"]);
    let start = Instant::now();
    while t.screen().contains("[PAUSED]") {
        assert!(start.elapsed() < Duration::from_secs(30), "never unpaused");
        sleep(Duration::from_millis(200));
    }
    // Drill into the lock with the most acquisitions: shared_lock.
    t.keys(&["Enter"]);
    let s = t.wait_for("time waited per interval");
    assert!(s.contains("shared_lock (pid"), "{s}");
    assert!(
        s.contains("who woke the waiters") && s.contains("worker-"),
        "{s}"
    );
    t.keys(&["Escape", "q"]);
    // The tracer stops, writes the report, and waits for the program's own end.
    let start = Instant::now();
    while !exit.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "rtm-trace did not end after q:\n{}",
            t.screen()
        );
        sleep(Duration::from_millis(200));
    }
    let code = std::fs::read_to_string(&exit).unwrap();
    assert_eq!(code.trim(), "0", "rtm-trace's exit: the program's own");
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.contains("shared_lock") && text.contains("stopped: "),
        "{text}"
    );
    // The terminal is given back: the shell's output follows on a normal screen.
    assert!(!t.screen().contains("top locks"), "{}", t.screen());
}

/// With `-i` and the report on the terminal, the interval summaries would be printed
/// inside the live view's screen: they are left out (said once on stderr), and the
/// screen shows only the view.
fn interval_summaries_are_not_printed_into_the_live_view() {
    let dir = TempDir::new("live-interval");
    let (err, exit) = (dir.join("stderr"), dir.join("exit"));
    let command = format!(
        "{} --live -i 1 -- {} --threads 4 --iters 20000 --hold-us 100 2> {}; echo $? > {}; sleep 60",
        rtm_bin().display(),
        workload("mutex_workload").display(),
        err.display(),
        exit.display()
    );
    let t = Tmux {
        socket: format!("rtm-live-i-{}", std::process::id()),
    };
    t.cmd(&[
        "new-session",
        "-d",
        "-s",
        "live",
        "-x",
        "160",
        "-y",
        "40",
        &command,
    ]);
    t.wait_for("shared_lock");
    // Three intervals pass on screen.
    for _ in 0..6 {
        sleep(Duration::from_millis(500));
        let s = t.screen();
        assert!(!s.contains("summary at +"), "a summary in the view:\n{s}");
    }
    t.keys(&["q"]);
    let start = Instant::now();
    while !exit.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "rtm-trace did not end after q:\n{}",
            t.screen()
        );
        sleep(Duration::from_millis(200));
    }
    let stderr = std::fs::read_to_string(&err).unwrap();
    assert!(stderr.contains("no summary each interval"), "{stderr}");
}
