//! Ended futex waits summed in the kernel (contention mode; see `rtm_common::agg`): a
//! wait costs one map update here instead of a ring record and userspace's work on it.

use core::intrinsics::AtomicOrdering;

use aya_ebpf::{macros::map, maps::HashMap};
use rtm_common::{
    AGG_BUCKETS, AggOutcome, FutexAgg, FutexAggKey, LossCounter, agg_bucket,
    names::DEFAULT_AGG_ENTRIES,
};

use crate::maps::count_loss;

/// (waiter, word, waker, holder, outcome) -> the sums of its waits. Userspace sizes it.
#[map(name = "FUTEX_AGG")]
pub static FUTEX_AGG: HashMap<FutexAggKey, FutexAgg> =
    HashMap::with_max_entries(DEFAULT_AGG_ENTRIES, 0);

/// What a new entry starts as (too large for the BPF stack).
static NO_WAITS: FutexAgg = FutexAgg::EMPTY;

/// BPF_NOEXIST: insert only when the key is not there (another CPU may just have).
const BPF_NOEXIST: u64 = 1;

#[inline(always)]
fn add(at: *mut u64, n: u64) {
    // SAFETY: an aligned u64 of a map value; the add is atomic against other CPUs.
    unsafe { core::intrinsics::atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(at, n) };
}

/// Adds `n` waits of `wait_ns` each (of which `runnable_ns` runnable after the wake) to
/// `key`'s sums. False when the map is full (counted): the caller sends the wait as a
/// record.
#[inline(always)]
pub fn add_waits(key: &FutexAggKey, n: u64, wait_ns: u64, runnable_ns: u64) -> bool {
    let v = match FUTEX_AGG.get_ptr_mut(key) {
        Some(v) => v,
        None => {
            // By reference: by value the compiler copies 0.7 KiB through the 512-byte
            // BPF stack.
            #[allow(clippy::needless_borrows_for_generic_args)]
            let _ = FUTEX_AGG.insert(key, &NO_WAITS, BPF_NOEXIST);
            match FUTEX_AGG.get_ptr_mut(key) {
                Some(v) => v,
                None => {
                    count_loss(LossCounter::AggFull);
                    return false;
                }
            }
        }
    };
    // SAFETY: fields of a map value; counts and sums are added atomically, the extremes
    // written plainly (two CPUs ending waits of one thread on one word at the same
    // instant may leave one of two close values).
    unsafe {
        add(core::ptr::addr_of_mut!((*v).count), n);
        add(core::ptr::addr_of_mut!((*v).wait_ns), wait_ns * n);
        add(core::ptr::addr_of_mut!((*v).runnable_ns), runnable_ns * n);
        if wait_ns > (*v).max_ns {
            (*v).max_ns = wait_ns;
        }
        if wait_ns < (*v).min_ns {
            (*v).min_ns = wait_ns;
        }
        let b = crate::bounds::masked(agg_bucket(wait_ns), 255);
        if b < AGG_BUCKETS {
            let at = core::ptr::addr_of_mut!((*v).hist).cast::<u32>().add(b);
            core::intrinsics::atomic_xadd::<u32, u32, { AtomicOrdering::Relaxed }>(at, n as u32);
        }
    }
    true
}

/// The key of a wait of thread `pid_tgid` on `uaddr` (`op`) ended by `outcome`.
#[inline(always)]
pub fn key(
    pid_tgid: u64,
    uaddr: u64,
    op: u32,
    (waker_pid, waker): (u32, u32),
    holder: u32,
    outcome: AggOutcome,
) -> FutexAggKey {
    FutexAggKey {
        uaddr,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        waker_pid,
        waker,
        holder,
        outcome: outcome as u32,
        op,
        pad: 0,
    }
}
