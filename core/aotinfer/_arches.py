"""The provider table and the rule that says which SASS target runs on which GPU.

``cmake/arches.cmake`` holds the same table for the build;
``tests/cpu/test_versions.py`` checks that the two agree.

A SASS target ``sm_XY[a|f]`` runs on a device of compute capability ``X.Y'`` when:

- ``a`` (arch-specific, e.g. ``sm_90a``): exactly ``X.Y`` -- the arch-specific features
  (wgmma, tcgen05) exist on that chip only;
- ``f`` (family, e.g. ``sm_120f``): same major and ``Y' >= Y``;
- plain (``sm_80``): same major and ``Y' >= Y`` (the CUDA binary compatibility rule).

When several installed providers run on a device, an exact ``a`` match beats an ``f``
family match, which beats a plain target; among equals the target with the higher minor wins.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

# provider -> SASS targets it holds
PROVIDER_TARGETS = {
    "sm75": ("sm_75",),
    "sm80": ("sm_80", "sm_89"),
    "sm90a": ("sm_90a",),
    "sm100a": ("sm_100a",),
    "sm110a": ("sm_110a",),
    "sm120f": ("sm_120f",),
}
PROVIDERS = tuple(PROVIDER_TARGETS)

_TARGET_RE = re.compile(r"^sm_(\d+?)(\d)([af]?)$")


class Target(NamedTuple):
    major: int
    minor: int
    suffix: str  # "a", "f" or ""

    @classmethod
    def parse(cls, text: str) -> Target:
        m = _TARGET_RE.match(text)
        if not m:
            raise ValueError(f"not a SASS target: {text!r} (expected e.g. 'sm_90a', 'sm_80')")
        return cls(int(m.group(1)), int(m.group(2)), m.group(3))


# Rank of a match; higher is better.
_RANK_EXACT_ARCH = 3
_RANK_FAMILY = 2
_RANK_PLAIN = 1


def target_rank(target: str, capability: Tuple[int, int]) -> Optional[Tuple[int, int]]:
    """How well ``target`` serves a device of ``capability``; None if it cannot run there."""
    t = Target.parse(target)
    major, minor = capability
    if t.major != major:
        return None
    if t.suffix == "a":
        return (_RANK_EXACT_ARCH, t.minor) if t.minor == minor else None
    if minor < t.minor:
        return None
    return (_RANK_FAMILY if t.suffix == "f" else _RANK_PLAIN, t.minor)


def best_rank(targets, capability: Tuple[int, int]) -> Optional[Tuple[int, int]]:
    """The best rank among a provider's targets for this device, or None."""
    ranks = [r for r in (target_rank(t, capability) for t in targets) if r is not None]
    return max(ranks) if ranks else None


def suggested_provider(capability: Tuple[int, int]) -> Optional[str]:
    """The provider of the family table that serves ``capability`` best, or None."""
    best = None
    for name, targets in PROVIDER_TARGETS.items():
        rank = best_rank(targets, capability)
        if rank is not None and (best is None or rank > best[0]):
            best = (rank, name)
    return best[1] if best else None
