//! How big the kernel-side tables and rings are: sized at load from pid_max, the CPU
//! count and the ring size asked for.

use rtm_common::names;

/// Tgids per element of the TRACED array (a byte each).
pub const PER_WORD: u32 = 8;

/// Sizes of the rings and tables for one load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Rings in use: MAP_EVENTS, then the first `rings - 1` of MAP_SYNC_RINGS.
    pub rings: u32,
    /// Bytes of each ring in use.
    pub per_ring: u32,
    /// Bytes of an unused ring (a page).
    pub page: u32,
    /// Elements of the TRACED array.
    pub words: u32,
    /// Slots of the FUTEX_SLOTS array.
    pub slots: u32,
    /// The fallback paths are forced ([`FALLBACKS_ENV`]): no BTF tracepoints, and
    /// tables too small for any real tid or tgid.
    pub fallbacks: bool,
}

impl Layout {
    /// Sizes for `ring_bytes` of ring on this machine. Contention mode's sync records
    /// are self-contained, so they can go to a ring per CPU (`per_cpu`); full mode's must
    /// stay in order per thread, and a thread moves between CPUs.
    pub fn new(ring_bytes: u32, per_cpu: bool) -> Self {
        let page = crate::proc::host::page_size() as u32;
        let rings = rings_for(possible_cpus(), ring_bytes, names::MAX_RINGS, page, per_cpu);
        let fallbacks = forced_fallbacks();
        // The per-thread and per-process tables are indexed by tid and tgid: sized to
        // pid_max (the futex slots up to a cap; larger tids and tgids use hash maps).
        let pid_max = if fallbacks { 2 } else { pid_max() };
        Self {
            rings,
            per_ring: ring_bytes / rings,
            page,
            words: words_for(pid_max),
            slots: slots_for(pid_max, names::MAX_FUTEX_SLOTS),
            fallbacks,
        }
    }

    /// Bytes of each of MAP_SYNC_RINGS.
    pub fn sync_ring_bytes(&self) -> impl Iterator<Item = (&'static str, u32)> + '_ {
        names::MAP_SYNC_RINGS.iter().enumerate().map(|(i, &name)| {
            (
                name,
                if (i as u32) + 1 < self.rings {
                    self.per_ring
                } else {
                    self.page
                },
            )
        })
    }
}

/// The system's pid_max: every tid and tgid is below it.
pub fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1 << 22)
}

/// Set to 1, this environment variable makes rtm-trace take the paths it takes on a
/// kernel without BTF (raw and per-syscall tracepoints) and for tids and tgids past its
/// arrays (hash maps), so that tests cover them.
pub const FALLBACKS_ENV: &str = "RTM_TRACE_FALLBACKS";

/// Whether [`FALLBACKS_ENV`] asks for the fallback paths.
pub fn forced_fallbacks() -> bool {
    std::env::var_os(FALLBACKS_ENV).is_some_and(|v| v == "1")
}

/// CPUs the kernel may number (the programs' CPU ids are below it).
pub fn possible_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    u32::try_from(n).unwrap_or(1).max(1)
}

/// Elements of the TRACED array that cover tgids below `pid_max`.
pub fn words_for(pid_max: u32) -> u32 {
    pid_max.div_ceil(PER_WORD).max(1)
}

/// Futex slots for tids below `pid_max`: a power of two, at most `cap`.
pub fn slots_for(pid_max: u32, cap: u32) -> u32 {
    pid_max.clamp(2, cap).next_power_of_two().min(cap)
}

/// Rings for sync records: one per CPU up to `max` (a power of two), each at least a
/// page, sharing `ring_bytes`; one when records must stay in order (`per_cpu` false).
pub fn rings_for(cpus: u32, ring_bytes: u32, max: u32, page: u32, per_cpu: bool) -> u32 {
    if !per_cpu {
        return 1;
    }
    let mut rings = max.min(1 << cpus.max(1).ilog2());
    while rings > 1 && ring_bytes / rings < page {
        rings /= 2;
    }
    rings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_cover_every_tid_below_pid_max() {
        assert_eq!(words_for(32768), 4096);
        assert_eq!(words_for(32769), 4097);
        assert_eq!(words_for(4_194_304) * PER_WORD, 4_194_304);
        assert_eq!(slots_for(32768, 65536), 32768);
        assert_eq!(slots_for(40000, 65536), 65536);
        assert_eq!(slots_for(4_194_304, 65536), 65536);
        assert!(slots_for(0, 65536).is_power_of_two());
    }

    #[test]
    fn unused_rings_are_a_page() {
        let layout = Layout {
            rings: 2,
            per_ring: 1 << 22,
            page: 4096,
            words: 1,
            slots: 2,
            fallbacks: false,
        };
        let sizes: Vec<_> = layout.sync_ring_bytes().collect();
        assert_eq!(
            sizes,
            [
                ("EVENTS_1", 1 << 22),
                ("EVENTS_2", 4096),
                ("EVENTS_3", 4096)
            ]
        );
    }

    #[test]
    fn rings_are_per_cpu_up_to_the_cap_and_at_least_a_page() {
        assert_eq!(rings_for(2, 1 << 23, 4, 4096, true), 2);
        assert_eq!(rings_for(3, 1 << 23, 4, 4096, true), 2);
        assert_eq!(rings_for(64, 1 << 23, 4, 4096, true), 4);
        assert_eq!(rings_for(1, 1 << 23, 4, 4096, true), 1);
        assert_eq!(rings_for(64, 1 << 23, 4, 4096, false), 1);
        // 8 KiB over two rings of a page each; 4 KiB leaves one.
        assert_eq!(rings_for(64, 8192, 4, 4096, true), 2);
        assert_eq!(rings_for(64, 4096, 4, 4096, true), 1);
    }
}
