//! MPI under real launchers (Open MPI's mpirun with 4 ranks, MPICH's mpiexec with 2:
//! more ranks than cores make MPICH busy-poll): exact messages and bytes per (source,
//! destination) world rank, world-rank translation through a split and a duplicated
//! communicator, a derived datatype, a wildcard receive resolved from its status,
//! collective counts, unchanged output.

use std::{process::Command, time::Duration};

use rtm_tests::{
    TempDir, mpi::{STEPS, edges, expected, sorted_lines},
    read_json, rtm_bin, run, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(open_mpi_ring_traffic_collectives_and_ranks_are_exact, Root),
    e2e!(mpich_ring_traffic_collectives_and_ranks_are_exact, Root),
];

const T: Duration = Duration::from_secs(180);

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

fn open_mpi_ring_traffic_collectives_and_ranks_are_exact() {
    ring_is_exact(&open_mpi());
}

fn mpich_ring_traffic_collectives_and_ranks_are_exact() {
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
            .args(["--mpi", "-o", "/dev/null", "--json"])
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

    assert_eq!(edges(t), expected(ranks, l.derived_sizes));

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
    assert_eq!(calls("scatter"), (n, Some(0)));
    assert_eq!(calls("gatherv"), (n, Some(0)));
    assert_eq!(calls("scatterv"), (n, Some(0)));
    for f in [
        "allgatherv",
        "alltoallv",
        "reduce_scatter",
        "reduce_scatter_block",
    ] {
        assert_eq!(calls(f).0, n, "{f}");
    }
    let c = &t["counters"];
    assert_eq!(c["unknown_source"], 0);
    assert_eq!(c["unmatched_completions"], 0);
    assert_eq!(c["untranslated_peer"], 0);
    assert_eq!(t["open_requests"], 0);
}
