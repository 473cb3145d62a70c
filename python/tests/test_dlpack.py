"""DLPack both ways with numpy."""

import gc

import numpy as np
import pytest

import offload


def test_dlpack_device(host):
    d = host.to_device(np.zeros(3, np.float32))
    assert d.__dlpack_device__() == (1, 0)  # kDLCPU: host-device memory is CPU memory


def test_numpy_views_device_memory_without_copy(host):
    d = host.to_device(np.arange(8, dtype=np.float64))
    v = np.from_dlpack(d)
    assert v.ctypes.data == d.ptr  # the same memory
    np.testing.assert_array_equal(v, np.arange(8))
    v[0] = 42.0  # DLPack 1.0 export: writable
    assert d.to_numpy()[0] == 42.0


def test_legacy_capsule(host):
    d = host.to_device(np.arange(4, dtype=np.int32))
    cap = d.__dlpack__()
    assert "dltensor" in repr(cap) and "versioned" not in repr(cap)
    back = offload.from_dlpack(cap)
    assert back.ptr == d.ptr
    with pytest.raises(BufferError):  # consumed already
        offload.from_dlpack(cap)


def test_capsule_keeps_memory_alive(host):
    d = host.to_device(np.arange(1000, dtype=np.int64))
    v = np.from_dlpack(d)
    del d
    gc.collect()
    for _ in range(8):  # reuse freed memory if it had been freed
        host.to_device(np.zeros(1000, np.int64))
    np.testing.assert_array_equal(v, np.arange(1000))
    cap = host.to_device(np.ones(3)).__dlpack__()
    del cap  # never consumed: the capsule's destructor frees it
    gc.collect()


def test_from_dlpack_of_ours_shares(host):
    d = host.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert offload.from_dlpack(d) is d
    v = np.from_dlpack(d)
    again = offload.from_dlpack(v)  # numpy array over our memory: copied (foreign exporter)
    np.testing.assert_array_equal(again.to_numpy(), d.to_numpy())


def test_from_dlpack_copies_numpy_memory(host):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    d = offload.from_dlpack(a)
    assert d.device == offload.host_device()
    assert d.ptr != a.ctypes.data
    np.testing.assert_array_equal(d.to_numpy(), a)
    strided = a[:, 1::2]
    np.testing.assert_array_equal(offload.from_dlpack(strided).to_numpy(), strided)
    other = offload.devices()[-1]
    assert offload.from_dlpack(a, device=other).device == other


def test_dlpack_copy_and_device_arguments(host):
    d = host.to_device(np.arange(3, dtype=np.uint8))
    v = np.from_dlpack(d, copy=True)
    assert v.ctypes.data != d.ptr
    with pytest.raises(BufferError):
        d.__dlpack__(dl_device=(2, 0))
    with pytest.raises(TypeError):
        offload.from_dlpack([1, 2])
