"""_providers.choose(): which installed provider serves a device, and the errors when none does.

Pure function tests with fake manifests: no entry points, no imports, no device.
"""

from __future__ import annotations

import pytest

from aotinfer import _arches
from aotinfer._providers import Discovery, ProviderError, choose, pip_command

ALL_SIX = ("sm75", "sm80", "sm90a", "sm100a", "sm110a", "sm120f")

# compute capability -> (a GPU of it, the one provider of the table that serves it or None)
DEVICES = {
    (6, 1): ("NVIDIA GeForce GTX 1080", None),
    (7, 0): ("Tesla V100-SXM2-32GB", None),
    (7, 5): ("Tesla T4", "sm75"),
    (8, 0): ("NVIDIA A100-SXM4-80GB", "sm80"),
    (8, 6): ("NVIDIA A10", "sm80"),
    (8, 7): ("Orin", "sm80"),
    (8, 9): ("NVIDIA L4", "sm80"),
    (9, 0): ("NVIDIA H200", "sm90a"),
    (10, 0): ("NVIDIA B200", "sm100a"),
    (10, 3): ("NVIDIA B300 SXM6 AC", None),  # sm_100a is arch-specific: 10.0 only
    (11, 0): ("NVIDIA Thor", "sm110a"),
    (12, 0): ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm120f"),
    (12, 1): ("NVIDIA GB10", "sm120f"),
}


def _wrong_one(cc):
    """An installed provider that does not serve ``cc``."""
    return ("sm90a",) if DEVICES[cc][1] == "sm80" else ("sm80",)


def _right_one(cc):
    right = DEVICES[cc][1]
    return (right,) if right else ()


COMBINATIONS = {
    "none": lambda cc: (),
    "only-right": _right_one,
    "only-wrong": _wrong_one,
    "all-six": lambda cc: ALL_SIX,
    "sm80+sm90a": lambda cc: ("sm80", "sm90a"),
    "sm100a+sm110a": lambda cc: ("sm100a", "sm110a"),
    "sm120f-alone": lambda cc: ("sm120f",),
}


def _cc_id(cc):
    return f"{cc[0]}.{cc[1]}"


@pytest.mark.parametrize("combo", list(COMBINATIONS))
@pytest.mark.parametrize("cc", list(DEVICES), ids=_cc_id)
def test_choice_table(cc, combo, make_manifest):
    gpu_name, serving = DEVICES[cc]
    installed = COMBINATIONS[combo](cc)
    discovery = Discovery([make_manifest(a) for a in installed])
    if serving is not None and serving in installed:
        assert choose(cc, gpu_name, discovery).arch == serving
        return
    with pytest.raises(ProviderError) as info:
        choose(cc, gpu_name, discovery)
    message = str(info.value)
    assert message.startswith(f"no aotinfer provider for compute capability {_cc_id(cc)}")
    assert f"({gpu_name})" in message
    assert f"installed: {', '.join(sorted(installed)) or 'none'};" in message
    if serving is not None:
        assert message.endswith(f"install: pip install 'aotinfer[{serving}]'")
    else:
        assert "no aotinfer provider exists for it" in message
        assert "pip install" not in message


@pytest.mark.parametrize("cc", list(DEVICES), ids=_cc_id)
def test_suggested_provider_table(cc):
    assert _arches.suggested_provider(cc) == DEVICES[cc][1]


def test_manifest_names_the_distribution_the_install_command_installs(make_manifest):
    for arch in ALL_SIX:
        assert make_manifest(arch).distribution == f"aotinfer-{arch}"
        assert pip_command(arch) == f"pip install 'aotinfer[{arch}]'"


def test_error_text_format(make_manifest):
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", Discovery([make_manifest("sm80")]))
    assert str(info.value) == (
        "no aotinfer provider for compute capability 9.0 (NVIDIA H200); installed: sm80; "
        "install: pip install 'aotinfer[sm90a]'"
    )


@pytest.mark.parametrize("cc", [(7, 0), (6, 1)], ids=_cc_id)
def test_unsupported_capability_says_no_provider_exists(cc, make_manifest):
    with pytest.raises(ProviderError) as info:
        choose(cc, DEVICES[cc][0], Discovery([make_manifest(a) for a in ALL_SIX]))
    message = str(info.value)
    assert f"compute capability {_cc_id(cc)}" in message
    assert "no aotinfer provider exists for it" in message
    assert "pip install" not in message


# --- the SASS rule, with hypothetical targets -------------------------------------------


@pytest.mark.parametrize(
    ("target", "cc", "runs"),
    [
        # 'a': exactly that compute capability
        ("sm_90a", (9, 0), True),
        ("sm_90a", (9, 1), False),
        ("sm_100a", (10, 0), True),
        ("sm_100a", (10, 3), False),
        ("sm_103a", (10, 0), False),
        # 'f': same major, minor >= the target's
        ("sm_120f", (12, 0), True),
        ("sm_120f", (12, 1), True),
        ("sm_121f", (12, 0), False),
        ("sm_120f", (11, 0), False),
        ("sm_100f", (10, 3), True),
        # plain: same major, minor >= the target's
        ("sm_80", (8, 0), True),
        ("sm_80", (8, 9), True),
        ("sm_86", (8, 0), False),
        ("sm_80", (9, 0), False),
        ("sm_75", (8, 0), False),
        ("sm_100", (10, 3), True),
    ],
)
def test_target_runs_on(target, cc, runs, make_manifest):
    m = make_manifest("sm100a", (target,))
    if runs:
        assert choose(cc, "GPU", Discovery([m])) is m
    else:
        with pytest.raises(ProviderError):
            choose(cc, "GPU", Discovery([m]))


@pytest.mark.parametrize("order", [1, -1], ids=["in-order", "reversed"])
@pytest.mark.parametrize(
    ("cc", "candidates", "winner"),
    [
        # a hypothetical plain sm_100 provider beside sm100a
        ((10, 0), {"sm100": ("sm_100",), "sm100a": ("sm_100a",)}, "sm100a"),
        ((10, 3), {"sm100": ("sm_100",), "sm100a": ("sm_100a",)}, "sm100"),
        # sm120f beside a plain sm_120 provider
        ((12, 0), {"sm120": ("sm_120",), "sm120f": ("sm_120f",)}, "sm120f"),
        ((12, 1), {"sm120": ("sm_120",), "sm120f": ("sm_120f",)}, "sm120f"),
        # a > f > plain
        ((12, 0), {"p": ("sm_120",), "f": ("sm_120f",), "a": ("sm_120a",)}, "a"),
        # among plain targets the higher minor wins
        ((8, 6), {"old": ("sm_80",), "new": ("sm_86",)}, "new"),
        ((8, 9), {"x": ("sm_80",), "y": ("sm_86",), "z": ("sm_80", "sm_89")}, "z"),
    ],
)
def test_ranking(cc, candidates, winner, order, make_manifest):
    manifests = [make_manifest(name, targets) for name, targets in candidates.items()]
    assert choose(cc, "GPU", Discovery(manifests[::order])).arch == winner


# --- AOTINFER_PROVIDER ------------------------------------------------------------------


def test_forced_bad_name_lists_all_six(make_manifest):
    with pytest.raises(ValueError) as info:
        choose((9, 0), "NVIDIA H200", Discovery([make_manifest("sm90a")]), forced="sm90")
    message = str(info.value)
    assert "AOTINFER_PROVIDER='sm90'" in message
    assert not isinstance(info.value, ProviderError)
    for name in ALL_SIX:
        assert name in message


def test_forced_not_installed(make_manifest):
    discovery = Discovery([make_manifest("sm90a")])
    with pytest.raises(ProviderError) as info:
        choose((10, 0), "NVIDIA B200", discovery, forced="sm100a")
    message = str(info.value)
    assert "AOTINFER_PROVIDER=sm100a" in message
    assert "not installed" in message
    assert "installed: sm90a" in message
    assert "pip install 'aotinfer[sm100a]'" in message


def test_forced_installed_but_cannot_run(make_manifest):
    discovery = Discovery([make_manifest("sm80"), make_manifest("sm90a")])
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", discovery, forced="sm80")
    message = str(info.value)
    assert "NVIDIA H200" in message
    assert "compute capability 9.0" in message
    assert "sm_80, sm_89" in message
    assert "pip install 'aotinfer[sm90a]'" in message


def test_forced_overrides_ranking(make_manifest):
    # Both run on 8.9 (a hypothetical sm75 build holding sm_80); forcing picks the worse one.
    best = make_manifest("sm80")
    worse = make_manifest("sm75", ("sm_80",))
    discovery = Discovery([best, worse])
    assert choose((8, 9), "NVIDIA L4", discovery) is best
    assert choose((8, 9), "NVIDIA L4", discovery, forced="sm75") is worse
