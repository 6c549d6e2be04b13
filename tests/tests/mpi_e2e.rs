//! MPI under a real mpirun: exact messages and bytes per (source, destination) world
//! rank, world-rank translation through a split communicator, a derived datatype, a
//! wildcard receive resolved from its status, collective counts, unchanged output.

use std::{collections::BTreeMap, process::Command, time::Duration};

use rtm_tests::{TempDir, Value, can_trace, read_json, rtm_bin, run, workload};

const T: Duration = Duration::from_secs(180);
const RANKS: i64 = 4;
const STEPS: u64 = 10;

fn mpirun() -> Vec<String> {
    let ring = workload("mpi_ring_openmpi");
    assert!(
        ring.exists(),
        "{} was not built: mpicc.openmpi is missing (cargo xtask setup installs openmpi)",
        ring.display()
    );
    [
        "mpirun.openmpi",
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &RANKS.to_string(),
        ring.to_str().unwrap(),
        &STEPS.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut l: Vec<String> = String::from_utf8_lossy(b)
        .lines()
        .map(str::to_owned)
        .collect();
    l.sort();
    l
}

/// The traffic mpi_ring.c documents: (src, dst) -> (messages, bytes).
fn expected() -> BTreeMap<(i64, i64), (u64, u64)> {
    let mut e: BTreeMap<(i64, i64), (u64, u64)> = BTreeMap::new();
    let mut add = |s: i64, d: i64, m: u64, b: u64| {
        let v = e.entry((s, d)).or_default();
        v.0 += m;
        v.1 += b;
    };
    for r in 0..RANKS {
        let next = (r + 1) % RANKS;
        add(r, next, STEPS, STEPS * 100 * 8); // blocking ring, doubles
        add(r, next, STEPS, STEPS * 10 * 4); // Isend/Irecv, ints
        add(r, next, 1, 7); // Sendrecv, chars
        if r != 0 {
            add(r, 0, 1, 12); // to rank 0's MPI_ANY_SOURCE receives
        }
    }
    add(0, 2, 1, 20); // split communicator: its rank 0 -> 1 is world 0 -> 2
    add(1, 3, 1, 20);
    add(0, 1, 1, 64); // 2 elements of a 4-double contiguous type
    e
}

fn side(e: &Value, which: &str) -> (u64, u64) {
    let s = &e[which];
    assert!(!s.is_null(), "{which} missing on {e}");
    (
        s["messages"].as_u64().unwrap(),
        s["bytes"].as_u64().unwrap(),
    )
}

#[test]
fn open_mpi_ring_traffic_collectives_and_ranks_are_exact() {
    if !can_trace("open_mpi_ring_traffic_collectives_and_ranks_are_exact") {
        return;
    }
    let argv = mpirun();
    let plain = run(Command::new(&argv[0]).args(&argv[1..]), T);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );

    let dir = TempDir::new("mpi");
    let json = dir.join("o.json");
    let traced = run(
        Command::new(rtm_bin())
            .args(["-o", "/dev/null", "--json"])
            .arg(&json)
            .arg("--")
            .args(&argv),
        T,
    );
    assert!(
        traced.status.success(),
        "{}",
        String::from_utf8_lossy(&traced.stderr)
    );
    assert_eq!(
        sorted_lines(&plain.stdout),
        sorted_lines(&traced.stdout),
        "output changed"
    );

    let doc = read_json(&json);
    let t = &doc["task_graph"];
    assert!(!t.is_null(), "no task_graph in the JSON");

    let ranks: Vec<i64> = t["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_i64().expect("every rank identified"))
        .collect();
    assert_eq!(ranks, (0..RANKS).collect::<Vec<_>>());
    let jobs: std::collections::HashSet<String> = t["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job"].to_string())
        .collect();
    assert_eq!(jobs.len(), 1, "one job: {jobs:?}");

    let mut seen = BTreeMap::new();
    for e in t["edges"].as_array().unwrap() {
        let key = (
            e["src"].as_i64().expect("known source"),
            e["dst"].as_i64().expect("known destination"),
        );
        let sent = side(e, "sent");
        assert_eq!(
            sent,
            side(e, "received"),
            "sender and receiver disagree on {key:?}"
        );
        seen.insert(key, sent);
    }
    assert_eq!(seen, expected());

    let calls = |f: &str| -> (u64, Option<i64>) {
        let c = t["collectives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["function"] == f && c["comm_id"] == 0)
            .unwrap_or_else(|| panic!("no {f} on MPI_COMM_WORLD"));
        assert_eq!(c["ranks"], RANKS, "{f}");
        (c["calls"].as_u64().unwrap(), c["root"].as_i64())
    };
    let n = RANKS as u64;
    assert_eq!(calls("barrier"), (3 * n, None));
    assert_eq!(calls("bcast"), (2 * n, Some(0)));
    assert_eq!(calls("allreduce"), (4 * n, None));
    assert_eq!(calls("reduce"), (n, Some(1)));
    assert_eq!(calls("gather"), (n, Some(0)));
    assert_eq!(calls("allgather").0, n);
    assert_eq!(calls("alltoall").0, n);
    let c = &t["counters"];
    assert_eq!(c["unknown_source"], 0);
    assert_eq!(c["unmatched_completions"], 0);
    assert_eq!(t["open_requests"], 0);
}
