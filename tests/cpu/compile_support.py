"""What the torch.compile tests share: the backends this machine can run, and a dynamo
reset around each test (a test's graphs and guards must not leak into the next)."""

from __future__ import annotations

import shutil

import pytest
import torch

BACKENDS = ["eager", "aot_eager"]
if shutil.which("c++") or shutil.which("g++") or shutil.which("cc"):
    BACKENDS.append("inductor")  # needs a C++ compiler

# torch's own compile stack warns about torch.jit internals; not ours to fix.
MARKS = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.usefixtures("fresh_dynamo"),
]


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
