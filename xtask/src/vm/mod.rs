//! The kernel matrix: the end-to-end smoke set run inside QEMU, booted with Debian's own
//! kernels (6.1 of Debian 12, 6.12 of Debian 13), as well as on the host's kernel.
//!
//! The guest sees the host's whole file system read-only over virtio 9p (tmpfs where
//! programs write), so it runs the very binaries and test executables the host built,
//! at the same paths, against the same libraries. A writable share carries the script
//! in, and the results and logs out. This machine's /dev/kvm cannot boot a stock
//! kernel, so KVM is tried once (the verdict is kept) and TCG used otherwise. Under TCG
//! a trap costs ~100x what it does on hardware, so the tests check what is exact there
//! (counts, names, outcomes) and leave timing comparisons to the host's run
//! (`RTM_TEST_EMULATED`).

mod kernels;

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};

use crate::{
    setup::{Env, prefix},
    tasks::{cargo, root},
};
pub use kernels::MATRIX;

/// The smoke set: a ground-truth test for each mode and feature (exact counts in both
/// modes and on the fallback paths, `--func`, `--blocked` and the live deadlock check,
/// the timeline, stacks, wakes across processes, timeouts, MPI, the agent scraped by
/// Prometheus, a target's pid given again (the exit program's group-death test reads
/// task_struct and signal_struct by BTF), results on 9p, and every program loading),
/// by test file and name.
pub const SMOKE: &[(&str, &str)] = &[
    ("kernel_e2e", "every_program_loads_and_each_feature_says_so"),
    (
        "agent_targets_e2e",
        "a_pid_given_again_never_relabels_the_exited_targets_series",
    ),
    (
        "kernel_e2e",
        "results_land_on_a_file_system_without_unnamed_files",
    ),
    ("production_e2e", "summed_waits_are_the_kernels_futex_waits"),
    (
        "trust_e2e",
        "wakes_from_another_traced_process_are_wakes_not_timeouts",
    ),
    (
        "trust_e2e",
        "wakes_from_an_untraced_process_are_wakes_from_outside",
    ),
    (
        "trust_e2e",
        "timer_expiries_are_timeouts_whatever_thread_has_the_cpu",
    ),
    (
        "timeline_e2e",
        "waits_wakes_and_counters_of_a_condition_variable",
    ),
    (
        "modes_e2e",
        "contention_mode_agrees_with_full_mode_and_names_the_releaser",
    ),
    ("modes_e2e", "contention_mode_agrees_on_its_fallback_paths"),
    (
        "modes_e2e",
        "full_mode_counts_exactly_on_its_fallback_paths",
    ),
    (
        "mutex_e2e",
        "launch_mode_counts_hold_times_and_contention_match_ground_truth",
    ),
    (
        "primitives_e2e",
        "semaphores_count_waits_posts_and_failed_trywaits",
    ),
    (
        "func_e2e",
        "calls_and_times_match_the_workloads_own_per_thread",
    ),
    (
        "blocked_e2e",
        "an_abba_deadlock_names_both_threads_locks_and_holders",
    ),
    (
        "blocked_e2e",
        "a_deadlock_is_found_while_tracing_within_a_second_and_ends_the_run",
    ),
    (
        "timeline_e2e",
        "holds_and_calls_in_full_mode_match_the_workload_count",
    ),
    (
        "stacks_e2e",
        "waiter_and_releaser_chains_without_frame_pointers",
    ),
    (
        "mpi_e2e",
        "open_mpi_ring_traffic_collectives_and_ranks_are_exact",
    ),
    (
        "agent_e2e",
        "prometheus_scrapes_a_workload_found_after_the_agent_started",
    ),
];

/// How long one guest may run the whole set before it is stopped.
const GUEST_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// Each test's time limit inside the guest.
const TEST_TIMEOUT_S: u32 = 400;

/// The end-to-end test executable cargo built (`e2e`: every test file of tests/tests is
/// a module of it, each test named `file::name`).
fn e2e_executable(env: &Env) -> Result<PathBuf> {
    let out = cargo(env)
        .args([
            "test",
            "-p",
            "rtm-tests",
            "--test",
            "e2e",
            "--no-run",
            "--message-format=json",
        ])
        .stderr(Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("building the end-to-end tests failed");
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] == "compiler-artifact"
            && v["target"]["name"] == "e2e"
            && let Some(exe) = v["executable"].as_str()
        {
            return Ok(PathBuf::from(exe));
        }
    }
    bail!("cargo built no e2e test executable")
}

/// The guest's script: `rtm-trace check`, then each test of `tests` on its own, each
/// result a line in the share.
fn script(bin: &Path, tests: &[(PathBuf, &str, &str)]) -> String {
    let mut s = String::from(
        "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         export HOME=/root CI=true RUST_BACKTRACE=1\n\
         # Emulated CPUs: a uprobe's trap costs the guest ~100x what it costs on hardware,\n\
         # inside the workloads' own clocks; the tests compare counts, not times, here.\n\
         export RTM_TEST_EMULATED=1\n",
    );
    s.push_str(&format!(
        "export RTM_TRACE_BIN={} RTM_TEST_NO_TMPFILE_DIR=/run/vm/scratch\n",
        bin.display()
    ));
    // The guest covers /tmp, /var/tmp and /root/.cache with tmpfs: a repository under
    // one of them (a CI's fresh clone in /tmp) is uncovered, read-only as the rest of
    // the host's files, and temporary files go to another.
    s.push_str(&format!(
        "case \"{}/\" in\n\
         /tmp/*) umount /tmp && export TMPDIR=/var/tmp ;;\n\
         /var/tmp/*) umount /var/tmp && export TMPDIR=/tmp ;;\n\
         /root/.cache/*) umount /root/.cache ;;\n\
         /run/*) echo \"RTM-VM: the repository is under /run, which the guest covers\" ;;\n\
         esac\n",
        root().display()
    ));
    s.push_str(&format!("cd {}\nmkdir -p /run/vm/logs\n", root().display()));
    s.push_str(&format!(
        "echo \"RTM-VM: rtm-trace check\"\nstart=$(date +%s)\n\
         {} check -v > /run/vm/logs/check.log 2>&1\n\
         echo \"RESULT check $? $(( $(date +%s) - start ))\" >> /run/vm/results\n",
        bin.display()
    ));
    for (i, (exe, file, name)) in tests.iter().enumerate() {
        s.push_str(&format!(
            "echo \"RTM-VM: {file}::{name}\"\nstart=$(date +%s)\n\
             timeout -k 10 {TEST_TIMEOUT_S} {} --exact {file}::{name} --test-threads=1 \
             > /run/vm/logs/{i}.log 2>&1\n\
             echo \"RESULT {file}::{name} $? $(( $(date +%s) - start )) {i}\" >> /run/vm/results\n",
            exe.display()
        ));
    }
    s
}

/// Whether KVM boots a stock kernel here (asked once; the answer is kept).
fn kvm_works(k: &kernels::Kernel, share: &Path) -> bool {
    let verdict = prefix().join("kernels/kvm-verdict");
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if let Ok(v) = std::fs::read_to_string(&verdict)
        && let Some((h, answer)) = v.trim().rsplit_once(' ')
        && h == host.trim()
    {
        return answer == "yes";
    }
    let works = std::fs::metadata("/dev/kvm").is_ok() && {
        std::fs::write(share.join("run.sh"), "true\n").is_ok()
            && boot(
                k,
                share,
                true,
                Duration::from_secs(15),
                &mut std::io::sink(),
            )
            .is_ok()
            && std::fs::read_to_string(share.join("exit-status")).is_ok_and(|s| s.trim() == "0")
    };
    let _ = std::fs::write(
        &verdict,
        format!("{} {}", host.trim(), if works { "yes" } else { "no" }),
    );
    works
}

/// Boots `k` with the share at /run/vm and its run.sh as the script; the console goes to
/// `console`. Fails when the guest does not power off within `limit`.
fn boot(
    k: &kernels::Kernel,
    share: &Path,
    kvm: bool,
    limit: Duration,
    console: &mut dyn std::io::Write,
) -> Result<()> {
    let _ = std::fs::remove_file(share.join("exit-status"));
    let mut cmd = Command::new("qemu-system-x86_64");
    if kvm {
        cmd.args(["-accel", "kvm", "-cpu", "host"]);
    } else {
        // One host thread for both vCPUs: with a thread per vCPU (QEMU 7.2), a CPU
        // that hit the int3 of the kernel's live code patching (text_poke_bp, as a
        // tracepoint or perf event is enabled) kept re-running it, and the other spun in
        // the IPI waiting for it: a soft lockup 1 run in 3.
        cmd.args(["-accel", "tcg,thread=single", "-cpu", "max"]);
    }
    cmd.args([
        "-smp",
        "2",
        "-m",
        "4G",
        "-nographic",
        "-no-reboot",
        "-net",
        "none",
    ])
    .arg("-kernel")
    .arg(&k.image)
    .arg("-initrd")
    .arg(&k.initramfs)
    .args([
        "-append",
        "console=ttyS0 quiet panic=-1 rtm.script=/run/vm/run.sh",
        "-virtfs",
        "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap",
        "-virtfs",
    ])
    .arg(format!(
        "local,path={},mount_tag=share,security_model=none",
        share.display()
    ))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("qemu-system-x86_64 (Debian's qemu-system-x86)")?;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let started = Instant::now();
    loop {
        while let Ok(line) = rx.try_recv() {
            // The firmware's screen control sequences are noise in a log.
            let text: String = String::from_utf8_lossy(&line)
                .chars()
                .filter(|c| !c.is_control() || *c == '\t')
                .collect();
            let _ = console.write_all(format!("{text}\n").as_bytes());
        }
        if let Some(st) = child.try_wait()? {
            if !st.success() {
                let mut err = String::new();
                let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
                bail!("qemu failed ({st}): {}", err.trim());
            }
            return Ok(());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the guest did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One test's outcome in a guest.
struct Outcome {
    name: String,
    status: i32,
    seconds: u64,
    log: PathBuf,
}

fn outcomes(share: &Path) -> Vec<Outcome> {
    std::fs::read_to_string(share.join("results"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace().skip(1);
            let name = f.next()?.to_owned();
            let status = f.next()?.parse().ok()?;
            let seconds = f.next()?.parse().ok()?;
            let log = match f.next() {
                Some(i) => share.join(format!("logs/{i}.log")),
                None if name == "script" => share.join("logs/script.log"),
                None => share.join("logs/check.log"),
            };
            Some(Outcome {
                name,
                status,
                seconds,
                log,
            })
        })
        .collect()
}

/// Runs the smoke set (or the tests named by `only`, as `file::name` or a part of it) in
/// a guest of each kernel `labels` names (all when empty); or, with `user_script`, that
/// shell script instead (a measurement on another kernel: its output is printed, and
/// kept in target/vm/SUITE/logs/script.log). Fails when any test failed or could not
/// run.
pub fn run(
    env: &Env,
    labels: &[String],
    only: &[String],
    user_script: Option<&Path>,
) -> Result<()> {
    crate::tasks::build(env, false)?;
    if user_script.is_some() {
        // A measurement script uses the release binary (target/release/rtm-trace).
        crate::tasks::build(env, true)?;
    }
    let bin = root().join("target/debug/rtm-trace");
    let exe = e2e_executable(env)?;
    // A smoke test renamed or gone would match nothing and pass in every guest.
    let listed = Command::new(&exe).arg("--list").output()?;
    let listed = String::from_utf8_lossy(&listed.stdout);
    if let Some((file, name)) = SMOKE
        .iter()
        .find(|(f, n)| !listed.lines().any(|l| l == format!("{f}::{n}: test")))
    {
        bail!("the smoke test {file}::{name} is not in {}", exe.display());
    }
    let mut tests = Vec::new();
    let user_script = user_script
        .map(|p| p.canonicalize().with_context(|| format!("{}", p.display())))
        .transpose()?;
    for &(file, name) in SMOKE.iter().filter(|_| user_script.is_none()) {
        if !only.is_empty()
            && !only
                .iter()
                .any(|o| format!("{file}::{name}").contains(o.as_str()))
        {
            continue;
        }
        tests.push((exe.clone(), file, name));
    }
    let specs: Vec<kernels::Spec> = MATRIX
        .iter()
        .copied()
        .filter(|s| labels.is_empty() || labels.iter().any(|l| l == s.label || l == s.suite))
        .collect();
    if specs.is_empty() {
        bail!(
            "no kernel of the matrix is called {labels:?} (it has {})",
            MATRIX.map(|s| s.label).join(", ")
        );
    }
    // Each guest is one emulated host thread: the kernels run side by side, one a core.
    let kernels: Vec<kernels::Kernel> = specs
        .iter()
        .map(|&s| kernels::ensure(s))
        .collect::<Result<_>>()?;
    let probe = root().join("target/vm/kvm-probe");
    std::fs::create_dir_all(&probe)?;
    let kvm = kvm_works(&kernels[0], &probe);
    let mut failed = Vec::new();
    std::thread::scope(|scope| {
        let runs: Vec<_> = kernels
            .iter()
            .zip(&specs)
            .map(|(k, spec)| {
                let (bin, tests, user_script) = (&bin, &tests, user_script.as_deref());
                scope.spawn(move || guest(k, spec, kvm, bin, tests, user_script))
            })
            .collect();
        for r in runs {
            match r.join() {
                Ok(Ok(f)) => failed.extend(f),
                Ok(Err(e)) => failed.push(format!("{e:#}")),
                Err(_) => failed.push("a guest's runner panicked".into()),
            }
        }
    });
    if !failed.is_empty() {
        bail!("kernel matrix: {}", failed.join("; "));
    }
    Ok(())
}

/// Runs `tests` in a guest of kernel `k`; returns what failed.
fn guest(
    k: &kernels::Kernel,
    spec: &kernels::Spec,
    kvm: bool,
    bin: &Path,
    tests: &[(PathBuf, &str, &str)],
    user_script: Option<&Path>,
) -> Result<Vec<String>> {
    let mut failed = Vec::new();
    let share = root().join(format!("target/vm/{}", spec.suite));
    let _ = std::fs::remove_dir_all(&share);
    std::fs::create_dir_all(share.join("scratch"))?;
    let mut run_sh = script(bin, tests);
    if let Some(s) = user_script {
        run_sh.push_str(&format!(
            "echo \"RTM-VM: {0}\"\nstart=$(date +%s)\nsh {0} > /run/vm/logs/script.log 2>&1\n\
             echo \"RESULT script $? $(( $(date +%s) - start ))\" >> /run/vm/results\n",
            s.display()
        ));
    }
    std::fs::write(share.join("run.sh"), run_sh)?;
    let _ = std::fs::remove_file(share.join("results"));
    eprintln!(
        "xtask: kernel {} ({}), {} tests in a {} guest",
        k.release,
        spec.debian,
        tests.len() + 1,
        if kvm { "KVM" } else { "TCG (emulated)" }
    );
    let started = Instant::now();
    let console_path = share.join("console.log");
    let mut console = Tee(std::fs::File::create(&console_path)?, k.release.clone());
    let booted = boot(k, &share, kvm, GUEST_TIMEOUT, &mut console);
    let results = outcomes(&share);
    let mut said = String::new();
    for o in &results {
        said.push_str(&format!(
            "xtask: [{}] {:>4} s  {}  {}\n",
            k.release,
            o.seconds,
            if o.status == 0 { "ok    " } else { "FAILED" },
            o.name
        ));
        if o.status != 0 {
            let log = std::fs::read_to_string(&o.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            said.push_str(&format!("---- {} ({}):\n", o.name, o.log.display()));
            for l in tail.iter().rev() {
                said.push_str(&format!("    {l}\n"));
            }
            failed.push(format!("{} on {}", o.name, k.release));
        }
    }
    eprint!("{said}");
    if user_script.is_some() {
        let log = std::fs::read_to_string(share.join("logs/script.log")).unwrap_or_default();
        for l in log.lines() {
            eprintln!("xtask: [{}] | {l}", k.release);
        }
    }
    let expected = tests.len() + 1 + usize::from(user_script.is_some());
    if let Err(e) = booted {
        failed.push(format!(
            "the {} guest: {e} (console: {})",
            k.release,
            console_path.display()
        ));
    } else if results.len() < expected {
        failed.push(format!(
            "{} of {expected} tests reported on {} (console: {})",
            results.len(),
            k.release,
            console_path.display()
        ));
    }
    eprintln!(
        "xtask: kernel {} done in {:.0} s",
        k.release,
        started.elapsed().as_secs_f64()
    );
    Ok(failed)
}

/// The console to its log file, with the guest's own progress lines on stderr.
struct Tee(std::fs::File, String);

impl std::io::Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(s) = std::str::from_utf8(buf)
            && let Some((_, said)) = s.split_once("RTM-VM: ")
        {
            eprint!("xtask: [{}] {said}", self.1);
        }
        self.0.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
