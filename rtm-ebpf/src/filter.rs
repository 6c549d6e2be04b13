//! In-kernel filtering to the traced processes.

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id};
use rtm_common::{CONTEXT_CPUS, CONTEXT_TIDS, TRACED_NOW};

use crate::maps::{CONTEXT_FILTER, CPU_FILTER, TID_FILTER, TRACED, TRACED_TGIDS};

/// The filter's value for the process `tgid`: 0 when it is not traced, else
/// [`rtm_common::TRACED_ON`] or [`rtm_common::TRACED_FOLLOW`], or
/// [`rtm_common::TRACED_EXITED`] once its last thread has exited.
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
    traced_value(tgid) & TRACED_NOW != 0
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

/// Whether the current thread and CPU pass `--tid` and `--cpu` (when given).
#[inline(always)]
pub fn in_context(pid_tgid: u64) -> bool {
    let filter = CONTEXT_FILTER.load();
    if filter == 0 {
        return true;
    }
    // SAFETY: the value is copied out at once.
    if filter & CONTEXT_TIDS != 0 && unsafe { TID_FILTER.get(pid_tgid as u32) }.is_none() {
        return false;
    }
    if filter & CONTEXT_CPUS != 0 {
        // SAFETY: helper without preconditions.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let word = CPU_FILTER.get(cpu >> 6).copied().unwrap_or(0);
        if word & (1u64 << (cpu & 63)) == 0 {
            return false;
        }
    }
    true
}

/// Whether a return that found no entry is a loss: not when `--tid`/`--cpu` left its
/// entry out on purpose.
#[inline(always)]
pub fn entry_was_kept() -> bool {
    CONTEXT_FILTER.load() == 0
}

/// The current thread's pid_tgid when its process is traced and it passes `--tid` and
/// `--cpu`: where a call or a wait starts.
#[inline(always)]
pub fn traced_in_context() -> Option<u64> {
    traced_pid_tgid().filter(|&p| in_context(p))
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
