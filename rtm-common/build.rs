//! Sets the `bpf_target_arch` cfg for `arch` when the eBPF build's flags did not (a
//! clippy or check run of rtm-ebpf by hand), from the same inputs as aya-ebpf's own
//! build.rs, so the two agree on the architecture.
fn main() -> aya_build::Result<()> {
    aya_build::emit_bpf_target_arch_cfg()
}
