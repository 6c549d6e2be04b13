//! Idempotent setup: quick when everything is already there.
//!
//! - the nightly toolchain's rust-src (for `-Z build-std=core`);
//! - bpf-linker 0.13, built from crates.io against the nightly toolchain's own libLLVM,
//!   installed under ~/.local/share/rtm-trace (see ../shared/reference/toolchain.md);
//! - a C compiler for the test workloads (Debian's gcc, libc6-dev).

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

/// bpf-linker release that fits aya 0.14 and LLVM 22.
const BPF_LINKER_VERSION: &str = "0.13.0";
/// Debian packages the suite needs.
const APT_PACKAGES: &[&str] = &[
    "gcc",
    "libc6-dev",
    "openmpi-bin",
    "libopenmpi-dev",
    "mpich",
    "libmpich-dev",
    "sysstat",
    "procps",
    // The agent's tests: a real Prometheus scrapes it; promtool lints its metrics, and
    // checks and unit-tests the monitoring mixin's rules (tests/tests/mixin.rs); a
    // Debian-packaged server (memcached, loaded by memcslap) is watched, with bpftrace
    // counting the same futex calls independently.
    "prometheus",
    "memcached",
    "libmemcached-tools",
    "bpftrace",
    // The agent's TLS and its unit: certificates made by openssl, curl (OpenSSL) as a
    // second TLS client, systemd-analyze to verify and score the unit, strace to check
    // the agent's system calls against its filter.
    "openssl",
    "curl",
    "systemd",
    "strace",
    // deploy_files.rs reads the Kubernetes manifests with PyYAML.
    "python3-yaml",
    // A Go program's futex waits are its runtime's (trust_e2e builds one); pprof_e2e
    // reads --pprof profiles with `go tool pprof`.
    "golang-go",
    // The outputs' tests: the HTML report in a real headless browser, the DOT graphs
    // through Graphviz, the live view in tmux, the timeline decoded by Perfetto's own
    // schema in a Python virtual environment.
    "chromium",
    "graphviz",
    "tmux",
    "python3-venv",
    // The kernel matrix (`cargo xtask vm`): Debian's kernels booted in QEMU with an
    // initramfs of static busybox and their virtio/9p modules (modinfo for their
    // dependencies); bindfs for a file system without O_TMPFILE on the host.
    "qemu-system-x86",
    "busybox-static",
    "kmod",
    "bindfs",
    // The package (`cargo xtask dist`): objcopy splits the debug info, readelf and
    // objdump read the build id and glibc versions; package_e2e.rs finds the
    // installed man pages with man-db (its bash completion needs no package).
    "binutils",
    "man-db",
];

/// PyPI's `perfetto` package: its compiled protobuf schema decodes the timelines in the
/// tests, independently of the tracer's own encoder.
const PERFETTO_PY: &str = "perfetto==0.59.1";

/// What later steps need: a PATH with bpf-linker on it.
pub struct Env {
    /// PATH for cargo invocations.
    pub path: String,
}

pub fn prefix() -> PathBuf {
    if let Some(p) = env::var_os("RTM_TOOLS_DIR") {
        return PathBuf::from(p);
    }
    let home = env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".local/share/rtm-trace")
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn status(cmd: &mut Command) -> Result<()> {
    let st = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    Ok(())
}

fn step(msg: &str) {
    eprintln!("xtask: {msg}");
}

/// Runs every step; prints one line per step that had work to do.
pub fn run() -> Result<Env> {
    ensure_nightly()?;
    let linker_bin = ensure_bpf_linker()?;
    ensure_apt()?;
    ensure_perfetto_python()?;
    let path = format!(
        "{}:{}",
        linker_bin.display(),
        env::var("PATH").unwrap_or_default()
    );
    Ok(Env { path })
}

fn ensure_nightly() -> Result<()> {
    let have_nightly = Command::new("rustc")
        .args(["+nightly", "-V"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !have_nightly {
        step("installing the nightly toolchain");
        status(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
            "--no-self-update",
        ]))?;
    }
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        "nightly",
    ]))?;
    if !installed.lines().any(|l| l.starts_with("rust-src")) {
        step("installing rust-src for nightly");
        status(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

/// The nightly toolchain's LLVM major version and shared library.
fn nightly_llvm() -> Result<(String, PathBuf)> {
    let vv = output(Command::new("rustc").args(["+nightly", "-vV"]))?;
    let major = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("rustc +nightly -vV did not report an LLVM version")?
        .to_owned();
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))?;
    let libdir = Path::new(sysroot.trim()).join("lib");
    let lib = std::fs::read_dir(&libdir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libLLVM.so"))
        })
        .with_context(|| format!("no libLLVM.so in {}", libdir.display()))?;
    Ok((major, lib))
}

fn ensure_bpf_linker() -> Result<PathBuf> {
    let root = prefix();
    let bin = root.join("bin");
    let (major, lib) = nightly_llvm()?;
    let stamp = root.join("bpf-linker.stamp");
    let want = format!("{BPF_LINKER_VERSION} llvm-{major} {}", lib.display());
    let works = Command::new(bin.join("bpf-linker"))
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if works && std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return Ok(bin);
    }
    step(&format!(
        "building bpf-linker {BPF_LINKER_VERSION} against the nightly toolchain's LLVM {major} (about 2 minutes, once)"
    ));
    // A private copy of libLLVM survives a later `rustup update`.
    let llvm = root.join("llvm/lib");
    std::fs::create_dir_all(&llvm)?;
    let name = lib.file_name().context("libLLVM has no file name")?;
    std::fs::copy(&lib, llvm.join(name))?;
    let link = llvm.join("libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(name, &link)?;
    status(
        Command::new("cargo")
            .env("LLVM_PREFIX", root.join("llvm"))
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--locked",
            ])
            .args([
                "--no-default-features",
                "--features",
                &format!("llvm-{major}"),
            ])
            .arg("--force")
            .arg("--root")
            .arg(&root),
    )?;
    std::fs::write(&stamp, want)?;
    Ok(bin)
}

/// The Python environment with Perfetto's schema (`$RTM_TOOLS_DIR/pyenv`, which the
/// tests find the same way).
fn ensure_perfetto_python() -> Result<()> {
    let env_dir = prefix().join("pyenv");
    let python = env_dir.join("bin/python");
    let has = |python: &Path| {
        Command::new(python)
            .args([
                "-c",
                "import perfetto.protos.perfetto.trace.perfetto_trace_pb2",
            ])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if has(&python) {
        return Ok(());
    }
    step(&format!(
        "installing {PERFETTO_PY} (its trace schema) into {}",
        env_dir.display()
    ));
    status(Command::new("python3").arg("-m").arg("venv").arg(&env_dir))?;
    status(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg(PERFETTO_PY),
    )?;
    if !has(&python) {
        bail!("{PERFETTO_PY} installed, but its schema does not import");
    }
    Ok(())
}

fn ensure_apt() -> Result<()> {
    ensure_packages(APT_PACKAGES)
}

/// Installs the Debian packages that are missing (quietly nothing when all are there).
pub fn ensure_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    step(&format!(
        "installing Debian packages: {}",
        missing.join(" ")
    ));
    status(Command::new("apt-get").args(["update", "-qq"]))?;
    status(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-qq"])
            .args(&missing),
    )
}
