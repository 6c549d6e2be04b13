//! End-to-end: the Debian package (`cargo xtask dist`) installs with apt, and what it
//! installs works: the binary traces a workload, the man pages are found, bash
//! completes the options, the agent's unit names the installed files; it then purges
//! cleanly. Needs root (apt) and the package: `cargo xtask test` builds it and passes
//! its path in RTM_TRACE_DEB.

use std::{
    path::Path,
    process::Command,
    time::Duration,
};

use rtm_tests::*;
use rtm_tests::{e2e, harness::E2e};

/// This file's tests, each with what it needs besides the tracer.
pub(crate) const TESTS: &[E2e] = &[
    e2e!(the_package_installs_traces_documents_completes_and_purges, Root, Package),
];

const T: Duration = Duration::from_secs(180);
const BIN: &str = "/usr/bin/rtm-trace";

fn ok(cmd: &mut Command) -> String {
    let out = run(cmd, T);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn apt(args: &[&str]) -> Command {
    let mut c = Command::new("apt-get");
    c.env("DEBIAN_FRONTEND", "noninteractive")
        .args(["-y", "-q", "--no-install-recommends"])
        .args(args);
    c
}

/// Purges the package however the test ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = run(&mut apt(&["purge", "rtm-trace"]), T);
    }
}

fn the_package_installs_traces_documents_completes_and_purges() {
    let deb = harness::deb_package()
        .expect("the package")
        .canonicalize()
        .unwrap();
    let contents = ok(Command::new("dpkg-deb").arg("-c").arg(&deb));
    println!(
        "{}: {} bytes\n{contents}",
        deb.display(),
        deb.metadata().unwrap().len()
    );
    ok(&mut apt(&["install", deb.to_str().unwrap()]));
    let installed = Installed;

    // The stripped binary, its debug info elsewhere (the -dbg package).
    let sections = ok(Command::new("readelf").args(["-S", "-W", BIN]));
    assert!(!sections.contains(".debug_info"), "{sections}");
    assert!(sections.contains(".gnu_debuglink"), "{sections}");
    let version = ok(Command::new(BIN).arg("--version"));
    assert!(version.starts_with("rtm-trace "), "{version}");

    // The installed binary traces a workload: exact acquisitions against its own count.
    let dir = TempDir::new("package");
    let json = dir.join("out.json");
    let out = ok(Command::new(BIN)
        .args(["--mode", "full", "--json"])
        .arg(&json)
        .arg("-o")
        .arg(dir.join("report.txt"))
        .arg("--")
        .arg(workload("mutex_workload"))
        .args(["--threads", "2", "--iters", "40", "--private", "20"]));
    let truths = truths(&out);
    assert_eq!(truths.len(), 2, "{out}");
    let expect: u64 = truths
        .iter()
        .map(|t| t.get("shared") + t.get("try_ok"))
        .sum();
    let doc = read_json(&json);
    let shared = object(&doc, "shared_lock").expect("shared_lock in the graph");
    println!(
        "shared_lock acquisitions: expected {expect}, measured {}",
        shared["acquisitions"]
    );
    assert_eq!(shared["acquisitions"].as_u64(), Some(expect));

    // Man pages: the tool's and one per subcommand, rendered.
    for page in [
        "rtm-trace",
        "rtm-trace-agent",
        "rtm-trace-report",
        "rtm-trace-top",
    ] {
        let path = ok(Command::new("man").args(["-w", page]));
        assert!(
            path.trim().starts_with("/usr/share/man/man8/"),
            "{page}: {path}"
        );
    }
    let agent_page = ok(Command::new("man")
        .args(["-P", "cat", "rtm-trace-agent"])
        .env("MANWIDTH", "100"));
    assert!(
        agent_page.contains("--check-config") && agent_page.contains("rtm-trace agent"),
        "{agent_page}"
    );

    // Bash completes options and subcommands with the installed script.
    let complete = |line: &str| -> Vec<String> {
        let script = format!(
            "source /usr/share/bash-completion/completions/rtm-trace\n\
             spec=$(complete -p rtm-trace) || exit 9\n\
             f=$(printf '%s' \"$spec\" | sed -n 's/.* -F \\([^ ]*\\) .*/\\1/p')\n\
             [ -n \"$f\" ] || {{ echo \"no function in: $spec\" >&2; exit 8; }}\n\
             COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}\n\
             read -ra COMP_WORDS <<< \"$COMP_LINE\"\n\
             COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))\n\
             \"$f\" rtm-trace \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\n\
             printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        ok(Command::new("bash").args(["-c", &script]))
            .lines()
            .map(|l| l.trim().to_owned())
            .collect()
    };
    let st = complete("rtm-trace --st");
    println!("rtm-trace --st<TAB>: {st:?}");
    assert!(st.iter().any(|w| w == "--stack-rate"), "{st:?}");
    assert!(st.iter().all(|w| w.starts_with("--st")), "{st:?}");
    let sub = complete("rtm-trace ag");
    assert!(sub.iter().any(|w| w == "agent"), "{sub:?}");
    let agent = complete("rtm-trace agent --check");
    assert!(agent.iter().any(|w| w == "--check-config"), "{agent:?}");

    // The agent's unit runs the installed binary on the installed config, a conffile.
    let unit = std::fs::read_to_string("/lib/systemd/system/rtm-trace-agent.service").unwrap();
    let exec: Vec<&str> = unit
        .lines()
        .filter_map(|l| {
            l.strip_prefix("ExecStart=")
                .or(l.strip_prefix("ExecStartPre="))
        })
        .collect();
    assert_eq!(exec.len(), 2, "{unit}");
    for line in exec {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[0], BIN, "{line}");
        let config = words.iter().skip_while(|w| **w != "--config").nth(1);
        assert_eq!(config, Some(&"/etc/rtm-trace/agent.toml"), "{line}");
    }
    ok(Command::new(BIN).args([
        "agent",
        "--check-config",
        "--config",
        "/etc/rtm-trace/agent.toml",
    ]));
    let conffiles = ok(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "rtm-trace"]));
    assert!(
        conffiles.contains("/etc/rtm-trace/agent.toml"),
        "{conffiles}"
    );
    for doc in ["README.md", "agent.md", "copyright"] {
        assert!(
            Path::new("/usr/share/doc/rtm-trace").join(doc).is_file(),
            "{doc}"
        );
    }

    // Purged: nothing of it is left.
    drop(installed);
    for gone in [
        BIN,
        "/etc/rtm-trace/agent.toml",
        "/usr/share/man/man8/rtm-trace.8.gz",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after purge");
    }
    let status = run(Command::new("dpkg").args(["-s", "rtm-trace"]), T);
    assert!(!status.status.success(), "rtm-trace still installed");
}
