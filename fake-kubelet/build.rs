//! Compiles the kubelet pod-resources v1 protocol that the exporter uses
//! (`../exporter/proto/podresources/v1/api.proto`, one copy for both sides) with protox
//! and tonic-prost-build: no `protoc` needed. The server and, for tests, the client.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "../exporter/proto";
    let proto = "../exporter/proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], [root])?;
    tonic_prost_build::configure().build_transport(false).compile_fds(descriptors)?;
    Ok(())
}
