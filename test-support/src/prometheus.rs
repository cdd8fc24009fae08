//! The one launcher of a real Prometheus for the workspace's tests, and the one promtool
//! runner, in two flavours: Debian's Prometheus 2.42 (`apt-get install prometheus`, from
//! `PATH`) and a current Prometheus 3.x built from the module `cluster/prometheus/go.mod`
//! pins (`scripts/go-tools build prometheus`). The rules, the adapter's Prometheus source
//! and `kubectl gpu rightsize` are tested against both, because users run both and
//! Prometheus 3 changed behaviour they depend on (docs/design.md, "Prometheus 2 and 3").
//!
//! A [`Launch`] starts Prometheus on a free loopback port with a configuration (static
//! scrape jobs, or a whole `prometheus.yml`), rule files and optionally a prepared TSDB
//! (one `promtool tsdb create-blocks-from` backfilled), waits until it answers
//! `/-/ready` and kills it when the [`Prometheus`] is dropped, or when the test process
//! exits if it never is (a test that keeps it in a `static`, which Rust never drops). Its log is kept in the
//! temporary directory and shown when it does not become ready, so that a flag or config
//! one flavour refuses says why. [`Promtool`] runs the same flavour's promtool.
//!
//! Where the programs come from:
//! * [`Flavour::V2`]: `prometheus` and `promtool` on `PATH` (Debian's package installs
//!   them in /usr/bin; scripts/install-test-deps installs it);
//! * [`Flavour::V3`]: the directory `PROMETHEUS3_BIN_DIR` names (scripts/test builds the
//!   programs before `cargo test` and sets it, so no build runs inside a test's timeout),
//!   else the one `scripts/go-tools dir prometheus` prints, which builds them first when
//!   its cache lacks them (a machine without Go fails there, saying so).
//!
//! Each flavour's `--version` is checked once per test binary: a "2.42" that is a 3.x
//! (or the reverse) would make the two runs of a test one.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::simulated::Killed;

/// Which Prometheus a test runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// Debian's Prometheus 2.42, from `PATH`.
    V2,
    /// Prometheus 3.x, built from `cluster/prometheus/go.mod`.
    V3,
}

impl Flavour {
    /// Both, for tests that loop over them.
    pub const ALL: [Flavour; 2] = [Flavour::V2, Flavour::V3];

    /// The major version `--version` must report.
    fn major(self) -> &'static str {
        match self {
            Flavour::V2 => "2",
            Flavour::V3 => "3",
        }
    }

    /// The directory holding this flavour's `prometheus` and `promtool`; panics naming
    /// what is missing and how to get it.
    #[must_use]
    pub fn bin_dir(self) -> PathBuf {
        static V2: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        static V3: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let found = match self {
            Flavour::V2 => V2.get_or_init(|| debian_dir().and_then(|d| checked(self, d))),
            Flavour::V3 => V3.get_or_init(|| built_dir().and_then(|d| checked(self, d))),
        };
        found.clone().unwrap_or_else(|e| panic!("{e}"))
    }

    /// This flavour's `prometheus`.
    #[must_use]
    pub fn prometheus(self) -> PathBuf {
        self.bin_dir().join("prometheus")
    }

    /// This flavour's `promtool`.
    #[must_use]
    pub fn promtool(self) -> PathBuf {
        self.bin_dir().join("promtool")
    }

    /// The first line of `prometheus --version`, e.g. `prometheus, version 3.16.0 (...)`.
    #[must_use]
    pub fn version(self) -> String {
        version_line(&self.prometheus()).unwrap_or_else(|e| panic!("{e}"))
    }
}

impl std::fmt::Display for Flavour {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flavour::V2 => "Prometheus 2 (Debian's package)",
            Flavour::V3 => "Prometheus 3 (built from cluster/prometheus)",
        })
    }
}

fn debian_dir() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).find(|d| d.join("prometheus").is_file() && d.join("promtool").is_file()).ok_or_else(
        || {
            "these tests need Debian's Prometheus 2 (prometheus and promtool on PATH): \
             apt-get install -y prometheus (scripts/install-test-deps does)"
                .to_owned()
        },
    )
}

fn built_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("PROMETHEUS3_BIN_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    crate::go_tool_dir("prometheus").map_err(|e| {
        format!(
            "these tests need Prometheus 3 built from cluster/prometheus/go.mod (scripts/test builds it \
             first and sets PROMETHEUS3_BIN_DIR): {e}"
        )
    })
}

/// `dir` holds both programs, and its prometheus is of `flavour`'s major version.
fn checked(flavour: Flavour, dir: PathBuf) -> Result<PathBuf, String> {
    for program in ["prometheus", "promtool"] {
        let line = version_line(&dir.join(program))?;
        let wanted = format!("{program}, version {}.", flavour.major());
        if !line.starts_with(&wanted) {
            return Err(format!("{}: `{program} --version` says {line:?}, not {wanted}*", dir.display()));
        }
    }
    Ok(dir)
}

fn version_line(program: &Path) -> Result<String, String> {
    let out = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    // Prometheus 2 prints its version on stderr, 3 on stdout.
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    text.lines().next().map(str::to_owned).ok_or_else(|| format!("{}: --version said nothing", program.display()))
}

/// What to start: see the module docs.
#[derive(Clone, Debug)]
pub struct Launch {
    flavour: Flavour,
    interval: String,
    jobs: Vec<String>,
    config: Option<String>,
    rule_files: Vec<PathBuf>,
    tsdb: Option<PathBuf>,
    port: Option<u16>,
    host: Option<std::net::Ipv4Addr>,
    args: Vec<String>,
}

impl Launch {
    /// A Prometheus of `flavour` that scrapes and evaluates every second and has no job.
    #[must_use]
    pub fn new(flavour: Flavour) -> Self {
        Self {
            flavour,
            interval: "1s".into(),
            jobs: Vec::new(),
            config: None,
            rule_files: Vec::new(),
            tsdb: None,
            port: None,
            host: None,
            args: Vec::new(),
        }
    }

    /// The global scrape and evaluation interval (default `1s`).
    #[must_use]
    pub fn interval(mut self, interval: &str) -> Self {
        interval.clone_into(&mut self.interval);
        self
    }

    /// A static scrape job over `targets` (`host:port`, path `/metrics`).
    #[must_use]
    pub fn scrape(self, job: &str, targets: &[impl ToString]) -> Self {
        self.job(job, targets, false)
    }

    /// Like [`Launch::scrape`], keeping the targets' own labels where they clash with the
    /// target's (an application that reports its own `namespace` and `pod`).
    #[must_use]
    pub fn scrape_honoring_labels(self, job: &str, targets: &[impl ToString]) -> Self {
        self.job(job, targets, true)
    }

    fn job(mut self, job: &str, targets: &[impl ToString], honor_labels: bool) -> Self {
        let targets: Vec<String> = targets.iter().map(|t| format!("'{}'", t.to_string())).collect();
        self.jobs.push(format!(
            "  - job_name: {job}\n    honor_labels: {honor_labels}\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ));
        self
    }

    /// A whole `prometheus.yml` instead of the interval and jobs above (rule files are
    /// still added to it).
    #[must_use]
    pub fn config(mut self, yaml: &str) -> Self {
        self.config = Some(yaml.to_owned());
        self
    }

    /// A rule file to load and evaluate.
    #[must_use]
    pub fn rule_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.rule_files.push(path.into());
        self
    }

    /// A prepared TSDB directory (say, backfilled with [`Promtool`]) instead of an empty
    /// one.
    #[must_use]
    pub fn tsdb(mut self, dir: impl Into<PathBuf>) -> Self {
        self.tsdb = Some(dir.into());
        self
    }

    /// The loopback port to listen on, instead of a free one.
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// The address to listen on instead of 127.0.0.1: a pod IP (a
    /// [`crate::netns::HostAddress`]) for a Prometheus that a real API server's services
    /// proxy reaches through its Service.
    #[must_use]
    pub fn host(mut self, host: std::net::Ipv4Addr) -> Self {
        self.host = Some(host);
        self
    }

    /// One more command-line flag.
    #[must_use]
    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    fn config_text(&self) -> String {
        let mut yaml = self.config.clone().unwrap_or_else(|| {
            let mut yaml = format!("global:\n  scrape_interval: {0}\n  evaluation_interval: {0}\n", self.interval);
            if !self.jobs.is_empty() {
                yaml.push_str("scrape_configs:\n");
                yaml.extend(self.jobs.iter().cloned());
            }
            yaml
        });
        if !self.rule_files.is_empty() {
            yaml.push_str("\nrule_files:\n");
            for file in &self.rule_files {
                yaml.push_str(&format!("  - '{}'\n", file.display()));
            }
        }
        yaml
    }

    /// Starts it and waits (60 s at most) until it is ready.
    #[must_use]
    pub fn start(self) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, self.config_text()).unwrap();
        let tsdb = self.tsdb.clone().unwrap_or_else(|| dir.path().join("data"));
        let host = self.host.unwrap_or(std::net::Ipv4Addr::LOCALHOST);
        let addr = SocketAddr::from((host, self.port.unwrap_or_else(crate::free_port)));
        let log = dir.path().join("prometheus.log");
        let log_file = std::fs::File::create(&log).unwrap();
        let program = self.flavour.prometheus();
        let child = Command::new(&program)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address={addr}"))
            .args(&self.args)
            // The UI's assets are not in the 3.x build (docs/design.md): the API is all
            // the tests use. Logs go to a file that a failed start shows.
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let mut prometheus = Prometheus { flavour: self.flavour, addr, child: Killed::new(child), log, _dir: dir };
        prometheus.wait_ready();
        prometheus
    }

    /// [`Launch::start`] from async code, off the runtime's worker threads.
    pub async fn start_async(self) -> Prometheus {
        tokio::task::spawn_blocking(move || self.start()).await.unwrap()
    }
}

/// A running Prometheus; killed when dropped or at the test process' exit.
pub struct Prometheus {
    flavour: Flavour,
    addr: SocketAddr,
    child: Killed,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Which one this is.
    #[must_use]
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// Its loopback address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://` and its address.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it has logged so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.0.try_wait() {
                panic!("{} exited at start ({status}):\n{}", self.flavour, self.log());
            }
            if request(self.addr, "GET", "/-/ready", "").is_ok_and(|(status, _)| status == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "{} was not ready in 60 s:\n{}", self.flavour, self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A GET of `path` (with its query string): the status and the body.
    #[must_use]
    pub fn get(&self, path: &str) -> (u16, String) {
        request(self.addr, "GET", path, "").unwrap_or_else(|e| panic!("{}: GET {path}: {e}", self.flavour))
    }

    /// An instant query, as the API's form POST: the status and the body.
    #[must_use]
    pub fn query_raw(&self, promql: &str) -> (u16, String) {
        query_at(self.addr, promql).unwrap_or_else(|e| panic!("{}: query {promql}: {e}", self.flavour))
    }

    /// An instant query's JSON answer, whatever its status.
    #[must_use]
    pub fn query(&self, promql: &str) -> Value {
        let (_, body) = self.query_raw(promql);
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{}: query {promql}: {e}: {body}", self.flavour))
    }

    /// An instant query that must succeed: each result's labels and value.
    #[must_use]
    pub fn vector(&self, promql: &str) -> Vec<(Value, f64)> {
        let (status, body) = self.query_raw(promql);
        assert_eq!(status, 200, "{}: {promql}: {body}", self.flavour);
        let json: Value = serde_json::from_str(&body).unwrap();
        json["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: {promql}: not a vector: {body}", self.flavour))
            .iter()
            .map(|r| (r["metric"].clone(), r["value"][1].as_str().unwrap().parse().unwrap()))
            .collect()
    }

    /// Waits (30 s at most) until `promql` returns `n` series.
    pub fn wait_for_series(&self, promql: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self.query(promql);
            if answer["data"]["result"].as_array().is_some_and(|r| r.len() == n) {
                return;
            }
            assert!(Instant::now() < deadline, "{} never returned {n} series for {promql}: {answer}", self.flavour);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// [`Prometheus::query`] from async code, off the runtime's worker threads (a test's
    /// in-process targets are served by those).
    pub async fn query_async(&self, promql: &str) -> Value {
        let (addr, flavour, promql) = (self.addr, self.flavour, promql.to_owned());
        tokio::task::spawn_blocking(move || {
            let (_, body) = query_at(addr, &promql).unwrap_or_else(|e| panic!("{flavour}: query {promql}: {e}"));
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{flavour}: query {promql}: {e}: {body}"))
        })
        .await
        .unwrap()
    }

    /// [`Prometheus::wait_for_series`] from async code.
    pub async fn wait_for_series_async(&self, promql: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self.query_async(promql).await;
            if answer["data"]["result"].as_array().is_some_and(|r| r.len() == n) {
                return;
            }
            assert!(Instant::now() < deadline, "{} never returned {n} series for {promql}: {answer}", self.flavour);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn query_at(addr: SocketAddr, promql: &str) -> std::io::Result<(u16, String)> {
    request(addr, "POST", "/api/v1/query", &format!("query={}", percent_encode(promql)))
}

/// `application/x-www-form-urlencoded` for one value: everything but unreserved bytes
/// escaped.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One HTTP/1.0 request (the server closes the connection after the answer).
fn request(addr: SocketAddr, method: &str, path: &str, form: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut head = format!("{method} {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            form.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(form.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {head:?}")))?;
    Ok((status, body.to_owned()))
}

/// One promtool run of a flavour: arguments, a working directory, standard input.
pub struct Promtool {
    flavour: Flavour,
    command: Command,
    stdin: Option<Vec<u8>>,
    shown: String,
}

/// What a promtool run gave.
#[derive(Debug)]
pub struct PromtoolRun {
    /// Whether it exited 0.
    pub success: bool,
    /// Its standard output, then its standard error.
    pub report: String,
}

impl Promtool {
    /// promtool of `flavour`, with no arguments yet.
    #[must_use]
    pub fn new(flavour: Flavour) -> Self {
        let mut command = Command::new(flavour.promtool());
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        Self { flavour, command, stdin: None, shown: String::from("promtool") }
    }

    /// One more argument.
    #[must_use]
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.shown.push(' ');
        self.shown.push_str(&arg.as_ref().to_string_lossy());
        self.command.arg(arg);
        self
    }

    /// More arguments.
    #[must_use]
    pub fn args<S: AsRef<OsStr>>(self, args: impl IntoIterator<Item = S>) -> Self {
        args.into_iter().fold(self, Self::arg)
    }

    /// Where it runs (test files name their rule files relative to it).
    #[must_use]
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.command.current_dir(dir);
        self
    }

    /// What it reads on standard input.
    #[must_use]
    pub fn stdin(mut self, input: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(input.into());
        self
    }

    /// Runs it to the end.
    #[must_use]
    pub fn run(mut self) -> PromtoolRun {
        self.command.stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = self.command.spawn().unwrap_or_else(|e| panic!("{}: {}: {e}", self.flavour, self.shown));
        if let Some(input) = self.stdin.take() {
            child.stdin.take().unwrap().write_all(&input).unwrap();
        }
        let out = child.wait_with_output().unwrap();
        PromtoolRun {
            success: out.status.success(),
            report: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        }
    }

    /// Runs it and panics with what it said unless it succeeded; returns what it said.
    pub fn check(self) -> String {
        let (flavour, shown) = (self.flavour, self.shown.clone());
        let run = self.run();
        assert!(run.success, "{flavour}: `{shown}` failed:\n{}", run.report);
        run.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_form_encoded_whole() {
        assert_eq!(percent_encode("up{job=\"a b\"}[5m] + 1"), "up%7Bjob%3D%22a%20b%22%7D%5B5m%5D%20%2B%201");
    }

    #[test]
    fn rule_files_are_added_to_the_generated_and_a_given_config() {
        let generated = Launch::new(Flavour::V2)
            .interval("15s")
            .scrape_honoring_labels("app", &["127.0.0.1:1"])
            .rule_file("/r.yaml")
            .config_text();
        assert_eq!(
            generated,
            "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\nscrape_configs:\n  - job_name: app\n    \
             honor_labels: true\n    static_configs:\n      - targets: ['127.0.0.1:1']\n\nrule_files:\n  - '/r.yaml'\n"
        );
        let given = Launch::new(Flavour::V3).config("global: {}\n").rule_file("/r.yaml").config_text();
        assert_eq!(given, "global: {}\n\nrule_files:\n  - '/r.yaml'\n");
    }
}
