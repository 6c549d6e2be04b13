//! End-to-end: what rtm-trace needs of the machine it runs on. Every eBPF program loads
//! on this kernel (`rtm-trace check`), and results land on file systems that cannot
//! make unnamed files. `cargo xtask vm` runs these inside Debian 12's and 13's kernels.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(every_program_loads_and_each_feature_says_so, Root),
    e2e!(results_land_on_a_file_system_without_unnamed_files, Root, Tool("bindfs", "bindfs")),
];

const T: Duration = Duration::from_secs(240);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn every_program_loads_and_each_feature_says_so() {
    let out = run(Command::new(rtm_bin()).args(["check", "-v"]), T);
    let stdout = text(&out.stdout);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        out.status.success(),
        "rtm-trace check failed on {release}:\n{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains(release.trim()), "{stdout}");
    for feature in [
        "contention mode (default)",
        "contention mode, --no-stacks",
        "contention mode without BTF",
        "full mode",
        "timed functions (--func)",
        "MPI (--mpi)",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.contains(feature))
            .unwrap_or_else(|| panic!("no line for {feature}:\n{stdout}"));
        assert!(line.trim_start().starts_with("ok "), "{line}");
    }
    // The uprobe programs say how they attach: many to a link where the kernel has
    // uprobe_multi (6.6+), one at a time before.
    let (major, minor) = {
        let mut v = release.trim().split(['.', '-']);
        let major: u32 = v.next().unwrap().parse().unwrap();
        (major, v.next().unwrap().parse::<u32>().unwrap())
    };
    let full = stdout.lines().find(|l| l.contains("full mode")).unwrap();
    if (major, minor) >= (6, 6) {
        assert!(full.contains("many to a link"), "{full}");
    } else {
        assert!(full.contains("one at a time"), "{full}");
    }
    assert!(
        stdout.contains("every feature loads on this kernel"),
        "{stdout}"
    );
}

/// A bindfs (FUSE) mount: no O_TMPFILE there, as on 9p and some NFS mounts.
struct Fuse(PathBuf);

impl Drop for Fuse {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A directory on a file system without O_TMPFILE: $RTM_TEST_NO_TMPFILE_DIR (the VM's
/// 9p share), else a bindfs mount of `dir`.
fn no_tmpfile_dir(dir: &TempDir) -> (PathBuf, Option<Fuse>) {
    if let Some(d) = std::env::var_os("RTM_TEST_NO_TMPFILE_DIR") {
        let d = PathBuf::from(d).join(format!("tmpfile-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        return (d, None);
    }
    let (src, mnt) = (dir.join("src"), dir.join("mnt"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    match Command::new("bindfs").arg(&src).arg(&mnt).status() {
        Ok(st) if st.success() => (mnt.clone(), Some(Fuse(mnt))),
        other => panic!("bindfs could not mount: {other:?}"),
    }
}

fn supports_tmpfile(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .is_ok()
}

fn results_land_on_a_file_system_without_unnamed_files() {
    let tmp = TempDir::new("no-tmpfile");
    let (dir, _mount) = no_tmpfile_dir(&tmp);
    assert!(
        !supports_tmpfile(&dir),
        "{} makes unnamed files: not the case this test is for",
        dir.display()
    );
    // An old file is replaced, a new one made; the timeline is written as it goes.
    std::fs::write(dir.join("out.json"), "old").unwrap();
    let out = run(
        Command::new(rtm_bin())
            .arg("--json")
            .arg(dir.join("out.json"))
            .arg("--timeline")
            .arg(dir.join("out.pftrace"))
            .arg("-o")
            .arg(dir.join("report.txt"))
            .args(["--mode", "full", "--"])
            .arg(workload("mutex_workload"))
            .args(["--threads", "2", "--iters", "300", "--hold-us", "10"])
            // Alive a moment after its work: a program of a few milliseconds can be gone
            // before a lagging reader takes its exec, and its maps with it (its objects
            // then go unnamed; docs/outputs.md). What this test is about is the files.
            .args(["--private", "0", "--linger-ms", "300"]),
        T,
    );
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let doc = read_json(&dir.join("out.json"));
    let shared = object(&doc, "shared_lock").unwrap_or_else(|| {
        panic!(
            "shared_lock in the graph: {}\n{}",
            doc["sync_graph"]["objects"],
            text(&out.stderr)
        )
    });
    assert_eq!(
        shared["acquisitions"], 600,
        "two threads x 300 on shared_lock"
    );
    assert!(std::fs::metadata(dir.join("out.pftrace")).unwrap().len() > 0);
    let report = std::fs::read_to_string(dir.join("report.txt")).unwrap();
    assert!(report.contains("final report"), "{report}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["out.json", "out.pftrace", "report.txt"],
        "nothing else left"
    );
    // A run that ends before its results leaves no temporary file behind.
    let out = run(
        Command::new(rtm_bin())
            .arg("--json")
            .arg(dir.join("never.json"))
            .args(["--", "/nonexistent/command"]),
        T,
    );
    assert_eq!(out.status.code(), Some(127), "{}", text(&out.stderr));
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') || n.contains("never"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    if std::env::var_os("RTM_TEST_NO_TMPFILE_DIR").is_some() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
