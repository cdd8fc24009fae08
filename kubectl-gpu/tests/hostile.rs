//! Hostile exporters and Node objects, against the in-test API server: whoever runs an
//! exporter or may patch `nodes/status` chooses the text `kubectl gpu` shows, and the
//! size of the pages it reads.
//!
//! - **Terminal:** escape sequences (CSI, OSC titles, OSC-8 hyperlinks), BEL, CR, LF
//!   (raw in Node fields and error answers, as an escaped `\n` in a label value, which
//!   the parser turns into a real newline), TAB, C1, DEL and very long strings in every
//!   field shown come out escaped, in tables, `-o wide`, warnings and `--watch` on a
//!   terminal; the rows stay aligned and no row is forged; `-o json` keeps the values.
//! - **Bounded reads:** a page larger than the limit, one with more samples than the
//!   limit, one with too many kept GPU series and one that never ends each make their
//!   node unknown with a warning naming the node and the limit, and the command ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use test_support::apiserver::{self, ADMIN_TOKEN, ApiServer, Backend};
use test_support::cluster::{self, EXPORTER_NAMESPACE};

/// A value that would clear the screen, retitle the window, plant a hyperlink, overwrite
/// the line, forge a row and switch on red (C1 CSI), followed by `tail`.
fn hostile(tail: &str) -> String {
    format!(
        "\x1b[2J\x1b[H\x1b]0;pwned-title\x07\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\A100\rSPOOFED\nFAKE-ROW gpu-node-9 8x H100\t\u{9b}31m\x7f\x01{tail}{}",
        "x".repeat(2000)
    )
}

/// `v` as a Prometheus label value: `\`, `"` and LF escaped; everything else raw.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn evil_page() -> String {
    let h = |tail: &str| label(&hostile(tail));
    let pod = format!("namespace=\"{}\",pod=\"{}\",container=\"{}\"", h("ns"), h("pod"), h("container"));
    [
        format!("gpu_info{{gpu=\"0\",uuid=\"{}\",model=\"{}\"}} 1", h("uuid"), h("model")),
        "gpu_up{gpu=\"0\"} 1".into(),
        "gpu_utilization{gpu=\"0\"} 50".into(),
        "gpu_memory_used_bytes{gpu=\"0\"} 1e10".into(),
        "gpu_memory_total_bytes{gpu=\"0\"} 8e10".into(),
        format!("gpu_clock_event_active{{gpu=\"0\",reason=\"{}\"}} 1", h("throttle")),
        format!("gpu_device_pod_info{{gpu=\"0\",{pod}}} 1"),
        format!("gpu_pod_memory_used_bytes{{gpu=\"0\",{pod}}} 1e9"),
        "gpu_info{gpu=\"1\",uuid=\"GPU-1\",model=\"NVIDIA A100-SXM4-80GB\"} 1".into(),
        "gpu_mig_enabled{gpu=\"1\"} 1".into(),
        format!(
            "gpu_mig_instance_info{{gpu=\"1\",mig_profile=\"{}\",gpu_instance_id=\"1\",compute_instance_id=\"0\",mig_uuid=\"{}\"}} 1",
            h("profile"),
            h("mig-uuid")
        ),
        "gpu_health_node_healthy 0".into(),
        format!("gpu_health_node_reason_info{{reason=\"{}\"}} 1", h("reason")),
        String::new(),
    ]
    .join("\n")
}

fn nvml_down_page() -> String {
    format!("gpu_exporter_nvml_up 0\ngpu_exporter_nvml_error_info{{message=\"{}\"}} 1\n", label(&hostile("nvml")))
}

/// An exporter that answers 500 with a hostile body (the API server passes it on).
fn failing_exporter() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = hostile("error");
            let head = format!(
                "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(head.as_bytes());
            let _ = s.write_all(body.as_bytes());
        }
    });
    addr
}

struct Fixture {
    api: ApiServer,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new(backends: Vec<(&str, Backend)>) -> Fixture {
        let api = ApiServer::new();
        for (i, (name, backend)) in backends.into_iter().enumerate() {
            let mut node = cluster::gpu_node(name, "NVIDIA-A100-SXM4-80GB", 2, &[("nvidia.com/gpu", 2)]);
            if name == "evil-node-1" {
                cluster::set_gpu_healthy(&mut node, "False", &hostile("condition"), &hostile("message"));
            }
            api.add_node(node);
            api.add_pod(cluster::exporter_pod(name, &format!("10.0.{i}.5")));
            api.proxy(EXPORTER_NAMESPACE, &format!("gpu-exporter-{name}"), backend);
        }
        let addr = api.start();
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = apiserver::kubeconfig(dir.path(), addr, &[("admin", ADMIN_TOKEN, "default")]);
        Fixture { api, kubeconfig, _dir: dir }
    }

    fn hostile_text() -> Fixture {
        Fixture::new(vec![
            ("evil-node-1", Backend::page(evil_page())),
            ("evil-nvml", Backend::page(nvml_down_page())),
            ("evil-error", Backend::Http(failing_exporter())),
        ])
    }

    fn run(&self, args: &[&str]) -> (String, String, i32) {
        let out = common::command(&self.kubeconfig).args(args).output().unwrap();
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (text(out.stdout), text(out.stderr), out.status.code().unwrap_or(-1))
    }
}

/// A character a terminal may act on, other than the line breaks the plugin writes.
fn raw_control(text: &str) -> Option<(usize, char)> {
    text.char_indices().find(|(_, c)| *c != '\n' && (c.is_control()))
}

/// Each column named in `left` starts at the header's offset in every row.
fn assert_aligned(table: &str, left: &[&str]) {
    let lines: Vec<Vec<char>> = table.lines().map(|l| l.chars().collect()).collect();
    let header: String = lines[0].iter().collect();
    for name in left {
        let at = header.find(&format!("   {name}")).unwrap_or_else(|| panic!("no column {name}: {header}")) + 3;
        let at = header[..at].chars().count();
        for row in &lines[1..] {
            let row_text: String = row.iter().collect();
            assert!(
                row.len() > at && row[at] != ' ' && row[at - 3..at].iter().all(|c| *c == ' '),
                "{name} misaligned at {at}:\n{table}\n{row_text}"
            );
        }
    }
}

#[test]
fn hostile_labels_node_fields_and_errors_are_shown_escaped_and_rows_stay_aligned() {
    let f = Fixture::hostile_text();
    let runs: &[(&[&str], &[&str], usize)] = &[
        (&["nodes"], &["GPUS", "MIG", "HEALTH"], 3),
        (&["nodes", "-o", "wide"], &["GPUS", "MIG", "HEALTH", "EXPORTER", "READY"], 3),
        (&["gpus"], &["GPU", "DEVICE", "POD"], 5),
        (&["gpus", "evil-node-1", "-o", "wide"], &["GPU", "DEVICE", "THROTTLE", "POD", "UUID"], 3),
        (&["pods", "-A", "-o", "wide"], &["POD", "NODE", "DEVICE", "CONTAINERS", "MODEL"], 1),
    ];
    for (args, columns, rows) in runs {
        let (stdout, stderr, code) = f.run(args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
            assert_eq!(raw_control(text), None, "{args:?} {what} has a raw control character:\n{text:?}");
            assert!(!text.lines().any(|l| l.starts_with("FAKE-ROW")), "{args:?}: a forged row:\n{text}");
        }
        assert!(stdout.contains("^[]0;pwned-title^G^[]8;;http://evil.example/^[\\click^[]8;;^[\\A100\\rSPOOFED\\nFAKE-ROW gpu-node-9 8x H100\\t\\u{9b}31m^?^A"), "{args:?}: shown escaped:\n{stdout}");
        assert_eq!(stdout.lines().count(), 1 + rows, "{args:?}: one line per row:\n{stdout}");
        assert_aligned(&stdout, columns);
    }
    let (stdout, stderr, _) = f.run(&["nodes"]);
    assert!(stdout.contains("Unhealthy(^[[2J^[[H^[]0;pwned-title^G"), "the Node's GPUHealthy reason: {stdout}");
    assert!(
        stderr.contains("Warning: node evil-nvml: exporter NVML down (^[[2J^[[H^[]0;pwned-title^G"),
        "NVML error text: {stderr}"
    );
    assert!(
        stderr.contains("Warning: node evil-error: exporter unreachable (Error from server (500): ^[[2J^[[H"),
        "API error text: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 2, "one line per warning: {stderr}");
    // JSON carries the values unchanged (its encoder quotes control characters).
    let (json, _, _) = f.run(&["nodes", "-o", "json"]);
    assert!(!json.contains('\x1b') && !json.contains('\r'), "{json:?}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let evil = doc["items"].as_array().unwrap().iter().find(|i| i["name"] == "evil-node-1").unwrap();
    assert_eq!(evil["gpus"][0]["model"], hostile("model"));
    assert_eq!(evil["health"]["reason"], hostile("condition"));
}

/// Our own sequences on a terminal: colour, cursor home, clear line, clear below.
fn strip_own_sequences(text: &str) -> String {
    let own = regex::Regex::new(r"\x1b\[(\d+(;\d+)*)?[mHKJ]").unwrap();
    own.replace_all(&text.replace("\r\n", "\n"), "").into_owned()
}

#[test]
fn a_watch_on_a_terminal_shows_hostile_text_escaped() {
    let f = Fixture::hostile_text();
    let mut command = common::command(&f.kubeconfig);
    command.env("TERM", "xterm-256color").args(["nodes", "--watch", "--interval", "1s"]);
    let term = common::pty::OnTerminal::spawn(command);
    test_support::simulated::wait_until("two frames", Duration::from_secs(60), || {
        term.text().matches("\x1b[J").count() >= 2
    });
    let text = term.text();
    assert_eq!(term.interrupt(), 0);
    let shown = strip_own_sequences(&text);
    assert_eq!(raw_control(&shown), None, "a raw control character reached the terminal:\n{shown:?}");
    assert!(shown.contains("^[]0;pwned-title^G"), "{shown}");
    assert!(shown.contains("Warning: node evil-nvml: exporter NVML down (^[[2J"), "{shown}");
    assert!(!shown.lines().any(|l| l.starts_with("FAKE-ROW")), "{shown}");
}

/// A page whose lines are `line`, streamed `times` times or forever.
fn streamed(line: &str, times: Option<u64>) -> Backend {
    Backend::streamed("# a hostile page\n", line, times, "")
}

#[test]
fn pages_past_the_limits_make_their_node_unknown_and_the_command_ends() {
    let limits = exposition_parser::Limits::default();
    let filler = format!("filler{{a=\"{}\"}} 1\n", "x".repeat(1000));
    let big = streamed(&filler, Some(256 * 1024));
    let endless = streamed(&filler, None);
    let f = Fixture::new(vec![
        (
            "good",
            Backend::page(
                "gpu_info{gpu=\"0\",uuid=\"GPU-0\",model=\"NVIDIA A100-SXM4-80GB\"} 1\ngpu_utilization{gpu=\"0\"} 40\n",
            ),
        ),
        ("big", big.clone()),
        ("endless", endless.clone()),
        ("many", streamed("x 1\n", None)),
        ("crowded", streamed("gpu_up{gpu=\"0\"} 1\n", Some(300_000))),
    ]);
    // Deadlines far off: the limits, not the clock, must end these reads.
    let (stdout, stderr, code) = f.run(&["nodes", "--exporter-timeout", "2m", "--timeout", "3m"]);
    assert_eq!(code, 0, "{stderr}");
    for node in ["big", "endless", "many", "crowded"] {
        let row = stdout.lines().find(|l| l.starts_with(&format!("{node} "))).unwrap_or_else(|| panic!("{stdout}"));
        assert!(row.contains("unknown"), "{row}");
    }
    assert!(stdout.lines().any(|l| l.starts_with("good ") && l.contains("40%")), "{stdout}");
    let warning = |node: &str| {
        stderr
            .lines()
            .find(|l| l.starts_with(&format!("Warning: node {node}: ")))
            .unwrap_or_else(|| panic!("{node}: {stderr}"))
            .to_string()
    };
    let too_large = format!(
        "exporter page over limit (pod {EXPORTER_NAMESPACE}/gpu-exporter-{{}}: the page is larger than the limit of {} bytes; the read stopped there); its readings are unknown",
        limits.max_bytes
    );
    for node in ["big", "endless"] {
        assert_eq!(warning(node), format!("Warning: node {node}: {}", too_large.replace("{}", node)));
    }
    let many = warning("many");
    assert!(many.contains(&format!("sample count exceeds the limit of {}", limits.max_samples)), "{many}");
    assert!(warning("crowded").contains("the GPU series of the page take more than the limit of"), "{stderr}");
    // The read stopped near the limit: the rest of the page was never taken.
    let cap = 2 * limits.max_bytes as u64 + (8 << 20);
    assert!(big.sent() < cap, "the 256 MiB page was read to {} bytes", big.sent());
    assert!(endless.sent() < cap, "the endless page was read to {} bytes", endless.sent());
    assert!(f.api.requests().iter().any(|r| r.path.contains("gpu-exporter-endless")));
}
