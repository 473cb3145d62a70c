//! Generated gRPC types and stubs of the remote offloading service
//! (`proto/offload.proto`).

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("offload.remote.v1");
}

pub mod data_channel;
pub mod session_connection;

pub use bytes::Bytes;
pub use v1::*;

/// Protocol version both sides put in Hello (2: the session connection's
/// preamble carries the session secret).
pub const PROTOCOL_VERSION: u32 = 2;
/// Metadata key carrying the session id.
pub const SESSION_HEADER: &str = "x-offload-session";
