//! Cluster-wide MPI in PromQL. One Open MPI job of 4 ranks whose ranks two agents split
//! by rule, as two nodes' agents would (MPMD: ranks 0-1 run `ring_left`, ranks 2-3
//! `ring_right`, copies of the ring workload), one real Prometheus scraping both: `sum by
//! (src, dst)` of the per-pair series is the job's communication matrix, equal to the
//! ring's own counts and to `rtm-trace merge` of two one-shot tracers' parts of the same
//! run (one per half, attached to the same ranks). The second agent shows one
//! destination per rank (`top_mpi_peers = 1`): the rest is in `dst="(other)"`, and every
//! rank's series still sum to what it sent.
//!
//! No timing is assumed: the ranks wait for a go file, made once both agents show
//! every rank traced and both tracers are attached; Prometheus is polled.

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use rtm_tests::{
    LineWatch, TempDir,
    agent::{Agent, Prometheus, sample, samples, wait_for},
    can_trace,
    mpi::{STEPS, edges, expected},
    read_json, rtm_bin, run, spawn, workload,
};

const T: Duration = Duration::from_secs(180);
const RANKS: i64 = 4;
/// Destinations shown per rank by the second agent.
const RIGHT_PEERS: usize = 1;

/// (src, dst) -> (messages, bytes), as the labels say them.
type Matrix = BTreeMap<(String, String), (u64, u64)>;

/// The running ranks of `program` (a copy's file name) by world rank.
fn ranks_of(program: &str) -> BTreeMap<i64, u32> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if !exe.ends_with(program) {
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

/// The matrix an agent showing `top(src)` destinations per rank exports for `pairs`
/// ((src, dst) -> (messages, bytes, ...)): each rank's busiest destinations (most
/// bytes), the rest in "(other)".
fn shown<V>(
    pairs: &BTreeMap<(i64, i64), V>,
    value: impl Fn(&V) -> (u64, u64),
    top: impl Fn(i64) -> usize,
) -> Matrix {
    let mut out = Matrix::new();
    for src in 0..RANKS {
        let mut dsts: Vec<(i64, (u64, u64))> = pairs
            .iter()
            .filter(|((s, _), _)| *s == src)
            .map(|((_, d), v)| (*d, value(v)))
            .collect();
        dsts.sort_by_key(|(d, (m, b))| (std::cmp::Reverse((*b, *m)), *d));
        let mut other = (0, 0);
        for (i, (d, (m, b))) in dsts.into_iter().enumerate() {
            if i < top(src) {
                out.insert((src.to_string(), d.to_string()), (m, b));
            } else {
                other = (other.0 + m, other.1 + b);
            }
        }
        out.insert((src.to_string(), "(other)".into()), other);
    }
    out
}

fn top_of(src: i64) -> usize {
    if src < 2 { 8 } else { RIGHT_PEERS }
}

/// `sum by (src, dst)` of the messages and bytes series, as Prometheus answers it.
fn promql_matrix(prom: &Prometheus) -> Matrix {
    let by_pair = |q: &str| -> BTreeMap<(String, String), u64> {
        prom.query(q)
            .into_iter()
            .map(|(l, v)| {
                let s = |k: &str| l[k].as_str().unwrap_or_default().to_owned();
                ((s("src"), s("dst")), v as u64)
            })
            .collect()
    };
    let messages = by_pair("sum by (src, dst) (rtm_mpi_pair_messages_sent_total)");
    let bytes = by_pair("sum by (src, dst) (rtm_mpi_pair_sent_bytes_total)");
    messages
        .into_iter()
        .map(|(k, m)| {
            let b = bytes.get(&k).copied().unwrap_or(u64::MAX);
            (k, (m, b))
        })
        .collect()
}

/// A one-shot tracer of `pids` writing `json`; returns once it is attached.
fn tracer(pids: &[u32], json: &Path) -> rtm_tests::Proc {
    let mut p = spawn(
        Command::new(rtm_bin())
            .args(["--mpi", "-o", "/dev/null", "--json"])
            .arg(json)
            .args(
                pids.iter()
                    .flat_map(|p| ["--pid".to_owned(), p.to_string()]),
            ),
    );
    let mut err = LineWatch::new(p.child.stderr.take().unwrap());
    err.wait_for("attached to PID", Duration::from_secs(60));
    p
}

#[test]
fn two_agents_give_the_jobs_matrix_in_promql() {
    if !can_trace("two_agents_give_the_jobs_matrix_in_promql") {
        return;
    }
    let ring = workload("mpi_ring_openmpi");
    assert!(
        ring.exists(),
        "{} was not built (cargo xtask setup installs Open MPI)",
        ring.display()
    );
    let dir = TempDir::new("agent-mpi-pairs");
    for copy in ["ring_left", "ring_right"] {
        std::fs::copy(&ring, dir.join(copy)).unwrap();
    }
    let go = dir.join("go");
    // Two agents, as on two nodes; series stay long after the ranks exit.
    let (dir_a, dir_b, dir_p) = (
        TempDir::new("agent-mpi-a"),
        TempDir::new("agent-mpi-b"),
        TempDir::new("agent-mpi-prom"),
    );
    let left = Agent::start(
        &dir_a,
        17492,
        "grace = 600.0\n[[agent.select]]\ncomm = \"ring_left\"\nmpi = true\n",
    );
    let right = Agent::start(
        &dir_b,
        17493,
        &format!(
            "grace = 600.0\ntop_mpi_peers = {RIGHT_PEERS}\n[[agent.select]]\ncomm = \"ring_right\"\nmpi = true\n"
        ),
    );
    let prom = Prometheus::scraping(
        &dir_p,
        19492,
        &[&left.addr, &right.addr],
        Some(&rtm_tests::mixin::file("rules.yml")),
    );

    let half = |program: &str| -> Vec<String> {
        vec![
            "-np".into(),
            "2".into(),
            dir.join(program).to_str().unwrap().into(),
            STEPS.to_string(),
            "0".into(),
            go.to_str().unwrap().into(),
        ]
    };
    let job = spawn(
        Command::new("mpirun.openmpi")
            .args(["--allow-run-as-root", "--oversubscribe"])
            .args(half("ring_left"))
            .arg(":")
            .args(half("ring_right")),
    );
    let mut ranks = BTreeMap::new();
    wait_for("the job's 4 ranks", Duration::from_secs(60), || {
        ranks = ranks_of("ring_left");
        ranks.extend(ranks_of("ring_right"));
        ranks.len() == RANKS as usize
    });
    assert_eq!(ranks.keys().copied().collect::<Vec<_>>(), [0, 1, 2, 3]);
    let (part_a, part_b) = (dir.join("a.json"), dir.join("b.json"));
    let ta = tracer(&[ranks[&0], ranks[&1]], &part_a);
    let tb = tracer(&[ranks[&2], ranks[&3]], &part_b);
    // Each agent traces its own two ranks, probes attached.
    for (agent, target) in [(&left, "ring_left"), (&right, "ring_right")] {
        wait_for(
            &format!("{target}'s ranks traced"),
            Duration::from_secs(60),
            || {
                let s = agent.scrape();
                sample(&s, &format!("rtm_target_processes{{target=\"{target}\"")) == Some(2.0)
                    && sample(&s, "rtm_uprobes_attached").unwrap_or(0.0) > 0.0
            },
        );
    }
    std::fs::write(&go, "").unwrap();
    let out = job.wait_output(T);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for t in [ta, tb] {
        let o = t.wait_output(T);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }

    // The independent measure: what the ring sends to whom.
    let truth = expected(RANKS, true);
    let want = shown(&truth, |v| (v.0, v.1), top_of);
    // The one-shot parts of the same run, merged.
    let merged_json = dir.join("merged.json");
    let m = run(
        Command::new(rtm_bin())
            .arg("merge")
            .args([&part_a, &part_b])
            .arg("--json")
            .arg(&merged_json),
        T,
    );
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let merged = read_json(&merged_json);
    let merged_edges = edges(&merged["task_graph"]);
    assert_eq!(merged_edges, truth, "merge against the ring's own counts");

    // Prometheus: the whole matrix once both agents' last updates are scraped.
    let mut last = Matrix::new();
    let took = wait_for("the matrix in Prometheus", Duration::from_secs(120), || {
        last = promql_matrix(&prom);
        last == want
    });
    println!("sum by (src, dst) after {took:?} (src, dst) -> (messages, bytes):");
    for (k, v) in &last {
        println!("  {k:?} -> {v:?}");
    }
    assert_eq!(
        last,
        shown(&merged_edges, |v| (v.0, v.1), top_of),
        "the PromQL matrix against merge's"
    );
    // Every rank's series sum to what it sent, (other) included.
    let sent_by_rank: BTreeMap<String, f64> = prom
        .query("sum by (rank) (rtm_mpi_messages_sent_total)")
        .into_iter()
        .map(|(l, v)| (l["rank"].as_str().unwrap().to_owned(), v))
        .collect();
    let pairs_by_src: BTreeMap<String, f64> = prom
        .query("sum by (src) (rtm_mpi_pair_messages_sent_total)")
        .into_iter()
        .map(|(l, v)| (l["src"].as_str().unwrap().to_owned(), v))
        .collect();
    assert_eq!(pairs_by_src, sent_by_rank);
    // One job, named as merge names it, from two agents.
    let job_id = merged["task_graph"]["ranks"][0]["job"]
        .as_str()
        .expect("the job in the merged ranks")
        .to_owned();
    let jobs = prom.query("count by (mpi_job, instance) (rtm_mpi_pair_messages_sent_total)");
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(
        jobs.iter().all(|(l, _)| l["mpi_job"] == job_id.as_str()),
        "{jobs:?} vs {job_id}"
    );
    // Bounded: at most ranks x (N + 1) series per family; the second agent's ranks
    // each have more destinations than it shows, so it is at its bound.
    let pair_series = |a: &Agent| samples(&a.scrape(), "rtm_mpi_pair_messages_sent_total{").len();
    assert!(pair_series(&left) <= 2 * (8 + 1));
    assert_eq!(pair_series(&right), 2 * (RIGHT_PEERS + 1));
    // The mixin's recording rule: the matrix's rate, by job and pair, across nodes.
    wait_for("the recording rule", Duration::from_secs(60), || {
        let r = prom.query("mpi_pair:rtm_mpi_pair_sent_bytes:rate5m");
        !r.is_empty()
            && r.iter().all(|(l, _)| {
                l["mpi_job"] == job_id.as_str()
                    && l["src"].is_string()
                    && l["dst"].is_string()
                    && l.get("instance").is_none()
            })
    });
}
