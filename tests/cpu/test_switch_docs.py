"""Every environment switch a provider reads (std::getenv, or env_switch_on / env_choice of
common/env_switch.h, in providers/csrc) is documented in the README's switch table and has a
refusal test in tests/gpu/test_kernel_switches.py (an unknown value is a ValueError naming the
variable). A switch added to the sources without both fails here, on a machine without a
GPU."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def provider_switches():
    names = set()
    for path in (ROOT / "providers" / "csrc").rglob("*"):
        if path.suffix in (".cu", ".cuh", ".h", ".cpp"):
            text = path.read_text()
            calls = r'(?:getenv|env_switch_on|env_choice)\("(AOTINFER_[A-Z0-9_]+)"[,)]'
            names.update(re.findall(calls, text))
    return names


def test_the_sources_read_some_switches():
    switches = provider_switches()
    assert "AOTINFER_SAMPLING_GATHER" in switches and "AOTINFER_DECODE_KERNEL" in switches


def test_every_provider_switch_is_in_the_readme_table():
    table_rows = [
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("| `AOTINFER_")
    ]
    documented = {re.match(r"\| `(AOTINFER_[A-Z0-9_]+)", row).group(1) for row in table_rows}
    missing = provider_switches() - documented
    assert not missing, (
        f"switches read by the provider but not in README's table: {sorted(missing)}"
    )


def test_every_provider_switch_has_a_refusal_test():
    tests = (ROOT / "tests" / "gpu" / "test_kernel_switches.py").read_text()
    missing = {name for name in provider_switches() if f'"{name}"' not in tests}
    assert not missing, f"switches without a refusal test: {sorted(missing)}"
