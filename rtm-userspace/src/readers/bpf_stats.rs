//! What the eBPF side costs: each program's run count and run time (from the kernel's
//! BPF statistics, switched on only while measuring, `--bpf-stats`) and each map's
//! locked memory.

use std::os::fd::OwnedFd;

use serde::Serialize;

use crate::probes::Probes;

/// One eBPF program.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ProgramStats {
    pub name: String,
    /// Times it ran (0 unless statistics were on).
    pub runs: u64,
    /// Time it ran in all, ns.
    pub run_ns: u64,
    /// run_ns / runs.
    pub ns_per_run: f64,
    /// JITed code size, bytes.
    pub jited_bytes: u32,
}

/// One eBPF map.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct MapStats {
    pub name: String,
    pub max_entries: u64,
    /// Memory the kernel charged for it, bytes.
    pub memlock_bytes: u64,
}

/// Programs and maps of this tracer.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct BpfStats {
    pub programs: Vec<ProgramStats>,
    pub maps: Vec<MapStats>,
    pub map_bytes: u64,
}

/// Turns the kernel's run-time statistics on until the returned descriptor is dropped.
pub fn enable() -> Result<OwnedFd, String> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| e.to_string())
}

/// Reads the statistics of this tracer's programs and maps now.
pub fn read(probes: &Probes) -> BpfStats {
    {
        let mut s = BpfStats::default();
        for (name, p) in probes.ebpf().programs() {
            let Ok(info) = p.info() else { continue };
            let runs = info.run_count();
            let run_ns = info.run_time().as_nanos() as u64;
            s.programs.push(ProgramStats {
                name: name.to_owned(),
                runs,
                run_ns,
                ns_per_run: if runs > 0 {
                    run_ns as f64 / runs as f64
                } else {
                    0.0
                },
                jited_bytes: info.size_jitted(),
            });
        }
        // The uprobe programs loaded for uprobe_multi links: their descriptors' fdinfo.
        for (name, fd) in probes.multi_programs() {
            use std::os::fd::AsRawFd as _;
            let Ok(info) =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_ref().as_raw_fd()))
            else {
                continue;
            };
            let field = |k: &str| -> u64 {
                info.lines()
                    .find_map(|l| l.strip_prefix(k))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0)
            };
            let (runs, run_ns) = (field("run_cnt:"), field("run_time_ns:"));
            s.programs.push(ProgramStats {
                name: name.to_owned(),
                runs,
                run_ns,
                ns_per_run: if runs > 0 {
                    run_ns as f64 / runs as f64
                } else {
                    0.0
                },
                jited_bytes: 0,
            });
        }
        s.programs.sort_by_key(|p| std::cmp::Reverse(p.run_ns));
        // Map descriptors of this process: their fdinfo has the charged memory.
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            for e in dir.flatten() {
                let is_map = std::fs::read_link(e.path())
                    .is_ok_and(|l| l.to_string_lossy() == "anon_inode:bpf-map");
                let fd = e.file_name().to_string_lossy().into_owned();
                let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")) else {
                    continue;
                };
                if !is_map {
                    continue;
                }
                let field = |k: &str| -> u64 {
                    info.lines()
                        .find_map(|l| l.strip_prefix(k))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0)
                };
                let id = field("map_id:") as u32;
                let name = aya::maps::MapInfo::from_id(id)
                    .ok()
                    .and_then(|m| m.name_as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("map {id}"));
                if s.maps.iter().any(|m: &MapStats| m.name == name) {
                    continue;
                }
                s.maps.push(MapStats {
                    name,
                    max_entries: field("max_entries:"),
                    memlock_bytes: field("memlock:"),
                });
            }
        }
        s.maps.sort_by_key(|m| std::cmp::Reverse(m.memlock_bytes));
        s.map_bytes = s.maps.iter().map(|m| m.memlock_bytes).sum();
        s
    }
}
