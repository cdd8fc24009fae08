//! Pods named by the kubelet's log directories, the one source of pod names that needs
//! no API server: `<path.pod-logs>/<namespace>_<pod>_<uid>/<container>/`.
//!
//! Namespace and pod names are DNS labels or subdomains and never hold `_`, so a
//! directory name splits into exactly three parts. Container ids are not in this tree,
//! so a pod found here knows its containers' names but not their ids; the join then
//! names a process's container only when that is unambiguous. The kubelet removes a
//! pod's directory some time after the pod is deleted, which is why this source never
//! decides that a pod ended.

use std::path::{Path, PathBuf};

use super::directory::{ContainerMeta, PodDirectory, PodMeta};

/// Why the tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PodLogsError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = PodLogsError> = std::result::Result<T, E>;

/// Reads the tree under `root`. Entries that do not fit the pattern are skipped.
pub fn scan(root: &Path) -> Result<PodDirectory> {
    let read = |path: &Path| std::fs::read_dir(path).map_err(|source| PodLogsError::Read { path: path.into(), source });
    let mut pods = Vec::new();
    for entry in read(root)?.flatten() {
        let Ok(name) = entry.file_name().into_string() else { continue };
        let Some((namespace, pod, uid)) = parse_dir_name(&name) else { continue };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let mut containers: Vec<ContainerMeta> = match read(&entry.path()) {
            Ok(dir) => dir
                .flatten()
                .filter(|c| c.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|c| c.file_name().into_string().ok())
                .map(|name| ContainerMeta { name, id: None })
                .collect(),
            // Removed while we looked.
            Err(_) => continue,
        };
        containers.sort_by(|a, b| a.name.cmp(&b.name));
        pods.push(PodMeta {
            uid: uid.to_string(),
            namespace: namespace.to_string(),
            name: pod.to_string(),
            phase: None,
            containers,
            labels: Default::default(),
        });
    }
    Ok(PodDirectory::new(pods, false))
}

/// `<namespace>_<pod>_<uid>`.
pub fn parse_dir_name(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.split('_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || namespace.is_empty() || pod.is_empty() || uid.is_empty() {
        return None;
    }
    let uid_ok = uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    uid_ok.then_some((namespace, pod, uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_names() {
        let uid = "0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50";
        assert_eq!(parse_dir_name(&format!("ai-inference_llm-0_{uid}")), Some(("ai-inference", "llm-0", uid)));
        assert_eq!(
            parse_dir_name("kube-system_etcd-node1_6b7e2f0c9d8a4b3c2d1e0f9a8b7c6d5e").map(|p| p.1),
            Some("etcd-node1")
        );
        for bad in ["", "a_b", "a_b_c_d", "_b_0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50", "ns_pod_not-a-uid", "lost+found"] {
            assert_eq!(parse_dir_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn scans_a_kubelet_log_tree() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "0d2a63a8-6f4b-4c7e-9a3f-5b1c2d3e4f50";
        let pod = dir.path().join(format!("team-a_trainer-7_{uid}"));
        for c in ["worker", "sidecar"] {
            std::fs::create_dir_all(pod.join(c)).unwrap();
            std::fs::write(pod.join(c).join("0.log"), "").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("not a pod")).unwrap();
        std::fs::write(dir.path().join(format!("x_y_{uid}1")), "a file, not a directory").unwrap();
        let found = scan(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        let meta = found.by_uid(uid).unwrap();
        assert_eq!((meta.namespace.as_str(), meta.name.as_str()), ("team-a", "trainer-7"));
        let names: Vec<&str> = meta.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["sidecar", "worker"]);
        assert!(!found.authoritative);
        assert!(scan(&dir.path().join("missing")).is_err());
    }
}
