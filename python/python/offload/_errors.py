"""The exceptions of the offload package and the runtime's error codes."""

from __future__ import annotations

import enum

from . import _offload

class ErrorCode(enum.IntEnum):
    """The runtime's error codes, numbered as LLVM 22's ``ol_errc_t``.

    Spelled out (not built from the extension's list) so that type checkers
    know every member; ``tests/test_stubs.py`` checks it against the runtime.
    """

    SUCCESS = 0
    UNKNOWN = 1
    HOST_IO = 2
    INVALID_BINARY = 3
    INVALID_NULL_POINTER = 4
    INVALID_ARGUMENT = 5
    NOT_FOUND = 6
    OUT_OF_RESOURCES = 7
    INVALID_SIZE = 8
    INVALID_ENUMERATION = 9
    HOST_TOOL_NOT_FOUND = 10
    INVALID_VALUE = 11
    UNIMPLEMENTED = 12
    UNSUPPORTED = 13
    ASSEMBLE_FAILURE = 14
    COMPILE_FAILURE = 15
    LINK_FAILURE = 16
    BACKEND_FAILURE = 17
    UNINITIALIZED = 18
    INVALID_NULL_HANDLE = 19
    INVALID_PLATFORM = 20
    INVALID_DEVICE = 21
    INVALID_QUEUE = 22
    INVALID_EVENT = 23
    SYMBOL_KIND = 24


_DESCRIPTIONS = {value: text for _, value, text in _offload.error_codes()}


class OffloadError(Exception):
    """An error of the offload runtime.

    ``code`` is an :class:`ErrorCode` (an ``IntEnum``: compare it with
    ``ErrorCode.NOT_FOUND`` or with its ``ol_errc_t`` number) and ``message``
    the runtime's message, which names the device, address, kernel or image
    at fault.
    """

    code: ErrorCode
    message: str

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code)
        try:
            self.code = ErrorCode(code)
        except ValueError:  # a code newer than this package
            self.code = code  # type: ignore[assignment]
        self.message = message

    def __str__(self) -> str:
        name = getattr(self.code, "name", str(self.code))
        return f"{self.message} ({name}: {_DESCRIPTIONS.get(int(self.code), 'unknown code')})"

    def __reduce__(self):  # picklable: rebuilt from (message, code)
        return (type(self), (self.message, int(self.code)))
