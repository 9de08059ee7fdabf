"""Kernel lab: one top-k and one top-p sampling call at batch 1 and 128 (vocab 128256, flat
probabilities), for `ncu -k regex:sample_kernel` to profile. Not a benchmark."""

import torch

import aotinfer

for batch in (1, 128):
    probs = torch.softmax(torch.randn(batch, 128256, device="cuda"), -1)
    aotinfer.top_k_sampling_from_probs(probs, 50)
    aotinfer.top_p_sampling_from_probs(probs, 0.9)
torch.cuda.synchronize()
