"""The package itself: stubs cover the extension module, docstrings exist."""

import ast
import inspect
from pathlib import Path

import offload
from offload import _offload


def _stub_names():
    stub = Path(offload.__file__).with_name("_offload.pyi")
    tree = ast.parse(stub.read_text())
    top, members = set(), {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            top.add(node.name)
    return top, members


def test_stubs_cover_the_extension_module():
    top, members = _stub_names()
    public = {n for n in dir(_offload) if not n.startswith("_")}
    assert public <= top, public - top
    for cls in (c for c in public if inspect.isclass(getattr(_offload, c))):
        real = {n for n in dir(getattr(_offload, cls)) if not n.startswith("_")}
        assert real <= members[cls], (cls, real - members[cls])


def test_typed_and_documented():
    root = Path(offload.__file__).parent
    assert (root / "py.typed").exists()
    for name in offload.__all__:
        obj = getattr(offload, name)
        if callable(obj):
            assert obj.__doc__, name
    for cls in (offload.Device, offload.DeviceArray, offload.Kernel, offload.Queue):
        for n, member in vars(cls).items():
            if not n.startswith("_"):
                assert member.__doc__, f"{cls.__name__}.{n}"
    assert "trusts the argument layout" in offload.Kernel.launch.__doc__
