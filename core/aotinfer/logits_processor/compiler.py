"""Stage three of building a pipe: the ``Compiler`` (type check, validity checks, fusion
by priority over a sliding window) and ``compile_pipeline``."""

from __future__ import annotations

from typing import List, Optional, Sequence

from .fusion_rules import FusionRule, get_default_fusion_rules
from .op import Op
from .types import TensorType
from .validators import CompileError, ValidityCheck, get_default_validity_checks

__all__ = ["Compiler", "compile_pipeline"]


class Compiler:
    """Compiles a legalized op chain into the ops a pipe runs.

    A new compiler holds the default validity checks and fusion rules; register more with
    :meth:`register_validity_check` and :meth:`register_fusion_rule`.

    Attributes
    ----------
    fusion_rules : list of FusionRule
        Sorted by descending ``prio``; equal priorities keep registration order.
    validity_checks : list of ValidityCheck
        Run in order, after the type check and before fusion.

    Notes
    -----
    Fusion walks the chain with a position ``i``. At each position the rules are tried in
    order; the first whose pattern matches ``ops[i:i+len(pattern)]`` and whose guard
    accepts the window replaces the window with ``build(window)``, and the walk steps back
    one position (a fused op may complete an earlier pattern). When no rule applies the
    walk moves on. The fused chain is not type-checked again.
    """

    def __init__(self) -> None:
        self.fusion_rules: List[FusionRule] = []
        self.validity_checks: List[ValidityCheck] = []
        self._install_defaults()

    def _install_defaults(self) -> None:
        self.validity_checks.extend(get_default_validity_checks())
        for rule in get_default_fusion_rules():
            self.register_fusion_rule(rule)

    def register_fusion_rule(self, rule: FusionRule) -> None:
        """Adds ``rule`` after the rules of equal or higher priority."""
        if (
            not isinstance(rule, FusionRule)
            or isinstance(rule.prio, bool)
            or not isinstance(rule.prio, int)
        ):
            raise ValueError(
                "a fusion rule must be a FusionRule(pattern, guard, build, prio) with an int "
                f"prio, got {rule!r}"
            )
        self.fusion_rules.append(rule)
        self.fusion_rules.sort(key=lambda r: -r.prio)  # stable: ties keep their order

    def register_validity_check(self, check: ValidityCheck) -> None:
        """Adds ``check`` after the existing checks."""
        self.validity_checks.append(check)

    def compile(self, ops: Sequence[Op]) -> List[Op]:
        """Type-checks, validates and fuses ``ops``; returns a new list (``ops`` is unchanged).

        Raises
        ------
        CompileError
            ``"Cannot compile empty operator list"``, a type mismatch, or a failed
            validity check.
        """
        if not ops:
            raise CompileError("Cannot compile empty operator list")
        chain = list(ops)
        self._type_check(chain)
        for check in self.validity_checks:
            check(chain)
        return self._fuse_all(list(chain))  # checks may keep the list they were given

    @staticmethod
    def _type_check(ops: List[Op]) -> None:
        first = ops[0]
        if first.IN not in (TensorType.LOGITS, TensorType.PROBS):
            raise CompileError(
                f"First operator ({type(first).__name__}) cannot accept standard pipeline "
                f"inputs. Expected LOGITS or PROBS, but operator accepts: {first.IN}"
            )
        current = first.IN
        for i, op in enumerate(ops):
            if op.IN != current:
                raise CompileError(
                    f"Type mismatch at operator {i} ({type(op).__name__}). "
                    f"Expected input type: {current}, but operator accepts: {op.IN}. "
                    f"Previous operator output: {current}"
                )
            current = op.OUT

    # A rule of one op whose build matches its own pattern again would rewrite forever;
    # any chain of real rules settles long before this many rewrites.
    MAX_REWRITES = 1000

    def _fuse_all(self, ops: List[Op]) -> List[Op]:
        i = rewrites = 0
        while i < len(ops):
            for rule in self.fusion_rules:
                span = len(rule.pattern)
                window = ops[i : i + span]
                if span and len(window) == span and self._matches(window, rule):
                    built = rule.build(window)
                    if not isinstance(built, Op):
                        raise CompileError(f"fusion rule {rule.pattern} built {built!r}, not an Op")
                    ops[i : i + len(window)] = [built]
                    i = max(i - 1, 0)
                    rewrites += 1
                    if rewrites > self.MAX_REWRITES:
                        raise CompileError(
                            f"fusion did not settle after {self.MAX_REWRITES} rewrites: rule "
                            f"{rule.pattern} keeps matching what it builds"
                        )
                    break
            else:
                i += 1
        return ops

    @staticmethod
    def _matches(window: List[Op], rule: FusionRule) -> bool:
        return all(isinstance(op, cls) for op, cls in zip(window, rule.pattern)) and bool(
            rule.guard(window)
        )


def compile_pipeline(
    ops: Sequence[Op],
    custom_fusion_rules: Optional[List[FusionRule]] = None,
    custom_validity_checks: Optional[List[ValidityCheck]] = None,
) -> List[Op]:
    """Compiles ``ops`` with a fresh :class:`Compiler` plus the given rules and checks.

    Parameters
    ----------
    ops : list of Op
        A legalized chain.
    custom_fusion_rules : list of FusionRule, optional
        Registered after the defaults.
    custom_validity_checks : list of ValidityCheck, optional
        Run after the default checks.

    Returns
    -------
    list of Op
        The fused chain.
    """
    compiler = Compiler()
    for name, given in (
        ("custom_fusion_rules", custom_fusion_rules),
        ("custom_validity_checks", custom_validity_checks),
    ):
        if given is not None and not isinstance(given, (list, tuple)):
            raise ValueError(f"{name} must be a list, got {given!r}")
    for rule in custom_fusion_rules or ():
        compiler.register_fusion_rule(rule)
    for check in custom_validity_checks or ():
        compiler.register_validity_check(check)
    return compiler.compile(ops)
