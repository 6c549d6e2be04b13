//! The kernels of the matrix: Debian's own packages, fetched and checked by apt (each
//! suite's signed index, with a private apt state under the tools directory), unpacked,
//! and turned into what QEMU boots: the kernel image and an initramfs of static busybox
//! and the virtio/9p modules that kernel needs to mount the host's files.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, SystemTime},
};

use anyhow::{Context, Result, bail};

use crate::setup::{prefix, status};

/// A kernel of the matrix: which Debian release ships it.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// What the suite calls it (also `cargo xtask vm --kernel`).
    pub label: &'static str,
    /// Debian's suite.
    pub suite: &'static str,
    /// For people.
    pub debian: &'static str,
}

/// Debian 12 (the README's "fresh Debian 12 machine") and Debian 13.
pub const MATRIX: [Spec; 2] = [
    Spec {
        label: "6.1",
        suite: "bookworm",
        debian: "Debian 12",
    },
    Spec {
        label: "6.12",
        suite: "trixie",
        debian: "Debian 13",
    },
];

/// A kernel ready to boot.
#[derive(Debug)]
pub struct Kernel {
    /// `uname -r` of it.
    pub release: String,
    pub image: PathBuf,
    pub initramfs: PathBuf,
}

/// How long a fetched kernel is used before apt is asked for a newer one.
const FRESH: Duration = Duration::from_secs(7 * 24 * 3600);

/// Modules (and what they need) for the host's files over virtio 9p; each is skipped
/// where the kernel has it built in.
const MODULES: [&str; 3] = ["virtio_pci", "9pnet_virtio", "9p"];

/// The init of the initramfs: mounts the host's root (read-only) and the share over 9p,
/// the kernel file systems, tmpfs where the host's would be written, and runs the
/// script the kernel command line names (`rtm.script=`) in the host's root, its exit
/// status to the share.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in /mods/*.ko; do [ -e "$m" ] && { insmod "$m" || echo "RTM-VM: insmod $m failed"; }; done
R=/host
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 host $R || echo "RTM-VM: cannot mount the host's files"
mount -t proc proc $R/proc
mount -t sysfs sys $R/sys
mount -t devtmpfs dev $R/dev
mount -t devpts devpts $R/dev/pts
mount -t tmpfs tmp $R/dev/shm
for d in tmp run var/tmp root/.cache; do mount -t tmpfs tmp $R/$d 2>/dev/null; done
mount -t tracefs tracefs $R/sys/kernel/tracing
mount -t debugfs debugfs $R/sys/kernel/debug
mount -t bpf bpf $R/sys/fs/bpf
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup
mkdir -p $R/run/vm
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 share $R/run/vm || echo "RTM-VM: cannot mount the share"
script=$(sed -n 's/.*rtm\.script=\([^ ]*\).*/\1/p' /proc/cmdline)
echo "RTM-VM: up: $(cat /proc/sys/kernel/osrelease), $(grep -c ^processor /proc/cpuinfo) CPUs"
chroot $R /bin/sh -c "hostname rtm-vm; ip link set lo up; cd /; exec /bin/bash $script"
echo $? > $R/run/vm/exit-status
sync
poweroff -f
"#;

fn apt_options(dir: &Path) -> Vec<String> {
    vec![
        format!(
            "-o=Dir::Etc::SourceList={}",
            dir.join("sources.list").display()
        ),
        format!("-o=Dir::Etc::SourceParts={}", dir.join("parts").display()),
        format!("-o=Dir::State::Lists={}", dir.join("lists").display()),
        format!("-o=Dir::Cache={}", dir.join("cache").display()),
        "-o=Dir::State::status=/dev/null".into(),
        "-o=APT::Architecture=amd64".into(),
        "-o=Acquire::Languages=none".into(),
        "-qq".into(),
    ]
}

/// The name of the kernel package the suite's `linux-image-amd64` depends on today.
fn current_package(spec: Spec, apt: &Path) -> Result<String> {
    for sub in ["lists/partial", "cache/archives/partial", "parts"] {
        std::fs::create_dir_all(apt.join(sub))?;
    }
    let key = "signed-by=/usr/share/keyrings/debian-archive-keyring.gpg";
    let s = spec.suite;
    std::fs::write(
        apt.join("sources.list"),
        format!(
            "deb [{key}] http://deb.debian.org/debian {s} main\n\
             deb [{key}] http://deb.debian.org/debian {s}-updates main\n\
             deb [{key}] http://deb.debian.org/debian-security {s}-security main\n"
        ),
    )?;
    status(Command::new("apt-get").args(apt_options(apt)).arg("update"))
        .with_context(|| format!("fetching {}'s package index (deb.debian.org)", spec.debian))?;
    let out = Command::new("apt-cache")
        .args(apt_options(apt))
        .args(["depends", "linux-image-amd64"])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Depends: "))
        .filter(|p| p.starts_with("linux-image-"))
        .map(str::to_owned)
        .with_context(|| {
            format!(
                "{}: linux-image-amd64 names no kernel:\n{text}",
                spec.debian
            )
        })
}

/// The kernel `spec` names, fetched, unpacked and given an initramfs (once a week at
/// most; quick when present).
pub fn ensure(spec: Spec) -> Result<Kernel> {
    let dir = prefix().join("kernels").join(spec.suite);
    std::fs::create_dir_all(&dir)?;
    let ready = dir.join("ready");
    let fresh = std::fs::metadata(&ready)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < FRESH);
    let built = |release: &str| Kernel {
        release: release.to_owned(),
        image: dir.join(format!("vmlinuz-{release}")),
        initramfs: dir.join(format!("initramfs-{release}.cpio")),
    };
    let known = std::fs::read_to_string(&ready).ok();
    if let Some(release) = known.as_deref().map(str::trim).filter(|_| fresh) {
        let k = built(release);
        if k.image.exists() && k.initramfs.exists() {
            return Ok(k);
        }
    }
    let apt = dir.join("apt");
    let package = current_package(spec, &apt)?;
    if let Some(release) = known.as_deref().map(str::trim) {
        let k = built(release);
        if package.ends_with(release) && k.image.exists() && k.initramfs.exists() {
            std::fs::write(&ready, release)?;
            return Ok(k);
        }
    }
    eprintln!("xtask: fetching {package} ({})", spec.debian);
    let work = dir.join("unpack");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    status(
        Command::new("apt-get")
            .current_dir(&work)
            .args(apt_options(&apt))
            .args(["download", &package]),
    )?;
    let deb = std::fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")?;
    let root = work.join("root");
    status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    let image = std::fs::read_dir(root.join("boot"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .context("the package has no /boot/vmlinuz-*")?;
    let release = image
        .file_name()
        .unwrap()
        .to_string_lossy()
        .trim_start_matches("vmlinuz-")
        .to_owned();
    let modules = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(&release))
        .find(|d| d.exists())
        .context("the package has no modules directory")?;
    let k = built(&release);
    std::fs::copy(&image, &k.image)?;
    write_initramfs(&modules, &k.initramfs)?;
    std::fs::remove_dir_all(&work)?;
    // Older kernels of this suite go.
    for e in std::fs::read_dir(&dir)?.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        if (n.starts_with("vmlinuz-") || n.starts_with("initramfs-")) && !n.contains(&release) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    std::fs::write(&ready, &release)?;
    Ok(k)
}

/// The module files `names` need in `dir`, dependencies first (from each module's own
/// `depends`); built-in ones are left out.
fn module_order(dir: &Path, names: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let mut files = std::collections::HashMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)?.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(n) = p.file_name().map(|n| n.to_string_lossy().into_owned())
                && let Some(stem) = n.split(".ko").next().filter(|_| n.contains(".ko"))
            {
                files.insert(stem.replace('-', "_"), p);
            }
        }
    }
    fn visit(
        name: &str,
        files: &std::collections::HashMap<String, PathBuf>,
        out: &mut Vec<(String, PathBuf)>,
    ) -> Result<()> {
        let key = name.replace('-', "_");
        let Some(path) = files.get(&key) else {
            return Ok(()); // built in
        };
        if out.iter().any(|(n, _)| *n == key) {
            return Ok(());
        }
        let deps = Command::new("modinfo")
            .args(["-F", "depends"])
            .arg(path)
            .output()
            .context("modinfo (Debian's kmod)")?;
        for d in String::from_utf8_lossy(&deps.stdout)
            .trim()
            .split(',')
            .filter(|d| !d.is_empty())
        {
            visit(d, files, out)?;
        }
        out.push((key, path.clone()));
        Ok(())
    }
    let mut out = Vec::new();
    for n in names {
        visit(n, &files, &mut out)?;
    }
    Ok(out)
}

/// A module's bytes, uncompressed (busybox's insmod takes plain ones).
fn module_bytes(path: &Path) -> Result<Vec<u8>> {
    let name = path.to_string_lossy();
    let out = if name.ends_with(".xz") {
        Command::new("busybox")
            .args(["xz", "-dc"])
            .arg(path)
            .output()?
    } else if name.ends_with(".zst") {
        Command::new("zstd").args(["-dc"]).arg(path).output()?
    } else if name.ends_with(".gz") {
        Command::new("busybox")
            .args(["gzip", "-dc"])
            .arg(path)
            .output()?
    } else {
        return Ok(std::fs::read(path)?);
    };
    if !out.status.success() || out.stdout.is_empty() {
        bail!("cannot uncompress {name}");
    }
    Ok(out.stdout)
}

/// Writes the initramfs (an uncompressed "newc" cpio archive, which the kernel takes
/// as it is).
fn write_initramfs(modules: &Path, out: &Path) -> Result<()> {
    let busybox = std::fs::read("/bin/busybox").context("static busybox (busybox-static)")?;
    let mut cpio = Cpio::default();
    for d in ["bin", "dev", "proc", "sys", "host", "mods", "tmp"] {
        cpio.dir(d);
    }
    cpio.file("init", 0o755, INIT.as_bytes());
    cpio.file("bin/busybox", 0o755, &busybox);
    for (i, (name, path)) in module_order(modules, &MODULES)?.iter().enumerate() {
        cpio.file(
            &format!("mods/{:02}-{name}.ko", i + 1),
            0o644,
            &module_bytes(path)?,
        );
    }
    let mut f = std::fs::File::create(out)?;
    f.write_all(&cpio.finish())?;
    Ok(())
}

/// A "newc" cpio archive in memory.
#[derive(Default)]
struct Cpio {
    bytes: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let fields = [
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len() as u32,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        self.bytes.extend_from_slice(b"070701");
        for f in fields {
            self.bytes.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpio_archive_is_what_cpio_reads() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.file("bin/hello", 0o755, b"#!/bin/sh\necho hi\n");
        let bytes = c.finish();
        assert_eq!(&bytes[..6], b"070701");
        assert!(bytes.len().is_multiple_of(4));
        let dir = std::env::temp_dir().join(format!("xtask-cpio-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut child = Command::new("busybox")
            .args(["cpio", "-i", "-d"])
            .current_dir(&dir)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("busybox (busybox-static)");
        child.stdin.take().unwrap().write_all(&bytes).unwrap();
        assert!(child.wait().unwrap().success());
        let body = std::fs::read_to_string(dir.join("bin/hello")).unwrap();
        assert_eq!(body, "#!/bin/sh\necho hi\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
