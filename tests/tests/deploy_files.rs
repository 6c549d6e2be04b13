//! The deployment files in deploy/: the systemd unit passes `systemd-analyze verify`, the
//! Kubernetes manifests parse as YAML with the fields the README relies on, and every
//! agent config they carry passes `rtm-trace agent --check-config`.

use std::{path::Path, process::Command, time::Duration};

use rtm_tests::*;

const T: Duration = Duration::from_secs(60);

fn deploy(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(name)
}

fn check_config(text: &str) {
    let dir = TempDir::new("deploy-config");
    let f = dir.join("agent.toml");
    std::fs::write(&f, text).unwrap();
    let out = run(
        Command::new(rtm_bin())
            .args(["agent", "--check-config", "--config"])
            .arg(&f),
        T,
    );
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_systemd_unit_verifies() {
    let Ok(v) = Command::new("systemd-analyze").arg("--version").output() else {
        let msg = "the_systemd_unit_verifies: NOT RUN: systemd-analyze is missing (apt-get install systemd)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
        eprintln!("{msg}");
        return;
    };
    assert!(v.status.success());
    // The unit names the installed binary: verify a copy that names this build's.
    let dir = TempDir::new("deploy-unit");
    let unit = std::fs::read_to_string(deploy("rtm-trace-agent.service")).unwrap();
    assert!(unit.contains("ExecStart=/usr/local/bin/rtm-trace agent"));
    assert!(unit.contains("NoNewPrivileges=yes") && unit.contains("CapabilityBoundingSet="));
    let copy = dir.join("rtm-trace-agent.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/rtm-trace", &rtm_bin().display().to_string()),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Complaints about other units on this machine are not this unit's.
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("rtm-trace-agent"))
        .collect();
    assert!(out.status.success() && ours.is_empty(), "{err}");
    check_config(&std::fs::read_to_string(deploy("agent.toml")).unwrap());
}

#[test]
fn the_manifests_parse_with_the_fields_the_readme_names() {
    // Each YAML document as JSON, by Python's yaml module (PyYAML).
    let script =
        "import sys, json, yaml\nprint(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(deploy("daemonset.yaml"))
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        other => {
            let msg = format!(
                "the_manifests_parse...: NOT RUN: python3 with PyYAML is needed: {other:?}"
            );
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("{msg}");
            return;
        }
    };
    let docs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let ds = kind("DaemonSet");
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["hostPID"], true);
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    let caps: Vec<&str> = sc["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for cap in ["BPF", "PERFMON", "SYS_PTRACE"] {
        assert!(caps.contains(&cap), "{caps:?}");
    }
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "NODE_NAME")
    );
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/sys/kernel/tracing") && mounts.contains(&"/sys/fs/cgroup"),
        "{mounts:?}"
    );
    assert_eq!(
        ds["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        "7470"
    );
    assert_eq!(
        kind("PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"],
        "metrics"
    );
    check_config(kind("ConfigMap")["data"]["agent.toml"].as_str().unwrap());
}
