//! An application's own metrics for the pods of a workload on the real control plane,
//! as a Prometheus would scrape them from each pod: one series per Running pod of a
//! label selector (`request_latency_ms{namespace, pod}`, say), served from one address
//! for Prometheus to scrape with `honor_labels`. The simulated pods run no container, so
//! this stands in for their `/metrics`; the value is the test's to set, and the page can
//! stop answering, as pods that went away.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::control_plane::ControlPlane;

/// What the page shows and whether it answers.
#[derive(Debug)]
struct State {
    page: String,
    value: f64,
    up: bool,
}

/// The page's server; it runs as long as the test process.
#[derive(Debug)]
pub struct AppMetrics {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl AppMetrics {
    /// Serves `metric` = `value` for each Running pod of `selector` in `namespace`,
    /// re-listed every half second.
    pub fn start(cp: &ControlPlane, namespace: &str, selector: &str, metric: &str, value: f64) -> AppMetrics {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State { page: String::new(), value, up: true }));
        let (kubectl, kubeconfig): (PathBuf, PathBuf) = (cp.kubectl.clone(), cp.kubeconfig.clone());
        let (namespace, selector, metric) = (namespace.to_string(), selector.to_string(), metric.to_string());
        let writer = Arc::clone(&state);
        std::thread::spawn(move || {
            loop {
                let out = std::process::Command::new(&kubectl)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["get", "pods", "-n", &namespace, "-l", &selector])
                    .args(["--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"])
                    .output();
                if let Some(out) = out.ok().filter(|o| o.status.success()) {
                    let names = String::from_utf8_lossy(&out.stdout).to_string();
                    let mut s = writer.lock().unwrap();
                    let mut text = format!("# TYPE {metric} gauge\n");
                    for pod in names.split_whitespace() {
                        text.push_str(&format!("{metric}{{namespace=\"{namespace}\",pod=\"{pod}\"}} {}\n", s.value));
                    }
                    s.page = text;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let reader = Arc::clone(&state);
        serve_page(listener, move || {
            let s = reader.lock().unwrap();
            s.up.then(|| s.page.clone())
        });
        AppMetrics { addr, state }
    }

    /// Every pod's value from now on.
    pub fn set(&self, value: f64) {
        self.state.lock().unwrap().value = value;
    }

    /// The page answers 503 from now on.
    pub fn stop(&self) {
        self.state.lock().unwrap().up = false;
    }
}

/// Serves, to every request on `listener`, the exposition `render` gives (503 when it
/// gives none), from a thread that runs as long as the test process.
pub fn serve_page(listener: TcpListener, render: impl Fn() -> Option<String> + Send + 'static) {
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 2048];
            let _ = stream.read(&mut buf);
            let Some(body) = render() else {
                let _ = stream.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
                continue;
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}
