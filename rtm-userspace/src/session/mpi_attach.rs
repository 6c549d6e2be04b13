//! Finding the MPI libraries of the traced processes and probing them.

use std::ffi::OsString;

use crate::{
    cli::Cli,
    probes::{Probes, mpi, placement::Placement},
};

use super::SessionError;

/// Probes the MPI library each traced process maps (`pids`), or, for a launched
/// `command`, the ones its ranks will load, for every process (the in-kernel filter keeps
/// the launched tree, whose forks are traced from birth). Nothing found is not an error:
/// the processes' threads are still traced.
pub(super) fn attach(
    probes: &mut Probes,
    cli: &Cli,
    pids: &[u32],
    command: Option<&[OsString]>,
) -> Result<Vec<String>, SessionError> {
    let mut attached = Vec::new();
    let mut report = |lib: &mpi::MpiLibrary, probed: Vec<(&str, Placement)>, whom: String| {
        if lib.layout.valid == 0 {
            eprintln!(
                "rtm-trace: {} ({}): handle layout unknown to this build; recording MPI call \
                 counts and times only (peers, bytes, requests and communicators unavailable)",
                lib.version,
                lib.path.display()
            );
        }
        if cli.verbose {
            eprintln!(
                "rtm-trace: {whom}: {} MPI functions probed in {} ({})",
                probed.len(),
                lib.path.display(),
                lib.version
            );
            for (function, place) in &probed {
                eprintln!(
                    "rtm-trace:   {function} +{}: {}",
                    place.offset, place.reason
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
    for &pid in pids {
        match mpi::find(pid) {
            Ok(Some(lib)) => {
                let probed = probes.attach_mpi(Some(pid), &lib)?;
                report(&lib, probed, format!("PID {pid}"));
            }
            Ok(None) => {
                if cli.verbose {
                    eprintln!("rtm-trace: PID {pid} maps no MPI library; tracing its threads only");
                }
            }
            Err(e) => eprintln!("rtm-trace: PID {pid}: cannot read its MPI library: {e}"),
        }
    }
    Ok(attached)
}
