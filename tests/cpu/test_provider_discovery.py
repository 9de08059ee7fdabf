"""Real entry-point discovery over fake providers installed in a temporary sys.path entry.

Each fake is a package ``fake_aotinfer_<arch>`` with manifest.json and a pure-Python
``_kernels`` module, plus a dist-info that registers it in ``aotinfer.providers``. The package
names differ from the real providers' so that a real wheel installed here does not clash; the
tests assert on the fakes only.
"""

from __future__ import annotations

import enum
import importlib
import json
import sys
import types
import warnings

import pytest
import torch

from aotinfer import _device_facts, _providers
from aotinfer._providers import ProviderError
from aotinfer._version import __version__

FAKE_PREFIX = "fake_aotinfer_"
TARGETS = {"sm75": ["sm_75"], "sm80": ["sm_80", "sm_89"], "sm120f": ["sm_120f"]}


def _manifest(arch, version=__version__, abi=_providers.ABI_VERSION, **extra):
    """A manifest.json's fields, as cmake/manifest.json.in writes them."""
    targets = TARGETS[arch]
    return {
        "arch": arch,
        "version": version,
        "abi_version": abi,
        "sass_targets": targets,
        "gencode": " ".join(f"-gencode=arch=compute_{t[3:]},code={t}" for t in targets),
        "cuda_version": "13.0",
        "compiler": "nvcc 13.0.88 + GNU 12.2.0",
        "source_revision": "0123456789ab",
        **extra,
    }


def _install_fake(
    root, arch, *, version=__version__, manifest=None, kernels_abi=_providers.ABI_VERSION
):
    """Writes fake provider ``arch`` under ``root``; returns its package name.

    ``manifest``: None (a good one), a dict or a str (written as is), "no-manifest" or
    "no-package" (left out).
    """
    module = FAKE_PREFIX + arch
    if manifest != "no-package":
        pkg = root / module
        pkg.mkdir()
        (pkg / "__init__.py").write_text(f'ARCH = "{arch}"\n')
        (pkg / "_kernels.py").write_text(f"ABI_VERSION = {kernels_abi}\n")
        if manifest is None:
            manifest = _manifest(arch, version)
        if isinstance(manifest, dict):
            manifest = json.dumps(manifest)
        if manifest != "no-manifest":
            (pkg / "manifest.json").write_text(manifest)
    info = root / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: {version}\n"
    )
    (info / "entry_points.txt").write_text(f"[aotinfer.providers]\n{arch} = {module}\n")
    importlib.invalidate_caches()
    return module


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh sys.path entry for fake providers; their modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith(FAKE_PREFIX)]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture
def only_fakes(monkeypatch):
    """Discovery through the real entry points, keeping only the fakes (hermetic choices)."""
    real = _providers._entry_points
    monkeypatch.setattr(
        _providers,
        "_entry_points",
        lambda: [ep for ep in real() if ep.value.startswith(FAKE_PREFIX)],
    )


def test_entry_points_of_the_python_3_9_api(monkeypatch):
    """importlib.metadata.entry_points() of Python 3.9 is a dict by group, without
    select()."""
    import importlib.metadata

    ep = importlib.metadata.EntryPoint("sm80", "fake_aotinfer_sm80", _providers.ENTRY_POINT_GROUP)
    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda: {_providers.ENTRY_POINT_GROUP: (ep,)}
    )
    assert _providers._entry_points() == [ep]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: {})
    assert _providers._entry_points() == []


def test_read_manifests_finds_fakes_without_importing(site):
    _install_fake(site, "sm75")
    _install_fake(site, "sm80")
    manifests, broken = _providers.read_manifests()
    found = {m.arch: m for m in manifests if m.module.startswith(FAKE_PREFIX)}
    assert sorted(found) == ["sm75", "sm80"]
    m = found["sm80"]
    assert m.module == "fake_aotinfer_sm80"
    assert m.version == __version__
    assert m.abi_version == _providers.ABI_VERSION
    assert m.sass_targets == ("sm_80", "sm_89")
    assert m.cuda_version == "13.0"
    assert m.source_revision == "0123456789ab"
    assert m.location == str(site / "fake_aotinfer_sm80")
    assert not [s for s in broken if s.arch in ("sm75", "sm80")]
    assert not [n for n in sys.modules if n.startswith(FAKE_PREFIX)]


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        ("{not json", "Expecting property name"),
        ({"arch": "sm75"}, "'version'"),
        ("no-manifest", "manifest.json"),
        ("no-package", "package 'fake_aotinfer_sm75' not found"),
    ],
    ids=["bad-json", "missing-field", "no-manifest", "no-package"],
)
def test_broken_manifest_becomes_skipped(site, manifest, reason):
    _install_fake(site, "sm75", manifest=manifest)
    manifests, broken = _providers.read_manifests()
    assert not [m for m in manifests if m.module == "fake_aotinfer_sm75"]
    [entry] = [s for s in broken if s.arch == "sm75"]
    assert entry.reason.startswith("its manifest could not be read")
    assert reason in entry.reason
    assert "sm75" in _providers.discover(warn=False).installed_names


def test_manifest_with_bad_sass_target_is_skipped(site, only_fakes):
    _install_fake(site, "sm75", manifest=_manifest("sm75", sass_targets=["compute_75"]))
    _install_fake(site, "sm80")
    discovery = _providers.discover(warn=False)
    # A device served by another provider must not fail because of the broken one.
    assert _providers.choose((8, 0), "NVIDIA A100", discovery).arch == "sm80"
    [entry] = discovery.skipped
    assert entry.arch == "sm75" and "compute_75" in entry.reason


# --- discover(): screening under the environment ----------------------------------------


def test_discover_skips_version_skew_by_default(site):
    _install_fake(site, "sm75", version="0.0.7")
    with pytest.warns(RuntimeWarning, match="aotinfer-sm75 is version 0.0.7"):
        discovery = _providers.discover()
    assert "sm75" not in [m.arch for m in discovery.usable if m.module.startswith(FAKE_PREFIX)]
    [entry] = [s for s in discovery.skipped if s.arch == "sm75"]
    assert "0.0.7" in entry.reason and __version__ in entry.reason


@pytest.mark.parametrize("value", ["1", "true", "yes", "on", " 1 "])
def test_discover_allows_skew_from_env(site, monkeypatch, value):
    _install_fake(site, "sm75", version="0.0.7")
    monkeypatch.setenv(_providers.ENV_ALLOW_SKEW, value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        discovery = _providers.discover()
    # (a real provider installed on this machine may warn for itself; the fake must not)
    assert not [w for w in caught if "sm75" in str(w.message)]
    [m] = [m for m in discovery.usable if m.module == "fake_aotinfer_sm75"]
    assert m.version == "0.0.7"
    assert "sm75" not in [s.arch for s in discovery.skipped]


@pytest.mark.parametrize("value", ["0", "", "no"])
def test_discover_skew_env_off(site, monkeypatch, value):
    _install_fake(site, "sm75", version="0.0.7")
    monkeypatch.setenv(_providers.ENV_ALLOW_SKEW, value)
    discovery = _providers.discover(warn=False)
    assert "sm75" in [s.arch for s in discovery.skipped]


def test_discover_abi_skew_not_allowed_by_env(site, monkeypatch):
    _install_fake(site, "sm75", manifest=_manifest("sm75", version="0.0.7", abi=999))
    monkeypatch.setenv(_providers.ENV_ALLOW_SKEW, "1")
    with pytest.warns(RuntimeWarning, match="ABI 999"):
        discovery = _providers.discover()
    assert "sm75" in [s.arch for s in discovery.skipped]


# --- provider_for_device: choice per device, cached, imported only then -----------------

GPUS = {
    0: _device_facts.GpuFacts(0, "Tesla T4", (7, 5)),
    1: _device_facts.GpuFacts(1, "NVIDIA A10", (8, 6)),
    2: _device_facts.GpuFacts(2, "NVIDIA H200", (9, 0)),
}


@pytest.fixture
def devices(monkeypatch):
    """Fake device facts; returns the list of indices asked for through gpu()."""
    asked = []

    def gpu(index):
        asked.append(index)
        return GPUS[index]

    facts = _device_facts.DriverFacts(True, (13, 0), None, tuple(GPUS.values()))
    monkeypatch.setattr(_device_facts, "gpu", gpu)
    monkeypatch.setattr(_device_facts, "driver_facts", lambda: facts)
    return asked


def test_provider_for_device_chooses_and_caches_per_device(site, only_fakes, devices):
    _install_fake(site, "sm75")
    _install_fake(site, "sm80")
    first = _providers.provider_for_device(0)
    assert first.manifest.arch == "sm75"
    assert first.capability == (7, 5)
    assert first.kernels is sys.modules["fake_aotinfer_sm75._kernels"]
    assert "fake_aotinfer_sm80" not in sys.modules  # imported only when its device needs it

    second = _providers.provider_for_device(1)
    assert second.manifest.arch == "sm80"
    assert second.kernels is sys.modules["fake_aotinfer_sm80._kernels"]

    assert _providers.provider_for_device(0) is first
    assert _providers.provider_for_device(1) is second
    assert devices == [0, 1]

    _providers.reset_cache()
    assert _providers.provider_for_device(0) is not first
    assert devices == [0, 1, 0]


def test_provider_for_and_kernels_for_take_a_torch_device(site, only_fakes, devices):
    _install_fake(site, "sm75")
    _install_fake(site, "sm80")
    assert (
        _providers.kernels_for(torch.device("cuda", 1))
        is sys.modules["fake_aotinfer_sm80._kernels"]
    )
    assert _providers.provider_for(torch.device("cuda", 1)) is _providers.provider_for_device(1)
    # No index: device 0 (a tensor's device always has one).
    assert _providers.provider_for(torch.device("cuda")) is _providers.provider_for_device(0)
    assert _providers.provider_for_device(0).manifest.arch == "sm75"
    assert devices == [1, 0]


def test_provider_for_device_keeps_a_choice_made_while_it_waited_for_the_lock(devices, monkeypatch):
    """Two threads choosing for one device at once: the one that waited for the lock takes
    the other's choice instead of choosing (and importing) again."""
    theirs = object()

    class LockHeldByAnotherThread:
        def __enter__(self):
            _providers._cache[2] = theirs  # what the other thread chose meanwhile

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(_providers, "_cache_lock", LockHeldByAnotherThread())
    assert _providers.provider_for_device(2) is theirs
    assert devices == []  # no device facts read: no choice made


def test_provider_for_device_error_for_unserved_device(site, only_fakes, devices):
    _install_fake(site, "sm75")
    with pytest.raises(ProviderError) as info:
        _providers.provider_for_device(2)
    assert str(info.value) == (
        "no aotinfer provider for compute capability 9.0 (NVIDIA H200); installed: sm75; "
        "install: pip install 'aotinfer[sm90a]'"
    )
    assert not [n for n in sys.modules if n.startswith(FAKE_PREFIX)]


def test_forced_provider_that_cannot_run_fails_before_import(
    site, only_fakes, devices, monkeypatch
):
    _install_fake(site, "sm75")
    _install_fake(site, "sm80")
    monkeypatch.setenv(_providers.ENV_PROVIDER, "sm80")
    with pytest.raises(ProviderError) as info:
        _providers.provider_for_device(0)
    message = str(info.value)
    assert "Tesla T4" in message and "compute capability 7.5" in message
    assert "sm_80, sm_89" in message
    assert not [n for n in sys.modules if n.startswith(FAKE_PREFIX)]


def test_environment_is_read_when_the_provider_is_chosen(site, only_fakes, devices, monkeypatch):
    _install_fake(site, "sm80")
    _install_fake(site, "sm120f")
    first = _providers.provider_for_device(1)
    assert first.manifest.arch == "sm80"
    monkeypatch.setenv(_providers.ENV_PROVIDER, "sm120f")
    assert _providers.provider_for_device(1) is first  # chosen already: no per-call env reads
    _providers.reset_cache()
    with pytest.raises(ProviderError, match="AOTINFER_PROVIDER=sm120f"):
        _providers.provider_for_device(1)
    monkeypatch.delenv(_providers.ENV_PROVIDER)
    _providers.reset_cache()
    assert _providers.provider_for_device(1).manifest.arch == "sm80"


def test_extension_with_other_abi_is_refused(site, only_fakes, devices):
    _install_fake(site, "sm75", kernels_abi=999)
    with pytest.raises(ProviderError) as info:
        _providers.provider_for_device(0)
    assert str(info.value) == (
        f"aotinfer-sm75 {__version__} at {site / 'fake_aotinfer_sm75'}: its extension has "
        f"provider ABI 999 (its manifest says {_providers.ABI_VERSION}), but aotinfer "
        f"{__version__} needs ABI {_providers.ABI_VERSION}; reinstall matching versions: "
        f"pip install --force-reinstall 'aotinfer[sm75]=={__version__}'"
    )


@pytest.mark.parametrize(
    "body, shown",
    [
        ("raise ImportError('libcuda.so.1: not found')", "ImportError: libcuda.so.1: not found"),
        # A pybind11 module whose init throws raises SystemError / RuntimeError, not
        # ImportError: still a ProviderError naming the provider, not a raw crash.
        ("raise SystemError('pybind11 init failed')", "SystemError: pybind11 init failed"),
        ("raise RuntimeError('boom')", "RuntimeError: boom"),
    ],
)
def test_extension_that_fails_to_import(site, only_fakes, devices, body, shown):
    module = _install_fake(site, "sm75")
    (site / module / "_kernels.py").write_text(body + "\n")
    with pytest.raises(ProviderError) as info:
        _providers.provider_for_device(0)
    assert str(info.value) == (
        f"aotinfer-sm75 is installed but its extension failed to import ({shown}); reinstall "
        f"it: pip install --force-reinstall 'aotinfer[sm75]=={__version__}'"
    )


@pytest.mark.parametrize(
    "changes, reason",
    [
        (dict(arch="sm80"), "its manifest says arch 'sm80' but it is registered as 'sm75'"),
        (dict(cuda_version=""), "cuda_version must be a non-empty string, got ''"),
        (dict(cuda_version=13), "cuda_version must be a non-empty string, got 13"),
        (dict(cuda_version="unknown"), "cuda_version must look like '13.0', got 'unknown'"),
        (dict(version=None), "version must be a non-empty string, got None"),
        (dict(sass_targets="sm_75"), "sass_targets must be a list of strings, got 'sm_75'"),
        (
            dict(sass_targets=["sm_75", 80]),
            "sass_targets must be a list of strings, got ['sm_75', 80]",
        ),
    ],
)
def test_manifest_fields_the_choice_reads_are_checked(site, only_fakes, changes, reason):
    _install_fake(site, "sm75", manifest={**_manifest("sm75"), **changes})
    discovery = _providers.discover(warn=False)
    assert not discovery.usable
    [entry] = discovery.skipped
    assert entry.reason == f"its manifest could not be read ({reason})"


def test_entry_point_not_a_provider_name_is_skipped(site, only_fakes):
    module = _install_fake(site, "sm75", manifest={**_manifest("sm75"), "arch": "sm90"})
    info = next(site.glob(f"{module}-*.dist-info"))
    (info / "entry_points.txt").write_text(f"[aotinfer.providers]\nsm90 = {module}\n")
    importlib.invalidate_caches()
    [entry] = _providers.discover(warn=False).skipped
    assert entry.arch == "sm90" and "'sm90' is not a provider; valid names: sm75" in entry.reason


def test_two_registrations_of_one_arch_warn_and_the_first_serves(site, only_fakes):
    first = _install_fake(site, "sm80")
    # A second distribution registering sm80 under another package (a local build beside
    # an index wheel, say).
    second = _install_fake(site, "sm75", manifest={**_manifest("sm80"), "arch": "sm80"})
    info = next(site.glob(f"{second}-*.dist-info"))
    (info / "entry_points.txt").write_text(f"[aotinfer.providers]\nsm80 = {second}\n")
    importlib.invalidate_caches()
    order = [ep.value for ep in _providers._entry_points()]
    with pytest.warns(RuntimeWarning, match="aotinfer-sm80 is registered twice") as record:
        discovery = _providers.discover()
    served, unused = (
        (first, second) if order.index(first) < order.index(second) else (second, first)
    )
    [m] = discovery.usable
    assert m.location == str(site / served)
    [entry] = discovery.skipped
    assert entry.location == str(site / unused)
    message = str(record[0].message)
    assert f"the one at {site / served} serves, this one at {site / unused}" in message


# ---------------------------------------------------------------- show-config over the fakes


def test_show_config_does_not_say_served_by_a_provider_that_cannot_load(
    site, only_fakes, devices, monkeypatch
):
    from aotinfer import cli

    monkeypatch.delenv("AOTINFER_PROVIDER", raising=False)
    monkeypatch.delenv("AOTINFER_ALLOW_VERSION_SKEW", raising=False)
    module = _install_fake(site, "sm75")
    (site / module / "_kernels.py").write_text("raise ImportError('undefined symbol: x')\n")
    cfg = cli.collect_config()
    [gpu] = [g for g in cfg["gpus"] if g["capability"] == "7.5"]
    assert gpu["provider"] is None
    assert "its extension failed to import (ImportError: undefined symbol: x)" in gpu["problem"]
    assert "cuda:0 not served" in cli.problems(cfg)


def test_show_config_statuses_of_two_registrations_stay_apart(site, only_fakes, devices):
    from aotinfer import cli

    _install_fake(site, "sm80")
    second = _install_fake(site, "sm75", manifest={**_manifest("sm80"), "arch": "sm80"})
    info = next(site.glob(f"{second}-*.dist-info"))
    (info / "entry_points.txt").write_text(f"[aotinfer.providers]\nsm80 = {second}\n")
    importlib.invalidate_caches()
    statuses = sorted(p["status"][:10] for p in cli.collect_config()["providers"])
    assert statuses == ["skipped: a", "usable"]


def _no_driver(monkeypatch):
    monkeypatch.setattr(
        _device_facts,
        "driver_facts",
        lambda: _device_facts.DriverFacts(False, None, "no driver", ()),
    )


def test_show_config_flags_junk_environment(site, only_fakes, devices, monkeypatch):
    from aotinfer import cli

    monkeypatch.setenv("AOTINFER_PROVIDER", "junk")
    monkeypatch.setenv("AOTINFER_ALLOW_VERSION_SKEW", "maybe")
    _no_driver(monkeypatch)
    cfg = cli.collect_config()
    text = cli.format_config(cfg)
    assert "  problem: AOTINFER_ALLOW_VERSION_SKEW='maybe' is not a switch" in text
    assert "  problem: AOTINFER_PROVIDER='junk' is not a provider; valid names: sm75" in text
    assert len(cli.problems(cfg)) == 2
    monkeypatch.setattr(cli, "collect_config", lambda: cfg)
    assert cli.main(["show-config"]) == 0
    assert cli.main(["show-config", "--check"]) == 1


def test_show_config_flags_the_core_switches(site, only_fakes, devices, monkeypatch):
    """The switches the core itself reads, each refused by its own reader (they passed
    --check before, and then failed the first call that read them)."""
    from aotinfer import cli

    monkeypatch.setenv("AOTINFER_DECODE_PREPARED", "maybe")
    monkeypatch.setenv("AOTINFER_DECODE_WORK_RUNS", "x")
    monkeypatch.setenv("AOTINFER_SAMPLING_TOP_P", "bogus")
    _no_driver(monkeypatch)
    found = cli.problems(cli.collect_config())
    assert found == [
        "AOTINFER_DECODE_PREPARED must be on or off, got 'maybe'",
        "AOTINFER_DECODE_WORK_RUNS must be auto, always or off, got 'x'",
        "AOTINFER_SAMPLING_TOP_P must be rejection, threshold or auto, got 'bogus'",
    ]


@pytest.mark.parametrize("value", ["maybe", "2", "enable"])
def test_discover_refuses_a_junk_skew_switch(site, monkeypatch, value):
    monkeypatch.setenv("AOTINFER_ALLOW_VERSION_SKEW", value)
    with pytest.raises(ValueError, match=f"AOTINFER_ALLOW_VERSION_SKEW='{value}' is not a switch"):
        _providers.discover(warn=False)


# --- _device_facts over a fake of cuda-python's driver bindings -------------------------


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100


class FakeDriver:
    """cuda-python's driver module as _device_facts reads it: every call returns
    ``(CUresult, *values)``."""

    class CUdevice_attribute:
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    def __init__(self, gpus, version=13000, init_error=CUresult.CUDA_SUCCESS):
        self.gpus, self.version, self.init_error = gpus, version, init_error

    def cuDriverGetVersion(self):
        return CUresult.CUDA_SUCCESS, self.version

    def cuInit(self, flags):
        return (self.init_error,)

    def cuDeviceGetCount(self):
        return CUresult.CUDA_SUCCESS, len(self.gpus)

    def cuDeviceGet(self, ordinal):
        return CUresult.CUDA_SUCCESS, ordinal

    def cuDeviceGetName(self, length, dev):
        name = self.gpus[dev][0].encode()
        return CUresult.CUDA_SUCCESS, name + b"\0" * (length - len(name))

    def cuDeviceGetAttribute(self, attr, dev):
        major = attr == self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        return CUresult.CUDA_SUCCESS, self.gpus[dev][1][0 if major else 1]


def test_driver_facts_read_through_the_driver_bindings(monkeypatch):
    driver = FakeDriver([("NVIDIA H200", (9, 0)), ("Tesla T4", (7, 5))], version=12080)
    monkeypatch.setattr(_device_facts, "_driver_module", lambda: driver)
    assert _device_facts._read_driver() == _device_facts.DriverFacts(
        True,
        (12, 8),
        None,
        (
            _device_facts.GpuFacts(0, "NVIDIA H200", (9, 0)),
            _device_facts.GpuFacts(1, "Tesla T4", (7, 5)),
        ),
    )


def test_driver_facts_say_none_where_the_driver_cannot_answer(monkeypatch):
    """A failing call (its CUresult's name, or its number), bindings that cannot be
    imported, an error without a message: no driver, never an exception."""
    no_device = FakeDriver([], init_error=CUresult.CUDA_ERROR_NO_DEVICE)
    unnamed = FakeDriver([], init_error=999)

    def not_importable():
        raise RuntimeError("cuda-python is not importable (No module named 'cuda')")

    def silent():
        raise OSError()

    for module, error in [
        (lambda: no_device, "CUDA_ERROR_NO_DEVICE"),
        (lambda: unnamed, "999"),
        (not_importable, "cuda-python is not importable (No module named 'cuda')"),
        (silent, "OSError"),
    ]:
        monkeypatch.setattr(_device_facts, "_driver_module", module)
        assert _device_facts._read_driver() == _device_facts.DriverFacts(False, None, error, ())


def test_driver_module_of_either_cuda_python_layout(monkeypatch):
    new, old = types.ModuleType("cuda.bindings"), types.ModuleType("cuda")
    new.driver, old.cuda = object(), object()
    monkeypatch.setitem(sys.modules, "cuda", old)
    monkeypatch.setitem(sys.modules, "cuda.bindings", new)
    assert _device_facts._driver_module() is new.driver  # cuda-python >= 12.6
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # (None: import fails)
    assert _device_facts._driver_module() is old.cuda  # the older layout
    monkeypatch.setitem(sys.modules, "cuda", None)
    with pytest.raises(RuntimeError, match=r"cuda-python is not importable \(.*cuda"):
        _device_facts._driver_module()


def test_driver_facts_are_read_once_per_process(monkeypatch):
    reads = []
    facts = _device_facts.DriverFacts(False, None, "no driver", ())
    monkeypatch.setattr(_device_facts, "_read_driver", lambda: reads.append(1) or facts)
    _device_facts.driver_facts.cache_clear()
    try:
        assert _device_facts.driver_facts() is facts
        assert _device_facts.driver_facts() is facts
        assert reads == [1]
    finally:
        _device_facts.driver_facts.cache_clear()


def test_gpu_facts_fall_back_to_torch_past_the_drivers_list(monkeypatch):
    t4 = _device_facts.GpuFacts(0, "Tesla T4", (7, 5))
    facts = _device_facts.DriverFacts(True, (13, 0), None, (t4,))
    monkeypatch.setattr(_device_facts, "driver_facts", lambda: facts)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: f"GPU {index}")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: [8, 6])
    assert _device_facts.gpu(0) is t4
    assert _device_facts.gpu(1) == _device_facts.GpuFacts(1, "GPU 1", (8, 6))
