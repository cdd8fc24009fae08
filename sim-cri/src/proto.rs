//! The CRI runtime.v1 messages, servers and clients, generated at build time from
//! `proto/runtime/v1/api.proto` (see `build.rs`).

#![allow(clippy::all, missing_docs, unreachable_pub)]

tonic::include_proto!("runtime.v1");
