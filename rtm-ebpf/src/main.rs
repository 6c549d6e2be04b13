//! rtm-trace's eBPF programs. Every record they emit is declared in `rtm-common`.
#![no_std]
#![no_main]
// atomic_xchg: the BPF target has no atomic read-modify-write types.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod agg;
mod bounds;
mod calls;
mod emit;
mod filter;
mod func;
mod futex;
mod futex_done;
mod futex_fn;
mod lifecycle;
mod maps;
mod mpi;
mod regs;
mod stacks;
mod waking;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

// bpf_probe_read_user is GPL-only.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
