//! Which processes the agent traces: the `[agent]` rules compiled once, and what each
//! candidate process is (command name, executable, command line, cgroup identity, pod
//! namespace), read from /proc with bounded reads. Exclude rules are checked first; the
//! agent itself (and its own children) never match.

use std::{fs, os::fd::AsFd, path::Path};

use globset::{GlobBuilder, GlobMatcher};
use regex::{Regex, RegexBuilder};

use super::cgroup::{self, Identity};
use crate::{
    config::{ConfigError, agent::Rule},
    target::{
        files::{open_regular_in, read_proc},
        process,
    },
};

/// Longest command line read (the rest is not matched).
const MAX_CMDLINE: usize = 32 * 1024;
/// Longest /proc/PID/cgroup read.
const MAX_CGROUP: usize = 64 * 1024;

/// What discovery knows of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its id.
    pub pid: u32,
    /// Parent's id.
    pub ppid: u32,
    /// Command name.
    pub comm: String,
    /// Executable path (empty for kernel threads).
    pub exe: String,
    /// Command line, arguments joined by spaces.
    pub cmdline: String,
    /// Its cgroups.
    pub identity: Identity,
    /// Its Kubernetes namespace, when its pod mounts a service account.
    pub namespace: Option<String>,
}

impl ProcInfo {
    /// Reads process `pid`; None when it is gone or is a kernel thread.
    pub fn read(pid: u32) -> Option<Self> {
        let comm = process::comm(pid)?;
        let exe = fs::read_link(format!("/proc/{pid}/exe"))
            .ok()?
            .to_string_lossy()
            .into_owned();
        let cmdline = read_proc(format!("/proc/{pid}/cmdline"), MAX_CMDLINE)
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
            })
            .unwrap_or_default();
        let identity = read_proc(format!("/proc/{pid}/cgroup"), MAX_CGROUP)
            .map(|b| cgroup::parse(&String::from_utf8_lossy(&b)))
            .unwrap_or_default();
        let ppid = read_proc(format!("/proc/{pid}/stat"), 4096)
            .ok()
            .and_then(|b| {
                let s = String::from_utf8_lossy(&b).into_owned();
                s.rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            })
            .unwrap_or(0);
        let namespace = identity
            .pod_uid
            .is_some()
            .then(|| pod_namespace(pid))
            .flatten();
        Some(Self {
            pid,
            ppid,
            comm,
            exe,
            cmdline,
            identity,
            namespace,
        })
    }
}

/// The pod's namespace, from the service account token mount inside the process's own
/// root, opened so that no link leads out of that root; None without one.
fn pod_namespace(pid: u32) -> Option<String> {
    let root = fs::File::open(format!("/proc/{pid}/root")).ok()?;
    let path = Path::new("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
    let mut f = open_regular_in(root.as_fd(), path, 256).ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut f, &mut text).ok()?;
    let ns = text.trim();
    // A DNS label: anything else is not a namespace.
    (!ns.is_empty()
        && ns.len() <= 63
        && ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'))
    .then(|| ns.to_owned())
}

/// A compiled rule.
#[derive(Debug)]
struct Compiled {
    rule: Rule,
    exe: Option<GlobMatcher>,
    cgroup: Option<GlobMatcher>,
    cmdline: Option<Regex>,
}

impl Compiled {
    fn new(rule: &Rule, field: &str) -> Result<Self, ConfigError> {
        let err = |f: &str, e: String| ConfigError(format!("agent.{field}.{f}: {e}"));
        let glob = |f: &str, g: &Option<String>| -> Result<Option<GlobMatcher>, ConfigError> {
            g.as_ref()
                .map(|g| {
                    GlobBuilder::new(g)
                        .literal_separator(true)
                        .build()
                        .map(|g| g.compile_matcher())
                        .map_err(|e| err(f, e.to_string()))
                })
                .transpose()
        };
        Ok(Self {
            exe: glob("exe", &rule.exe)?,
            cgroup: glob("cgroup", &rule.cgroup)?,
            cmdline: rule
                .cmdline
                .as_ref()
                .map(|r| {
                    RegexBuilder::new(r)
                        .size_limit(1 << 20)
                        .build()
                        .map_err(|e| err("cmdline", e.to_string()))
                })
                .transpose()?,
            rule: rule.clone(),
        })
    }

    fn matches(&self, p: &ProcInfo) -> bool {
        let r = &self.rule;
        r.comm.as_ref().is_none_or(|c| *c == p.comm)
            && self.exe.as_ref().is_none_or(|g| g.is_match(&p.exe))
            && self
                .cmdline
                .as_ref()
                .is_none_or(|re| re.is_match(&p.cmdline))
            && self
                .cgroup
                .as_ref()
                .is_none_or(|g| g.is_match(&p.identity.path))
            && r.container_id.as_ref().is_none_or(|c| {
                !c.is_empty()
                    && p.identity
                        .container_id
                        .as_ref()
                        .is_some_and(|id| id.starts_with(c.as_str()))
            })
            && r.pod_uid
                .as_ref()
                .is_none_or(|u| p.identity.pod_uid.as_ref() == Some(u))
            && r.namespace
                .as_ref()
                .is_none_or(|n| p.namespace.as_ref() == Some(n))
    }
}

/// The selection: include and exclude rules.
#[derive(Debug)]
pub struct Selector {
    select: Vec<Compiled>,
    exclude: Vec<Compiled>,
    me: u32,
}

impl Selector {
    /// Compiles the rules; an error names the rule and field.
    pub fn new(select: &[Rule], exclude: &[Rule]) -> Result<Self, ConfigError> {
        let compile = |name: &str, rules: &[Rule]| -> Result<Vec<Compiled>, ConfigError> {
            rules
                .iter()
                .enumerate()
                .map(|(i, r)| Compiled::new(r, &format!("{name}[{i}]")))
                .collect()
        };
        Ok(Self {
            select: compile("select", select)?,
            exclude: compile("exclude", exclude)?,
            me: std::process::id(),
        })
    }

    /// The select rule that takes `p`, if one does and no exclude rule refuses it.
    pub fn rule_for(&self, p: &ProcInfo) -> Option<&Rule> {
        if p.pid == self.me || p.ppid == self.me || self.exclude.iter().any(|r| r.matches(p)) {
            return None;
        }
        self.select.iter().find(|r| r.matches(p)).map(|r| &r.rule)
    }

    /// Whether `p` is to be traced.
    pub fn wants(&self, p: &ProcInfo) -> bool {
        self.rule_for(p).is_some()
    }
}

/// Every process id in /proc now.
pub fn all_pids() -> Vec<u32> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .collect();
    pids.sort_unstable();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(comm: &str, exe: &str, cmdline: &str, cgroup: &str) -> ProcInfo {
        ProcInfo {
            pid: 4242,
            ppid: 1,
            comm: comm.into(),
            exe: exe.into(),
            cmdline: cmdline.into(),
            identity: cgroup::parse(&format!("0::{cgroup}\n")),
            namespace: None,
        }
    }

    #[test]
    fn rules_match_every_field_and_excludes_win() {
        let id = "ab".repeat(32);
        let select = vec![
            Rule {
                comm: Some("nginx".into()),
                ..Rule::default()
            },
            Rule {
                exe: Some("/opt/**/bin/*".into()),
                cmdline: Some("--serve\\b".into()),
                ..Rule::default()
            },
            Rule {
                container_id: Some(id[..12].into()),
                ..Rule::default()
            },
        ];
        let exclude = vec![Rule {
            cgroup: Some("/system.slice/*-debug.service".into()),
            ..Rule::default()
        }];
        let s = Selector::new(&select, &exclude).unwrap();
        assert!(s.wants(&info("nginx", "/usr/sbin/nginx", "nginx", "/")));
        assert!(!s.wants(&info(
            "nginx",
            "/usr/sbin/nginx",
            "nginx",
            "/system.slice/web-debug.service"
        )));
        assert!(s.wants(&info("app", "/opt/x/y/bin/app", "app --serve 1", "/")));
        assert!(!s.wants(&info("app", "/opt/x/y/bin/app", "app --served", "/")));
        assert!(!s.wants(&info("app", "/opt/bin/x/app", "app --serve", "/")));
        let docker = format!("/system.slice/docker-{id}.scope");
        assert!(s.wants(&info("java", "/usr/bin/java", "java", &docker)));
        assert!(!s.wants(&info("java", "/usr/bin/java", "java", "/")));
        // Never itself.
        let mut me = info("nginx", "/usr/sbin/nginx", "nginx", "/");
        me.pid = std::process::id();
        assert!(!s.wants(&me));
    }

    #[test]
    fn the_first_matching_rule_says_whether_to_probe_mpi() {
        let select = vec![
            Rule {
                comm: Some("ranks".into()),
                mpi: Some(true),
                ..Rule::default()
            },
            Rule {
                exe: Some("/usr/bin/*".into()),
                ..Rule::default()
            },
        ];
        let s = Selector::new(&select, &[]).unwrap();
        let rank = info("ranks", "/usr/bin/ranks", "ranks", "/");
        assert_eq!(s.rule_for(&rank).unwrap().mpi, Some(true));
        let other = info("cat", "/usr/bin/cat", "cat", "/");
        assert_eq!(s.rule_for(&other).unwrap().mpi, None);
        // `mpi` alone matches nothing: such a rule is refused.
        let c = crate::config::AgentConfig {
            select: vec![Rule {
                mpi: Some(true),
                ..Rule::default()
            }],
            ..Default::default()
        };
        assert!(c.validate().unwrap_err().0.starts_with("agent.select[0]:"));
    }

    #[test]
    fn a_bad_pattern_is_named() {
        let bad = Rule {
            cmdline: Some("(".into()),
            ..Rule::default()
        };
        let e = Selector::new(&[Rule::default(), bad], &[]).unwrap_err();
        assert!(e.0.starts_with("agent.select[1].cmdline:"), "{e}");
        let bad = Rule {
            exe: Some("[".into()),
            ..Rule::default()
        };
        let e = Selector::new(&[], &[bad]).unwrap_err();
        assert!(e.0.starts_with("agent.exclude[0].exe:"), "{e}");
    }

    #[test]
    fn this_process_reads_and_a_kernel_thread_does_not() {
        let me = ProcInfo::read(std::process::id()).unwrap();
        assert!(!me.exe.is_empty() && !me.cmdline.is_empty());
        assert!(me.ppid > 0);
        // kthreadd has no executable.
        assert!(ProcInfo::read(2).is_none());
    }
}
