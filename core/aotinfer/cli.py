"""The ``aotinfer`` command line (also ``python -m aotinfer``).

``aotinfer show-config`` prints versions, installed providers, the driver and each visible
GPU with the provider that serves it (or the pip command that would). It works on a machine
with no GPU and no driver.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from typing import List, Optional

from . import _arches, _device_facts, _providers
from ._version import __version__


def _nvml_driver_version() -> Optional[str]:
    """The driver's release string (e.g. '580.95.05') through NVML, or None."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        buf = ctypes.create_string_buffer(96)
        ok = nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0
        nvml.nvmlShutdown()
        return buf.value.decode() if ok else None
    except (OSError, AttributeError):
        return None


def _core_switch_problems() -> List[str]:
    """The AOTINFER_* switches the core reads, each through its own reader (README's switch
    table). The provider's switches are read, and refused, by the kernels that use them, at
    their first launch: show-config runs no kernel."""
    from . import _decode_launch, _decode_plan, _sampling_ops

    found = []
    for read in (
        _decode_launch.prepared_launches_on,
        _decode_plan.work_runs_mode,
        _sampling_ops._top_p_draw,
    ):
        try:
            read()
        except ValueError as exc:
            found.append(str(exc))
    return found


def collect_config() -> dict:
    """Everything show-config reports, as plain data."""
    import torch

    manifests, broken = _providers.read_manifests()
    env_problems = []
    try:
        allow_skew = _providers.env_allow_skew()
    except ValueError as exc:
        env_problems.append(str(exc))
        allow_skew = False
    forced = _providers.env_forced()
    try:
        if forced is not None:
            _providers.check_provider_name(forced, f"{_providers.ENV_PROVIDER}={forced!r}")
    except ValueError as exc:
        env_problems.append(str(exc))
    env_problems += _core_switch_problems()
    usable, skewed = _providers.screen(manifests, allow_skew, warn=False)
    discovery = _providers.Discovery(usable, broken + skewed)
    # By location, not arch: two registrations of one arch get their own status.
    skipped = {s.location: s.reason for s in skewed}
    facts = _device_facts.driver_facts()

    providers = [
        {
            "arch": m.arch,
            "version": m.version,
            "abi_version": m.abi_version,
            "cuda_version": m.cuda_version,
            "sass_targets": list(m.sass_targets),
            "location": m.location,
            "status": "skipped: " + skipped[m.location] if m.location in skipped else "usable",
        }
        for m in manifests
    ] + [{"arch": s.arch, "status": "broken: " + s.reason} for s in broken]

    gpus = []
    for g in facts.gpus:
        entry = {
            "index": g.index,
            "name": g.name,
            "capability": f"{g.capability[0]}.{g.capability[1]}",
        }
        try:
            chosen = _providers.choose(
                g.capability, g.name, discovery, _providers.env_forced(), facts.cuda_version
            )
            # Import its extension as the first kernel call would (safe without a GPU), so
            # "served by" is never said of a provider that cannot load.
            _providers._LoadedProvider(chosen, g.capability)
            entry["provider"] = chosen.arch
        except (ValueError, _providers.ProviderError) as exc:
            entry["provider"] = None
            entry["problem"] = str(exc)
            suggestion = _arches.suggested_provider(g.capability)
            if suggestion:
                entry["install"] = _providers.pip_command(suggestion)
        gpus.append(entry)

    return {
        "aotinfer": __version__,
        "abi_version": _providers.ABI_VERSION,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "torch_sees_cuda": bool(torch.cuda.is_available()),
        "driver": {
            "available": facts.available,
            "release": _nvml_driver_version() if facts.available else None,
            "cuda_version": "{}.{}".format(*facts.cuda_version) if facts.cuda_version else None,
            "error": facts.error,
        },
        "providers": providers,
        "gpus": gpus,
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith("AOTINFER_")},
        "environment_problems": env_problems,
    }


def problems(cfg: dict) -> List[str]:
    """What ``show-config --check`` fails on: a visible GPU not served, a provider skipped
    or broken, an AOTINFER_* variable that is not valid."""
    found = [f"cuda:{g['index']} not served" for g in cfg["gpus"] if not g["provider"]]
    found += [
        f"aotinfer-{p['arch']} {p['status']}" for p in cfg["providers"] if p["status"] != "usable"
    ]
    return found + list(cfg.get("environment_problems", []))


def format_config(cfg: dict) -> str:
    lines = [
        f"aotinfer {cfg['aotinfer']} (provider ABI {cfg['abi_version']})",
        f"python {cfg['python']}, torch {cfg['torch']} (CUDA {cfg['torch_cuda'] or 'none'}, "
        f"sees CUDA: {'yes' if cfg['torch_sees_cuda'] else 'no'})",
    ]
    drv = cfg["driver"]
    if drv["available"]:
        release = f"{drv['release']}, " if drv["release"] else ""
        lines.append(f"NVIDIA driver: {release}supports CUDA {drv['cuda_version']}")
    else:
        lines.append(f"NVIDIA driver: not available ({drv['error']})")
    lines.append("providers:")
    if not cfg["providers"]:
        lines.append("  none installed")
    for p in cfg["providers"]:
        if "version" in p:
            lines.append(
                f"  {p['arch']}: aotinfer-{p['arch']} {p['version']}, ABI {p['abi_version']}, "
                f"built with CUDA {p['cuda_version']}, SASS {' '.join(p['sass_targets'])} "
                f"[{p['status']}]"
            )
        else:
            lines.append(f"  {p['arch']}: [{p['status']}]")
    lines.append("GPUs:")
    if not cfg["gpus"]:
        lines.append("  none visible")
    for g in cfg["gpus"]:
        head = f"  cuda:{g['index']} {g['name']}, compute capability {g['capability']}: "
        if g["provider"]:
            lines.append(head + f"served by aotinfer-{g['provider']}")
        else:
            lines.append(head + f"NOT served: {g['problem']}")
            if g.get("install") and g["install"] not in g["problem"]:
                lines.append(f"    install: {g['install']}")
    lines.append("environment:")
    if not cfg["environment"]:
        lines.append("  no AOTINFER_* variables set")
    for k, v in cfg["environment"].items():
        lines.append(f"  {k}={v}")
    for problem in cfg.get("environment_problems", []):
        lines.append(f"  problem: {problem}")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="aotinfer", description="aotinfer command line")
    sub = parser.add_subparsers(dest="command")
    show = sub.add_parser("show-config", help="versions, providers, driver and GPUs")
    show.add_argument("--json", action="store_true", help="print as JSON")
    show.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a visible GPU is not served, a provider is skipped or broken, or an "
        "AOTINFER_* variable is invalid (for health checks)",
    )
    args = parser.parse_args(argv)
    if args.command == "show-config":
        cfg = collect_config()
        print(json.dumps(cfg, indent=2) if args.json else format_config(cfg))
        return 1 if args.check and problems(cfg) else 0
    parser.print_help()
    return 2
