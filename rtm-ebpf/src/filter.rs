//! In-kernel filtering to the traced processes.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::maps::{TRACED, TRACED_TGIDS};

/// Whether the process `tgid` is traced.
#[inline(always)]
pub fn is_traced(tgid: u32) -> bool {
    match TRACED.get_ptr(tgid >> 3) {
        // SAFETY: one of the 8 bytes of a map value.
        Some(word) => unsafe { *word.cast::<u8>().add((tgid & 7) as usize) != 0 },
        // SAFETY: the value is only tested for presence.
        None => unsafe { TRACED_TGIDS.get(tgid) }.is_some(),
    }
}

/// Adds a process to the filter (the kernel's side: a followed child).
#[inline(always)]
pub fn trace(tgid: u32) {
    let _ = TRACED_TGIDS.insert(tgid, 1, 0);
    if let Some(word) = TRACED.get_ptr_mut(tgid >> 3) {
        // SAFETY: one of the 8 bytes of a map value; a byte store leaves the others be.
        unsafe { *word.cast::<u8>().add((tgid & 7) as usize) = 1 };
    }
}

/// The current thread's pid_tgid when its process is traced.
#[inline(always)]
pub fn traced_pid_tgid() -> Option<u64> {
    let pid_tgid = bpf_get_current_pid_tgid();
    if is_traced((pid_tgid >> 32) as u32) {
        Some(pid_tgid)
    } else {
        None
    }
}
