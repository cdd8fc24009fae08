//! Which objects a `*` read answers for, against the in-test API server speaking the real
//! wire protocol (metadata-only lists and watches, paging, discovery, injected failures):
//!
//! * `ObjectNames` itself: label selection of Services, Deployments, Jobs and Namespaces
//!   listed metadata only, every page followed, lists kept two seconds, refusals and
//!   failures of the API server as errors naming what was listed, a resource discovery
//!   does not know (and then does);
//! * through the adapter, against a stand-in Prometheus that answers for objects that do
//!   not exist too: a `*` read answers only for objects the API server lists, with or
//!   without a label selector, as prometheus-adapter does; the direct source leaves out
//!   pods the API server does not have (a named read of one still answers, as documented
//!   in `source::direct`); failures of the list are 5xx that say what failed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use gpu_metrics_adapter::labels::LabelStore;
use gpu_metrics_adapter::objects::{Error, ObjectNames, list};
use gpu_metrics_adapter::selector::Selector;
use serde_json::{Value, json};
use support::{Behavior, Exporter, Pki, fixture, get, tls_client};
use test_support::apiserver::ApiServer;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A kube client for `fake` as the adapter makes its lister's: no retries.
async fn client(fake: &ApiServer, dir: &std::path::Path) -> kube::Client {
    let addr = fake.serve().await;
    let kc = kube::config::Kubeconfig::read_from(support::adapter_kubeconfig(addr, dir)).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// The objects of the tests: Services, Deployments and Jobs in `ai` (and a Service
/// elsewhere), and three Namespaces, on a server that lists metadata only.
fn cluster() -> ApiServer {
    let fake = support::apiserver();
    for (ns, name, labels) in [
        ("ai", "web-1", &[("tier", "web")][..]),
        ("ai", "web-2", &[("tier", "web")]),
        ("ai", "db", &[("tier", "db")]),
        ("other", "web-x", &[("tier", "web")]),
    ] {
        fake.add_object("v1", "services", "Service", Some(ns), name, labels);
    }
    fake.add_object("apps/v1", "deployments", "Deployment", Some("ai"), "web", &[("tier", "web")]);
    fake.add_object("apps/v1", "deployments", "Deployment", Some("ai"), "worker", &[("tier", "batch")]);
    fake.add_object("batch/v1", "jobs", "Job", Some("ai"), "nightly", &[("schedule", "nightly")]);
    fake.add_object("batch/v1", "jobs", "Job", Some("ai"), "adhoc", &[]);
    for (name, labels) in [("ai", &[("team", "a")][..]), ("other", &[("team", "b")]), ("kube-system", &[])] {
        fake.add_object("v1", "namespaces", "Namespace", None, name, labels);
    }
    fake
}

fn sel(s: &str) -> Selector {
    Selector::parse(s).unwrap()
}

fn names(s: &gpu_metrics_adapter::objects::Selection) -> Vec<&str> {
    s.names.iter().map(|n| &**n).collect()
}

/// The list requests `fake` saw for `path`.
fn lists(fake: &ApiServer, path: &str) -> Vec<test_support::apiserver::Recorded> {
    fake.requests().into_iter().filter(|r| r.path == path).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selection_lists_services_deployments_jobs_and_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let fake = cluster();
    let objects = ObjectNames::new(Arc::new(LabelStore::new()), client(&fake, dir.path()).await, TIMEOUT);

    let s = objects.select("services", Some("ai"), &sel("tier=web")).await.unwrap();
    assert_eq!((names(&s), s.among), (vec!["web-1", "web-2"], None), "the API server selected; among unknown");
    let s = objects.select("services", Some("ai"), &Selector::everything()).await.unwrap();
    assert_eq!((names(&s), s.among), (vec!["db", "web-1", "web-2"], Some(3)), "every Service of ai, none of other");
    let s = objects.select("deployments.apps", Some("ai"), &sel("tier in (web,api)")).await.unwrap();
    assert_eq!(names(&s), ["web"]);
    let s = objects.select("jobs.batch", Some("ai"), &sel("schedule")).await.unwrap();
    assert_eq!(names(&s), ["nightly"]);
    let s = objects.select("jobs.batch", Some("ai"), &sel("!schedule")).await.unwrap();
    assert_eq!(names(&s), ["adhoc"]);
    let s = objects.select("namespaces", None, &sel("team")).await.unwrap();
    assert_eq!(names(&s), ["ai", "other"]);
    let s = objects.select("namespaces", None, &Selector::everything()).await.unwrap();
    assert_eq!((names(&s), s.among), (vec!["ai", "kube-system", "other"], Some(3)));
    // Nothing picked is an empty selection, not an error.
    assert!(objects.select("services", Some("ai"), &sel("tier=cache")).await.unwrap().names.is_empty());
    assert!(objects.select("services", Some("empty"), &Selector::everything()).await.unwrap().names.is_empty());

    // Each list asked for metadata only, paged, with the selector for the API server.
    let svc = lists(&fake, "/api/v1/namespaces/ai/services");
    assert_eq!(svc[0].param("labelSelector").as_deref(), Some("tier=web"));
    assert_eq!(svc[0].param("limit").as_deref(), Some("500"));
    assert_eq!(svc[1].param("labelSelector"), None, "an empty selector is not sent");
    for r in fake.requests().iter().filter(|r| r.param("limit").is_some()) {
        assert_eq!(r.accept, list::ACCEPT, "{}", r.describe());
        assert_eq!(r.status, 200, "{}", r.describe());
    }
    assert_eq!(
        lists(&fake, "/apis/apps/v1/namespaces/ai/deployments")[0].param("labelSelector").as_deref(),
        Some("tier in (api,web)"), // values in order, as Go writes a set
    );
    assert_eq!(lists(&fake, "/apis/batch/v1/namespaces/ai/jobs").len(), 2);
    assert_eq!(lists(&fake, "/api/v1/namespaces").len(), 2);
    // Discovery was read once per group: the resolution is kept.
    assert_eq!(fake.count("GET", "/apis/batch/v1"), 1);
    assert_eq!(fake.count("GET", "/api/v1"), 1);
    fake.assert_no_failures();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let fake = support::apiserver();
    for i in 0..1234 {
        let tier = if i % 2 == 0 { "web" } else { "db" };
        fake.add_object("v1", "services", "Service", Some("big"), &format!("svc-{i:04}"), &[("tier", tier)]);
    }
    let c = client(&fake, dir.path()).await;
    let small = ObjectNames::new(Arc::new(LabelStore::new()), c.clone(), TIMEOUT).tuned(100, Duration::ZERO);
    let all = small.select("services", Some("big"), &Selector::everything()).await.unwrap();
    assert_eq!(all.names.len(), 1234);
    assert_eq!((&*all.names[0], &*all.names[1233]), ("svc-0000", "svc-1233"));
    let pages = lists(&fake, "/api/v1/namespaces/big/services");
    assert_eq!(pages.len(), 13, "1,234 objects in pages of 100");
    assert_eq!(pages[0].param("continue"), None);
    for (i, p) in pages.iter().enumerate().skip(1) {
        assert_eq!(p.param("continue"), Some((i * 100).to_string()), "page {i} asked with the token of the one before");
        assert_eq!(p.param("limit").as_deref(), Some("100"));
    }
    assert_eq!(pages.iter().map(|p| p.listed).sum::<usize>(), 1234);
    // The selector goes with every page.
    fake.clear_requests();
    let web = small.select("services", Some("big"), &sel("tier=web")).await.unwrap();
    assert_eq!(web.names.len(), 617);
    let pages = lists(&fake, "/api/v1/namespaces/big/services");
    assert_eq!(pages.len(), 7);
    assert!(pages.iter().all(|p| p.param("labelSelector").as_deref() == Some("tier=web")));
    // The default page is client-go's 500.
    fake.clear_requests();
    let default = ObjectNames::new(Arc::new(LabelStore::new()), c, TIMEOUT);
    assert_eq!(default.select("services", Some("big"), &Selector::everything()).await.unwrap().names.len(), 1234);
    assert_eq!(lists(&fake, "/api/v1/namespaces/big/services").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_are_kept_two_seconds_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let fake = cluster();
    let objects = ObjectNames::new(Arc::new(LabelStore::new()), client(&fake, dir.path()).await, TIMEOUT);
    let path = "/api/v1/namespaces/ai/services";
    assert_eq!(objects.select("services", Some("ai"), &sel("tier=web")).await.unwrap().names.len(), 2);
    fake.add_object("v1", "services", "Service", Some("ai"), "web-3", &[("tier", "web")]);
    assert_eq!(objects.select("services", Some("ai"), &sel("tier=web")).await.unwrap().names.len(), 2, "kept");
    assert_eq!(lists(&fake, path).len(), 1);
    // Another selector is another list.
    assert_eq!(objects.select("services", Some("ai"), &sel("tier=db")).await.unwrap().names.len(), 1);
    assert_eq!(lists(&fake, path).len(), 2);
    tokio::time::sleep(gpu_metrics_adapter::objects::LIST_TTL + Duration::from_millis(100)).await;
    assert_eq!(objects.select("services", Some("ai"), &sel("tier=web")).await.unwrap().names.len(), 3);
    assert_eq!(lists(&fake, path).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_failures_of_the_api_server_are_errors_naming_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let fake = cluster();
    let objects = ObjectNames::new(Arc::new(LabelStore::new()), client(&fake, dir.path()).await, TIMEOUT)
        .tuned(list::PAGE, Duration::ZERO);
    let everything = Selector::everything();
    // Resolve first, so that the injected answers hit the list.
    objects.select("services", Some("ai"), &everything).await.unwrap();

    fake.fail_next("GET", "/api/v1/namespaces/ai/services", 403, 1);
    let e = objects.select("services", Some("ai"), &everything).await.unwrap_err();
    assert!(matches!(e, Error::Refused { .. }), "{e:?}");
    let text = e.to_string();
    for part in ["unable to list matching resources", "services in namespace ai", "403 Forbidden", "list on services"] {
        assert!(text.contains(part), "{part:?} not in {text}");
    }

    fake.fail_next("GET", "/api/v1/namespaces/ai/services", 500, 1);
    let e = objects.select("services", Some("ai"), &everything).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("services in namespace ai: the API server answered 500 InternalError"), "{e}");

    // A failure on a later page fails the whole list: no partial answer.
    let paged = ObjectNames::new(Arc::new(LabelStore::new()), client(&fake, dir.path()).await, TIMEOUT)
        .tuned(1, Duration::ZERO);
    assert_eq!(paged.select("namespaces", None, &everything).await.unwrap().names.len(), 3);
    fake.fail_next("GET", "/api/v1/namespaces", 503, 1);
    let e = paged.select("namespaces", None, &everything).await.unwrap_err();
    assert!(e.to_string().contains("namespaces: the API server answered 503"), "{e}");

    // A selector the API server refuses is the client's error.
    let e = objects.select("services", Some("ai"), &sel("replicas>2")).await.unwrap_err();
    assert!(matches!(e, Error::Selector { .. }), "{e:?}");
    assert!(e.to_string().contains("refused labelSelector \"replicas>2\""), "{e}");

    // An API server that does not answer in time.
    let closed = format!("127.0.0.1:{}", test_support::free_port());
    let mut config = kube::Config::new(format!("http://{closed}").parse().unwrap());
    config.default_retry = false;
    let down =
        ObjectNames::new(Arc::new(LabelStore::new()), kube::Client::try_from(config).unwrap(), Duration::from_secs(1));
    let e = down.select("services", Some("ai"), &everything).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("services in namespace ai"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_resource_is_an_error_until_discovery_lists_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = cluster();
    let objects = ObjectNames::new(Arc::new(LabelStore::new()), client(&fake, dir.path()).await, TIMEOUT);
    let everything = Selector::everything();
    let e = objects.select("widgets.example.com", Some("ai"), &everything).await.unwrap_err();
    assert!(matches!(e, Error::UnknownResource(_)), "{e:?}");
    assert!(e.to_string().contains("widgets.example.com: API discovery"), "{e}");
    assert!(e.to_string().contains("example.com"), "{e}");
    let e = objects.select("gadgets", Some("ai"), &everything).await.unwrap_err();
    assert!(matches!(e, Error::UnknownResource(_)), "{e:?}");
    assert!(e.to_string().contains("the core group lists no resource \"gadgets\""), "{e}");
    let e = objects.select("frobs.apps", Some("ai"), &everything).await.unwrap_err();
    assert!(e.to_string().contains("group \"apps\" lists no resource \"frobs\""), "{e}");
    // A namespaced resource asked for cluster-wide.
    let e = objects.select("services", None, &everything).await.unwrap_err();
    assert!(matches!(e, Error::Scope(_)), "{e:?}");

    // The CRD is installed: the next read asks discovery again and finds it.
    fake.add_api_group("example.com/v1", &[("widgets", "widget", "Widget", true)]);
    fake.add_object("example.com/v1", "widgets", "Widget", Some("ai"), "w-1", &[("size", "l")]);
    let s = objects.select("widgets.example.com", Some("ai"), &sel("size=l")).await.unwrap();
    assert_eq!(names(&s), ["w-1"]);
    assert_eq!(lists(&fake, "/apis/example.com/v1/namespaces/ai/widgets").len(), 1);
}

/// A stand-in Prometheus: its series list for the relist, and one sample per object
/// for any query, including objects that do not exist; the queries are kept.
#[derive(Clone)]
struct FakePrometheus {
    addr: SocketAddr,
    queries: Arc<Mutex<Vec<String>>>,
}

impl FakePrometheus {
    async fn start(objects: &[(&str, &str)]) -> Self {
        let series: Vec<Value> = objects
            .iter()
            .map(|(label, name)| json!({"__name__": "app_load", "namespace": "ai", *label: name}))
            .collect();
        let result: Vec<Value> = objects
            .iter()
            .enumerate()
            .map(|(i, (label, name))| json!({"metric": {*label: name}, "value": [1_700_000_000.0, format!("{}", i + 1)]}))
            .collect();
        let queries = Arc::new(Mutex::new(Vec::new()));
        let kept = queries.clone();
        let query = move |req: Request| {
            let kept = kept.clone();
            let result = result.clone();
            async move {
                let from_uri = req.uri().query().unwrap_or_default().to_owned();
                let body = axum::body::to_bytes(req.into_body(), 1 << 20).await.unwrap();
                let form = if body.is_empty() { from_uri.into_bytes() } else { body.to_vec() };
                if let Some((_, q)) = form_urlencoded::parse(&form).find(|(k, _)| k == "query") {
                    kept.lock().unwrap().push(q.into_owned());
                }
                json_answer(&json!({"status": "success", "data": {"resultType": "vector", "result": result}}))
            }
        };
        let series_answer = json!({"status": "success", "data": series});
        let app = Router::new().route("/api/v1/query", axum::routing::any(query)).route(
            "/api/v1/series",
            axum::routing::any(move || {
                let s = series_answer.clone();
                async move { json_answer(&s) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, queries }
    }

    fn last_query(&self) -> String {
        self.queries.lock().unwrap().last().cloned().unwrap_or_default()
    }
}

fn json_answer(v: &Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    ([("content-type", "application/json")], v.to_string()).into_response()
}

/// prometheus-adapter's template rule: every label naming a resource maps to it.
const TEMPLATE_RULE: &str = r#"
rules:
- seriesQuery: '{__name__="app_load",namespace!=""}'
  resources:
    template: "<<.Resource>>"
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"#;

/// The adapter with the Prometheus source over `prom` and `config`, listing from `fake`;
/// the in-test API server serves its authentication ConfigMap and allows everything.
async fn adapter(pki: &Pki, fake: &ApiServer, extra: &[String]) -> support::Running {
    fake.authentication_config_map(pki.auth_configmap());
    fake.set_policy(|_, _| (true, String::new()));
    let api = fake.serve().await;
    let mut flags = pki.serving_args();
    flags.push(format!("--kubeconfig={}", support::adapter_kubeconfig(api, pki.dir.path()).display()));
    flags.extend(extra.iter().cloned());
    support::start(&flags).await
}

fn prometheus_flags(pki: &Pki, prom: &FakePrometheus, config: &str) -> Vec<String> {
    let file = pki.write("config.yaml", config);
    vec![
        "--direct-source=false".into(),
        format!("--prometheus-url=http://{}", prom.addr),
        format!("--config={}", file.display()),
        "--metrics-relist-interval=1s".into(),
    ]
}

fn item_names(list: &Value) -> BTreeSet<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|i| i["describedObject"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn star_reads_answer_only_objects_the_api_server_lists() {
    let pki = Pki::new();
    let fake = cluster();
    fake.add_labelled_pod("ai", "p-1", &[("app", "web")]);
    fake.add_labelled_pod("ai", "p-2", &[("app", "batch")]);
    fake.add_object("v1", "services", "Service", Some("ai"), "gone", &[("tier", "web")]);
    // Prometheus has series of every object, and of a Service never created and a pod
    // deleted long ago.
    let prom = FakePrometheus::start(&[
        ("service", "web-1"),
        ("service", "web-2"),
        ("service", "db"),
        ("service", "gone"),
        ("service", "ghost"),
        ("deployment", "web"),
        ("deployment", "worker"),
        ("job", "nightly"),
        ("job", "adhoc"),
        ("pod", "p-1"),
        ("pod", "p-2"),
        ("pod", "p-deleted"),
    ])
    .await;
    let a = adapter(&pki, &fake, &prometheus_flags(&pki, &prom, TEMPLATE_RULE)).await;
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let client = tls_client(&pki, Some(&admin));
    let base = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai";
    let read = async |path: &str| {
        let r = get(&client, a.addr, &format!("{base}/{path}"), &[]).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        item_names(&r.json())
    };
    support::eventually("the pods are known", Duration::from_secs(10), async || {
        get(&client, a.addr, &format!("{base}/pods/%2A/app_load"), &[]).await.status == 200
    })
    .await;

    // Label selection on every kind the rule maps to, listed from the API server.
    assert_eq!(read("services/%2A/app_load?labelSelector=tier%3Dweb").await, set(&["gone", "web-1", "web-2"]));
    assert_eq!(read("deployments.apps/%2A/app_load?labelSelector=tier%3Dweb").await, set(&["web"]));
    assert_eq!(read("jobs.batch/%2A/app_load?labelSelector=schedule").await, set(&["nightly"]));
    assert_eq!(read("pods/%2A/app_load?labelSelector=app%3Dweb").await, set(&["p-1"]));
    // The query named the selected objects only.
    let q = prom.last_query();
    assert!(q.contains(r#"pod="p-1""#) && !q.contains("p-2"), "{q}");

    // `*` without a selector: what exists, never the ghost nor the deleted pod.
    assert_eq!(read("services/%2A/app_load").await, set(&["db", "gone", "web-1", "web-2"]));
    assert!(!prom.last_query().contains("ghost"), "{}", prom.last_query());
    assert_eq!(read("pods/%2A/app_load").await, set(&["p-1", "p-2"]));
    assert_eq!(read("jobs.batch/%2A/app_load").await, set(&["adhoc", "nightly"]));

    // A Service deleted: gone from `*` once the kept list expires.
    fake.delete_object("v1", "services", Some("ai"), "gone");
    tokio::time::sleep(gpu_metrics_adapter::objects::LIST_TTL + Duration::from_millis(100)).await;
    assert_eq!(read("services/%2A/app_load").await, set(&["db", "web-1", "web-2"]));
    assert_eq!(read("services/%2A/app_load?labelSelector=tier%3Dweb").await, set(&["web-1", "web-2"]));
    // A pod deleted: gone at once (the watch).
    fake.delete_pod("ai", "p-2");
    support::eventually("the deleted pod leaves", Duration::from_secs(5), async || {
        read("pods/%2A/app_load").await == set(&["p-1"])
    })
    .await;
    // A named read asks no API server, as prometheus-adapter's does not.
    assert_eq!(read("services/ghost/app_load").await, set(&["ghost"]));
    // Nothing of a namespace with no Services: 404 as prometheus-adapter answers, no query.
    let r =
        get(&client, a.addr, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/empty/services/%2A/app_load", &[]).await;
    assert_eq!(
        (r.status, r.json()["message"].as_str()),
        (404, Some("the server could not find the metric app_load for services: no services exist in namespace empty")),
        "{}",
        r.body
    );

    // Failures of the list: a 5xx naming what could not be listed, never an empty list.
    fake.fail_next("GET", "/api/v1/namespaces/ai/services", 403, 1);
    let r = get(&client, a.addr, &format!("{base}/services/%2A/app_load?labelSelector=tier%3Ddb"), &[]).await;
    assert_eq!((r.status, r.json()["reason"].as_str()), (500, Some("InternalError")), "{}", r.body);
    let m = r.json()["message"].as_str().unwrap().to_owned();
    assert!(m.contains("services in namespace ai") && m.contains("403"), "{m}");
    fake.fail_next("GET", "/apis/batch/v1/namespaces/ai/jobs", 500, 1);
    let r = get(&client, a.addr, &format!("{base}/jobs.batch/%2A/app_load?labelSelector=team"), &[]).await;
    assert_eq!((r.status, r.json()["reason"].as_str()), (503, Some("ServiceUnavailable")), "{}", r.body);
    assert!(r.json()["message"].as_str().unwrap().contains("jobs.batch in namespace ai"), "{}", r.body);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_for_a_resource_the_cluster_does_not_serve_answers_500() {
    let pki = Pki::new();
    let fake = cluster();
    let prom = FakePrometheus::start(&[("widget", "w-1")]).await;
    // The project's rules format takes kind and apiVersion on trust; the cluster has no
    // such resource.
    let rules = "rules:\n  - name: app_load\n    query: 'sum by (<<.GroupBy>>) (app_load{<<.LabelMatchers>>})'\n    resources:\n      widgets.example.com: { label: widget, kind: Widget, apiVersion: example.com/v1, namespaced: true }\n";
    let file = pki.write("rules.yaml", rules);
    let flags = [
        "--direct-source=false".to_owned(),
        format!("--prometheus-url=http://{}", prom.addr),
        format!("--prometheus-rules-file={}", file.display()),
    ];
    let a = adapter(&pki, &fake, &flags).await;
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let client = tls_client(&pki, Some(&admin));
    let path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai/widgets.example.com/%2A/app_load";
    let r = get(&client, a.addr, path, &[]).await;
    // prometheus-adapter answers 500 InternalError "unable to list matching resources"
    // (pkg/custom-provider/provider.go, GetMetricBySelector); here the message says why.
    assert_eq!((r.status, r.json()["reason"].as_str()), (500, Some("InternalError")), "{}", r.body);
    let m = r.json()["message"].as_str().unwrap().to_owned();
    assert!(m.starts_with("unable to list matching resources: widgets.example.com: API discovery"), "{m}");
    // A named read needs no list.
    let r =
        get(&client, a.addr, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai/widgets.example.com/w-1/app_load", &[])
            .await;
    assert_eq!(r.status, 200, "{}", r.body);
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_direct_source_answers_star_reads_for_pods_the_api_server_has() {
    let pki = Pki::new();
    let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
    let fake = support::apiserver();
    // The page has inference-pool-6b7c9-0 to -7; the API server has 0 to 6.
    for i in 0..7 {
        fake.add_labelled_pod("ai-inference", &format!("inference-pool-6b7c9-{i}"), &[("app", "inference")]);
    }
    fake.add_node(test_support::cluster::cpu_node("gpu-node-2"));
    let a = adapter(&pki, &fake, &[format!("--exporter-url={}", exporter.url()), "--scrape-interval=1s".into()]).await;
    let admin = pki.client_ca.client("admin", &["system:masters"]).unwrap();
    let client = tls_client(&pki, Some(&admin));
    let pods = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/%2A/gpu_utilization";
    let expected: BTreeSet<String> = (0..7).map(|i| format!("inference-pool-6b7c9-{i}")).collect();
    support::eventually("the pods the API server has", Duration::from_secs(10), async || {
        let r = get(&client, a.addr, pods, &[]).await;
        r.status == 200 && item_names(&r.json()) == expected
    })
    .await;
    // The pod only the page has still answers by name (documented in source::direct).
    let one = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ai-inference/pods/inference-pool-6b7c9-7/gpu_utilization";
    assert_eq!(get(&client, a.addr, one, &[]).await.status, 200);
    // Deleted from the API server while still on the page: out of `*` at once.
    fake.delete_pod("ai-inference", "inference-pool-6b7c9-6");
    let fewer: BTreeSet<String> = (0..6).map(|i| format!("inference-pool-6b7c9-{i}")).collect();
    support::eventually("the deleted pod leaves", Duration::from_secs(5), async || {
        item_names(&get(&client, a.addr, pods, &[]).await.json()) == fewer
    })
    .await;
    let r = get(&client, a.addr, "/apis/custom.metrics.k8s.io/v1beta2/nodes/%2A/gpu_utilization", &[]).await;
    assert_eq!(item_names(&r.json()), set(&["gpu-node-2"]), "{}", r.body);
    a.stop().await;
}
