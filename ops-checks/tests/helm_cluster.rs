//! The chart on a real control plane (`test_support::control_plane`, `scripts/cluster`:
//! etcd, kube-apiserver, controller-manager with the deployment, replicaset and daemonset
//! controllers, scheduler, v1.37.2) with one simulated GPU node (`test_support::joined`:
//! `fake-kubelet join`, which marks the pods bound to it Running without running their
//! containers), through Helm v4:
//! - `helm install` with the defaults and a constant label of the user's: every object
//!   accepted; the DaemonSet's pod runs on the GPU node with that label alone (no default
//!   merged in), the adapter's two replicas are scheduled;
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
//!   the DaemonSet rolls: its pod is replaced by one of the new revision, which keeps the
//!   user's constant label;
//! - `helm uninstall`: nothing of the release is left but what docs/deploy.md names
//!   (the Secret the adapter wrote).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use clap::CommandFactory;
use common::*;
use serde_json::{Value, json};
use test_support::control_plane::ControlPlane;
use test_support::deploy::PodContext;
use test_support::joined::{JoinedFleet, NodeSpec};
use test_support::simulated::{self, Clock, Killed, SimulatedNode, wait_until_ok};

const NS: &str = "gpu-telemetry";
const RELEASE: &str = "gpu-telemetry";
/// Where the seed's scenario runs its GPU pods: the namespace `helm test` asks about.
const WORKLOADS: &str = "ai-inference";

/// `kubectl args` as the admin: its stdout, or its output when it fails.
fn kubectl(cluster: &ControlPlane, args: &[&str]) -> Result<String, String> {
    let out = cluster.kubectl().args(args).output().unwrap();
    if out.status.success() { Ok(String::from_utf8(out.stdout).unwrap()) } else { Err(text(&out)) }
}

/// `kubectl args -o json` as the admin; `None` when it fails (for instance: not found).
fn json(cluster: &ControlPlane, args: &[&str]) -> Option<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    kubectl(cluster, &a).ok().map(|t| serde_json::from_str(&t).unwrap())
}

fn helm(cluster: &ControlPlane, args: &[&str]) -> std::process::Output {
    run_helm(args, Some(&cluster.kubeconfig))
}

/// A token of ServiceAccount `namespace/name`, as the kubelet projects it.
fn token(cluster: &ControlPlane, namespace: &str, name: &str) -> String {
    cluster.run(&["-n", namespace, "create", "token", name, "--duration=1h"]).trim().to_owned()
}

/// A kubeconfig for `server`, which is not the API server (the adapter, as the
/// aggregator reaches it): trusting `ca`, checking `tls_server_name`, with `token`.
fn kubeconfig_for(
    cluster: &ControlPlane,
    name: &str,
    server: &str,
    ca: &Path,
    tls_server_name: &str,
    token: &str,
) -> PathBuf {
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca, "tls-server-name": tls_server_name}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    });
    let path = cluster.dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// Polls `f` until it has something, for at most `timeout`.
fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    wait_until_ok(what, timeout, || f().ok_or_else(|| String::from("not yet")))
}

/// The simulated GPU node `gpu-node-1` joined to the cluster, Ready.
fn join_node(cluster: &ControlPlane) -> JoinedFleet {
    let scenario = std::fs::read_to_string(repo().join("fake-nvml/scenarios/a100-80gb.yaml")).unwrap();
    JoinedFleet::join(cluster, &[NodeSpec { name: "gpu-node-1".into(), scenario, replicas: 1 }])
}

fn pods(cluster: &ControlPlane, selector: &str) -> Vec<Value> {
    json(cluster, &["-n", NS, "get", "pods", "-l", selector])
        .map(|l| l["items"].as_array().unwrap().clone())
        .unwrap_or_default()
}

fn running(pods: &[Value]) -> Vec<&Value> {
    pods.iter().filter(|p| p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()).collect()
}

/// The adapter as the kubelet would start it from the live Deployment, with the Secret
/// and APIServices it keeps, on a loopback port, reading `exporter`.
fn start_adapter(cluster: &ControlPlane, exporter: &str) -> (Killed, String, PathBuf) {
    let deployment = json(cluster, &["-n", NS, "get", "deployment", "gpu-metrics-adapter"]).unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let pod =
        PodContext { render: "installed", workload: &deployment, pod: "gpu-metrics-adapter-0", node: "gpu-node-1" };
    let mut argv = pod.argv(container, &gpu_metrics_adapter::config::Cli::command(), "gpu-metrics-adapter", &[]);
    let kubeconfig = cluster.service_account(NS, "gpu-metrics-adapter", None);
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
    (Killed::new(child), format!("https://{addr}"), kubeconfig)
}

/// The `--label` flags of a pod's exporter container.
fn label_flags(pod: &Value) -> Vec<&str> {
    pod["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with("--label"))
        .collect()
}

fn ca_bundle(cluster: &ControlPlane, name: &str) -> Option<String> {
    json(cluster, &["get", "apiservice", name])?["spec"]["caBundle"].as_str().map(str::to_owned)
}

#[test]
fn install_test_upgrade_and_uninstall_on_a_real_control_plane() {
    let cluster = ControlPlane::start();
    let _node = join_node(&cluster);
    cluster.run(&["create", "namespace", WORKLOADS]);

    // ---- install ----
    let chart = chart();
    let out = helm(
        &cluster,
        &[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--create-namespace",
            "--set",
            &format!("test.namespace={WORKLOADS}"),
            "--set",
            "exporter.constLabels.cluster=staging",
        ],
    );
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
    assert_eq!(label_flags(&exporter), ["--label=cluster=staging"], "the user's label alone");
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
    // The pods the node's page names exist in the cluster, as they would (the adapter
    // answers a `*` read only for pods the API server lists).
    cluster.create_pods_of(&repo().join("fake-nvml/scenarios/seed-mixed-node.yaml"));
    let (adapter, adapter_url, adapter_kubeconfig) = start_adapter(&cluster, &node.metrics_url());
    let secret = wait_for("the adapter's Secret and both caBundles", Duration::from_secs(60), || {
        let s = json(&cluster, &["-n", NS, "get", "secret", "gpu-metrics-adapter-serving"])?;
        ca_bundle(&cluster, "v1beta1.custom.metrics.k8s.io")?;
        ca_bundle(&cluster, "v1beta2.custom.metrics.k8s.io")?;
        Some(s)
    });
    let bundle = ca_bundle(&cluster, "v1beta2.custom.metrics.k8s.io").unwrap();
    assert_eq!(ca_bundle(&cluster, "v1beta1.custom.metrics.k8s.io").unwrap(), bundle);
    // The admission policy holds the adapter to that one Secret.
    let refused = cluster
        .kubectl_as(&adapter_kubeconfig)
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
        json(&cluster, &["-n", NS, "get", "pod", "gpu-telemetry-test"])
    });
    assert_eq!(hook["metadata"]["annotations"]["helm.sh/hook"], "test");
    for (kind, ns) in [("serviceaccount", NS), ("role", WORKLOADS), ("rolebinding", WORKLOADS)] {
        json(&cluster, &["-n", ns, "get", kind, "gpu-telemetry-test"])
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
    let hook_token = token(&cluster, NS, "gpu-telemetry-test");
    // Through the API server, the aggregator answers 503: it cannot reach a ClusterIP here.
    let via_api = cluster.service_account(NS, "gpu-telemetry-test", None);
    let out = run_check(&via_api);
    assert!(!out.status.success() && text(&out).contains("503"), "through the aggregator: {}", text(&out));
    // Where the aggregator would connect: the adapter, trusted through caBundle only.
    let direct = kubeconfig_for(&cluster, "hook", &adapter_url, &ca, &service_name, &hook_token);
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
    let other = kubeconfig_for(&cluster, "other", &adapter_url, &ca, &service_name, &token(&cluster, NS, "default"));
    let out = run_check(&other);
    assert!(!out.status.success() && text(&out).contains("403"), "without the hook's Role: {}", text(&out));
    // The container exited 0: the kubelet's part, which `helm test` waits for.
    let status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "check-api", "image": container["image"], "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    cluster.run(&[
        "-n",
        NS,
        "patch",
        "pod",
        "gpu-telemetry-test",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    let out = helm_test.join().unwrap();
    assert!(out.status.success() && text(&out).contains("gpu-telemetry-test"), "helm test: {}", text(&out));
    wait_for("the succeeded hook to be deleted", Duration::from_secs(60), || {
        json(&cluster, &["-n", NS, "get", "pod", "gpu-telemetry-test"]).is_none().then_some(())
    });

    // ---- upgrade: what the adapter wrote is kept, the DaemonSet rolls ----
    drop(adapter);
    let out = helm(
        &cluster,
        &[
            "upgrade",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--reuse-values",
            "--set",
            "exporter.health.enforce=true",
        ],
    );
    assert!(out.status.success(), "helm upgrade: {}", text(&out));
    let kept = json(&cluster, &["-n", NS, "get", "secret", "gpu-metrics-adapter-serving"])
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
    assert_eq!(label_flags(&rolled), ["--label=cluster=staging"], "the upgrade keeps the user's label");

    // ---- uninstall: only what the docs name is left ----
    let out = helm(&cluster, &["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "2m"]);
    assert!(out.status.success(), "helm uninstall: {}", text(&out));
    wait_for("the release's pods to go", Duration::from_secs(90), || {
        json(&cluster, &["-n", NS, "get", "pods"]).filter(|l| l["items"].as_array().unwrap().is_empty()).map(|_| ())
    });
    let left = cluster.run(&[
        "-n",
        NS,
        "get",
        "all,secrets,configmaps,roles,rolebindings,serviceaccounts,poddisruptionbudgets",
        "-o",
        "name",
    ]);
    let mut left: Vec<&str> = left.lines().collect();
    left.sort();
    // kube-root-ca.crt and the default ServiceAccount are the namespace's own.
    assert_eq!(
        left,
        ["configmap/kube-root-ca.crt", "secret/gpu-metrics-adapter-serving", "serviceaccount/default"],
        "docs/deploy.md names what helm uninstall leaves"
    );
    let cluster_wide = cluster.run(&[
        "get",
        "clusterroles,clusterrolebindings,apiservices,validatingadmissionpolicies,validatingadmissionpolicybindings",
        "-o",
        "name",
    ]);
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
        assert!(json(&cluster, &["-n", ns, "get", kind, name]).is_none(), "helm uninstall left {ns}/{kind}/{name}");
    }
}
