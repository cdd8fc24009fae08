//! `/proc/<pid>/cgroup` to pod UID and container id: a pure parser.
//!
//! The kubelet puts every container in a cgroup under its pod's, named by the pod UID,
//! and the container runtime names the container's own cgroup by the container id. The
//! shapes seen on real nodes, all handled here:
//!
//! | driver | example path (cgroup v2 `0::<path>`, v1 `<id>:<controllers>:<path>`) |
//! |---|---|
//! | systemd, containerd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope` |
//! | systemd, CRI-O | `/kubepods.slice/kubepods-pod<uid with _>.slice/crio-<id>.scope` (sometimes with `/container` below it) |
//! | systemd, Docker (cri-dockerd) | `.../kubepods-besteffort-pod<uid with _>.slice/docker-<id>.scope` |
//! | cgroupfs, containerd / Docker | `/kubepods/burstable/pod<uid>/<id>`, `/kubepods/pod<uid>/<id>` (Guaranteed) |
//! | cgroupfs, CRI-O | `/kubepods/besteffort/pod<uid>/crio-<id>` |
//! | kind / nested kubelet | the same below a prefix such as `/kubelet.slice/kubelet-kubepods.slice/` or `/kubelet/` |
//!
//! QoS class (`burstable`, `besteffort`, none for Guaranteed) only changes the parent.
//! Pod UIDs are UUIDs, with `_` instead of `-` under systemd, or 32 hex digits for static
//! pods (a hash of the manifest). Container ids are 64 hex digits. CRI-O's `crio-conmon-`
//! scopes hold the runtime monitor, not the container, and are not taken.
//!
//! A line that does not fit (malformed, truncated, a process outside any pod, a path
//! hidden by a cgroup namespace as `/`) is skipped; parsing never fails and never panics.
//! The first line that names a pod wins; cgroup v2's unified line and v1's controller
//! lines name the same container.

/// The pod and container a process runs in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CgroupOwner {
    /// With dashes, as in the pod's `metadata.uid`.
    pub pod_uid: String,
    /// 64 hex digits, without the runtime scheme; `None` when the process sits in the pod's
    /// own cgroup rather than a container's.
    pub container_id: Option<String>,
}

/// The owner named by the content of a `/proc/<pid>/cgroup` file, if any line names one.
pub fn parse_cgroup_file(content: &str) -> Option<CgroupOwner> {
    content.lines().find_map(parse_line)
}

/// One line: `hierarchy-id:controllers:path`. `None` for a line that names no pod.
pub fn parse_line(line: &str) -> Option<CgroupOwner> {
    let mut fields = line.trim_end().splitn(3, ':');
    let hierarchy = fields.next()?;
    let _controllers = fields.next()?;
    let path = fields.next()?;
    if hierarchy.is_empty() || !hierarchy.bytes().all(|b| b.is_ascii_digit()) || !path.starts_with('/') {
        return None;
    }
    parse_path(path)
}

/// A cgroup path: finds the pod segment and the container segment right below it.
pub fn parse_path(path: &str) -> Option<CgroupOwner> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (at, pod_uid) = segments.iter().enumerate().find_map(|(i, s)| pod_segment(s).map(|uid| (i, uid)))?;
    // Only under a kubepods hierarchy: a pod-looking name elsewhere is not the kubelet's.
    if !segments[..at].iter().any(|s| s.contains("kubepods")) && !segments[at].contains("kubepods") {
        return None;
    }
    let container_id = match segments.get(at + 1) {
        Some(next) => Some(container_segment(next)?),
        None => None,
    };
    Some(CgroupOwner { pod_uid, container_id })
}

/// `kubepods-burstable-pod<uid_>.slice` (systemd) or `pod<uid>` (cgroupfs).
fn pod_segment(segment: &str) -> Option<String> {
    let raw = if let Some(slice) = segment.strip_suffix(".slice") {
        let start = slice.rfind("-pod")? + "-pod".len();
        if !slice.starts_with("kubepods") && !slice.contains("kubepods-") {
            return None;
        }
        slice[start..].replace('_', "-")
    } else {
        segment.strip_prefix("pod")?.to_string()
    };
    valid_pod_uid(&raw).then_some(raw.to_ascii_lowercase())
}

/// A UUID (8-4-4-4-12 hex digits) or, for static pods, 32 hex digits.
fn valid_pod_uid(uid: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    let groups: Vec<&str> = uid.split('-').collect();
    match groups.as_slice() {
        [a, b, c, d, e] => {
            [a.len(), b.len(), c.len(), d.len(), e.len()] == [8, 4, 4, 4, 12] && groups.iter().all(|g| hex(g))
        }
        [whole] => whole.len() == 32 && hex(whole),
        _ => false,
    }
}

/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, `crio-<id>`, `<id>`.
fn container_segment(segment: &str) -> Option<String> {
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    if name.starts_with("crio-conmon-") {
        return None;
    }
    let id = ["cri-containerd-", "crio-", "docker-", "containerd-"]
        .iter()
        .find_map(|prefix| name.strip_prefix(prefix))
        .unwrap_or(name);
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50";
    const CID: &str = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";

    fn owner(container: Option<&str>) -> Option<CgroupOwner> {
        Some(CgroupOwner { pod_uid: UID.into(), container_id: container.map(String::from) })
    }

    #[test]
    fn real_world_lines() {
        let u = UID.replace('-', "_");
        let table: Vec<(String, Option<CgroupOwner>)> = vec![
            // cgroup v2, systemd, containerd, each QoS class.
            (
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope"
                ),
                owner(Some(CID)),
            ),
            (
                format!(
                    "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-{CID}.scope"
                ),
                owner(Some(CID)),
            ),
            (format!("0::/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{CID}.scope"), owner(Some(CID))),
            // cgroup v2, systemd, CRI-O, with and without the nested `container` cgroup.
            (format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-{CID}.scope"), owner(Some(CID))),
            (
                format!(
                    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/crio-{CID}.scope/container"
                ),
                owner(Some(CID)),
            ),
            // CRI-O's monitor process is not the container.
            (format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-conmon-{CID}.scope"), None),
            // cgroup v1, systemd, Docker through cri-dockerd.
            (
                format!(
                    "12:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/docker-{CID}.scope"
                ),
                owner(Some(CID)),
            ),
            // cgroup v1, cgroupfs, containerd: Guaranteed and Burstable.
            (format!("11:devices:/kubepods/pod{UID}/{CID}"), owner(Some(CID))),
            (format!("4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}"), owner(Some(CID))),
            // cgroup v2, cgroupfs, CRI-O.
            (format!("0::/kubepods/besteffort/pod{UID}/crio-{CID}"), owner(Some(CID))),
            // kind: the node's kubelet runs in a container of its own.
            (
                format!(
                    "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope"
                ),
                owner(Some(CID)),
            ),
            (format!("0::/kubelet/kubepods/burstable/pod{UID}/{CID}"), owner(Some(CID))),
            // The pause process's parent: the pod's own cgroup.
            (format!("0::/kubepods/burstable/pod{UID}"), owner(None)),
            // Not in a pod.
            ("0::/system.slice/containerd.service".into(), None),
            ("0::/user.slice/user-1000.slice/session-3.scope".into(), None),
            ("0::/".into(), None),
            ("1:name=systemd:/init.scope".into(), None),
            // A pod-looking name outside kubepods.
            (format!("0::/machine.slice/pod{UID}/{CID}"), None),
        ];
        for (line, expected) in table {
            assert_eq!(parse_line(&line), expected, "{line}");
        }
    }

    #[test]
    fn static_pod_uids_are_hashes() {
        let line = format!("0::/kubepods/burstable/pod6b7e2f0c9d8a4b3c2d1e0f9a8b7c6d5e/{CID}");
        let parsed = parse_line(&line).unwrap();
        assert_eq!(parsed.pod_uid, "6b7e2f0c9d8a4b3c2d1e0f9a8b7c6d5e");
        assert_eq!(parsed.container_id.as_deref(), Some(CID));
    }

    #[test]
    fn malformed_lines_are_skipped_not_fatal() {
        let good = format!("0::/kubepods/pod{UID}/{CID}");
        let lines = [
            "",
            "garbage",
            "::",
            "x::/kubepods/pod/abc",
            "0:",
            "0::relative/kubepods/pod",
            "0::/kubepods/podnot-a-uid/abc",
            "0::/kubepods/burstable/pod0d2a63a8-6f4b-4c7e-9a3f/short",
            "0::/kubepods.slice/kubepods-pod.slice",
            "0::/kubepods/pod0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50/not-hex-not-64",
            "0::/kubepods/pod0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50/cri-containerd-zz.scope",
            "\u{0}\u{1}:\u{2}",
            "0::/kubepods/pod0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f5\u{e9}/x",
        ];
        for line in lines {
            assert_eq!(parse_line(line), None, "{line:?}");
        }
        // The good line is found after any amount of noise.
        let file = format!("{}\n{good}\n", lines.join("\n"));
        assert_eq!(parse_cgroup_file(&file), owner(Some(CID)));
    }

    #[test]
    fn cgroup_v1_file_with_many_controllers() {
        let u = UID.replace('-', "_");
        let path = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{CID}.scope"
        );
        let file = format!("12:hugetlb:{path}\n11:pids:{path}\n10:cpuset:{path}\n1:name=systemd:{path}\n0::/\n");
        assert_eq!(parse_cgroup_file(&file), owner(Some(CID)));
    }

    #[test]
    fn upper_case_ids_are_normalised() {
        let line = format!("0::/kubepods/pod{}/{}", UID.to_uppercase(), CID.to_uppercase());
        assert_eq!(parse_line(&line), owner(Some(CID)));
    }
}
