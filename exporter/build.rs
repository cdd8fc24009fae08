//! Compiles the kubelet pod-resources v1 protocol (`proto/podresources/v1/api.proto`)
//! with protox and tonic-prost-build: no `protoc` needed. Only the client is generated.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().build_server(false).build_transport(false).compile_fds(descriptors)?;
    Ok(())
}
