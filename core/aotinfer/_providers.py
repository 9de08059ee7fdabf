"""Provider discovery, choice per device, and the errors that say what to install.

Providers register in the entry-point group ``aotinfer.providers`` (name = arch, value =
package). Discovery reads each provider's ``manifest.json`` without importing it; a
provider's extension is imported only when a CUDA tensor on a device it serves first needs
a kernel, and the choice is cached per device (the environment variables below are read
when it is made; ``reset_cache()`` forgets it).

Rules (DESIGN.md, "Provider discovery"):

- A provider whose ABI differs from the core's is skipped with a warning. One whose version
  differs is skipped with a warning naming both versions, unless
  ``AOTINFER_ALLOW_VERSION_SKEW=1`` (then a matching ABI is enough).
- A provider built with a CUDA major newer than the driver supports is refused with the
  driver needed, before any launch.
- Among the rest, the best SASS match wins (see ``_arches``); ``AOTINFER_PROVIDER=<arch>``
  forces one, and fails before any launch if it cannot run on the device.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from . import _arches
from ._version import __version__

ABI_VERSION = 4  # must equal AOTINFER_ABI_VERSION in CMakeLists.txt
ENTRY_POINT_GROUP = "aotinfer.providers"
ENV_PROVIDER = "AOTINFER_PROVIDER"
ENV_ALLOW_SKEW = "AOTINFER_ALLOW_VERSION_SKEW"

# Oldest Linux driver of each CUDA major (CUDA's minor-version compatibility covers the rest).
MIN_DRIVER_FOR_CUDA_MAJOR = {12: "525.60.13", 13: "580.65.06"}


class ProviderError(RuntimeError):
    """No usable provider for a device, or a forced provider that cannot serve it."""


@dataclass(frozen=True)
class Manifest:
    """What a provider says about itself in its manifest.json."""

    arch: str
    version: str
    abi_version: int
    sass_targets: Tuple[str, ...]
    cuda_version: str
    module: str
    gencode: str = ""
    compiler: str = ""
    source_revision: str = ""
    location: str = ""

    @property
    def distribution(self) -> str:
        return f"aotinfer-{self.arch}"

    @property
    def cuda_major(self) -> int:
        return int(self.cuda_version.split(".")[0])


@dataclass(frozen=True)
class Skipped:
    """An installed provider left out of the choice, and why (``location``: its manifest's
    folder where one was read, so that two registrations of one arch stay apart)."""

    arch: str
    reason: str
    location: str = ""


@dataclass
class Discovery:
    usable: List[Manifest] = field(default_factory=list)
    skipped: List[Skipped] = field(default_factory=list)

    @property
    def installed_names(self) -> List[str]:
        return sorted({m.arch for m in self.usable} | {s.arch for s in self.skipped})


def check_provider_name(name: str, what: str) -> None:
    """ValueError unless ``name`` is one of the providers; ``what`` says where it was read
    (``'AOTINFER_PROVIDER=sm9'``, a manifest's ``'sm9'``)."""
    if name not in _arches.PROVIDERS:
        raise ValueError(f"{what} is not a provider; valid names: {', '.join(_arches.PROVIDERS)}")


def pip_command(arch: str) -> str:
    return f"pip install 'aotinfer[{arch}]'"


def _entry_points():
    from importlib.metadata import entry_points

    eps = entry_points()
    if hasattr(eps, "select"):
        return list(eps.select(group=ENTRY_POINT_GROUP))
    return list(eps.get(ENTRY_POINT_GROUP, []))  # Python 3.9


def _read_manifest(arch: str, module: str) -> Manifest:
    spec = importlib.util.find_spec(module)  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {module!r} not found")
    path = Path(list(spec.submodule_search_locations)[0]) / "manifest.json"
    data = json.loads(path.read_text())
    # Every field the choice reads is checked here, so that a malformed manifest makes its
    # provider Skipped instead of failing later in the choice (or in show-config).
    if data["arch"] != arch:
        raise ValueError(
            f"its manifest says arch {data['arch']!r} but it is registered as {arch!r}"
        )
    check_provider_name(arch, repr(arch))
    for name in ("version", "cuda_version"):
        if not isinstance(data[name], str) or not data[name]:
            raise ValueError(f"{name} must be a non-empty string, got {data[name]!r}")
    if not re.match(r"^\d+\.\d+", data["cuda_version"]):
        raise ValueError(f"cuda_version must look like '13.0', got {data['cuda_version']!r}")
    manifest = Manifest(
        arch=data["arch"],
        version=data["version"],
        abi_version=int(data["abi_version"]),
        sass_targets=tuple(data["sass_targets"]),
        cuda_version=data["cuda_version"],
        module=module,
        gencode=data.get("gencode", ""),
        compiler=data.get("compiler", ""),
        source_revision=data.get("source_revision", ""),
        location=str(path.parent),
    )
    targets = data["sass_targets"]
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ValueError(f"sass_targets must be a list of strings, got {targets!r}")
    for t in targets:
        _arches.Target.parse(t)  # a malformed target makes the provider Skipped, not a crash later
    return manifest


def read_manifests() -> Tuple[List[Manifest], List[Skipped]]:
    """Every registered provider's manifest; broken registrations become Skipped entries."""
    manifests, broken = [], []
    for ep in _entry_points():
        try:
            manifests.append(_read_manifest(ep.name, ep.value.split(":")[0]))
        except Exception as exc:
            broken.append(Skipped(ep.name, f"its manifest could not be read ({exc})"))
    return manifests, broken


def screen(
    manifests: Sequence[Manifest], allow_skew: bool, warn: bool = True
) -> Tuple[List[Manifest], List[Skipped]]:
    """Splits manifests into usable ones and those skipped for ABI or version skew, or as a
    second usable registration of an arch (the first in entry-point order, which is
    sys.path order, serves; the warning names both)."""
    usable, skipped = [], []
    first: Dict[str, Manifest] = {}
    for m in manifests:
        reason = None
        if m.abi_version != ABI_VERSION:
            reason = (
                f"aotinfer-{m.arch} {m.version} has provider ABI {m.abi_version}, but aotinfer "
                f"{__version__} needs ABI {ABI_VERSION}; install matching versions: "
                f"pip install 'aotinfer[{m.arch}]=={__version__}'"
            )
        elif m.version != __version__ and not allow_skew:
            reason = (
                f"aotinfer-{m.arch} is version {m.version} but aotinfer is {__version__}; "
                f"install matching versions (pip install 'aotinfer[{m.arch}]=={__version__}') "
                f"or set {ENV_ALLOW_SKEW}=1 to accept it"
            )
        elif m.arch in first:
            reason = (
                f"aotinfer-{m.arch} is registered twice; the one at {first[m.arch].location} "
                f"serves, this one at {m.location} is not used; uninstall one of them"
            )
        if reason is None:
            usable.append(m)
            first[m.arch] = m
        else:
            skipped.append(Skipped(m.arch, reason, m.location))
            if warn:
                warnings.warn(
                    f"aotinfer: skipping provider: {reason}", RuntimeWarning, stacklevel=3
                )
    return usable, skipped


def driver_refusal(m: Manifest, driver_cuda: Optional[Tuple[int, int]]) -> Optional[str]:
    """Why the driver cannot run this provider, or None. driver_cuda None means unknown."""
    if driver_cuda is None or driver_cuda[0] >= m.cuda_major:
        return None
    need = MIN_DRIVER_FOR_CUDA_MAJOR.get(m.cuda_major)
    need_text = f"driver {need} or newer" if need else f"a driver for CUDA {m.cuda_major}"
    return (
        f"aotinfer-{m.arch} {m.version} was built with CUDA {m.cuda_version} and needs an "
        f"NVIDIA driver that supports CUDA {m.cuda_major} ({need_text}); the installed driver "
        f"supports CUDA {driver_cuda[0]}.{driver_cuda[1]}"
    )


def _capability_text(capability: Tuple[int, int], gpu_name: str) -> str:
    return f"compute capability {capability[0]}.{capability[1]} ({gpu_name})"


def choose(
    capability: Tuple[int, int],
    gpu_name: str,
    discovery: Discovery,
    forced: Optional[str] = None,
    driver_cuda: Optional[Tuple[int, int]] = None,
) -> Manifest:
    """The provider that serves a device; raises ProviderError/ValueError saying what to do.

    Pure: the caller supplies the installed providers, the forced name and driver facts.
    """
    where = _capability_text(capability, gpu_name)
    suggestion = _arches.suggested_provider(capability)
    installed = ", ".join(discovery.installed_names) or "none"
    fix = (
        f"install: {pip_command(suggestion)}"
        if suggestion
        else "no aotinfer provider exists for it (supported: 7.5, 8.x, 9.0, 10.0, 11.0, 12.x)"
    )
    refused = [Skipped(s.arch, s.reason) for s in discovery.skipped]

    if forced is not None:
        check_provider_name(forced, f"{ENV_PROVIDER}={forced!r}")
        match = [m for m in discovery.usable if m.arch == forced]
        if not match:
            why = "; ".join(s.reason for s in refused if s.arch == forced)
            raise ProviderError(
                f"{ENV_PROVIDER}={forced} but aotinfer-{forced} is not usable"
                f"{': ' + why if why else ' (not installed)'}; installed: {installed}; "
                f"install: {pip_command(forced)}"
            )
        m = match[0]
        if _arches.best_rank(m.sass_targets, capability) is None:
            raise ProviderError(
                f"{ENV_PROVIDER}={forced} forces aotinfer-{forced}, whose SASS targets "
                f"({', '.join(m.sass_targets)}) do not run on {where}; unset {ENV_PROVIDER} "
                f"or {fix}"
            )
        refusal = driver_refusal(m, driver_cuda)
        if refusal:
            raise ProviderError(f"cannot use aotinfer-{forced} on {where}: {refusal}")
        return m

    ranked = []
    for m in discovery.usable:
        rank = _arches.best_rank(m.sass_targets, capability)
        if rank is None:
            continue
        refusal = driver_refusal(m, driver_cuda)
        if refusal:
            refused.append(Skipped(m.arch, refusal))
            continue
        ranked.append((rank, m.arch, m))
    if ranked:
        return max(ranked, key=lambda r: (r[0], r[1]))[2]
    reasons = "".join(f"; skipped {s.arch}: {s.reason}" for s in refused)
    raise ProviderError(f"no aotinfer provider for {where}; installed: {installed}; {fix}{reasons}")


def env_forced() -> Optional[str]:
    value = os.environ.get(ENV_PROVIDER, "").strip()
    return value or None


def env_allow_skew() -> bool:
    """AOTINFER_ALLOW_VERSION_SKEW: 1/true/yes/on, or 0/false/no/off/unset; anything else is
    a ValueError (as the other AOTINFER_* switches), not a silent off."""
    value = os.environ.get(ENV_ALLOW_SKEW, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(
        f"{ENV_ALLOW_SKEW}={os.environ[ENV_ALLOW_SKEW]!r} is not a switch; use 1/true/yes/on "
        "or 0/false/no/off"
    )


def discover(warn: bool = True) -> Discovery:
    """Installed providers, screened for ABI and version skew under the current environment."""
    manifests, broken = read_manifests()
    usable, skipped = screen(manifests, env_allow_skew(), warn=warn)
    return Discovery(usable, broken + skipped)


class _LoadedProvider:
    """A chosen provider with its imported extension module."""

    def __init__(self, manifest: Manifest, capability: Tuple[int, int]):
        self.manifest = manifest
        self.capability = capability
        try:
            self.kernels = importlib.import_module(f"{manifest.module}._kernels")
        except Exception as exc:  # a failing module init raises more than ImportError
            raise ProviderError(
                f"aotinfer-{manifest.arch} is installed but its extension failed to import "
                f"({type(exc).__name__}: {exc}); reinstall it: "
                f"pip install --force-reinstall 'aotinfer[{manifest.arch}]=={__version__}'"
            ) from exc
        abi = getattr(self.kernels, "ABI_VERSION", None)
        if abi != ABI_VERSION:
            raise ProviderError(
                f"aotinfer-{manifest.arch} {manifest.version} at {manifest.location}: its "
                f"extension has provider ABI {abi} (its manifest says "
                f"{manifest.abi_version}), but aotinfer {__version__} needs ABI {ABI_VERSION}; "
                f"reinstall matching versions: "
                f"pip install --force-reinstall 'aotinfer[{manifest.arch}]=={__version__}'"
            )


# Device index -> its provider. The environment (AOTINFER_PROVIDER, AOTINFER_ALLOW_VERSION_SKEW)
# is read when a device's provider is chosen, not on every call: two os.environ lookups were
# part of the host time that the eager sampling calls lost (dev/NOTES.md item 47).
# reset_cache() makes the next call choose again under the environment of that moment.
_cache: Dict[int, _LoadedProvider] = {}
_cache_lock = threading.Lock()


def provider_for_device(index: int) -> _LoadedProvider:
    """The provider serving CUDA device ``index``, chosen on its first use (and again after
    ``reset_cache()``)."""
    loaded = _cache.get(index)
    if loaded is not None:
        return loaded
    with _cache_lock:
        loaded = _cache.get(index)
        if loaded is None:
            from . import _device_facts

            gpu = _device_facts.gpu(index)
            facts = _device_facts.driver_facts()
            forced = env_forced()
            manifest = choose(gpu.capability, gpu.name, discover(), forced, facts.cuda_version)
            loaded = _LoadedProvider(manifest, gpu.capability)
            _cache[index] = loaded
    return loaded


def provider_for(device) -> _LoadedProvider:
    """provider_for_device for a CUDA ``torch.device`` (index None: device 0)."""
    return provider_for_device(0 if device.index is None else device.index)


def kernels_for(device):
    """The provider's kernel module for a CUDA ``torch.device``, imported on first use (the
    hot path of every eager call: after the first, one dict lookup)."""
    return provider_for(device).kernels


def reset_cache() -> None:
    """Forgets every per-device choice, so the next call chooses again and re-reads the
    environment (tests, after installing a provider or changing AOTINFER_PROVIDER at run
    time)."""
    with _cache_lock:
        _cache.clear()
