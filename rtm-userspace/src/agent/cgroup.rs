//! Who a process runs for, from /proc/PID/cgroup: its cgroup path, and the container id
//! and Kubernetes pod UID that container runtimes and the kubelet write into it. Every
//! runtime's format: systemd slices (`docker-<id>.scope`, `cri-containerd-<id>.scope`,
//! `crio-<id>.scope`, `libpod-<id>.scope`, `kubepods-burstable-pod<uid_with_underscores>.slice`),
//! cgroupfs paths (`/docker/<id>`, `/kubepods/burstable/pod<uid>/<id>`, `/k8s.io/<id>`),
//! on cgroup v1, v2 and mixed hierarchies.

use std::sync::LazyLock;

use regex::Regex;

/// What a process's cgroups say about it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// Its cgroup path: v2's, or else the first v1 hierarchy's that has one.
    pub path: String,
    /// The container id (64 hex digits), when a runtime's name for it is in a path.
    pub container_id: Option<String>,
    /// The Kubernetes pod UID (dashed), when the kubelet's name for it is in a path.
    pub pod_uid: Option<String>,
}

static CONTAINER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:(?:docker|cri-containerd|crio|libpod|containerd)-)?([0-9a-f]{64})(?:\.scope)?$",
    )
    .expect("constant regex")
});

static POD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$",
    )
    .expect("constant regex")
});

/// Parses the text of /proc/PID/cgroup.
pub fn parse(text: &str) -> Identity {
    let mut id = Identity::default();
    let mut v1_path = None;
    for line in text.lines() {
        // hierarchy-id:controllers:path (the path may hold ':').
        let mut parts = line.splitn(3, ':');
        let (Some(hier), Some(controllers), Some(path)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if hier == "0" && controllers.is_empty() {
            id.path = path.to_owned();
        } else if v1_path.is_none() && path != "/" && !path.is_empty() {
            v1_path = Some(path.to_owned());
        }
        for component in path.split('/') {
            if let Some(c) = CONTAINER.captures(component) {
                id.container_id = Some(c[1].to_owned());
            }
            if let Some(p) = POD.captures(component) {
                id.pod_uid = Some(p[1].replace('_', "-"));
            }
        }
    }
    // A v2 path of "/" in a mixed hierarchy says less than a v1 one.
    if (id.path.is_empty() || id.path == "/")
        && let Some(p) = v1_path
    {
        id.path = p;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "8f1e7b2a-1c3d-4e5f-9a0b-1c2d3e4f5a6b";

    fn check(text: &str, path: &str, container: bool, pod: bool) {
        let id = parse(text);
        assert_eq!(id.path, path, "{text}");
        assert_eq!(
            id.container_id.as_deref(),
            container.then_some(ID),
            "{text}"
        );
        assert_eq!(id.pod_uid.as_deref(), pod.then_some(UID), "{text}");
    }

    #[test]
    fn every_runtimes_format() {
        let u = UID.replace('-', "_");
        // cgroup v2, systemd driver: containerd, CRI-O, docker, podman.
        for prefix in ["cri-containerd", "crio", "docker", "libpod"] {
            let p = format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/{prefix}-{ID}.scope"
            );
            check(&format!("0::{p}\n"), &p, true, true);
        }
        // cgroup v2, cgroupfs driver.
        let p = format!("/kubepods/besteffort/pod{UID}/{ID}");
        check(&format!("0::{p}\n"), &p, true, true);
        // containerd's own namespace, no kubelet.
        let p = format!("/k8s.io/{ID}");
        check(&format!("0::{p}\n"), &p, true, false);
        // plain docker on cgroup v1.
        let v1 = format!(
            "12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n1:name=systemd:/docker/{ID}\n"
        );
        check(&v1, &format!("/docker/{ID}"), true, false);
        // docker with the systemd driver on v2.
        let p = format!("/system.slice/docker-{ID}.scope");
        check(&format!("0::{p}\n"), &p, true, false);
        // mixed: v1 controllers and an empty v2 line.
        let mixed = format!("5:cpuset:/kubepods/pod{UID}/{ID}\n0::/\n");
        check(&mixed, &format!("/kubepods/pod{UID}/{ID}"), true, true);
        // no container: a user session, a system service.
        check(
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "/user.slice/user-1000.slice/session-3.scope",
            false,
            false,
        );
        check(
            "0::/system.slice/nginx.service\n",
            "/system.slice/nginx.service",
            false,
            false,
        );
        // CRI-O's monitor is not the container.
        let p = format!("/machine.slice/crio-conmon-{ID}.scope");
        check(&format!("0::{p}\n"), &p, false, false);
    }

    #[test]
    fn junk_is_no_identity() {
        for text in [
            "",
            "garbage",
            "0::",
            ":::::",
            "x:y:z\n\n",
            &"a".repeat(10_000),
        ] {
            let id = parse(text);
            assert!(id.container_id.is_none() && id.pod_uid.is_none());
        }
    }
}
