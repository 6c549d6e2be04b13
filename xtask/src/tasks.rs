//! Build, demo and test tasks.

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::setup::{Env, status};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub fn cargo(env: &Env) -> Command {
    let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root()).env("PATH", &env.path);
    c
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

pub fn build(env: &Env, release: bool) -> Result<()> {
    let mut c = cargo(env);
    c.args(["build", "-p", "rtm-userspace"]);
    if release {
        c.arg("--release");
    }
    status(&mut c)
}

/// Builds rtm-trace and the demo workload, then traces the demo.
pub fn demo(env: &Env) -> Result<()> {
    if !is_root() {
        bail!("the demo loads eBPF programs: run it as root (sudo -E cargo xtask demo)");
    }
    build(env, true)?;
    let out = root().join("target/workloads");
    std::fs::create_dir_all(&out)?;
    let demo = crate::measure::workload(&root(), &out, "demo")?;
    let bin = root().join("target/release/rtm-trace");
    // The default mode first (what `rtm-trace --pid` gives), then every call traced.
    // The full run also writes the pictures: the HTML report, the timeline, the graphs.
    for mode in ["contention", "full"] {
        let file = |ext: &str| out.join(format!("demo-{mode}.{ext}"));
        let mut args: Vec<std::ffi::OsString> = vec![
            "--mode".into(),
            mode.into(),
            "--json".into(),
            file("json").into(),
        ];
        if mode == "full" {
            for (flag, ext) in [
                ("--html", "html"),
                ("--timeline", "pftrace"),
                ("--dot", "dot"),
            ] {
                args.push(flag.into());
                args.push(file(ext).into());
            }
        }
        eprintln!(
            "\nxtask: running: {} {} -- {}",
            bin.display(),
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            demo.display()
        );
        status(Command::new(&bin).args(&args).arg("--").arg(&demo))
            .with_context(|| format!("tracing the demo in {mode} mode"))?;
    }
    eprintln!(
        "\nxtask: open {} in a browser; load {} at https://ui.perfetto.dev (nothing is \
         uploaded: the page reads the file locally); `dot -Tsvg {}` draws the graphs",
        out.join("demo-full.html").display(),
        out.join("demo-full.pftrace").display(),
        out.join("demo-full.dot").display()
    );
    Ok(())
}

/// The whole suite: formatting, lints (userspace and eBPF), unit tests, and the
/// privileged end-to-end tests, which load real eBPF programs.
pub fn test(env: &Env) -> Result<()> {
    eprintln!("xtask: cargo fmt --check");
    status(cargo(env).args(["fmt", "--all", "--check"]))?;
    eprintln!("xtask: clippy (userspace)");
    status(cargo(env).args([
        "clippy",
        "--workspace",
        "--exclude",
        "rtm-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    eprintln!("xtask: clippy (eBPF, bpfel-unknown-none)");
    status(
        Command::new("rustup")
            .current_dir(root().join("rtm-ebpf"))
            .env("PATH", &env.path)
            .env_remove("RUSTUP_TOOLCHAIN")
            .args(["run", "nightly", "cargo", "clippy", "-p", "rtm-ebpf"])
            .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
            .args(["--target-dir"])
            .arg(root().join("target/ebpf-clippy"))
            .args(["--", "-D", "warnings"]),
    )?;
    // The end-to-end tests run the real binary, and install the package (built from
    // the release binary, which the benchmarks' smoke run below reuses).
    build(env, false)?;
    let bin = root().join("target/debug/rtm-trace");
    let started = std::time::Instant::now();
    let package = crate::dist::dist(env)?.main;
    eprintln!(
        "xtask: release build and packages: {:.0} s ({})",
        started.elapsed().as_secs_f64(),
        package.display()
    );
    if !is_root() {
        eprintln!(
            "xtask: WARNING: not root: the end-to-end eBPF tests will fail (or, outside CI, \
             report themselves as ignored, saying why). Run: sudo -E cargo xtask test"
        );
    }
    eprintln!("xtask: cargo test (unit tests, then end-to-end eBPF tests one at a time)");
    status(
        cargo(env)
            .env("RTM_TRACE_BIN", &bin)
            .env("RTM_TRACE_DEB", &package)
            .args([
                "test",
                "--workspace",
                "--exclude",
                "rtm-ebpf",
                "--no-fail-fast",
                "--",
                "--test-threads=1",
            ]),
    )?;
    // The same smoke set inside Debian 12's and 13's kernels.
    eprintln!("xtask: kernel matrix (cargo xtask vm)");
    crate::vm::run(env, &[], &[], None)?;
    // Proves every benchmark still runs end to end; its figures are not the ones to
    // quote (BENCHMARKS.md comes from the full `cargo xtask bench`).
    eprintln!("xtask: benchmark smoke run (cargo xtask bench --smoke)");
    crate::bench(Vec::new(), true, None)
}
