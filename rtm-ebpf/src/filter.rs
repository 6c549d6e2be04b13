//! In-kernel filtering to the traced processes.

use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::maps::{TRACED, TRACED_TGIDS};

/// The filter's value for the process `tgid`: 0 when it is not traced, else
/// [`rtm_common::TRACED_ON`] or [`rtm_common::TRACED_FOLLOW`].
#[inline(always)]
pub fn traced_value(tgid: u32) -> u8 {
    match TRACED.get_ptr(tgid >> 3) {
        // SAFETY: one of the 8 bytes of a map value.
        Some(word) => unsafe { *word.cast::<u8>().add((tgid & 7) as usize) },
        // SAFETY: the value is copied out at once.
        None => unsafe { TRACED_TGIDS.get(tgid) }.map_or(0, |v| *v as u8),
    }
}

/// Whether the process `tgid` is traced.
#[inline(always)]
pub fn is_traced(tgid: u32) -> bool {
    traced_value(tgid) != 0
}

/// Adds a process to the filter with `value` (the kernel's side: a followed child).
#[inline(always)]
pub fn trace(tgid: u32, value: u8) {
    let _ = TRACED_TGIDS.insert(tgid, u32::from(value), 0);
    if let Some(word) = TRACED.get_ptr_mut(tgid >> 3) {
        // SAFETY: one of the 8 bytes of a map value; a byte store leaves the others be.
        unsafe { *word.cast::<u8>().add((tgid & 7) as usize) = value };
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
