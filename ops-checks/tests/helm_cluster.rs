//! The chart on a real control plane (`scripts/cluster`: etcd, kube-apiserver,
//! controller-manager with the deployment, replicaset and daemonset controllers, scheduler,
//! v1.37.2) with one simulated GPU node (`fake-kubelet join`, which marks the pods bound
//! to it Running without running their containers), through Helm v4:
//! - `helm install` with the defaults: every object accepted; the DaemonSet's pod runs on
//!   the GPU node, the adapter's two replicas are scheduled;
//! - the adapter's part the kubelet would start: the real `gpu-metrics-adapter`, run here
//!   with the Deployment's own flags and variables and its ServiceAccount's token (plus a
//!   loopback port, text logs and the simulated node's exporter address: no pod network
//!   here), creates the serving Secret and writes the APIServices' caBundle through the
//!   chart's RBAC and admission policy;
//! - `helm test`: Helm creates the hook's ServiceAccount, Role, RoleBinding and Pod; the
//!   test plays the container runtime: it runs the Pod's own command line with the Pod's
//!   ServiceAccount token against the adapter, trusting only the APIService's caBundle
//!   under the Service's DNS name (what the aggregator does; the aggregator itself cannot
//!   reach a ClusterIP here, and the same command through the API server gets its 503),
//!   and writes the Pod's outcome, which `helm test` reports;
//! - `helm upgrade` (health loop enforced): the Secret and the caBundle the adapter wrote
//!   are kept (the adapter is stopped first, so that nothing could write them again), and
//!   the DaemonSet rolls: its pod is replaced by one of the new revision;
//! - `helm uninstall`: nothing of the release is left but what docs/deploy.md names
//!   (the Secret the adapter wrote).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use clap::CommandFactory;
use common::*;
use serde_json::{Value, json};
use test_support::deploy::PodContext;
use test_support::simulated::{self, Clock, Killed, SimulatedNode};

const NS: &str = "gpu-telemetry";
const RELEASE: &str = "gpu-telemetry";
/// Where the seed's scenario runs its GPU pods: the namespace `helm test` asks about.
const WORKLOADS: &str = "ai-inference";

/// A cluster from `scripts/cluster up`, stopped (`down`) when dropped.
struct Cluster {
    dir: PathBuf,
    kubeconfig: PathBuf,
    api_server: String,
    _keep: tempfile::TempDir,
}

impl Cluster {
    fn up() -> Cluster {
        let keep = tempfile::tempdir().unwrap();
        let dir = keep.path().join("cluster");
        let out = Command::new(repo().join("scripts/cluster"))
            .args(["up", "--dir", dir.to_str().unwrap()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/cluster up (builds Kubernetes v1.37.2 on first use; scripts/test builds it first):\n{}",
            text(&out)
        );
        let env = std::fs::read_to_string(dir.join("env")).unwrap();
        let var = |k: &str| env.lines().find_map(|l| l.strip_prefix(&format!("{k}="))).unwrap().to_owned();
        Cluster { kubeconfig: var("KUBECONFIG").into(), api_server: var("API_SERVER"), dir, _keep: keep }
    }

    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(test_support::deploy::kubectl())
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if out.status.success() { Ok(String::from_utf8(out.stdout).unwrap()) } else { Err(text(&out)) }
    }

    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        self.kubectl(&a).ok().map(|t| serde_json::from_str(&t).unwrap())
    }

    fn helm(&self, args: &[&str]) -> std::process::Output {
        run_helm(args, Some(&self.kubeconfig))
    }

    /// A kubeconfig for `server` (trusting `ca`, checking `tls_server_name`) with `token`.
    fn kubeconfig_for(
        &self,
        name: &str,
        server: &str,
        ca: &Path,
        tls_server_name: Option<&str>,
        token: &str,
    ) -> PathBuf {
        let mut cluster = json!({"server": server, "certificate-authority": ca});
        if let Some(n) = tls_server_name {
            cluster["tls-server-name"] = json!(n);
        }
        let config = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        });
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, config.to_string()).unwrap();
        path
    }

    /// A token of ServiceAccount `namespace/name`, as the kubelet projects it.
    fn token(&self, namespace: &str, name: &str) -> String {
        self.kubectl(&["-n", namespace, "create", "token", name, "--duration=1h"]).unwrap().trim().to_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/cluster"))
            .args(["down", "--dir", self.dir.to_str().unwrap()])
            .stdin(Stdio::null())
            .output();
    }
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn spawn(cmd: &mut Command) -> Killed {
    Killed::new(cmd.stdin(Stdio::null()).spawn().unwrap())
}

/// The simulated GPU node `gpu-node-1` joined to the cluster.
fn join_node(cluster: &Cluster) -> Killed {
    let out = Command::new(repo().join("scripts/cluster"))
        .args(["user", "system:node:gpu-node-1", "--group", "system:nodes", "--dir", cluster.dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "scripts/cluster user: {}", text(&out));
    let kubeconfig = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let scenario = repo().join("fake-nvml/scenarios/a100-80gb.yaml");
    let node = format!("name=gpu-node-1,scenario={},kubeconfig={kubeconfig}", scenario.display());
    spawn(
        Command::new(simulated::binaries().join("fake-kubelet"))
            .args(["join", "--node", &node, "--dir"])
            .arg(cluster.dir.join("nodes"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

fn pods(cluster: &Cluster, selector: &str) -> Vec<Value> {
    cluster
        .json(&["-n", NS, "get", "pods", "-l", selector])
        .map(|l| l["items"].as_array().unwrap().clone())
        .unwrap_or_default()
}

fn running(pods: &[Value]) -> Vec<&Value> {
    pods.iter().filter(|p| p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()).collect()
}

/// The adapter as the kubelet would start it from the live Deployment, with the Secret
/// and APIServices it keeps, on a loopback port, reading `exporter`.
fn start_adapter(cluster: &Cluster, exporter: &str) -> (Killed, String) {
    let deployment = cluster.json(&["-n", NS, "get", "deployment", "gpu-metrics-adapter"]).unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let pod =
        PodContext { render: "installed", workload: &deployment, pod: "gpu-metrics-adapter-0", node: "gpu-node-1" };
    let mut argv = pod.argv(container, &gpu_metrics_adapter::config::Cli::command(), "gpu-metrics-adapter", &[]);
    let token = cluster.token(NS, "gpu-metrics-adapter");
    let kubeconfig =
        cluster.kubeconfig_for("adapter", &cluster.api_server, &cluster.dir.join("pki/ca.crt"), None, &token);
    // What differs from the pod: no pod network (a loopback port, the exporter's address),
    // logs to read the address from, and the token in a kubeconfig instead of a mount.
    argv.extend([
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        "--log.format=text".into(),
        format!("--exporter-url={exporter}"),
        format!("--kubeconfig={}", kubeconfig.display()),
    ]);
    let mut child: Child = Command::new(simulated::binaries().join("gpu-metrics-adapter"))
        .args(&argv[1..])
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = simulated::adapter_address(&mut child);
    (Killed::new(child), format!("https://{addr}"))
}

fn ca_bundle(cluster: &Cluster, name: &str) -> Option<String> {
    cluster.json(&["get", "apiservice", name])?["spec"]["caBundle"].as_str().map(str::to_owned)
}

#[test]
fn install_test_upgrade_and_uninstall_on_a_real_control_plane() {
    let cluster = Cluster::up();
    let _node = join_node(&cluster);
    wait_for("the node gpu-node-1 to be Ready", Duration::from_secs(60), || {
        cluster.kubectl(&["get", "node", "gpu-node-1"]).ok()
    });
    cluster.kubectl(&["create", "namespace", WORKLOADS]).unwrap();

    // ---- install ----
    let chart = chart();
    let out = cluster.helm(&[
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        NS,
        "--create-namespace",
        "--set",
        &format!("test.namespace={WORKLOADS}"),
    ]);
    assert!(out.status.success(), "helm install: {}", text(&out));
    let exporter = wait_for("the exporter pod to run on gpu-node-1", Duration::from_secs(60), || {
        let p = pods(&cluster, "app.kubernetes.io/name=gpu-exporter");
        let r = running(&p);
        (r.len() == 1 && r[0]["spec"]["nodeName"] == "gpu-node-1").then(|| r[0].clone())
    });
    let first_revision = exporter["metadata"]["labels"]["controller-revision-hash"].as_str().unwrap().to_owned();
    assert_eq!(
        exporter["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "GPU_EXPORTER_HEALTH_DRY_RUN")
            .unwrap()["value"],
        "true",
        "the health loop ships in dry run"
    );
    wait_for("the adapter's two replicas", Duration::from_secs(60), || {
        (running(&pods(&cluster, "app=gpu-metrics-adapter")).len() == 2).then_some(())
    });

    // ---- the adapter provisions its serving certificate through the chart's RBAC ----
    let node = SimulatedNode::start(
        "gpu-node-1",
        &repo().join("fake-nvml/scenarios/seed-mixed-node.yaml"),
        Clock::Frozen(60.0),
        "",
    );
    let (adapter, adapter_url) = start_adapter(&cluster, &node.metrics_url());
    let secret = wait_for("the adapter's Secret and both caBundles", Duration::from_secs(60), || {
        let s = cluster.json(&["-n", NS, "get", "secret", "gpu-metrics-adapter-serving"])?;
        ca_bundle(&cluster, "v1beta1.custom.metrics.k8s.io")?;
        ca_bundle(&cluster, "v1beta2.custom.metrics.k8s.io")?;
        Some(s)
    });
    let bundle = ca_bundle(&cluster, "v1beta2.custom.metrics.k8s.io").unwrap();
    assert_eq!(ca_bundle(&cluster, "v1beta1.custom.metrics.k8s.io").unwrap(), bundle);
    // The admission policy holds the adapter to that one Secret.
    let adapter_kubeconfig = cluster.dir.join("adapter.kubeconfig");
    let refused = Command::new(test_support::deploy::kubectl())
        .arg("--kubeconfig")
        .arg(&adapter_kubeconfig)
        .args(["-n", NS, "create", "secret", "generic", "another", "--from-literal=a=b"])
        .output()
        .unwrap();
    assert!(
        !refused.status.success()
            && text(&refused).contains("may create only the Secret gpu-telemetry/gpu-metrics-adapter-serving"),
        "the adapter created another Secret: {}",
        text(&refused)
    );

    // ---- helm test: Helm makes the hook; the test runs its container's command ----
    let kubeconfig = cluster.kubeconfig.clone();
    let helm_test =
        std::thread::spawn(move || run_helm(&["test", RELEASE, "-n", NS, "--timeout", "3m"], Some(&kubeconfig)));
    let hook = wait_for("the test hook's Pod", Duration::from_secs(60), || {
        cluster.json(&["-n", NS, "get", "pod", "gpu-telemetry-test"])
    });
    assert_eq!(hook["metadata"]["annotations"]["helm.sh/hook"], "test");
    for (kind, ns) in [("serviceaccount", NS), ("role", WORKLOADS), ("rolebinding", WORKLOADS)] {
        cluster
            .json(&["-n", ns, "get", kind, "gpu-telemetry-test"])
            .unwrap_or_else(|| panic!("the hook's {kind} was not made"));
    }
    let container = &hook["spec"]["containers"][0];
    assert_eq!(container["image"], format!("ghcr.io/gpu-telemetry/gpu-metrics-adapter:{}", env!("CARGO_PKG_VERSION")));
    let args: Vec<String> =
        container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    let ca = cluster.dir.join("ca-bundle.pem");
    std::fs::write(&ca, base64::engine::general_purpose::STANDARD.decode(&bundle).unwrap()).unwrap();
    let service_name = format!("gpu-metrics-adapter.{NS}.svc");
    let run_check = |kubeconfig: &Path| {
        Command::new(simulated::binaries().join("gpu-metrics-adapter"))
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let hook_token = cluster.token(NS, "gpu-telemetry-test");
    // Through the API server, the aggregator answers 503: it cannot reach a ClusterIP here.
    let via_api =
        cluster.kubeconfig_for("hook-api", &cluster.api_server, &cluster.dir.join("pki/ca.crt"), None, &hook_token);
    let out = run_check(&via_api);
    assert!(!out.status.success() && text(&out).contains("503"), "through the aggregator: {}", text(&out));
    // Where the aggregator would connect: the adapter, trusted through caBundle only.
    let direct = cluster.kubeconfig_for("hook", &adapter_url, &ca, Some(&service_name), &hook_token);
    let out = run_check(&direct);
    assert!(out.status.success(), "the hook's command, as the hook's ServiceAccount: {}", text(&out));
    let said = text(&out);
    let values: usize = said
        .split("listed; ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("check-api said: {said}"));
    assert!(values > 0 && said.contains(WORKLOADS), "the seed's pods in {WORKLOADS} have gpu_utilization: {said}");
    // The hook's Role is what lets it read: another ServiceAccount is refused.
    let other = cluster.kubeconfig_for("other", &adapter_url, &ca, Some(&service_name), &cluster.token(NS, "default"));
    let out = run_check(&other);
    assert!(!out.status.success() && text(&out).contains("403"), "without the hook's Role: {}", text(&out));
    // The container exited 0: the kubelet's part, which `helm test` waits for.
    let status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "check-api", "image": container["image"], "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    cluster
        .kubectl(&[
            "-n",
            NS,
            "patch",
            "pod",
            "gpu-telemetry-test",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ])
        .unwrap();
    let out = helm_test.join().unwrap();
    assert!(out.status.success() && text(&out).contains("gpu-telemetry-test"), "helm test: {}", text(&out));
    wait_for("the succeeded hook to be deleted", Duration::from_secs(60), || {
        cluster.json(&["-n", NS, "get", "pod", "gpu-telemetry-test"]).is_none().then_some(())
    });

    // ---- upgrade: what the adapter wrote is kept, the DaemonSet rolls ----
    drop(adapter);
    let out = cluster.helm(&[
        "upgrade",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        NS,
        "--reuse-values",
        "--set",
        "exporter.health.enforce=true",
    ]);
    assert!(out.status.success(), "helm upgrade: {}", text(&out));
    let kept = cluster
        .json(&["-n", NS, "get", "secret", "gpu-metrics-adapter-serving"])
        .expect("the upgrade deleted the adapter's Secret");
    assert_eq!(kept["data"], secret["data"], "the upgrade changed the adapter's Secret");
    assert_eq!(kept["metadata"]["resourceVersion"], secret["metadata"]["resourceVersion"]);
    for api in ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"] {
        assert_eq!(ca_bundle(&cluster, api).as_deref(), Some(bundle.as_str()), "the upgrade dropped {api}'s caBundle");
    }
    let rolled = wait_for("the DaemonSet to roll its pod", Duration::from_secs(90), || {
        let p = pods(&cluster, "app.kubernetes.io/name=gpu-exporter");
        let r = running(&p);
        (p.len() == 1
            && r.len() == 1
            && r[0]["metadata"]["labels"]["controller-revision-hash"] != first_revision.as_str())
        .then(|| r[0].clone())
    });
    assert_eq!(
        rolled["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "GPU_EXPORTER_HEALTH_DRY_RUN")
            .unwrap()["value"],
        "false"
    );

    // ---- uninstall: only what the docs name is left ----
    let out = cluster.helm(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "2m"]);
    assert!(out.status.success(), "helm uninstall: {}", text(&out));
    wait_for("the release's pods to go", Duration::from_secs(90), || {
        cluster.json(&["-n", NS, "get", "pods"]).filter(|l| l["items"].as_array().unwrap().is_empty()).map(|_| ())
    });
    let left = cluster
        .kubectl(&[
            "-n",
            NS,
            "get",
            "all,secrets,configmaps,roles,rolebindings,serviceaccounts,poddisruptionbudgets",
            "-o",
            "name",
        ])
        .unwrap();
    let mut left: Vec<&str> = left.lines().collect();
    left.sort();
    // kube-root-ca.crt and the default ServiceAccount are the namespace's own.
    assert_eq!(
        left,
        ["configmap/kube-root-ca.crt", "secret/gpu-metrics-adapter-serving", "serviceaccount/default"],
        "docs/deploy.md names what helm uninstall leaves"
    );
    let cluster_wide = cluster
        .kubectl(&["get", "clusterroles,clusterrolebindings,apiservices,validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "name"])
        .unwrap();
    for line in cluster_wide.lines() {
        assert!(
            !(line.contains("gpu-")
                || line.contains("custom.metrics.k8s.io")
                || line.contains("external.metrics.k8s.io")),
            "helm uninstall left {line}"
        );
    }
    for (ns, kind, name) in [
        ("kube-system", "rolebinding", "gpu-metrics-adapter-auth-reader"),
        ("default", "role", "gpu-exporter-health-events"),
        (WORKLOADS, "role", "gpu-telemetry-test"),
    ] {
        assert!(cluster.json(&["-n", ns, "get", kind, name]).is_none(), "helm uninstall left {ns}/{kind}/{name}");
    }
}
