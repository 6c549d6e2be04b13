//! Futex op helpers: commands that wait or wake, timeout flags, deadline slack.

/// How far before its deadline a wake still counts as the timeout (timers fire at or
/// after the deadline; this covers a realtime deadline's conversion).
pub const DEADLINE_SLACK_NS: u64 = 1_000_000;

/// Futex flag: the word is private to its process (its wakes come from that process).
pub const FUTEX_PRIVATE_FLAG: u32 = 128;
/// Futex flag: an absolute timeout is on CLOCK_REALTIME.
pub const FUTEX_CLOCK_REALTIME: u32 = 256;

/// How a futex wait's timeout argument is to be read: None for no timeout (or a command
/// without one), Some(true) when absolute on CLOCK_REALTIME, Some(false) when
/// absolute on CLOCK_MONOTONIC; relative timeouts (FUTEX_WAIT) are `Some(false)` with
/// [`futex_timeout_relative`].
pub const fn futex_timeout_realtime(op: u32) -> bool {
    let cmd = op & FUTEX_CMD_MASK;
    // FUTEX_LOCK_PI's timeout is always on CLOCK_REALTIME.
    cmd == 6 || op & FUTEX_CLOCK_REALTIME != 0
}

/// Whether a futex command's timeout is relative to the call (FUTEX_WAIT), not absolute.
pub const fn futex_timeout_relative(op: u32) -> bool {
    op & FUTEX_CMD_MASK == 0
}

/// Futex commands (`op & FUTEX_CMD_MASK`) that put the caller to sleep.
pub const fn futex_cmd_waits(cmd: u32) -> bool {
    matches!(cmd, 0 | 6 | 9 | 11 | 13)
}

/// Futex commands that wake sleepers.
pub const fn futex_cmd_wakes(cmd: u32) -> bool {
    matches!(cmd, 1 | 3 | 4 | 5 | 7 | 10 | 12)
}

/// Masks the private and clock flags off a futex op.
pub const FUTEX_CMD_MASK: u32 = 0x7f;
