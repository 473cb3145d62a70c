"""Python face of the offload runtime.

Devices (the host CPU, devices of ``offload serve`` servers named by
``OFFLOAD_REMOTE``), device arrays copied from and to anything with the
buffer protocol and exchanged with numpy through DLPack, programs and
kernels loaded from host-kernel shared objects, OpenMP device images or
LLVM bitcode, launched on asynchronous queues::

    import numpy as np, offload

    dev = offload.devices()[0]
    x = dev.to_device(np.arange(1024, dtype=np.float32))
    y = dev.zeros(1024, np.float32)
    k = dev.load_program("kernels.so").kernel("saxpy")
    q = dev.queue()
    k.launch(q, grid=(4,), block=(256,), args=[np.float32(2), x, y, np.uint32(1024)])
    q.synchronize()
    print(y.to_numpy()[:4])

Errors of the runtime are raised as :class:`OffloadError` with the
runtime's ``ol_errc_t`` code.
"""

from __future__ import annotations

import json as _json
from typing import Any, Dict

from . import _offload
from ._errors import ErrorCode, OffloadError
from ._offload import (
    Device,
    DeviceArray,
    Event,
    Kernel,
    Platform,
    Program,
    Queue,
    __version__,
    device,
    devices,
    from_dlpack,
    host_device,
    platforms,
)


def info() -> Dict[str, Any]:
    """Everything ``offload info --json`` prints: platforms (plugins, then
    the virtual ``Host`` platform of LLVM 22), their devices with every
    property, devices that can run kernels, plugins that failed to start."""
    return _json.loads(_offload.info_json())


__all__ = [
    "Device",
    "DeviceArray",
    "ErrorCode",
    "Event",
    "Kernel",
    "OffloadError",
    "Platform",
    "Program",
    "Queue",
    "__version__",
    "device",
    "devices",
    "from_dlpack",
    "host_device",
    "info",
    "platforms",
]
