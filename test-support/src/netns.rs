//! Addresses that are not loopback, for processes that stand in for pods: the API
//! server refuses loopback addresses in EndpointSlices and never proxies to them, so a
//! simulated node's exporter (or a Prometheus behind the services proxy) listens on the
//! host end of a veth pair whose other end lives in a network namespace the test makes
//! and removes itself. Every address is local to this machine: traffic to it never
//! leaves the host. An address is a /32 on the host end, so that it can be exactly a pod
//! IP the simulated kubelet handed out. Needs root and iproute2 (`ip`), as the CI
//! machine has.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Pairs made by this process so far (names and addresses stay unique).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A veth pair with `host` on this side; dropped, its namespace and the pair go.
#[derive(Debug)]
pub struct HostAddress {
    pub host: Ipv4Addr,
    namespace: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e} (install iproute2)"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl HostAddress {
    /// A new address `10.200.<p>.<4n+1>` (`p` from the process id, `n` counting up); an
    /// address another test process picked too is harmless, as both are local.
    pub fn new() -> HostAddress {
        let n = NEXT.load(Ordering::Relaxed);
        let pid = std::process::id();
        let (third, fourth) = ((pid % 250) as u8, (4 * (n % 63) + 1) as u8);
        HostAddress::at(Ipv4Addr::new(10, 200, third, fourth))
    }

    /// `host` itself (a pod IP the simulated kubelet gave a pod whose process stands in
    /// for it), as a /32 on the host end of a new pair.
    pub fn at(host: Ipv4Addr) -> HostAddress {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let namespace = format!("gt-{pid}-{n}");
        let (veth_host, veth_peer) = (format!("gth{pid}x{n}"), format!("gtn{pid}x{n}"));
        // Interface names have at most 15 bytes.
        let (veth_host, veth_peer) = (tail(&veth_host, 15), tail(&veth_peer, 15));
        let made = HostAddress { host, namespace: namespace.clone() };
        let steps: [&[&str]; 7] = [
            &["netns", "add", &namespace],
            &["link", "add", &veth_host, "type", "veth", "peer", "name", &veth_peer],
            &["link", "set", &veth_peer, "netns", &namespace],
            &["addr", "add", &format!("{host}/32"), "dev", &veth_host],
            &["link", "set", &veth_host, "up"],
            &["-n", &namespace, "link", "set", &veth_peer, "up"],
            &["-n", &namespace, "link", "set", "lo", "up"],
        ];
        for step in steps {
            if let Err(e) = ip(step) {
                panic!("making a test address in a network namespace (needs root and iproute2): {e}");
            }
        }
        made
    }
}

fn tail(s: &str, n: usize) -> String {
    s.chars().skip(s.chars().count().saturating_sub(n)).collect()
}

impl Default for HostAddress {
    fn default() -> Self {
        HostAddress::new()
    }
}

impl Drop for HostAddress {
    fn drop(&mut self) {
        // Deleting the namespace deletes the peer, and with it the pair.
        let _ = ip(&["netns", "del", &self.namespace]);
    }
}
