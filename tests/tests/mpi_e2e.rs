//! MPI under real launchers (Open MPI's mpirun with 4 ranks, MPICH's mpiexec with 2:
//! more ranks than cores make MPICH busy-poll): exact messages and bytes per (source,
//! destination) world rank, world-rank translation through a split and a duplicated
//! communicator, a derived datatype, a wildcard receive resolved from its status,
//! collective counts, unchanged output.

use std::{collections::BTreeMap, process::Command, time::Duration};

use rtm_tests::{TempDir, Value, can_trace, read_json, rtm_bin, run, workload};

const T: Duration = Duration::from_secs(180);
const STEPS: u64 = 10;

/// One implementation's launch of the ring.
struct Launch {
    ranks: i64,
    argv: Vec<String>,
    /// Whether a derived datatype's size can be read (Open MPI: from the datatype
    /// object; MPICH: only builtin handles carry their size).
    derived_sizes: bool,
}

fn open_mpi() -> Launch {
    launch(
        true,
        "mpi_ring_openmpi",
        "openmpi",
        4,
        &[
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
        ],
    )
}

fn mpich() -> Launch {
    launch(
        false,
        "mpi_ring_mpich",
        "mpich",
        2,
        &["mpiexec.mpich", "-n"],
    )
}

fn launch(
    derived_sizes: bool,
    program: &str,
    package: &str,
    ranks: i64,
    launcher: &[&str],
) -> Launch {
    let ring = workload(program);
    assert!(
        ring.exists(),
        "{} was not built: its mpicc is missing (cargo xtask setup installs {package})",
        ring.display()
    );
    let mut argv: Vec<String> = launcher.iter().map(|s| s.to_string()).collect();
    argv.push(ranks.to_string());
    argv.push(ring.to_str().unwrap().to_owned());
    argv.push(STEPS.to_string());
    Launch {
        ranks,
        argv,
        derived_sizes,
    }
}

fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut l: Vec<String> = String::from_utf8_lossy(b)
        .lines()
        .map(str::to_owned)
        .collect();
    l.sort();
    l
}

/// The traffic mpi_ring.c documents with `ranks` ranks: (src, dst) -> (messages, bytes,
/// messages of unknown size).
fn expected(ranks: i64, derived_sizes: bool) -> BTreeMap<(i64, i64), (u64, u64, u64)> {
    let mut e: BTreeMap<(i64, i64), (u64, u64, u64)> = BTreeMap::new();
    let mut add = |s: i64, d: i64, m: u64, b: u64| {
        let v = e.entry((s, d)).or_default();
        v.0 += m;
        v.1 += b;
        v.2 += u64::from(b == 0);
    };
    for r in 0..ranks {
        let next = (r + 1) % ranks;
        add(r, next, STEPS, STEPS * 100 * 8); // blocking ring, doubles
        add(r, next, STEPS, STEPS * 10 * 4); // Isend/Irecv, ints
        add(r, next, 1, 7); // Sendrecv, chars
        if r != 0 {
            add(r, 0, 1, 12); // to rank 0's MPI_ANY_SOURCE receives
        }
    }
    // Split communicators {2g+1, 2g} (key -rank): their rank 0 -> 1 is world 2g+1 -> 2g,
    // 5 ints there and 2 ints in its duplicate.
    for g in 0..ranks / 2 {
        add(2 * g + 1, 2 * g, 2, 28);
    }
    // 2 elements of a 4-double contiguous type (64 bytes), when its size can be read.
    add(0, 1, 1, if derived_sizes { 64 } else { 0 });
    e
}

fn side(e: &Value, which: &str) -> (u64, u64, u64) {
    let s = &e[which];
    assert!(!s.is_null(), "{which} missing on {e}");
    (
        s["messages"].as_u64().unwrap(),
        s["bytes"].as_u64().unwrap(),
        s["unknown_size"].as_u64().unwrap(),
    )
}

#[test]
fn open_mpi_ring_traffic_collectives_and_ranks_are_exact() {
    if !can_trace("open_mpi_ring_traffic_collectives_and_ranks_are_exact") {
        return;
    }
    ring_is_exact(&open_mpi());
}

#[test]
fn mpich_ring_traffic_collectives_and_ranks_are_exact() {
    if !can_trace("mpich_ring_traffic_collectives_and_ranks_are_exact") {
        return;
    }
    ring_is_exact(&mpich());
}

fn ring_is_exact(l: &Launch) {
    let argv = &l.argv;
    let ranks = l.ranks;
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
            .args(argv),
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

    let identified: Vec<i64> = t["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_i64().expect("every rank identified"))
        .collect();
    assert_eq!(identified, (0..ranks).collect::<Vec<_>>());
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
    assert_eq!(seen, expected(ranks, l.derived_sizes));

    let calls = |f: &str| -> (u64, Option<i64>) {
        let c = t["collectives"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["function"] == f && c["comm_id"] == 0)
            .unwrap_or_else(|| panic!("no {f} on MPI_COMM_WORLD"));
        assert_eq!(c["ranks"], ranks, "{f}");
        (c["calls"].as_u64().unwrap(), c["root"].as_i64())
    };
    let n = ranks as u64;
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
    assert_eq!(c["untranslated_peer"], 0);
    assert_eq!(t["open_requests"], 0);
}
