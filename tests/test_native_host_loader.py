"""The loader of the optional C++ host extension (pyg_ioaware._native_host):
which modules it takes, which it refuses, and how (CPU: the module is faked)."""
import re
import types
from pathlib import Path

import pytest
import torch

from pyg_ioaware import _native, _native_host, config


class FakeLibrary:
    """The native library's entry points the loader reads."""

    def __init__(self, abi):
        self.abi = abi
        for name in _native_host.ENTRY_POINTS:
            setattr(self, name, name)

    def pygio_abi_version(self):
        return self.abi


def fake_module(torch_version, abi, host_api=_native_host.HOST_API_VERSION):
    module = types.SimpleNamespace(TORCH_VERSION=torch_version, ABI_VERSION=abi,
                                   HOST_API_VERSION=host_api, native=None)
    module.set_native = lambda entries: setattr(module, "native", entries)
    return module


@pytest.fixture
def loader(monkeypatch):
    """extension() over a faked library and module import; returns a setter."""
    monkeypatch.setattr(_native_host, "_address", lambda function: id(function))
    _native_host.extension.cache_clear()
    yield monkeypatch
    _native_host.extension.cache_clear()


def setup(monkeypatch, module, abi=5, env_path=None, import_error=None):
    monkeypatch.setattr(_native, "library", lambda: FakeLibrary(abi))
    if env_path is None:
        monkeypatch.delenv(_native_host.ENV_MODULE_PATH, raising=False)
    else:
        monkeypatch.setenv(_native_host.ENV_MODULE_PATH, env_path)

    def fake_import(path):
        if import_error is not None:
            raise import_error
        return module

    monkeypatch.setattr(_native_host, "_import", fake_import)


RUNNING = torch.__version__.split("+")[0]


def test_a_module_for_this_torch_and_abi_is_taken_and_given_the_entry_points(loader):
    module = fake_module(RUNNING, 5)
    setup(loader, module)
    assert _native_host.extension() is module
    assert set(module.native) == {*_native_host.ENTRY_POINTS, "gemv_min_elements"}


def test_the_entry_points_are_those_the_extension_takes():
    """The loader hands over exactly the addresses set_native takes
    (cuda/host/native_api.cpp): one it lacks would refuse the module, one
    it does not take would go unchecked."""
    source = (Path(__file__).parents[1] / "cuda" / "host" / "native_api.cpp").read_text()
    taken = re.findall(r'take\(entries,\s*"(\w+)"', source)
    assert len(taken) == len(set(taken)) and set(taken) == set(_native_host.ENTRY_POINTS)


# Another torch, another native ABI, another interface of the module's own.
MISFITS = [("1.0.0", 5, _native_host.HOST_API_VERSION), (RUNNING, 4, _native_host.HOST_API_VERSION),
           (RUNNING, 5, _native_host.HOST_API_VERSION - 1)]


def test_cmake_builds_every_host_source():
    """CMakeLists.txt's extension target lists every cuda/host/*.cpp (a
    source left out links a module whose import fails, silently leaving
    every call to the Python path)."""
    root = Path(__file__).resolve().parents[1]
    cmake = (root / "CMakeLists.txt").read_text()
    target = re.search(r"Python_add_library\(_native_host_ext MODULE WITH_SOABI([^)]*)\)", cmake)
    listed = sorted(target.group(1).split())
    assert listed == sorted(f"cuda/host/{p.name}" for p in (root / "cuda/host").glob("*.cpp"))


@pytest.mark.parametrize("torch_version, abi, host_api", MISFITS)
def test_a_module_for_another_torch_or_abi_is_refused(loader, torch_version, abi, host_api):
    setup(loader, fake_module(torch_version, abi, host_api))
    assert _native_host.extension() is None


@pytest.mark.parametrize("torch_version, abi, host_api", MISFITS)
def test_a_named_module_that_does_not_fit_is_an_error(loader, torch_version, abi, host_api):
    setup(loader, fake_module(torch_version, abi, host_api), env_path="/x/module.so")
    with pytest.raises(_native.NativeError, match="built for"):
        _native_host.extension()


def test_a_missing_module_is_no_error_unless_named(loader):
    setup(loader, None, import_error=ImportError("no module"))
    assert _native_host.extension() is None
    _native_host.extension.cache_clear()
    setup(loader, None, env_path="/x/module.so", import_error=ImportError("undefined symbol"))
    with pytest.raises(_native.NativeError, match="could not be loaded: undefined symbol"):
        _native_host.extension()


def test_no_native_library_no_extension(loader):
    loader.setattr(_native, "library", lambda: None)
    assert _native_host.extension() is None


def test_config_turns_it_off(loader):
    module = fake_module(RUNNING, 5)
    setup(loader, module)
    assert _native_host.active() is module
    loader.setattr(config, "native_host", False)
    assert _native_host.active() is None


def test_library_errors_from_the_extension_raise_native_error(monkeypatch):
    """A launch from C++ whose library call fails raises NativeError, as the
    ctypes path does (torch gives it as a RuntimeError); any other error
    (out of memory, ...) keeps its type."""
    failures = iter([RuntimeError("pyg_ioaware native error 1 in pygio_spmm_csr: values_dtype "
                                  "must be float32"),
                     torch.OutOfMemoryError("CUDA out of memory")])

    def spmm_csr(*args):
        raise next(failures)

    monkeypatch.setattr(_native_host, "active", lambda: types.SimpleNamespace(spmm_csr=spmm_csr))
    rowptr, col = torch.tensor([0, 1, 2]), torch.tensor([0, 1])
    args = (rowptr, col, torch.ones(2), torch.zeros(2, 3), None, torch.zeros(2, 3), False, False)
    with pytest.raises(_native.NativeError, match="values_dtype"):
        _native.spmm_csr(*args)
    with pytest.raises(torch.OutOfMemoryError):
        _native.spmm_csr(*args)
