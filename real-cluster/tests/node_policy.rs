//! The health admission policy's allow-list, field by field, on the real API server.
//!
//! The exporter's own token (bound to a pod on node `gpu-p`, so the API server names
//! the node in it) sends a change to every top-level field of the Node's metadata, spec
//! and status, once through the Node and once through `nodes/status`, with `deploy/`'s
//! roles and admission policies loaded. The same change is first sent by an admin to a
//! fresh twin of the node: where the server keeps the admin's change, the exporter's
//! must be refused by the policy (403 Forbidden, naming it); where the server drops or
//! refuses it for everyone (status through the Node, spec through the status, fields
//! the server owns), the exporter's must leave the field as it was too. Only the
//! allow-list passes: the loop's own annotations and taint, `spec.unschedulable`, the
//! GPUHealthy condition, and `metadata.managedFields`, which the server rewrites on
//! every write (docs/health.md says why it is left to the server).
//!
//! The lists of fields are written once, below, from the Kubernetes v1.37 types
//! (k8s.io/api v0.37.2 `core/v1/types.go`, `NodeSpec` and `NodeStatus`; k8s.io/apimachinery
//! v0.37.2 `pkg/apis/meta/v1/types.go`, `ObjectMeta`), and checked against the
//! server's own OpenAPI schema: a field that a later Kubernetes adds fails this test
//! until it is listed here (and the policy refuses it meanwhile: it allows by name).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};
use test_support::control_plane::ControlPlane;
use test_support::joined::{NAMESPACE, base};

const NODE: &str = "gpu-p";
/// The fields whose every change the allow-list lets through: the cordon, and the
/// server's own bookkeeping of who wrote what (docs/health.md says why). The loop's
/// annotations, taint and condition are allowed within fields that are otherwise held
/// ([`allowed`]).
const ANY_CHANGE_ALLOWED: [&str; 2] = ["spec.unschedulable", "metadata.managedFields"];

/// The UID of Namespace `kube-system`, the owner a change to `ownerReferences` names.
static OWNER_UID: OnceLock<String> = OnceLock::new();
const POLICY: &str = "ValidatingAdmissionPolicy 'gpu-exporter-health-nodes.gpu-telemetry.io'";

/// The three parts of a Node the policy judges.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Part {
    Metadata,
    Spec,
    Status,
}

impl Part {
    fn key(self) -> &'static str {
        match self {
            Part::Metadata => "metadata",
            Part::Spec => "spec",
            Part::Status => "status",
        }
    }

    /// The schema of the part in the server's OpenAPI v3 document of `/api/v1`.
    fn schema(self) -> &'static str {
        match self {
            Part::Metadata => "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            Part::Spec => "io.k8s.api.core.v1.NodeSpec",
            Part::Status => "io.k8s.api.core.v1.NodeStatus",
        }
    }
}

/// A change to a field: its new value, made from the node as it is.
type Change = fn(&Value) -> Value;

/// One field and a change to it.
struct Field {
    part: Part,
    name: &'static str,
    change: Change,
}

/// Every top-level field of a v1.37 Node's metadata, spec and status, each with a
/// change the server would take from an admin where it takes any.
fn fields() -> Vec<Field> {
    use Part::*;
    let f = |part: Part, name: &'static str, change: Change| Field { part, name, change };
    vec![
        f(Metadata, "name", |_| json!("renamed")),
        f(Metadata, "generateName", |_| json!("renamed-")),
        f(Metadata, "namespace", |_| json!("default")),
        f(Metadata, "selfLink", |_| json!("/api/v1/nodes/elsewhere")),
        f(Metadata, "uid", |_| json!("00000000-0000-4000-8000-000000000000")),
        f(Metadata, "resourceVersion", |_| json!("1")),
        f(Metadata, "generation", |_| json!(7)),
        f(Metadata, "creationTimestamp", |_| json!("2030-01-01T00:00:00Z")),
        f(Metadata, "deletionTimestamp", |_| json!("2030-01-01T00:00:00Z")),
        f(Metadata, "deletionGracePeriodSeconds", |_| json!(30)),
        f(Metadata, "labels", |_| json!({"example.com/via-probe": "x"})),
        // The operator's acknowledgement, which the loop must never write itself.
        f(Metadata, "annotations", |_| json!({"gpu-telemetry.io/gpu-health-reset": "2030-01-01T00:00:00Z"})),
        f(
            Metadata,
            "ownerReferences",
            // An owner that exists (the garbage collector deletes a node whose owner does not).
            |_| {
                let uid = OWNER_UID.get().expect("read before the changes");
                json!([{"apiVersion": "v1", "kind": "Namespace", "name": "kube-system", "uid": uid}])
            },
        ),
        f(Metadata, "finalizers", |_| json!(["example.com/hold"])),
        // A list of one empty entry is how a client strips them.
        f(Metadata, "managedFields", |_| json!([{}])),
        f(Spec, "podCIDR", |_| json!("10.200.0.0/24")),
        f(Spec, "podCIDRs", |_| json!(["10.200.0.0/24"])),
        f(Spec, "providerID", |_| json!("probe://gpu-p")),
        f(Spec, "unschedulable", |_| json!(true)),
        f(Spec, "taints", |n| {
            let mut t = n["spec"]["taints"].as_array().cloned().unwrap_or_default();
            t.push(json!({"key": "example.com/probe", "effect": "NoSchedule"}));
            Value::Array(t)
        }),
        f(
            Spec,
            "configSource",
            |_| json!({"configMap": {"namespace": "kube-system", "name": "probe", "kubeletConfigKey": "kubelet"}}),
        ),
        f(Spec, "externalID", |_| json!("probe")),
        f(Spec, "podPreemptionPolicy", |_| json!({"disableResizePreemption": ["example.com/probe"]})),
        f(Status, "capacity", |_| json!({"example.com/probe": "1"})),
        f(Status, "allocatable", |_| json!({"example.com/probe": "1"})),
        f(Status, "phase", |_| json!("Terminated")),
        f(Status, "conditions", |n| {
            let mut c = n["status"]["conditions"].as_array().cloned().unwrap();
            for c in &mut c {
                if c["type"] == "Ready" {
                    c["status"] = json!("False");
                    c["reason"] = json!("Probe");
                }
            }
            Value::Array(c)
        }),
        f(Status, "addresses", |_| json!([{"type": "InternalIP", "address": "127.0.0.9"}])),
        f(Status, "daemonEndpoints", |_| json!({"kubeletEndpoint": {"Port": 4242}})),
        f(Status, "nodeInfo", |n| {
            let mut i = n["status"]["nodeInfo"].clone();
            i["kubeletVersion"] = json!("v9.9.9");
            i
        }),
        f(Status, "images", |_| json!([{"names": ["registry.example/probe:1"], "sizeBytes": 1}])),
        f(Status, "volumesInUse", |_| json!(["kubernetes.io/csi/probe^vol"])),
        f(Status, "volumesAttached", |_| json!([{"name": "kubernetes.io/csi/probe^vol", "devicePath": "/dev/probe"}])),
        f(Status, "config", |_| json!({"error": "probe"})),
        f(Status, "runtimeHandlers", |_| json!([{"name": "probe", "features": {"recursiveReadOnlyMounts": true}}])),
        f(Status, "features", |_| json!({"supplementalGroupsPolicy": true})),
        f(Status, "declaredFeatures", |_| json!(["Probe"])),
    ]
}

/// What the allow-list lets the exporter change: a field, a change made from the node as
/// it is, and where the loop sends it.
fn allowed() -> Vec<(Part, &'static str, Change, Via)> {
    fn with(list: &Value, item: Value) -> Value {
        let mut l = list.as_array().cloned().unwrap_or_default();
        l.push(item);
        Value::Array(l)
    }
    vec![
        (Part::Metadata, "annotations", |_| json!({"gpu-telemetry.io/gpu-health-dry-run": "probe"}), Via::Node),
        (Part::Spec, "unschedulable", |_| json!(true), Via::Node),
        (
            Part::Spec,
            "taints",
            |n| {
                with(
                    &n["spec"]["taints"],
                    json!({"key": "gpu-telemetry.io/gpu-unhealthy", "value": "Xid79", "effect": "NoSchedule"}),
                )
            },
            Via::Node,
        ),
        (
            Part::Status,
            "conditions",
            |n| {
                with(
                    &n["status"]["conditions"],
                    json!({"type": "GPUHealthy", "status": "False", "reason": "Xid79", "message": "probe"}),
                )
            },
            Via::Status,
        ),
    ]
}

/// Where a write goes: the Node itself or its status subresource.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Via {
    Node,
    Status,
}

impl Via {
    fn url(self, name: &str) -> String {
        match self {
            Via::Node => format!("/api/v1/nodes/{name}"),
            Via::Status => format!("/api/v1/nodes/{name}/status"),
        }
    }
}

/// The node both `gpu-p` and its twins start as: no pod CIDR or provider ID yet (each
/// settable once), a status a kubelet would have written.
fn node_object(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"}
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    })
}

fn node_status() -> Value {
    json!({"status": {
        "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"},
        "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"},
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}
        ],
        "addresses": [{"type": "Hostname", "address": "gpu-p"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "architecture": "amd64", "bootID": "boot", "containerRuntimeVersion": "containerd://2.1",
            "kernelVersion": "6.12", "kubeProxyVersion": "", "kubeletVersion": "v1.37.2", "machineID": "m",
            "operatingSystem": "linux", "osImage": "Debian", "systemUUID": "s"
        }
    }})
}

/// An HTTP answer: status code and body.
struct Answer {
    code: u16,
    body: String,
}

/// A JSON merge patch of `url` on the API server with `token`.
fn patch(cp: &ControlPlane, token: &str, url: &str, body: &Value) -> Answer {
    let out = Command::new("curl")
        .args(["-sS", "-X", "PATCH", "-w", "\n%{http_code}", "--cacert"])
        .arg(&cp.ca)
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .args(["-H", "Content-Type: application/merge-patch+json", "--data"])
        .arg(body.to_string())
        .arg(format!("{}{url}", cp.server))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap();
    Answer { code: code.trim().parse().unwrap(), body: body.to_string() }
}

impl Answer {
    /// A 403 Forbidden whose Status names the policy.
    fn refused_by_policy(&self) -> bool {
        let status: Value = serde_json::from_str(&self.body).unwrap_or_default();
        self.code == 403
            && status["reason"] == "Forbidden"
            && status["message"].as_str().is_some_and(|m| m.contains(POLICY))
    }
}

fn get_node(cp: &ControlPlane, name: &str) -> Value {
    serde_json::from_str(&cp.run(&["get", "node", name, "-o", "json", "--show-managed-fields"])).unwrap()
}

/// A new node named `name` as [`node_object`] and [`node_status`] make it.
fn create_node(cp: &ControlPlane, name: &str) {
    let out = cp.run_with_input(&["create", "-f", "-"], &node_object(name).to_string());
    assert!(out.status.success(), "creating {name}: {}", String::from_utf8_lossy(&out.stderr));
    cp.run(&["patch", "node", name, "--subresource=status", "--type=merge", "-p", &node_status().to_string()]);
}

/// The property names of `schema` in the server's OpenAPI v3 document of `/api/v1`.
fn server_fields(openapi: &Value, schema: &str) -> BTreeSet<String> {
    openapi["components"]["schemas"][schema]["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("the server's OpenAPI has no {schema}"))
        .keys()
        .cloned()
        .collect()
}

/// One row of the table the test prints.
struct Row {
    field: String,
    via: Via,
    admin: String,
    exporter: String,
}

#[test]
fn the_exporter_may_change_only_what_the_allow_list_names_on_its_node() {
    let cp = ControlPlane::start();

    // The lists above are the v1.37 Node's fields, no more and no fewer.
    let openapi: Value = serde_json::from_str(&cp.run(&["get", "--raw", "/openapi/v3/api/v1"])).unwrap();
    for part in [Part::Metadata, Part::Spec, Part::Status] {
        let listed: BTreeSet<String> = fields().iter().filter(|f| f.part == part).map(|f| f.name.to_string()).collect();
        assert_eq!(
            listed,
            server_fields(&openapi, part.schema()),
            "the {} fields listed here against the server's {}: list a new field (and decide whether the \
             allow-list lets the exporter change it)",
            part.key(),
            part.schema()
        );
    }

    cp.apply(&base());
    OWNER_UID.get_or_init(|| cp.run(&["get", "namespace", "kube-system", "-o", "jsonpath={.metadata.uid}"]));
    create_node(&cp, NODE);
    // A pod of the exporter on the node (no kubelet runs it: its token is what counts).
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "gpu-exporter-probe", "namespace": NAMESPACE},
        "spec": {"nodeName": NODE, "serviceAccountName": "gpu-exporter",
                 "containers": [{"name": "exporter", "image": "registry.example/gpu-exporter:probe"}]}
    });
    let out = cp.run_with_input(&["create", "-f", "-"], &pod.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let exporter = ControlPlane::token_of(&cp.service_account(NAMESPACE, "gpu-exporter", Some("gpu-exporter-probe")));
    cp.run(&["create", "serviceaccount", "probe-admin", "-n", "kube-system"]);
    cp.run(&[
        "create",
        "clusterrolebinding",
        "probe-admin",
        "--clusterrole=cluster-admin",
        "--serviceaccount=kube-system:probe-admin",
    ]);
    let admin = ControlPlane::token_of(&cp.service_account("kube-system", "probe-admin", None));

    let mut rows = Vec::new();
    let mut twins = 0;
    for field in fields() {
        for via in [Via::Node, Via::Status] {
            twins += 1;
            let twin = format!("twin-{twins}");
            create_node(&cp, &twin);
            let before_twin = get_node(&cp, &twin);
            let body = json!({ field.part.key(): { field.name: (field.change)(&before_twin) } });
            let a = patch(&cp, &admin, &via.url(&twin), &body);
            let after_twin = get_node(&cp, &twin);
            let kept = after_twin[field.part.key()][field.name] != before_twin[field.part.key()][field.name];

            let before = get_node(&cp, NODE);
            let body = json!({ field.part.key(): { field.name: (field.change)(&before) } });
            let e = patch(&cp, &exporter, &via.url(NODE), &body);
            let after = get_node(&cp, NODE);
            let changed = after[field.part.key()][field.name] != before[field.part.key()][field.name];

            let what = format!("{}.{} through {via:?}", field.part.key(), field.name);
            let by_policy = e.refused_by_policy();
            let name = format!("{}.{}", field.part.key(), field.name);
            if ANY_CHANGE_ALLOWED.contains(&name.as_str()) {
                // Allowed whole: the exporter's change fares as the admin's.
                assert_eq!(e.code, 200, "{what}: {}", e.body);
                assert_eq!(changed, kept, "{what}: the admin's change stored: {kept}; the exporter's: {changed}");
            } else if kept {
                assert!(
                    by_policy,
                    "{what}: the server keeps it from an admin, so the policy must refuse it: {} {}",
                    e.code, e.body
                );
                assert!(!changed, "{what} was refused, yet changed");
            } else {
                assert!(!changed, "{what}: the server dropped the admin's change but stored the exporter's");
            }
            let outcome = |code: u16, stored: bool| format!("{code} {}", if stored { "stored" } else { "not stored" });
            rows.push(Row {
                field: format!("{}.{}", field.part.key(), field.name),
                via,
                admin: outcome(a.code, kept),
                exporter: format!("{}{}", outcome(e.code, changed), if by_policy { " (policy)" } else { "" }),
            });
        }
    }
    eprintln!("{:<36} {:<7} {:<18} exporter", "field", "path", "admin (twin)");
    for r in &rows {
        eprintln!("{:<36} {:<7} {:<18} {}", r.field, format!("{:?}", r.via), r.admin, r.exporter);
    }
    // The writes that were once let through are among those the server keeps, so the
    // checks above held the policy to them.
    for (field, via) in [
        ("metadata.labels", Via::Status),
        ("metadata.annotations", Via::Status),
        ("status.daemonEndpoints", Via::Status),
    ] {
        let row = rows.iter().find(|r| r.field == field && r.via == via).unwrap();
        assert!(
            row.admin.ends_with(" stored") && row.exporter.ends_with("(policy)"),
            "{field} {via:?}: {} / {}",
            row.admin,
            row.exporter
        );
    }

    // And what the allow-list names passes, and is stored.
    for (part, name, change, via) in allowed() {
        let before = get_node(&cp, NODE);
        let value = change(&before);
        let e = patch(&cp, &exporter, &via.url(NODE), &json!({ part.key(): { name: value.clone() } }));
        assert_eq!(e.code, 200, "{}.{name} through {via:?}: {}", part.key(), e.body);
        let stored = get_node(&cp, NODE)[part.key()][name].clone();
        let kept = match &value {
            Value::Object(m) => m.iter().all(|(k, v)| &stored[k] == v),
            Value::Array(items) => items.iter().all(|i| {
                let i = i.as_object().unwrap();
                stored.as_array().unwrap().iter().any(|s| i.iter().all(|(k, v)| &s[k] == v))
            }),
            v => &stored == v,
        };
        assert!(kept, "{}.{name} through {via:?}: {stored}", part.key());
    }
}
