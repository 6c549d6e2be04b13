//! Finding the MPI libraries of the traced processes and probing them.

use std::ffi::OsString;

use crate::{
    engine::EngineError,
    probes::{Probes, mpi, placement::Placement},
};

/// Whether two libraries are the same file (the same inode, whatever the path).
fn same_file(a: &mpi::MpiLibrary, b: &mpi::MpiLibrary) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (
        std::fs::metadata(&a.host_path),
        std::fs::metadata(&b.host_path),
    ) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => a.host_path == b.host_path,
    }
}

/// Contention mode without --mpi: says once when the targets use MPI, and how to see it.
pub(super) fn hint(pids: &[u32], command: Option<&[OsString]>) {
    let lib = match command {
        Some(argv) => mpi::for_command(argv).into_iter().next(),
        None => pids.iter().find_map(|&pid| mpi::find(pid).ok().flatten()),
    };
    if let Some(lib) = lib {
        crate::say!(
            "rtm-trace: the targets use MPI ({}): contention mode does not probe it, to stay \
             cheap for programs that poll MPI; add --mpi for the ranks' task graph (about 2 us \
             per MPI call, see BENCHMARKS.md)",
            lib.version
        );
    }
}

/// Probes the MPI library each traced process maps (`pids`), or, for a launched
/// `command`, the ones its ranks will load, for every process (the in-kernel filter keeps
/// the launched tree, whose forks are traced from birth). Nothing found is not an error:
/// the processes' threads are still traced.
pub(super) fn attach(
    probes: &mut Probes,
    verbose: bool,
    pids: &[u32],
    command: Option<&[OsString]>,
) -> Result<Vec<String>, EngineError> {
    let mut attached = Vec::new();
    let mut report = |lib: &mpi::MpiLibrary, probed: Vec<(&str, Placement)>, whom: String| {
        if lib.layout.valid == 0 {
            crate::say!(
                "rtm-trace: {} ({}): this build's handle layout is unknown to rtm-trace: \
                 peers as world ranks, message bytes, statuses (wildcard sources) and \
                 communicator ids are unavailable; recording MPI call counts, times and \
                 request matching only",
                lib.version,
                lib.path.display()
            );
        }
        if verbose {
            crate::say!(
                "rtm-trace: {whom}: {} MPI functions probed in {} ({})",
                probed.len(),
                lib.path.display(),
                lib.version
            );
            for (function, place) in &probed {
                crate::say!(
                    "rtm-trace:   {function} +{}: {}",
                    place.offset,
                    place.reason
                );
            }
        }
        attached.push(lib.path.display().to_string());
    };
    if let Some(argv) = command {
        for lib in mpi::for_command(argv) {
            let probed = probes.attach_mpi(None, &lib)?;
            report(&lib, probed, "launched command".into());
        }
        return Ok(attached);
    }
    // Ranks of one job map the same library: one set of probes for all of them, left
    // to the in-kernel filter, instead of one per rank (each probe costs about 0.1 s to
    // remove at the end; a set per rank would multiply that).
    let mut found: Vec<(mpi::MpiLibrary, Vec<u32>)> = Vec::new();
    for &pid in pids {
        match mpi::find(pid) {
            Ok(Some(lib)) => match found.iter_mut().find(|(l, _)| same_file(l, &lib)) {
                Some((_, users)) => users.push(pid),
                None => found.push((lib, vec![pid])),
            },
            Ok(None) => {
                crate::say!("rtm-trace: PID {pid} maps no MPI library; tracing its threads only")
            }
            Err(e) => crate::say!("rtm-trace: PID {pid}: cannot read its MPI library: {e}"),
        }
    }
    for (lib, users) in found {
        let scope = (users.len() == 1).then_some(users[0]);
        let probed = probes.attach_mpi(scope, &lib)?;
        let whom: Vec<String> = users.iter().map(u32::to_string).collect();
        report(&lib, probed, format!("PID {}", whom.join(", ")));
    }
    Ok(attached)
}
