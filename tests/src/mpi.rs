//! The MPI ring workload (tests/workloads/mpi_ring.c): the traffic it documents, and
//! reading a task graph's edges back.

use std::collections::BTreeMap;

use serde_json::Value;

/// Ring steps the tests run.
pub const STEPS: u64 = 10;

/// Lines sorted (ranks print in any order).
pub fn sorted_lines(b: &[u8]) -> Vec<String> {
    let mut l: Vec<String> = String::from_utf8_lossy(b)
        .lines()
        .map(str::to_owned)
        .collect();
    l.sort();
    l
}

/// The traffic mpi_ring.c documents with `ranks` ranks: (src, dst) -> (messages, bytes,
/// messages of unknown size).
pub fn expected(ranks: i64, derived_sizes: bool) -> BTreeMap<(i64, i64), (u64, u64, u64)> {
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

pub fn side(e: &Value, which: &str) -> (u64, u64, u64) {
    let s = &e[which];
    assert!(!s.is_null(), "{which} missing on {e}");
    (
        s["messages"].as_u64().unwrap(),
        s["bytes"].as_u64().unwrap(),
        s["unknown_size"].as_u64().unwrap(),
    )
}

/// Every edge of a task graph as (src, dst) -> the sender's (messages, bytes, unknown
/// sizes), asserting both sides are known and agree.
pub fn edges(task_graph: &Value) -> BTreeMap<(i64, i64), (u64, u64, u64)> {
    let mut seen = BTreeMap::new();
    for e in task_graph["edges"].as_array().expect("edges") {
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
    seen
}
