//! Scheduling priority of the reader. A target with dozens of busy threads on a few CPUs
//! leaves an ordinary-priority reader a small share of a CPU: in a burst the ring fills
//! and records are lost though the tracer has the speed to keep up. From the kernel's
//! first signal that the backlog crossed a mark (an eighth of the ring), the reading
//! thread runs at the highest priority (nice -20) for the rest of the trace. The work
//! done is the same either way (every record must be read); the priority only makes it
//! happen before the ring overflows.
//!
//! The priority is not lowered again once the ring is empty. The kernel's scheduler
//! (EEVDF) keeps a thread's lag across a change of weight by scaling it with the weight
//! ratio (86x from nice -20 to 0): a reader that had just caught up at nice -20 came back
//! to nice 0 so far behind its fair share that it did not run for 100-170 ms, and a
//! 64-thread burst of 800,000 events lost 30-50% of them with an 8 MiB ring (nothing
//! with the priority kept).

/// Highest priority for a nice value.
const CATCH_UP_NICE: i32 = -20;

/// The reading thread's priority, raised at the first backlog.
#[derive(Debug, Default)]
pub struct CatchUp {
    raised: bool,
}

impl CatchUp {
    /// Never raised: the kernel sums each wait (contention mode without a timeline), so
    /// the rings carry only sampled waits and their stacks, at a bounded rate. A reader
    /// at nice -20 preempted the target's lock holders each time it woke, which cost a
    /// program whose critical sections yield a tenth of its throughput.
    pub fn never() -> Self {
        Self { raised: true }
    }

    /// Called with whether records were left in the ring (or the kernel signalled a
    /// backlog); the first time they were, raises the calling thread's priority.
    pub fn update(&mut self, behind: bool) {
        if behind && !self.raised {
            // setpriority on PRIO_PROCESS with 0 applies to the calling thread alone on
            // Linux. Failing (no CAP_SYS_NICE) only means no help catching up; it is
            // tried once.
            self.raised = true;
            // SAFETY: plain system call on the calling thread.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, CATCH_UP_NICE) } != 0 {
                log::debug!(
                    "setpriority({CATCH_UP_NICE}): {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
}
