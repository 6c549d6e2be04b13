//! `cargo xtask dist`: the Debian packages, built with dpkg-deb from the release binary.
//!
//! `rtm-trace_<version>_<arch>.deb` holds the stripped binary, its man pages and shell
//! completions (written by the binary itself, `rtm-trace __generate`, from the clap
//! command it parses with), the agent's systemd unit and example config, and the docs.
//! `rtm-trace-dbg_<version>_<arch>.deb` holds the debug info split out of the binary,
//! under /usr/lib/debug/.build-id, where gdb and perf look for it.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use crate::{
    setup::{Env, status},
    tasks::{build, root},
};

/// The version of the packages: the workspace's.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the binary goes: a tool run by hand with sudo and by the agent's unit.
pub const BIN: &str = "/usr/bin/rtm-trace";

/// The agent's example config: a conffile (the admin's edits survive upgrades).
const AGENT_CONFIG: &str = "/etc/rtm-trace/agent.toml";

/// The packages `dist` wrote.
pub struct Packages {
    /// rtm-trace_<version>_<arch>.deb.
    pub main: PathBuf,
    /// rtm-trace-dbg_<version>_<arch>.deb.
    pub debug: PathBuf,
}

/// Builds the release binary and both packages into target/dist.
pub fn dist(env: &Env) -> Result<Packages> {
    build(env, true)?;
    let root = root();
    let bin = root.join("target/release/rtm-trace");
    let arch = output(Command::new("dpkg").arg("--print-architecture"))?;
    let out = root.join("target/dist");
    let main_dir = out.join("rtm-trace");
    let dbg_dir = out.join("rtm-trace-dbg");
    for d in [&main_dir, &dbg_dir] {
        if d.exists() {
            fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
    }

    // The binary, stripped, pointing at its debug file (by build id and by name).
    let build_id = build_id(&bin)?;
    let debug_rel = format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    );
    let debug_file = dbg_dir.join(&debug_rel);
    mkdir(debug_file.parent().expect("has a parent"))?;
    status(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg("--compress-debug-sections")
            .arg(&bin)
            .arg(&debug_file),
    )?;
    let stripped = main_dir.join(BIN.trim_start_matches('/'));
    mkdir(stripped.parent().expect("has a parent"))?;
    // As dh_strip does: no debug info, no symbols a program does not need, no comments.
    status(
        Command::new("objcopy")
            .args(["--strip-debug", "--strip-unneeded"])
            .args(["--remove-section=.comment", "--remove-section=.note"])
            .arg(format!("--add-gnu-debuglink={}", debug_file.display()))
            .arg(&bin)
            .arg(&stripped),
    )?;

    // Man pages and completions, from the binary's own command line.
    let man = main_dir.join("usr/share/man/man8");
    status(
        Command::new(&stripped)
            .args(["__generate", "man"])
            .arg(&man),
    )?;
    for page in fs::read_dir(&man)? {
        status(Command::new("gzip").args(["-9n"]).arg(page?.path()))?;
    }
    let gen_dir = out.join("completions");
    status(
        Command::new(&stripped)
            .args(["__generate", "completions"])
            .arg(&gen_dir),
    )?;
    for (generated, dest) in [
        (
            "rtm-trace.bash",
            "usr/share/bash-completion/completions/rtm-trace",
        ),
        ("_rtm-trace", "usr/share/zsh/vendor-completions/_rtm-trace"),
        (
            "rtm-trace.fish",
            "usr/share/fish/vendor_completions.d/rtm-trace.fish",
        ),
    ] {
        copy(&gen_dir.join(generated), &main_dir.join(dest))?;
    }

    // The agent's unit and config, and the docs.
    copy(
        &root.join("deploy/rtm-trace-agent.service"),
        &main_dir.join("lib/systemd/system/rtm-trace-agent.service"),
    )?;
    copy(
        &root.join("deploy/agent.toml"),
        &main_dir.join(AGENT_CONFIG.trim_start_matches('/')),
    )?;
    let doc = main_dir.join("usr/share/doc/rtm-trace");
    copy(&root.join("README.md"), &doc.join("README.md"))?;
    for page in fs::read_dir(root.join("docs"))? {
        let page = page?.path();
        if page.extension().is_some_and(|e| e == "md") {
            copy(&page, &doc.join(page.file_name().expect("a file")))?;
        }
    }
    fs::write(doc.join("copyright"), COPYRIGHT)?;
    let dbg_doc = dbg_dir.join("usr/share/doc/rtm-trace-dbg");
    mkdir(&dbg_doc)?;
    fs::write(dbg_doc.join("copyright"), COPYRIGHT)?;

    // Control files.
    let depends = format!("libc6 (>= {}), libgcc-s1", glibc_needed(&stripped)?);
    control(
        &main_dir,
        &format!(
            "Package: rtm-trace\n\
             Version: {VERSION}\n\
             Architecture: {arch}\n\
             Maintainer: rtm-trace maintainers <maintainers@rtm-trace.invalid>\n\
             Installed-Size: {size}\n\
             Depends: {depends}\n\
             Suggests: rtm-trace-dbg\n\
             Section: admin\n\
             Priority: optional\n\
             Description: run-time monitor of thread synchronization, on eBPF\n \
             Attach to an unmodified, running multi-threaded program and see where its\n \
             threads wait on each other: contended locks, for how long, which thread\n \
             each waiter waited for, hold times, barriers, condition variables; for MPI\n \
             programs, which ranks talk to which. Includes the Prometheus agent\n \
             (rtm-trace-agent.service, not enabled) and its example config.\n",
            size = installed_kib(&main_dir)?,
        ),
    )?;
    fs::write(
        main_dir.join("DEBIAN/conffiles"),
        format!("{AGENT_CONFIG}\n"),
    )?;
    script(&main_dir, "postinst", POSTINST)?;
    script(&main_dir, "prerm", PRERM)?;
    script(&main_dir, "postrm", POSTRM)?;
    control(
        &dbg_dir,
        &format!(
            "Package: rtm-trace-dbg\n\
             Version: {VERSION}\n\
             Architecture: {arch}\n\
             Maintainer: rtm-trace maintainers <maintainers@rtm-trace.invalid>\n\
             Installed-Size: {size}\n\
             Depends: rtm-trace (= {VERSION})\n\
             Section: debug\n\
             Priority: optional\n\
             Description: debug symbols for rtm-trace\n \
             The debug info split out of /usr/bin/rtm-trace (build id {build_id}), for\n \
             gdb, perf and backtraces.\n",
            size = installed_kib(&dbg_dir)?,
        ),
    )?;

    let main = out.join(format!("rtm-trace_{VERSION}_{arch}.deb"));
    let debug = out.join(format!("rtm-trace-dbg_{VERSION}_{arch}.deb"));
    for (dir, deb) in [(&main_dir, &main), (&dbg_dir, &debug)] {
        md5sums(dir)?;
        // Its progress on stderr: stdout is the package's path alone.
        status(
            Command::new("dpkg-deb")
                .args(["--root-owner-group", "-Zxz", "--build"])
                .arg(dir)
                .arg(deb)
                .stdout(std::io::stderr()),
        )?;
    }
    Ok(Packages { main, debug })
}

/// The build id of `elf`, as hex.
fn build_id(elf: &Path) -> Result<String> {
    let notes = output(Command::new("readelf").arg("-n").arg(elf))?;
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .map(|s| s.trim().to_owned())
        .filter(|s| s.len() > 2)
        .with_context(|| format!("{} has no build id", elf.display()))
}

/// The newest glibc symbol version `elf` uses: the libc6 it needs.
fn glibc_needed(elf: &Path) -> Result<String> {
    let symbols = output(Command::new("objdump").arg("-T").arg(elf))?;
    let version = |v: &str| -> Vec<u32> { v.split('.').filter_map(|n| n.parse().ok()).collect() };
    symbols
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("(GLIBC_").or(w.strip_prefix("GLIBC_")))
        .map(|v| v.trim_end_matches(')'))
        .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
        .max_by_key(|v| version(v))
        .map(str::to_owned)
        .with_context(|| format!("{} uses no versioned glibc symbol", elf.display()))
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {cmd:?} (is it installed?)"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn mkdir(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    mkdir(to.parent().expect("has a parent"))?;
    fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    Ok(())
}

/// Writes DEBIAN/control.
fn control(dir: &Path, text: &str) -> Result<()> {
    mkdir(&dir.join("DEBIAN"))?;
    fs::write(dir.join("DEBIAN/control"), text)?;
    Ok(())
}

/// Writes an executable maintainer script.
fn script(dir: &Path, name: &str, text: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("DEBIAN").join(name);
    fs::write(&path, text)?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

/// The package's size once installed, in KiB (dpkg's Installed-Size).
fn installed_kib(dir: &Path) -> Result<u64> {
    fn walk(dir: &Path, total: &mut u64) -> Result<()> {
        for e in fs::read_dir(dir)? {
            let e = e?;
            let meta = e.metadata()?;
            if meta.is_dir() {
                if e.file_name() != "DEBIAN" {
                    walk(&e.path(), total)?;
                }
            } else {
                *total += meta.len().div_ceil(1024);
            }
        }
        Ok(())
    }
    let mut total = 0;
    walk(dir, &mut total)?;
    Ok(total)
}

/// Writes DEBIAN/md5sums (what `dpkg --verify` checks).
fn md5sums(dir: &Path) -> Result<()> {
    let list = output(Command::new("sh").current_dir(dir).args([
        "-c",
        "find . -path ./DEBIAN -prune -o -type f -printf '%P\\0' | sort -z | xargs -0r md5sum",
    ]))?;
    fs::write(dir.join("DEBIAN/md5sums"), format!("{list}\n"))?;
    Ok(())
}

/// systemd learns of the unit; it is not enabled (its example config selects processes
/// that are not there: the admin edits it first, then enables it).
const POSTINST: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi\n";

/// A running agent is stopped before its binary goes.
const PRERM: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ] && [ \"$1\" = remove ]; then\n  \
systemctl stop rtm-trace-agent.service >/dev/null 2>&1 || true\nfi\n";

const POSTRM: &str = "#!/bin/sh\nset -e\n\
if [ -d /run/systemd/system ]; then systemctl daemon-reload >/dev/null || true; fi\n\
if [ \"$1\" = purge ]; then rmdir /etc/rtm-trace 2>/dev/null || true; fi\n";

/// debian/copyright, machine-readable: the workspace's licence (MIT OR Apache-2.0).
const COPYRIGHT: &str = "\
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: rtm-trace

Files: *
Copyright: the rtm-trace developers
License: MIT or Apache-2.0

License: Apache-2.0
 On Debian systems, the complete text of the Apache License, Version 2.0, is in
 /usr/share/common-licenses/Apache-2.0.

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy of
 this software and associated documentation files (the \"Software\"), to deal in
 the Software without restriction, including without limitation the rights to
 use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of
 the Software, and to permit persons to whom the Software is furnished to do so,
 subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in all
 copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS
 FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR
 COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER
 IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN
 CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
";
