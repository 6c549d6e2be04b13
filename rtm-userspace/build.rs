//! Builds the eBPF object (rtm-ebpf) for bpfel-unknown-none with the nightly toolchain
//! and bpf-linker; the binary embeds it from OUT_DIR. `cargo xtask setup` installs both.
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "rtm-ebpf")
        .ok_or_else(|| anyhow!("rtm-ebpf package not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("rtm-ebpf manifest has no parent directory"))?
        .as_str()
        .to_owned();
    if which_bpf_linker().is_none() {
        // `cargo check`, `cargo doc` and clippy work without the eBPF toolchain: the
        // object is then empty, and rtm-trace refuses to trace, saying how to build it.
        let out = std::path::PathBuf::from(
            std::env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR"))?,
        );
        std::fs::write(out.join("rtm-ebpf"), b"").context("writing the empty eBPF object")?;
        println!(
            "cargo:warning=bpf-linker is not on PATH: built without the eBPF programs, so this \
             rtm-trace cannot trace. Run `cargo xtask setup` (it installs rust-src and \
             bpf-linker) and add ~/.local/share/rtm-trace/bin to PATH, or build with \
             `cargo xtask build`"
        );
        return Ok(());
    }
    // The programs compile rtm-common's ABI in: a change there must rebuild them too.
    for dir in ["../rtm-common/src", "../rtm-ebpf/src"] {
        println!("cargo:rerun-if-changed={dir}");
    }
    aya_build::build_ebpf(
        [aya_build::Package {
            name: ebpf.name.as_str(),
            root_dir: &root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}

fn which_bpf_linker() -> Option<std::path::PathBuf> {
    println!("cargo:rerun-if-env-changed=PATH");
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bpf-linker"))
        .find(|p| p.is_file())
}
