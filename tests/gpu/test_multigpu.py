"""Several GPUs in one process: every kernel launches on the device of its tensors, on that
device's current stream, whatever the current device is (issue 6). Needs two CUDA devices;
skipped with the reason otherwise."""

import threading

import pytest
import torch

import aotinfer
from aotinfer import reference

pytestmark = [
    pytest.mark.multigpu,
    pytest.mark.skipif(
        torch.cuda.device_count() < 2,
        reason=f"needs 2 CUDA devices, {torch.cuda.device_count()} visible",
    ),
]


def _probs(device, batch=8, vocab=32000, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.softmax(torch.randn(batch, vocab, generator=g) * 3, -1).to(device)


def _on_both(fn):
    """fn(device) on cuda:1 with cuda:0 current, then on cuda:0; returns both results on CPU."""
    with torch.cuda.device(0):
        far = fn(torch.device("cuda:1"))
    near = fn(torch.device("cuda:0"))
    return far, near


def test_softmax_on_the_second_device():
    def run(dev):
        logits = _probs(dev).log().to(torch.bfloat16)
        out = aotinfer.softmax(logits, 0.8)
        assert out.device == dev
        return out.cpu()

    far, near = _on_both(run)
    torch.testing.assert_close(far, near, rtol=0, atol=0)


@pytest.mark.parametrize(
    "sampler",
    [
        lambda p: aotinfer.sampling_from_probs(p, seed=7, offset=0),
        lambda p: aotinfer.top_k_sampling_from_probs(p, 20, seed=7, offset=0),
        lambda p: aotinfer.top_p_sampling_from_probs(p, 0.8, seed=7, offset=0),
        lambda p: aotinfer.min_p_sampling_from_probs(p, 0.1, seed=7, offset=0),
        lambda p: aotinfer.top_k_top_p_sampling_from_probs(p, 20, 0.8, seed=7, offset=0),
        lambda p: aotinfer.sampling_from_logits(p.log(), seed=7, offset=0),
        lambda p: aotinfer.top_k_renorm_probs(p, 20),
        lambda p: aotinfer.top_p_renorm_probs(p, 0.8),
        lambda p: aotinfer.top_k_mask_logits(p.log(), 20),
    ],
)
def test_samplers_on_the_second_device(sampler):
    far, near = _on_both(lambda dev: sampler(_probs(dev)).cpu())
    assert torch.equal(far, near)


def _decode_inputs(dev, batch=4, kv=300, page=16, hq=32, hkv=8, d=128):
    g = torch.Generator(device="cpu").manual_seed(3)
    pages = (kv + page - 1) // page
    cache = torch.randn(batch * pages, 2, page, hkv, d, generator=g).to(dev, torch.bfloat16)
    q = torch.randn(batch, hq, d, generator=g).to(dev, torch.bfloat16)
    indptr = torch.arange(0, batch * pages + 1, pages, dtype=torch.int32, device=dev)
    indices = torch.randperm(batch * pages, generator=g).to(dev, torch.int32)
    last = torch.full((batch,), kv - page * (pages - 1), dtype=torch.int32, device=dev)
    return q, cache, indptr, indices, last


def test_batch_and_single_decode_on_the_second_device():
    def run(dev):
        q, cache, indptr, indices, last = _decode_inputs(dev)
        ws = torch.empty(32 << 20, dtype=torch.uint8, device=dev)
        w = aotinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
        w.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16)
        out = w.run(q, cache)
        k = cache[:19, 0].reshape(-1, 8, 128)
        single = aotinfer.single_decode_with_kv_cache(q[0], k, k)
        assert out.device == dev and single.device == dev
        return out.cpu(), single.cpu()

    far, near = _on_both(run)
    assert torch.equal(far[0], near[0]) and torch.equal(far[1], near[1])


def test_tensors_on_two_devices_get_a_clear_error():
    probs = _probs("cuda:0")
    top_k = torch.full((probs.size(0),), 5, dtype=torch.int32, device="cuda:1")
    with pytest.raises(ValueError, match="top_k"):
        aotinfer.top_k_sampling_from_probs(probs, top_k)
    with pytest.raises(ValueError, match="temperature"):
        aotinfer.softmax(probs, torch.ones(probs.size(0), device="cuda:1"))


def test_two_threads_each_drive_one_device():
    results, errors = {}, []

    def worker(index):
        try:
            dev = torch.device(f"cuda:{index}")
            torch.cuda.set_device(dev)
            for _ in range(20):
                probs = _probs(dev, seed=index)
                results[index] = aotinfer.top_p_sampling_from_probs(probs, 0.9, seed=1, offset=0)
            torch.cuda.synchronize(dev)
        except Exception as exc:  # reported below, in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in (0, 1):
        probs = _probs(f"cuda:{i}", seed=i)
        again = aotinfer.top_p_sampling_from_probs(probs, 0.9, seed=1, offset=0)
        assert torch.equal(results[i].cpu(), again.cpu())


def test_cuda_graph_capture_on_the_second_device():
    dev = torch.device("cuda:1")
    logits = _probs(dev).log()
    with torch.cuda.device(dev):
        aotinfer.softmax(logits)  # provider import and warm-up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = aotinfer.softmax(logits)
        logits.copy_(_probs(dev, seed=5).log())
        graph.replay()
        torch.cuda.synchronize()
    torch.testing.assert_close(out.cpu(), reference.softmax(logits.cpu()), rtol=1e-4, atol=1e-6)
