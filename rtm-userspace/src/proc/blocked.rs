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

/// Context switches of thread `tid` of `pid` so far (voluntary and not), from its
/// `status`: unchanged between two reads, it did not run in between.
pub fn switches(pid: u32, tid: u32) -> Option<u64> {
    let status = read_proc_text(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    parse_switches(&status)
}

fn parse_switches(status: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim_start_matches(':')
            .trim()
            .parse()
            .ok()
    };
    Some(field("voluntary_ctxt_switches")? + field("nonvoluntary_ctxt_switches")?)
}

/// What a `sched` file says of a thread's last run: when it was (`se.exec_start`, ms on
/// the task clock of the CPU it ran on; 0 when it has not run since it was created or
/// moved to another CPU: the kernel zeroes it then), and counts that change when it runs
/// or moves.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LastRun {
    exec_start_ms: f64,
    switches: Option<u64>,
    migrations: Option<u64>,
}

fn parse_last_run(text: &str) -> Option<LastRun> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix(':'))
            .map(str::trim)
    };
    Some(LastRun {
        exec_start_ms: field("se.exec_start")?.parse().ok()?,
        switches: field("nr_switches").and_then(|v| v.parse().ok()),
        migrations: field("se.nr_migrations").and_then(|v| v.parse().ok()),
    })
}

fn last_run(pid: u32, tid: u32) -> Option<LastRun> {
    parse_last_run(&read_proc_text(format!("/proc/{pid}/task/{tid}/sched")).ok()?)
}

/// What a thread's `stat` says: its state, the CPU it last ran on (field 39), and when
/// it started (field 22, clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskStat {
    state: char,
    cpu: u32,
    start_ticks: u64,
}

fn parse_task_stat(stat: &str) -> Option<TaskStat> {
    // Counting from the state (field 3) after the comm's ')'.
    let mut f = stat.rsplit_once(')')?.1.split_whitespace();
    let state = f.next()?.chars().next()?;
    let start_ticks = f.nth(18)?.parse().ok()?;
    let cpu = f.nth(16)?.parse().ok()?;
    Some(TaskStat {
        state,
        cpu,
        start_ticks,
    })
}

/// Nanoseconds from `exec_start_ms` to `now_ms` (both on one CPU's task clock), for a
/// thread alive `age_ns`: None when there is no last run (0), or when it would be longer
/// than the thread lived, which no true reading is.
fn off_cpu_within(now_ms: f64, exec_start_ms: f64, age_ns: u64) -> Option<u64> {
    if exec_start_ms <= 0.0 {
        return None;
    }
    let off = ((now_ms - exec_start_ms).max(0.0) * 1e6) as u64;
    (off <= age_ns).then_some(off)
}

/// How long threads have been off their CPU, from when the scheduler last ran them.
///
/// That time (`se.exec_start`) is on the task clock of the CPU the thread last ran on,
/// which leaves out that CPU's interrupt and steal time: the CPUs' clocks drift apart
/// (160 ms after six hours on a two-CPU VM here; seconds on a busy host), so a thread's
/// last run is compared with its own CPU's clock. Each CPU's clock is read once, by a
/// short-lived thread run on it, against CLOCK_MONOTONIC.
#[derive(Debug, Default)]
pub struct CpuClocks {
    /// Per CPU: its task clock minus CLOCK_MONOTONIC, in ms (None: it cannot be run on
    /// here, e.g. outside this process's cpuset).
    offsets: std::collections::HashMap<u32, Option<f64>>,
}

impl CpuClocks {
    /// Nanoseconds since thread `tid` of `pid` last ran: for a blocked thread, about
    /// how long it has been blocked. None when unknown (never a guess).
    ///
    /// The CPU is read between two equal reads of the last run, while the thread is not
    /// runnable: a thread woken in between may have moved to another CPU (whose clock
    /// its last run is not on) and have no last run until it runs (read then, the time
    /// since was the whole of the CPU's clock: 1224 s in a 20 s old process).
    pub fn off_cpu_ns(&mut self, pid: u32, tid: u32) -> Option<u64> {
        let run = last_run(pid, tid)?;
        let stat = read_proc_text(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        let stat = parse_task_stat(&stat)?;
        if stat.state == 'R' || last_run(pid, tid)? != run {
            return None;
        }
        let offset = (*self
            .offsets
            .entry(stat.cpu)
            .or_insert_with(|| clock_offset_ms(stat.cpu)))?;
        let now = super::process::monotonic_ns() as f64 / 1e6 + offset;
        let started_ns =
            stat.start_ticks.checked_mul(1_000_000_000)? / super::process::ticks_per_second()?;
        let age_ns = super::process::clock_ns(libc::CLOCK_BOOTTIME).checked_sub(started_ns)?;
        off_cpu_within(now, run.exec_start_ms, age_ns)
    }
}

/// CPU `cpu`'s task clock minus CLOCK_MONOTONIC (ms), read by a thread moved onto it:
/// its own last run there began just now.
fn clock_offset_ms(cpu: u32) -> Option<f64> {
    let read = move || -> Option<f64> {
        // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it
        // (the index is checked against its size first).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        if cpu as usize >= 8 * std::mem::size_of::<libc::cpu_set_t>() {
            return None;
        }
        // SAFETY: see above.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        // SAFETY: sets this (short-lived) thread's own affinity from a valid set.
        if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
            return None;
        }
        // SAFETY: sched_getcpu has no preconditions.
        if unsafe { libc::sched_getcpu() } != cpu as i32 {
            return None;
        }
        let ours = parse_last_run(&read_proc_text("/proc/thread-self/sched").ok()?)?.exec_start_ms;
        Some(ours - super::process::monotonic_ns() as f64 / 1e6)
    };
    std::thread::scope(|s| s.spawn(read).join().ok().flatten())
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
    fn switches_parse_and_count_this_threads_own() {
        let status = "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(parse_switches(status), Some(15));
        assert_eq!(parse_switches("Name:\tx\n"), None);
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() } as u32;
        let before = switches(std::process::id(), me).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(switches(std::process::id(), me).unwrap() > before);
    }

    #[test]
    fn last_runs_parse() {
        let t = "x (1, #threads: 1)\n---\n\
            se.exec_start                                :      12359253.988150\n\
            se.vruntime                                  :        107458.963208\n\
            se.nr_migrations                             :                    2\n\
            nr_switches                                  :                  370\n\
            nr_voluntary_switches                        :                  369\n";
        let run = parse_last_run(t).unwrap();
        assert_eq!(run.exec_start_ms, 12359253.988150);
        assert_eq!((run.switches, run.migrations), (Some(370), Some(2)));
        assert_eq!(parse_last_run("nothing"), None);
        // This thread's own: it is running, so it has run.
        let own = parse_last_run(&read_proc_text("/proc/thread-self/sched").unwrap()).unwrap();
        assert!(own.exec_start_ms > 0.0 && own.switches.is_some() && own.migrations.is_some());
    }

    #[test]
    fn task_stats_parse_after_any_command_name() {
        // Field N holds N, after a command name with spaces and parentheses.
        let fields: Vec<String> = (4..=52).map(|n| n.to_string()).collect();
        let stat = format!("17 (a) b (c) S {}\n", fields.join(" "));
        let want = TaskStat {
            state: 'S',
            cpu: 39,
            start_ticks: 22,
        };
        assert_eq!(parse_task_stat(&stat), Some(want));
        assert_eq!(parse_task_stat("17 (a) S 4 5"), None);
    }

    #[test]
    fn off_cpu_is_unknown_without_a_last_run_or_longer_than_the_thread_lived() {
        assert_eq!(
            off_cpu_within(1500.0, 1000.0, 600_000_000),
            Some(500_000_000)
        );
        assert_eq!(
            off_cpu_within(1500.0, 1000.0, 500_000_000),
            Some(500_000_000)
        );
        assert_eq!(off_cpu_within(1500.0, 1000.0, 499_999_999), None);
        // No last run: the kernel zeroed it when it moved the thread.
        assert_eq!(off_cpu_within(24_234_410.0, 0.0, u64::MAX), None);
        // Clocks read a little apart: never below zero.
        assert_eq!(off_cpu_within(999.0, 1000.0, 1), Some(0));
    }

    #[test]
    fn this_process_reads_its_own_memory() {
        let data = [7u8, 8, 9, 10];
        let got = read_memory(std::process::id(), data.as_ptr() as u64, 4);
        assert_eq!(got, data);
        assert!(read_memory(std::process::id(), 8, 16).is_empty());
    }

    /// A thread asleep on another CPU than the reader's: how long since it ran is its
    /// own clock's, within a few ms (comparing with the reader's CPU's clock was off by
    /// those clocks' drift: 160 ms here).
    #[test]
    fn off_cpu_time_is_read_on_the_threads_own_cpus_clock() {
        let cpus = crate::proc::host::online_cpus().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let sleeper = std::thread::spawn(move || {
            // On the last CPU (the reader then mostly runs on another).
            let cpu = *cpus.last().unwrap() as usize;
            // SAFETY: a zeroed set is valid; CPU_SET writes inside it.
            let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: see above.
            unsafe { libc::CPU_SET(cpu, &mut set) };
            // SAFETY: this thread's own affinity, from a valid set.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            tx.send((tid, crate::proc::process::monotonic_ns()))
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1500));
        });
        let (tid, slept_at) = rx.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        let mut clocks = CpuClocks::default();
        let off = clocks.off_cpu_ns(std::process::id(), tid).unwrap() as i64;
        let truth = (crate::proc::process::monotonic_ns() - slept_at) as i64;
        sleeper.join().unwrap();
        // It ran a little after it said when (to send and to sleep): never less than
        // that; preempted on the way on a loaded machine, more.
        assert!(
            off <= truth + 5_000_000 && off >= truth - 200_000_000,
            "off CPU {off} ns, asleep {truth} ns"
        );
        // The clock of a CPU this process can run on is known.
        assert!(clocks.offsets.values().all(Option::is_some), "{clocks:?}");
    }
    /// Pins thread `tid` (0: the caller) to `cpu` alone.
    fn pin(tid: i32, cpu: i32) {
        // SAFETY: a zeroed set is valid; CPU_SET writes inside it (cpu < 1024).
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: see above.
        unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        // SAFETY: a thread of this process, from a valid set.
        let r = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
        assert_eq!(r, 0, "pinning {tid} to CPU {cpu}");
    }

    /// A thread woken onto another CPU than it slept on has no last run until it runs
    /// again: the kernel zeroes its `se.exec_start` when it moves it. Read then, "since
    /// it last ran" was the whole of that CPU's clock (hours on a machine up for hours).
    /// The CPU it is moved to is kept busy, so the read comes before it runs.
    #[test]
    fn a_thread_moved_to_another_cpu_is_never_off_cpu_longer_than_it_lived() {
        use std::sync::{
            atomic::{AtomicBool, Ordering},
            mpsc,
        };
        let cpus = crate::proc::host::online_cpus().unwrap();
        let [a, b, ..] = cpus[..] else {
            eprintln!("not run: it needs two CPUs, this machine has {cpus:?}");
            return;
        };
        let born = crate::proc::process::monotonic_ns();
        let stop = AtomicBool::new(false);
        let (wake, woken) = mpsc::channel::<bool>();
        let (ack, acked) = mpsc::channel::<i32>();
        let mut reads = Vec::new();
        std::thread::scope(|s| {
            s.spawn(|| {
                pin(0, b);
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
            s.spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                // Back on CPU a after each wake, then asleep there.
                loop {
                    pin(0, a);
                    ack.send(tid).unwrap();
                    if !woken.recv().unwrap() {
                        break;
                    }
                }
            });
            pin(0, a);
            let mut clocks = CpuClocks::default();
            clocks.offsets.insert(b as u32, clock_offset_ms(b as u32));
            for _ in 0..100 {
                let tid = acked.recv().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
                // Asleep on a: moved to b when it wakes.
                pin(tid, b);
                wake.send(true).unwrap();
                let off = clocks.off_cpu_ns(std::process::id(), tid as u32);
                let lived = crate::proc::process::monotonic_ns() - born;
                reads.push((off, lived));
            }
            acked.recv().unwrap();
            wake.send(false).unwrap();
            stop.store(true, Ordering::Relaxed);
        });
        let known = reads.iter().filter(|(o, _)| o.is_some()).count();
        println!("{known} of {} reads known", reads.len());
        let impossible: Vec<_> = reads
            .iter()
            .filter(|(off, lived)| off.is_some_and(|o| o > *lived))
            .collect();
        assert!(
            impossible.is_empty(),
            "{} reads off CPU longer than alive (off, alive ns): {impossible:?}",
            impossible.len()
        );
    }
}
