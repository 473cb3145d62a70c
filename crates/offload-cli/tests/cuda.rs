//! `offload info` / `offload inspect` and the CUDA plugin on a machine
//! without a CUDA driver (`LD_LIBRARY_PATH` pointing nowhere, or
//! `OFFLOAD_CUDA_DRIVER` naming a missing file): no CUDA devices, one
//! reason, shown where the user asked for it.

use std::process::Command;

const EXE: &str = env!("CARGO_BIN_EXE_offload");

/// Whether the system's dynamic loader finds a real `libcuda.so.1` (a GPU
/// machine): then the default-name cases name a missing file instead.
fn system_has_driver() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/lib/wsl/lib/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

fn info(env: &[(&str, &str)]) -> (String, String) {
    let mut c = Command::new(EXE);
    c.arg("info")
        .env_remove("OFFLOAD_PLUGINS")
        .env_remove("OFFLOAD_CUDA_DRIVER")
        .env_remove("LIBOMPTARGET_DEBUG")
        .env("LD_LIBRARY_PATH", "/nonexistent");
    if system_has_driver() {
        c.env("OFFLOAD_CUDA_DRIVER", "/nonexistent/libcuda.so.1");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn without_a_driver_cuda_has_no_devices_and_one_reason() {
    // By default: a CUDA platform without devices, no failure, nothing on stderr.
    let (out, err) = info(&[]);
    assert!(out.contains("cuda (backend cuda, 0 device(s))"), "{out}");
    assert!(!out.contains("failed to initialise"), "{out}");
    assert!(!err.contains("cuda"), "{err}");

    // Asked for by name: the reason is a plugin failure.
    let (out, _) = info(&[("OFFLOAD_PLUGINS", "cuda")]);
    assert!(out.contains("Plugins that failed to initialise:"), "{out}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("cuda: "))
        .unwrap_or_else(|| panic!("no cuda line in:\n{out}"));
    assert!(line.contains("cannot load the CUDA driver"), "{line}");
    assert!(line.contains("libcuda.so.1"), "{line}");
    assert!(line.ends_with("(BackendFailure)"), "{line}");

    // The JSON report carries the same reason.
    let o = Command::new(EXE)
        .args(["info", "--json"])
        .env("OFFLOAD_PLUGINS", "cuda")
        .env("OFFLOAD_CUDA_DRIVER", "/nonexistent/libcuda.so.1")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let failed = v["failed_plugins"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{v}");
    assert_eq!(failed[0]["plugin"], "cuda");
    assert!(failed[0]["error"]
        .as_str()
        .unwrap()
        .contains("/nonexistent/libcuda.so.1"));

    // Not asked for: the reason only in LIBOMPTARGET_DEBUG output.
    let (_, err) = info(&[("LIBOMPTARGET_DEBUG", "1")]);
    assert!(
        err.lines()
            .any(|l| l.contains("no CUDA devices: cannot load the CUDA driver")),
        "{err}"
    );
}

#[test]
fn inspect_describes_ptx_cubins_and_fatbins() {
    let dir = tempfile::tempdir().unwrap();
    let ptx = dir.path().join("k.ptx");
    std::fs::write(
        &ptx,
        ".version 7.8\n.target sm_80\n.address_size 64\n\n.visible .global .align 4 .u32 counter;\n\
         .visible .entry saxpy(\n.param .u32 n\n)\n{\nret;\n}\n",
    )
    .unwrap();
    let o = Command::new(EXE)
        .args(["inspect", "--json"])
        .arg(&ptx)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "ptx", "{v}");
    let img = &v["images"][0];
    assert_eq!(img["format"], "PTX");
    assert_eq!(img["triple"], "nvptx64-nvidia-cuda");
    assert_eq!(img["arch"], "sm_80");
    assert_eq!(img["kernels"][0], "saxpy");
    assert_eq!(img["globals"][0]["name"], "counter");
    assert_eq!(img["cuda"]["ptx_version"], "7.8");

    let o = Command::new(EXE).arg("inspect").arg(&ptx).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("PTX"), "{text}");
    assert!(text.contains("sm_80"), "{text}");

    // A fatbinary with one PTX entry for sm_70.
    let payload = b".version 7.0\n.target sm_70\n.address_size 64\n";
    let padded = payload.len().div_ceil(8) * 8;
    let mut e = vec![0u8; 64];
    e[0] = 1;
    e[4] = 64;
    e[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
    e[28] = 70;
    e.extend_from_slice(payload);
    e.resize(64 + padded, 0);
    let mut f = 0xBA55_ED50u32.to_le_bytes().to_vec();
    f.extend_from_slice(&[1, 0, 16, 0]);
    f.extend_from_slice(&(e.len() as u64).to_le_bytes());
    f.extend_from_slice(&e);
    let fat = dir.path().join("k.fatbin");
    std::fs::write(&fat, &f).unwrap();
    let o = Command::new(EXE)
        .args(["inspect", "--json"])
        .arg(&fat)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "fatbin", "{v}");
    let img = &v["images"][0];
    assert_eq!(img["format"], "fatbin");
    assert_eq!(img["cuda"]["entries"][0]["kind"], "PTX");
    assert_eq!(img["cuda"]["entries"][0]["arch"], "sm_70");
}
