"""Facts about the driver and the visible GPUs, read through cuda-python's driver bindings.

They work where PyTorch is a CPU build or has not initialised CUDA, and answer "none"
rather than raising on a machine with no driver. Nothing here is imported by
``import aotinfer``; callers import it when they need a device fact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class GpuFacts:
    index: int
    name: str
    capability: Tuple[int, int]


@dataclass(frozen=True)
class DriverFacts:
    available: bool
    cuda_version: Optional[Tuple[int, int]]  # the newest CUDA the driver supports
    error: Optional[str]
    gpus: Tuple[GpuFacts, ...]


def _driver_module():
    try:
        from cuda.bindings import driver  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cuda as driver  # older cuda-python layout
        except ImportError as exc:
            raise RuntimeError(f"cuda-python is not importable ({exc})") from exc
    return driver


def _check(result):
    err, *values = result
    if int(err) != 0:
        raise RuntimeError(f"{err.name if hasattr(err, 'name') else err}")
    return values[0] if len(values) == 1 else tuple(values)


def _read_driver() -> DriverFacts:
    try:
        drv = _driver_module()
        version = _check(drv.cuDriverGetVersion())
        cuda_version = (version // 1000, (version % 1000) // 10)
        _check(drv.cuInit(0))
        gpus: List[GpuFacts] = []
        attr = drv.CUdevice_attribute
        for i in range(_check(drv.cuDeviceGetCount())):
            dev = _check(drv.cuDeviceGet(i))
            name = _check(drv.cuDeviceGetName(256, dev))
            name = name.split(b"\0", 1)[0].decode(errors="replace")
            major = _check(
                drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            )
            minor = _check(
                drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            )
            gpus.append(GpuFacts(i, name, (int(major), int(minor))))
        return DriverFacts(True, cuda_version, None, tuple(gpus))
    except Exception as exc:  # no libcuda, no device, driver too old for the bindings, ...
        return DriverFacts(False, None, str(exc) or type(exc).__name__, ())


@functools.lru_cache(maxsize=1)
def driver_facts() -> DriverFacts:
    """Driver and GPU facts of this process, read once."""
    return _read_driver()


def gpu(index: int) -> GpuFacts:
    """Facts of one visible GPU; falls back to torch when cuda-python cannot answer."""
    facts = driver_facts()
    if index < len(facts.gpus):
        return facts.gpus[index]
    import torch

    return GpuFacts(
        index, torch.cuda.get_device_name(index), tuple(torch.cuda.get_device_capability(index))
    )
