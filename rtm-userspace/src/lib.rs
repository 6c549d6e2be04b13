//! rtm-trace library.
/// The eBPF object built by build.rs.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rtm-ebpf"));
