"""Kernel lab: CPU time of run()'s checks of per-call decode options (no GPU needed), the
figures quoted in dev/NOTES.md item 55 and in the docstrings of _decode_checks.call_scalars
and check_sinks. Each line times the current code against what it replaced, in this
process, best of seven rounds (dev/before_after.py):

- every option checked again (scalars(), what run() did per call before 8bd021b) against the
  call's window and scales over the planned scalars (call_scalars());
- sinks through their four separate checks and a conversion (check_sinks before 8bd021b,
  reproduced here) against the combined test for float32 contiguous sinks;
- building the scalars as a frozen dataclass (DecodeScalars before 8bd021b, reproduced)
  against the named tuple.

    python dev/time_decode_checks.py [OUT.txt]
"""

from __future__ import annotations

import sys
from dataclasses import make_dataclass

import torch
from before_after import report

from aotinfer import _decode_checks as _c
from aotinfer import _views
from aotinfer._decode_launch import DecodeScalars

HQ, D = 32, 128


# The former DecodeScalars: a frozen dataclass of the named tuple's fields.
FrozenScalars = make_dataclass("FrozenScalars", DecodeScalars.__annotations__.items(), frozen=True)


class Plan:
    num_qo_heads = HQ


def sinks_checked_separately(p, sinks, device):
    """check_sinks before 8bd021b."""
    _views.check_tensor("sinks", sinks, ndim=1, device=device)
    if sinks.numel() != p.num_qo_heads or not sinks.is_floating_point():
        raise ValueError("sinks")
    return sinks.to(torch.float32).contiguous()


def main() -> None:
    planned = _c.scalars(D, "NONE", -1, None, None, None, None, None, None, None)
    sinks, cpu = torch.zeros(HQ), torch.device("cpu")
    pairs = {
        "per-call scales": (
            lambda: _c.scalars(D, "NONE", -1, None, None, None, None, None, 0.5, 2.0),
            lambda: _c.call_scalars(planned, None, None, 0.5, 2.0),
        ),
        "sinks": (
            lambda: sinks_checked_separately(Plan, sinks, cpu),
            lambda: _c.check_sinks(Plan, sinks, cpu),
        ),
        "scalars built": (
            lambda: FrozenScalars(0.1, 0.0, -1, 0, 1.0, 1e4, 0.5, 2.0),
            lambda: DecodeScalars(0.1, 0.0, -1, 0, 1.0, 1e4, 0.5, 2.0),
        ),
    }
    report(pairs, out=sys.argv[1] if len(sys.argv) > 1 else None)


if __name__ == "__main__":
    main()
