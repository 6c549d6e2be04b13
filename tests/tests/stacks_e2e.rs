//! Call stacks in contention mode: the waiter's and the waker's user stacks of each
//! contended wait, unwound without frame pointers. The workload's call chains are known
//! from its source (worker -> lock_a -> lock_b -> lock_c -> pthread_mutex_lock, and the
//! same through unlock_a/b/c), and each woken wait's stacks are counted against the
//! waits the tracer's own wait records say were woken by a thread.

use std::{process::Command, time::Duration};

use rtm_tests::{
    TempDir, Value, decode_timeline, perfetto_python, rtm_bin, run, workload,
};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(waiter_and_releaser_chains_without_frame_pointers, Root),
    e2e!(waiter_and_releaser_chains_with_frame_pointers, Root),
    e2e!(waiter_and_releaser_chains_in_a_static_program, Root),
    e2e!(full_mode_sees_through_the_return_probes, Root),
    e2e!(no_stacks_when_asked_for_none, Root),
    e2e!(a_stripped_program_shows_file_and_offset_never_a_wrong_name, Root),
    e2e!(a_program_in_another_mount_namespace_is_named_through_its_mappings, Root),
    e2e!(the_timeline_has_each_woken_waits_stacks_at_its_wake, Root, PerfettoSchema),
    e2e!(one_letter_functions_are_named_as_their_symbols_not_as_types, Root),
    e2e!(folded_stacks_set_idle_waits_apart_from_contention, Root),
];

/// What a traced run of `stack_workload` left.
struct Traced {
    json: Value,
    report: String,
    folded: String,
    html: String,
    stdout: String,
}

fn traced(program: &str, options: &[&str]) -> Traced {
    let args = [workload(program).display().to_string()];
    traced_command(options, &args, &["4", "1000", "30"])
}

/// Traces `command` (then `args`) launched by rtm-trace with `options`.
fn traced_command(options: &[&str], command: &[String], args: &[&str]) -> Traced {
    let dir = TempDir::new("stacks");
    let (json, report, folded, html) = (
        dir.join("t.json"),
        dir.join("report.txt"),
        dir.join("t.folded"),
        dir.join("t.html"),
    );
    let out = run(
        Command::new(rtm_bin())
            .arg("--json")
            .arg(&json)
            .arg("-o")
            .arg(&report)
            .arg("--folded")
            .arg(&folded)
            .arg("--html")
            .arg(&html)
            // Every wait's stacks: the checks follow each one (sampling has its own test).
            .args(["--stack-rate", "all"])
            .args(options)
            .arg("--")
            .args(command)
            .args(args),
        Duration::from_secs(120),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    Traced {
        json: serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap(),
        report: std::fs::read_to_string(&report).unwrap(),
        folded: std::fs::read_to_string(&folded).unwrap_or_default(),
        html: std::fs::read_to_string(&html).unwrap_or_default(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// The workload's `key=0x...` address.
fn address(stdout: &str, key: &str) -> String {
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {stdout}"))
        .to_owned()
}

fn frames(row: &Value, side: &str) -> Vec<String> {
    row[side]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

/// Asserts that `names` appear in `stack` as functions of the workload's source, in
/// this order, innermost first.
fn in_order(stack: &[String], names: &[&str]) {
    in_order_in(stack, "stack_workload.c", names);
}

/// Asserts that `names` appear in `stack` as functions of the source file `file`, in
/// this order, innermost first.
fn in_order_in(stack: &[String], file: &str, names: &[&str]) {
    let mut last = None;
    for n in names {
        let at = stack
            .iter()
            .position(|f| f.starts_with(&format!("{n}+")) && f.contains(&format!("{file}:")))
            .unwrap_or_else(|| panic!("no frame {n} (with its source line) in {stack:#?}"));
        assert!(last < Some(at), "{n} out of order in {stack:#?}");
        last = Some(at);
    }
}

fn check(t: &Traced) {
    let stacks = &t.json["sync_graph"]["stacks"];
    let rows = stacks["rows"].as_array().expect("stacks in the JSON");
    let chain = address(&t.stdout, "chain_lock");
    let cache = address(&t.stdout, "cache_lock");
    let on = |addr: &str| -> Vec<&Value> {
        rows.iter()
            .filter(|r| r["object"].as_str() == Some(addr))
            .collect()
    };
    let chain_rows = on(&chain);
    assert!(
        !chain_rows.is_empty(),
        "no stacks for chain_lock: {stacks:#}"
    );
    // A stack can be missing (its record lost, its pages unreadable, its process's
    // mappings not known in time): such waits count with that side empty, and the
    // counters say why. Every stack that is known is the workload's chain. Stacks are
    // sampled: the waits whose stacks were taken are the samples.
    let waits = |rows: &[&Value], side: &str, known: bool| -> u64 {
        rows.iter()
            .filter(|r| frames(r, side).is_empty() != known)
            .map(|r| r["samples"].as_u64().unwrap())
            .sum()
    };
    let c = &stacks["counters"];
    let missing = [
        "not_unwound",
        "unreadable",
        "waiter_other_process",
        "wake_unseen",
    ]
    .iter()
    .map(|k| c[*k].as_u64().unwrap())
    .sum::<u64>();
    for side in ["waiter", "waker"] {
        let (known, unknown) = (
            waits(&chain_rows, side, true),
            waits(&chain_rows, side, false),
        );
        assert!(
            unknown <= missing,
            "{unknown} {side} stacks missing, counters {c}"
        );
        // A waker's side is missing by design when the wake came before the wait's
        // sleep (wake_unseen: the waker's context was gone by then); of the others, nine
        // in ten are unwound.
        let raced = if side == "waker" {
            unknown.min(c["wake_unseen"].as_u64().unwrap())
        } else {
            0
        };
        assert!(
            known >= 9 * (known + unknown - raced) / 10,
            "{known} of {} {side} stacks known ({raced} raced their sleep), counters {c}",
            known + unknown
        );
    }
    for r in chain_rows
        .iter()
        .filter(|r| !frames(r, "waiter").is_empty())
    {
        assert_eq!(r["object_name"], "chain_lock");
        // lock_c calls pthread_mutex_lock from take_lock, inlined into it.
        let w = frames(r, "waiter");
        let lock_c = w
            .iter()
            .find(|f| f.starts_with("lock_c+"))
            .unwrap_or_else(|| panic!("no lock_c frame in {r:#}; counters {c:#}"));
        assert!(
            lock_c.contains("[inlined: take_lock (stack_workload.c:"),
            "{lock_c}"
        );
        in_order(
            &frames(r, "waiter"),
            &["lock_c", "lock_b", "lock_a", "worker"],
        );
        if !frames(r, "waker").is_empty() {
            in_order(
                &frames(r, "waker"),
                &["unlock_c", "unlock_b", "unlock_a", "worker"],
            );
        }
    }
    // The heap mutex is named by the code that waits on it.
    let cache_rows = on(&cache);
    assert!(!cache_rows.is_empty(), "no stacks for the cache lock");
    for r in cache_rows
        .iter()
        .filter(|r| !frames(r, "waiter").is_empty())
    {
        let name = r["object_name"].as_str().unwrap();
        assert!(
            name.starts_with("in cache_get (stack_workload.c:"),
            "{name}"
        );
        in_order(&frames(r, "waiter"), &["cache_get", "worker"]);
    }
    // The lock inside a stdio FILE: the caller's frames above the C library's.
    let stdio = address(&t.stdout, "stdio_lock");
    let stdio_rows = on(&stdio);
    assert!(
        !stdio_rows.is_empty(),
        "no stacks for the FILE lock: {stacks:#}"
    );
    for r in stdio_rows
        .iter()
        .filter(|r| !frames(r, "waiter").is_empty())
    {
        let name = r["object_name"].as_str().unwrap();
        assert!(name.starts_with("in log_line (stack_workload.c:"), "{name}");
        let w = frames(r, "waiter");
        let fputs = w.iter().position(|f| f.contains("fputs"));
        let caller = w.iter().position(|f| f.starts_with("log_line+"));
        assert!(fputs.is_some() && fputs < caller, "{w:#?}");
        in_order(&w, &["log_line", "worker"]);
    }
    // A wait no thread woke (a condition variable's, until its 30 ms timeout) has the
    // waiter's stack, taken as it went to sleep, and no waker.
    let idle = rows
        .iter()
        .find(|r| {
            r["object_name"]
                .as_str()
                .is_some_and(|n| n.starts_with("idle_cond"))
        })
        .unwrap_or_else(|| panic!("no stacks for the timed-out wait: {stacks:#}"));
    assert_eq!(idle["waker_pid"], 0, "{idle}");
    assert!(idle["wait_ns"].as_u64().unwrap() >= 25_000_000, "{idle}");
    in_order(&frames(idle, "waiter"), &["wait_timeout", "main"]);
    assert!(t.stdout.contains("timedwait=timeout"), "{}", t.stdout);
    // Each wait a thread woke has its stacks: as many as the wait records counted.
    let woken: u64 = t.json["sync_graph"]["waits_for"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["object"].as_str() == Some(&chain) && w["at_exit"] == false)
        .map(|w| w["count"].as_u64().unwrap())
        .sum();
    let stacked: u64 = chain_rows
        .iter()
        .filter(|r| r["waker_pid"].as_u64() != Some(0))
        .map(|r| r["waits"].as_u64().unwrap())
        .sum();
    // A wake that raced its wait's sleep (the wake seen first) may leave a waiter's stack
    // without its waker's side (wake_unseen), rarely.
    assert!(
        stacked <= woken && woken - stacked <= (woken / 50).max(2),
        "stacks {stacked} vs woken waits {woken} on chain_lock, counters {c}"
    );
    // Missing stacks are rare: at most a tenth of the stacks (two a record).
    assert!(missing * 10 <= 2 * c["records"].as_u64().unwrap(), "{c}");
    // The report shows the chain, and the folded file folds it root first.
    assert!(t.report.contains("Where they waited and who let them go"));
    assert!(t.report.contains("lock_b+"), "{}", t.report);
    assert!(t.report.contains("in cache_get (stack_workload.c:"));
    // The page has a tab of them, frames as text.
    assert!(t.html.contains("data-tab=\"stacks\""), "no call stacks tab");
    assert!(
        t.html.contains("<li>lock_b+"),
        "no lock_b frame in the page"
    );
    let line = t
        .folded
        .lines()
        .find(|l| l.starts_with("contention:mutex;chain_lock;"))
        .unwrap_or_else(|| panic!("no mutex chain_lock line in {}", t.folded));
    let at = |s: &str| line.find(s).unwrap_or_else(|| panic!("no {s} in {line}"));
    assert!(at(";worker;lock_a;lock_b;lock_c;") < at(";--;"), "{line}");
    assert!(
        at(";--;") < at(";unlock_c;unlock_b;unlock_a;worker;"),
        "{line}"
    );
    let total: u64 = t
        .folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let rows_ns: u64 = rows.iter().map(|r| r["wait_ns"].as_u64().unwrap()).sum();
    assert_eq!(
        total,
        rows_ns + stacks["other_wait_ns"].as_u64().unwrap(),
        "the folded file holds every wait"
    );
}

fn waiter_and_releaser_chains_without_frame_pointers() {
    let t = traced("stack_workload", &[]);
    check(&t);
}

fn waiter_and_releaser_chains_with_frame_pointers() {
    let t = traced("stack_workload_fp", &[]);
    check(&t);
}

fn waiter_and_releaser_chains_in_a_static_program() {
    let t = traced("stack_workload_static", &[]);
    check(&t);
}

fn full_mode_sees_through_the_return_probes() {
    // Full mode's return probes put the kernel's trampoline in place of each probed
    // call's return address (pthread_cond_timedwait's, pthread_join's; the lock call
    // has none): the chains go on past them to the workload's functions.
    let t = traced("stack_workload", &["--mode", "full"]);
    check(&t);
}

fn no_stacks_when_asked_for_none() {
    let t = traced("stack_workload", &["--no-stacks"]);
    assert!(t.json["sync_graph"].get("stacks").is_none());
    assert!(!t.report.contains("Where they waited and who let them go"));
    // The waits are still there.
    assert!(t.report.contains("chain_lock"), "{}", t.report);
}

fn a_stripped_program_shows_file_and_offset_never_a_wrong_name() {
    let t = traced("stack_workload_stripped", &[]);
    let rows = t.json["sync_graph"]["stacks"]["rows"]
        .as_array()
        .unwrap()
        .clone();
    let chain = address(&t.stdout, "chain_lock");
    let chain_rows: Vec<&Value> = rows
        .iter()
        .filter(|r| r["object"].as_str() == Some(chain.as_str()))
        .collect();
    assert!(!chain_rows.is_empty(), "no stacks for chain_lock");
    // A side can be missing (a record lost, a waiter woken before it slept): `check`
    // counts those; here every side that is known is looked at, and most are.
    let known = chain_rows
        .iter()
        .filter(|r| !frames(r, "waiter").is_empty() && !frames(r, "waker").is_empty())
        .count();
    assert!(known * 2 >= chain_rows.len(), "{chain_rows:#?}");
    for r in chain_rows {
        // No symbol for the lock, and none made up from the code around it: at most
        // the program's own call site, by file and offset.
        assert!(
            r["object_name"].is_null()
                || r["object_name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("in stack_workload_stripped+0x")),
            "{r}"
        );
        for side in ["waiter", "waker"] {
            let f = frames(r, side);
            if f.is_empty() {
                continue;
            }
            // lock_c/b/a or unlock_c/b/a, then worker: four frames of the program,
            // each shown as the file and an offset.
            let own = f
                .iter()
                .filter(|n| n.starts_with("stack_workload_stripped+0x"))
                .count();
            assert!(own >= 4, "{f:#?}");
            let made_up = |n: &String| {
                ["lock_", "unlock_", "worker+"]
                    .iter()
                    .any(|p| n.starts_with(p))
            };
            assert!(
                !f.iter().any(made_up),
                "a name the stripped file does not have: {f:#?}"
            );
            // The C library's frames are still named.
            assert!(f.iter().any(|n| n.contains("pthread_mutex")), "{f:#?}");
        }
    }
}

fn a_program_in_another_mount_namespace_is_named_through_its_mappings() {
    // The program runs from a tmpfs mounted only in its own mount namespace: its path
    // names nothing (an empty directory) in the tracer's.
    let dir = TempDir::new("stacks-ns");
    let bin = workload("stack_workload");
    let script = format!(
        "mount -t tmpfs tmpfs {d} && cp {b} {d}/prog && exec {d}/prog \"$@\"",
        d = dir.0.display(),
        b = bin.display()
    );
    let command = [
        "unshare".to_string(),
        "-m".into(),
        "--propagation".into(),
        "private".into(),
        "sh".into(),
        "-c".into(),
        script,
        "sh".into(),
    ];
    let t = traced_command(&[], &command, &["4", "1000", "30"]);
    assert!(
        !dir.0.join("prog").exists(),
        "the tmpfs leaked into this namespace"
    );
    let rows = t.json["sync_graph"]["stacks"]["rows"]
        .as_array()
        .unwrap()
        .clone();
    let chain = address(&t.stdout, "chain_lock");
    let row = rows
        .iter()
        .find(|r| r["object"].as_str() == Some(chain.as_str()))
        .unwrap_or_else(|| panic!("no stacks for chain_lock: {rows:#?}"));
    assert_eq!(row["object_name"], "chain_lock");
    in_order(
        &frames(row, "waiter"),
        &["lock_c", "lock_b", "lock_a", "worker"],
    );
    in_order(
        &frames(row, "waker"),
        &["unlock_c", "unlock_b", "unlock_a", "worker"],
    );
}

fn the_timeline_has_each_woken_waits_stacks_at_its_wake() {
    let python = perfetto_python();
    let dir = TempDir::new("stacks-timeline");
    let file = dir.join("t.pftrace");
    let out = run(
        Command::new(rtm_bin())
            .arg("--timeline")
            .arg(&file)
            // Each wait's stacks (sampled by default).
            .args(["--stack-rate", "all"])
            .args(["-o", "/dev/null", "--"])
            .arg(workload("stack_workload"))
            .args(["4", "400", "30"]),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Decoded with Perfetto's published schema.
    let doc = decode_timeline(&python, &file);
    let list = |k: &str| doc[k].as_array().unwrap().clone();
    let woken: Vec<Value> = list("slices")
        .into_iter()
        .filter(|s| {
            let name = s["name"].as_str().unwrap_or("");
            name.starts_with("wait ")
                && !name.starts_with("wait exit")
                && s["args"]["waker tid"].is_i64()
        })
        .collect();
    // Each wait's stacks are Perfetto's interned callstacks (outermost frame first): a
    // `waited in` instant on the waiter's track at the wake, and a `woke a waiter`
    // instant on the waker's track at the same time, naming the woken thread.
    let instants = list("instants");
    let named =
        |name: &str| -> Vec<&Value> { instants.iter().filter(|i| i["name"] == name).collect() };
    let stack_of = |i: &Value| -> Vec<String> {
        i["callstack"]
            .as_array()
            .map(|a| a.iter().map(|f| f.as_str().unwrap().to_owned()).collect())
            .unwrap_or_default()
    };
    let waited_in = named("waited in");
    let woke = named("woke a waiter");
    let tid_of = |track: &Value| -> u64 {
        list("tracks")
            .iter()
            .find(|t| t["uuid"] == *track)
            .and_then(|t| t["tid"].as_u64())
            .unwrap_or_else(|| panic!("no thread track {track}"))
    };
    // One `waited in` per wait a thread woke, where its sleep ended.
    let stacks: Vec<&Value> = waited_in
        .iter()
        .copied()
        .filter(|st| {
            woken
                .iter()
                .any(|w| w["track"] == st["track"] && w["end"] == st["ts"])
        })
        .collect();
    assert!(!woken.is_empty());
    assert_eq!(stacks.len(), woken.len(), "instants vs woken waits");
    let chain: Vec<&Value> = stacks
        .iter()
        .copied()
        .filter(|s| stack_of(s).iter().any(|f| f.starts_with("lock_b+")))
        .collect();
    assert!(!chain.is_empty(), "a wait on chain_lock");
    for s in &chain {
        in_order(
            &stack_of(s).into_iter().rev().collect::<Vec<_>>(),
            &["lock_c", "lock_b", "lock_a", "worker"],
        );
    }
    // Where the wake came from, known for each but a wake that came before its sleep:
    // on the waker's track at the same time, naming this thread.
    let waker_stack = |s: &Value| -> Option<Vec<String>> {
        let tid = tid_of(&s["track"]);
        woke.iter()
            .find(|k| k["ts"] == s["ts"] && k["args"]["woken tid"].as_u64() == Some(tid))
            .map(|k| stack_of(k))
    };
    let known = chain
        .iter()
        .filter(|s| {
            waker_stack(s).is_some_and(|st| {
                in_order(
                    &st.iter().rev().cloned().collect::<Vec<_>>(),
                    &["unlock_c", "unlock_b", "unlock_a", "worker"],
                );
                true
            })
        })
        .count();
    let unknown = chain
        .iter()
        .filter(|s| {
            s["args"]["woken from"]
                .as_str()
                .is_some_and(|t| t.starts_with("(not known"))
        })
        .count();
    assert_eq!(known + unknown, chain.len(), "{chain:#?}");
    // The unknown ones: wakes that came before their wait's thread had switched away,
    // from a context gone by its sleep (about one in five here, on two busy CPUs).
    assert!(
        known * 10 >= chain.len() * 6,
        "{known} of {} known",
        chain.len()
    );
}

/// The output of `tool args` (binutils), which must succeed.
fn binutils(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {tool} (binutils): {e}"));
    assert!(out.status.success(), "{tool} {args:?} failed");
    String::from_utf8(out.stdout).unwrap()
}

/// A C program's static functions named with one letter (w -> d -> the lock, w -> i ->
/// the unlock) are named as binutils name them: each of its frames by a function of its
/// symbol table (nm), at an address addr2line puts in that function and at that line;
/// never by the C++ types the letters also encode (wchar_t, double, int).
fn one_letter_functions_are_named_as_their_symbols_not_as_types() {
    let t = traced("short_names", &[]);
    let program = workload("short_names").display().to_string();
    // Function symbols (nm's t and T) by name.
    let functions: std::collections::HashMap<String, u64> =
        binutils("nm", &["--defined-only", &program])
            .lines()
            .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                [addr, "t" | "T", name] => {
                    Some((name.to_owned(), u64::from_str_radix(addr, 16).ok()?))
                }
                _ => None,
            })
            .collect();
    let lock = address(&t.stdout, "lock");
    let rows = t.json["sync_graph"]["stacks"]["rows"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|r| r["object"].as_str() == Some(lock.as_str()))
        .unwrap_or_else(|| panic!("no stacks for lock: {rows:#?}"));
    in_order_in(&frames(row, "waiter"), "short_names.c", &["d", "w"]);
    in_order_in(&frames(row, "waker"), "short_names.c", &["i", "w"]);
    let own: Vec<String> = rows
        .iter()
        .flat_map(|r| [frames(r, "waiter"), frames(r, "waker")])
        .flatten()
        .filter(|f| f.contains("short_names.c:"))
        .collect();
    for f in &own {
        // `NAME+0xOFF (short_names.c:LINE)`
        let (name, rest) = f.split_once('+').unwrap();
        let start = functions
            .get(name)
            .unwrap_or_else(|| panic!("{f}: {name} is no function of the program"));
        if f.contains("[inlined:") {
            // addr2line -f names the innermost function inlined there.
            continue;
        }
        let off = rest.strip_prefix("0x").unwrap().split(' ').next().unwrap();
        let line: String = rest
            .split("short_names.c:")
            .nth(1)
            .unwrap()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let at = format!("{:#x}", start + u64::from_str_radix(off, 16).unwrap());
        let truth = binutils("addr2line", &["-f", "-e", &program, &at]);
        let (truth_name, truth_line) = truth.trim_end().split_once('\n').unwrap();
        assert_eq!(truth_name, name, "{f}: addr2line says {truth}");
        // `PATH:LINE`, then maybe ` (discriminator N)`.
        let truth_line = truth_line.split_whitespace().next().unwrap();
        assert!(
            truth_line.ends_with(&format!("/short_names.c:{line}")),
            "{f}: addr2line says {truth}"
        );
    }
    for ty in ["wchar_t", "double", "int"] {
        assert!(
            !own.iter().any(|f| f.starts_with(&format!("{ty}+"))),
            "{own:#?}"
        );
        assert!(!t.report.contains(&format!(" {ty}+0x")), "{}", t.report);
    }
}

/// The folded stacks of a thread pool (thread_pool.c: workers idle on a condition
/// variable, main in pthread_join, the stats lock every request takes) start each line
/// with what the wait was for: the stats lock (the workload prints its address) under
/// `contention:mutex`, the pool's waits under `idle:condvar`, so that a flame graph of
/// contention is one filter away (`grep -v '^idle:'`), and nothing is lost.
fn folded_stacks_set_idle_waits_apart_from_contention() {
    let args = [workload("thread_pool").display().to_string()];
    let t = traced_command(&[], &args, &["1500"]);
    let lock = t
        .stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("stats_lock="))
        .unwrap_or_else(|| panic!("no stats_lock in {}", t.stdout))
        .to_owned();
    let objects = t.json["sync_graph"]["objects"].as_array().unwrap();
    let name = objects
        .iter()
        .find(|o| o["addr"].as_str() == Some(&lock))
        .and_then(|o| o["name"].as_str())
        .unwrap_or_else(|| panic!("no name for {lock}"))
        .replace(' ', "_");
    let roots = |prefix: &str| -> Vec<&str> {
        t.folded.lines().filter(|l| l.starts_with(prefix)).collect()
    };
    let lock_lines: Vec<&str> = t
        .folded
        .lines()
        .filter(|l| l.split(';').nth(1) == Some(name.as_str()))
        .collect();
    assert!(!lock_lines.is_empty(), "no {name} in {}", t.folded);
    for l in &lock_lines {
        assert!(l.starts_with("contention:mutex;"), "{l}");
    }
    let idle = roots("idle:condvar;");
    assert!(
        idle.iter().any(|l| l.contains(";pool_worker;")),
        "the pool's waits: {}",
        t.folded
    );
    for l in t
        .folded
        .lines()
        .filter(|l| !l.starts_with("[other_stacks]"))
    {
        let root = l.split(';').next().unwrap();
        assert!(
            root.starts_with("contention:") || root.starts_with("idle:") || root == "not_known",
            "{l}"
        );
    }
    // Nothing lost: the lines add up to the stacks' rows and the rest.
    let stacks = &t.json["sync_graph"]["stacks"];
    let total: u64 = t
        .folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    let rows_ns: u64 = stacks["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["wait_ns"].as_u64().unwrap())
        .sum();
    assert_eq!(total, rows_ns + stacks["other_wait_ns"].as_u64().unwrap());
}
