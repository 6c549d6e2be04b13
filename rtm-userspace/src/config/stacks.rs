//! Call stacks in a config: whether contended waits' stacks are captured, how much of
//! each stack is copied, how many per second, and the files they are written to.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Call stacks of contended waits: the waiter's and the waker's
/// user stacks are copied at each wake that ends a sleeping wait and unwound here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StacksConfig {
    /// Capture them.
    pub enabled: bool,
    /// Bytes of each stack copied from its stack pointer up (one of
    /// `rtm_common::STACK_SIZES`): deeper stacks are cut there.
    pub bytes: u32,
    /// A folded-stack file (waiter frames, `--`, waker frames, wait ns) for flame-graph
    /// tools (None: not written).
    pub folded: Option<PathBuf>,
    /// A gzip-compressed pprof profile of the contended waits' stacks (None: not
    /// written).
    pub pprof: Option<PathBuf>,
    /// Waits whose stacks are taken, per CPU per second at most (`all`: every one; 0:
    /// none). Each sample stands for the waits it was chosen among, so per-stack totals
    /// are estimates; per-lock totals are exact whatever the rate.
    pub rate: StackRate,
}

/// The default bytes of each stack copy.
pub const DEFAULT_STACK_BYTES: u32 = 4096;

/// Most stacks a second per CPU a rate may ask for (`all` takes every wait's).
pub const MAX_STACK_RATE: u32 = 1_000_000;

/// The default stacks taken per CPU per second.
pub const DEFAULT_STACK_RATE: u32 = 200;

impl Default for StacksConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            bytes: DEFAULT_STACK_BYTES,
            folded: None,
            pprof: None,
            rate: StackRate::PerSecond(DEFAULT_STACK_RATE),
        }
    }
}

/// How many waits' stacks are taken ([`StacksConfig::rate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackRate {
    /// Every wait's.
    All,
    /// At most this many per CPU per second, sampled (0: none).
    PerSecond(u32),
}

impl StackRate {
    /// `all`, or a number of stacks per CPU per second.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "all" => Ok(StackRate::All),
            n => n
                .parse::<u32>()
                .ok()
                .filter(|&n| n <= MAX_STACK_RATE)
                .map(StackRate::PerSecond)
                .ok_or_else(|| {
                    format!(
                        "{n:?} is not a stack rate: give `all`, or stacks per CPU per second \
                         (0 to {MAX_STACK_RATE})"
                    )
                }),
        }
    }

    /// As the eBPF programs take it (u32::MAX: all).
    pub fn per_second(self) -> u32 {
        match self {
            StackRate::All => u32::MAX,
            StackRate::PerSecond(n) => n,
        }
    }
}

impl std::fmt::Display for StackRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackRate::All => f.write_str("all"),
            StackRate::PerSecond(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for StackRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            StackRate::All => s.serialize_str("all"),
            StackRate::PerSecond(n) => s.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for StackRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => u32::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_STACK_RATE)
                .map(StackRate::PerSecond)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!("{n} stacks a second is too many"))
                }),
            Raw::Text(t) => StackRate::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// Checks a stack copy size: one of `rtm_common::STACK_SIZES`.
pub fn check_stack_bytes(v: u32) -> Result<u32, String> {
    if rtm_common::STACK_SIZES.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{v} is not a stack copy size; use one of {:?}",
            rtm_common::STACK_SIZES
        ))
    }
}
