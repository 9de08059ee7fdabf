"""Version/ABI skew (_providers.screen) and driver refusal: skipped with a reason, never a crash."""

from __future__ import annotations

import warnings

import pytest

from aotinfer import _providers
from aotinfer._providers import Discovery, ProviderError, choose, driver_refusal, screen
from aotinfer._version import __version__

OTHER_VERSION = "0.0.7"
assert OTHER_VERSION != __version__
OTHER_ABI = _providers.ABI_VERSION + 1


def _screen_quietly(manifests, allow_skew):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return screen(manifests, allow_skew)


def test_matching_provider_is_usable_without_warning(make_manifest):
    m = make_manifest("sm90a")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert screen([m], allow_skew=False) == ([m], [])


@pytest.mark.parametrize("allow_skew", [False, True])
@pytest.mark.parametrize("version", [__version__, OTHER_VERSION])
def test_abi_mismatch_is_always_skipped(make_manifest, allow_skew, version):
    m = make_manifest("sm90a", version=version, abi=OTHER_ABI)
    with pytest.warns(RuntimeWarning) as record:
        usable, skipped = screen([m], allow_skew=allow_skew)
    assert usable == []
    assert [s.arch for s in skipped] == ["sm90a"]
    text = str(record[0].message)
    assert f"ABI {OTHER_ABI}" in text
    assert f"ABI {_providers.ABI_VERSION}" in text
    assert skipped[0].reason in text


def test_version_mismatch_is_skipped_with_warning(make_manifest):
    m = make_manifest("sm80", version=OTHER_VERSION)
    with pytest.warns(RuntimeWarning) as record:
        usable, skipped = screen([m], allow_skew=False)
    assert usable == []
    assert [s.arch for s in skipped] == ["sm80"]
    text = str(record[0].message)
    assert OTHER_VERSION in text
    assert __version__ in text
    assert _providers.ENV_ALLOW_SKEW in text
    assert f"pip install 'aotinfer[sm80]=={__version__}'" in text


def test_version_mismatch_accepted_with_allow_skew(make_manifest):
    m = make_manifest("sm80", version=OTHER_VERSION)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert screen([m], allow_skew=True) == ([m], [])


def test_screen_without_warn_is_silent(make_manifest):
    manifests = [make_manifest("sm80", version=OTHER_VERSION), make_manifest("sm90a", abi=0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        usable, skipped = screen(manifests, allow_skew=False, warn=False)
    assert usable == []
    assert [s.arch for s in skipped] == ["sm80", "sm90a"]


def test_screen_keeps_good_and_skips_bad(make_manifest):
    good = make_manifest("sm75")
    usable, skipped = _screen_quietly(
        [make_manifest("sm80", version=OTHER_VERSION), good, make_manifest("sm90a", abi=0)],
        allow_skew=False,
    )
    assert usable == [good]
    assert sorted(s.arch for s in skipped) == ["sm80", "sm90a"]


def test_skew_leaves_device_without_provider_says_why(make_manifest):
    usable, skipped = _screen_quietly(
        [make_manifest("sm90a", version=OTHER_VERSION)], allow_skew=False
    )
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", Discovery(usable, skipped))
    message = str(info.value)
    assert message.startswith("no aotinfer provider for compute capability 9.0 (NVIDIA H200)")
    assert "installed: sm90a" in message
    assert "skipped sm90a:" in message
    assert OTHER_VERSION in message and __version__ in message


def test_abi_skew_leaves_device_without_provider_says_why(make_manifest):
    usable, skipped = _screen_quietly([make_manifest("sm90a", abi=OTHER_ABI)], allow_skew=True)
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", Discovery(usable, skipped))
    assert f"skipped sm90a: aotinfer-sm90a {__version__} has provider ABI {OTHER_ABI}" in str(
        info.value
    )


def test_forced_skewed_provider_says_why(make_manifest):
    usable, skipped = _screen_quietly(
        [make_manifest("sm90a", version=OTHER_VERSION)], allow_skew=False
    )
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", Discovery(usable, skipped), forced="sm90a")
    message = str(info.value)
    assert "AOTINFER_PROVIDER=sm90a" in message
    assert OTHER_VERSION in message
    assert "not installed" not in message


# --- driver refusal ---------------------------------------------------------------------


@pytest.mark.parametrize("driver", [None, (13, 0), (13, 2), (14, 0)])
def test_driver_new_enough_or_unknown(make_manifest, driver):
    assert driver_refusal(make_manifest("sm90a", cuda="13.0"), driver) is None


def test_driver_too_old(make_manifest):
    text = driver_refusal(make_manifest("sm90a", cuda="13.0"), (12, 4))
    assert text is not None
    assert "CUDA 13.0" in text
    assert "580.65.06" in text
    assert "supports CUDA 12.4" in text


def test_driver_minor_version_compatibility(make_manifest):
    # A CUDA 12.8 build runs on a driver for CUDA 12.4 (same major).
    assert driver_refusal(make_manifest("sm90a", cuda="12.8"), (12, 4)) is None


def test_driver_refusal_unknown_cuda_major(make_manifest):
    text = driver_refusal(make_manifest("sm90a", cuda="15.1"), (13, 0))
    assert "a driver for CUDA 15" in text


def test_choose_refuses_provider_for_old_driver(make_manifest):
    discovery = Discovery([make_manifest("sm90a", cuda="13.0")])
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", discovery, driver_cuda=(12, 4))
    message = str(info.value)
    assert "compute capability 9.0 (NVIDIA H200)" in message
    assert "skipped sm90a:" in message
    assert "580.65.06 or newer" in message
    assert "supports CUDA 12.4" in message


def test_choose_falls_back_past_refused_provider(make_manifest):
    # Two providers serve 8.9; the better one needs a newer driver, the other does not.
    old = make_manifest("sm75", ("sm_80",), cuda="12.8")
    new = make_manifest("sm80", cuda="13.0")
    discovery = Discovery([old, new])
    assert choose((8, 9), "NVIDIA L4", discovery, driver_cuda=(13, 0)) is new
    assert choose((8, 9), "NVIDIA L4", discovery, driver_cuda=(12, 4)) is old


def test_forced_provider_refused_by_driver(make_manifest):
    discovery = Discovery([make_manifest("sm90a", cuda="13.0")])
    with pytest.raises(ProviderError) as info:
        choose((9, 0), "NVIDIA H200", discovery, forced="sm90a", driver_cuda=(12, 4))
    message = str(info.value)
    assert "NVIDIA H200" in message
    assert "580.65.06" in message
