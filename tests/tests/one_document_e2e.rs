//! One document feeds every output: the text report a run prints and `rtm-trace report`
//! of the JSON it wrote are the same bytes, in contention mode, in full mode (locks,
//! rwlocks, barriers, condition variables, semaphores), with timed functions (an
//! analysis of `analyses/`, carried as its own section) and for an MPI job (a merged
//! job's, `rtm-trace merge` against `rtm-trace report` of its document, is checked in
//! mpi_attach_e2e). Each report is also checked against the workload's own counts, so
//! "the same" is not "the same and empty".

use std::{path::Path, process::Command, time::Duration};

use rtm_tests::{TempDir, read_json, rtm_bin, run, truths, workload};
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(the_report_of_a_run_is_the_report_of_its_json_in_both_modes, Root),
    e2e!(every_primitives_section_comes_from_the_document, Root),
    e2e!(an_mpi_job_renders_the_same_from_its_document, Root),
    e2e!(timed_functions_render_the_same_from_their_section, Root),
];

const T: Duration = Duration::from_secs(180);

/// Traces `program` with `args` (its report to `report.txt`, its document to
/// `t.json`), renders the document again, and asserts both reports are the same bytes.
/// Returns the report and the traced program's standard output.
fn same_report(dir: &TempDir, args: &[&str], command: &[&str]) -> (String, String) {
    let out = run(
        Command::new(rtm_bin())
            .args(args)
            .arg("-o")
            .arg(dir.join("report.txt"))
            .arg("--json")
            .arg(dir.join("t.json"))
            .arg("--")
            .args(command),
        T,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    let again = render(&dir.join("t.json"));
    assert_same(&live, &again);
    (live, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `rtm-trace report FILE` (no root needed, nothing traced).
fn render(file: &Path) -> String {
    let out = run(Command::new(rtm_bin()).arg("report").arg(file), T);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the report is UTF-8")
}

/// Byte for byte, with the first differing line shown when not.
fn assert_same(live: &str, again: &str) {
    if live == again {
        return;
    }
    let first = live
        .lines()
        .zip(again.lines())
        .position(|(a, b)| a != b)
        .unwrap_or(live.lines().count().min(again.lines().count()));
    panic!(
        "the run's report and `rtm-trace report` of its JSON differ at line {}:\n  run:    {:?}\n  report: {:?}\n(lengths {} and {} bytes)",
        first + 1,
        live.lines().nth(first),
        again.lines().nth(first),
        live.len(),
        again.len()
    );
}

/// The cells of the report's table row whose first cells are `first`: a row's cells
/// are apart by runs of two or more spaces.
fn row<'a>(report: &'a str, first: &[&str]) -> Vec<&'a str> {
    report
        .lines()
        .map(|l| {
            l.trim()
                .split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
        })
        .find(|cells| cells.starts_with(first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{report}"))
}

fn count(s: &str) -> u64 {
    s.split_whitespace()
        .next()
        .unwrap_or("")
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a count: {s:?}"))
}

fn the_report_of_a_run_is_the_report_of_its_json_in_both_modes() {
    let mutex = workload("mutex_workload");
    let mutex = mutex.to_str().unwrap();
    let args = ["--threads", "4", "--iters", "300", "--hold-us", "200"];

    // Full mode: every acquisition the workload made is in the row of its lock.
    let dir = TempDir::new("one-doc-full");
    let mut command = vec![mutex];
    command.extend(args);
    let (report, stdout) = same_report(&dir, &["-m", "full"], &command);
    let shared: u64 = truths(&stdout).iter().map(|t| t.get("shared")).sum();
    let cells = row(&report, &["mutex shared_lock"]);
    assert_eq!(count(cells[2]), shared, "acquired, in:\n{report}");
    assert!(
        report.starts_with("== rtm-trace: final report =="),
        "{report}"
    );
    assert!(report.contains("in full mode"), "{report}");

    // Contention mode: the sleeps on the lock's word, as the JSON counts them; and the
    // same name for the lock as in full mode.
    let dir = TempDir::new("one-doc-contention");
    let (report, _) = same_report(&dir, &["-m", "contention"], &command);
    let doc = read_json(&dir.join("t.json"));
    let word = doc["sync_graph"]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "shared_lock")
        .unwrap_or_else(|| panic!("shared_lock in {doc}"));
    let cells = row(&report, &["mutex shared_lock"]);
    assert_eq!(
        count(cells[2]),
        word["contended"].as_u64().unwrap(),
        "sleeps, in:\n{report}"
    );
    assert!(report.contains("in contention mode"), "{report}");
}

fn every_primitives_section_comes_from_the_document() {
    let sync = workload("sync_workload");
    let sync = sync.to_str().unwrap();
    // rwlock: 2 readers and 1 writer, 30 iterations each.
    let dir = TempDir::new("one-doc-rwlock");
    let (report, _) = same_report(
        &dir,
        &["-m", "full"],
        &[sync, "rwlock", "2", "1", "30", "400"],
    );
    let read = row(&report, &["table_lock", "read"]);
    let write = row(&report, &["table_lock", "write"]);
    assert_eq!(count(read[3]), 60, "2 readers x 30, in:\n{report}");
    assert_eq!(count(write[3]), 30, "1 writer x 30, in:\n{report}");
    // barrier: 3 threads, 6 rounds.
    let dir = TempDir::new("one-doc-barrier");
    let (report, _) = same_report(&dir, &["-m", "full"], &[sync, "barrier", "3", "6", "3000"]);
    let b = row(&report, &["round_barrier"]);
    assert_eq!(count(b[1]), 6, "rounds, in:\n{report}");
    // condition variable and semaphore sections.
    let dir = TempDir::new("one-doc-cond");
    let (report, _) = same_report(&dir, &["-m", "full"], &[sync, "cond", "4", "30", "20"]);
    assert!(report.contains("\nCondition variables\n"), "{report}");
    let dir = TempDir::new("one-doc-sem");
    let (report, _) = same_report(&dir, &["-m", "full"], &[sync, "sem", "6", "3000"]);
    assert!(report.contains("\nSemaphores\n"), "{report}");
}

fn an_mpi_job_renders_the_same_from_its_document() {
    let ring = workload("mpi_ring_openmpi");
    assert!(
        ring.exists(),
        "{} was not built: its mpicc is missing (cargo xtask setup installs openmpi)",
        ring.display()
    );
    let steps = "20";
    let dir = TempDir::new("one-doc-mpi");
    let (report, _) = same_report(
        &dir,
        &["--mpi"],
        &[
            "mpirun.openmpi",
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "4",
            ring.to_str().unwrap(),
            steps,
        ],
    );
    assert!(report.contains("\nMPI"), "an MPI section: {report}");
    let doc = read_json(&dir.join("t.json"));
    let ranks = doc["task_graph"]["ranks"].as_array().unwrap().len();
    assert_eq!(ranks, 4, "{doc}");
}

/// Timed functions are an analysis of `analyses/`: their section of the document, under
/// its key, is what both reports and both HTML pages render; its call counts are the
/// workload's own.
fn timed_functions_render_the_same_from_their_section() {
    let dir = TempDir::new("one-doc-func");
    let program = workload("func_workload");
    let html = dir.join("run.html");
    let (report, stdout) = same_report(
        &dir,
        &["-m", "full", "--func", "work_1ms", "--html", html.to_str().unwrap()],
        &[program.to_str().unwrap(), "2", "5", "20"],
    );
    let made: u64 = truths(&stdout)
        .iter()
        .filter(|t| t.fields.contains_key("work_1ms"))
        .map(|t| t.get("work_1ms"))
        .sum();
    assert!(made > 0, "the workload said no calls: {stdout}");
    assert!(report.contains("\nTimed functions"), "{report}");
    let cells = row(&report, &["work_1ms"]);
    assert_eq!(count(cells[1]), made, "calls, in:\n{report}");
    let doc = read_json(&dir.join("t.json"));
    assert!(doc["functions"]["functions"].is_array(), "{doc}");
    // The HTML page too: its tab, the same bytes from the run and from the document.
    let again = dir.join("again.html");
    let out = run(
        Command::new(rtm_bin())
            .arg("report")
            .arg(dir.join("t.json"))
            .arg("--html")
            .arg(&again),
        T,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (page, page_again) = (
        std::fs::read_to_string(&html).unwrap(),
        std::fs::read_to_string(&again).unwrap(),
    );
    assert!(
        page.contains("<button data-tab=\"functions\">Timed functions</button>")
            && page.contains("<section id=\"functions\">")
            && page.contains("<td>work_1ms</td>"),
        "no timed-functions tab in the page"
    );
    assert!(page == page_again, "the run's HTML and the document's differ");
}
