//! The handle layouts rtm-trace reads MPI libraries with, checked against the installed
//! headers: Open MPI's struct offsets (from its internal headers, with offsetof) and
//! MPICH's status layout and handle constants. A distribution update that moves a field
//! fails here instead of producing wrong peers and byte counts. No root needed.

use std::{collections::HashMap, process::Command};

use rtm::mpi_layout_for;
use rtm_common::{MpiImpl, MpiLayout};
use rtm_tests::workload;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(open_mpi_layout_matches_the_installed_headers),
    e2e!(mpich_layout_matches_the_installed_headers),
];

/// Runs a layout probe program and reads its "name value" lines.
fn facts(program: &str, package: &str) -> HashMap<String, i64> {
    let path = workload(program);
    assert!(
        path.exists(),
        "{} was not built: cargo xtask setup installs {package}",
        path.display()
    );
    let out = Command::new(&path).output().expect("runs");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect()
}

/// The installed library's real file name (libmpi.so.40 -> libmpi.so.40.30.4).
fn real_name(lib: &str) -> String {
    let p = std::fs::canonicalize(format!("/usr/lib/x86_64-linux-gnu/{lib}"))
        .unwrap_or_else(|e| panic!("{lib} is not installed: {e}"));
    p.file_name().unwrap().to_string_lossy().into_owned()
}

fn check(layout: &MpiLayout, facts: &HashMap<String, i64>) {
    let fields: [(&str, i64); 12] = [
        ("comm_cid", layout.comm_cid.into()),
        ("comm_rank", layout.comm_rank.into()),
        ("comm_group", layout.comm_group.into()),
        ("group_procs", layout.group_procs.into()),
        ("proc_vpid", layout.proc_vpid.into()),
        ("dtype_size", layout.dtype_size.into()),
        ("status_size", layout.status_size.into()),
        ("status_source", layout.status_source.into()),
        ("status_count", layout.status_count.into()),
        ("status_count_bytes", layout.status_count_bytes.into()),
        ("any_source", layout.any_source.into()),
        ("proc_null", layout.proc_null.into()),
    ];
    let mut compared = 0;
    for (name, ours) in fields {
        if let Some(&theirs) = facts.get(name) {
            println!("{name}: headers {theirs}, rtm-trace {ours}");
            assert_eq!(ours, theirs, "{name}");
            compared += 1;
        }
    }
    for (name, ours) in [
        ("status_ignore", layout.status_ignore as i64),
        ("comm_world", layout.comm_world as i64),
    ] {
        if let Some(&theirs) = facts.get(name) {
            println!("{name}: headers {theirs}, rtm-trace {ours}");
            assert_eq!(ours, theirs, "{name}");
            compared += 1;
        }
    }
    assert_eq!(
        compared,
        facts.len(),
        "every fact the headers gave was compared"
    );
}

fn open_mpi_layout_matches_the_installed_headers() {
    let name = real_name("libmpi.so.40");
    let layout = mpi_layout_for(MpiImpl::OpenMpi, &name);
    assert_eq!(layout.valid, 1, "{name} has no layout in rtm-trace");
    let f = facts("ompi_layout", "libopenmpi-dev");
    assert_eq!(f.len(), 12);
    check(&layout, &f);
}

fn mpich_layout_matches_the_installed_headers() {
    let name = real_name("libmpich.so.12");
    let layout = mpi_layout_for(MpiImpl::Mpich, &name);
    assert_eq!(layout.valid, 1);
    let f = facts("mpich_layout", "libmpich-dev");
    assert_eq!(f.len(), 8);
    check(&layout, &f);
}
