//! What a thread is blocked in now, from /proc (no probes): its system call and
//! arguments, its user stack pointer and instruction pointer (`/proc/PID/task/TID/
//! syscall`), how long since it last ran (`sched`), and bounded reads of its process's
//! memory (`process_vm_readv`) for the futex word it waits on and the top of its stack.

use super::files::read_proc_text;

/// The system call a blocked thread is in, as /proc says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InSyscall {
    /// System call number.
    pub nr: u64,
    /// Its six arguments.
    pub args: [u64; 6],
    /// User stack pointer.
    pub sp: u64,
    /// User instruction pointer (just after the system call instruction).
    pub pc: u64,
}

/// Parses `/proc/PID/task/TID/syscall`: `NR ARG1..ARG6 SP PC` for a thread in a system
/// call; None for `running`, `-1 SP PC` (blocked outside a system call) or junk.
pub fn parse_syscall(text: &str) -> Option<InSyscall> {
    let mut f = text.split_whitespace();
    let nr: u64 = f.next()?.parse().ok()?;
    let hex =
        |s: Option<&str>| -> Option<u64> { u64::from_str_radix(s?.strip_prefix("0x")?, 16).ok() };
    let mut args = [0u64; 6];
    for a in &mut args {
        *a = hex(f.next())?;
    }
    let sp = hex(f.next())?;
    let pc = hex(f.next())?;
    Some(InSyscall { nr, args, sp, pc })
}

/// The system call thread `tid` of `pid` is blocked in (None: running, not in a system
/// call, gone, or unreadable).
pub fn syscall_of(pid: u32, tid: u32) -> Option<InSyscall> {
    parse_syscall(&read_proc_text(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// `se.exec_start` of a `sched` file: when the task last ran, in ms of the scheduler's
/// clock.
fn exec_start_ms(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix("se.exec_start"))?
        .trim_start_matches([' ', ':'])
        .trim()
        .parse()
        .ok()
}

/// Nanoseconds since thread `tid` of `pid` last ran (the scheduler's clock, against
/// this thread's own last run, which is now): for a blocked thread, about how long it
/// has been blocked.
pub fn off_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    let theirs = exec_start_ms(&read_proc_text(format!("/proc/{pid}/task/{tid}/sched")).ok()?)?;
    let ours = exec_start_ms(&read_proc_text("/proc/thread-self/sched").ok()?)?;
    Some(((ours - theirs).max(0.0) * 1e6) as u64)
}

/// Most bytes one read of a process's memory returns.
pub const MAX_READ: usize = 64 * 1024;

/// Up to `len` bytes (at most [`MAX_READ`]) of `pid`'s memory at `addr`: fewer when the
/// range runs into unmapped memory, none when it starts there.
pub fn read_memory(pid: u32, addr: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len.min(MAX_READ)];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `local` describes `buf`, which lives through the call; the remote range is
    // the other process's, checked by the kernel (a bad one fails or reads short).
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    buf.truncate(usize::try_from(n).unwrap_or(0));
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_lines_parse() {
        let s =
            parse_syscall("202 0x55d0c0a0 0x80 0x2 0x0 0x0 0x0 0x7ffd54b126b8 0x7fdbea1eb2ad\n")
                .unwrap();
        assert_eq!(
            (s.nr, s.args[0], s.args[1], s.args[2]),
            (202, 0x55d0c0a0, 0x80, 2)
        );
        assert_eq!((s.sp, s.pc), (0x7ffd54b126b8, 0x7fdbea1eb2ad));
        for junk in [
            "running",
            "-1 0x7ffd 0x7f",
            "",
            "202 0x1",
            "x 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8",
        ] {
            assert_eq!(parse_syscall(junk), None, "{junk}");
        }
    }

    #[test]
    fn exec_start_parses() {
        let t = "x (1, #threads: 1)\n---\nse.exec_start                                :      12359253.988150\n";
        assert_eq!(exec_start_ms(t), Some(12359253.988150));
        assert_eq!(exec_start_ms("nothing"), None);
    }

    #[test]
    fn this_process_reads_its_own_memory() {
        let data = [7u8, 8, 9, 10];
        let got = read_memory(std::process::id(), data.as_ptr() as u64, 4);
        assert_eq!(got, data);
        assert!(read_memory(std::process::id(), 8, 16).is_empty());
        assert!(off_cpu_ns(std::process::id(), std::process::id()).is_some());
    }
}
