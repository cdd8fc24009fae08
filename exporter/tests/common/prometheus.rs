//! A real Prometheus (Debian's `prometheus` package) on loopback, for tests.

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use super::http_get;

pub struct Prometheus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts Prometheus, scraping `target` every second if given.
pub fn start_prometheus(target: Option<&str>) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    let scrape = match target {
        Some(target) => {
            format!("scrape_configs:\n  - job_name: gpu\n    static_configs: [{{targets: ['{target}']}}]\n")
        }
        None => String::new(),
    };
    std::fs::write(&config, format!("global: {{scrape_interval: 1s, scrape_timeout: 900ms}}\n{scrape}")).unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
        .arg(format!("--web.listen-address={address}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus is installed (Debian package `prometheus`; .ci/run installs it)");
    Prometheus { child, address, _dir: dir }
}

/// Waits until Prometheus answers `/-/ready`.
pub fn wait_ready(prometheus: &Prometheus) {
    super::wait_for(std::time::Duration::from_secs(60), || {
        super::try_http_get(&prometheus.address, "/-/ready", &[]).is_ok_and(|r| r.status == 200)
    })
    .expect("prometheus became ready");
}

/// Runs an instant query and returns the HTTP status and body.
pub fn query_raw(prometheus: &Prometheus, promql: &str) -> (u16, String) {
    let response = http_get(&prometheus.address, &format!("/api/v1/query?query={}", encode(promql)), &[]);
    (response.status, response.body)
}

fn encode(promql: &str) -> String {
    promql
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }
        })
        .collect()
}

/// Runs an instant query and returns (labels JSON, value) of each result.
pub fn query(prometheus: &Prometheus, promql: &str) -> Vec<(serde_json::Value, f64)> {
    let (status, body) = query_raw(prometheus, promql);
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    json["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["metric"].clone(), r["value"][1].as_str().unwrap().parse().unwrap()))
        .collect()
}
