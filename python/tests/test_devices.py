"""Devices, platforms and their properties."""

import json
import subprocess

import offload


def test_devices_have_name_type_index():
    devs = offload.devices()
    assert devs, "the host plugin gives at least one device"
    for i, d in enumerate(devs):
        assert d.index == i
        assert isinstance(d.name, str) and d.name
        assert d.type in ("cpu", "gpu", "host")
        assert offload.device(i) == d
        assert hash(offload.device(i)) == hash(d)
    assert offload.host_device().plugin == "host"
    assert offload.host_device().shares_host_memory


def test_platforms_group_devices():
    plats = offload.platforms()
    listed = [d.index for p in plats for d in p.devices]
    assert sorted(listed) == [d.index for d in offload.devices()]
    host = offload.host_device()
    assert host.platform.name == "host"
    assert host in host.platform.devices


def test_info_matches_offload_info_json(offload_bin):
    """Every property `offload info --json` shows, key for key and value for value."""
    out = subprocess.run([str(offload_bin), "info", "--json"], capture_output=True, text=True)
    assert out.returncode in (0, 1), out.stderr
    cli = json.loads(out.stdout)
    assert offload.info() == cli
    by_id = {d["id"]: d for p in cli["platforms"] for d in p["devices"] if d["id"] is not None}
    for d in offload.devices():
        assert d.info == by_id[d.index]


def test_device_properties_follow_info(host):
    info = host.info
    assert info["name"] == host.name
    assert info["type"] == host.type
    assert info["uid"] == host.uid
    assert info["global_mem_size"] == host.global_memory
    assert info["max_work_group_size"] >= 1
    assert set(info["max_work_group_size_per_dimension"]) == {"x", "y", "z"}
    # Target IDs are an AMD GPU's: none for a host device.
    assert host.target_ids == info["target_ids"] == []


def test_repr(host):
    assert "Device(index=" in repr(host)
    assert "Platform(" in repr(host.platform)
