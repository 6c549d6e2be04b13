//! What the programs and userspace assume about the CPU architecture, in one place: the
//! system call numbers, where `struct pt_regs` (the kernel's saved user registers) keeps
//! each register, and how a function receives its arguments at its first instruction.
//!
//! Supported: **x86-64 only** (`x86_64.rs`). The architecture is the eBPF build's
//! `bpf_target_arch` cfg (set by aya-build's flags, or by this crate's build.rs from the
//! host the way aya-ebpf's own build.rs does, so the two agree) and userspace's
//! `target_arch`. Any other architecture stops the build at the `compile_error!` below
//! rather than running with x86-64's numbers.
//!
//! Why constants, when `task_struct`'s offsets come from the running kernel's BTF
//! (rtm-userspace's `probes/kernel_btf.rs`, loaded into the `TASK_*` globals):
//! `task_struct` changes with the kernel's version and configuration, while `pt_regs`
//! is the architecture's ABI, the same on every kernel of one architecture (on x86-64
//! ptrace's `user_regs_struct` starts with the same fields in the same order, and kprobe
//! programs get it as their context). Loading its offsets from BTF the same way would
//! work (a frozen global is a constant to the verifier) but would only find these
//! numbers again; instead rtm-userspace's test `the_running_kernels_offsets` checks
//! every offset here against the running kernel's BTF by member name
//! ([`pt_regs::BTF_MEMBERS`]).
//!
//! Porting to another architecture (aarch64, say) takes more than a sibling of
//! `x86_64.rs`: full mode reads the caller's return address from the stack at a
//! function's entry (aarch64 keeps it in x30); the uprobe placement in rtm-userspace
//! decodes x86-64 instructions (`probes/placement.rs`); the stack unwinder is
//! framehop's x86-64 one (`symbolize/unwind.rs`); and a record in a `futex_done` slot
//! relies on x86's store order to be whole once its mark is seen (rtm-ebpf's
//! `futex_done.rs`).

#[cfg(any(
    all(target_arch = "bpf", bpf_target_arch = "x86_64"),
    all(not(target_arch = "bpf"), target_arch = "x86_64"),
))]
mod x86_64;
#[cfg(any(
    all(target_arch = "bpf", bpf_target_arch = "x86_64"),
    all(not(target_arch = "bpf"), target_arch = "x86_64"),
))]
pub use x86_64::*;

#[cfg(not(any(
    all(target_arch = "bpf", bpf_target_arch = "x86_64"),
    all(not(target_arch = "bpf"), target_arch = "x86_64"),
)))]
compile_error!(
    "rtm-trace supports x86-64 only. For another architecture, add \
     rtm-common/src/arch/<arch>.rs with the constants of x86_64.rs (SYS_FUTEX, the \
     pt_regs offsets, the function-entry ABI), select it in rtm-common/src/arch/mod.rs, \
     and port what that module's docs list (return address at entry, uprobe placement, \
     unwinder, store order). eBPF builds take the architecture from the \
     bpf_target_arch cfg (AYA_BPF_TARGET_ARCH or the host)."
);
