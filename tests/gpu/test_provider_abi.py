"""The provider serving this GPU: ABI, build facts, and the dispatch table against the
kernels it was built with (an AOT miss is impossible by construction)."""

import pytest
import torch

import aotinfer
from aotinfer import _dispatch, _providers


@pytest.fixture(scope="module")
def provider():
    return _providers.provider_for_device(torch.cuda.current_device())


def test_provider_abi_and_build_info(provider):
    info = provider.kernels.build_info()
    assert provider.kernels.ABI_VERSION == _providers.ABI_VERSION
    assert info["arch"] == provider.manifest.arch
    assert info["version"] == aotinfer.__version__
    assert info["sass_targets"] == list(provider.manifest.sass_targets)
    for key in ("gencode", "cuda_version", "compiler", "source_revision"):
        assert info[key]


def test_every_dispatchable_variant_is_built(provider):
    built = set(provider.kernels.build_info()["kernels"])
    missing = [v for v in _dispatch.all_variants() if v not in built]
    assert not missing, f"dispatcher can select variants the provider lacks: {missing}"


def test_provider_rejects_mismatched_views_with_value_error(provider):
    logits = torch.randn(2, 10, device="cuda")
    probs = torch.empty(2, 11, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    from aotinfer._views import view

    with pytest.raises(ValueError, match="probs must have the shape of logits"):
        workspace = view(torch.empty(64, device="cuda"))
        provider.kernels.softmax(view(logits), view(probs), None, 1.0, workspace, False, stream)
