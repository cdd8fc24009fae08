//! The server as a test that brings it up and down holds it ([`Running`]): on a port
//! of its own or a given one, stopped when dropped, and able to go down (connections
//! refused, open watches cut) and come back on the same port with the same cluster,
//! as an API server restarts under a controller.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ApiServer, User};

/// The token the kubeconfig of [`Running::kubeconfig`] carries.
pub const TEST_TOKEN: &str = "test-token";

impl ApiServer {
    /// A server that lets every client do everything: the anonymous one (a
    /// `kube::Config` with no credentials, as a controller's in-process tests build it)
    /// and `test` ([`TEST_TOKEN`], the kubeconfig a binary under test is given).
    pub fn open() -> ApiServer {
        let server = ApiServer::new();
        server.user(TEST_TOKEN, "test");
        server.state().anonymous = Some(User { name: "system:anonymous".into() });
        server
    }

    /// Serves on a loopback port of its own until the handle is dropped.
    pub fn run(&self) -> Running {
        self.run_on(0)
    }

    /// Serves on `port` (to bring an API server up where a client already looks).
    pub fn run_on(&self, port: u16) -> Running {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, address) = std::sync::mpsc::channel();
        let server = self.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
                ready.send(listener.local_addr().unwrap()).unwrap();
                let serving = axum::serve(listener, super::routes::router(server));
                tokio::select! {
                    result = serving => result.unwrap(),
                    _ = stopped => {}
                }
            });
            // Dropping the runtime cuts every open connection, watches included.
            runtime.shutdown_timeout(Duration::from_secs(1));
        });
        let address = address.recv_timeout(Duration::from_secs(10)).unwrap();
        Running { server: self.clone(), address, stop: Some(stop), thread: Some(thread) }
    }
}

/// A serving [`ApiServer`]; stops when dropped.
pub struct Running {
    server: ApiServer,
    pub address: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for Running {
    type Target = ApiServer;

    fn deref(&self) -> &ApiServer {
        &self.server
    }
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// A kubeconfig naming this server, with [`TEST_TOKEN`] and namespace `gpu-telemetry`.
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        super::kubeconfig(dir, self.address, &[("test", TEST_TOKEN, "gpu-telemetry")])
    }

    /// Stops serving (connections are refused from now on) and returns a handle to
    /// bring the same cluster back on the same port.
    pub fn go_down(mut self) -> Down {
        self.shutdown();
        Down { server: self.server.clone(), port: self.address.port() }
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// A stopped server whose cluster can come back.
pub struct Down {
    server: ApiServer,
    pub port: u16,
}

impl Down {
    pub fn come_back(self) -> Running {
        self.server.run_on(self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_went_down_comes_back_on_its_port_with_its_cluster() {
        let api = ApiServer::open().run();
        api.add_node(crate::cluster::registered_node("n"));
        let address = api.address;
        let down = api.go_down();
        assert!(std::net::TcpStream::connect(address).is_err(), "refused while down");
        let api = down.come_back();
        assert_eq!(api.address, address);
        assert_eq!(api.node("n")["metadata"]["name"], "n");
    }
}
