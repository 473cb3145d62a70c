"""DLPack both ways with numpy."""

import ctypes
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


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


def _crafted_capsule(keep, data, shape, strides=None, byte_offset=0, shape_ptr=None):
    """A "dltensor" capsule describing float32 memory as the caller says (no deleter)."""
    shp = (ctypes.c_int64 * len(shape))(*shape)
    st = (ctypes.c_int64 * len(strides))(*strides) if strides is not None else None
    m = _DLManagedTensor()
    m.dl_tensor.data = data
    m.dl_tensor.device = _DLDevice(1, 0)
    m.dl_tensor.ndim = len(shape)
    m.dl_tensor.dtype = _DLDataType(2, 32, 1)  # float32
    m.dl_tensor.shape = shape_ptr if shape_ptr is not None else ctypes.addressof(shp)
    m.dl_tensor.strides = ctypes.addressof(st) if st is not None else None
    m.dl_tensor.byte_offset = byte_offset
    keep.extend([shp, st, m])
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None)


def test_crafted_capsules_are_refused_not_read():
    keep = []
    backing = np.arange(16, dtype=np.float32)
    real = backing.ctypes.data
    hostile = [
        dict(data=0xdead0000, shape=[4], strides=[1 << 40]),   # garbage pointer, huge stride
        dict(data=real, shape=[4], strides=[1 << 40]),         # real memory, stride far past it
        dict(data=real, shape=[4], strides=[-(1 << 40)]),      # negative stride below it
        dict(data=0xdead0000, shape=[1024]),                   # garbage pointer, contiguous
        dict(data=real, shape=[1 << 62]),                      # size overflows
        dict(data=real, shape=[4], byte_offset=1 << 50),       # offset past everything
        dict(data=real, shape=[4], shape_ptr=0x10),            # shape array unreadable
        dict(data=real, shape=[2, 2], strides=[1 << 62, 1]),   # extent overflows
    ]
    for case in hostile:
        cap = _crafted_capsule(keep, **case)
        with pytest.raises((BufferError, ValueError)):
            offload.from_dlpack(cap)
    # A crafted capsule over memory that is really there, strided: copied.
    cap = _crafted_capsule(keep, real, [4], strides=[4])
    np.testing.assert_array_equal(offload.from_dlpack(cap).to_numpy(), backing[::4])
