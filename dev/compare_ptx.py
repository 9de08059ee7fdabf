"""Checks that a refactor left the device code unchanged: compiles the given sources to PTX
at two git revisions and compares them entry by entry, with mangled names and labels
normalised (a renamed kernel or helper still compares equal).

    python dev/compare_ptx.py REV_BEFORE [REV_AFTER|WORKTREE] -- providers/csrc/x.cu ...

Used for the refactor after the last GPU run of 2026-11-29 (no device time left): identical
PTX for sm_75, sm_80 and sm_90a means the GPU results of the earlier tree still hold.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

ARCHES = ("sm_75", "sm_80", "sm_90a")


def entries(ptx: str) -> list:
    parts = re.split(
        r"(?=\n// \.globl|\n\.visible \.entry|\n\.weak \.entry|\n\.func|\n\.visible \.func)", ptx
    )
    return sorted(re.sub(r"\$L__\w+", "LBL", re.sub(r"_Z[0-9A-Za-z_]+", "SYM", p)) for p in parts)


def tree_at(rev: str, dst: Path) -> Path:
    if rev == "WORKTREE":
        return Path.cwd()
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(dst), rev], check=True, capture_output=True
    )
    return dst


def ptx(root: Path, source: str, arch: str) -> str:
    out = subprocess.run(
        [
            "nvcc",
            "-std=c++17",
            "-O3",
            f"-arch={arch}",
            "-ptx",
            source,
            "-I",
            "providers/csrc",
            "-o",
            "-",
        ],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout


def main() -> int:
    args = sys.argv[1:]
    split = args.index("--")
    revs, sources = args[:split], args[split + 1 :]
    before, after = revs[0], revs[1] if len(revs) > 1 else "WORKTREE"
    with tempfile.TemporaryDirectory() as tmp:
        roots = [tree_at(before, Path(tmp) / "a"), tree_at(after, Path(tmp) / "b")]
        try:
            same = True
            for source in sources:
                for arch in ARCHES:
                    equal = entries(ptx(roots[0], source, arch)) == entries(
                        ptx(roots[1], source, arch)
                    )
                    same &= equal
                    print(f"{source} {arch}: {'identical' if equal else 'DIFFERENT'}")
        finally:
            for rev, root in zip((before, after), roots):
                if rev != "WORKTREE":
                    subprocess.run(["git", "worktree", "remove", "--force", str(root)], check=False)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
