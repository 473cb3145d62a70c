//! `offload serve` in a child process, as the tests of the remote plugin
//! and of the server's sandbox start it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::offload_bin;

/// `offload serve` on loopback in a child process (killed when dropped),
/// its log in a temporary folder.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Two host devices, no extra flags.
    pub fn start(token: Option<&str>) -> Server {
        Server::start_with(token, &[])
    }

    pub fn start_with(token: Option<&str>, extra: &[&str]) -> Server {
        Server::start_full(token, extra, 2)
    }

    pub fn start_full(token: Option<&str>, extra: &[&str], devices: usize) -> Server {
        Server::start_env(token, extra, devices, &[])
    }

    /// `offload serve --listen 127.0.0.1:0 EXTRA...` with `devices` host
    /// devices, the token (or none) and more environment.
    pub fn start_env(
        token: Option<&str>,
        extra: &[&str],
        devices: usize,
        envs: &[(&str, &Path)],
    ) -> Server {
        Server::start_wrapped(&[], token, extra, devices, envs)
    }

    /// [`Server::start_env`] run through `wrapper` (a command that execs
    /// its arguments, e.g. `setpriv --reuid ...`; none when empty).
    pub fn start_wrapped(
        wrapper: &[&str],
        token: Option<&str>,
        extra: &[&str],
        devices: usize,
        envs: &[(&str, &Path)],
    ) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("server.log");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(offload_bin());
                c
            }
            None => Command::new(offload_bin()),
        };
        cmd.args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("OFFLOAD_HOST_DEVICES", devices.to_string())
            .env_remove("OFFLOAD_REMOTE")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap());
        match token {
            Some(t) => cmd.env("OFFLOAD_REMOTE_TOKEN", t),
            None => cmd.env_remove("OFFLOAD_REMOTE_TOKEN"),
        };
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(
            line.contains("listening on"),
            "unexpected first line: {line}"
        );
        let addr = line.trim().rsplit(' ').next().unwrap().to_string();
        Server {
            child,
            addr,
            log,
            _dir: dir,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The bulk-data channel's address, as the server logged it.
    pub fn data_addr(&self) -> String {
        self.log()
            .lines()
            .find_map(|l| l.split("bulk-data channel listening addr=").nth(1))
            .expect("data channel address in the log")
            .trim()
            .to_string()
    }

    /// Host pids of the session workers the log names, in order.
    pub fn worker_pids(&self) -> Vec<i64> {
        self.log()
            .lines()
            .filter(|l| l.contains("session opened"))
            .filter_map(|l| {
                let rest = l.split("worker_pid=").nth(1)?;
                rest.split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Peak resident memory (`VmHWM`) of process `pid`, bytes.
pub fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        << 10
}
