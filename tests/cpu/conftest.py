"""Fixtures shared by the CPU provider tests: fake manifests and a clean choice cache."""

from __future__ import annotations

import pytest

from aotinfer import _providers
from aotinfer._version import __version__

# The provider table as the tests expect it, written out by hand (not read from _arches) so
# that a wrong table in the core cannot make the choice tests agree with it.
TABLE = {
    "sm75": ("sm_75",),
    "sm80": ("sm_80", "sm_89"),
    "sm90a": ("sm_90a",),
    "sm100a": ("sm_100a",),
    "sm110a": ("sm_110a",),
    "sm120f": ("sm_120f",),
}


@pytest.fixture
def make_manifest():
    """A factory of fake Manifest objects; targets default to the arch's row of TABLE."""

    def make(arch, targets=None, *, version=__version__, abi=None, cuda="13.0", module=None):
        return _providers.Manifest(
            arch=arch,
            version=version,
            abi_version=_providers.ABI_VERSION if abi is None else abi,
            sass_targets=tuple(TABLE[arch] if targets is None else targets),
            cuda_version=cuda,
            module=module or f"aotinfer_{arch}",
        )

    return make


@pytest.fixture(autouse=True)
def _clean_provider_state(monkeypatch):
    """No inherited AOTINFER_* variables and no cached choice, before and after each test."""
    monkeypatch.delenv(_providers.ENV_PROVIDER, raising=False)
    monkeypatch.delenv(_providers.ENV_ALLOW_SKEW, raising=False)
    _providers.reset_cache()
    yield
    _providers.reset_cache()
