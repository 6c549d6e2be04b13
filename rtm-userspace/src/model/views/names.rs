//! Names that tell objects apart. An object's name comes from its symbol, or for a word
//! on the heap from the code that waits on it: objects reached from one call site (a
//! heap array of mutexes, every lock a library's wait function takes) would share one
//! name, and every output that groups or draws by name (the HTML graph, DOT, folded
//! stacks) would merge them. Within a process, objects that share a name are numbered
//! by address, `in worker (many_locks.c:35) #3`; the address stays in the JSON (`addr`).
//! The numbers are made once per snapshot, and every output reads the same ones.

use std::collections::HashMap;

/// The suffix that numbers the `n`th (from 1) object sharing a name.
fn numbered(name: &str, n: usize) -> String {
    format!("{name} #{n}")
}

/// `names` made unique within each process: objects (`(pid, address)`) that share a
/// name get ` #1`, ` #2`, ... in address order; a name no other object has is kept.
pub fn unique(names: HashMap<(u32, u64), String>) -> HashMap<(u32, u64), String> {
    let mut by_name: HashMap<(u32, &str), Vec<u64>> = HashMap::new();
    for ((pid, addr), name) in &names {
        by_name
            .entry((*pid, name.as_str()))
            .or_default()
            .push(*addr);
    }
    let mut renamed: Vec<((u32, u64), String)> = Vec::new();
    for ((pid, name), mut addrs) in by_name {
        if addrs.len() < 2 {
            continue;
        }
        addrs.sort_unstable();
        for (i, addr) in addrs.into_iter().enumerate() {
            renamed.push(((pid, addr), numbered(name, i + 1)));
        }
    }
    let mut names = names;
    names.extend(renamed);
    names
}

/// A name without the number [`unique`] gave it (for views that group objects of one
/// name on purpose: a metrics label).
pub fn base(name: &str) -> &str {
    match name.rsplit_once(" #") {
        Some((b, n)) if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: &[(u32, u64, &str)]) -> HashMap<(u32, u64), String> {
        v.iter()
            .map(|(p, a, n)| ((*p, *a), (*n).to_owned()))
            .collect()
    }

    #[test]
    fn objects_sharing_a_name_are_numbered_by_address() {
        let site = "in worker (many_locks.c:35)";
        let got = unique(map(&[
            (7, 0x3000, site),
            (7, 0x1000, site),
            (7, 0x2000, site),
            (7, 0x4000, "queue_lock"),
            // Another process's object of the same name is its own.
            (8, 0x1000, site),
        ]));
        assert_eq!(got[&(7, 0x1000)], format!("{site} #1"));
        assert_eq!(got[&(7, 0x2000)], format!("{site} #2"));
        assert_eq!(got[&(7, 0x3000)], format!("{site} #3"));
        assert_eq!(got[&(7, 0x4000)], "queue_lock");
        assert_eq!(got[&(8, 0x1000)], site);
        let mut names: Vec<&String> = got
            .iter()
            .filter(|(k, _)| k.0 == 7)
            .map(|(_, n)| n)
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 4, "one name per object");
    }

    #[test]
    fn the_number_comes_off_for_grouping() {
        assert_eq!(
            base("in worker (many_locks.c:35) #12"),
            "in worker (many_locks.c:35)"
        );
        assert_eq!(base("in event_base_loop #3"), "in event_base_loop");
        assert_eq!(base("queue_lock"), "queue_lock");
        assert_eq!(base("a #b"), "a #b");
        assert_eq!(base("a #"), "a #");
    }
}
