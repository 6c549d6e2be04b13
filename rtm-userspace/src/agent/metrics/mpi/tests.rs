use super::super::*;
use crate::analyses::mpi::{RankSummary, view::SentTo};

fn bounds(top_mpi_peers: usize) -> Bounds {
    Bounds {
        top_locks: 5,
        top_edges: 5,
        top_mpi_peers,
        sticky_updates: 10,
        max_series: 10_000,
    }
}

fn to(dst: Option<i32>, messages: u64, bytes: u64) -> SentTo {
    SentTo {
        dst,
        messages,
        bytes,
    }
}

/// A rank process of `job` (None: unknown) and world rank `rank`, which sent `sent`.
fn rank(pid: u32, job: Option<&str>, rank: Option<i32>, sent: Vec<SentTo>) -> ProcessSummary {
    let mut r = RankSummary {
        rank,
        job: job.map(str::to_owned),
        calls: 1,
        sent_to: sent,
        ..RankSummary::default()
    };
    for s in &r.sent_to {
        r.messages_sent += s.messages;
        r.bytes_sent += s.bytes;
    }
    ProcessSummary {
        pid,
        live: true,
        mpi: Some(r),
        ..ProcessSummary::default()
    }
}

fn metrics(n: usize, pids: &[u32]) -> Metrics {
    let mut m = Metrics::new(bounds(n));
    for &pid in pids {
        m.know(Arc::new(ProcInfo {
            pid,
            comm: "solver".into(),
            ..ProcInfo::default()
        }));
    }
    m
}

/// The series of `name` as (mpi_job, src or rank, dst or "") -> value.
fn series(fams: &[Family], name: &str) -> BTreeMap<(String, String, String), u64> {
    let f = fams.iter().find(|f| f.name == name).expect(name);
    let mut out = BTreeMap::new();
    for (l, v) in &f.samples {
        let get = |k: &str| {
            l.iter()
                .find(|x| x.0 == k)
                .map(|x| x.1.clone())
                .unwrap_or_default()
        };
        assert_eq!(get("target"), "solver", "{l:?}");
        let src = if name.contains("pair") {
            get("src")
        } else {
            get("rank")
        };
        let Value::Int(n) = v else {
            panic!("{name}: {v:?}")
        };
        let old = out.insert((get("mpi_job"), src, get("dst")), *n);
        assert!(old.is_none(), "{name}: one series twice: {l:?}");
    }
    out
}

fn key(job: &str, src: &str, dst: &str) -> (String, String, String) {
    (job.into(), src.into(), dst.into())
}

/// Two ranks of a job: each destination of each rank is a series with what it sent,
/// past the top 2 the rest (and the unknown destination) in dst="(other)", and a rank's
/// series sum to its rtm_mpi_messages_sent.
#[test]
fn a_rank_exports_its_top_destinations_and_the_rest_in_other() {
    let mut m = metrics(2, &[10, 11]);
    let s = Summary {
        processes: vec![
            rank(
                10,
                Some("job-7"),
                Some(0),
                vec![
                    to(Some(1), 10, 8_000),
                    to(Some(2), 3, 12),
                    to(Some(3), 2, 900),
                    to(None, 1, 4),
                ],
            ),
            rank(11, Some("job-7"), Some(1), vec![to(Some(0), 5, 40)]),
        ],
        ..Summary::default()
    };
    m.update(&s);
    let fams = m.families(&s, &SelfCounts::default());
    let msgs = series(&fams, "rtm_mpi_pair_messages_sent");
    let bytes = series(&fams, "rtm_mpi_pair_sent_bytes");
    let want = BTreeMap::from([
        (key("job-7", "0", "1"), (10, 8_000)),
        (key("job-7", "0", "3"), (2, 900)),
        (key("job-7", "0", "(other)"), (4, 16)),
        (key("job-7", "1", "0"), (5, 40)),
        (key("job-7", "1", "(other)"), (0, 0)),
    ]);
    let got: BTreeMap<_, _> = msgs
        .iter()
        .map(|(k, v)| (k.clone(), (*v, bytes[k])))
        .collect();
    assert_eq!(got, want);
    let per_rank = series(&fams, "rtm_mpi_messages_sent");
    assert_eq!(per_rank[&key("job-7", "0", "")], 16);
    assert_eq!(per_rank[&key("job-7", "1", "")], 5);
}

/// Two jobs traced by one agent, both with ranks 0 and 1, and a rank whose job and
/// world rank are unknown: each series is once, told apart by `mpi_job`; the unknown
/// job is "(unknown)", the unknown rank its pid.
#[test]
fn jobs_are_told_apart_and_unknowns_are_named() {
    let mut m = metrics(8, &[10, 11, 20, 21, 30]);
    let s = Summary {
        processes: vec![
            rank(10, Some("a"), Some(0), vec![to(Some(1), 4, 40)]),
            rank(11, Some("a"), Some(1), vec![to(Some(0), 4, 40)]),
            rank(20, Some("b"), Some(0), vec![to(Some(1), 7, 70)]),
            rank(21, Some("b"), Some(1), vec![to(Some(0), 7, 70)]),
            rank(30, None, None, vec![to(Some(0), 2, 2)]),
        ],
        ..Summary::default()
    };
    m.update(&s);
    let fams = m.families(&s, &SelfCounts::default());
    let msgs = series(&fams, "rtm_mpi_pair_messages_sent");
    assert_eq!(msgs[&key("a", "0", "1")], 4);
    assert_eq!(msgs[&key("b", "0", "1")], 7);
    assert_eq!(msgs[&key("b", "1", "0")], 7);
    assert_eq!(msgs[&key("(unknown)", "pid 30", "0")], 2);
    let per_rank = series(&fams, "rtm_mpi_messages_sent");
    assert_eq!(per_rank[&key("a", "1", "")], 4);
    assert_eq!(per_rank[&key("b", "1", "")], 7);
    assert_eq!(per_rank[&key("(unknown)", "pid 30", "")], 2);
}

/// As a rank goes on sending, with more destinations than shown: no pair series goes
/// down, and they always sum to what it sent.
#[test]
fn pair_series_only_grow_and_sum_to_what_the_rank_sent() {
    let mut m = metrics(1, &[10]);
    let mut last: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut sent = [0u64; 3];
    for step in 0..40u64 {
        // A different destination is busiest as the steps go.
        sent[(step / 7 % 3) as usize] += step + 1;
        sent[(step % 3) as usize] += 1;
        let list = (0..3)
            .map(|d| to(Some(d + 1), sent[d as usize], 10 * sent[d as usize]))
            .collect();
        let s = Summary {
            processes: vec![rank(10, Some("j"), Some(0), list)],
            ..Summary::default()
        };
        m.update(&s);
        let fams = m.families(&s, &SelfCounts::default());
        let msgs = series(&fams, "rtm_mpi_pair_messages_sent");
        assert!(msgs.len() <= 2, "top 1 and other: {msgs:?}");
        assert_eq!(
            msgs.values().sum::<u64>(),
            sent.iter().sum::<u64>(),
            "step {step}"
        );
        for (k, v) in &msgs {
            if let Some(old) = last.get(k) {
                assert!(v >= old, "{k:?} went down at step {step}");
            }
        }
        last = msgs;
    }
}
