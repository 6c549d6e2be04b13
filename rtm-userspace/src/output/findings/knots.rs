//! Bottlenecks from the wait-for graph (wPerf's knots, OSDI 2018): threads are nodes, a
//! waiter -> waker edge weighs the time the waiter slept until that waker woke it. Edges
//! lighter than a share of the waiter's observed time are dropped; the strongly connected
//! components that no kept edge leaves are the places where waiting ends: threads that
//! wait only on each other (a knot), or one thread that waits on no other traced thread.
//! The one most waiting ends in is the bottleneck: speeding up anything else only makes
//! threads wait for it sooner. docs/findings.md says what it cannot see.

use std::collections::{BTreeMap, HashMap};

/// A thread: (pid, tid).
pub type Node = (u32, u32);

/// An edge is kept when its waiting is at least this share of the waiter's time.
const KEEP_SHARE: f64 = 0.02;

/// One waiter -> waker edge: its waiting, and on what.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitEdge {
    /// The thread that slept.
    pub waiter: Node,
    /// The thread whose wake ended the sleeps.
    pub waker: Node,
    /// Their total length, ns.
    pub wait_ns: u64,
    /// The object's display name.
    pub object: String,
    /// Waiting for work (a condition variable, a semaphore, ...), not for a lock.
    pub idle: bool,
}

/// Where waiting ends.
#[derive(Debug, Clone, PartialEq)]
pub struct Knot {
    /// Its threads, sorted.
    pub threads: Vec<Node>,
    /// Waiting between its threads, ns.
    pub inside_ns: u64,
    /// Waiting of other threads that ended with a wake from it, ns.
    pub into_ns: u64,
    /// The threads outside it whose kept edges lead into it.
    pub waiting_threads: usize,
    /// Objects of the waiting inside it (or into it, for a single thread), most first.
    pub objects: Vec<(String, u64)>,
    /// Of that waiting, the part that was for work (idle objects), ns.
    pub idle_ns: u64,
}

/// The knot the most waiting ends in; `None` when no kept edge exists.
pub fn bottleneck(edges: &[WaitEdge], observed: &HashMap<Node, u64>) -> Option<Knot> {
    // Sum edges per (waiter, waker) and keep the heavy ones.
    let mut pairs: BTreeMap<(Node, Node), u64> = BTreeMap::new();
    for e in edges.iter().filter(|e| e.waiter != e.waker) {
        *pairs.entry((e.waiter, e.waker)).or_default() += e.wait_ns;
    }
    let kept: Vec<(Node, Node, u64)> = pairs
        .into_iter()
        .filter(|((w, _), ns)| {
            let t = observed.get(w).copied().unwrap_or(0);
            t > 0 && *ns as f64 >= KEEP_SHARE * t as f64
        })
        .map(|((a, b), ns)| (a, b, ns))
        .collect();
    if kept.is_empty() {
        return None;
    }
    let mut nodes: Vec<Node> = kept.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let index: HashMap<Node, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for &(a, b, _) in &kept {
        out[index[&a]].push(index[&b]);
    }
    let comp = components(&out);
    let count = comp.iter().max().map_or(0, |m| m + 1);
    let mut leaves = vec![false; count];
    let (mut inside, mut into) = (vec![0u64; count], vec![0u64; count]);
    let mut waiting: Vec<Vec<usize>> = vec![Vec::new(); count];
    for &(a, b, ns) in &kept {
        let (ca, cb) = (comp[index[&a]], comp[index[&b]]);
        if ca == cb {
            inside[ca] += ns;
        } else {
            leaves[ca] = true;
            into[cb] += ns;
            waiting[cb].push(index[&a]);
        }
    }
    let best = (0..count)
        .filter(|&c| !leaves[c] && inside[c] + into[c] > 0)
        .max_by_key(|&c| (inside[c] + into[c], std::cmp::Reverse(c)))?;
    let threads: Vec<Node> = (0..nodes.len())
        .filter(|&i| comp[i] == best)
        .map(|i| nodes[i])
        .collect();
    let mut w = waiting[best].clone();
    w.sort_unstable();
    w.dedup();
    // What the waiting inside it (or, for one thread, into it) was on.
    let single = threads.len() == 1;
    let mut objects: BTreeMap<&str, u64> = BTreeMap::new();
    let mut idle_ns = 0;
    // Over the same edges as the figures it is a share of (those kept): the waits on
    // each object then add up to at most that waiting.
    let kept_pairs: std::collections::HashSet<(Node, Node)> =
        kept.iter().map(|&(a, b, _)| (a, b)).collect();
    for e in edges {
        let (a, b) = (threads.contains(&e.waiter), threads.contains(&e.waker));
        if b && (a || single) && e.waiter != e.waker && kept_pairs.contains(&(e.waiter, e.waker)) {
            *objects.entry(&e.object).or_default() += e.wait_ns;
            idle_ns += if e.idle { e.wait_ns } else { 0 };
        }
    }
    let mut objects: Vec<(String, u64)> = objects
        .into_iter()
        .map(|(o, ns)| (o.to_owned(), ns))
        .collect();
    objects.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Some(Knot {
        threads,
        inside_ns: inside[best],
        into_ns: into[best],
        waiting_threads: w.len(),
        objects,
        idle_ns,
    })
}

/// Strongly connected components (Tarjan, iterative): the component of each node.
fn components(out: &[Vec<usize>]) -> Vec<usize> {
    const NONE: usize = usize::MAX;
    let n = out.len();
    let (mut index, mut low, mut comp) = (vec![NONE; n], vec![0; n], vec![NONE; n]);
    let (mut on_stack, mut stack) = (vec![false; n], Vec::new());
    let (mut next, mut count) = (0, 0);
    for root in 0..n {
        if index[root] != NONE {
            continue;
        }
        // (node, next edge to look at)
        let mut call = vec![(root, 0usize)];
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut edge)) = call.last_mut() {
            if let Some(&w) = out[v].get(*edge) {
                *edge += 1;
                if index[w] == NONE {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(&(parent, _)) = call.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    comp[w] = count;
                    if w == v {
                        break;
                    }
                }
                count += 1;
            }
        }
    }
    comp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(waiter: u32, waker: u32, ms: u64, object: &str) -> WaitEdge {
        WaitEdge {
            waiter: (1, waiter),
            waker: (1, waker),
            wait_ns: ms * 1_000_000,
            object: object.into(),
            idle: object == "queue",
        }
    }

    fn all_observed(ms: u64, tids: &[u32]) -> HashMap<Node, u64> {
        tids.iter().map(|t| ((1, *t), ms * 1_000_000)).collect()
    }

    #[test]
    fn workers_waiting_on_each_other_are_the_knot_main_waits_on() {
        // Main joins worker 2; workers 2-4 wait on each other for a lock.
        let edges = [
            e(1, 2, 1000, "exit of thread 2"),
            e(2, 3, 200, "audit_lock"),
            e(3, 4, 150, "audit_lock"),
            e(4, 2, 180, "audit_lock"),
            e(3, 2, 5, "account"),
        ];
        let k = bottleneck(&edges, &all_observed(1000, &[1, 2, 3, 4])).expect("a knot");
        assert_eq!(k.threads, vec![(1, 2), (1, 3), (1, 4)]);
        assert_eq!(k.inside_ns, 530_000_000, "the 5 ms edge is under 2%");
        assert_eq!(k.into_ns, 1_000_000_000);
        assert_eq!(k.waiting_threads, 1);
        assert_eq!(k.objects[0], ("audit_lock".to_owned(), 530_000_000));
        assert_eq!(k.idle_ns, 0);
    }

    #[test]
    fn a_producer_others_wait_for_is_a_knot_of_one() {
        // Consumers 2 and 3 wait for producer 1, which rarely waits for them (under 2%).
        let edges = [
            e(2, 1, 600, "queue"),
            e(3, 1, 500, "queue"),
            e(1, 2, 10, "queue"),
        ];
        let k = bottleneck(&edges, &all_observed(1000, &[1, 2, 3])).expect("a knot");
        assert_eq!(k.threads, vec![(1, 1)]);
        assert_eq!(
            (k.inside_ns, k.into_ns, k.waiting_threads),
            (0, 1_100_000_000, 2)
        );
        assert_eq!(k.objects[0].0, "queue");
        assert_eq!(
            k.idle_ns, 1_100_000_000,
            "the objects of waiting into a single thread"
        );
    }

    /// The waiting on each object is a share of the waiting the finding counts: edges
    /// too light to keep (under 2% of their waiter's time) are in neither, so no
    /// object's share is over 100% (one was 137%).
    #[test]
    fn object_shares_are_of_the_kept_waiting() {
        let edges = [
            e(2, 1, 600, "lock"),
            e(3, 1, 10, "lock"),
            e(4, 1, 15, "lock"),
        ];
        let k = bottleneck(&edges, &all_observed(1000, &[1, 2, 3, 4])).expect("a knot");
        assert_eq!(k.threads, vec![(1, 1)]);
        assert_eq!(k.into_ns, 600_000_000);
        assert_eq!(k.objects, vec![("lock".to_owned(), 600_000_000)]);
    }

    #[test]
    fn light_waiting_makes_no_knot() {
        let edges = [e(2, 1, 5, "x"), e(1, 2, 5, "x")];
        assert_eq!(bottleneck(&edges, &all_observed(1000, &[1, 2])), None);
        assert_eq!(bottleneck(&[], &HashMap::new()), None);
    }

    #[test]
    fn components_of_a_chain_and_a_cycle() {
        // 0 -> 1 -> 2 -> 1, 3 alone.
        let c = components(&[vec![1], vec![2], vec![1], vec![]]);
        assert_eq!(c[1], c[2]);
        assert_ne!(c[0], c[1]);
        assert_ne!(c[3], c[0]);
    }
}
