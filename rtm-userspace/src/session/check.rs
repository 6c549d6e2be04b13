//! `rtm-trace check`: what this kernel lets rtm-trace do. Every eBPF program is loaded
//! as each mode loads it (the verifier sees the same constants), the tracepoints are
//! attached and released, and each feature says ok or why not. Nothing is traced.

use std::fmt::Write as _;

use rtm_common::names;

use super::{SessionError, preflight};
use crate::{
    cli::CheckCli,
    config::{Mode, TraceConfig},
    probes::{LoadOptions, Probes, layout},
};

/// One feature's verdict.
struct Verdict {
    feature: &'static str,
    needs: &'static str,
    programs: Vec<&'static str>,
    result: Result<String, String>,
}

/// A feature: how a trace using it loads, and which uprobe programs it adds.
struct Feature {
    feature: &'static str,
    needs: &'static str,
    options: LoadOptions,
    uprobes: &'static [&'static str],
    fallbacks: bool,
}

fn features() -> Vec<Feature> {
    let config = |f: &dyn Fn(&mut TraceConfig)| {
        let mut c = TraceConfig::default();
        f(&mut c);
        crate::engine::load_options(&c)
    };
    vec![
        Feature {
            feature: "contention mode (default)",
            needs: "5.8: ring buffer, BTF tracepoints (raw tracepoints without BTF)",
            options: config(&|_| {}),
            uprobes: &[],
            fallbacks: false,
        },
        Feature {
            feature: "contention mode, --no-stacks",
            needs: "5.8",
            options: config(&|c| c.stacks.enabled = false),
            uprobes: &[],
            fallbacks: false,
        },
        Feature {
            feature: "contention mode without BTF",
            needs: "5.8: raw_syscalls and syscalls/sys_exit_futex tracepoints",
            options: config(&|_| {}),
            uprobes: &[],
            fallbacks: true,
        },
        Feature {
            feature: "full mode (--mode full)",
            needs: "5.15: uprobes with BPF cookies; uprobe_multi (6.6) when present",
            options: config(&|c| c.mode = Mode::Full),
            uprobes: &[
                names::PROG_CALL_ENTER,
                names::PROG_CALL_RETURN,
                names::PROG_CALL_MARK,
            ],
            fallbacks: false,
        },
        Feature {
            feature: "timed functions (--func)",
            needs: "5.15",
            options: config(&|c| c.functions.time = vec!["main".into()]),
            uprobes: &[names::PROG_FUNC_ENTER, names::PROG_FUNC_RETURN],
            fallbacks: false,
        },
        Feature {
            feature: "MPI (--mpi)",
            needs: "5.17: bpf_loop",
            options: config(&|_| {}),
            uprobes: &[names::PROG_MPI_ENTER, names::PROG_MPI_RETURN],
            fallbacks: false,
        },
    ]
}

/// A load error with its causes, whole (the verifier's log included).
fn whole(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        source = s.source();
    }
    text
}

/// The first line of a load error, and the verifier's last lines, which say why.
fn brief(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("`rtm-trace check`"))
        .collect();
    if lines.len() <= 6 {
        return lines.join(" / ");
    }
    // The verifier's log: its head names the program, its tail says what it refused.
    let mut tail: Vec<&str> = lines
        .iter()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(4)
        .copied()
        .collect();
    tail.reverse();
    format!("{} ... {}", lines[0], tail.join(" / "))
}

fn check_one(f: &Feature) -> Result<String, String> {
    // The fallback paths are chosen by the environment when the object loads; nothing
    // else runs in this process meanwhile.
    let set = |on: bool| {
        // SAFETY: rtm-trace check is single-threaded while it loads.
        unsafe {
            if on {
                std::env::set_var(layout::FALLBACKS_ENV, "1");
            } else {
                std::env::remove_var(layout::FALLBACKS_ENV);
            }
        }
    };
    set(f.fallbacks);
    let loaded = Probes::load(crate::EBPF_OBJECT, &f.options);
    set(false);
    let mut probes = loaded.map_err(|e| whole(&e))?;
    let mut how = probes.futex_entry().to_string();
    // The raw-tracepoint path is the fallback for kernels without BTF: on one with it,
    // falling back means one of the programs was refused.
    if !f.fallbacks
        && std::path::Path::new("/sys/kernel/btf/vmlinux").exists()
        && how.contains("no BTF tracepoints")
    {
        return Err(how);
    }
    let mut one_by_one = None;
    for &name in f.uprobes {
        if let Err(why) = probes.load_uprobe(name).map_err(|e| whole(&e))? {
            one_by_one.get_or_insert(why);
        }
    }
    match one_by_one {
        _ if f.uprobes.is_empty() => {}
        None => how.push_str("; uprobes many to a link (uprobe_multi)"),
        Some(why) => {
            let _ = write!(
                how,
                "; uprobes one at a time (no uprobe_multi links before Linux 6.6: {why})"
            );
        }
    }
    // Nothing attached to any process: dropping detaches the tracepoints at once.
    drop(probes);
    Ok(how)
}

/// Runs `rtm-trace check`; exit code 0 when every feature loads, 1 otherwise.
pub fn check(cli: CheckCli) -> Result<i32, SessionError> {
    preflight::check()?;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let btf = std::path::Path::new("/sys/kernel/btf/vmlinux").exists();
    let verdicts: Vec<Verdict> = features()
        .iter()
        .map(|f| Verdict {
            feature: f.feature,
            needs: f.needs,
            programs: f.uprobes.to_vec(),
            result: check_one(f),
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "rtm-trace check: kernel {release}");
    let _ = writeln!(
        out,
        "  kernel BTF: {}",
        if btf {
            "yes (/sys/kernel/btf/vmlinux)"
        } else {
            "no (contention mode uses raw and per-syscall tracepoints)"
        }
    );
    let failed = verdicts.iter().filter(|v| v.result.is_err()).count();
    for v in &verdicts {
        let programs = if v.programs.is_empty() {
            String::new()
        } else {
            format!(" [{}]", v.programs.join(", "))
        };
        match &v.result {
            Ok(how) if cli.verbose => {
                let _ = writeln!(out, "  ok      {}{programs}: {how}", v.feature);
            }
            Ok(_) => {
                let _ = writeln!(out, "  ok      {}{programs}", v.feature);
            }
            Err(why) => {
                let _ = writeln!(
                    out,
                    "  FAILED  {}{programs} (needs Linux {}): {}",
                    v.feature,
                    v.needs,
                    brief(why)
                );
                if cli.verbose {
                    let _ = writeln!(out, "{why}");
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "  ok      --blocked (no eBPF: /proc and process_vm_readv)\n{}",
        if failed == 0 {
            "every feature loads on this kernel".to_string()
        } else {
            format!("{failed} feature(s) cannot load on this kernel")
        }
    );
    print!("{}", crate::format::text::escape_lines(&out));
    Ok(i32::from(failed != 0))
}
