"""`import aotinfer` imports no provider, no cuda-python and initialises no CUDA.

Run in a fresh interpreter, since this test process has imported all sorts of things.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Some torch builds import cuda.bindings themselves, so the probe records what `import aotinfer`
# adds on top of `import torch`.
_PROBE = """
import json, sys
import torch
before = set(sys.modules)
import aotinfer
added = sorted(set(sys.modules) - before)
print(json.dumps({
    "providers": sorted(n for n in sys.modules if n.startswith("aotinfer_")),
    "cuda_python": [n for n in added if n == "cuda" or n.startswith("cuda.")],
    "core_modules": [n for n in added if n.startswith("aotinfer.")],
    "cuda_initialized": torch.cuda.is_initialized(),
    "softmax": callable(aotinfer.softmax),
}))
"""


def test_import_loads_no_provider_and_no_cuda(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AOTINFER_")}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["providers"] == []
    assert facts["cuda_python"] == []
    assert "aotinfer._providers" not in facts["core_modules"]
    assert "aotinfer._device_facts" not in facts["core_modules"]
    assert facts["cuda_initialized"] is False
    assert facts["softmax"] is True
