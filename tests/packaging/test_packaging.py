"""Packaging: the core and sm90a wheels install offline and hold what DESIGN.md promises.

Builds both wheels with ci/build-wheels.sh (no build isolation: offline), or reuses them
from the folder named by AOTINFER_TEST_WHEELHOUSE so that CI does not build twice. Then
installs them, as the air-gapped user does, into a fresh venv that sees the system's torch
and cuda-python, and checks the installed provider: discovered by `aotinfer show-config`,
no link-time dependency on PyTorch or the CUDA runtime/driver, sm_90a SASS only (no PTX),
compressed, and a small wheel; that every provider's sdist (ci/build_sdists.py) carries its
sources; and, where SOURCE_DATE_EPOCH is set, that the sm90a wheel builds again, from its
sdist unpacked at another path, to the same bytes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from aotinfer import _arches

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MAX_WHEEL_BYTES = 25_000_000  # DESIGN.md: provider wheel goal, 25 MB or less
# No link-time dependency on PyTorch (any torch serves) or on the CUDA runtime/driver
# (static cudart; libcuda is opened at run time, so the module imports without a driver).
FORBIDDEN_NEEDED = ("libtorch", "libc10", "libcudart", "libcuda")


def _fatbin_entries(path):
    spec = importlib.util.spec_from_file_location("fatbin_targets", ROOT / "ci/fatbin_targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fatbin_entries(path)


def _nvcc():
    for candidate in (os.environ.get("CUDACXX"), shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def _clean_env():
    """The environment without pip settings, so only the wheelhouse can satisfy an install
    (site pip config may add find-links or index URLs that hold other builds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, (
        f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n"
        f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result.stdout


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    if os.environ.get("AOTINFER_TEST_WHEELHOUSE"):
        return Path(os.environ["AOTINFER_TEST_WHEELHOUSE"])
    if _nvcc() is None:
        pytest.skip("nvcc not found (CUDACXX, PATH, /usr/local/cuda/bin): cannot build sm90a")
    out = tmp_path_factory.mktemp("wheelhouse")
    env = dict(os.environ, AOTINFER_BUILD_ISOLATION="0", AOTINFER_WHEEL_DIR=str(out))
    env.setdefault("PYTHON", sys.executable)
    _run(["bash", str(ROOT / "ci/build-wheels.sh"), "sm90a"], env=env, cwd=ROOT)
    return out


@pytest.fixture(scope="module")
def venv(wheelhouse, tmp_path_factory):
    """A venv with the two wheels installed from the wheelhouse only."""
    path = tmp_path_factory.mktemp("venv") / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(path)])
    python = path / "bin" / "python"
    env = _clean_env()
    # --ignore-installed: the system site may already hold aotinfer (editable) and a
    # provider, which would otherwise "satisfy" the request. --no-deps: torch and
    # cuda-python come from the system site, and `pip check` below proves they satisfy
    # the core's requirements.
    _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--find-links",
            str(wheelhouse),
            "--ignore-installed",
            "--no-deps",
            "aotinfer",
            "aotinfer-sm90a",
        ],
        env=env,
    )
    check = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, env=env)
    # Judge only the two distributions installed here; other system packages are not ours.
    ours = [line for line in check.stdout.splitlines() if line.lower().startswith("aotinfer")]
    assert not ours, "\n".join(ours)
    return path


def _wheel(wheelhouse, prefix):
    found = sorted(wheelhouse.glob(f"{prefix}-*.whl"))
    assert found, f"no {prefix} wheel in {wheelhouse}"
    return found[-1]


def test_installed_core_is_the_wheel_not_the_system_copy(venv):
    where = _run(
        [venv / "bin/python", "-c", "import aotinfer; print(aotinfer.__file__)"],
        env=_clean_env(),
        cwd=venv,
    )
    assert Path(where.strip()).resolve().is_relative_to(venv.resolve()), where


def test_show_config_lists_sm90a(venv):
    text = _run([venv / "bin/aotinfer", "show-config"], env=_clean_env(), cwd=venv)
    assert re.search(r"^\s+sm90a: aotinfer-sm90a ", text, re.M), text
    cfg = json.loads(
        _run([venv / "bin/aotinfer", "show-config", "--json"], env=_clean_env(), cwd=venv)
    )
    sm90a = [p for p in cfg["providers"] if p["arch"] == "sm90a"]
    assert sm90a and sm90a[0]["status"] == "usable", cfg["providers"]
    assert Path(sm90a[0]["location"]).resolve().is_relative_to(venv.resolve()), sm90a


def _installed_extension(venv):
    found = list(venv.glob("lib/python*/site-packages/aotinfer_sm90a/_kernels*.so"))
    assert len(found) == 1, found
    return found[0]


def test_extension_needs_no_torch_or_cuda_libraries(venv):
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf not found (binutils): cannot read the extension's NEEDED entries")
    dynamic = _run([readelf, "-d", _installed_extension(venv)])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert needed, dynamic  # parsed something: at least libc/libstdc++
    assert not [lib for lib in needed if lib.startswith(FORBIDDEN_NEEDED)], needed


def test_fatbin_is_sm90a_sass_only(venv):
    entries = _fatbin_entries(_installed_extension(venv))
    assert entries, "no .nv_fatbin entries"
    assert {(e["kind"], e["sm"]) for e in entries} == {("ELF", 90)}, entries
    assert {e["arch"] for e in entries} == {"sm_90a"}, entries
    assert all(e["compressed"] for e in entries), entries


def test_wheel_size(wheelhouse):
    wheel = _wheel(wheelhouse, "aotinfer_sm90a")
    assert wheel.stat().st_size <= MAX_WHEEL_BYTES, f"{wheel.name}: {wheel.stat().st_size} bytes"
    with zipfile.ZipFile(wheel) as zf:  # the manifest the core reads must travel with it
        assert "aotinfer_sm90a/manifest.json" in zf.namelist()


@pytest.mark.parametrize("prefix", ["aotinfer", "aotinfer_sm90a"])
def test_wheels_carry_the_license_text(wheelhouse, prefix):
    """Both wheels declare Apache-2.0, whose terms ask that the text travel with the code:
    the repository's LICENSE (core/ and providers/<arch>/ link to it) is in .dist-info."""
    with zipfile.ZipFile(_wheel(wheelhouse, prefix)) as zf:
        names = [n for n in zf.namelist() if re.search(r"\.dist-info/(licenses/)?LICENSE$", n)]
        assert names, f"{prefix}: no LICENSE in {zf.namelist()}"
        assert zf.read(names[0]) == (ROOT / "LICENSE").read_bytes()


# The provider's host-side checks run before any CUDA call, so the installed extension can
# be asked about bad plan data on a machine without a GPU: views are plain 5-tuples
# (pointer, dtype code, shape, strides, device), the pointers never dereferenced.
_VIEWS = r"""
import aotinfer_sm90a._kernels as k

F32, F16, BF16, I32 = 0, 1, 2, 3


def v(shape, dtype=F32, ptr=1 << 20):
    strides, step = [], 1
    for n in reversed(shape):
        strides.insert(0, step)
        step *= n
    return (ptr, dtype, tuple(shape), tuple(strides), 0)
"""


def _assert_refusals(venv, script, expected):
    """Runs _VIEWS + script in the wheel's venv; each line it prints must be a ValueError
    holding the next expected text."""
    lines = _run(
        [venv / "bin/python", "-c", _VIEWS + script], env=_clean_env(), cwd=venv
    ).splitlines()
    assert len(lines) == len(expected), lines
    for line, text in zip(lines, expected):
        assert line.startswith("ValueError") and text in line, (line, text)


_DECODE_REFUSALS = r"""

B, HKV, PAGES = 4, 8, 8
table = (v((B + 1,), I32), v((PAGES,), I32), v((B,), I32))


def call(work, counts, arrivals):
    try:
        k.batch_decode(v((B, 32, 128), F16), v((PAGES, 16, HKV, 128), F16),
                       v((PAGES, 16, HKV, 128), F16), 0,
                       16, *table, 0, v((B, 32, 128), F16), None, None, None, work, counts,
                       arrivals, 1, 1, 1, 0.1, 0.0, -1, 0, 1.0, 1e4, None, 1.0, 1.0, None, 0)
    except ValueError as exc:
        print("ValueError:", exc)  # (ArgumentError, a ValueError)


work, counts, room = v((B, 4), I32), v((B,), I32), v((B * HKV,), I32)
call(work, counts, v((B * HKV - 1,), I32))
call(v((B, 3), I32), counts, room)
call(v((B - 1, 4), I32), counts, room)
call(v((B, 2, 3), I32), counts, room)
call(v((2, 2, 2, 4), I32), counts, room)
call(v((B, 0, 4), I32), counts, room)
call(v((1, B - 1, 4), I32), counts, room)
call(work, v((B - 1,), I32), room)
call(work, counts, None)
call(work, counts, (1, 2, 3))
call(work, counts, (1 << 20, I32, [B * HKV], (1,), 0))
"""


def test_decode_refuses_bad_work_lists_before_any_launch(venv):
    layout = "work must be a contiguous, 16-byte aligned (items, 4) or (items, entries, 4) int32"
    expected = [
        "arrivals needs batch_size x row blocks x num_kv_heads = 32 entries, got 31",
        layout,
        "the work list must cover every request",
        layout,
        "work must be (items, 4) or (items, entries, 4), got rank 4",
        "work needs at least one entry per item",
        "the work list must cover every request",
        "split_counts must have batch_size entries",
        "a work list needs split_counts and arrivals",
        "a tensor view is a 5-tuple",
        "a tensor view's shape and strides are tuples of ints",
    ]
    _assert_refusals(venv, _DECODE_REFUSALS, expected)


_SOFTMAX_REFUSALS = r"""
ROWS, VOCAB = 128, 128256  # 126 chunks of the smallest chunk length per row


def call(workspace):
    try:
        k.softmax(v((ROWS, VOCAB), BF16), v((ROWS, VOCAB)), None, 1.0, workspace, True, 0)
    except ValueError as exc:
        print("ValueError:", exc)


call(v((2 * ROWS * 126 - 1,)))
call(v((2 * ROWS * 126,), ptr=(1 << 20) + 4))
call(v((2 * ROWS * 126,), BF16))
call(None)
"""


def test_softmax_refuses_a_short_workspace_before_any_launch(venv):
    expected = [
        "workspace must hold at least 32256 floats, got 32255",
        "workspace must be 8-byte aligned",
        "workspace must be float32",
        "a tensor view is a 5-tuple",
    ]
    _assert_refusals(venv, _SOFTMAX_REFUSALS, expected)


def _members(wheel):
    with zipfile.ZipFile(wheel) as z:
        return {
            i.filename: (i.date_time, hashlib.sha256(z.read(i)).hexdigest()) for i in z.infolist()
        }


def _sdist_tool():
    spec = importlib.util.spec_from_file_location("build_sdists", ROOT / "ci/build_sdists.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _revision():
    return (
        subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        or "unknown"
    )


PROVIDERS = tuple(_arches.PROVIDERS)


@pytest.fixture(scope="module")
def sdists(tmp_path_factory):
    """Every provider's sdist as ci/build_sdists.py builds them (offline: no isolation;
    staging and packing only, no compiler), by provider."""
    out = tmp_path_factory.mktemp("sdist")
    env = dict(os.environ, AOTINFER_BUILD_ISOLATION="0")
    env.pop("AOTINFER_SOURCE_REVISION", None)  # the checkout's commit, as the wheelhouse's
    tool = [sys.executable, str(ROOT / "ci/build_sdists.py"), "--no-core", "--outdir", str(out)]
    _run([*tool, *PROVIDERS], env=env)
    return {arch: next(out.glob(f"aotinfer_{arch}-*.tar.gz")) for arch in PROVIDERS}


@pytest.mark.parametrize("arch", PROVIDERS)
def test_provider_sdist_carries_its_sources(sdists, arch):
    """A packager's sdist builds alone: it holds the shared sources the provider folder's
    pyproject reaches above itself for, builds from its own root, and names the commit."""
    with tarfile.open(sdists[arch]) as tar:
        top = tar.getnames()[0].split("/")[0]
        names = {n[len(top) + 1 :] for n in tar.getnames() if n.startswith(top + "/")}
        pyproject = tar.extractfile(f"{top}/pyproject.toml").read().decode()
        stamp = tar.extractfile(f"{top}/cmake/source_revision.txt").read().decode()
    tracked = _run(["git", "ls-files", "CMakeLists.txt", "cmake", "providers/csrc"], cwd=ROOT)
    wanted = set(tracked.split()) | {f"aotinfer_{arch}/__init__.py", "LICENSE", "README.md"}
    assert wanted <= names, sorted(wanted - names)
    stray = [n for n in names if n.endswith((".so", ".pyc")) or n.startswith("build/")]
    assert not stray, stray
    assert 'cmake.source-dir = "."' in pyproject and "../.." not in pyproject
    assert f'AOTINFER_PROVIDER = "{arch}"' in pyproject
    assert stamp.strip() == _revision()


def test_sdist_tool_names_an_unknown_provider():
    """A mistyped provider is refused by name, with the valid names, before anything is staged."""
    with pytest.raises(SystemExit, match="unknown provider 'sm91'.*sm90a"):
        _sdist_tool().stage_provider("sm91", Path(os.devnull))


def test_provider_wheel_is_reproducible(wheelhouse, sdists, tmp_path):
    """DESIGN.md's packager: an offline build is reproducible under SOURCE_DATE_EPOCH. The
    sm90a wheel built again from its sdist, unpacked at another path, with the same
    SOURCE_DATE_EPOCH (the sdist carries the source revision that build_info records), is
    the same bytes as the wheel built from the checkout."""
    if not os.environ.get("SOURCE_DATE_EPOCH"):
        pytest.skip("SOURCE_DATE_EPOCH is not set (ci/test.sh sets it for its wheelhouse)")
    if _nvcc() is None:
        pytest.skip("nvcc not found (CUDACXX, PATH, /usr/local/cuda/bin): cannot build sm90a")
    built = _wheel(wheelhouse, "aotinfer_sm90a")
    elsewhere = tmp_path / "elsewhere"
    with tarfile.open(sdists["sm90a"]) as tar:
        tar.extractall(elsewhere, filter="data")
    (tree,) = elsewhere.iterdir()
    env = {k: v for k, v in os.environ.items() if k != "AOTINFER_SOURCE_REVISION"}
    out = tmp_path / "out"
    _run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
         str(tree)],
        env=env, cwd=tree,
    )  # fmt: skip
    again = _wheel(out, "aotinfer_sm90a")
    assert again.name == built.name
    first, second = _members(built), _members(again)
    differ = sorted(n for n in first.keys() | second.keys() if first.get(n) != second.get(n))
    assert not differ, f"members that differ between the two builds: {differ}"
    assert again.read_bytes() == built.read_bytes()
