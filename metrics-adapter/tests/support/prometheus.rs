//! A real Prometheus (Debian's `prometheus` binary) on loopback, scraping in-test
//! endpoints, for tests and the benchmark. Skips (returns None) only when the binary is
//! missing, saying so.

use std::net::SocketAddr;
use std::time::Duration;

pub struct Prometheus {
    pub addr: SocketAddr,
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

pub fn binary() -> Option<std::path::PathBuf> {
    let candidates = [std::env::var("PROMETHEUS_BIN").unwrap_or_default(), "/usr/bin/prometheus".into()];
    candidates.into_iter().filter(|c| !c.is_empty()).map(std::path::PathBuf::from).find(|p| p.exists())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (host:port, path /metrics) every `interval`.
    pub async fn start(targets: &[SocketAddr], interval: &str) -> Self {
        Self::start_on(free_port(), targets, interval).await
    }

    /// A free loopback port to start Prometheus on later.
    pub fn reserve_port() -> u16 {
        free_port()
    }

    /// Like [`Prometheus::start`], on a given loopback port.
    pub async fn start_on(port: u16, targets: &[SocketAddr], interval: &str) -> Self {
        let bin = binary().expect("prometheus binary (apt-get install -y prometheus)");
        let dir = tempfile::tempdir().unwrap();
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let cfg = format!(
            "global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\nscrape_configs:\n  - job_name: app\n    honor_labels: true\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        let cfg_path = dir.path().join("prometheus.yml");
        std::fs::write(&cfg_path, cfg).unwrap();
        let child = tokio::process::Command::new(bin)
            .arg(format!("--config.file={}", cfg_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let p = Self { addr, child, _dir: dir };
        p.wait_ready().await;
        p
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn wait_ready(&self) {
        for _ in 0..300 {
            if let Ok(mut s) = tokio::net::TcpStream::connect(self.addr).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let _ = s.write_all(b"GET /-/ready HTTP/1.0\r\n\r\n").await;
                let mut buf = Vec::new();
                let _ = s.read_to_end(&mut buf).await;
                if String::from_utf8_lossy(&buf).starts_with("HTTP/1.0 200") {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus did not become ready");
    }

    /// Runs an instant query; returns the JSON answer.
    pub async fn query(&self, promql: &str) -> serde_json::Value {
        let body = form_urlencoded::Serializer::new(String::new()).append_pair("query", promql).finish();
        let req = format!(
            "POST /api/v1/query HTTP/1.0\r\nHost: {}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{}",
            self.addr,
            body.len(),
            body
        );
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        s.write_all(req.as_bytes()).await.unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf);
        let json = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        serde_json::from_str(json).unwrap()
    }

    /// Waits until `promql` returns `n` series.
    pub async fn wait_for_series(&self, promql: &str, n: usize) {
        for _ in 0..300 {
            let v = self.query(promql).await;
            if v["data"]["result"].as_array().is_some_and(|r| r.len() == n) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus never returned {n} series for {promql}");
    }

    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
