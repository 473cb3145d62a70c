"""Programs, kernels, launches, queues and events."""

import ctypes
import os
import threading
import time

import numpy as np
import pytest

import offload


def test_saxpy(host, program):
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    dx, dy = host.to_device(x), host.to_device(y)
    k = program.kernel("saxpy")
    assert k.name == "saxpy" and k.device == host
    q = host.queue()
    k.launch(q, grid=((n + 127) // 128,), block=(128,), args=[np.float32(2.0), dx, dy, np.uint32(n)])
    q.synchronize()
    np.testing.assert_allclose(dy.to_numpy(), 2 * x + y)


def test_argument_packing_is_c_struct_layout(host, program):
    """The kernel copies its argument block back: compare with ctypes' layout."""

    class Args(ctypes.Structure):
        _fields_ = [("out", ctypes.c_uint64), ("size", ctypes.c_uint32), ("a", ctypes.c_uint8),
                    ("b", ctypes.c_double), ("c", ctypes.c_int16), ("d", ctypes.c_float),
                    ("e", ctypes.c_uint8), ("f", ctypes.c_int64), ("g", ctypes.c_bool)]

    out = host.zeros(ctypes.sizeof(Args), np.uint8)
    # Pack the fields through the bytes the launch builds (no trailing padding).
    end = Args.g.offset + 1
    values = dict(size=end, a=1, b=2.5, c=-3, d=4.0, e=5, f=-6, g=True)
    args = [out, np.uint32(end), np.uint8(1), np.float64(2.5), np.int16(-3), np.float32(4.0),
            ctypes.c_uint8(5), np.array(-6, dtype=np.int64), np.bool_(True)]
    q = host.queue()
    program.kernel("echo_args").launch(q, grid=1, block=1, args=args)
    q.synchronize()
    expect = Args(out=out.ptr, **values)
    assert bytes(out.to_numpy()[:end]) == bytes(expect)[:end]


def test_grid_in_two_dimensions(host, program):
    total = host.zeros(1, np.uint64)
    q = host.queue()
    program.kernel("sum_ids").launch(q, grid=(3, 2), block=(4, 5), args=(total,))
    q.synchronize()
    n = 3 * 4 * 2 * 5
    assert total.to_numpy()[0] == n * (n - 1) // 2


def test_bitcode_program_is_compiled_at_load(host, kernels_bc):
    program = host.load_program(kernels_bc.read_bytes())
    x = host.to_device(np.ones(64, np.float32))
    y = host.zeros(64, np.float32)
    q = host.queue()
    program.kernel("saxpy").launch(q, grid=1, block=64, args=[np.float32(3), x, y, np.uint32(64)])
    q.synchronize()
    assert (y.to_numpy() == 3).all()


def test_load_from_path_bytes_and_buffers(host, kernels_so):
    for src in (kernels_so, str(kernels_so), kernels_so.read_bytes(),
                bytearray(kernels_so.read_bytes()), np.frombuffer(kernels_so.read_bytes(), np.uint8)):
        assert host.load_program(src).kernel("empty").name == "empty"
    assert host.is_compatible(kernels_so.read_bytes())
    with pytest.raises(OSError):
        host.load_program(str(kernels_so) + ".missing")


def test_arrays_stay_alive_until_synchronize(host, program):
    q = host.queue()
    program.kernel("sleep_ms").launch(q, grid=1, block=1, args=[np.uint32(100)])
    y = host.zeros(256, np.float32)
    x = host.to_device(np.full(256, 2, np.float32))
    program.kernel("saxpy").launch(q, grid=2, block=128, args=[np.float32(1), x, y, np.uint32(256)])
    ptr = y.ptr
    del x, y  # the launch still uses them
    q.synchronize()
    # Nothing to check but that the process survived and memory was reusable.
    assert host.zeros(256, np.float32).ptr is not None and ptr


def test_events_and_queue_order(host, program):
    q1, q2 = host.queue(), host.queue()
    y = host.zeros(16, np.float32)
    x = host.to_device(np.ones(16, np.float32))
    saxpy = program.kernel("saxpy")
    program.kernel("sleep_ms").launch(q1, grid=1, block=1, args=[np.uint32(50)])
    saxpy.launch(q1, grid=1, block=16, args=[np.float32(1), x, y, np.uint32(16)])
    ev = q1.record_event()
    q2.wait_event(ev)
    saxpy.launch(q2, grid=1, block=16, args=[np.float32(1), x, y, np.uint32(16)])
    q2.synchronize()
    assert ev.is_complete()
    ev.wait()
    assert (y.to_numpy() == 2).all()
    assert q1.is_idle()
    with host.queue() as q3:
        saxpy.launch(q3, grid=1, block=16, args=[np.float32(1), x, y, np.uint32(16)])
    assert (y.to_numpy() == 3).all()
    assert "Queue(on" in repr(q3)


def test_launch_and_synchronize_release_the_gil(host, program):
    """A kernel that runs 300 ms (inline on an idle host queue, or queued)
    and the wait for it let other Python threads run."""
    q = host.queue()
    sleep = program.kernel("sleep_ms")
    ticks = 0
    done = threading.Event()

    def work():
        sleep.launch(q, grid=1, block=1, args=[np.uint32(150)])
        sleep.launch(q, grid=1, block=1, args=[np.uint32(150)])
        q.synchronize()
        done.set()

    t = threading.Thread(target=work)
    t.start()
    start = time.monotonic()
    while not done.is_set() and time.monotonic() - start < 5:
        ticks += 1  # pure Python: runs only while the other thread lets the GIL go
    t.join()
    assert time.monotonic() - start >= 0.25
    assert ticks > 1000


def test_to_numpy_waits_for_the_queue_given(host, program):
    q = host.queue()
    y = host.zeros(8, np.float32)
    x = host.to_device(np.ones(8, np.float32))
    program.kernel("sleep_ms").launch(q, grid=1, block=1, args=[np.uint32(50)])
    program.kernel("saxpy").launch(q, grid=1, block=8, args=[np.float32(5), x, y, np.uint32(8)])
    assert (y.to_numpy(queue=q) == 5).all()


def test_launch_argument_errors(host, program):
    q = host.queue()
    k = program.kernel("saxpy")
    x = host.zeros(4, np.float32)
    with pytest.raises(TypeError, match="typed scalar"):
        k.launch(q, grid=1, block=4, args=[2.0, x, x, np.uint32(4)])
    with pytest.raises(TypeError, match="one element"):
        k.launch(q, grid=1, block=4, args=[np.zeros(2, np.float32), x, x, np.uint32(4)])
    with pytest.raises(ValueError, match="zero dimension"):
        k.launch(q, grid=0, block=4, args=[])
    with pytest.raises(TypeError):
        k.launch(q, grid=(1, 1, 1, 1), block=4, args=[])
    others = [d for d in offload.devices() if d != host]
    if others:
        elsewhere = others[0].zeros(4, np.float32)
        with pytest.raises(ValueError, match="is on"):
            k.launch(q, grid=1, block=4, args=[np.float32(1), elsewhere, x, np.uint32(4)])
        with pytest.raises(ValueError, match="belongs to"):
            k.launch(others[0].queue(), grid=1, block=4, args=[])
    q.synchronize()


def test_preferred_block_size(program):
    assert program.kernel("saxpy").preferred_block_size() >= 1


def test_kernels_are_only_symbols_the_image_defines(program):
    # dlsym on the image would also find its dependencies' symbols: a
    # "kernel" `system` launched with a string argument runs a shell command.
    for name in ("system", "dlopen", "printf"):
        with pytest.raises(offload.OffloadError) as e:
            program.kernel(name)
        assert e.value.code == offload.ErrorCode.NOT_FOUND
        assert f"'{name}' is not defined by the image" in str(e.value)


def test_special_files_are_refused_as_programs(host, tmp_path):
    # Refused at once, never read until memory runs out (or blocking on a FIFO).
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", "/dev/urandom", str(fifo), str(tmp_path)):
        with pytest.raises(offload.OffloadError) as e:
            host.load_program(path)
        assert path in str(e.value) and "regular file" in str(e.value)


def test_launch_sizes_are_checked_at_launch(host, program):
    q = host.queue()
    k = program.kernel("sleep_ms")
    with pytest.raises(ValueError, match="block"):
        k.launch(q, grid=1, block=10**9, args=[np.uint32(0)])
    with pytest.raises(ValueError, match="block"):
        k.launch(q, grid=1, block=(100000, 100000), args=[np.uint32(0)])
    q.synchronize()  # nothing was enqueued
