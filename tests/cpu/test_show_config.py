"""`aotinfer show-config` on a machine without a GPU, and format_config on synthetic configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

from aotinfer import _providers
from aotinfer._version import __version__
from aotinfer.cli import format_config


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTINFER_")}
    env["AOTINFER_PROVIDER"] = "sm90a"
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even where the CI machine has one
    return env


def _run(args, tmp_path):
    result = subprocess.run(
        args, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_show_config_text(tmp_path):
    out = _run([sys.executable, "-m", "aotinfer", "show-config"], tmp_path)
    lines = out.splitlines()
    assert lines[0] == f"aotinfer {__version__} (provider ABI {_providers.ABI_VERSION})"
    assert f"torch {torch.__version__}" in lines[1]
    assert lines[2].startswith("NVIDIA driver: not available")
    gpus = lines.index("GPUs:")
    assert lines[gpus + 1] == "  none visible"
    env = lines.index("environment:")
    assert "  AOTINFER_PROVIDER=sm90a" in lines[env + 1 :]
    assert "providers:" in lines


def _console_script():
    name = "aotinfer.exe" if os.name == "nt" else "aotinfer"
    path = Path(sysconfig.get_path("scripts")) / name
    assert path.exists(), f"console script {path} not installed (pip install -e core)"
    return str(path)


def test_show_config_json(tmp_path):
    cfg = json.loads(_run([_console_script(), "show-config", "--json"], tmp_path))
    assert cfg["aotinfer"] == __version__
    assert cfg["abi_version"] == _providers.ABI_VERSION
    assert cfg["torch"] == torch.__version__
    assert cfg["gpus"] == []
    assert cfg["driver"]["available"] is False
    assert cfg["driver"]["error"]
    assert cfg["environment"] == {"AOTINFER_PROVIDER": "sm90a"}
    for p in cfg["providers"]:
        assert p["status"] == "usable" or p["status"].startswith(("skipped: ", "broken: "))


def test_no_command_prints_help():
    from aotinfer.cli import main

    with pytest.raises(SystemExit):
        main(["--no-such-option"])
    assert main([]) == 2


def _config(**changes):
    cfg = {
        "aotinfer": "0.1.0",
        "abi_version": 1,
        "python": "3.11.7",
        "torch": "2.13.0+cu130",
        "torch_cuda": "13.0",
        "torch_sees_cuda": True,
        "driver": {
            "available": True,
            "release": "580.95.05",
            "cuda_version": "13.0",
            "error": None,
        },
        "providers": [
            {
                "arch": "sm90a",
                "version": "0.1.0",
                "abi_version": 1,
                "cuda_version": "13.0",
                "sass_targets": ["sm_90a"],
                "location": "/site-packages/aotinfer_sm90a",
                "status": "usable",
            },
            {"arch": "sm75", "status": "broken: its manifest could not be read (boom)"},
        ],
        "gpus": [
            {"index": 0, "name": "NVIDIA H200", "capability": "9.0", "provider": "sm90a"},
            {
                "index": 1,
                "name": "NVIDIA L4",
                "capability": "8.9",
                "provider": None,
                "problem": "no aotinfer provider for compute capability 8.9 (NVIDIA L4); "
                "installed: sm75, sm90a; install: pip install 'aotinfer[sm80]'",
                "install": "pip install 'aotinfer[sm80]'",
            },
        ],
        "environment": {"AOTINFER_ALLOW_VERSION_SKEW": "1"},
    }
    cfg.update(changes)
    return cfg


def test_format_config_served_and_unserved_gpu():
    text = format_config(_config())
    lines = text.splitlines()
    assert lines[0] == "aotinfer 0.1.0 (provider ABI 1)"
    assert lines[1] == "python 3.11.7, torch 2.13.0+cu130 (CUDA 13.0, sees CUDA: yes)"
    assert lines[2] == "NVIDIA driver: 580.95.05, supports CUDA 13.0"
    assert (
        "  sm90a: aotinfer-sm90a 0.1.0, ABI 1, built with CUDA 13.0, SASS sm_90a [usable]" in lines
    )
    assert "  sm75: [broken: its manifest could not be read (boom)]" in lines
    gpus = lines.index("GPUs:")
    served = "  cuda:0 NVIDIA H200, compute capability 9.0: served by aotinfer-sm90a"
    assert lines[gpus + 1] == served
    assert lines[gpus + 2].startswith("  cuda:1 NVIDIA L4, compute capability 8.9: NOT served: ")
    assert "pip install 'aotinfer[sm80]'" in lines[gpus + 2]
    assert lines[-2:] == ["environment:", "  AOTINFER_ALLOW_VERSION_SKEW=1"]


def test_format_config_nothing_installed_no_driver():
    text = format_config(
        _config(
            torch="2.13.0+cpu",
            torch_cuda=None,
            torch_sees_cuda=False,
            driver={"available": False, "release": None, "cuda_version": None, "error": "no"},
            providers=[],
            gpus=[],
            environment={},
        )
    )
    lines = text.splitlines()
    assert lines[1] == "python 3.11.7, torch 2.13.0+cpu (CUDA none, sees CUDA: no)"
    assert lines[2] == "NVIDIA driver: not available (no)"
    assert lines[lines.index("providers:") + 1] == "  none installed"
    assert lines[lines.index("GPUs:") + 1] == "  none visible"
    assert lines[-1] == "  no AOTINFER_* variables set"


def test_format_config_shows_install_command_for_unserved_gpu():
    gpu = {
        "index": 0,
        "name": "NVIDIA L4",
        "capability": "8.9",
        "provider": None,
        "problem": "AOTINFER_PROVIDER='sm89' is not a provider; valid names: sm75, sm80, "
        "sm90a, sm100a, sm110a, sm120f",
        "install": "pip install 'aotinfer[sm80]'",
    }
    assert "pip install 'aotinfer[sm80]'" in format_config(_config(gpus=[gpu]))


class FakeNvml:
    """libnvidia-ml as _nvml_driver_version calls it (0 is NVML_SUCCESS)."""

    def __init__(self, init=0, version=0):
        self.init, self.version, self.shut_down = init, version, False

    def nvmlInit_v2(self):
        return self.init

    def nvmlSystemGetDriverVersion(self, buf, length):
        assert length.value == len(buf)
        buf.value = b"580.95.05"
        return self.version

    def nvmlShutdown(self):
        self.shut_down = True


def test_driver_release_read_through_nvml(monkeypatch):
    """The release string, or None where NVML is missing, fails to start or to answer
    (shut down again once started)."""
    from aotinfer import cli

    def load(nvml):
        def cdll(name):
            assert name == "libnvidia-ml.so.1"
            if isinstance(nvml, Exception):
                raise nvml
            return nvml

        monkeypatch.setattr(cli.ctypes, "CDLL", cdll)

    ok, no_init, no_answer = FakeNvml(), FakeNvml(init=1), FakeNvml(version=3)
    load(ok)
    assert cli._nvml_driver_version() == "580.95.05" and ok.shut_down
    load(no_init)
    assert cli._nvml_driver_version() is None and not no_init.shut_down
    load(no_answer)
    assert cli._nvml_driver_version() is None and no_answer.shut_down
    load(OSError("libnvidia-ml.so.1: cannot open shared object file"))
    assert cli._nvml_driver_version() is None
    load(object())  # a library without the functions (AttributeError)
    assert cli._nvml_driver_version() is None


def test_collect_config_of_a_gpu_no_provider_exists_for(monkeypatch):
    """No install command for a compute capability no provider serves (7.0 here); the
    driver's release comes from NVML when the driver answers."""
    from aotinfer import _device_facts, cli

    v100 = _device_facts.GpuFacts(0, "Tesla V100-SXM2-32GB", (7, 0))
    t4 = _device_facts.GpuFacts(1, "Tesla T4", (7, 5))
    facts = _device_facts.DriverFacts(True, (13, 0), None, (v100, t4))
    monkeypatch.setattr(_device_facts, "driver_facts", lambda: facts)
    monkeypatch.setattr(_providers, "read_manifests", lambda: ([], []))
    monkeypatch.setattr(cli, "_nvml_driver_version", lambda: "580.95.05")
    cfg = cli.collect_config()
    assert cfg["driver"] == {
        "available": True, "release": "580.95.05", "cuda_version": "13.0", "error": None,
    }  # fmt: skip
    unserved, served_elsewhere = cfg["gpus"]
    assert unserved["provider"] is None and "install" not in unserved
    assert "no aotinfer provider exists for it" in unserved["problem"]
    assert served_elsewhere["install"] == "pip install 'aotinfer[sm75]'"
    assert cli.problems(cfg)[:2] == ["cuda:0 not served", "cuda:1 not served"]
