//! `--func`'s kernel tables read back: the calls in flight (each thread's slot in
//! FUNC_SLOTS, or its FUNC_PENDING entry) and the finished calls threads kept unsent.

use std::collections::HashSet;

use aya::Ebpf;
use rtm_common::names;

/// The calls of timed functions in flight now (`--func`): (pid, tid, function, start),
/// from the threads' slots and from FUNC_PENDING.
pub fn running_calls(ebpf: &Ebpf) -> Vec<(u32, u32, u32, u64)> {
    let mut out = Vec::new();
    let mut add = |pid_tgid: u64, st: &rtm_common::FuncStack| {
        let depth = (st.depth as usize).min(st.frames.len());
        out.extend(st.frames[..depth].iter().map(|f| {
            (
                (pid_tgid >> 32) as u32,
                pid_tgid as u32,
                f.function,
                f.start_ns,
            )
        }));
    };
    if let Some(map) = ebpf.map(names::MAP_FUNC_SLOTS)
        && let Ok(m) = aya::maps::Array::<_, rtm_common::FuncStack>::try_from(map)
    {
        for st in m.iter().flatten().filter(|st| st.owner != 0) {
            add(st.owner, &st);
        }
    }
    if let Some(map) = ebpf.map(names::MAP_FUNC_PENDING)
        && let Ok(m) = aya::maps::HashMap::<_, u64, rtm_common::FuncStack>::try_from(map)
    {
        for (pid_tgid, st) in m.iter().flatten() {
            add(pid_tgid, &st);
        }
    }
    out
}

/// Takes the finished calls of timed functions the threads of `pids` kept unsent (each
/// thread sends them in batches; once the programs no longer run for a process, the
/// rest is taken here), one record per thread. Only for processes the programs no
/// longer run for: the calls taken are cleared from the kernel's tables (a thread later
/// given the same ids must not send them again); the calls in flight stay, to be read
/// as running.
pub fn take_kept_calls(ebpf: &mut Ebpf, pids: &HashSet<u32>) -> Vec<rtm_common::FuncEvent> {
    let now = crate::proc::process::monotonic_ns();
    let mut out = Vec::new();
    let mut add = |pid_tgid: u64, st: &rtm_common::FuncStack| {
        let (pid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
        let n = (st.done as usize).min(rtm_common::FUNC_BATCH);
        if n > 0 {
            out.push(rtm_common::FuncEvent {
                header: rtm_common::EventHeader {
                    kind: rtm_common::EventKind::Func as u32,
                    cpu: 0,
                    ts_ns: now,
                    pid,
                    tid,
                },
                count: n as u32,
                pad: 0,
                calls: st.finished,
            });
        }
    };
    let ours = |pid_tgid: u64| pid_tgid != 0 && pids.contains(&((pid_tgid >> 32) as u32));
    if let Some(map) = ebpf.map_mut(names::MAP_FUNC_SLOTS)
        && let Ok(mut m) = aya::maps::Array::<_, rtm_common::FuncStack>::try_from(map)
    {
        let taken: Vec<(u32, rtm_common::FuncStack)> = (0..m.len())
            .filter_map(|i| Some((i, m.get(&i, 0).ok()?)))
            .filter(|(_, st)| ours(st.owner) && st.done > 0)
            .collect();
        for (i, mut st) in taken {
            add(st.owner, &st);
            st.done = 0;
            if let Err(e) = m.set(i, st, 0) {
                log::debug!("emptying a timed-call slot: {e}");
            }
        }
    }
    if let Some(map) = ebpf.map_mut(names::MAP_FUNC_PENDING)
        && let Ok(mut m) = aya::maps::HashMap::<_, u64, rtm_common::FuncStack>::try_from(map)
    {
        let taken: Vec<(u64, rtm_common::FuncStack)> = m
            .iter()
            .flatten()
            .filter(|(pid_tgid, st)| ours(*pid_tgid) && st.done > 0)
            .collect();
        for (pid_tgid, mut st) in taken {
            add(pid_tgid, &st);
            st.done = 0;
            if let Err(e) = m.insert(pid_tgid, st, 0) {
                log::debug!("clearing a thread's kept timed calls: {e}");
            }
        }
    }
    out
}
