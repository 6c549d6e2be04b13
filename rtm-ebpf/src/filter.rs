//! In-kernel filtering to the traced processes.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::maps::TRACED_TGIDS;

/// The current thread's pid_tgid when its process is traced.
#[inline(always)]
pub fn traced_pid_tgid() -> Option<u64> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is only tested for presence.
    if unsafe { TRACED_TGIDS.get(tgid) }.is_some() {
        Some(pid_tgid)
    } else {
        None
    }
}
