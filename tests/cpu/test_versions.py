"""Facts kept in two places agree: versions, the provider table, the ABI version, dtype codes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

from aotinfer import _arches, _providers, _views
from aotinfer._version import __version__

ROOT = Path(__file__).resolve().parents[2]
PROVIDER_DIRS = sorted(p.parent for p in (ROOT / "providers").glob("*/pyproject.toml"))


def _toml_regex(text: str) -> dict:
    """The fields these tests read, for Python < 3.11 (no tomllib)."""
    project = {
        "name": re.search(r'^name = "([^"]+)"', text, re.M).group(1),
        "version": re.search(r'^version = "([^"]+)"', text, re.M).group(1),
    }
    block = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if block:
        project["optional-dependencies"] = {
            name: re.findall(r'"([^"]+)"', body)
            for name, body in re.findall(r"^(\w+) = \[(.*?)\]", block.group(1), re.M | re.S)
        }
    eps = re.search(
        r'^\[project\.entry-points\."aotinfer\.providers"\]\n(.*?)(?=^\[|\Z)', text, re.M | re.S
    )
    if eps:
        project["entry-points"] = {
            "aotinfer.providers": dict(re.findall(r'^(\w+) = "([^"]+)"', eps.group(1), re.M))
        }
    return {"project": project}


def _toml(path: Path) -> dict:
    text = path.read_text()
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib.loads(text)
    return _toml_regex(text)


def test_provider_dirs_are_the_table():
    assert [p.name for p in PROVIDER_DIRS] == sorted(_arches.PROVIDERS)


@pytest.mark.parametrize("provider_dir", PROVIDER_DIRS, ids=lambda p: p.name)
def test_provider_pyproject(provider_dir):
    project = _toml(provider_dir / "pyproject.toml")["project"]
    arch = provider_dir.name
    assert project["name"] == f"aotinfer-{arch}"
    assert project["version"] == __version__
    assert project["entry-points"]["aotinfer.providers"] == {arch: f"aotinfer_{arch}"}


def test_core_pyproject_version():
    assert _toml(ROOT / "core" / "pyproject.toml")["project"]["version"] == __version__


def test_core_extras_pin_every_provider_at_the_core_version():
    extras = _toml(ROOT / "core" / "pyproject.toml")["project"]["optional-dependencies"]
    for arch in _arches.PROVIDERS:
        assert extras[arch] == [f"aotinfer-{arch}=={__version__}"]
    pins = [r for r in extras["all"] if r.startswith("aotinfer-")]
    assert pins == [f"aotinfer-{arch}=={__version__}" for arch in _arches.PROVIDERS]
    for name, reqs in extras.items():
        for req in reqs:
            if req.startswith("aotinfer-"):
                assert req.endswith(f"=={__version__}"), (name, req)


def _cmake_table():
    text = (ROOT / "cmake" / "arches.cmake").read_text()
    providers = re.search(r"^set\(AOTINFER_PROVIDERS ([^)]*)\)", text, re.M).group(1).split()
    targets = {
        name: tuple(f"sm_{t}" for t in body.split())
        for name, body in re.findall(r"^set\(AOTINFER_TARGETS_(\w+) ([^)]*)\)", text, re.M)
    }
    return providers, targets


def test_cmake_table_equals_python_table():
    providers, targets = _cmake_table()
    assert tuple(providers) == _arches.PROVIDERS
    assert targets == _arches.PROVIDER_TARGETS


def test_abi_version_matches_cmake():
    text = (ROOT / "CMakeLists.txt").read_text()
    [abi] = re.findall(r"^set\(AOTINFER_ABI_VERSION (\d+)\)", text, re.M)
    assert int(abi) == _providers.ABI_VERSION


# enum class DType name in tensor_view.h -> torch dtype attribute name
_DTYPE_NAMES = {
    "kFloat32": "float32",
    "kFloat16": "float16",
    "kBFloat16": "bfloat16",
    "kInt32": "int32",
    "kInt64": "int64",
    "kUInt8": "uint8",
    "kBool": "bool",
    "kFloat8E4M3": "float8_e4m3fn",
    "kFloat8E5M2": "float8_e5m2",
    "kUInt64": "uint64",
}


def test_dtype_codes_match_tensor_view_h():
    text = (ROOT / "providers" / "csrc" / "common" / "tensor_view.h").read_text()
    body = re.search(r"enum class DType\b[^{]*\{(.*?)\};", text, re.S).group(1)
    enum = {name: int(code) for name, code in re.findall(r"(k\w+)\s*=\s*(\d+)\s*,", body)}
    assert set(enum) == set(_DTYPE_NAMES), "map every enum name to a torch dtype here"
    expected = {
        getattr(torch, _DTYPE_NAMES[name]): code
        for name, code in enum.items()
        if hasattr(torch, _DTYPE_NAMES[name])  # torch.uint64 needs torch >= 2.3
    }
    assert _views.DTYPE_CODES == expected


_PYPROJECTS = [ROOT / "core" / "pyproject.toml"] + [p / "pyproject.toml" for p in PROVIDER_DIRS]


@pytest.mark.parametrize("path", _PYPROJECTS, ids=lambda p: p.parent.name)
def test_regex_fallback_reads_what_tomllib_reads(path):
    tomllib = pytest.importorskip("tomllib")
    full = tomllib.loads(path.read_text())["project"]
    fallback = _toml_regex(path.read_text())["project"]
    for key, value in fallback.items():
        assert value == full[key], key
    for key in ("name", "version", "optional-dependencies", "entry-points"):
        assert (key in full) == (key in fallback), key
