//! `rtm-trace --pid N --blocked`: who is blocked now, on what, held by whom, and the
//! deadlocks among them, in one snapshot from /proc and the targets' memory (no probes:
//! it works on a process that hung before rtm-trace came, in well under a second).

use std::time::Instant;

use super::SessionError;
use crate::{
    config::TraceConfig,
    model::{
        blocked::{self, BlockedThread, BlockedView, Holder, MUTEX_BYTES},
        stacks::{name_frames, user_frame},
    },
    output::{blocked_report, dest::Dest, text::Shown},
    symbolize::{CodeNamer, ObjectNamer, StackUnwinder, unwind::Capture},
    target::{
        blocked::{off_cpu_ns, read_memory, syscall_of},
        process,
    },
};

/// The futex system call (x86-64).
const SYS_FUTEX: u64 = 202;
/// Bytes of each blocked thread's stack read to unwind it.
const STACK_BYTES: usize = 16 * 1024;

/// The snapshot of `pids`.
pub fn snapshot(pids: &[u32]) -> BlockedView {
    let started = Instant::now();
    let at_ns = process::monotonic_ns();
    let mut namer = ObjectNamer::default();
    let mut code = CodeNamer::default();
    let mut unwinder = StackUnwinder::default();
    let mut seen = 0;
    let mut out = Vec::new();
    for &pid in pids {
        namer.remember(pid);
        for tid in process::thread_ids(pid) {
            seen += 1;
            let Some(s) = syscall_of(pid, tid) else {
                continue;
            };
            if s.nr != SYS_FUTEX || !blocked::futex_op_waits(s.args[1]) {
                continue;
            }
            let word = s.args[0];
            let holder = blocked::holder(s.args[1], &read_memory(pid, word, MUTEX_BYTES));
            // A holder that is no thread now exited holding the lock (the report says
            // so).
            let holder_pid = match holder {
                Holder::Thread { tid: h, .. } => process::tgid_of(h),
                Holder::Unknown { .. } => None,
            };
            let stack_bytes = read_memory(pid, s.sp, STACK_BYTES);
            let frames = unwinder.unwind(
                &mut namer,
                pid,
                &Capture {
                    ip: s.pc,
                    sp: s.sp,
                    bp: 0,
                    stack: &stack_bytes,
                    fixes: &[],
                },
            );
            let stack = name_frames(&frames, &mut |a| code.name(&mut namer, pid, a));
            let modules: Vec<_> = frames
                .iter()
                .map(|&a| namer.locate(pid, a).map(|l| l.file.path))
                .collect();
            let word_name = namer
                .name(pid, word)
                .or_else(|| user_frame(&stack, &modules).map(|f| format!("in {f}")));
            out.push(BlockedThread {
                pid,
                tid,
                name: process::thread_name(pid, tid),
                word,
                word_name,
                holder,
                holder_pid,
                off_cpu_ns: off_cpu_ns(pid, tid),
                stack,
            });
        }
    }
    out.sort_by(|a, b| b.off_cpu_ns.cmp(&a.off_cpu_ns).then(a.tid.cmp(&b.tid)));
    let cycles = blocked::cycles(&out);
    BlockedView {
        at_ns,
        took_ns: started.elapsed().as_nanos() as u64,
        threads_seen: seen,
        blocked: out,
        cycles,
    }
}

/// Runs `--blocked` on the targets of `config`; returns the exit code: 0, or 3 when
/// there is a deadlock.
pub fn run(config: &TraceConfig) -> Result<i32, SessionError> {
    let mut report_to = match &config.output.report {
        Some(p) => Dest::check(p)?,
        None => Dest::stdout(),
    };
    let mut json_to = config.output.json.as_deref().map(Dest::check).transpose()?;
    let view = snapshot(&config.targets.pids);
    for c in &view.cycles {
        crate::say!("rtm-trace: {}", blocked_report::cycle_line(&view, c));
    }
    let text = blocked_report::render(&view, config.output.top);
    let report = report_to.write(&mut |w| w.write_all(text.as_bytes()));
    if let Some(dest) = &mut json_to {
        let doc = blocked_report::json(&view);
        dest.write(&mut |w| w.write_all(doc.as_bytes()))?;
        crate::say!(
            "rtm-trace: wrote {}",
            Shown(&dest.path().display().to_string())
        );
    }
    report?;
    Ok(if view.cycles.is_empty() { 0 } else { 3 })
}
