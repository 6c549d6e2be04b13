//! Target processes: finding them, their address spaces (the mappings of
//! /proc/PID/maps) and ELF files, the host they run on, and launching them gated so no
//! user code runs before the probes are live.

pub(crate) mod address_space;
pub(crate) mod blocked;
pub(crate) mod elf;
pub(crate) mod files;
pub(crate) mod gopclntab;
pub(crate) mod host;
pub(crate) mod launch;
pub(crate) mod mapped;
pub(crate) mod process;

pub use process::Module;

/// Whether `path` names a system library a program's waits pass through: the C library,
/// its threads library, the dynamic loader, the C++ and GCC runtimes.
pub fn is_system_library(path: &std::path::Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "libstdc++",
        "libgcc_s",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}
