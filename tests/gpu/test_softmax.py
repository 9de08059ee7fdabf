"""aotinfer.softmax on CUDA against the reference, on fresh random inputs."""

import pytest
import torch

import aotinfer
from aotinfer import reference

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _logits(batch, vocab, dtype, seed, scale=3.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(batch, vocab, device="cuda", generator=g) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 7, 128])
@pytest.mark.parametrize("vocab", [1, 111, 4097, 32000, 128256, 151936])
@pytest.mark.parametrize("temperature", [None, 0.7, "per_row"])
def test_softmax_matches_reference(dtype, batch, vocab, temperature):
    logits = _logits(batch, vocab, dtype, seed=batch * 1000 + vocab)
    if temperature == "per_row":
        temperature = torch.rand(batch, device="cuda") * 1.5 + 0.25
    probs = aotinfer.softmax(logits, temperature)
    expected = reference.softmax(logits, temperature, compute_dtype=torch.float64)
    assert probs.dtype == torch.float32 and probs.shape == logits.shape
    assert not probs.isnan().any()
    torch.testing.assert_close(probs, expected, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        probs.sum(-1), torch.ones(batch, device="cuda"), rtol=1e-4, atol=1e-4
    )


def test_softmax_writes_every_element_of_its_poisoned_output():
    # conftest.poisoned_outputs fills the output with NaN before the kernel runs.
    logits = _logits(33, 5003, torch.bfloat16, seed=3)
    probs = aotinfer.softmax(logits)
    assert not probs.isnan().any()
    torch.testing.assert_close(probs, reference.softmax(logits), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("offset", [1, 3])
def test_softmax_unaligned_and_strided_rows(offset):
    # Rows that do not start on 16-byte boundaries take the scalar path.
    base = _logits(6, 1000 + offset, torch.float16, seed=offset)
    logits = base[:, offset:]
    probs = aotinfer.softmax(logits, 1.3)
    torch.testing.assert_close(probs, reference.softmax(logits, 1.3), rtol=1e-4, atol=1e-6)


def _poison_rows(logits, finite_at, nan_at):
    """Rows 0-3 of `logits`: every third entry -inf; all -inf but `finite_at` (one-hot); no
    finite entry (a NaN row, like torch); one NaN at `nan_at` (poisons its row only)."""
    logits[0, ::3] = float("-inf")
    logits[1, :] = float("-inf")
    logits[1, finite_at] = 2.0
    logits[2, :] = float("-inf")
    logits[3, nan_at] = float("nan")


def _check_poisoned_rows(logits, probs, finite_at):
    """Rows 0-3 as _poison_rows left them; returns the reference for the remaining rows."""
    expected = reference.softmax(logits)
    torch.testing.assert_close(probs[0], expected[0], rtol=1e-4, atol=1e-6)
    assert (probs[0, ::3] == 0).all()
    assert probs[1, finite_at] == 1.0 and probs[1].sum() == 1.0
    assert probs[2].isnan().all()
    assert probs[3].isnan().all()
    return expected


def test_softmax_infinities_and_nan_rows():
    logits = _logits(4, 3000, torch.float32, seed=9)
    _poison_rows(logits, finite_at=17, nan_at=5)
    _check_poisoned_rows(logits, aotinfer.softmax(logits), finite_at=17)


def test_softmax_extreme_logits_stay_finite():
    logits = _logits(3, 50000, torch.bfloat16, seed=11, scale=3000.0)
    probs = aotinfer.softmax(logits)
    assert not probs.isnan().any()
    torch.testing.assert_close(probs, reference.softmax(logits), rtol=1e-4, atol=1e-6)


def test_softmax_cuda_graph_capture_and_replay():
    batch, vocab = 16, 32000
    static_logits = _logits(batch, vocab, torch.bfloat16, seed=21)
    static_temp = torch.rand(batch, device="cuda") + 0.5
    aotinfer.softmax(static_logits, static_temp)  # warm up (provider import) outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_probs = aotinfer.softmax(static_logits, static_temp)
    for seed in (22, 23):
        static_logits.copy_(_logits(batch, vocab, torch.bfloat16, seed=seed))
        static_temp.copy_(torch.rand(batch, device="cuda") + 0.5)
        static_probs.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = reference.softmax(static_logits, static_temp)
        torch.testing.assert_close(static_probs, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("enable_pdl", [False, True])
def test_softmax_pdl_flag_gives_same_result(enable_pdl):
    logits = _logits(8, 7777, torch.float16, seed=31)
    probs = aotinfer.softmax(logits, 0.9, enable_pdl=enable_pdl)
    torch.testing.assert_close(probs, reference.softmax(logits, 0.9), rtol=1e-4, atol=1e-6)


def test_softmax_rejects_bad_input_before_launch():
    logits = _logits(4, 100, torch.float32, seed=1)
    with pytest.raises(ValueError, match="temperature must have length 4"):
        aotinfer.softmax(logits, torch.ones(3, device="cuda"))
    with pytest.raises(ValueError, match="temperature must be on"):
        aotinfer.softmax(logits, torch.ones(4))
    with pytest.raises(ValueError, match="logits must be a 2-D tensor"):
        aotinfer.softmax(logits[0])


# Each kernel pinned (AOTINFER_SOFTMAX_KERNEL), on shapes where auto would pick another one:
# the split pair at batch 1 and on odd vocabularies (its last chunk is short, and with an
# unaligned row start it takes the scalar path with 1024-element chunks), the cluster kernel
# at batch 128, split_cluster at small batches (its 32 KB chunks: 8 per row at 1 x 128256, 2
# elsewhere) and falling back to the pair (float32 x 151936 would need 76 KB chunks);
# split_cluster_regs is split_cluster's register form (2-byte logits on aligned rows; the
# others fall back to its plain form).
_PINNED_KERNELS = ["rowwise", "cluster", "split", "split_cluster", "split_cluster_regs"]
_SPLIT_KERNELS = ["split", "split_cluster", "split_cluster_regs"]


@pytest.mark.parametrize("kernel", _PINNED_KERNELS)
@pytest.mark.parametrize(
    "dtype, batch, vocab, offset",
    [
        (torch.bfloat16, 1, 128256, 0),
        (torch.bfloat16, 130, 32001, 0),
        (torch.float16, 5, 20000, 3),
        (torch.float32, 3, 151936, 1),
        (torch.float32, 128, 16384, 0),
    ],
)
def test_softmax_pinned_kernels_match_reference(kernel, dtype, batch, vocab, offset, monkeypatch):
    monkeypatch.setenv("AOTINFER_SOFTMAX_KERNEL", kernel)
    logits = _logits(batch, vocab + offset, dtype, seed=vocab + batch)[:, offset:]
    temperature = torch.rand(batch, device="cuda") + 0.5
    probs = aotinfer.softmax(logits, temperature)
    expected = reference.softmax(logits, temperature, compute_dtype=torch.float64)
    torch.testing.assert_close(probs, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kernel", _PINNED_KERNELS)
def test_softmax_pinned_kernels_infinities_and_nan_rows(kernel, monkeypatch):
    # Long rows, so that the split pair cuts each into chunks: the NaN and the only finite
    # entry sit in chunks of their own, and row 1's other chunks are all -inf.
    monkeypatch.setenv("AOTINFER_SOFTMAX_KERNEL", kernel)
    vocab = 40000
    logits = _logits(5, vocab, torch.bfloat16, seed=41)
    _poison_rows(logits, finite_at=30001, nan_at=25000)
    logits[4] *= 1000.0  # extreme logits stay finite
    probs = aotinfer.softmax(logits)
    expected = _check_poisoned_rows(logits, probs, finite_at=30001)
    assert not probs[4].isnan().any()
    torch.testing.assert_close(probs[4], expected[4], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kernel", _SPLIT_KERNELS)
def test_softmax_split_in_a_cuda_graph_with_new_inputs(kernel, monkeypatch):
    monkeypatch.setenv("AOTINFER_SOFTMAX_KERNEL", kernel)
    batch, vocab = 128, 128256
    static_logits = _logits(batch, vocab, torch.bfloat16, seed=51)
    aotinfer.softmax(static_logits, 0.8)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_probs = aotinfer.softmax(static_logits, 0.8)
    for seed in (52, 53):
        static_logits.copy_(_logits(batch, vocab, torch.bfloat16, seed=seed))
        static_probs.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(
            static_probs, reference.softmax(static_logits, 0.8), rtol=1e-4, atol=1e-6
        )


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 9,
    reason="the split pair needs sm_90",
)
@pytest.mark.parametrize("kernel", _SPLIT_KERNELS)
@pytest.mark.parametrize("chunk_kb", ["4", "8", "16", "32"])
@pytest.mark.parametrize(
    "dtype, batch, vocab, offset",
    [
        (torch.bfloat16, 70, 50257, 0),
        (torch.float16, 3, 40000, 5),
        (torch.float32, 9, 33333, 2),
        (torch.bfloat16, 33, 40000, 0),
    ],
)
def test_softmax_split_chunk_sizes_match_reference(
    kernel, chunk_kb, dtype, batch, vocab, offset, monkeypatch
):
    # Every chunk size (AOTINFER_SOFTMAX_SPLIT_CHUNK_KB), on rows whose chunks start off the
    # 16-byte grid (odd vocabularies, sliced rows): the bulk copy takes the aligned interior,
    # threads the head and tail. split_cluster grows a chunk that would leave a row more than
    # one cluster's chunks, so some of its cases run longer chunks than the pin. The last case's
    # rows all start on the 16-byte grid, so bulk copies alone carry its chunks.
    monkeypatch.setenv("AOTINFER_SOFTMAX_KERNEL", kernel)
    monkeypatch.setenv("AOTINFER_SOFTMAX_SPLIT_CHUNK_KB", chunk_kb)
    logits = _logits(batch, vocab + offset, dtype, seed=vocab + int(chunk_kb))[:, offset:]
    probs = aotinfer.softmax(logits, 0.9)
    torch.testing.assert_close(probs, reference.softmax(logits, 0.9), rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.get_device_capability()[0] < 9,
    reason="the split pair needs sm_90",
)
@pytest.mark.parametrize(
    "dtype, batch, vocab, offset",
    [
        (torch.bfloat16, 300, 50257, 3),
        (torch.float32, 160, 33333, 1),
        (torch.bfloat16, 512, 128256, 0),
    ],
)
@pytest.mark.parametrize("kernel", _SPLIT_KERNELS)
def test_softmax_split_multi_wave_batches_match_reference(
    kernel, dtype, batch, vocab, offset, monkeypatch
):
    # Batches of more chunks than one wave of CTAs holds, with per-row temperatures and rows off
    # the 16-byte grid.
    monkeypatch.setenv("AOTINFER_SOFTMAX_KERNEL", kernel)
    logits = _logits(batch, vocab + offset, dtype, seed=batch)[:, offset:]
    t = torch.rand(batch, device="cuda", generator=torch.Generator("cuda").manual_seed(3)) + 0.5
    probs = aotinfer.softmax(logits, t)
    torch.testing.assert_close(probs, reference.softmax(logits, t), rtol=1e-4, atol=1e-6)
