"""Fusion rules: ``FusionRule`` (pattern, guard, build, priority) and the default rules
that turn op windows into single sampling-kernel calls."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Tuple

from .op import Op
from .operators import (
    FusedProbsMinPSampleOp,
    FusedProbsTopKSampleOp,
    FusedProbsTopKTopPSampleOp,
    FusedProbsTopPSampleOp,
    FusedTemperatureSoftmaxOp,
    MinPOp,
    ProbsSampleOp,
    ProbsTopKOp,
    SoftmaxOp,
    TemperatureOp,
    TopPOp,
)

__all__ = ["FusionRule", "get_default_fusion_rules"]


class FusionRule(NamedTuple):
    """Replace a window of consecutive ops by one op.

    Parameters
    ----------
    pattern : tuple of type
        Op classes to match, one per position of the window (``isinstance``). Patterns
        name op classes (``TemperatureOp``), not processor classes (``Temperature``).
    guard : callable
        ``guard(window) -> bool``: whether to fuse this matching window.
    build : callable
        ``build(window) -> Op``: the op that replaces the window. Its ``IN`` should be the
        window's first ``IN`` and its ``OUT`` the window's last ``OUT``.
    prio : int, optional
        Higher is tried first; rules of equal priority keep their registration order
        (defaults before custom rules). Default 0.

    Examples
    --------
    >>> rule = FusionRule(
    ...     pattern=(TemperatureOp, SoftmaxOp),
    ...     guard=lambda window: True,
    ...     build=lambda window: MyTemperatureSoftmaxOp(),
    ...     prio=200,  # before the built-in rule for the same window (100)
    ... )
    """

    pattern: Tuple[type, ...]
    guard: Callable[[List[Op]], bool]
    build: Callable[[List[Op]], Op]
    prio: int = 0


def _always(window: List[Op]) -> bool:
    return True


def _joint_topk_topp(window: List[Op]) -> bool:
    """The ``TopK`` of the window was created with ``joint_topk_topp=True``."""
    return bool(getattr(window[0], "default_params", {}).get("joint_topk_topp", False))


def _window_defaults(window: List[Op]) -> Dict[str, Any]:
    """The compile-time defaults of every op in the window (later ops win a clash), so a
    fused op keeps e.g. ``Temperature(temperature=0.7)`` or ``TopK(top_k=40)``."""
    merged: Dict[str, Any] = {}
    for op in window:
        merged.update(getattr(op, "default_params", {}))
    return merged


def _deterministic(window: List[Op]) -> bool:
    return getattr(window[-1], "default_params", {}).get("deterministic", True)


def _build_temperature_softmax(window: List[Op]) -> Op:
    params = _window_defaults(window)
    params["enable_pdl"] = getattr(window[1], "default_params", {}).get("enable_pdl")
    return FusedTemperatureSoftmaxOp(**params)


def _sampler_builder(fused: type) -> Callable[[List[Op]], Op]:
    def build(window: List[Op]) -> Op:
        params = _window_defaults(window)
        params["deterministic"] = _deterministic(window)
        return fused(**params)

    build.__name__ = f"build_{fused.__name__}"
    return build


def get_default_fusion_rules() -> List[FusionRule]:
    """The built-in rules, in this order.

    ======================================  ==================================  ====
    pattern                                 builds                              prio
    ======================================  ==================================  ====
    TemperatureOp, SoftmaxOp                FusedTemperatureSoftmaxOp           100
    ProbsTopKOp, TopPOp, ProbsSampleOp      FusedProbsTopKTopPSampleOp (only    100
                                            with ``TopK(joint_topk_topp=True)``)
    ProbsTopKOp, ProbsSampleOp              FusedProbsTopKSampleOp              10
    TopPOp, ProbsSampleOp                   FusedProbsTopPSampleOp              10
    MinPOp, ProbsSampleOp                   FusedProbsMinPSampleOp              10
    ======================================  ==================================  ====

    Fused samplers take ``deterministic`` from the ``Sample`` processor; every fused op
    keeps the compile-time defaults of the ops it replaces. Top-k on logits followed by
    sampling is not fused.
    """
    return [
        FusionRule((TemperatureOp, SoftmaxOp), _always, _build_temperature_softmax, 100),
        FusionRule(
            (ProbsTopKOp, TopPOp, ProbsSampleOp),
            _joint_topk_topp,
            _sampler_builder(FusedProbsTopKTopPSampleOp),
            100,
        ),
        FusionRule(
            (ProbsTopKOp, ProbsSampleOp), _always, _sampler_builder(FusedProbsTopKSampleOp), 10
        ),
        FusionRule((TopPOp, ProbsSampleOp), _always, _sampler_builder(FusedProbsTopPSampleOp), 10),
        FusionRule((MinPOp, ProbsSampleOp), _always, _sampler_builder(FusedProbsMinPSampleOp), 10),
    ]
