//! Scheduling priority of the reader while it is behind. A target with dozens of busy
//! threads on a few CPUs leaves an ordinary-priority reader a small share of a CPU: in a
//! burst the ring fills and records are lost though the tracer has the speed to keep
//! up. From the kernel's signal that the backlog crossed a mark (an eighth of the ring)
//! until a drain leaves the ring empty, the reading thread runs at the highest priority
//! (nice -20); then it goes back to its own. The work done is the same either way (every record must be read);
//! the priority only makes it happen before the ring overflows.

/// Highest priority for a nice value.
const CATCH_UP_NICE: i32 = -20;

/// The reading thread's priority, raised while it is behind.
#[derive(Debug)]
pub struct CatchUp {
    /// The thread's own nice value, restored once caught up.
    normal: i32,
    raised: bool,
    /// Times the priority was raised.
    pub bursts: u64,
}

impl CatchUp {
    /// Remembers the calling thread's current priority.
    pub fn new() -> Self {
        Self {
            normal: nice(),
            raised: false,
            bursts: 0,
        }
    }

    /// Called after each drain with whether records were left in the ring.
    pub fn update(&mut self, behind: bool) {
        if behind != self.raised {
            let want = if behind { CATCH_UP_NICE } else { self.normal };
            // setpriority on PRIO_PROCESS with 0 applies to the calling thread alone on
            // Linux. Failing (no CAP_SYS_NICE) only means no help catching up.
            // SAFETY: plain system call on the calling thread.
            if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, want) } == 0 {
                self.raised = behind;
                self.bursts += u64::from(behind);
            } else {
                log::debug!("setpriority({want}): {}", std::io::Error::last_os_error());
            }
        }
    }
}

impl Default for CatchUp {
    fn default() -> Self {
        Self::new()
    }
}

/// The calling thread's nice value.
fn nice() -> i32 {
    // SAFETY: plain system call on the calling thread; -1 is a valid value, and errors
    // (which only an invalid argument could cause) leave the default of 0 meaningful.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}
