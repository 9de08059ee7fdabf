"""Where a sampling call's (seed, offset) come from when the caller passes none.

CUDA generators follow FlashInfer (API.md section 1.4): the generator's state is read as
``[seed, offset]`` (two int64), the offset is advanced by ``ceil(increment / 4) * 4`` and
written back, and the call uses the seed and the *advanced* offset. The state is read and
written through ``initial_seed`` / ``get_offset`` / ``set_offset`` (the same two words as
``get_state``, without building state tensors on every call). So the same generator
state gives the same tokens, and consecutive calls use fresh counters.

CPU generators (the reference path) cannot be advanced that way (their state is a
Mersenne Twister), so a call draws one 62-bit seed from the generator with
``torch.randint(0, 2**62, (1,), generator=g)`` and uses offset 0: the same generator state
again gives the same tokens, and the draw advances the generator. ``increment`` plays no
part there.

Increments per call (FlashInfer's): sampling_from_logits ``batch * V``;
sampling_from_probs and min_p ``batch``; top_p, top_k and top_k_top_p ``batch * 32``;
chain_speculative_sampling ``batch * (n + 1)``.
"""

from __future__ import annotations

import numbers
import operator
import struct
import threading
from typing import Optional, Tuple, Union

import torch

from . import _views
from .reference.philox import to_int64

CPU_SEED_BITS = 62
# Reading and advancing the offset is a read-modify-write: two threads sampling at once must
# not both read the same offset (they would draw the same numbers).
_state_lock = threading.Lock()


_STATE_WORDS = struct.Struct("=qq")  # [seed, offset] as int64 in native byte order


def advance_state(state: torch.Tensor, increment: int) -> Tuple[torch.Tensor, int, int]:
    """The CUDA-generator state arithmetic, on a 16-byte uint8 state tensor.

    Returns ``(new_state, seed, offset)``: ``new_state`` holds the same seed and the offset
    advanced by ``ceil(increment / 4) * 4``; ``seed`` and ``offset`` are the int64 values
    of the new state (the seed as its signed int64 view, like FlashInfer).

    The arithmetic runs on Python ints (struct), not tensor ops: it is on the host path of
    every sampling call, and the tensor version cost ~24 us per call on a 2-core VM.
    """
    nbytes = state.numel() * state.element_size()
    if nbytes != 16:
        raise ValueError(
            f"a CUDA generator state must be 16 bytes ([seed, offset] as int64), got {nbytes} bytes"
        )
    raw = bytes(state.detach().cpu().reshape(-1).view(torch.uint8).tolist())
    seed, offset = _STATE_WORDS.unpack(raw)
    offset += (int(increment) + 3) // 4 * 4
    new_state = torch.frombuffer(bytearray(_STATE_WORDS.pack(seed, offset)), dtype=torch.uint8)
    return new_state, seed, offset


# Default generators by the torch.device a sampling call passes (its input's), so the hot
# path skips building a device object; torch keeps one generator object per device for the
# life of the process (manual_seed reseeds it in place).
_defaults_by_device = {}


def default_generator(device: Union[torch.device, str, None]) -> torch.Generator:
    """The default generator of ``device`` (None: the current CUDA device)."""
    if type(device) is torch.device and device.index is not None:
        gen = _defaults_by_device.get(device)
        if gen is None:
            gen = _defaults_by_device.setdefault(device, _default_generator(device))
        return gen
    return _default_generator(device)


def _default_generator(device: Union[torch.device, str, None]) -> torch.Generator:
    # (Not the hot path: a sampling call's device is cached by default_generator.)
    given = device
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device}"  # what torch.device(index) means where CUDA is the accelerator
    try:
        dev = torch.device("cuda") if device is None else torch.device(device)
    except (RuntimeError, TypeError):  # a bad string, a negative index, a float...
        raise ValueError(
            f"device must be a CUDA or CPU device (torch.device, str or int), got {given!r}"
        ) from None
    if dev.type == "cpu":
        return torch.default_generator
    if dev.type != "cuda":
        raise ValueError(f"device must be a CUDA or CPU device, got {dev}")
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(f"device is {dev}, but this torch sees no CUDA device")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    if index >= count:
        raise ValueError(f"device is {dev}, but this torch sees {count} CUDA device(s)")
    return torch.cuda.default_generators[index]


def get_seed_and_offset(
    increment: int,
    generator: Optional[torch.Generator] = None,
    device: Union[torch.device, str, None] = None,
) -> Tuple[int, int]:
    """The ``(seed, offset)`` a sampling call uses, advancing ``generator``.

    Parameters
    ----------
    increment : int
        How far the call advances a CUDA generator (rounded up to a multiple of 4).
    generator : torch.Generator, optional
        ``None``: the default generator of ``device``.
    device : torch.device or str, optional
        Picks the default generator when ``generator`` is None; ``None`` means the
        current CUDA device, as in FlashInfer.

    Returns
    -------
    (int, int)
        CUDA generator: its seed and its offset after the advance. CPU generator: a
        62-bit seed drawn from it, and 0.
    """
    if isinstance(increment, bool) or not isinstance(increment, numbers.Integral) or increment < 0:
        raise ValueError(f"increment must be an int >= 0, got {increment!r}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(
            f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
    return advance_generator(operator.index(increment), generator, device)


def advance_generator(
    increment: int,
    generator: Optional[torch.Generator] = None,
    device: Union[torch.device, str, None] = None,
) -> Tuple[int, int]:
    """get_seed_and_offset without its argument checks: the samplers' own call, whose
    arguments are checked already (it runs on every eager call)."""
    gen = generator if generator is not None else default_generator(device)
    if gen.device.type == "cpu":
        seed = torch.randint(0, 1 << CPU_SEED_BITS, (1,), dtype=torch.int64, generator=gen)
        return int(seed), 0
    if _views.stream_capturing():
        raise ValueError(
            "seed, offset: a CUDA generator cannot be read or advanced during CUDA graph "
            "capture; pass seed and offset as int64 tensors (rewrite them between replays)"
        )
    with _state_lock:
        offset = gen.get_offset()
        if offset % 4 == 0:
            # The fast path (two scalar calls, no state tensors): the offset word of the
            # state is get_offset(), its seed word initial_seed(); set_offset accepts only
            # multiples of 4, which every advance here keeps.
            offset += (int(increment) + 3) // 4 * 4
            gen.set_offset(offset)
            return to_int64(gen.initial_seed()), offset
        # An offset set through set_state need not be a multiple of 4: round trip the state.
        new_state, seed, offset = advance_state(gen.get_state(), increment)
        gen.set_state(new_state)
    return seed, offset
