"""Micro-timings behind session 46's host-path choices (CPU, no GPU): plan()'s page-id
range, run()'s q-alignment test, and the two questions _custom_ops.tracing() could ask.
Each line times its alternatives in one process, so only their ratios mean anything.

    python dev/time_host_checks_cpu.py
"""

from __future__ import annotations

import torch
import torch.compiler
from best_of import best_seconds


def best_ns(f, n=20000) -> float:
    return best_seconds(f, n) * 1e9


def main() -> None:
    ids = torch.randint(0, 100000, (262144,), dtype=torch.int32)
    two = best_ns(lambda: (int(ids.min()), int(ids.max())), 200) / 1e3
    one = best_ns(lambda: tuple(int(v) for v in torch.aminmax(ids)), 200) / 1e3
    print(
        f"plan() page-id range, 262144 int32 ids: min() then max() {two:.1f} us, "
        f"aminmax {one:.1f} us"
    )

    q = torch.zeros(3, 8, 64, dtype=torch.float16)

    def last_only():
        s = q.stride()
        return s[-1] != 1

    def strides():
        s = q.stride()
        return s[-1] != 1 or (s[0] | s[1]) & 7

    def with_offset():
        s = q.stride()
        return s[-1] != 1 or (s[0] | s[1] | q.storage_offset()) & 7

    print(
        f"run()'s q test: last stride only {best_ns(last_only, 200000):.0f} ns, strides % 8 "
        f"{best_ns(strides, 200000):.0f} ns, strides and offset % 8 "
        f"{best_ns(with_offset, 200000):.0f} ns"
    )
    print(
        f"is_compiling {best_ns(torch.compiler.is_compiling, 200000):.0f} ns, "
        f"is_dynamo_compiling {best_ns(torch.compiler.is_dynamo_compiling, 200000):.0f} ns, "
        f"_len_torch_dispatch_stack {best_ns(torch._C._len_torch_dispatch_stack, 200000):.0f} ns"
    )


if __name__ == "__main__":
    main()
