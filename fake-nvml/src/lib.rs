//! fake-nvml: a simulated GPU node behind the real NVML C ABI.
//!
//! Built as a shared library (`libfake_nvml.so`) that `nvml-wrapper` loads through
//! `Nvml::builder().lib_path(..)` exactly as it loads `libnvidia-ml.so.1` on a GPU
//! node, so the exporter's NVML code path runs for real in tests and in the demo.
//! The node it simulates comes from the scenario file named by `FAKE_NVML_SCENARIO`
//! (see [`scenario`]); scenario time comes from [`clock`]. With `FAKE_NVML_LIVE=1` the
//! file is followed: a rewrite changes the node's pods, processes and readings while the
//! exporter runs (fake-kubelet's `join` mode writes it as pods come and go).
//!
//! Beyond the exporter, the library answers what NVIDIA's own NVML consumers call:
//! k8s-device-plugin v0.17.4 (through go-nvml, go-nvlib and go-gpuallocator),
//! nvidia-ml-py and gpustat; `docs/nvml-consumers.md` lists the calls with their
//! sources, and `tests/nvml_consumers.rs` fails when one is no longer exported. A call
//! on those lists that the simulator does not model answers `NVML_ERROR_NOT_SUPPORTED`.
//! What the device plugin reads from the host besides NVML (`mig-minors`, device
//! nodes, NUMA nodes) is written from the scenario under a root of the caller's
//! choosing by [`host`].
//!
//! Layers, one-directional: [`scenario`] (file format and checks) -> [`node`] (values
//! and fault state at time t) -> `ffi` (the exported C functions). Every `unsafe` block
//! says why it is sound (`SAFETY:`), which clippy enforces.

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod calls;
pub mod clock;
mod ffi;
pub mod host;
pub mod models;
pub mod node;
pub mod scenario;
pub mod topology;
