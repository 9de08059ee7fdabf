"""GPU tests: every test here carries the `gpu` marker and skips, with the reason, when no
CUDA device is visible."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    no_gpu = not torch.cuda.is_available()
    for item in items:
        if "tests/gpu/" not in str(item.fspath).replace("\\", "/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if no_gpu:
            item.add_marker(pytest.mark.skip(reason="no CUDA device is visible"))


def poison(shape, dtype, device="cuda"):
    """An output-sized tensor full of NaN (or -1 for integers) so unwritten elements show."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, -1, dtype=dtype, device=device)


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every output aotinfer allocates with torch.empty starts as NaN (floats) or -1 (ints),
    so an element the kernel forgot to write fails the comparison instead of passing on
    stale memory."""
    real_empty = torch.empty

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        # Tensors that require grad are torch.compile's own (its graph passes allocate them),
        # never an aotinfer output; so are traced ones (fake / functional subclasses): AOT
        # tracing reaches this function from inside torch's own decompositions (new_empty),
        # below functionalisation, and inductor then refuses the fill's unfunctionalised
        # copy_. Compiled outputs are poisoned by passing them in (test_decode's compile test).
        if t.is_cuda and not t.requires_grad and type(t) is torch.Tensor:
            t.fill_(float("nan") if t.is_floating_point() else -1)
        return t

    monkeypatch.setattr(torch, "empty", empty)
