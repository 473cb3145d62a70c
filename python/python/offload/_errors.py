"""The exceptions of the offload package and the runtime's error codes."""

from __future__ import annotations

import enum

from . import _offload

# ErrorCode: LLVM 22's ol_errc_t, by name and number (ErrorCode.NOT_FOUND == 6).
ErrorCode = enum.IntEnum(  # type: ignore[misc]
    "ErrorCode", [(name, value) for name, value, _ in _offload.error_codes()], module=__name__
)
ErrorCode.__doc__ = "The runtime's error codes, numbered as LLVM 22's ``ol_errc_t``."

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
