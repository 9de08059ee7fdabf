"""ci/gpu-test.sh PREBUILT=1 in a scratch tree, with stand-ins for python3 and nvidia-smi:
the carried provider wheel is installed only where its digest (ci/prebuild.sh writes it,
ci/provider-digest.sh computes it) matches the tree's provider sources; a stale or unstamped
wheel is built afresh instead of tested. And the digest covers sources, not build outputs."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WHEEL = "aotinfer_sm90a-0-cp312-cp312-linux_x86_64.whl"
PYTHON_SHIM = """#!/usr/bin/env bash
case "$1 $2 $3" in
  "-m pip wheel"*)
    for ((i = 1; i <= $#; i++)); do
      if [ "${!i}" = "-w" ]; then j=$((i + 1)); touch "${!j}/$WHEEL"; fi
    done
    echo built >> "$SHIM_LOG" ;;
  "-m pip install"*) echo "install $*" >> "$SHIM_LOG" ;;
  "-m pytest"*) echo "1 passed in 0.01s" ;;
  -c*) echo sm90a ;;
esac
exit 0
"""


def scratch_tree(tmp_path):
    """A tree with the CI scripts and one file in each place a provider is built from."""
    scripts = ("ci/gpu-test.sh", "ci/prebuild.sh", "ci/provider-digest.sh", "ci/provider-arch.sh")
    sources = (
        "CMakeLists.txt",
        "cmake/arches.cmake",
        "providers/csrc/k.cu",
        "providers/sm90a/pyproject.toml",
    )
    for name in scripts + sources:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        if name in scripts:
            shutil.copy(ROOT / name, tmp_path / name)  # (keeps the mode: gpu-test.sh runs them)
        else:
            (tmp_path / name).write_text(f"// {name}\n")
    (tmp_path / "core").mkdir()
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / WHEEL).touch()
    shim = tmp_path / "shim"
    shim.mkdir()
    for tool, text in {
        "python3": PYTHON_SHIM,
        "nvidia-smi": "#!/bin/sh\necho 'Fake GPU, 9.0, 1'\n",
    }.items():
        (shim / tool).write_text(text)
        (shim / tool).chmod(0o755)
    return tmp_path


def digest(tree):
    return subprocess.run(
        ["bash", str(tree / "ci" / "provider-digest.sh"), "sm90a"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def gpu_test(tree):
    """Runs ci/gpu-test.sh PREBUILT=1: (stdout, the stand-in python's log lines)."""
    log = tree / "shim.log"
    log.touch()
    env = {
        "PATH": f"{tree / 'shim'}:/usr/bin:/bin",
        "SHIM_LOG": str(log),
        "PREBUILT": "1",
        "AOTINFER_COMMIT": "abc",
        "WHEEL": WHEEL,
    }
    done = subprocess.run(
        ["bash", str(tree / "ci" / "gpu-test.sh")], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout, log.read_text().splitlines()


def test_a_wheel_whose_digest_matches_is_installed_not_built(tmp_path):
    tree = scratch_tree(tmp_path)
    (tree / "dist" / "aotinfer_sm90a.digest").write_text(digest(tree) + "\n")
    out, events = gpu_test(tree)
    assert "installed the prebuilt" in out
    assert "built" not in events
    assert any(e.startswith("install") and "dist/aotinfer_sm90a-" in e for e in events)


def test_a_stale_wheel_is_built_afresh(tmp_path):
    tree = scratch_tree(tmp_path)
    stamped = digest(tree)
    (tree / "dist" / "aotinfer_sm90a.digest").write_text(stamped + "\n")
    (tree / "providers" / "csrc" / "k.cu").write_text("// edited after the wheel was built\n")
    out, events = gpu_test(tree)
    assert (
        f"built from provider sources {stamped}, this tree's are {digest(tree)}: building here"
        in out
    )
    assert "installed the prebuilt" not in out
    assert events.count("built") == 1


def test_a_wheel_without_a_digest_is_built_afresh(tmp_path):
    tree = scratch_tree(tmp_path)
    out, events = gpu_test(tree)
    assert "no wheel with a digest in dist/" in out
    assert events.count("built") == 1


def test_the_digest_follows_sources_and_ignores_build_outputs(tmp_path):
    tree = scratch_tree(tmp_path)
    before = digest(tree)
    for output in (
        "providers/sm90a/build/k.o",
        "providers/sm90a/pkg/__pycache__/m.pyc",
        "cmake/source_revision.txt",
    ):
        (tree / output).parent.mkdir(parents=True, exist_ok=True)
        (tree / output).write_text("output")
    assert digest(tree) == before
    (tree / "cmake" / "arches.cmake").write_text("# another arch list\n")
    assert digest(tree) != before
    (tree / "cmake" / "arches.cmake").write_text("// cmake/arches.cmake\n")
    (tree / "providers" / "sm80").mkdir()
    (tree / "providers" / "sm80" / "pyproject.toml").write_text("another provider")
    assert digest(tree) == before  # another provider's sources are not this wheel's
