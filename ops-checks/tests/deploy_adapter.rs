//! The adapter's manifests, as every way of installing `deploy/` renders them
//! (`kubectl kustomize` of the top level, the base, each overlay, and the base with every
//! component at once):
//! - both API versions registered, v1beta2 preferred, against a Service that exists, with
//!   no `insecureSkipTLSVerify` anywhere;
//! - every flag and environment variable the Deployment passes is accepted by the
//!   adapter's own parser (`Args::parse_from_args`), the environment applied as clap
//!   applies it;
//! - exactly one serving-certificate mode: self-provisioned (base: the Secret, the
//!   APIServices to write the caBundle of, the RBAC and admission policy that allow just
//!   that) or cert-manager (the Certificate's Secret mounted and passed as
//!   `--tls-cert-file`/`--tls-private-key-file`, CA injection, none of the above);
//! - the optional Prometheus source, where enabled, has its rules file mounted;
//! - delegated-authentication RBAC, the PodDisruptionBudget, the security context.
//!
//! Cross-cutting checks (schemas, images, generated objects) are in
//! `deploy.rs` beside it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use clap::CommandFactory;
use gpu_metrics_adapter::catalog::Catalog;
use gpu_metrics_adapter::config::{Args, Cli};
use gpu_metrics_adapter::source::prometheus::{adapter, rules};
use serde_json::{Value, json};
use test_support::deploy::{self, PodContext, Render};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap()
}

/// Every rendering of `deploy/` (the shared `test_support::deploy`), made once.
fn renders() -> &'static [Render] {
    static RENDERS: OnceLock<Vec<Render>> = OnceLock::new();
    RENDERS.get_or_init(|| deploy::renders(&repo()))
}

fn render(name: &str) -> &'static Render {
    renders().iter().find(|r| r.name == name).unwrap()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn get<'a>(r: &'a Render, kind: &str, name: &str) -> &'a Value {
    find(&r.docs, kind, name).unwrap_or_else(|| panic!("{}: no {kind} {name}", r.name))
}

fn all<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    docs.iter().filter(move |d| d["kind"] == kind)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap()).collect()).unwrap_or_default()
}

fn deployment(r: &Render) -> &Value {
    get(r, "Deployment", "gpu-metrics-adapter")
}

fn container(r: &Render) -> &Value {
    let containers = deployment(r)["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    containers.iter().find(|c| c["name"] == "adapter").unwrap_or_else(|| panic!("{}: no adapter container", r.name))
}

fn env_var<'a>(c: &'a Value, name: &str) -> Option<&'a Value> {
    c["env"].as_array().into_iter().flatten().find(|e| e["name"] == name)
}

/// argv from the container's args and environment, the environment applied as clap
/// applies it: a variable counts only where its flag is not given.
fn argv(r: &Render) -> Vec<String> {
    pod(r).argv(container(r), &Cli::command(), "gpu-metrics-adapter", &[])
}

/// Where the adapter's pod runs, to resolve its environment.
fn pod(r: &Render) -> PodContext<'_> {
    PodContext { render: &r.name, workload: deployment(r), pod: "gpu-metrics-adapter-0", node: "node-1" }
}

fn parsed(r: &Render) -> Args {
    let argv = argv(r);
    Args::parse_from_args(&argv).unwrap_or_else(|e| panic!("{}: the adapter refuses {argv:?}: {e}", r.name))
}

const SELF_PROVISIONING_ENV: [&str; 4] = [
    "GPU_METRICS_ADAPTER_TLS_SECRET_NAME",
    "GPU_METRICS_ADAPTER_TLS_SECRET_NAMESPACE",
    "GPU_METRICS_ADAPTER_TLS_CA_BUNDLE_APISERVICES",
    "GPU_METRICS_ADAPTER_SELF_SIGNED_HOSTS",
];
const APISERVICES: [&str; 2] = ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"];
const EXTERNAL_APISERVICE: &str = "v1beta1.external.metrics.k8s.io";
/// The APIServices whose caBundle the self-provisioning adapter may write (the external
/// one only when it serves that group and the APIService is installed).
const CA_BUNDLE_APISERVICES: [&str; 3] =
    ["v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"];

#[test]
fn every_overlay_registers_both_versions_against_the_adapter_service() {
    for r in renders() {
        let v2 = get(r, "APIService", APISERVICES[1]);
        let v1 = get(r, "APIService", APISERVICES[0]);
        assert_eq!(v2["spec"]["group"], "custom.metrics.k8s.io");
        assert_eq!(
            (v2["spec"]["version"].as_str(), v1["spec"]["version"].as_str()),
            (Some("v1beta2"), Some("v1beta1"))
        );
        assert!(
            v2["spec"]["versionPriority"].as_i64() > v1["spec"]["versionPriority"].as_i64(),
            "v1beta2 must be preferred"
        );
        for api in [v1, v2] {
            // The aggregator verifies the adapter; the caBundle is written at run time.
            assert!(
                api["spec"].get("insecureSkipTLSVerify").is_none(),
                "{}: {} skips TLS verification",
                r.name,
                api["metadata"]["name"]
            );
            assert!(
                api["spec"].get("caBundle").is_none(),
                "{}: a caBundle in the manifests would be overwritten",
                r.name
            );
            let svc = &api["spec"]["service"];
            let service = get(r, "Service", svc["name"].as_str().unwrap());
            assert_eq!(service["metadata"]["namespace"], svc["namespace"]);
            let port = service["spec"]["ports"].as_array().unwrap().iter().find(|p| p["port"] == svc["port"]).unwrap();
            assert_eq!(port["targetPort"], "https");
        }
    }
}

#[test]
fn where_external_metrics_are_installed_the_aggregator_reaches_the_adapter_verified() {
    let with: Vec<&Render> =
        renders().iter().filter(|r| find(&r.docs, "APIService", EXTERNAL_APISERVICE).is_some()).collect();
    assert!(with.iter().any(|r| r.name.starts_with("components: ")), "the component renders nowhere");
    for r in with {
        let api = get(r, "APIService", EXTERNAL_APISERVICE);
        assert_eq!(
            (api["spec"]["group"].as_str(), api["spec"]["version"].as_str()),
            (Some("external.metrics.k8s.io"), Some("v1beta1"))
        );
        assert!(
            api["spec"].get("insecureSkipTLSVerify").is_none() && api["spec"].get("caBundle").is_none(),
            "{}",
            r.name
        );
        let custom = get(r, "APIService", APISERVICES[1]);
        assert_eq!(api["spec"]["service"], custom["spec"]["service"], "{}: the same adapter Service", r.name);
        // Its CA comes from where the custom metrics APIServices' comes from.
        let injected = |a: &Value| a["metadata"]["annotations"].get("cert-manager.io/inject-ca-from").cloned();
        assert_eq!(injected(api), injected(custom), "{}", r.name);
        let args = parsed(r);
        if injected(api).is_none() {
            assert!(args.tls_ca_bundle_apiservices.iter().any(|a| a == EXTERNAL_APISERVICE), "{}", r.name);
        }
        // External metrics need rules that serve them.
        assert!(args.prometheus_url.is_some(), "{}: external metrics without a Prometheus source", r.name);
    }
}

#[test]
fn every_overlay_passes_flags_and_variables_the_adapter_accepts() {
    for r in renders() {
        let c = container(r);
        let args = parsed(r);
        assert_eq!(args.secure_port as u64, c["ports"][0]["containerPort"].as_u64().unwrap(), "{}", r.name);
        assert_eq!(c["ports"][0]["name"], "https");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
        assert_eq!(args.exporter_namespace, "gpu-telemetry");
        let exporter = get(r, "Service", &args.exporter_service);
        assert_eq!(exporter["metadata"]["namespace"], args.exporter_namespace.as_str());
        assert!(
            exporter["spec"]["ports"].as_array().unwrap().iter().any(|p| p["name"] == args.exporter_port_name.as_str())
        );
        assert!(!args.standalone);
    }
}

/// `<service>.<namespace>.svc` is the name the aggregator checks the serving certificate for.
fn aggregator_dials(r: &Render) -> String {
    let svc = &get(r, "APIService", APISERVICES[1])["spec"]["service"];
    format!("{}.{}.svc", svc["name"].as_str().unwrap(), svc["namespace"].as_str().unwrap())
}

/// Roles bound to the adapter's ServiceAccount.
fn adapter_rules(r: &Render) -> Vec<&Value> {
    let mut out = Vec::new();
    for (binding_kind, role_kind) in [("RoleBinding", "Role"), ("ClusterRoleBinding", "ClusterRole")] {
        for b in all(&r.docs, binding_kind) {
            let bound = b["subjects"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == "gpu-metrics-adapter");
            if !bound || b["roleRef"]["kind"] != role_kind {
                continue;
            }
            if let Some(role) = all(&r.docs, role_kind).find(|role| {
                role["metadata"]["name"] == b["roleRef"]["name"]
                    && (role_kind == "ClusterRole" || role["metadata"]["namespace"] == b["metadata"]["namespace"])
            }) {
                out.extend(role["rules"].as_array().unwrap().iter());
            }
        }
    }
    out
}

fn grants(rules: &[&Value], group: &str, resource: &str, verb: &str) -> Option<Vec<String>> {
    rules
        .iter()
        .find(|rule| {
            strings(&rule["apiGroups"]).contains(&group)
                && strings(&rule["resources"]).contains(&resource)
                && strings(&rule["verbs"]).contains(&verb)
        })
        .map(|rule| strings(&rule["resourceNames"]).into_iter().map(str::to_owned).collect())
}

#[test]
fn the_base_provisions_its_own_serving_certificate_with_least_privilege() {
    for name in ["deploy", "deploy/base", "deploy/overlays/prometheus", "deploy/overlays/prometheus-operator"] {
        let r = render(name);
        let c = container(r);
        let value =
            |n: &str| env_var(c, n).map(|v| pod(r).env_value(v)).unwrap_or_else(|| panic!("{name}: {n} is not set"));
        assert_eq!(value("GPU_METRICS_ADAPTER_TLS_SECRET_NAME"), "gpu-metrics-adapter-serving");
        assert_eq!(
            env_var(c, "GPU_METRICS_ADAPTER_TLS_SECRET_NAMESPACE").unwrap()["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        let mut apiservices: Vec<String> =
            value("GPU_METRICS_ADAPTER_TLS_CA_BUNDLE_APISERVICES").split(',').map(str::to_owned).collect();
        apiservices.sort();
        assert_eq!(apiservices, CA_BUNDLE_APISERVICES);
        let args = parsed(r);
        assert!(args.tls_cert_file.is_none() && args.tls_private_key_file.is_none(), "{name}");
        assert!(args.self_signed_hosts.contains(&aggregator_dials(r)), "{name}: {:?}", args.self_signed_hosts);

        // RBAC: that Secret and those APIServices, nothing more.
        let rules = adapter_rules(r);
        let secret = vec!["gpu-metrics-adapter-serving".to_owned()];
        assert_eq!(grants(&rules, "", "secrets", "get"), Some(secret.clone()), "{name}");
        assert_eq!(grants(&rules, "", "secrets", "update"), Some(secret), "{name}");
        assert_eq!(grants(&rules, "", "secrets", "create"), Some(vec![]), "{name}: create (limited by admission)");
        assert_eq!(grants(&rules, "", "secrets", "list"), None, "{name}: the adapter must not read other Secrets");
        assert_eq!(grants(&rules, "", "secrets", "delete"), None, "{name}");
        for verb in ["get", "update"] {
            let mut names = grants(&rules, "apiregistration.k8s.io", "apiservices", verb)
                .unwrap_or_else(|| panic!("{name}: apiservices {verb}"));
            names.sort();
            assert_eq!(names, CA_BUNDLE_APISERVICES, "{name}: apiservices {verb}");
        }
        let secret_role = all(&r.docs, "Role")
            .find(|role| {
                role["rules"].as_array().unwrap().iter().any(|x| strings(&x["resources"]).contains(&"secrets"))
            })
            .unwrap();
        assert_eq!(secret_role["metadata"]["namespace"], "gpu-telemetry", "{name}: the Secret's namespace only");
        // The admission policy that narrows `create` (its CEL is evaluated in deploy.rs).
        let policy = all(&r.docs, "ValidatingAdmissionPolicy")
            .find(|p| p["spec"]["matchConditions"][0]["expression"].as_str().unwrap().contains("gpu-metrics-adapter"))
            .unwrap_or_else(|| panic!("{name}: no admission policy for the adapter's Secret"));
        assert!(
            find(&r.docs, "ValidatingAdmissionPolicyBinding", policy["metadata"]["name"].as_str().unwrap()).is_some()
        );
        for api in APISERVICES {
            assert!(
                get(r, "APIService", api)["metadata"]["annotations"].get("cert-manager.io/inject-ca-from").is_none()
            );
        }
    }
}

#[test]
fn with_cert_manager_the_adapter_serves_the_issued_certificate_and_provisions_nothing() {
    let with: Vec<&Render> = renders().iter().filter(|r| all(&r.docs, "Certificate").next().is_some()).collect();
    assert!(with.iter().any(|r| r.name == "deploy/overlays/cert-manager"));
    assert!(with.iter().any(|r| r.name.starts_with("components: ")));
    for r in with {
        let c = container(r);
        let pod = &deployment(r)["spec"]["template"]["spec"];
        for var in SELF_PROVISIONING_ENV {
            assert!(env_var(c, var).is_none(), "{}: {var} is still set", r.name);
        }
        let args = parsed(r);
        let cert = args.tls_cert_file.clone().unwrap_or_else(|| panic!("{}: no --tls-cert-file", r.name));
        let key = args.tls_private_key_file.clone().unwrap();

        // The files come from the serving Certificate's Secret.
        let certificates: Vec<_> = all(&r.docs, "Certificate").collect();
        let serving: Vec<_> = certificates.iter().filter(|x| x["spec"]["isCA"] != true).collect();
        assert_eq!(serving.len(), 1, "{}", r.name);
        let serving = serving[0];
        let secret = serving["spec"]["secretName"].as_str().unwrap();
        let mount = c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| cert.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{}: {} is not on a mounted volume", r.name, cert.display()));
        assert_eq!(mount["readOnly"], true);
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
        assert_eq!(volume["secret"]["secretName"], secret, "{}", r.name);
        let dir = Path::new(mount["mountPath"].as_str().unwrap());
        assert_eq!((cert, key), (dir.join("tls.crt"), dir.join("tls.key")), "{}: the kubernetes.io/tls keys", r.name);

        // The certificate names what the aggregator dials, is for serving, and is signed by
        // a CA Issuer whose CA comes from a self-signed Issuer.
        let names = strings(&serving["spec"]["dnsNames"]);
        assert!(names.contains(&aggregator_dials(r).as_str()), "{}: {names:?}", r.name);
        let usages = strings(&serving["spec"]["usages"]);
        assert!(usages.is_empty() || usages.contains(&"server auth"), "{}", r.name);
        let issuer = get(r, "Issuer", serving["spec"]["issuerRef"]["name"].as_str().unwrap());
        let ca_secret = issuer["spec"]["ca"]["secretName"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: the serving Issuer is not a CA Issuer", r.name));
        let ca = certificates.iter().find(|x| x["spec"]["secretName"] == ca_secret).unwrap();
        assert_eq!(ca["spec"]["isCA"], true);
        let root = get(r, "Issuer", ca["spec"]["issuerRef"]["name"].as_str().unwrap());
        assert!(root["spec"]["selfSigned"].is_object(), "{}", r.name);
        for x in certificates.iter().chain([&issuer, &root]) {
            assert_eq!(x["metadata"]["namespace"], "gpu-telemetry");
            let kind = x["spec"]["issuerRef"]["kind"].as_str();
            assert!(kind.is_none() || kind == Some("Issuer"));
        }

        // The caBundle is that CA, injected by cert-manager.
        let inject = format!(
            "{}/{}",
            serving["metadata"]["namespace"].as_str().unwrap(),
            serving["metadata"]["name"].as_str().unwrap()
        );
        for api in APISERVICES {
            assert_eq!(
                get(r, "APIService", api)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                inject.as_str()
            );
        }

        // Least privilege: the self-provisioning permissions are gone.
        let rules = adapter_rules(r);
        for (group, resource, verb) in [
            ("", "secrets", "get"),
            ("", "secrets", "create"),
            ("", "secrets", "update"),
            ("apiregistration.k8s.io", "apiservices", "update"),
        ] {
            assert_eq!(grants(&rules, group, resource, verb), None, "{}: still grants {resource} {verb}", r.name);
        }
        assert!(
            all(&r.docs, "ValidatingAdmissionPolicy").all(|p| !p["spec"]["matchConditions"][0]["expression"]
                .as_str()
                .unwrap()
                .contains("gpu-metrics-adapter")),
            "{}: the adapter's Secret policy is left behind",
            r.name
        );
    }
}

#[test]
fn every_overlay_keeps_one_adapter_through_disruptions() {
    for r in renders() {
        let d = deployment(r);
        let pdb = get(r, "PodDisruptionBudget", "gpu-metrics-adapter");
        assert_eq!(pdb["metadata"]["namespace"], d["metadata"]["namespace"]);
        assert_eq!(d["spec"]["replicas"], 2, "{}", r.name);
        assert_eq!(pdb["spec"]["minAvailable"], 1, "{}", r.name);
        let labels = &d["spec"]["template"]["metadata"]["labels"];
        let selector = pdb["spec"]["selector"]["matchLabels"].as_object().unwrap();
        assert!(
            !selector.is_empty() && selector.iter().all(|(k, v)| labels[k] == *v),
            "{}: the PDB does not select the adapter",
            r.name
        );
    }
}

#[test]
fn the_adapter_runs_unprivileged() {
    for r in renders() {
        let pod = &deployment(r)["spec"]["template"]["spec"];
        let c = container(r);
        let effective = |key: &str| {
            let v = &c["securityContext"][key];
            if v.is_null() { pod["securityContext"][key].clone() } else { v.clone() }
        };
        assert_eq!(effective("runAsNonRoot"), true, "{}", r.name);
        assert_eq!(effective("runAsUser"), 65532, "{}", r.name);
        assert_eq!(effective("runAsGroup"), 65532, "{}", r.name);
        assert_eq!(effective("readOnlyRootFilesystem"), true, "{}", r.name);
        assert_eq!(effective("allowPrivilegeEscalation"), false, "{}", r.name);
        assert_eq!(effective("capabilities"), json!({"drop": ["ALL"]}), "{}", r.name);
        assert_eq!(effective("seccompProfile"), json!({"type": "RuntimeDefault"}), "{}", r.name);
    }
}

#[test]
fn delegated_authentication_is_bound_in_every_overlay() {
    for r in renders() {
        let reader = get(r, "RoleBinding", "gpu-metrics-adapter-auth-reader");
        assert_eq!(reader["metadata"]["namespace"], "kube-system");
        assert_eq!(reader["roleRef"]["name"], "extension-apiserver-authentication-reader");
        let delegator = get(r, "ClusterRoleBinding", "gpu-metrics-adapter:system:auth-delegator");
        assert_eq!(delegator["roleRef"]["name"], "system:auth-delegator");
        let hpa = get(r, "ClusterRoleBinding", "hpa-controller-gpu-custom-metrics");
        assert_eq!(hpa["subjects"][0]["name"], "horizontal-pod-autoscaler");
        assert_eq!(hpa["subjects"][0]["namespace"], "kube-system");
    }
}

#[test]
fn where_the_prometheus_source_is_on_its_rules_are_mounted_and_valid() {
    let mut enabled = Vec::new();
    for r in renders() {
        let args = parsed(r);
        let Some(url) = args.prometheus_url.clone() else {
            assert!(args.prometheus_rules_file.is_none());
            continue;
        };
        enabled.push(r.name.as_str());
        let file = args.prometheus_rules_file.clone().unwrap();
        let c = container(r);
        let pod = &deployment(r)["spec"]["template"]["spec"];
        let mount = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| file.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{}: {} is not on a mounted volume", r.name, file.display()));
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).unwrap();
        let map = get(r, "ConfigMap", volume["configMap"]["name"].as_str().unwrap());
        let key = file.strip_prefix(mount["mountPath"].as_str().unwrap()).unwrap().to_str().unwrap();
        let text = map["data"][key].as_str().unwrap_or_else(|| panic!("{}: ConfigMap has no key {key}", r.name));
        if adapter::is_adapter_format(text) {
            let parsed = adapter::parse(text, key, &Catalog::builtin()).unwrap_or_else(|e| panic!("{}: {e}", r.name));
            assert!(parsed.rules.iter().any(|rule| rule.series_query.contains("request_latency_ms")));
            assert!(parsed.rules.iter().any(|rule| rule.kind == adapter::Kind::External), "{}", r.name);
        } else {
            let parsed = rules::parse(text, key).unwrap_or_else(|e| panic!("{}: {e}", r.name));
            assert!(parsed.iter().any(|rule| rule.name == "request_latency_ms"));
        }
        assert!(url.starts_with("http://") || url.starts_with("https://"));
    }
    assert!(enabled.contains(&"deploy/overlays/prometheus-operator"), "{enabled:?}");
    assert_eq!(
        parsed(render("deploy/overlays/prometheus-operator")).prometheus_url.as_deref(),
        Some("http://prometheus-operated.monitoring.svc:9090")
    );
}
