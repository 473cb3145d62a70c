//! Generated gRPC types and stubs of the remote offloading service
//! (`proto/offload.proto`).

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("offload.remote.v1");
}

pub mod data_channel;
pub mod fdpass;
pub mod local_ring;
pub mod session_connection;

pub use bytes::Bytes;
/// For the encoded size of a request ([`prost::Message::encoded_len`]).
pub use prost;
pub use v1::*;

/// Protocol version both sides put in Hello (2: the session connection's
/// preamble carries the session secret; 3: replies that can follow device
/// code carry its stdout and stderr, [`Output`]).
pub const PROTOCOL_VERSION: u32 = 3;
/// Metadata key of the status ending a Hello stream when the session's
/// worker process was killed by a signal: the signal's number.
pub const WORKER_SIGNAL_HEADER: &str = "x-offload-worker-signal";
/// Metadata key carrying the session id.
pub const SESSION_HEADER: &str = "x-offload-session";
