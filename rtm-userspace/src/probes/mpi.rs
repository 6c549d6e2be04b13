//! MPI libraries: which one a process maps (or a launched program will load), which entry
//! points to probe, and how to read its handles (see ../shared/reference/mpi-abi.md).

use std::path::{Path, PathBuf};

use rtm_common::{MpiImpl, MpiLayout, MpiOp};

use crate::proc::{
    elf::{ElfError, ElfSymbols},
    process::{self, ProcessError},
};

/// Entry points probed, by symbol. `MPI_X` is a weak alias of `PMPI_X` at the same
/// address in both implementations, so calls by either name are caught.
pub const MPI_FUNCTIONS: &[(&str, MpiOp)] = &[
    ("MPI_Send", MpiOp::Send),
    ("MPI_Ssend", MpiOp::Ssend),
    ("MPI_Bsend", MpiOp::Bsend),
    ("MPI_Rsend", MpiOp::Rsend),
    ("MPI_Isend", MpiOp::Isend),
    ("MPI_Issend", MpiOp::Issend),
    ("MPI_Recv", MpiOp::Recv),
    ("MPI_Irecv", MpiOp::Irecv),
    ("MPI_Sendrecv", MpiOp::Sendrecv),
    ("MPI_Sendrecv_replace", MpiOp::SendrecvReplace),
    ("MPI_Probe", MpiOp::Probe),
    ("MPI_Iprobe", MpiOp::Iprobe),
    ("MPI_Wait", MpiOp::Wait),
    ("MPI_Waitall", MpiOp::Waitall),
    ("MPI_Waitany", MpiOp::Waitany),
    ("MPI_Waitsome", MpiOp::Waitsome),
    ("MPI_Test", MpiOp::Test),
    ("MPI_Testall", MpiOp::Testall),
    ("MPI_Testany", MpiOp::Testany),
    ("MPI_Testsome", MpiOp::Testsome),
    ("MPI_Barrier", MpiOp::Barrier),
    ("MPI_Bcast", MpiOp::Bcast),
    ("MPI_Reduce", MpiOp::Reduce),
    ("MPI_Allreduce", MpiOp::Allreduce),
    ("MPI_Gather", MpiOp::Gather),
    ("MPI_Gatherv", MpiOp::Gatherv),
    ("MPI_Scatter", MpiOp::Scatter),
    ("MPI_Scatterv", MpiOp::Scatterv),
    ("MPI_Allgather", MpiOp::Allgather),
    ("MPI_Allgatherv", MpiOp::Allgatherv),
    ("MPI_Alltoall", MpiOp::Alltoall),
    ("MPI_Alltoallv", MpiOp::Alltoallv),
    ("MPI_Reduce_scatter", MpiOp::ReduceScatter),
    ("MPI_Reduce_scatter_block", MpiOp::ReduceScatterBlock),
    ("MPI_Init", MpiOp::Init),
    ("MPI_Init_thread", MpiOp::InitThread),
    ("MPI_Finalize", MpiOp::Finalize),
    ("MPI_Comm_rank", MpiOp::CommRank),
    ("MPI_Comm_split", MpiOp::CommSplit),
    ("MPI_Comm_dup", MpiOp::CommDup),
];

/// An MPI library a traced process uses.
#[derive(Debug)]
pub struct MpiLibrary {
    /// Path inside the process's mount namespace, for messages.
    pub path: PathBuf,
    /// A path naming the very file the process maps (its /proc/PID/map_files entry
    /// while it lives), where the uprobes go.
    pub host_path: PathBuf,
    /// Its bytes (the code the probes are placed in).
    pub bytes: Vec<u8>,
    /// Which implementation.
    pub implementation: MpiImpl,
    /// The library's version as far as it can be told (from its file name).
    pub version: String,
    /// How to read its handles; `valid == 0` when this build's layout is unknown.
    pub layout: MpiLayout,
    /// Its symbols.
    pub symbols: ElfSymbols,
}

/// Errors finding an MPI library.
#[derive(Debug, thiserror::Error)]
pub enum MpiLibraryError {
    /// /proc could not be read.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The library could not be read.
    #[error(transparent)]
    Elf(#[from] ElfError),
}

/// The implementation a library file name belongs to: `libmpi.so.*` is Open MPI,
/// `libmpich.so.*` MPICH (Fortran and C++ wrapper libraries are not it).
pub fn implementation_of(path: &Path) -> Option<MpiImpl> {
    let name = path.file_name()?.to_string_lossy();
    if name.starts_with("libmpi.so") {
        Some(MpiImpl::OpenMpi)
    } else if name.starts_with("libmpich.so") {
        Some(MpiImpl::Mpich)
    } else {
        None
    }
}

/// Open MPI 4.1's layout (libmpi.so.40.30.x), taken from the internal headers with
/// offsetof and checked against the installed headers by a test when they are present.
const OPEN_MPI_4_1: MpiLayout = MpiLayout {
    valid: 1,
    comm_cid: 224,
    comm_group: 256,
    group_procs: 32,
    proc_vpid: 44,
    dtype_size: 24,
    status_size: 24,
    status_source: 0,
    status_count: 16,
    status_count_bytes: 8,
    any_source: -1,
    proc_null: -2,
    status_ignore: 0,
    comm_world: 0,
    comm_rank: 228,
    pad: 0,
};

/// MPICH's integer handles: MPI_COMM_WORLD is 0x44000000 and builtin datatypes carry
/// their size; MPI_Status is {count_lo, count_hi_and_cancelled, MPI_SOURCE, MPI_TAG,
/// MPI_ERROR}.
const MPICH: MpiLayout = MpiLayout {
    valid: 1,
    comm_cid: 0,
    comm_group: 0,
    group_procs: 0,
    proc_vpid: 0,
    dtype_size: 0,
    status_size: 20,
    status_source: 8,
    status_count: 0,
    status_count_bytes: 4,
    any_source: -2,
    proc_null: -1,
    status_ignore: 1,
    comm_world: rtm_common::MPICH_COMM_WORLD,
    comm_rank: 0,
    pad: 0,
};

/// The layout for a library file: known builds get theirs; others only call counts
/// and times (`valid == 0`).
pub fn layout_for(implementation: MpiImpl, real_name: &str) -> MpiLayout {
    match implementation {
        // The soname version 40.30 is the Open MPI 4.1 series.
        MpiImpl::OpenMpi if real_name.starts_with("libmpi.so.40.30.") => OPEN_MPI_4_1,
        MpiImpl::OpenMpi => MpiLayout {
            valid: 0,
            ..OPEN_MPI_4_1
        },
        MpiImpl::Mpich => MPICH,
    }
}

fn version_of(implementation: MpiImpl, real_name: &str) -> String {
    let soversion = real_name.split_once(".so.").map(|(_, v)| v).unwrap_or("?");
    match implementation {
        MpiImpl::OpenMpi if soversion.starts_with("40.30.") => {
            format!("Open MPI 4.1 (libmpi.so.{soversion})")
        }
        MpiImpl::OpenMpi => format!("Open MPI (libmpi.so.{soversion})"),
        MpiImpl::Mpich => format!("MPICH (libmpich.so.{soversion})"),
    }
}

/// Makes an MPI library of a file's symbols and bytes, seen as `path` by the process
/// (whose file name, after symbolic links, carries the version); None when it defines no
/// MPI functions.
fn library(
    path: &Path,
    real_name: &str,
    host_path: PathBuf,
    bytes: Vec<u8>,
) -> Result<Option<MpiLibrary>, MpiLibraryError> {
    let Some(implementation) = implementation_of(path) else {
        return Ok(None);
    };
    let symbols = ElfSymbols::parse(&bytes).map_err(|source| ElfError::Parse {
        path: path.display().to_string(),
        source,
    })?;
    if symbols.function_offset("MPI_Send").is_none() {
        return Ok(None);
    }
    Ok(Some(MpiLibrary {
        path: path.to_path_buf(),
        host_path,
        bytes,
        implementation,
        version: version_of(implementation, real_name),
        layout: layout_for(implementation, real_name),
        symbols,
    }))
}

/// Opens `path` (a library in this mount namespace that a launched command will load)
/// as an MPI library.
pub fn open(path: &Path) -> Result<Option<MpiLibrary>, MpiLibraryError> {
    if implementation_of(path).is_none() {
        return Ok(None);
    }
    // The real file name carries the full version (libmpi.so.40 -> libmpi.so.40.30.4).
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let real_name = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bytes = crate::proc::elf::read_object_file(path).map_err(|source| ElfError::Read {
        path: path.display().to_string(),
        source,
    })?;
    library(path, &real_name, path.to_path_buf(), bytes)
}

/// The MPI library `pid` maps, if any, read as the process runs it.
pub fn find(pid: u32) -> Result<Option<MpiLibrary>, MpiLibraryError> {
    for m in process::modules(pid)? {
        if m.executable && implementation_of(&m.path).is_some() {
            // /proc/PID/maps names the file itself, not a symbolic link to it.
            let real_name = m
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (bytes, host) = m.mapped_file(pid).read().map_err(ElfError::from)?;
            if let Some(lib) = library(&m.path, &real_name, host, bytes)? {
                return Ok(Some(lib));
            }
        }
    }
    Ok(None)
}

/// The MPI libraries a launched command's ranks will load: the command itself and every
/// argument that names an executable (`mpirun -np 4 ./ring`), with the libraries they
/// need, found in the standard directories.
pub fn for_command(argv: &[std::ffi::OsString]) -> Vec<MpiLibrary> {
    let mut out: Vec<MpiLibrary> = Vec::new();
    for a in argv {
        let Ok(program) = crate::proc::launch::resolve_program(a) else {
            continue;
        };
        for file in super::pthread::needed_closure(&program) {
            if out.iter().any(|l| l.host_path == file) {
                continue;
            }
            if let Ok(Some(lib)) = open(&file) {
                out.push(lib);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names_tell_the_implementation() {
        assert_eq!(
            implementation_of(Path::new("/usr/lib/x86_64-linux-gnu/libmpi.so.40")),
            Some(MpiImpl::OpenMpi)
        );
        assert_eq!(
            implementation_of(Path::new("/usr/lib/libmpich.so.12.2.0")),
            Some(MpiImpl::Mpich)
        );
        assert_eq!(
            implementation_of(Path::new("/usr/lib/libmpi_mpifh.so.40")),
            None
        );
        assert_eq!(implementation_of(Path::new("/usr/lib/libc.so.6")), None);
    }

    #[test]
    fn only_known_open_mpi_builds_get_a_layout() {
        assert_eq!(layout_for(MpiImpl::OpenMpi, "libmpi.so.40.30.4").valid, 1);
        assert_eq!(layout_for(MpiImpl::OpenMpi, "libmpi.so.40.20.1").valid, 0);
        assert_eq!(
            layout_for(MpiImpl::Mpich, "libmpich.so.12.2.0").comm_world,
            0x4400_0000
        );
    }
}
