"""Device arrays: from and to the buffer protocol, dtypes, shapes, freeing."""

import array
import ctypes
import gc

import numpy as np
import pytest

import offload

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_dtype(host, dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    d = host.to_device(a)
    assert d.shape == (2, 3, 4)
    assert d.dtype == np.dtype(dtype)
    assert d.strides == a.strides
    assert d.ndim == 3 and d.size == 24 and len(d) == 2
    assert d.nbytes == a.nbytes and d.itemsize == a.itemsize
    b = d.to_numpy()
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)


def test_non_contiguous_input_is_copied_contiguously(host):
    a = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]
    d = host.to_device(a)
    np.testing.assert_array_equal(d.to_numpy(), a)
    assert d.strides == (12, 4)


def test_other_buffer_exporters(host):
    d = host.to_device(b"\x01\x02\x03")
    assert d.dtype == np.uint8 and d.shape == (3,)
    assert d.to_numpy().tolist() == [1, 2, 3]
    d = host.to_device(array.array("d", [1.5, 2.5]))
    assert d.dtype == np.float64
    assert d.to_numpy().tolist() == [1.5, 2.5]
    d = host.to_device((ctypes.c_int32 * 3)(7, 8, 9))
    assert d.dtype == np.int32
    assert d.to_numpy().tolist() == [7, 8, 9]
    d = host.to_device(memoryview(bytearray(b"ab")))
    assert bytes(d.to_numpy()) == b"ab"


def test_zeros_empty_and_copies(host):
    z = host.zeros((3, 2), np.float32)
    assert z.shape == (3, 2) and z.dtype == np.float32
    assert not z.to_numpy().any()
    e = host.empty(5, "int64")
    assert e.shape == (5,) and e.dtype == np.int64
    assert host.zeros(4).dtype == np.float64
    src = np.arange(6, dtype=np.float32).reshape(3, 2)
    z.copy_from_host(src)
    np.testing.assert_array_equal(z.to_numpy(), src)
    out = np.empty_like(src)
    z.copy_to_host(out)
    np.testing.assert_array_equal(out, src)
    with pytest.raises(ValueError):
        z.copy_from_host(np.zeros(5, np.float32))
    c = z.copy()
    z.copy_from_host(np.zeros_like(src))
    np.testing.assert_array_equal(c.to_numpy(), src)
    other = offload.devices()[-1]
    moved = c.copy(other)
    assert moved.device == other
    np.testing.assert_array_equal(other.to_device(c).to_numpy(), src)


def test_reshape_shares_memory(host):
    d = host.to_device(np.arange(6, dtype=np.int16))
    r = d.reshape(2, 3)
    assert r.shape == (2, 3) and r.ptr == d.ptr
    assert d.reshape((3, 2)).shape == (3, 2)
    with pytest.raises(ValueError):
        d.reshape(4)


def test_numpy_asarray_copies(host):
    d = host.to_device(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(d), [0, 1, 2, 3])


def test_zero_sized_and_zero_d(host):
    d = host.to_device(np.zeros((0, 3), np.float32))
    assert d.shape == (0, 3) and d.nbytes == 0
    assert d.to_numpy().shape == (0, 3)
    s = host.to_device(np.array(5.0))
    assert s.shape == () and s.to_numpy() == 5.0
    with pytest.raises(TypeError):
        len(s)


def test_unsupported_format_is_refused(host):
    with pytest.raises(BufferError):
        host.to_device(np.zeros(3, dtype=">f4"))
    with pytest.raises(TypeError):
        host.to_device([1, 2, 3])


def test_arrays_are_freed_when_collected(host):
    """Allocating far more than the process could keep only works if freed."""
    for _ in range(64):
        d = host.zeros(16 << 20, np.uint8)  # 16 MiB each, 1 GiB in all
        del d
    gc.collect()


def test_copies_check_dtype_and_shape(host):
    a = host.zeros(4, np.int32)
    with pytest.raises(TypeError, match="float32.*int32"):
        a.copy_from_host(np.ones(4, np.float32))  # same byte size, other type
    with pytest.raises(TypeError, match="float32.*int32"):
        a.copy_to_host(np.empty(4, np.float32))
    m = host.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match=r"shape \[3, 2\].*\[2, 3\]"):
        m.copy_from_host(np.ones((3, 2), np.float32))
    # Raw bytes of the right size are accepted, as are matching arrays.
    a.copy_from_host(np.arange(4, dtype=np.int32).tobytes())
    assert a.to_numpy().tolist() == [0, 1, 2, 3]
    a.copy_from_host(np.arange(4, dtype=np.int32).view(np.uint8))
    m.copy_from_host(np.ones((2, 3), np.float32))


def test_negative_shape_is_named(host):
    with pytest.raises(ValueError, match="negative dimension -3"):
        host.zeros(-3, np.float32)
    with pytest.raises(ValueError, match="negative dimension -1"):
        host.empty((2, -1), np.float32)
    with pytest.raises(TypeError, match="shape must be an int"):
        host.zeros("x", np.float32)


def test_cuda_array_interface_only_on_cuda_devices(host):
    assert not hasattr(host.zeros(4, np.float32), "__cuda_array_interface__")
