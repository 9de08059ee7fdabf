"""The ``aotinfer`` namespace of torch custom ops, and when a public function calls them.

Eager calls skip the dispatcher (host time: the public functions call their
implementations directly); inside ``torch.compile`` or under a dispatch mode
(FakeTensorMode, make_fx, a user's TorchDispatchMode) they call the ops, so that dynamo
traces them as single nodes and fake tensors meet the fake implementations.
"""

from __future__ import annotations

import torch

LIB = torch.library.Library("aotinfer", "FRAGMENT")


# Bound once: the attribute lookups cost a third of the question on every eager call.
# is_dynamo_compiling (dynamo folds it to True while it traces) rather than is_compiling,
# which also reads torch's export flag: export and AOT tracing run under a dispatch mode,
# which the second test sees; half the cost (56 against 106 ns on the CI machine's CPU).
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack


def tracing() -> bool:
    """Whether a public function must call its op rather than run eagerly (about 0.1 us to
    ask on the CI machine's CPU)."""
    return _is_dynamo_compiling() or _dispatch_modes() > 0


def define(name: str, schema: str, impl, fake, seeded: bool = False):
    """Registers ``aotinfer::name`` with one implementation for every device and a fake
    one; returns the op (its default overload)."""
    tags = (torch.Tag.nondeterministic_seeded,) if seeded else ()
    LIB.define(name + schema, tags=tags)
    LIB.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"aotinfer::{name}", fake, lib=LIB)
    return getattr(torch.ops.aotinfer, name).default
