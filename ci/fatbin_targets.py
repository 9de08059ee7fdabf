#!/usr/bin/env python3
"""List the GPU code embedded in a CUDA shared object, without cuobjdump.

Usage: ``python ci/fatbin_targets.py [--json] PATH...`` where PATH is an ELF file (.so, .o)
or a wheel (every extension module inside it is read). Each entry of the ``.nv_fatbin``
section is printed with its kind (``ELF`` = SASS cubin, ``PTX``), SM number, arch name and
compression. ``fatbin_entries(path)`` returns the same as a list of dicts, for tests.

The fatbin layout is not documented by NVIDIA. What this script relies on was checked
against nvcc 13.0 by compiling a small kernel for sm_75, sm_80, sm_89, sm_90(a),
sm_100(a/f), sm_103a, sm_110(a/f), sm_120(a/f) and compute_90a/100f/120 PTX, with
``-compress-mode`` none, speed, size and default:

- The section is a sequence of containers: {u32 magic 0xBA55ED50, u16 version,
  u16 header_size, u64 fat_size}, followed by fat_size bytes of entries.
- Each entry: {u16 kind (1 = PTX, 2 = ELF), u16 version (0x0101), u32 header_size,
  u64 padded payload size, u32 compressed size at 16, u32 SM number at 28, u64 flags at 40,
  u64 uncompressed size at 56}; the payload follows the header. Headers are 64 bytes for
  sm < 100 SASS, longer for newer targets and PTX (the extra bytes include, e.g., the
  source file name), so header_size is always honoured.
- Flags: 0x2000 = LZ4-compressed payload, 0x8000 = zstd-compressed payload (the payload
  then starts with the zstd magic); 0x100000 = arch-specific target (sm_90a),
  0x200000 = family target (sm_120f). So the a/f suffix IS recoverable, but only from
  these empirically found bits: if a later nvcc moves them, the SM number is still right
  and only the suffix would be lost.
- A shared object linked by nvcc itself (not by CMake's host linker) carries a second
  container per object with small device-link stub cubins; they are listed like any other
  entry (``container`` tells them apart).
"""

from __future__ import annotations

import argparse
import io
import json
import struct
import sys
import zipfile
from pathlib import Path
from typing import List

FATBIN_MAGIC = 0xBA55ED50
KINDS = {1: "PTX", 2: "ELF"}
FLAG_LZ4 = 0x2000
FLAG_ZSTD = 0x8000
FLAG_ARCH_SPECIFIC = 0x100000  # "a" targets
FLAG_FAMILY = 0x200000  # "f" targets


def _elf_section(data: bytes, name: str) -> bytes:
    """The bytes of one section of a 64-bit little-endian ELF file (b"" if absent)."""
    if data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ValueError("only 64-bit little-endian ELF files are supported")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    # Elf64_Shdr: name, type, flags, addr, offset, size, ...
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab_offset = headers[shstrndx][4]
    wanted = name.encode()
    for sh_name, sh_type, _, _, offset, size in headers:
        start = strtab_offset + sh_name
        if data[start : data.index(b"\0", start)] == wanted:
            return b"" if sh_type == 8 else data[offset : offset + size]  # 8 = SHT_NOBITS
    return b""


def parse_fatbin(blob: bytes) -> List[dict]:
    """Entries of a raw fatbin blob (one or more containers, possibly padded between)."""
    entries = []
    magic = struct.pack("<I", FATBIN_MAGIC)
    start, container = blob.find(magic), 0
    while start != -1 and start + 16 <= len(blob):
        _, _, header_size, fat_size = struct.unpack_from("<IHHQ", blob, start)
        pos, end = start + header_size, start + header_size + fat_size
        if end > len(blob):
            raise ValueError(f"fatbin container at {start} runs past the section end")
        while pos + 16 <= end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, pos)
            if kind not in KINDS or entry_header < 64:
                raise ValueError(f"unknown fatbin entry (kind {kind}) at offset {pos}")
            (compressed_size,) = struct.unpack_from("<I", blob, pos + 16)
            (sm,) = struct.unpack_from("<I", blob, pos + 28)
            (flags,) = struct.unpack_from("<Q", blob, pos + 40)
            (uncompressed_size,) = struct.unpack_from("<Q", blob, pos + 56)
            suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
            compression = "zstd" if flags & FLAG_ZSTD else "lz4" if flags & FLAG_LZ4 else None
            entries.append(
                {
                    "container": container,
                    "kind": KINDS[kind],
                    "sm": sm,
                    "arch": f"{'sm' if kind == 2 else 'compute'}_{sm}{suffix}",
                    "compressed": compression is not None,
                    "compression": compression,
                    "stored_bytes": compressed_size if compression else payload,
                    "uncompressed_bytes": uncompressed_size if compression else payload,
                    "flags": flags,
                }
            )
            pos += entry_header + payload
        start, container = blob.find(magic, end), container + 1
    return entries


def _elf_entries(data: bytes, member: str) -> List[dict]:
    return [{"file": member, **e} for e in parse_fatbin(_elf_section(data, ".nv_fatbin"))]


def fatbin_entries(path) -> List[dict]:
    """Every fatbin entry of an ELF file, or of every extension module (.so) in a wheel.

    Each dict: file, container, kind ("ELF" or "PTX"), sm (int), arch ("sm_90a",
    "compute_90"), compressed, compression ("zstd", "lz4" or None), stored_bytes,
    uncompressed_bytes, flags.
    """
    path = Path(path)
    if zipfile.is_zipfile(path):
        entries = []
        with zipfile.ZipFile(path) as wheel:
            for member in wheel.namelist():
                if member.endswith(".so") or ".so." in member:
                    entries += _elf_entries(wheel.read(member), member)
        return entries
    return _elf_entries(path.read_bytes(), str(path))


def _table(entries: List[dict]) -> str:
    out = io.StringIO()
    out.write(f"{'file':<60} {'kind':<4} {'sm':>4} {'arch':<13} {'compressed':<10} bytes\n")
    for e in entries:
        comp = e["compression"] or "no"
        size = f"{e['stored_bytes']} ({e['uncompressed_bytes']} raw)"
        out.write(
            f"{e['file']:<60} {e['kind']:<4} {e['sm']:>4} {e['arch']:<13} {comp:<10} {size}\n"
        )
    return out.getvalue().rstrip("\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help=".so/.o files or wheels")
    parser.add_argument("--json", action="store_true", help="print a JSON list of entries")
    args = parser.parse_args(argv)
    entries = []
    for p in args.paths:
        try:
            entries += fatbin_entries(p)
        except (OSError, ValueError, struct.error) as exc:
            print(f"{p}: {exc}", file=sys.stderr)
            return 1
    print(json.dumps(entries, indent=2) if args.json else _table(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
