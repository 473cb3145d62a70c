//! Shared by the remote plugin's integration tests (`mod common;`):
//! clients of an `offload serve` child process (test-support's
//! [`Server`]), and the programs and images they run. Each test file uses
//! what it needs.
#![allow(dead_code)]

#[allow(unused_imports)] // each test file uses what it needs
pub use test_support::device::{packed, read, read_into, write};
#[allow(unused_imports)]
pub use test_support::serve::{peak_rss, Server};
#[allow(unused_imports)]
pub use test_support::{offload_bin, skip, text};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use offload_core::plugin;
use offload_core::{Config, Runtime};

pub fn client_config(addr: &str, token: Option<&str>) -> Config {
    Config {
        plugins: Some(vec!["remote".into()]),
        remote_servers: vec![addr.to_string()],
        remote_token: token.map(str::to_string),
        remote_timeout_secs: 5,
        remote_chunk_size: 1 << 20,
        ..Config::default()
    }
}

pub fn client(addr: &str, token: Option<&str>) -> Runtime {
    Runtime::new(client_config(addr, token), &[offload_plugin_remote::ENTRY])
}

/// The remote plugin's devices without the core in front: an attacker that
/// sends the server whatever addresses it likes (its own session).
pub fn raw_remote_devices(addr: &str, token: Option<&str>) -> Vec<Arc<dyn plugin::Device>> {
    let plugin = (offload_plugin_remote::ENTRY.create)(&client_config(addr, token)).unwrap();
    let devices = plugin.init().unwrap();
    // The plugin owns the connection: keep it for the test's lifetime.
    Box::leak(plugin);
    devices
}

/// Build an OpenMP offload program with clang-22, for `offload exec` on
/// the workspace's drop-in libraries (built first when missing).
pub fn build_openmp(dir: &Path, name: &str, source: &str) -> PathBuf {
    test_support::drop_in_libraries();
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let exe = dir.join(name);
    let ok = Command::new("clang-22")
        .args([
            "-fopenmp",
            "-fopenmp-targets=x86_64-unknown-linux-gnu",
            "-O1",
            "-o",
        ])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap()
        .success();
    assert!(ok, "clang-22 failed on {name}.c");
    exe
}

/// Kernels and an image that attack their own server: read another
/// session's address, exit, crash, crash while loading.
pub fn hostile_images(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let build = |name: &str, source: &str| {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, source).unwrap();
        let out = dir.join(format!("{name}.so"));
        let ok = Command::new("clang-22")
            .args(["-O1", "-fPIC", "-shared", "-I"])
            .arg(root.join("include"))
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap()
            .success();
        assert!(ok, "clang-22 failed on {name}.c");
        std::fs::read(out).unwrap()
    };
    let kernels = build(
        "hostile",
        r#"#include "offload/host_kernel.h"
#include <stdlib.h>
#include <string.h>
typedef struct { const unsigned char *from; unsigned char *to; uint32_t n; } peek_args;
OFFLOAD_HOST_KERNEL(peek) {
  const peek_args *p = args;
  if (offload_global_id_x(item) == 0) memcpy(p->to, p->from, p->n);
}
typedef struct { int status; } quit_args;
OFFLOAD_HOST_KERNEL(quit) { exit(((const quit_args *)args)->status); }
"#,
    );
    let crashing = build(
        "crashing",
        r#"__attribute__((constructor)) static void boom(void) { *(volatile int *)8 = 1; }
int unused;
"#,
    );
    (kernels, crashing)
}

/// `offload exec PROGRAM` with only the remote plugin, on `server`.
pub fn exec_remote(server: &Server, exe: &Path) -> Command {
    let mut cmd = Command::new(offload_bin());
    cmd.arg("exec")
        .arg(exe)
        .env("OFFLOAD_PLUGINS", "remote")
        .env("OFFLOAD_REMOTE", &server.addr)
        .env_remove("OFFLOAD_REMOTE_TOKEN")
        .env("OFFLOAD_REMOTE_TIMEOUT", "20");
    cmd
}

/// A session opened by hand, without the plugin: the Hello stream (the
/// session lives while it is held), the greeting, and a client on the
/// session's own connection. Calls carry the credential with [`as_session`].
pub struct RawSession {
    pub _hello: tonic::Streaming<offload_proto::HelloEvent>,
    pub greeting: offload_proto::HelloEvent,
    pub client: offload_proto::offload_client::OffloadClient<tonic::transport::Channel>,
}

impl RawSession {
    pub async fn open(addr: &str) -> RawSession {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
        let mut main =
            offload_proto::offload_client::OffloadClient::new(endpoint.connect().await.unwrap());
        let mut hello = main
            .hello(offload_proto::HelloRequest {
                client: "raw".into(),
                protocol_version: offload_proto::PROTOCOL_VERSION,
            })
            .await
            .unwrap()
            .into_inner();
        let greeting = hello.message().await.unwrap().unwrap();
        let channel = offload_plugin_remote::connect_session(&endpoint, &greeting.session)
            .await
            .unwrap();
        RawSession {
            _hello: hello,
            greeting,
            client: offload_proto::offload_client::OffloadClient::new(channel),
        }
    }

    pub fn req<T>(&self, msg: T) -> tonic::Request<T> {
        as_session(&self.greeting.session, msg)
    }
}

pub fn as_session<T>(credential: &str, msg: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.metadata_mut()
        .insert(offload_proto::SESSION_HEADER, credential.parse().unwrap());
    r
}
