//! Timed functions (`--func`): `func_enter` remembers each call's start per thread,
//! `func_return` keeps the finished call in the thread's slot and sends the kept calls
//! together (see `rtm_common::func`); nested and recursive calls are each timed. The
//! cookie set at attach is the function's index.
//!
//! A call whose return is never seen (a longjmp or an exception past it, or one that
//! entered before the return probe was attached) is found by its stack pointer: a live
//! outer call's frame is above every inner one, so any remembered call at or below a
//! new call's frame, or below a returning call's, is gone. Those are counted as missed.

use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_get_attach_cookie,
    macros::{uprobe, uretprobe},
    programs::{ProbeContext, RetProbeContext},
};
use rtm_common::{
    FUNC_BATCH, FUNC_FLUSH_NS, FuncCall, FuncFrame, FuncStack, LossCounter, MAX_FUNC_DEPTH,
};

use crate::{
    bounds::masked,
    emit::{self, now},
    filter::{entry_was_kept, traced_in_context, traced_pid_tgid},
    maps::{count_loss, count_losses, func_stack, func_stack_of},
    regs::probe_sp,
};

/// Entry of a timed function.
#[uprobe]
pub fn func_enter(ctx: ProbeContext) -> u32 {
    let Some(pid_tgid) = traced_in_context() else {
        return 0;
    };
    // SAFETY: helper without preconditions; the cookie is set by userspace at attach.
    let function = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    let sp = probe_sp(&ctx);
    let Some(st) = func_stack(pid_tgid) else {
        count_loss(LossCounter::PendingFull);
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let st = unsafe { &mut *st };
    let mut depth = st.depth as usize;
    // Calls remembered at or below this frame are gone (their returns were not seen).
    for _ in 0..MAX_FUNC_DEPTH {
        if depth == 0 || depth > MAX_FUNC_DEPTH {
            break;
        }
        match st.frames.get(masked(depth - 1, MAX_FUNC_DEPTH - 1)) {
            Some(f) if f.sp <= sp => {
                count_loss(LossCounter::MissedEntry);
                depth -= 1;
            }
            _ => break,
        }
    }
    if depth >= MAX_FUNC_DEPTH {
        st.depth = depth as u64;
        count_loss(LossCounter::PendingFull);
        return 0;
    }
    if let Some(slot) = st.frames.get_mut(masked(depth, MAX_FUNC_DEPTH - 1)) {
        *slot = FuncFrame {
            start_ns: now(),
            sp,
            function,
            pad: 0,
        };
        st.depth = depth as u64 + 1;
    }
    0
}

/// Return of a timed function.
#[uretprobe]
pub fn func_return(ctx: RetProbeContext) -> u32 {
    let Some(pid_tgid) = traced_pid_tgid() else {
        return 0;
    };
    let ts = now();
    // SAFETY: helper without preconditions.
    let function = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    // After the return: the return address was popped.
    let sp = probe_sp(&ctx);
    let Some(st) = func_stack_of(pid_tgid) else {
        if entry_was_kept() {
            count_loss(LossCounter::MissedEntry);
        }
        return 0;
    };
    // SAFETY: this thread's own entry; only this thread writes it.
    let st = unsafe { &mut *st };
    let mut depth = st.depth as usize;
    // The returning call is the outermost remembered one below the stack pointer after
    // its return (its return address was just popped); any deeper ones are gone. The
    // loop only counts, so each pass leaves the verifier the same shape of state (a
    // branch per pass that carried the found frame took 6.1's verifier past its
    // million-instruction limit).
    let mut popped = 0usize;
    for _ in 0..MAX_FUNC_DEPTH {
        if depth == 0 || depth > MAX_FUNC_DEPTH {
            break;
        }
        match st.frames.get(masked(depth - 1, MAX_FUNC_DEPTH - 1)) {
            Some(f) if f.sp < sp => {
                depth -= 1;
                popped += 1;
            }
            _ => break,
        }
    }
    st.depth = depth as u64;
    let found = if popped == 0 {
        None
    } else {
        st.frames.get(masked(depth, MAX_FUNC_DEPTH - 1)).copied()
    };
    if popped > 1 {
        count_losses(LossCounter::MissedEntry, popped as u64 - 1);
    }
    match found {
        Some(f) if f.function == function => {
            // Outer calls of the same function: this one is recursive.
            let mut recursion = 0u16;
            for (i, o) in st.frames.iter().enumerate() {
                if i >= depth {
                    break;
                }
                recursion += u16::from(o.function == function);
            }
            keep(
                st,
                pid_tgid,
                FuncCall {
                    start_ns: f.start_ns,
                    end_ns: ts,
                    function,
                    depth: depth as u16,
                    recursion,
                },
            );
        }
        _ if entry_was_kept() => count_loss(LossCounter::MissedEntry),
        _ => {}
    }
    0
}

/// Keeps a finished call in the thread's slot; sends the kept calls when there are
/// FUNC_BATCH of them or the oldest has waited FUNC_FLUSH_NS.
#[inline(always)]
fn keep(st: &mut FuncStack, pid_tgid: u64, call: FuncCall) {
    let n = st.done as usize;
    if n >= FUNC_BATCH {
        // Not left full by a return; kept sane whatever the slot held.
        emit::func_calls(st, pid_tgid, call.end_ns);
        st.done = 0;
    }
    let n = st.done as usize;
    if let Some(slot) = st.finished.get_mut(masked(n, FUNC_BATCH - 1)) {
        *slot = call;
        st.done = n as u64 + 1;
    }
    let oldest = st.finished[0].end_ns;
    if st.done as usize >= FUNC_BATCH || call.end_ns.saturating_sub(oldest) >= FUNC_FLUSH_NS {
        emit::func_calls(st, pid_tgid, call.end_ns);
        st.done = 0;
    }
}

/// Sends the finished calls an exiting thread kept.
#[inline(always)]
pub fn send_kept(pid_tgid: u64) {
    if let Some(st) = func_stack_of(pid_tgid) {
        // SAFETY: this thread's own slot or entry; only this thread writes it.
        let st = unsafe { &mut *st };
        if st.done > 0 {
            emit::func_calls(st, pid_tgid, now());
            st.done = 0;
        }
    }
}
