"""The provider's kernel switches (README, "How a provider is chosen"): an unknown value is a
ValueError naming the variable and the accepted values, raised before any launch; a valid
pin gives the same results as the provider's own choice.

Written in the session whose device time ran out before it could run them; the launchers
they exercise ran in that session's GPU suite through the other tests' pins.
"""

import pytest
import torch

import aotinfer

DEV = "cuda"


def _probs(batch=2, vocab=32000, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.softmax(torch.randn(batch, vocab, device=DEV, generator=g), -1)


def _single_decode_inputs(kv_len=300, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(32, 128, device=DEV, generator=g).to(torch.bfloat16)
    k = torch.randn(kv_len, 8, 128, device=DEV, generator=g).to(torch.bfloat16)
    v = torch.randn(kv_len, 8, 128, device=DEV, generator=g).to(torch.bfloat16)
    return q, k, v


def _one_request_decode(kv_len):
    """A batch decode of one bf16 request of kv_len keys (32/8 heads, d128, pages of 16)."""
    g = torch.Generator(device=DEV).manual_seed(kv_len)
    pages = -(-kv_len // 16)
    cache = torch.randn(pages, 2, 16, 8, 128, device=DEV, generator=g).to(torch.bfloat16)
    indptr = torch.tensor([0, pages], dtype=torch.int32, device=DEV)
    indices = torch.arange(pages, dtype=torch.int32, device=DEV)
    last = torch.tensor([kv_len - 16 * (pages - 1)], dtype=torch.int32, device=DEV)
    w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(
        torch.empty(64 << 20, dtype=torch.uint8, device=DEV), use_tensor_cores=True
    )
    w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16)
    q = torch.randn(1, 32, 128, device=DEV, generator=g).to(torch.bfloat16)
    return w.run(q, cache)


@pytest.mark.parametrize(
    "name, call",
    [
        (
            "AOTINFER_DECODE_KERNEL",
            lambda: aotinfer.single_decode_with_kv_cache(*_single_decode_inputs()),
        ),
        (
            "AOTINFER_DECODE_STAGES",
            lambda: aotinfer.single_decode_with_kv_cache(*_single_decode_inputs()),
        ),
        (
            "AOTINFER_SAMPLING_KERNEL",
            lambda: aotinfer.top_p_sampling_from_probs(_probs(), 0.9, seed=1, offset=0),
        ),
        # Read where the cluster kernels launch (sm_90+).
        (
            "AOTINFER_SAMPLING_CLUSTER_CTAS",
            lambda: aotinfer.top_k_sampling_from_probs(_probs(1, 128256), 5, seed=1, offset=0),
        ),
        # Rows shorter than the cluster kernels take, so the row kernels' launcher runs.
        (
            "AOTINFER_SAMPLING_ROW_THREADS",
            lambda: aotinfer.top_p_sampling_from_probs(_probs(2, 1000), 0.9, seed=1, offset=0),
        ),
        (
            "AOTINFER_SAMPLING_TOP_K_LIST",
            lambda: aotinfer.top_k_sampling_from_probs(_probs(2, 1000), 5, seed=1, offset=0),
        ),
        (
            "AOTINFER_SAMPLING_TOP_P",
            lambda: aotinfer.top_p_sampling_from_probs(_probs(2, 1000), 0.9, seed=1, offset=0),
        ),
        # Read where the rejection row kernels launch (the cluster kernels test by a pass).
        (
            "AOTINFER_SAMPLING_TOP_P_TEST",
            lambda: aotinfer.top_p_sampling_from_probs(_probs(2, 1000), 0.9, seed=1, offset=0),
        ),
        # The top-p sampler's threshold search (the test pins it: by rejection the sampler
        # gathers nothing and never reads the switch) in the row kernels (pinned too: the
        # cluster kernels do not gather).
        (
            "AOTINFER_SAMPLING_GATHER",
            lambda: aotinfer.top_p_sampling_from_probs(_probs(2, 65536), 0.9, seed=1, offset=0),
        ),
        # One request in 8 splits (kv 1024, pages of 16): the cluster merge's launcher branch.
        ("AOTINFER_DECODE_CLUSTER_MERGE", lambda: _one_request_decode(1024)),
        ("AOTINFER_SOFTMAX_KERNEL", lambda: aotinfer.softmax(_probs())),
        # A shape the split pair serves (sm_90+), so the launcher reads its chunk switch.
        ("AOTINFER_SOFTMAX_SPLIT_CHUNK_KB", lambda: aotinfer.softmax(_probs(100, 20000))),
    ],
)
def test_unknown_switch_values_are_refused(name, call, monkeypatch):
    if name == "AOTINFER_SOFTMAX_SPLIT_CHUNK_KB" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the split softmax needs sm_90")
    if name == "AOTINFER_SAMPLING_CLUSTER_CTAS" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the cluster sampling kernels need sm_90")
    if name == "AOTINFER_DECODE_CLUSTER_MERGE" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("the cluster merge needs sm_90")
    if name == "AOTINFER_SAMPLING_GATHER":
        monkeypatch.setenv("AOTINFER_SAMPLING_KERNEL", "rowwise")
        monkeypatch.setenv("AOTINFER_SAMPLING_TOP_P", "threshold")
    monkeypatch.setenv(name, "bogus")
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("stages", ["2", "3", "4"])
def test_decode_stage_counts_agree(stages, monkeypatch):
    q, k, v = _single_decode_inputs(kv_len=5000)
    want = aotinfer.single_decode_with_kv_cache(q, k, v)
    monkeypatch.setenv("AOTINFER_DECODE_STAGES", stages)
    torch.testing.assert_close(
        aotinfer.single_decode_with_kv_cache(q, k, v), want, rtol=0, atol=8e-3
    )
