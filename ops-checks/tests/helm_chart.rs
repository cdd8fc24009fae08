//! The Helm chart `deploy/helm/gpu-telemetry`, with real Helm (v4, `scripts/go-tools`):
//! - one source of truth: for every kustomize rendering of `deploy/` (the top level, the
//!   base, each overlay, every component at once) the chart with the matching values file
//!   of its `ci/` renders the same objects, under the normalization of `common::normalize`
//!   (docs/deploy.md, "Helm", says what it leaves out and why);
//! - `helm lint --strict` with each of those values files;
//! - a matrix of values (the knobs named as dcgm-exporter's and prometheus-adapter's charts
//!   name them, another namespace, cert-manager with a Prometheus source...): each
//!   rendering validates against the Kubernetes 1.33 schemas, the binaries' own parsers
//!   accept the flags and variables it passes, and each value lands where it says;
//! - no constant label (`--label`) but those the values set, none by default;
//! - a wrong value is refused by `values.schema.json` or the chart, naming the value;
//! - the chart's version is the workspace version, and `helm package` carries every file
//!   the templates read;
//! - README.md's values table is the schema's.
//!
//! The chart on a real control plane (install, upgrade, test, uninstall) is
//! `helm_cluster.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use clap::{CommandFactory, Parser};
use common::*;
use serde_json::{Value, json};
use test_support::deploy::{self, PodContext};

/// The chart's `ci/` values file that matches a kustomize rendering.
fn values_for(render: &str) -> Option<&'static str> {
    Some(match render {
        "deploy" | "deploy/base" => "base",
        "deploy/overlays/prometheus" => "prometheus",
        "deploy/overlays/prometheus-operator" => "prometheus-operator",
        "deploy/overlays/cert-manager" => "cert-manager",
        "deploy/overlays/dcgm-exporter" => "dcgm-exporter",
        "deploy/overlays/seed" => "seed",
        r if r.starts_with("components: ") => "all-components",
        _ => return None,
    })
}

#[test]
fn the_chart_installs_what_every_kustomize_rendering_installs() {
    let renders = deploy::renders(&repo());
    for r in &renders {
        let values = values_for(&r.name).unwrap_or_else(|| {
            panic!(
                "{}: no values file of deploy/helm/gpu-telemetry/ci/ matches this rendering; add one and map it in \
                 values_for (the chart must install what every overlay installs)",
                r.name
            )
        });
        let (_, chart) = template(&ci_values(values), "gpu-telemetry").unwrap_or_else(|e| panic!("{values}: {e}"));
        // The Namespace is `helm install --create-namespace`'s; hooks are `helm test`'s.
        let kustomize: BTreeMap<String, Value> =
            r.docs.iter().filter(|d| d["kind"] != "Namespace").map(|d| (key(d), normalize(d))).collect();
        let helm: BTreeMap<String, Value> =
            chart.iter().filter(|d| !is_hook(d)).map(|d| (key(d), normalize(d))).collect();
        let only_k: Vec<_> = kustomize.keys().filter(|k| !helm.contains_key(*k)).collect();
        let only_h: Vec<_> = helm.keys().filter(|k| !kustomize.contains_key(*k)).collect();
        assert!(
            only_k.is_empty() && only_h.is_empty(),
            "{} vs ci/{values}-values.yaml: only kustomize has {only_k:?}; only the chart has {only_h:?}",
            r.name
        );
        for (k, a) in &kustomize {
            let b = &helm[k];
            assert!(
                a == b,
                "{} vs ci/{values}-values.yaml: {k} differs: {}",
                r.name,
                first_difference("", a, b).unwrap_or_else(|| format!("\nkustomize {a}\nchart     {b}"))
            );
        }
        // Every object of the chart carries the release's labels.
        for d in chart.iter() {
            for l in RELEASE_LABELS {
                assert!(d["metadata"]["labels"].get(l).is_some(), "{values}: {} lacks label {l}", key(d));
            }
        }
    }
    // The comparison sees a difference: a changed knob no longer matches.
    let (_, changed) = template("exporter:\n  collectInterval: 7s\n", "gpu-telemetry").unwrap();
    let base = renders.iter().find(|r| r.name == "deploy/base").unwrap();
    let ds = |docs: &[Value]| normalize(get(docs, "DaemonSet", "gpu-exporter"));
    assert_ne!(ds(&base.docs), ds(&changed));
}

#[test]
fn helm_lint_strict_passes_with_every_ci_values_file() {
    let chart = chart();
    for entry in std::fs::read_dir(chart.join("ci")).unwrap() {
        let path = entry.unwrap().path();
        let out = run_helm(&["lint", "--strict", chart.to_str().unwrap(), "-f", path.to_str().unwrap()], None);
        let report = text(&out);
        assert!(
            out.status.success() && report.contains("0 chart(s) failed"),
            "{}: helm lint --strict:\n{report}",
            path.display()
        );
    }
    // --strict fails on what it only warns about otherwise: a value the schema refuses.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "exporter:\n  naming: dcgm\n").unwrap();
    let out = run_helm(&["lint", "--strict", chart.to_str().unwrap(), "-f", bad.to_str().unwrap()], None);
    assert!(!out.status.success(), "helm lint accepted exporter.naming=dcgm:\n{}", text(&out));
}

fn kubernetes_validate(rendered: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered).unwrap();
    let program = std::env::var("KUBERNETES_VALIDATE").unwrap_or_else(|_| "kubernetes-validate".into());
    let out = Command::new(&program)
        .args(["--strict", "-k", "1.33.0", file.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "this test needs {program} ({e}): python3 -m pip install kubernetes-validate==1.37.0 \
                 (scripts/install-test-deps does)"
            )
        });
    (out.status.success(), text(&out))
}

/// Checks that every rendering must pass: schemas (the custom resources are left to the
/// comparison with deploy/, whose tests check them against their CRDs), and both binaries'
/// parsers on the flags and variables passed.
fn check_rendering(name: &str, docs: &[Value]) {
    let builtin: Vec<String> = docs
        .iter()
        .filter(|d| !["monitoring.coreos.com/v1", "cert-manager.io/v1"].contains(&d["apiVersion"].as_str().unwrap()))
        .map(|d| serde_yaml_ng::to_string(d).unwrap())
        .collect();
    let (ok, report) = kubernetes_validate(&builtin.join("---\n"));
    assert!(
        ok && !report.contains("ERROR") && !report.contains("Couldn't find schema"),
        "{name}: kubernetes-validate --strict -k 1.33.0 refused the rendering:\n{report}"
    );
    for api in docs.iter().filter(|d| d["kind"] == "APIService") {
        assert!(
            api["spec"].get("insecureSkipTLSVerify").is_none() && api["spec"].get("caBundle").is_none(),
            "{name}: {}",
            key(api)
        );
    }

    let ds = get(docs, "DaemonSet", "gpu-exporter");
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let pod = PodContext { render: name, workload: ds, pod: "gpu-exporter-0", node: "gpu-node-1" };
    let mut skip = vec!["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"];
    // Variables the values add for others than the binary (the matrix's own).
    skip.extend(["HTTPS_PROXY", "TZ"]);
    let argv = pod.argv(container, &gpu_exporter::config::Args::command(), "gpu-exporter", &skip);
    let args = gpu_exporter::config::Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{name}: {argv:?}: {e}"));
    args.validate().unwrap_or_else(|e| panic!("{name}: {argv:?}: {e}"));

    let deployment = get(docs, "Deployment", "gpu-metrics-adapter");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let pod = PodContext { render: name, workload: deployment, pod: "gpu-metrics-adapter-0", node: "node-1" };
    let argv = pod.argv(container, &gpu_metrics_adapter::config::Cli::command(), "gpu-metrics-adapter", &skip);
    gpu_metrics_adapter::config::Args::parse_from_args(&argv).unwrap_or_else(|e| panic!("{name}: {argv:?}: {e}"));

    // The test hook runs a command the adapter's image has.
    let hook = get(docs, "Pod", "gpu-telemetry-test");
    let mut argv = vec!["gpu-metrics-adapter".to_owned()];
    argv.extend(
        hook["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_owned()),
    );
    let cli =
        gpu_metrics_adapter::config::Cli::try_parse_compat(&argv).unwrap_or_else(|e| panic!("{name}: {argv:?}: {e}"));
    assert!(matches!(cli.command, Some(gpu_metrics_adapter::config::Command::CheckApi(_))), "{name}: {argv:?}");
    assert_eq!(hook["spec"]["containers"][0]["image"], container["image"], "{name}: the hook runs the adapter's image");
}

fn env<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"].as_array().into_iter().flatten().find(|e| e["name"] == name)
}

/// dcgm-exporter's values (NVIDIA/dcgm-exporter deployment/values.yaml) under `exporter:`
/// and prometheus-adapter's (prometheus-community/helm-charts
/// charts/prometheus-adapter/values.yaml) under `adapter:`, as users have them.
const CARRIED_OVER: &str = r#"
exporter:
  priorityClassName: gpu-critical
  nodeSelector: {node: gpu}
  tolerations:
    - key: node-role.kubernetes.io/control-plane
      operator: Exists
      effect: NoSchedule
  resources:
    limits: {cpu: 200m, memory: 512Mi}
    requests: {cpu: 100m, memory: 128Mi}
  extraEnv:
    - name: TZ
      value: UTC
  podAnnotations: {team: gpu}
  podLabels: {tier: monitoring}
  rollingUpdate: {maxUnavailable: 1, maxSurge: 0}
  kubeletPath: /var/lib/k0s/kubelet/pod-resources
  serviceMonitor:
    enabled: true
    interval: 30s
    scrapeTimeout: 20s
    additionalLabels: {release: kube-prometheus-stack}
    relabelings:
      - sourceLabels: [__meta_kubernetes_pod_node_name]
        targetLabel: nodename
    metricRelabelings:
      - action: drop
        regex: gpu_sm_clock_mhz
        sourceLabels: [__name__]
adapter:
  replicas: 3
  priorityClassName: ""
  tolerations: [{operator: Exists}]
  nodeSelector: {kubernetes.io/os: linux}
  podAnnotations: {team: gpu}
  env:
    - name: HTTPS_PROXY
      value: http://proxy:3128
  extraArguments: [--scrape-timeout=5s]
  podDisruptionBudget: {enabled: true, minAvailable: null, maxUnavailable: 1}
  prometheus:
    enabled: true
    url: http://prometheus.{{ .Release.Namespace }}.svc
    port: 9090
    path: /prom
  rules:
    default: false
    custom:
      - seriesQuery: 'http_requests_total{namespace!="",pod!=""}'
        resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
        name: {matches: "^(.*)_total$", as: "${1}_per_second"}
        metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)
    external:
      - seriesQuery: 'queue_depth{queue!=""}'
        resources: {overrides: {namespace: {resource: namespace}}}
        metricsQuery: max(<<.Series>>{<<.LabelMatchers>>}) by (queue)
  externalMetrics: {enabled: true}
  certManager: {enabled: true, caCertDuration: 87600h, certDuration: 720h, renewBefore: 240h}
"#;

#[test]
fn the_values_matrix_renders_valid_objects_where_the_values_say() {
    let mut cases: Vec<(String, String, &str)> = std::fs::read_dir(chart().join("ci"))
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                format!("ci/{}", p.file_name().unwrap().to_string_lossy()),
                std::fs::read_to_string(&p).unwrap(),
                "gpu-telemetry",
            )
        })
        .collect();
    cases.sort();
    cases.push(("carried over from dcgm-exporter and prometheus-adapter".into(), CARRIED_OVER.into(), "monitoring"));
    cases.push((
        "another namespace, enforce, existing rules, no viewer roles, examples".into(),
        "exporter: {health: {enforce: true}, constLabels: null}\nadapter: {prometheus: {enabled: true, port: null}, rules: {existing: my-rules}}\n\
         kubectlGpu: {viewerRoles: false}\nexamples: {enabled: true}\ntest: {namespace: inference}\nlogFormat: text\n"
            .into(),
        "observability",
    ));
    for (name, values, namespace) in &cases {
        let (rendered, docs) = template(values, namespace).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_rendering(name, &docs);
        // Every object of the release's namespace is in it; no other namespace but those
        // Kubernetes reads from (and the examples' own, and the test's).
        for d in
            docs.iter().filter(|d| d["metadata"]["labels"]["app.kubernetes.io/part-of"] != "gpu-telemetry-examples")
        {
            if let Some(ns) = d["metadata"]["namespace"].as_str() {
                assert!(
                    [*namespace, "kube-system", "default", "inference"].contains(&ns),
                    "{name}: {} in namespace {ns}",
                    key(d)
                );
            }
        }
        assert!(
            !rendered.contains("gpu-telemetry.svc") || *namespace == "gpu-telemetry",
            "{name}: a DNS name keeps gpu-telemetry"
        );
        assert!(
            !rendered.contains(":gpu-telemetry:") || *namespace == "gpu-telemetry",
            "{name}: a service-account user name keeps gpu-telemetry"
        );
    }

    // Where the carried-over values land.
    let (_, docs) = template(CARRIED_OVER, "monitoring").unwrap();
    let pod = &get(&docs, "DaemonSet", "gpu-exporter")["spec"]["template"];
    assert_eq!(pod["spec"]["priorityClassName"], "gpu-critical");
    assert_eq!(pod["spec"]["nodeSelector"], json!({"node": "gpu"}));
    assert_eq!(pod["spec"]["tolerations"][0]["key"], "node-role.kubernetes.io/control-plane");
    assert_eq!(pod["metadata"]["annotations"], json!({"team": "gpu"}));
    assert_eq!(pod["metadata"]["labels"]["tier"], "monitoring");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
    assert_eq!(env(c, "TZ").unwrap()["value"], "UTC");
    assert!(
        c["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--kubelet.pod-resources-socket=/var/lib/k0s/kubelet/pod-resources/kubelet.sock"))
    );
    assert_eq!(pod["spec"]["volumes"][0]["hostPath"]["path"], "/var/lib/k0s/kubelet/pod-resources");
    let sm = get(&docs, "ServiceMonitor", "gpu-exporter");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(sm["spec"]["namespaceSelector"]["matchNames"], json!(["monitoring"]));
    let ep = &sm["spec"]["endpoints"][0];
    assert_eq!((ep["interval"].as_str(), ep["scrapeTimeout"].as_str()), (Some("30s"), Some("20s")));
    assert_eq!(ep["honorLabels"], true, "the exporter's pod labels must survive whatever the values say");
    assert_eq!(ep["relabelings"].as_array().unwrap().len(), 3, "the chart's two relabelings, then the user's");
    assert_eq!(ep["relabelings"][2]["targetLabel"], "nodename");
    assert_eq!(ep["metricRelabelings"][0]["action"], "drop");

    let d = get(&docs, "Deployment", "gpu-metrics-adapter");
    assert_eq!(d["spec"]["replicas"], 3);
    let spec = &d["spec"]["template"]["spec"];
    assert!(spec.get("priorityClassName").is_none(), "an empty priorityClassName is left out");
    let c = &spec["containers"][0];
    assert_eq!(
        env(c, "GPU_METRICS_ADAPTER_PROMETHEUS_URL").unwrap()["value"],
        "http://prometheus.monitoring.svc:9090/prom"
    );
    assert_eq!(env(c, "HTTPS_PROXY").unwrap()["value"], "http://proxy:3128");
    assert!(env(c, "GPU_METRICS_ADAPTER_TLS_SECRET_NAME").is_none(), "cert-manager: the adapter provisions nothing");
    assert!(c["args"].as_array().unwrap().contains(&json!("--scrape-timeout=5s")));
    let pdb = get(&docs, "PodDisruptionBudget", "gpu-metrics-adapter");
    assert_eq!((pdb["spec"].get("minAvailable"), &pdb["spec"]["maxUnavailable"]), (None, &json!(1)));
    let rules: Value = serde_yaml_ng::from_str(
        get(&docs, "ConfigMap", "gpu-metrics-adapter-rules")["data"]["rules.yaml"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(rules["rules"].as_array().unwrap().len(), 1, "rules.default=false: only the custom rule");
    assert_eq!(rules["rules"][0]["name"]["as"], "${1}_per_second");
    assert_eq!(rules["externalRules"][0]["seriesQuery"], "queue_depth{queue!=\"\"}");
    // The rules file parses as the adapter's Prometheus source reads it.
    let rules_text =
        get(&docs, "ConfigMap", "gpu-metrics-adapter-rules")["data"]["rules.yaml"].as_str().unwrap().to_owned();
    gpu_metrics_adapter::source::prometheus::adapter::parse(
        &rules_text,
        "rules.yaml",
        &gpu_metrics_adapter::catalog::Catalog::builtin(),
    )
    .unwrap_or_else(|e| panic!("the rendered rules file is refused: {e}"));
    let external = get(&docs, "APIService", "v1beta1.external.metrics.k8s.io");
    assert_eq!(
        external["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "monitoring/gpu-metrics-adapter-serving"
    );
    let ca = get(&docs, "Certificate", "gpu-metrics-adapter-ca");
    assert_eq!(ca["spec"]["duration"], "87600h");
    let serving = get(&docs, "Certificate", "gpu-metrics-adapter-serving");
    assert_eq!(
        (serving["spec"]["duration"].as_str(), serving["spec"]["renewBefore"].as_str()),
        (Some("720h"), Some("240h"))
    );
    assert!(serving["spec"]["dnsNames"].as_array().unwrap().contains(&json!("gpu-metrics-adapter.monitoring.svc")));

    // The other case: the existing ConfigMap is mounted and none is made; the test asks
    // in its namespace; the examples come along; no viewer roles.
    let (_, docs) = template(&cases.last().unwrap().1, "observability").unwrap();
    let d = get(&docs, "Deployment", "gpu-metrics-adapter");
    let volumes = &d["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["name"], "my-rules");
    assert!(find(&docs, "ConfigMap", "gpu-metrics-adapter-rules").is_none());
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env(c, "GPU_METRICS_ADAPTER_PROMETHEUS_URL").unwrap()["value"],
        "http://prometheus-operated.monitoring.svc"
    );
    assert_eq!(
        env(c, "GPU_METRICS_ADAPTER_SELF_SIGNED_HOSTS").unwrap()["value"].as_str().unwrap().split(',').nth(2),
        Some("gpu-metrics-adapter.observability.svc")
    );
    let ds = get(&docs, "DaemonSet", "gpu-exporter");
    let c = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(env(c, "GPU_EXPORTER_HEALTH_DRY_RUN").unwrap()["value"], "false");
    assert!(!c["args"].as_array().unwrap().iter().any(|a| a.as_str().unwrap().starts_with("--label")));
    assert!(find(&docs, "ClusterRole", "gpu-telemetry-viewer").is_none());
    assert_eq!(get(&docs, "Role", "gpu-telemetry-test")["metadata"]["namespace"], "inference");
    let examples = deploy::kustomize(&repo().join("deploy/examples")).1;
    for e in &examples {
        let found = docs.iter().find(|d| key(d) == key(e)).unwrap_or_else(|| panic!("examples: {} missing", key(e)));
        assert_eq!(found, e, "examples.enabled renders deploy/examples as kustomize does");
    }
    for kind in ["nodes", "events", "breaker", "device-taints"] {
        let policy = get(&docs, "ValidatingAdmissionPolicy", &format!("gpu-exporter-health-{kind}.gpu-telemetry.io"));
        assert_eq!(
            policy["spec"]["matchConditions"][0]["expression"],
            "request.userInfo.username == 'system:serviceaccount:observability:gpu-exporter'"
        );
    }
}

/// The exporter's `--label` flags, as the chart renders them with `values`.
fn label_flags(values: &str) -> Vec<String> {
    let (_, docs) = template(values, "gpu-telemetry").unwrap_or_else(|e| panic!("{values}: {e}"));
    let c = &get(&docs, "DaemonSet", "gpu-exporter")["spec"]["template"]["spec"]["containers"][0];
    c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .filter(|a| a.starts_with("--label"))
        .map(str::to_owned)
        .collect()
}

/// Constant labels name one cluster, so the chart sets none of its own: not by default,
/// not with `{}`, not with null (which earlier defaults needed to clear theirs, and which
/// users' values files still hold). A user's labels are rendered as given, with no
/// default merged into them; the seed's come with its values file.
#[test]
fn the_chart_sets_no_constant_label_but_the_users() {
    for values in ["{}", "exporter: {constLabels: {}}", "exporter: {constLabels: null}"] {
        assert_eq!(label_flags(values), Vec::<String>::new(), "{values}");
    }
    assert_eq!(label_flags("exporter: {constLabels: {cluster: staging}}"), ["--label=cluster=staging"]);
    assert_eq!(
        label_flags("exporter: {constLabels: {region: eu-west, cluster: staging}}"),
        ["--label=cluster=staging,region=eu-west"],
        "in key order"
    );
    assert_eq!(label_flags(&ci_values("seed")), ["--label=cluster=production,region=cn-east"]);
}

#[test]
fn wrong_values_are_refused_naming_the_value() {
    for (values, expect) in [
        ("exporter: {naming: dcgm}", "/exporter/naming"),
        ("exporter: {collectInterval: 5}", "/exporter/collectInterval"),
        ("exporter: {collectInterval: 5 seconds}", "/exporter/collectInterval"),
        ("exporter: {tolerance: []}", "additional properties 'tolerance' not allowed"),
        (
            "exporter: {arguments: [-f, /etc/dcgm-exporter/default-counters.csv]}",
            "additional properties 'arguments' not allowed",
        ),
        ("exporter: {serviceMonitor: {enabled: yes please}}", "/exporter/serviceMonitor/enabled"),
        ("exporter: {extraEnv: [{value: x}]}", "/exporter/extraEnv/0"),
        ("exporter: {tolerations: [{operator: Maybe}]}", "/exporter/tolerations/0/operator"),
        ("exporter: {health: {enforce: \"true\"}}", "/exporter/health/enforce"),
        ("adapter: {replicas: 0}", "/adapter/replicas"),
        ("adapter: {prometheus: {url: prometheus:9090}}", "/adapter/prometheus/url"),
        ("adapter: {rules: {custom: [{metricsQuery: x}]}}", "/adapter/rules/custom/0"),
        ("adapter: {certManager: {certDuration: 90d}}", "/adapter/certManager/certDuration"),
        ("adapter: {tls: {enable: true}}", "additional properties 'tls' not allowed"),
        ("logFormat: yaml", "/logFormat"),
        (
            "exporter: {dcgmExporterService: {enabled: true}}",
            "exporter.dcgmExporterService.enabled=true needs exporter.naming=both",
        ),
        (
            "adapter: {podDisruptionBudget: {minAvailable: 1, maxUnavailable: 1}}",
            "adapter.podDisruptionBudget: set minAvailable or maxUnavailable",
        ),
        ("adapter: {rules: {existing: mine, custom: [{seriesQuery: x}]}}", "adapter.rules.existing"),
    ] {
        let err = template(values, "gpu-telemetry").err().unwrap_or_else(|| panic!("{values}: accepted"));
        assert!(err.contains(expect), "{values}: the error does not name {expect:?}:\n{err}");
    }
}

#[test]
fn the_chart_version_is_the_workspace_version() {
    let meta: Value = serde_json::to_value(
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap(),
    )
    .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(meta["version"], version, "Chart.yaml version: bump it with [workspace.package] version");
    assert_eq!(meta["appVersion"], version, "Chart.yaml appVersion: bump it with [workspace.package] version");
    let (_, docs) = template("{}", "gpu-telemetry").unwrap();
    for (kind, name, image) in [
        ("DaemonSet", "gpu-exporter", "gpu-exporter"),
        ("Deployment", "gpu-metrics-adapter", "gpu-metrics-adapter"),
        ("Pod", "gpu-telemetry-test", "gpu-metrics-adapter"),
    ] {
        let d = get(&docs, kind, name);
        let spec = if kind == "Pod" { &d["spec"] } else { &d["spec"]["template"]["spec"] };
        assert_eq!(spec["containers"][0]["image"], format!("ghcr.io/gpu-telemetry/{image}:{version}"));
    }
}

#[test]
fn the_packaged_chart_renders_what_the_directory_renders() {
    let dir = tempfile::tempdir().unwrap();
    let chart = chart();
    let out = run_helm(&["package", chart.to_str().unwrap(), "-d", dir.path().to_str().unwrap()], None);
    assert!(out.status.success(), "helm package: {}", text(&out));
    let archive = dir.path().join(format!("gpu-telemetry-{}.tgz", env!("CARGO_PKG_VERSION")));
    assert!(archive.exists(), "helm package wrote no {}: {}", archive.display(), text(&out));
    let values = chart.join("ci/all-components-values.yaml");
    let render = |from: &str| {
        let out = run_helm(
            &[
                "template",
                "gpu-telemetry",
                from,
                "-n",
                "gpu-telemetry",
                "-f",
                values.to_str().unwrap(),
                "--set",
                "examples.enabled=true",
            ],
            None,
        );
        assert!(out.status.success(), "helm template {from}: {}", text(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let packaged = render(archive.to_str().unwrap());
    assert_eq!(packaged, render(chart.to_str().unwrap()), "the package lacks a file the templates read");
    assert!(
        packaged.contains("grafana-dashboard-")
            && packaged.contains("kind: PrometheusRule")
            && packaged.contains("gpu-telemetry-examples")
    );
}

/// The type column of a schema node.
fn type_of(s: &Value) -> String {
    if let Some(e) = s["enum"].as_array() {
        return e.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ");
    }
    if let Some(any) = s["anyOf"].as_array() {
        return any.iter().map(type_of).collect::<Vec<_>>().join(" or ");
    }
    match &s["type"] {
        Value::String(_) if s["pattern"].as_str().is_some_and(|p| p.contains("ms|s|m|h")) => "duration".into(),
        Value::String(t) => t.clone(),
        Value::Array(ts) => ts.iter().map(|t| t.as_str().unwrap().to_owned()).collect::<Vec<_>>().join(" or "),
        _ => "any".into(),
    }
}

/// README.md's values table, between its markers: every leaf of values.schema.json (a
/// value that is not a section of described values), its type, its default from values.yaml
/// and its description. `UPDATE_GOLDEN=1` rewrites it.
#[test]
fn the_readme_values_table_is_the_schemas() {
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart().join("values.schema.json")).unwrap()).unwrap();
    let defaults: Value = serde_json::to_value(
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap(),
    )
    .unwrap();
    fn leaves(prefix: &str, s: &Value, out: &mut Vec<(String, Value)>) {
        match s["properties"].as_object() {
            // An object of described values is a section; one whose keys are Kubernetes'
            // own (resources) is one value.
            Some(props)
                if s["additionalProperties"] == false && props.values().all(|p| p.get("description").is_some()) =>
            {
                for (k, v) in props {
                    let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    leaves(&path, v, out);
                }
            }
            _ => out.push((prefix.to_owned(), s.clone())),
        }
    }
    let mut want = Vec::new();
    leaves("", &schema, &mut want);
    want.retain(|(k, _)| k != "global");
    let mut table = String::from("| value | type | default | description |\n|---|---|---|---|\n");
    for (path, s) in &want {
        let default = path.split('.').fold(&defaults, |v, k| &v[k]);
        let description =
            s["description"].as_str().unwrap_or_else(|| panic!("{path}: no description in values.schema.json"));
        table.push_str(&format!(
            "| `{path}` | {} | `{}` | {} |\n",
            type_of(s).replace('|', "\\|"),
            serde_json::to_string(default).unwrap().replace('|', "\\|"),
            description.replace('|', "\\|")
        ));
    }
    // values.yaml itself passes the schema (every `helm template` checks it), so it names
    // nothing the table lacks.
    let begin = "<!-- values-table: begin (ops-checks/tests/helm_chart.rs writes it with UPDATE_GOLDEN=1) -->\n";
    let end = "<!-- values-table: end -->";
    test_support::golden::block(
        &repo().join("README.md"),
        begin,
        end,
        &format!("{begin}{table}{end}"),
        "UPDATE_GOLDEN=1 cargo test -p ops-checks --test helm_chart the_readme_values_table",
    );
}
