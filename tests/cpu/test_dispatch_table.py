"""The dispatcher's variant table against the kernel list every provider is built with
(providers/csrc/kernel_list.h, reported by build_info()["kernels"]): a dispatch to a variant
that is not compiled would be an AOT miss, so the two must be the same set. The GPU suite
checks the same against a built provider (tests/gpu/test_provider_abi.py)."""

import re
from pathlib import Path

from aotinfer import _dispatch

KERNEL_LIST = Path(__file__).resolve().parents[2] / "providers" / "csrc" / "kernel_list.h"


def test_dispatch_table_equals_the_built_kernel_list():
    built = re.findall(r'^\s*"([^"]+)",\s*$', KERNEL_LIST.read_text(), flags=re.M)
    assert len(built) == len(set(built)), "kernel_list.h names a variant twice"
    variants = _dispatch.all_variants()
    assert sorted(set(variants)) == sorted(built)
