//! Basic auth, response headers and the rate limit through the web config, over real
//! sockets on 127.0.0.1 (plain HTTP, and basic auth over TLS).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

use gpu_exporter::web::ServeOptions;
use http::StatusCode;
use http::header::WWW_AUTHENTICATE;
use web_support::{Ca, ClientTls, Dir, basic, get, router, start, within};

/// A web config with two users; alice's hash is in the `$2y$` form htpasswd writes.
fn users_config(extra: &str) -> String {
    let alice = bcrypt::hash_with_result("alice-secret", 4).unwrap().format_for_version(bcrypt::Version::TwoY);
    let bob = bcrypt::hash("bob-secret", 4).unwrap();
    format!("basic_auth_users:\n  alice: '{alice}'\n  bob: '{bob}'\n{extra}")
}

#[tokio::test]
async fn basic_auth_lets_in_only_matching_credentials() {
    let dir = Dir::new();
    let config = dir.load(&dir.write("web.yml", &users_config("")));
    assert!(config.basic_auth_enabled() && !config.tls_enabled());
    let running = start(config, router(), ServeOptions::default()).await;
    let addr = running.addr;

    let ok =
        within(10, get(addr, None, "/metrics", &[("authorization", &basic("alice", "alice-secret"))])).await.unwrap();
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.body, "gpu_up 1\n");
    assert!(ok.headers.get(WWW_AUTHENTICATE).is_none());
    let ok = get(addr, None, "/metrics", &[("authorization", &basic("bob", "bob-secret"))]).await.unwrap();
    assert_eq!(ok.status, StatusCode::OK);

    let refused: [(&str, Vec<(&str, String)>); 7] = [
        ("wrong password", vec![("authorization", basic("alice", "bob-secret"))]),
        ("unknown user", vec![("authorization", basic("mallory", "alice-secret"))]),
        ("missing header", vec![]),
        ("not base64", vec![("authorization", "Basic !!!".to_owned())]),
        ("no colon", vec![("authorization", "Basic YWxpY2U=".to_owned())]),
        ("other scheme", vec![("authorization", "Bearer alice-secret".to_owned())]),
        ("empty password", vec![("authorization", basic("alice", ""))]),
    ];
    for (case, headers) in refused {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let reply = within(10, get(addr, None, "/metrics", &headers)).await.unwrap();
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{case}");
        let challenge = reply.headers.get(WWW_AUTHENTICATE).expect(case).to_str().unwrap();
        assert!(challenge.starts_with("Basic realm="), "{case}: {challenge}");
        assert!(!reply.body.contains("gpu_up"), "{case}: the router must not run");
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_cached_right_password_does_not_let_a_wrong_one_in() {
    let dir = Dir::new();
    let running = start(dir.load(&dir.write("web.yml", &users_config(""))), router(), ServeOptions::default()).await;
    let addr = running.addr;
    for _ in 0..3 {
        let reply = get(addr, None, "/metrics", &[("authorization", &basic("alice", "alice-secret"))]).await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
        for wrong in ["alice-secreT", "alice-secret ", "alice-secre", "bob-secret"] {
            let reply = get(addr, None, "/metrics", &[("authorization", &basic("alice", wrong))]).await.unwrap();
            assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{wrong:?} after a right password");
        }
        let reply = get(addr, None, "/metrics", &[("authorization", &basic("bob", "alice-secret"))]).await.unwrap();
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "alice's password does not open bob");
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn basic_auth_over_tls_with_http2() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let config = dir.load(&dir.tls_config(&ca.server(), "", &users_config("")));
    let running = start(config, router(), ServeOptions::default()).await;
    let tls = ClientTls::trusting(&ca);
    let reply = within(10, get(running.addr, Some(&tls), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.version, http::Version::HTTP_2);
    let reply =
        get(running.addr, Some(&tls), "/metrics", &[("authorization", &basic("bob", "bob-secret"))]).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn configured_headers_are_on_every_response_including_refusals() {
    let dir = Dir::new();
    let text = users_config(
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n    \
         Strict-Transport-Security: max-age=31536000\n",
    );
    let running = start(dir.load(&dir.write("web.yml", &text)), router(), ServeOptions::default()).await;
    let ok = within(10, get(running.addr, None, "/metrics", &[("authorization", &basic("bob", "bob-secret"))]))
        .await
        .unwrap();
    let refused = get(running.addr, None, "/metrics", &[]).await.unwrap();
    let not_found = get(running.addr, None, "/nope", &[("authorization", &basic("bob", "bob-secret"))]).await.unwrap();
    assert_eq!(
        (ok.status, refused.status, not_found.status),
        (StatusCode::OK, StatusCode::UNAUTHORIZED, StatusCode::NOT_FOUND)
    );
    for reply in [ok, refused, not_found] {
        assert_eq!(reply.headers["x-frame-options"], "deny", "{:?}", reply.status);
        assert_eq!(reply.headers["x-content-type-options"], "nosniff");
        assert_eq!(reply.headers["strict-transport-security"], "max-age=31536000");
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn rate_limit_answers_429_beyond_the_burst() {
    let dir = Dir::new();
    // One token per hour: after the burst nothing refills during the test.
    let config = dir.load(&dir.write("web.yml", "rate_limit:\n  burst: 3\n  interval: 1h\n"));
    let running = start(config, router(), ServeOptions::default()).await;
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(within(10, get(running.addr, None, "/metrics", &[])).await.unwrap().status);
    }
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS, StatusCode::TOO_MANY_REQUESTS]
    );
    running.stop().await.unwrap();
}
