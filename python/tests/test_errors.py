"""Runtime errors as offload.OffloadError with the ol_errc_t code."""

import pickle

import pytest

import offload
from offload import ErrorCode, OffloadError


def test_missing_kernel_is_not_found(program):
    with pytest.raises(OffloadError) as info:
        program.kernel("no_such_kernel")
    assert info.value.code == ErrorCode.NOT_FOUND == 6
    assert info.value.code.name == "NOT_FOUND"
    assert "no_such_kernel" in info.value.message
    assert "NOT_FOUND" in str(info.value)


def test_garbage_image_is_invalid_binary(host):
    with pytest.raises(OffloadError) as info:
        host.load_program(b"definitely not an image")
    assert info.value.code == ErrorCode.INVALID_BINARY


def test_error_codes_follow_ol_errc_t():
    assert ErrorCode.SUCCESS == 0
    assert ErrorCode.INVALID_ARGUMENT == 5
    assert ErrorCode.SYMBOL_KIND == 24
    assert issubclass(OffloadError, Exception)


def test_error_pickles():
    e = OffloadError("boom", 5)
    back = pickle.loads(pickle.dumps(e))
    assert back.code == ErrorCode.INVALID_ARGUMENT and back.message == "boom"


def test_no_such_device():
    with pytest.raises(IndexError):
        offload.device(10_000)


def test_error_code_members_match_the_runtime():
    """ErrorCode is spelled out for type checkers: it must list exactly the
    runtime's codes, names and numbers."""
    native = [(name, value) for name, value, _ in offload._offload.error_codes()]
    assert [(c.name, c.value) for c in ErrorCode] == native
