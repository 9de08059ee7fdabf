#!/usr/bin/env python3
"""Builds the source distributions of the aotinfer family: the core's, and one for each
named provider that carries everything its wheel is built from.

A provider's pyproject.toml builds from the repository root (``cmake.source-dir = "../.."``:
CMakeLists.txt, cmake/ and the shared providers/csrc/), and an sdist of the provider folder
cannot carry files above it. So each provider's sdist is made from a staged tree: the
provider folder (pyproject.toml, README.md, LICENSE, its package) with the root's
CMakeLists.txt, cmake/ and providers/csrc/ beside it, the source dir set to ``"."``, and the
source revision (AOTINFER_SOURCE_REVISION, else the checkout's git commit) written into
cmake/source_revision.txt, which the build records as a checkout build records its commit.
Unpacked anywhere, it builds offline as the checkout does, to the same bytes under the same
SOURCE_DATE_EPOCH (tests/packaging/test_packaging.py):

    pip wheel --no-build-isolation --no-deps dist/aotinfer_sm90a-0.1.0.tar.gz
    python3 -m build --wheel --no-isolation <unpacked sdist>

Usage (sdists go to dist/ unless --outdir):

    ci/build_sdists.py                   the core + all six providers
    ci/build_sdists.py sm90a sm110a      the core + those providers
    ci/build_sdists.py --no-core sm90a   that provider alone

As in ci/build-wheels.sh, AOTINFER_BUILD_ISOLATION=0 builds without isolation (offline,
with scikit-build-core and setuptools already installed); PYTHON is not read, the sdists
are built by the interpreter that runs this script.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a provider's build reads from the repository root (CMakeLists.txt's sources and
# includes), relative to the root; the staged tree keeps these paths.
SHARED_SOURCES = ("CMakeLists.txt", "cmake", "providers/csrc")
# Never staged: build outputs and caches that a used checkout may hold beside the sources.
IGNORED = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "build", "*.so", "*.egg-info", "manifest.json", "source_revision.txt"
)
SOURCE_DIR_LINE = re.compile(r'^cmake\.source-dir = "\.\./\.\."$', re.MULTILINE)
REVISION_STAMP = "cmake/source_revision.txt"  # read by cmake/source_revision.cmake


def providers(root: Path = ROOT) -> list[str]:
    """The provider folders of the checkout (providers/<arch>/pyproject.toml), sorted."""
    return sorted(p.parent.name for p in (root / "providers").glob("*/pyproject.toml"))


def source_revision(root: Path = ROOT) -> str:
    """AOTINFER_SOURCE_REVISION, else the checkout's commit (12 hex digits), else "unknown"."""
    if os.environ.get("AOTINFER_SOURCE_REVISION"):
        return os.environ["AOTINFER_SOURCE_REVISION"]
    git = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True
    )
    return git.stdout.strip() if git.returncode == 0 and git.stdout.strip() else "unknown"


def stage_provider(arch: str, dest: Path, root: Path = ROOT) -> Path:
    """Writes the self-contained source tree of provider `arch` into `dest` (which must not
    exist) and returns it."""
    folder = root / "providers" / arch
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file():
        raise SystemExit(
            f"error: unknown provider {arch!r}; valid names: {', '.join(providers(root))}"
        )
    text, found = SOURCE_DIR_LINE.subn('cmake.source-dir = "."', pyproject.read_text())
    if found != 1:
        # A changed pyproject must change this script too, not yield an sdist that builds
        # from the wrong folder.
        raise SystemExit(f'error: {pyproject} has no line cmake.source-dir = "../.." to rewrite')
    shutil.copytree(folder, dest, ignore=IGNORED)
    (dest / "pyproject.toml").write_text(text)
    for shared in SHARED_SOURCES:
        source = root / shared
        if source.is_dir():
            shutil.copytree(source, dest / shared, ignore=IGNORED)
        else:
            shutil.copy2(source, dest / shared)
    (dest / REVISION_STAMP).write_text(source_revision(root) + "\n")
    return dest


def build_sdist(source: Path, outdir: Path, isolation: bool) -> Path:
    """Runs `python -m build --sdist` on `source`; returns the sdist it wrote into `outdir`."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [sys.executable, "-m", "build", "--sdist", "--outdir", scratch, str(source)]
        if not isolation:
            command.insert(4, "--no-isolation")
        subprocess.run(command, check=True, stdout=sys.stderr)
        (made,) = Path(scratch).glob("*.tar.gz")
        outdir.mkdir(parents=True, exist_ok=True)
        return Path(shutil.move(str(made), outdir / made.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "arch", nargs="*", help=f"providers (default: all of {', '.join(providers())})"
    )
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    parser.add_argument("--no-core", action="store_true", help="only the providers' sdists")
    args = parser.parse_args(argv)
    isolation = os.environ.get("AOTINFER_BUILD_ISOLATION", "1") not in ("0", "false", "no", "off")
    built = [] if args.no_core else [build_sdist(ROOT / "core", args.outdir, isolation)]
    for arch in args.arch or providers():
        with tempfile.TemporaryDirectory() as scratch:
            tree = stage_provider(arch, Path(scratch) / f"aotinfer-{arch}")
            built.append(build_sdist(tree, args.outdir, isolation))
    print(f"built into {args.outdir}:")
    for sdist in built:
        print(f"  {sdist.name:<60} {sdist.stat().st_size / 1e6:8.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
