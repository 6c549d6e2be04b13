//! Attaching to the ranks of a running Open MPI job: `--comm NAME` picks every rank, and
//! two tracers that each attach to half of the ranks (as on two nodes) write parts that
//! `rtm-trace merge` joins into the whole job's task graph; mismatched parts are refused.

use std::{
    collections::BTreeMap,
    process::Command,
    time::{Duration, Instant},
};

use rtm_tests::{
    LineWatch, TempDir, mpi::{STEPS, edges, expected},
    read_json, rtm_bin, run, spawn, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(comm_attach_and_merged_halves_give_the_whole_job, Root),
];

const T: Duration = Duration::from_secs(120);
const RANKS: i64 = 4;
const PROGRAM: &str = "mpi_ring_openmpi";

/// Starts the job, whose ranks wait after MPI_Init for the file `go` (made once the
/// tracers are attached); returns it and world rank -> pid once every rank is up.
fn start_job(go: &std::path::Path) -> (rtm_tests::Proc, BTreeMap<i64, u32>) {
    let ring = workload(PROGRAM);
    assert!(
        ring.exists(),
        "{} was not built (cargo xtask setup installs openmpi)",
        ring.display()
    );
    let job = spawn(
        Command::new("mpirun.openmpi")
            .args([
                "--allow-run-as-root",
                "--oversubscribe",
                "-np",
                &RANKS.to_string(),
            ])
            .arg(&ring)
            .args([STEPS.to_string(), "0".into()])
            .arg(go),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ranks = ranks_of_job();
        if ranks.len() == RANKS as usize {
            return (job, ranks);
        }
        assert!(Instant::now() < deadline, "ranks did not start: {ranks:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The running ranks by world rank, from their environment.
fn ranks_of_job() -> BTreeMap<i64, u32> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if !exe.ends_with(PROGRAM) {
            continue;
        }
        let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let rank = env
            .split(|&b| b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok())
            .find_map(|kv| kv.strip_prefix("OMPI_COMM_WORLD_RANK="))
            .and_then(|v| v.parse().ok());
        if let Some(r) = rank {
            out.insert(r, pid);
        }
    }
    out
}

/// Starts a tracer with `args`, waits until it is attached, and returns it.
fn tracer(args: &[String], json: &std::path::Path) -> rtm_tests::Proc {
    let mut p = spawn(
        Command::new(rtm_bin())
            .args(["--mpi", "-o", "/dev/null", "--json"])
            .arg(json)
            .args(args),
    );
    let mut err = LineWatch::new(p.child.stderr.take().unwrap());
    err.wait_for("attached to PID", Duration::from_secs(60));
    p
}

fn comm_attach_and_merged_halves_give_the_whole_job() {
    let dir = TempDir::new("mpi-attach");

    // One tracer for every rank, picked by name.
    let go = dir.join("go-whole");
    let (job, ranks) = start_job(&go);
    let whole = dir.join("whole.json");
    let t = tracer(&["--comm".into(), PROGRAM.into()], &whole);
    std::fs::write(&go, "").unwrap();
    let out = job.wait_output(T);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(t.wait_output(T).status.success());
    let doc = read_json(&whole);
    let pids: Vec<u64> = doc["task_graph"]["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["pid"].as_u64().unwrap())
        .collect();
    let want: Vec<u64> = ranks.values().map(|&p| u64::from(p)).collect();
    assert_eq!(pids, want, "--comm found every rank, in rank order");
    assert_eq!(edges(&doc["task_graph"]), expected(RANKS, true));

    // Two tracers, ranks {0, 1} and {2, 3}, as on two nodes.
    let go = dir.join("go-halves");
    let (job, ranks) = start_job(&go);
    let half = |rs: [i64; 2]| -> Vec<String> {
        rs.iter()
            .flat_map(|r| ["--pid".to_string(), ranks[r].to_string()])
            .collect()
    };
    let (a, b) = (dir.join("a.json"), dir.join("b.json"));
    let ta = tracer(&half([0, 1]), &a);
    let tb = tracer(&half([2, 3]), &b);
    std::fs::write(&go, "").unwrap();
    assert!(job.wait_output(T).status.success());
    assert!(ta.wait_output(T).status.success());
    assert!(tb.wait_output(T).status.success());
    // Alone, a part knows only its own ranks' sides.
    let part = read_json(&a);
    assert!(
        part["task_graph"]["edges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["received"].is_null() || e["sent"].is_null())
    );

    let merged = dir.join("merged.json");
    let m = run(
        Command::new(rtm_bin())
            .args(["merge"])
            .args([&a, &b])
            .arg("--json")
            .arg(&merged),
        T,
    );
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let report = String::from_utf8_lossy(&m.stdout);
    assert!(report.contains("merged task graph"), "{report}");
    // One document feeds every output: `rtm-trace report` of the merged document prints
    // what the merge printed, byte for byte.
    let again = run(Command::new(rtm_bin()).arg("report").arg(&merged), T);
    assert!(again.status.success());
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        report,
        "the merge's report and `rtm-trace report` of its document"
    );
    let doc = read_json(&merged);
    assert_eq!(edges(&doc["task_graph"]), expected(RANKS, true));
    let n = doc["task_graph"]["ranks"].as_array().unwrap().len();
    assert_eq!(n, RANKS as usize);
    let barrier = doc["task_graph"]["collectives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["function"] == "barrier")
        .expect("barrier");
    assert_eq!(
        (barrier["ranks"].as_i64(), barrier["calls"].as_i64()),
        (Some(RANKS), Some(3 * RANKS))
    );

    // The same part twice: a rank traced twice is refused, with the reason.
    let twice = run(Command::new(rtm_bin()).args(["merge"]).args([&a, &a]), T);
    assert_eq!(twice.status.code(), Some(1));
    let msg = String::from_utf8_lossy(&twice.stderr);
    assert!(msg.contains("is in both"), "{msg}");
    // A part of another job: the whole-job run above.
    let other = run(
        Command::new(rtm_bin()).args(["merge"]).args([&whole, &b]),
        T,
    );
    let msg = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && msg.contains("different MPI jobs"),
        "{msg}"
    );
    // Not a part at all.
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{\"hello\": 1}").unwrap();
    let bad = run(Command::new(rtm_bin()).args(["merge"]).args([&a, &junk]), T);
    let msg = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && msg.contains("not an rtm-trace JSON"),
        "{msg}"
    );
}
