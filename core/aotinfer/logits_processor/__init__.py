"""FlashInfer's ``logits_processor``: declarative logits-processing pipelines.

Describe the steps from logits to tokens with processors, and :class:`LogitsPipe` infers
the input type, legalizes the processors into typed ops, checks them and fuses windows of
ops into single sampling-kernel calls::

    from aotinfer.logits_processor import LogitsPipe, Temperature, Softmax, TopP, Sample

    pipe = LogitsPipe([Temperature(), Softmax(), TopP(), Sample()])
    token_ids = pipe(logits, temperature=0.7, top_p=0.9)

Modules: ``types`` (TensorType, TaggedTensor), ``op`` (Op, ParameterizedOp),
``operators`` (the low-level and fused ops), ``processors`` (the user-facing processors),
``legalization``, ``validators``, ``fusion_rules``, ``compiler`` and ``pipeline``.
"""

from .compiler import Compiler, compile_pipeline
from .fusion_rules import FusionRule
from .legalization import LegalizationError, legalize_processors
from .op import Op, ParameterizedOp
from .pipeline import LogitsPipe
from .processors import LogitsProcessor, MinP, Sample, Softmax, Temperature, TopK, TopP
from .types import TaggedTensor, TensorType
from .validators import CompileError

__all__ = [
    "CompileError",
    "Compiler",
    "compile_pipeline",
    "FusionRule",
    "LegalizationError",
    "legalize_processors",
    "Op",
    "ParameterizedOp",
    "LogitsPipe",
    "LogitsProcessor",
    "MinP",
    "Sample",
    "Softmax",
    "Temperature",
    "TopK",
    "TopP",
    "TaggedTensor",
    "TensorType",
]
