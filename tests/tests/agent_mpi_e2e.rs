//! Cluster-wide MPI in PromQL. One MPI job whose ranks two agents split by rule, as two
//! nodes' agents would (MPMD: the first half of the ranks run a copy of the ring
//! workload named `*_left`, the second half one named `*_right`), one real Prometheus
//! scraping both: `sum by (src, dst)` of the per-pair series is the job's communication
//! matrix, equal to the ring's own counts and to `rtm-trace merge` of two one-shot
//! tracers' parts of the same run (one per half, attached to the same ranks). The second
//! agent shows one destination per rank (`top_mpi_peers = 1`): the rest is in
//! `dst="(other)"`, and every rank's series still sum to what it sent. Open MPI with 4
//! ranks (its launcher names the job); MPICH with 2 (its launcher names no job:
//! `mpi_job="(unknown)"`; a split communicator's peer cannot be named with half the job
//! traced, by an agent or a one-shot part alike, so those 2 messages are in "(other)").
//!
//! No timing is assumed: the ranks wait for a go file, made once both agents show
//! every rank traced and both tracers are attached; Prometheus is polled.

use std::{collections::BTreeMap, path::Path, process::Command, time::Duration};

use rtm_tests::{
    LineWatch, TempDir,
    agent::{Agent, Prometheus, sample, samples, wait_for},
    mpi::{STEPS, edges, expected, side},
    read_json, rtm_bin, run, spawn, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(open_mpi_two_agents_give_the_jobs_matrix_in_promql, Root),
    e2e!(mpich_two_agents_give_the_jobs_matrix_in_promql, Root),
];

const T: Duration = Duration::from_secs(180);
/// Destinations shown per rank by the first agent (the default) and the second.
const LEFT_PEERS: usize = 8;
const RIGHT_PEERS: usize = 1;

/// One implementation's split job.
struct Launch {
    /// The workload built with its mpicc.
    program: &'static str,
    /// The launcher and its options.
    launcher: &'static [&'static str],
    /// Its option for a count of ranks.
    np: &'static str,
    /// The environment variable giving a rank its world rank.
    rank_var: &'static str,
    ranks: i64,
    /// Whether derived datatypes' sizes are read (Open MPI's, not MPICH's).
    derived_sizes: bool,
    /// Whether a split communicator's peers are named with half the job traced.
    split_known: bool,
    /// Prefix of the copies' names (`{prefix}_left`, `{prefix}_right`).
    prefix: &'static str,
    /// Loopback ports: the two agents and Prometheus.
    ports: [u16; 3],
}

/// (src, dst) -> (messages, bytes), as the labels say them.
type Matrix = BTreeMap<(String, String), (u64, u64)>;

/// The running ranks of `program` (a copy's file name) by world rank (`rank_var`).
fn ranks_of(program: &str, rank_var: &str) -> BTreeMap<i64, u32> {
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
            .find_map(|kv| kv.strip_prefix(rank_var)?.strip_prefix('='))
            .and_then(|v| v.parse().ok());
        if let Some(r) = rank {
            out.insert(r, pid);
        }
    }
    out
}

/// What each rank sent to whom: (src, dst) -> (messages, bytes); dst None: a
/// destination whose world rank is not known.
type Sent = BTreeMap<(i64, Option<i64>), (u64, u64)>;

/// The matrix the two agents export for `sent`: each rank's busiest destinations (most
/// bytes; LEFT_PEERS of them for the first half's ranks, RIGHT_PEERS for the second's),
/// the rest and the unknown ones in "(other)".
fn shown(sent: &Sent, ranks: i64) -> Matrix {
    let top = |src: i64| {
        if src < ranks / 2 {
            LEFT_PEERS
        } else {
            RIGHT_PEERS
        }
    };
    let mut out = Matrix::new();
    for src in 0..ranks {
        let mut dsts: Vec<(Option<i64>, (u64, u64))> = sent
            .iter()
            .filter(|((s, _), _)| *s == src)
            .map(|((_, d), v)| (*d, *v))
            .collect();
        dsts.sort_by_key(|(d, (m, b))| (d.is_none(), std::cmp::Reverse((*b, *m)), *d));
        let mut other = (0, 0);
        for (i, (d, (m, b))) in dsts.into_iter().enumerate() {
            match d {
                Some(d) if i < top(src) => {
                    out.insert((src.to_string(), d.to_string()), (m, b));
                }
                _ => other = (other.0 + m, other.1 + b),
            }
        }
        out.insert((src.to_string(), "(other)".into()), other);
    }
    out
}

/// The ring's own counts as the senders see them. `split_known`: whether a sender can
/// name the world rank its split communicator's peer has with only its own half of the
/// job traced (Open MPI: read through the communicator's group; MPICH: the split's rank
/// order needs every member's split, seen by the other half's tracer).
fn truth(ranks: i64, derived_sizes: bool, split_known: bool) -> Sent {
    let mut out = Sent::new();
    for ((src, dst), (m, b, _)) in expected(ranks, derived_sizes) {
        let v = out.entry((src, Some(dst))).or_default();
        *v = (v.0 + m, v.1 + b);
    }
    if !split_known {
        // mpi_ring.c step 5: 2 messages, 28 bytes, from world 2g+1 to 2g.
        for g in 0..ranks / 2 {
            let v = out.get_mut(&(2 * g + 1, Some(2 * g))).unwrap();
            *v = (v.0 - 2, v.1 - 28);
            out.insert((2 * g + 1, None), (2, 28));
        }
    }
    out
}

/// The senders' side of a task graph's edges.
fn sent_side(task_graph: &serde_json::Value) -> Sent {
    let mut out = Sent::new();
    for e in task_graph["edges"].as_array().expect("edges") {
        if e["sent"].is_null() {
            continue;
        }
        let (m, b, _) = side(e, "sent");
        let key = (e["src"].as_i64().expect("known source"), e["dst"].as_i64());
        let v = out.entry(key).or_default();
        *v = (v.0 + m, v.1 + b);
    }
    out
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

fn open_mpi_two_agents_give_the_jobs_matrix_in_promql() {
    split_job(&Launch {
        program: "mpi_ring_openmpi",
        launcher: &["mpirun.openmpi", "--allow-run-as-root", "--oversubscribe"],
        np: "-np",
        rank_var: "OMPI_COMM_WORLD_RANK",
        ranks: 4,
        derived_sizes: true,
        split_known: true,
        prefix: "ompi",
        ports: [17492, 17493, 19492],
    });
}

fn mpich_two_agents_give_the_jobs_matrix_in_promql() {
    // 2 ranks: more than cores make MPICH busy-poll.
    split_job(&Launch {
        program: "mpi_ring_mpich",
        launcher: &["mpiexec.mpich"],
        np: "-n",
        rank_var: "PMI_RANK",
        ranks: 2,
        derived_sizes: false,
        split_known: false,
        prefix: "mpich",
        ports: [17494, 17495, 19493],
    });
}

fn split_job(l: &Launch) {
    let ring = workload(l.program);
    assert!(
        ring.exists(),
        "{} was not built: its mpicc is missing (cargo xtask setup installs Open MPI and MPICH)",
        ring.display()
    );
    let dir = TempDir::new(&format!("agent-{}-pairs", l.prefix));
    let (left_name, right_name) = (format!("{}_left", l.prefix), format!("{}_right", l.prefix));
    for copy in [&left_name, &right_name] {
        std::fs::copy(&ring, dir.join(copy)).unwrap();
    }
    let go = dir.join("go");
    // Two agents, as on two nodes; series stay long after the ranks exit.
    let (dir_a, dir_b, dir_p) = (
        TempDir::new(&format!("agent-{}-a", l.prefix)),
        TempDir::new(&format!("agent-{}-b", l.prefix)),
        TempDir::new(&format!("agent-{}-prom", l.prefix)),
    );
    let rule = |name: &str| format!("[[agent.select]]\ncomm = \"{name}\"\nmpi = true\n");
    let left = Agent::start(
        &dir_a,
        l.ports[0],
        &format!("grace = 600.0\n{}", rule(&left_name)),
    );
    let right = Agent::start(
        &dir_b,
        l.ports[1],
        &format!(
            "grace = 600.0\ntop_mpi_peers = {RIGHT_PEERS}\n{}",
            rule(&right_name)
        ),
    );
    let prom = Prometheus::scraping(
        &dir_p,
        l.ports[2],
        &[&left.addr, &right.addr],
        Some(&rtm_tests::mixin::file("rules.yml")),
    );

    let half = |program: &str| -> Vec<String> {
        vec![
            l.np.into(),
            (l.ranks / 2).to_string(),
            dir.join(program).to_str().unwrap().into(),
            STEPS.to_string(),
            "0".into(),
            go.to_str().unwrap().into(),
        ]
    };
    let job = spawn(
        Command::new(l.launcher[0])
            .args(&l.launcher[1..])
            .args(half(&left_name))
            .arg(":")
            .args(half(&right_name)),
    );
    let mut ranks = BTreeMap::new();
    wait_for("the job's ranks", Duration::from_secs(60), || {
        ranks = ranks_of(&left_name, l.rank_var);
        ranks.extend(ranks_of(&right_name, l.rank_var));
        ranks.len() == l.ranks as usize
    });
    assert_eq!(
        ranks.keys().copied().collect::<Vec<_>>(),
        (0..l.ranks).collect::<Vec<_>>()
    );
    let pids = |r: std::ops::Range<i64>| -> Vec<u32> { r.map(|r| ranks[&r]).collect() };
    let (part_a, part_b) = (dir.join("a.json"), dir.join("b.json"));
    let ta = tracer(&pids(0..l.ranks / 2), &part_a);
    let tb = tracer(&pids(l.ranks / 2..l.ranks), &part_b);
    // Each agent traces its own half, probes attached.
    for (agent, target) in [(&left, &left_name), (&right, &right_name)] {
        wait_for(
            &format!("{target}'s ranks traced"),
            Duration::from_secs(60),
            || {
                let s = agent.scrape();
                sample(&s, &format!("rtm_target_processes{{target=\"{target}\""))
                    == Some((l.ranks / 2) as f64)
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
    let truth = truth(l.ranks, l.derived_sizes, l.split_known);
    let want = shown(&truth, l.ranks);
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
    let merged_sent = sent_side(&merged["task_graph"]);
    assert_eq!(merged_sent, truth, "merge against the ring's own counts");
    if l.split_known {
        // Both sides of every edge, as the one-shot tests check them.
        assert_eq!(
            edges(&merged["task_graph"]),
            expected(l.ranks, l.derived_sizes)
        );
    }

    // Prometheus: the whole matrix once both agents' last updates are scraped.
    let mut last = Matrix::new();
    let took = wait_for("the matrix in Prometheus", Duration::from_secs(120), || {
        last = promql_matrix(&prom);
        last == want
    });
    println!(
        "{}: sum by (src, dst) after {took:?}, (src, dst) -> (messages, bytes):",
        l.program
    );
    for (k, v) in &last {
        println!("  {k:?} -> {v:?}");
    }
    assert_eq!(
        last,
        shown(&merged_sent, l.ranks),
        "the PromQL matrix against merge's"
    );
    // Every rank's series sum to what it sent, (other) included.
    let by = |q: &str, label: &str| -> BTreeMap<String, f64> {
        prom.query(q)
            .into_iter()
            .map(|(m, v)| (m[label].as_str().unwrap().to_owned(), v))
            .collect()
    };
    let sent_by_rank = by("sum by (rank) (rtm_mpi_messages_sent_total)", "rank");
    assert_eq!(sent_by_rank.len(), l.ranks as usize, "{sent_by_rank:?}");
    assert_eq!(
        by("sum by (src) (rtm_mpi_pair_messages_sent_total)", "src"),
        sent_by_rank
    );
    // One job, named as merge names it, from two agents.
    let job_id = merged["task_graph"]["ranks"][0]["job"]
        .as_str()
        .unwrap_or("(unknown)")
        .to_owned();
    let jobs = prom.query("count by (mpi_job, instance) (rtm_mpi_pair_messages_sent_total)");
    assert_eq!(jobs.len(), 2, "{jobs:?}");
    assert!(
        jobs.iter().all(|(m, _)| m["mpi_job"] == job_id.as_str()),
        "{jobs:?} vs {job_id}"
    );
    // Bounded: at most ranks x (N + 1) series per family.
    let pair_series = |a: &Agent| samples(&a.scrape(), "rtm_mpi_pair_messages_sent_total{").len();
    let per_agent = (l.ranks / 2) as usize;
    assert!(pair_series(&left) <= per_agent * (LEFT_PEERS + 1));
    assert_eq!(pair_series(&right), per_agent * (RIGHT_PEERS + 1));
    // The mixin's recording rule: the matrix's rate, by job and pair, across nodes.
    wait_for("the recording rule", Duration::from_secs(60), || {
        let r = prom.query("mpi_pair:rtm_mpi_pair_sent_bytes:rate5m");
        !r.is_empty()
            && r.iter().all(|(m, _)| {
                m["mpi_job"] == job_id.as_str()
                    && m["src"].is_string()
                    && m["dst"].is_string()
                    && m.get("instance").is_none()
            })
    });
}
