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


@pytest.mark.parametrize("kernel", ["rowwise", "cluster"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_provider_refuses_top_p_renorm_of_two_byte_probs(provider, dtype, kernel, monkeypatch):
    """top_p_renorm_probs reads probs as float32 (API.md), so the provider builds its top-p
    renorm kernels for float32 only and names the dtype it was given, before any launch;
    top-k renorm keeps the 2-byte types on both kernel paths."""
    from aotinfer._views import view
    from aotinfer.reference.sampling import FilterMode, renorm_probs

    monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", kernel)
    stream = torch.cuda.current_stream().cuda_stream
    probs = torch.softmax(torch.randn(2, 128256, device="cuda"), -1).to(dtype)
    out = torch.full_like(probs, float("nan"))

    def renorm(mode, k, p):
        provider.kernels.renorm(view(probs), view(out), int(mode), None, k, None, p, stream)

    with pytest.raises(ValueError, match=r"top-p probs must be float32, got (float16|bfloat16)"):
        renorm(FilterMode.TOP_P, 0, 0.9)
    torch.cuda.synchronize()
    assert out.isnan().all()  # nothing launched
    renorm(FilterMode.TOP_K, 5, 1.0)
    want = renorm_probs(probs, FilterMode.TOP_K, 5)
    torch.testing.assert_close(out.float(), want.float(), rtol=1.6e-2, atol=1e-3)
