//! End-to-end: the agent's contention profiles (`/debug/pprof/contention`) read by a
//! real pprof client, `go tool pprof`. A program with two call sites, each with its own
//! lock, runs under the agent: the profile since the start lists both sites, and the
//! share of waits through each (from sampled stacks, weighted) is the share the agent's
//! exact per-lock sleep counts give, whether the samples are keyed by the waiter's stack
//! or the waker's (the unlock); a window (`seconds=N`) taken while the program ran
//! holds part of those waits; a client that goes away mid-window frees its place.

use std::{
    io::Write,
    net::TcpStream,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::{
    agent::{Agent, get, get_bytes, samples, wait_for},
    pprof::{cum, go, pprof_top, total},
    *,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(the_agents_profile_reads_in_go_tool_pprof_and_agrees_with_its_lock_counts, Root, Tool("go", "golang-go")),
    e2e!(without_stacks_the_profile_says_why, Root),
];

const PATH: &str = "/debug/pprof/contention";

/// The sleeps the agent counted on `lock` of two_sites.
fn lock_sleeps(scrape: &str, lock: &str) -> f64 {
    samples(
        scrape,
        &format!("rtm_lock_sleeps_total{{target=\"two_sites\",container_id=\"\",mode=\"contention\",lock=\"{lock}\""),
    )
    .iter()
    .map(|s| s.1)
    .sum()
}

fn the_agents_profile_reads_in_go_tool_pprof_and_agrees_with_its_lock_counts() {
    let go = go();
    let dir = TempDir::new("agent-profile");
    // Stacks sampled at 2,000 a second per CPU (the default is 200): enough samples
    // for the share to be checked within 0.05 in one run.
    let agent = Agent::start(
        &dir,
        17530,
        "grace = 600.0\n[[agent.select]]\ncomm = \"two_sites\"\n[stacks]\nrate = 2000\n",
    );
    let addr = agent.addr.clone();
    for bad in ["seconds=0", "seconds=51", "seconds=soon"] {
        let (status, body) = get(&addr, &format!("{PATH}?{bad}"));
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.contains("seconds"), "{bad}: {body}");
    }

    let started = Instant::now();
    let mut app = spawn(Command::new(workload("two_sites")).args(["6", "40000"]));
    wait_for("two_sites traced", Duration::from_secs(30), || {
        lock_sleeps(&agent.scrape(), "lock_a") > 0.0
    });
    // A window of 2 s while it runs (it runs several seconds, longer on a busy machine).
    let (status, window) = get_bytes(&addr, &format!("{PATH}?seconds=2"), Duration::from_secs(30));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&window));
    let still_running = app.child.try_wait().unwrap().is_none();
    // Clients that go away mid-window: their windows end with them.
    for _ in 0..6 {
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(s, "GET {PATH}?seconds=50 HTTP/1.0\r\n\r\n").unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = get_bytes(&addr, &format!("{PATH}?seconds=1"), Duration::from_secs(30));
    assert_eq!(
        status,
        200,
        "windows of clients gone still open: {}",
        String::from_utf8_lossy(&body)
    );

    let out = app.wait_output(Duration::from_secs(300));
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains("site_a="), "{stdout}");
    println!("two_sites ran {:?}", started.elapsed());
    // Settled: two scrapes a few updates apart agree.
    let mut last = -1.0;
    wait_for("the lock counts settled", Duration::from_secs(60), || {
        std::thread::sleep(Duration::from_secs(3));
        let s = agent.scrape();
        let n = lock_sleeps(&s, "lock_a") + lock_sleeps(&s, "lock_b");
        let settled = n == last;
        last = n;
        settled
    });
    let scrape = agent.scrape();
    let (a, b) = (
        lock_sleeps(&scrape, "lock_a"),
        lock_sleeps(&scrape, "lock_b"),
    );
    assert!(a > 100.0 && b > 10.0, "contended: {a} and {b} sleeps");

    let (status, profile) = get_bytes(&addr, PATH, Duration::from_secs(30));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&profile));
    let file = dir.join("contention.pb.gz");
    std::fs::write(&file, &profile).unwrap();
    let contentions = pprof_top(&go, &dir, &file, "contentions");
    let delay = pprof_top(&go, &dir, &file, "delay");
    for f in ["site_a", "site_b", "worker"] {
        assert!(cum(&delay, f) > 0.0, "{f} not in the profile:\n{delay}");
    }
    let (pa, pb) = (cum(&contentions, "site_a"), cum(&contentions, "site_b"));
    let (share, exact) = (pa / (pa + pb), a / (a + b));
    let estimated = total(&contentions);
    println!(
        "profile: {pa} + {pb} contentions through site_a + site_b (share {share:.3}), \
         {estimated} in all; the agent's lock counts: {a} + {b} sleeps (share {exact:.3}); \
         {} bytes",
        profile.len()
    );
    assert!(
        (share - exact).abs() <= 0.05,
        "site_a's share {share:.3} in the profile vs {exact:.3} counted:\n{contentions}"
    );
    let ratio = estimated / (a + b);
    assert!(
        (0.85..=1.15).contains(&ratio),
        "{estimated} waits estimated vs {} counted:\n{contentions}",
        a + b
    );

    // Keyed by the waker's stack: the unlocks in the same two sites ended the waits.
    let (status, by_waker) = get_bytes(&addr, &format!("{PATH}?by=waker"), Duration::from_secs(30));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&by_waker));
    let wk = dir.join("waker.pb.gz");
    std::fs::write(&wk, &by_waker).unwrap();
    let wtop = pprof_top(&go, &dir, &wk, "contentions");
    assert!(
        wtop.lines().any(|l| l.contains("mutex_unlock")),
        "the unlocks are the wakers:\n{wtop}"
    );
    let (wa, wb) = (cum(&wtop, "site_a"), cum(&wtop, "site_b"));
    println!("keyed by the waker: {wa} + {wb} contentions through site_a + site_b");
    assert!(
        (wa / (wa + wb) - exact).abs() <= 0.05,
        "by waker: site_a {wa}, site_b {wb} vs the share {exact:.3}:\n{wtop}"
    );

    // The window taken while it ran holds part of its waits.
    let wfile = dir.join("window.pb.gz");
    std::fs::write(&wfile, &window).unwrap();
    let wtop = pprof_top(&go, &dir, &wfile, "contentions");
    let in_window = total(&wtop);
    println!(
        "the 2 s window: {in_window} contentions (program still running after it: {still_running})"
    );
    assert!(
        in_window <= estimated * 1.05,
        "{in_window} vs {estimated}:\n{wtop}"
    );
    if still_running {
        assert!(
            in_window > 0.0,
            "a window while it ran holds waits:\n{wtop}"
        );
        assert!(cum(&wtop, "site_a") + cum(&wtop, "site_b") > 0.0, "{wtop}");
    }
}

/// With stacks off in the agent's config, the profile is refused with the reason.
fn without_stacks_the_profile_says_why() {
    let dir = TempDir::new("agent-profile-off");
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        "[stacks]\nenabled = false\n[agent]\nlisten = \"127.0.0.1:17531\"\n[[agent.select]]\ncomm = \"two_sites\"\n",
    )
    .unwrap();
    let _agent = spawn(
        Command::new(rtm_bin())
            .arg("agent")
            .arg("--config")
            .arg(&config),
    );
    let addr = "127.0.0.1:17531";
    wait_for("the agent's /readyz", Duration::from_secs(20), || {
        TcpStream::connect(addr).is_ok() && get(addr, "/readyz").0 == 200
    });
    let mut app = spawn(Command::new(workload("two_sites")).args(["2", "2000"]));
    let (status, body) = get(addr, PATH);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("[stacks] enabled = false"), "{body}");
    let _ = app.child.wait();
}
