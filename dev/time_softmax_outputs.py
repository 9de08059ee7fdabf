"""Kernel lab: CPU time of the outputs an eager softmax, renorm or top-k mask call builds for
the provider (no GPU needed), the figures quoted in dev/NOTES.md item 56 and in the
docstring of _sampling_ops._probs_and_softmax_workspace. Each line times the current code
against what it replaced (reproduced here), in this process, best of seven rounds
(dev/before_after.py), on meta tensors (they take torch's dispatcher like CUDA tensors and
allocate nothing) or, given DEVICE, on that device's tensors (cuda: the caching allocator
too).

- the softmax's probabilities and workspace: one 1-D buffer carved by a slice, a view and a
  second slice, then view() of both (before) against one 2-D buffer, one slice and both
  provider views built from its pointer (now);
- the output of renorm / top-k mask: torch.empty(*shape) and view() (before) against the
  view built from what was just allocated (now).

    python dev/time_softmax_outputs.py [OUT.txt [DEVICE]]
"""

from __future__ import annotations

import sys

import torch
from before_after import report

from aotinfer import _sampling_ops, _views

ROWS, VOCAB = 1, 32000


def carve_before(shape, device):
    """_probs_and_softmax_workspace before this change, with the view() calls the launch made."""
    rows, vocab = shape
    n = rows * vocab
    start = -(-n // 4) * 4
    ws = 2 * rows * -(-vocab // 1024)
    buf = torch.empty(start + ws, dtype=torch.float32, device=device)
    probs, workspace = buf[:n].view(rows, vocab), buf[start:]
    return probs, _views.view(probs), _views.view(workspace)


def output_before(x):
    out = torch.empty(*x.shape, dtype=x.dtype, device=x.device)
    return out, _views.view(out)


def main() -> None:
    device = torch.device(sys.argv[2] if len(sys.argv) > 2 else "meta")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    x = torch.empty(ROWS, VOCAB, device=device)
    pairs = {
        "softmax probs + workspace": (
            lambda: carve_before((ROWS, VOCAB), device),
            lambda: _sampling_ops._probs_and_softmax_workspace((ROWS, VOCAB), device),
        ),
        "renorm / mask output": (lambda: output_before(x), lambda: _sampling_ops._matrix_like(x)),
    }
    out = sys.argv[1] if len(sys.argv) > 1 else None
    report(pairs, f", {ROWS} x {VOCAB} on {device} tensors", out)


if __name__ == "__main__":
    main()
