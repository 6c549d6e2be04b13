//! Folded names: what many objects or threads of one kind share, so that a view grouped
//! by them has a bounded number of rows whatever the target does (a metrics endpoint's
//! label values). An array's elements fold into `name[]`, objects numbered apart
//! because they share a name (`in f (a.c:3) #2`) into that name, objects without a
//! symbol (on the heap, the stack or in an anonymous mapping) into `heap`, the waits for
//! threads' exits (joins) into one value, and digits in thread names into `N`.

/// Longest folded name, in characters (a name is cut, not refused).
pub const MAX_FOLDED: usize = 96;

/// The folded name of an object named `name` (None: no symbol).
pub fn object(name: Option<&str>) -> String {
    let Some(name) = name else {
        return "heap".to_owned();
    };
    if name.starts_with("exit of thread ") || is_numbered(name, "thread ") {
        return "thread exit".to_owned();
    }
    // "in f (a.c:3) #2": the objects numbered apart share the group of their name.
    let name = super::names::base(name);
    // "sym[3] (condvar, group 1)", "sym (condvar, group 1)": the condvar's own name.
    let name = name.split(" (").next().unwrap_or(name);
    let base = match (name.find('['), name.find("+0x")) {
        (Some(i), _) | (None, Some(i)) => format!("{}[]", &name[..i]),
        (None, None) => name.to_owned(),
    };
    clip(&base)
}

/// The folded name of a thread: each run of digits becomes `N` (`worker-17` ->
/// `worker-N`); None when the name is unknown.
pub fn thread(name: Option<&str>) -> String {
    let Some(name) = name else {
        return "unknown".to_owned();
    };
    let mut out = String::with_capacity(name.len());
    let mut in_digits = false;
    for c in name.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    clip(&out)
}

fn is_numbered(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// The value that stands for everything else in a grouped view: no folded name is it
/// (a name that starts with `(` gets a `_` before it).
pub const OTHER: &str = "(other)";

fn clip(s: &str) -> String {
    let s = if s.starts_with('(') {
        format!("_{s}")
    } else {
        s.to_owned()
    };
    match s.char_indices().nth(MAX_FOLDED) {
        Some((i, _)) => s[..i].to_owned(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_fold_arrays_heap_and_joins() {
        assert_eq!(object(None), "heap");
        assert_eq!(object(Some("queue_lock")), "queue_lock");
        assert_eq!(object(Some("account_locks+0x28")), "account_locks[]");
        assert_eq!(object(Some("account_locks")), "account_locks");
        // Element 0 of an array folds with the others.
        assert_eq!(object(Some("account_locks[0]")), "account_locks[]");
        assert_eq!(object(Some("account_locks[3]")), "account_locks[]");
        assert_eq!(object(Some("slots+0x0")), "slots[]");
        // Objects numbered apart fold into their shared name.
        assert_eq!(object(Some("in event_base_loop #3")), "in event_base_loop");
        assert_eq!(object(Some("in worker (many_locks.c:35) #12")), "in worker");
        assert_eq!(object(Some("lock #2")), "lock");
        assert_eq!(object(Some("cv[3] (condvar, group 1)")), "cv[]");
        assert_eq!(object(Some("cv (condvar, group 0)")), "cv");
        assert_eq!(object(Some("exit of thread 4242")), "thread exit");
        assert_eq!(object(Some("thread 17")), "thread exit");
        assert_eq!(object(Some("thread_pool_lock")), "thread_pool_lock");
        assert_eq!(object(Some(&"x".repeat(500))).len(), MAX_FOLDED);
    }

    #[test]
    fn thread_names_fold_their_digits() {
        assert_eq!(thread(Some("worker-17")), "worker-N");
        assert_eq!(thread(Some("worker-3")), "worker-N");
        assert_eq!(thread(Some("io2-worker-100")), "ioN-worker-N");
        assert_eq!(thread(Some("main")), "main");
        assert_eq!(thread(None), "unknown");
        assert_eq!(thread(Some("é1")), "éN");
        assert_eq!(thread(Some("(other)")), "_(other)");
        assert_eq!(object(Some("(other)")), "_(other)");
    }
}
