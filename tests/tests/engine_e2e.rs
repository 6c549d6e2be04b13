//! End-to-end: the engine driven as a daemon would drive it (targets added and removed
//! while it runs, the kernel side loaded and released with them, the published
//! summary), and a whole trace described by a config file.

use std::{
    io::Write as _,
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use rtm::{CounterList, EndReason, Engine, KernelSource, Mode, Summary, Target, TraceConfig};
use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(a_daemon_adds_and_removes_targets_and_the_programs_follow, Root),
    e2e!(a_config_file_describes_a_whole_trace, Root),
];

const T: Duration = Duration::from_secs(120);

/// This process's descriptors of loaded eBPF programs.
fn bpf_programs() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-prog")
        })
        .count()
}

/// Waits for a summary that `ok` accepts.
async fn summary_where(
    rx: &mut tokio::sync::watch::Receiver<Arc<Summary>>,
    what: &str,
    ok: impl Fn(&Summary) -> bool,
) -> Arc<Summary> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = rx.borrow_and_update().clone();
        if ok(&s) {
            return s;
        }
        tokio::time::timeout_at(deadline, rx.changed())
            .await
            .unwrap_or_else(|_| panic!("no summary with {what} within 20 s: last {s:?}"))
            .unwrap();
    }
}

fn waits(s: &Summary) -> u64 {
    s.objects.iter().map(|o| o.contended).sum()
}

fn a_daemon_adds_and_removes_targets_and_the_programs_follow() {
    // Two threads contend on one lock for a few seconds, started on a line of stdin.
    let mut app = spawn(Command::new(workload("mutex_workload")).args([
        "--threads",
        "2",
        "--iters",
        "4000",
        "--hold-us",
        "500",
        "--private",
        "0",
        "--wait-stdin",
    ]));
    let mut lines = LineWatch::new(app.child.stdout.take().unwrap());
    lines.wait_for("ready", T);
    let pid = app.pid();
    let config = TraceConfig {
        mode: Mode::Contention,
        interval: Some(Duration::from_millis(100)),
        counters: CounterList(Vec::new()),
        ..TraceConfig::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let source = Box::new(KernelSource::new(&config));
    let mut engine = Engine::new(config, source, Vec::new());
    let handle = engine.handle();
    let mut rx = handle.summary();
    assert_eq!(bpf_programs(), 0, "nothing is loaded before a target");
    let mut stdin = app.child.stdin.take().unwrap();
    rt.block_on(async {
        let driver = async {
            handle.add(vec![Target::running(pid, false)]).await.unwrap();
            let loaded = bpf_programs();
            assert!(loaded > 0, "the programs load with the first target");
            writeln!(stdin, "go").unwrap();
            let s = summary_where(&mut rx, "waits", |s| waits(s) >= 10).await;
            assert_eq!(s.targets[0].pid, pid);
            assert!(s.threads >= 2, "{s:?}");

            // Removed: the kernel side goes, and nothing more is counted while the
            // program keeps contending.
            handle.remove(pid).unwrap();
            let gone = summary_where(&mut rx, "the target removed", |s| {
                s.targets[0].ended.is_some()
            })
            .await;
            assert_eq!(bpf_programs(), 0, "the programs go with the last target");
            let before = waits(&gone);
            tokio::time::sleep(Duration::from_millis(400)).await;
            let after = summary_where(&mut rx, "a later tick", |s| s.seq > gone.seq + 2).await;
            assert_eq!(waits(&after), before, "nothing is counted while detached");
            assert!(alive(pid), "the program still runs");

            // Added again: loaded again, counting again.
            handle.add(vec![Target::running(pid, false)]).await.unwrap();
            assert!(bpf_programs() > 0, "loaded again for the next target");
            summary_where(&mut rx, "more waits", |s| waits(s) > before + 10).await;
            handle.stop(EndReason::Signal).unwrap();
        };
        let (_, reason) = tokio::join!(driver, engine.run(std::future::pending()));
        assert_eq!(reason.unwrap(), EndReason::Signal);
    });
    let outcome = engine.finish(EndReason::Signal).unwrap();
    assert_eq!(outcome.reason, EndReason::Signal);
    assert_eq!(bpf_programs(), 0, "finish releases everything");
    // The program was never harmed: it finishes its work and exits 0.
    let out = app.wait_output(T);
    assert!(out.status.success(), "{out:?}");
    let t = lines.rest(T);
    assert_eq!(
        t.iter().filter(|l| l.starts_with("truth ")).count(),
        2,
        "{t:?}"
    );
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn a_config_file_describes_a_whole_trace() {
    let dir = TempDir::new("config-trace");
    let (json, report) = (dir.join("o.json"), dir.join("r.txt"));
    let toml = format!(
        "mode = \"full\"\ncounters = \"none\"\n[targets]\ncommand = [{:?}, \"--threads\", \"2\", \
         \"--iters\", \"50\", \"--hold-us\", \"200\", \"--private\", \"0\"]\n[output]\njson = \
         {:?}\nreport = {:?}\ntop = 3\n",
        workload("mutex_workload").display().to_string(),
        json.display().to_string(),
        report.display().to_string(),
    );
    let cfg = dir.join("trace.toml");
    std::fs::write(&cfg, toml).unwrap();
    let started = Instant::now();
    let out = run(Command::new(rtm_bin()).arg("--config").arg(&cfg), T);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(started.elapsed() < T);
    // What the workload counted itself, against what the trace says.
    let truth = truths(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(truth.len(), 2);
    let shared: u64 = truth.iter().map(|t| t.get("shared")).sum();
    let doc = read_json(&json);
    assert_eq!(doc["run"]["mode"], "full");
    let lock = object(&doc, "shared_lock").expect("shared_lock traced");
    assert_eq!(lock["acquisitions"], shared);
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.contains("final report") && text.contains("shared_lock"),
        "{text}"
    );
    // The command line goes over the file: the mode and the rows.
    let json2 = dir.join("o2.json");
    let out = run(
        Command::new(rtm_bin())
            .arg("--config")
            .arg(&cfg)
            .args(["--mode", "contention", "--json"])
            .arg(&json2),
        T,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read_json(&json2)["run"]["mode"], "contention");
    // A file that says too much is refused by name, before anything runs.
    std::fs::write(&cfg, "mode = \"full\"\nfollow_children = true\n").unwrap();
    let out = run(Command::new(rtm_bin()).arg("--config").arg(&cfg), T);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("follow_children") && err.contains("docs/config.md"),
        "{err}"
    );
}
