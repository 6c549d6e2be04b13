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
    proc::{
        files::{open_regular_in, read_proc},
        process,
    },
};

/// Longest command line read (the rest is not matched).
const MAX_CMDLINE: usize = 32 * 1024;
/// Longest /proc/PID/cgroup read.
const MAX_CGROUP: usize = 64 * 1024;
/// Longest /proc/PID/status read (about 1.5 KiB).
const MAX_STATUS: usize = 16 * 1024;

/// What discovery knows of a process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// Its id.
    pub pid: u32,
    /// When it started (clock ticks since boot; 0: unreadable).
    pub start: u64,
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
    /// Its real user id (None: unreadable, which no uid rule matches).
    pub uid: Option<u32>,
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
        let stat = read_proc(format!("/proc/{pid}/stat"), 4096)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        // After the comm's ')': state, ppid (1), ..., starttime (19).
        let field = |i: usize| -> Option<u64> {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(i)?
                .parse()
                .ok()
        };
        let ppid = field(1).and_then(|p| u32::try_from(p).ok()).unwrap_or(0);
        let start = field(19).unwrap_or(0);
        let uid = read_proc(format!("/proc/{pid}/status"), MAX_STATUS)
            .ok()
            .and_then(|b| real_uid(&String::from_utf8_lossy(&b)));
        let namespace = identity
            .pod_uid
            .is_some()
            .then(|| pod_namespace(pid))
            .flatten();
        Some(Self {
            pid,
            start,
            ppid,
            comm,
            exe,
            cmdline,
            identity,
            namespace,
            uid,
        })
    }
}

impl ProcInfo {
    /// Which process it is: (pid, start).
    pub fn key(&self) -> crate::engine::ProcKey {
        (self.pid, self.start)
    }
}

/// The real uid in a /proc/PID/status text (the first of `Uid:`'s four).
fn real_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The uid of user `name` (the system's user database, NSS included); Err: what is
/// wrong.
fn uid_of(name: &str) -> Result<u32, String> {
    let cname = std::ffi::CString::new(name).map_err(|_| "a user name has no NUL byte")?;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // SAFETY: all-zero is a valid passwd; getpwnam_r writes into it and `buf`, both
        // live for the call, and sets `found` to it or to null.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: as above; the lengths are the buffer's.
        let r = unsafe {
            libc::getpwnam_r(
                cname.as_ptr(),
                &mut pw,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut found,
            )
        };
        match r {
            0 | libc::ENOENT | libc::ESRCH if found.is_null() => {
                return Err(format!(
                    "no user {name:?} on this machine (give its uid with uid = N instead)"
                ));
            }
            0 => return Ok(pw.pw_uid),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            e => {
                return Err(format!(
                    "cannot look up user {name:?}: {}",
                    std::io::Error::from_raw_os_error(e)
                ));
            }
        }
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
    /// `user` resolved (and `uid`).
    uids: Vec<u32>,
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
        let mut uids: Vec<u32> = rule.uid.into_iter().collect();
        if let Some(u) = &rule.user {
            uids.push(uid_of(u).map_err(|e| err("user", e))?);
        }
        Ok(Self {
            uids,
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
            && self.uids.iter().all(|u| p.uid == Some(*u))
    }

    /// The rule as the config says it (`comm = "svc", uid = 0`), escaped, for messages.
    fn describe(&self) -> String {
        let r = &self.rule;
        let text = [
            ("comm", r.comm.as_ref()),
            ("exe", r.exe.as_ref()),
            ("cmdline", r.cmdline.as_ref()),
            ("cgroup", r.cgroup.as_ref()),
            ("container_id", r.container_id.as_ref()),
            ("pod_uid", r.pod_uid.as_ref()),
            ("namespace", r.namespace.as_ref()),
            ("user", r.user.as_ref()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some(format!("{k} = {:?}", v?)))
        .chain(r.uid.map(|u| format!("uid = {u}")))
        .collect::<Vec<_>>()
        .join(", ");
        crate::format::text::Shown(&text).to_string()
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

    /// The select rule that takes `p` (its index in `select`), if one does and no
    /// exclude rule refuses it.
    pub fn rule_for(&self, p: &ProcInfo) -> Option<(usize, &Rule)> {
        if p.pid == self.me || p.ppid == self.me || self.exclude.iter().any(|r| r.matches(p)) {
            return None;
        }
        self.select
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(p))
            .map(|(i, r)| (i, &r.rule))
    }

    /// Select rule `i` as the config says it, for messages.
    pub fn describe(&self, i: usize) -> String {
        self.select
            .get(i)
            .map(Compiled::describe)
            .unwrap_or_default()
    }

    /// Whether `p` is to be traced.
    #[cfg(test)]
    fn wants(&self, p: &ProcInfo) -> bool {
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
            start: 100,
            ppid: 1,
            comm: comm.into(),
            exe: exe.into(),
            cmdline: cmdline.into(),
            identity: cgroup::parse(&format!("0::{cgroup}\n")),
            namespace: None,
            uid: Some(1000),
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
        assert_eq!(s.rule_for(&rank).unwrap().1.mpi, Some(true));
        let other = info("cat", "/usr/bin/cat", "cat", "/");
        assert_eq!(s.rule_for(&other).unwrap(), (1, &select[1]));
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
    fn uid_and_user_rules_match_the_real_uid_only() {
        let root = Rule {
            comm: Some("svc".into()),
            user: Some("root".into()),
            ..Rule::default()
        };
        let by_uid = Rule {
            comm: Some("svc".into()),
            uid: Some(1000),
            ..Rule::default()
        };
        let s = Selector::new(&[root, by_uid], &[]).unwrap();
        let mut p = info("svc", "/usr/bin/svc", "svc", "/");
        assert_eq!(s.rule_for(&p).map(|r| r.0), Some(1));
        p.uid = Some(0);
        assert_eq!(s.rule_for(&p).map(|r| r.0), Some(0));
        p.uid = Some(65534);
        assert!(!s.wants(&p));
        // Unreadable: no uid rule matches.
        p.uid = None;
        assert!(!s.wants(&p));
        assert_eq!(s.describe(0), "comm = \"svc\", user = \"root\"");
        assert_eq!(s.describe(1), "comm = \"svc\", uid = 1000");
        // An unknown user is a config error naming the field.
        let bad = Rule {
            user: Some("no-such-user-rtm".into()),
            ..Rule::default()
        };
        let e = Selector::new(&[Rule::default(), bad], &[]).unwrap_err();
        assert!(e.0.starts_with("agent.select[1].user: no user"), "{e}");
        assert!(real_uid("Name:\tx\nUid:\t1000\t1001\t1002\t1003\n") == Some(1000));
        assert!(real_uid("Uid:\n").is_none());
    }

    #[test]
    fn this_process_reads_and_a_kernel_thread_does_not() {
        let me = ProcInfo::read(std::process::id()).unwrap();
        // SAFETY: getuid has no preconditions.
        assert_eq!(me.uid, Some(unsafe { libc::getuid() }));
        assert!(!me.exe.is_empty() && !me.cmdline.is_empty());
        assert!(me.ppid > 0);
        // kthreadd has no executable.
        assert!(ProcInfo::read(2).is_none());
    }
}
