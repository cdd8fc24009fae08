//! The kubelet pod-resources v1 messages, server and client, generated at build time
//! from the exporter's `proto/podresources/v1/api.proto` (see `build.rs`).

#![allow(clippy::all, missing_docs, unreachable_pub)]

tonic::include_proto!("v1");
