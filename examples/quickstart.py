"""aotinfer quickstart: softmax over a batch of logits, on the GPU when there is one and a
provider serves it, otherwise on the CPU reference path. Says which one served it."""

import torch

import aotinfer

device = "cuda" if torch.cuda.is_available() else "cpu"
logits = torch.randn(4, 32000, device=device).to(torch.bfloat16)
probs = aotinfer.softmax(logits, temperature=0.8)

if device == "cuda":
    from aotinfer._providers import provider_for_device

    arch = provider_for_device(0).manifest.arch
    served = f"CUDA kernel from aotinfer-{arch} on {torch.cuda.get_device_name(0)}"
else:
    served = "CPU reference path (no CUDA device visible)"
expected = torch.softmax(logits.float() / 0.8, dim=-1)
shape = tuple(logits.shape)
print(f"aotinfer {aotinfer.__version__}: softmax of {shape} bf16 logits served by {served}")
print(f"  row sums: {probs.sum(-1).tolist()}")
print(f"  max |probs - torch.softmax|: {(probs - expected).abs().max().item():.2e}")
