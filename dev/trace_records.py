"""The lines of a kernel trace (a lab tool, any machine): the collect steps of
dev/trace_rejection_rows.py and dev/trace_slice_phases.py print a LAUNCH line before each
launch, then the kernels' own lines (TRACE, SLICE) follow."""

from __future__ import annotations

from typing import Iterator, List, Optional, Tuple


def trace_records(
    path: str, tag: str, name_words: int
) -> Iterator[Tuple[str, Optional[List[str]]]]:
    """(name, fields) for each `tag` line after a LAUNCH line, the name being the LAUNCH line's
    first `name_words` words after LAUNCH and the fields the tag line's words after the tag;
    (name, None) for each LAUNCH line itself."""
    name = None
    for line in open(path):
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "LAUNCH":
            name = " ".join(parts[1 : 1 + name_words])
            yield name, None
        elif parts[0] == tag and name is not None:
            yield name, parts[1:]
