//! The names of a resource's objects, listed from the API server as prometheus-adapter
//! lists them (custom-metrics-apiserver v1.30.0, `pkg/provider/helpers/helpers.go`,
//! `ListObjectNames`: the request's label selector sent to the API server, the items'
//! names kept), but:
//!
//! * metadata only: `Accept: application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json`
//!   (a server that cannot answer metadata answers whole objects as JSON, read the same
//!   way), and of each item only `metadata.name` is kept; labels, annotations and
//!   managed fields are skipped while parsing;
//! * in pages of [`PAGE`] (`limit`, following `continue`), as client-go's pager does, so
//!   that neither the API server nor the adapter builds one answer of every object. A
//!   continue token that expired (410) restarts the list once from the first page: the
//!   names of two snapshots are not mixed.
//!
//! [`pages`] is the pager over any page source, [`names`] the edge that asks the API
//! server through kube's client.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;

/// Objects per page (client-go's pager default).
pub const PAGE: u32 = 500;

/// What a list asks to be answered with.
pub const ACCEPT: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";

/// Why a list failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The API server answered with an error `Status`.
    Status {
        /// HTTP code.
        code: u16,
        /// `reason` (`Forbidden`).
        reason: String,
        /// `message`.
        message: String,
    },
    /// No usable answer (connection, timeout, a body that is not a list).
    Transport(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Status { code, reason, message } => {
                write!(f, "the API server answered {code} {reason}: {message}")
            }
            Failure::Transport(why) => f.write_str(why),
        }
    }
}

/// One page: its names and the token of the next page, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    /// Names on this page.
    pub names: Vec<Arc<str>>,
    /// `metadata.continue`.
    pub next: Option<String>,
}

/// Every name `fetch` pages through, first page (`None`) to the last one (no `continue`).
pub async fn pages<F, Fut>(mut fetch: F) -> Result<Vec<Arc<str>>, Failure>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page, Failure>>,
{
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    let mut restarted = false;
    loop {
        let asked = token.clone();
        match fetch(token.take()).await {
            Ok(page) => {
                names.extend(page.names);
                match page.next.filter(|t| !t.is_empty()) {
                    Some(t) if asked.as_ref() == Some(&t) => {
                        return Err(Failure::Transport(format!("the API server gave continue token {t:?} twice")));
                    }
                    Some(t) => token = Some(t),
                    None => return Ok(names),
                }
            }
            Err(Failure::Status { code: 410, .. }) if asked.is_some() && !restarted => {
                restarted = true;
                names.clear();
            }
            Err(e) => return Err(e),
        }
    }
}

#[derive(Deserialize)]
struct ListBody<'a> {
    #[serde(default, borrow)]
    metadata: ListMeta<'a>,
    #[serde(default, borrow)]
    items: Option<Vec<Item<'a>>>,
}

#[derive(Deserialize, Default)]
struct ListMeta<'a> {
    #[serde(default, borrow, rename = "continue")]
    next: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow)]
    metadata: ItemMeta<'a>,
}

#[derive(Deserialize)]
struct ItemMeta<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
}

/// Reads one page of a list (`PartialObjectMetadataList` or a whole-object list).
pub fn parse_page(body: &str) -> Result<Page, Failure> {
    let list: ListBody<'_> =
        serde_json::from_str(body).map_err(|e| Failure::Transport(format!("the answer is not a list: {e}")))?;
    let items = list.items.unwrap_or_default();
    let mut names = Vec::with_capacity(items.len());
    names.extend(items.iter().map(|i| Arc::from(&*i.metadata.name)));
    Ok(Page { names, next: list.metadata.next.map(Cow::into_owned) })
}

fn encoded(v: &str) -> String {
    form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// The request for one page of `collection`.
pub fn page_request(
    collection: &str,
    selector: &str,
    limit: u32,
    token: Option<&str>,
) -> Result<http::Request<Vec<u8>>, Failure> {
    let mut uri = format!("{collection}?limit={limit}");
    if !selector.is_empty() {
        uri.push_str("&labelSelector=");
        uri.push_str(&encoded(selector));
    }
    if let Some(t) = token {
        uri.push_str("&continue=");
        uri.push_str(&encoded(t));
    }
    http::Request::get(uri)
        .header(http::header::ACCEPT, ACCEPT)
        .body(Vec::new())
        .map_err(|e| Failure::Transport(format!("building the list request: {e}")))
}

/// Every name in `collection` (a path from [`super::resolve::Resolved::collection`])
/// that `selector` (the Kubernetes string form; empty for all) picks.
pub async fn names(
    client: &kube::Client,
    collection: &str,
    selector: &str,
    limit: u32,
) -> Result<Vec<Arc<str>>, Failure> {
    pages(|token| async move {
        let req = page_request(collection, selector, limit, token.as_deref())?;
        let text = client.request_text(req).await.map_err(|e| match e {
            kube::Error::Api(s) => Failure::Status { code: s.code, reason: s.reason, message: s.message },
            other => Failure::Transport(other.to_string()),
        })?;
        parse_page(&text)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    fn page(names: &[&str], next: Option<&str>) -> Page {
        Page { names: names.iter().map(|n| Arc::from(*n)).collect(), next: next.map(str::to_owned) }
    }

    fn status(code: u16) -> Failure {
        Failure::Status { code, reason: "x".into(), message: "y".into() }
    }

    /// A page source answering `answers` in order, recording the tokens asked with.
    async fn run(answers: Vec<Result<Page, Failure>>) -> (Result<Vec<Arc<str>>, Failure>, Vec<Option<String>>) {
        let answers = Mutex::new(VecDeque::from(answers));
        let asked = Mutex::new(Vec::new());
        let got = pages(|t| {
            asked.lock().unwrap().push(t);
            let next = answers.lock().unwrap().pop_front().unwrap_or(Err(status(599)));
            async move { next }
        })
        .await;
        (got, asked.into_inner().unwrap())
    }

    fn shown(names: &[Arc<str>]) -> Vec<&str> {
        names.iter().map(|n| &**n).collect()
    }

    #[tokio::test]
    async fn pages_are_followed_to_the_last() {
        let (got, asked) =
            run(vec![Ok(page(&["a", "b"], Some("t1"))), Ok(page(&["c"], Some("t2"))), Ok(page(&[], None))]).await;
        assert_eq!(shown(&got.unwrap()), ["a", "b", "c"]);
        assert_eq!(asked, [None, Some("t1".into()), Some("t2".into())]);
        // an empty token ends the list as no token does
        let (got, _) = run(vec![Ok(page(&["a"], Some("")))]).await;
        assert_eq!(shown(&got.unwrap()), ["a"]);
    }

    #[tokio::test]
    async fn an_expired_token_restarts_once_then_fails() {
        let (got, asked) = run(vec![
            Ok(page(&["a"], Some("t1"))),
            Err(status(410)),
            Ok(page(&["a"], Some("t9"))),
            Ok(page(&["b"], None)),
        ])
        .await;
        assert_eq!(shown(&got.unwrap()), ["a", "b"], "no name twice");
        assert_eq!(asked, [None, Some("t1".into()), None, Some("t9".into())]);
        let (got, _) =
            run(vec![Ok(page(&["a"], Some("t1"))), Err(status(410)), Ok(page(&["a"], Some("t2"))), Err(status(410))])
                .await;
        assert_eq!(got.unwrap_err(), status(410));
        // a 410 on the first page is the server's answer, not an expired token
        let (got, asked) = run(vec![Err(status(410))]).await;
        assert_eq!((got.unwrap_err(), asked.len()), (status(410), 1));
    }

    #[tokio::test]
    async fn errors_stop_the_list_and_a_repeated_token_is_refused() {
        let (got, _) = run(vec![Ok(page(&["a"], Some("t1"))), Err(status(500))]).await;
        assert_eq!(got.unwrap_err(), status(500));
        let (got, _) = run(vec![Ok(page(&["a"], Some("t1"))), Ok(page(&["b"], Some("t1")))]).await;
        assert!(matches!(got.unwrap_err(), Failure::Transport(m) if m.contains("twice")));
    }

    #[test]
    fn only_names_and_the_token_are_read() {
        let body = r#"{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1",
            "metadata":{"resourceVersion":"9","continue":"abc"},
            "items":[{"kind":"PartialObjectMetadata","metadata":{"name":"web-1","namespace":"ai",
                "labels":{"tier":"web"},"annotations":{"a":"b"},"managedFields":[{"manager":"kubectl"}]}},
                     {"metadata":{"name":"w\u0065b-2"}}]}"#;
        let p = parse_page(body).unwrap();
        assert_eq!(shown(&p.names), ["web-1", "web-2"]);
        assert_eq!(p.next.as_deref(), Some("abc"));
        // whole objects, and a last page with `items: null`
        let p = parse_page(r#"{"kind":"ServiceList","metadata":{},"items":[{"metadata":{"name":"s"},"spec":{}}]}"#)
            .unwrap();
        assert_eq!((shown(&p.names), p.next), (vec!["s"], None));
        assert_eq!(parse_page(r#"{"metadata":{},"items":null}"#).unwrap(), Page::default());
        assert!(matches!(parse_page("<html>"), Err(Failure::Transport(_))));
        assert!(matches!(parse_page(r#"{"items":[{"metadata":{}}]}"#), Err(Failure::Transport(_))));
    }

    #[test]
    fn a_page_request_asks_for_metadata_with_the_selector_and_token() {
        let r =
            page_request("/api/v1/namespaces/ai/services", "tier in (web,api),!canary", 500, Some("a+b/c=")).unwrap();
        assert_eq!(
            r.uri().to_string(),
            "/api/v1/namespaces/ai/services?limit=500&labelSelector=tier+in+%28web%2Capi%29%2C%21canary&continue=a%2Bb%2Fc%3D"
        );
        assert_eq!(r.headers()[http::header::ACCEPT], ACCEPT);
        assert_eq!(
            page_request("/api/v1/namespaces", "", 7, None).unwrap().uri().to_string(),
            "/api/v1/namespaces?limit=7"
        );
    }
}
