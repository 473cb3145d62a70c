"""Devices of an `offload serve` server, through OFFLOAD_REMOTE, from Python.

The runtime reads its environment once, so the client runs in its own
Python process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

CLIENT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import offload

    devs = offload.devices()
    out = {"devices": [(d.index, d.plugin, d.type, d.name) for d in devs]}
    dev = devs[0]
    out["info_plugin"] = dev.info["plugin"]
    out["platform"] = dev.platform.name
    a = dev.to_device(np.arange(10, dtype=np.float32))
    out["round_trip"] = a.to_numpy().tolist()
    out["dlpack_device"] = list(a.__dlpack_device__())
    try:
        np.from_dlpack(a)
        out["dlpack"] = "exported"
    except BufferError as e:
        out["dlpack"] = "BufferError"
    prog = dev.load_program(sys.argv[1])
    x = dev.to_device(np.ones(100, np.float32))
    y = dev.zeros(100, np.float32)
    q = dev.queue()
    prog.kernel("saxpy").launch(q, grid=1, block=100, args=[np.float32(4), x, y, np.uint32(100)])
    q.synchronize()
    out["saxpy"] = float(y.to_numpy().sum())
    try:
        prog.kernel("missing")
    except offload.OffloadError as e:
        out["error"] = e.code.name
    print(json.dumps(out))
    """
)


@pytest.fixture
def server(offload_bin):
    env = dict(os.environ, OFFLOAD_HOST_DEVICES="1")
    env.pop("OFFLOAD_REMOTE", None)
    env.pop("OFFLOAD_REMOTE_TOKEN", None)
    proc = subprocess.Popen([str(offload_bin), "serve", "--listen", "127.0.0.1:0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line
        yield line.split()[-1]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_remote_devices_arrays_and_kernels(server, kernels_so):
    env = dict(os.environ, OFFLOAD_PLUGINS="remote", OFFLOAD_REMOTE=server)
    out = subprocess.run([sys.executable, "-c", CLIENT, str(kernels_so)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.splitlines()[-1])
    assert r["devices"] and all(d[1] == "remote" for d in r["devices"])
    assert r["info_plugin"] == "remote" and r["platform"] == "remote"
    assert r["round_trip"] == list(range(10))
    assert r["dlpack_device"][0] == 12  # kDLExtDev: not host memory
    assert r["dlpack"] == "BufferError"
    assert r["saxpy"] == 400.0
    assert r["error"] == "NOT_FOUND"
