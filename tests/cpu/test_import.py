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


def test_dir_lists_the_lazy_names_and_submodules():
    import aotinfer

    names = dir(aotinfer)
    assert names == sorted(names)
    assert set(aotinfer.__all__) <= set(names)
    assert {"merge_states", "TopKTieBreak", "logits_processor", "__version__"} <= set(names)


def test_shared_doc_sections_are_filled_in_and_a_stripped_docstring_is_left_alone():
    """The samplers' docstrings share their parameter and return sections; a function
    without a docstring (``python -OO`` strips them) is left as it is."""
    from aotinfer import sampling

    def documented():
        """Head.

        {common}
        {returns}
        """

    def stripped():
        pass

    assert sampling._doc(stripped) is stripped and stripped.__doc__ is None
    doc = sampling._doc(documented).__doc__
    assert "{common}" not in doc and "{returns}" not in doc
    assert "indices : torch.Tensor, optional" in doc and "Returns\n    -------" in doc
    assert "{common}" not in sampling.top_p_sampling_from_probs.__doc__
