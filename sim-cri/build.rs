//! Compiles the CRI runtime.v1 protocol (`proto/runtime/v1/api.proto`, Kubernetes
//! v1.37.2's) with protox and tonic-prost-build: no `protoc` needed. The server, and the
//! client for tests.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().build_transport(false).compile_fds(descriptors)?;
    Ok(())
}
