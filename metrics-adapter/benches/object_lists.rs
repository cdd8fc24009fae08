//! Benchmark that prints figures (not a timed test): what naming the existing objects
//! costs a `*` read of a kind other than pods and nodes, before any metric is read
//! (`objects::ObjectNames::select`): the resource resolved through discovery (kept after
//! the first read), its objects listed from the API server metadata only in pages of 500,
//! with and without a label selector, at 1,000 and 10,000 Services in one namespace; the
//! same answered from a list kept for two seconds; the adapter's own part (parsing pages
//! of `PartialObjectMetadata` shaped as kube-apiserver writes them, names kept); and, for
//! comparison, selecting 10,000 pods from the watch-backed label store.
//!
//! The API server is test-support's in-test one on loopback, on the same cores, so the
//! list figures include its work (selecting and writing each page), printed apart (the
//! time it took to answer the pages of one read); a real API server serving from its
//! watch cache costs differently, and its metadata is larger (annotations, managed
//! fields), which is what the parsing figure uses.
//!
//! Run: `cargo bench -p gpu-metrics-adapter --bench object_lists`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/timing.rs"]
mod timing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_metrics_adapter::labels::LabelStore;
use gpu_metrics_adapter::objects::{LIST_TTL, ObjectNames, list};
use gpu_metrics_adapter::selector::Selector;
use serde_json::json;
use test_support::apiserver::{ADMIN_TOKEN, ApiServer, kubeconfig};
use timing::{Stats, measure, percentile};

const NS: &str = "bench";

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

/// An API server with `n` Services in [`NS`], one in ten labelled `tier=web`; a client
/// without retries, as the adapter's lister.
async fn cluster(n: usize, dir: &std::path::Path) -> (ApiServer, kube::Client) {
    let fake = ApiServer::new();
    fake.metadata_only();
    for i in 0..n {
        let tier = if i % 10 == 0 { "web" } else { "db" };
        let name = format!("svc-{i:05}");
        fake.add_object("v1", "services", "Service", Some(NS), &name, &[("tier", tier), ("app", "bench")]);
    }
    let addr = fake.serve().await;
    let path = kubeconfig(dir, addr, &[("bench", ADMIN_TOKEN, NS)]);
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await.unwrap();
    config.default_retry = false;
    (fake, kube::Client::try_from(config).unwrap())
}

async fn list_case(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (fake, client) = cluster(n, dir.path()).await;
    let uncached = ObjectNames::new(Arc::new(LabelStore::new()), client.clone(), Duration::from_secs(30))
        .tuned(list::PAGE, Duration::ZERO);
    let iters = if n <= 1000 { 200 } else { 30 };
    for (what, selector, want) in [
        ("every Service (`*`)", Selector::everything(), n),
        ("`tier=web` (one in ten)", Selector::parse("tier=web").unwrap(), n / 10),
    ] {
        fake.clear_requests();
        let Stats { p50, p99, .. } = measure(3, iters, async || {
            let s = uncached.select("services", Some(NS), &selector).await.unwrap();
            assert_eq!(s.names.len(), want);
        })
        .await;
        let lists: Vec<_> = fake.requests().into_iter().filter(|r| r.path.ends_with("/services")).collect();
        let reads = iters as u64 + 3;
        let bytes: u64 = lists.iter().map(|r| r.response_bytes).sum::<u64>() / reads;
        let server: Duration = lists.iter().map(|r| r.took).sum::<Duration>() / u32::try_from(reads).unwrap();
        let pages = lists.len() / (iters + 3);
        println!(
            "| {n} Services | list and select {what}, metadata only, {pages} page(s) of {} | {} | {} | {iters} | {} KiB | {} |",
            list::PAGE,
            ms(p50),
            ms(p99),
            bytes / 1024,
            ms(server)
        );
    }
    let kept = ObjectNames::new(Arc::new(LabelStore::new()), client, Duration::from_secs(30));
    let Stats { p50, p99, .. } = measure(3, 1000, async || {
        assert_eq!(kept.select("services", Some(NS), &Selector::everything()).await.unwrap().names.len(), n);
    })
    .await;
    println!(
        "| {n} Services | the same `*`, list kept ({} s) | {} | {} | 1000 | 0 | 0 |",
        LIST_TTL.as_secs(),
        ms(p50),
        ms(p99)
    );
}

/// A page of `PartialObjectMetadataList` as kube-apiserver writes it for Services
/// created with `kubectl apply` (labels, the last-applied annotation, managed fields).
fn realistic_page(first: usize, count: usize) -> String {
    let items: Vec<_> = (first..first + count)
        .map(|i| {
            let name = format!("svc-{i:05}");
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {
                "name": name, "namespace": NS, "uid": format!("3f0c9a1e-8d5b-4c6e-9a7f-{i:012}"),
                "resourceVersion": format!("{}", 1_000_000 + i), "creationTimestamp": "2026-12-01T10:00:00Z",
                "labels": {"app": "bench", "tier": "db", "app.kubernetes.io/managed-by": "kubectl"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": format!(
                    "{{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{{\"labels\":{{\"app\":\"bench\",\"tier\":\"db\"}},\"name\":\"{name}\",\"namespace\":\"{NS}\"}},\"spec\":{{\"ports\":[{{\"port\":80,\"targetPort\":8080}}],\"selector\":{{\"app\":\"bench\"}}}}}}\n")},
                "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-12-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
                        "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                                       "f:labels": {".": {}, "f:app": {}, "f:tier": {}}},
                        "f:spec": {"f:ports": {".": {}, "k:{\"port\":80,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {}}},
                                   "f:selector": {}, "f:sessionAffinity": {}, "f:type": {}}}}]
            }})
        })
        .collect();
    json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
           "metadata": {"resourceVersion": "2000000", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"}, "items": items})
    .to_string()
}

fn parse_case(n: usize) {
    let page = list::PAGE as usize;
    let bodies: Vec<String> = (0..n / page).map(|p| realistic_page(p * page, page)).collect();
    let bytes: usize = bodies.iter().map(String::len).sum();
    let mut samples = Vec::new();
    for round in 0..53 {
        let t = Instant::now();
        let mut names = 0;
        for b in &bodies {
            names += list::parse_page(b).unwrap().names.len();
        }
        assert_eq!(names, n);
        if round >= 3 {
            samples.push(t.elapsed());
        }
    }
    samples.sort();
    println!(
        "| {n} Services | parsing the {} pages alone (kube-apiserver's metadata, {} KiB), in-process | {} | {} | 50 | {} KiB | - |",
        n / page,
        bytes / 1024,
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.99)),
        bytes / 1024
    );
}

async fn store_case(n: usize) {
    let store = Arc::new(LabelStore::new());
    for i in 0..n {
        store.apply_pod(
            NS,
            &format!("pod-{i:05}"),
            &[("app", "bench"), ("tier", if i % 10 == 0 { "web" } else { "db" })],
        );
    }
    store.mark_synced();
    let names = ObjectNames::pods_and_nodes(store);
    let Stats { p50, p99, .. } = measure(10, 1000, async || {
        assert_eq!(names.select("pods", Some(NS), &Selector::everything()).await.unwrap().names.len(), n);
    })
    .await;
    println!(
        "| {n} pods | `*` from the watch-backed label store (for comparison) | {} | {} | 1000 | 0 | - |",
        ms(p50),
        ms(p99)
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        println!(
            "| size | what | p50 | p99 | samples | bytes listed per read | in-test API server's part per read (mean) |"
        );
        println!("|---|---|---|---|---|---|---|");
        list_case(1000).await;
        list_case(10_000).await;
        parse_case(10_000);
        store_case(10_000).await;
    });
}
