"""Which vision or audio towers the causal LM a scaffold would patch builds, read from upstream's source.

The reader's category describes a whole package: gemma3's is ``vlm`` because the package holds a vision
tower, yet its ``Gemma3ForCausalLM`` is a text model of its own (``Gemma3TextModel``, no tower), which the
zoo scaffolds as dense. qwen3_vl's causal LM is ``Qwen3VLForConditionalGeneration``, whose ``Qwen3VLModel``
holds a vision tower beside its language model: no text recipe covers it. The fit tells the two apart by
the classes the causal LM's ``__init__`` builds, directly or transitively, using the reader's own rules for
what a tower is (``modelgraft.generator.upstream.read_category``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.read_category import (
    _AUDIO_ATTRS,
    _AUDIO_NAME,
    _VISION_ATTRS,
    _VISION_NAME,
    _builds_module,
    reachable,
)
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import ModelStructure

#: Class methods that build a module from a config (``Qwen2_5OmniAudioEncoder._from_config(config.audio_config)``).
_FACTORIES = ("_from_config", "from_config", "from_pretrained")


def _builds_tower(value: ast.expr) -> bool:
    """A constructed module: ``Foo(...)``, ``nn.Linear(...)``, ``AutoModel.from_config(...)``, ``Foo._from_config(...)``."""
    if _builds_module(value):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _FACTORIES


def towers_on_causal_lm_path(structure: ModelStructure, *, root: Path | None = None) -> tuple[str, ...]:
    """The towers the causal LM builds: tower classes, and ``<class>.<attr>`` attributes holding a built tower.

    Empty when the causal LM is a text model of its own, or when upstream has no causal LM. ``root`` reads
    an unpacked transformers tree instead of the installed one, as the reader does.
    """
    if structure.causal_lm is None:
        return ()
    sources = UpstreamSources(root)
    source = ModelSource(model=structure.model, index=sources.get(structure.modeling_module), sources=sources)
    path = reachable(source, structure.causal_lm.cls)
    towers = [cls for cls in path if (_VISION_NAME.search(cls) or _AUDIO_NAME.search(cls)) and "Output" not in cls]
    for cls in path:
        for attr, values in source.init_assigns(cls).items():
            if attr.startswith(_VISION_ATTRS + _AUDIO_ATTRS) and any(_builds_tower(v) for v in values):
                towers.append(f"{cls}.{attr}")
    return tuple(towers)
