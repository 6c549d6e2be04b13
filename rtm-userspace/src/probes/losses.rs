//! The loss counters: events the programs could not send.

use aya::maps::PerCpuArray;
use rtm_common::{LossCounter, names};

use super::{
    error::{ProbeError, map_err},
    load::Probes,
};

impl Probes {
    /// Current loss counters, summed over CPUs, in `LossCounter` order.
    pub fn losses(&self) -> Result<[u64; LossCounter::COUNT as usize], ProbeError> {
        let map = self
            .ebpf
            .map(names::MAP_LOSSES)
            .ok_or(ProbeError::Missing(names::MAP_LOSSES))?;
        let arr: PerCpuArray<_, u64> =
            PerCpuArray::try_from(map).map_err(map_err(names::MAP_LOSSES))?;
        let mut out = [0u64; LossCounter::COUNT as usize];
        for c in LossCounter::ALL {
            let values = arr
                .get(&(c as u32), 0)
                .map_err(map_err(names::MAP_LOSSES))?;
            out[c as usize] = values.iter().sum();
        }
        Ok(out)
    }
}
