//! Compiles the kubelet pod-resources v1 protocol (`proto/podresources/v1/api.proto`)
//! with protox and tonic-prost-build: no `protoc` needed. Only the client is generated.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure().build_server(false).build_transport(false).compile_fds(descriptors)?;
    // Relative relocations packed (DT_RELR, glibc 2.36+, the image's Debian 12 base):
    // the loader reads 0.43 MiB less at start (docs/benchmarks.md, exporter memory).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
        // Code that runs together placed together: fewer pages resident (link/text-order.ld).
        // GPU_EXPORTER_TEXT_ORDER=off links in the linker's own order, to measure the difference.
        println!("cargo:rerun-if-env-changed=GPU_EXPORTER_TEXT_ORDER");
        if std::env::var("GPU_EXPORTER_TEXT_ORDER").as_deref() != Ok("off") {
            let order = concat!(env!("CARGO_MANIFEST_DIR"), "/link/text-order.ld");
            println!("cargo:rerun-if-changed={order}");
            println!("cargo:rustc-link-arg-bins=-Wl,-T,{order}");
        }
    }
    Ok(())
}
