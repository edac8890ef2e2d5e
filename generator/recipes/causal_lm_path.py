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
from dataclasses import replace
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


def _source(structure: ModelStructure, root: Path | None) -> ModelSource:
    sources = UpstreamSources(root)
    return ModelSource(model=structure.model, index=sources.get(structure.modeling_module), sources=sources)


def _built_classes(source: ModelSource, start: str) -> list[str]:
    """Module classes ``start.__init__`` builds, directly or transitively: anywhere in its ``__init__`` (a list of
    layers appended in a loop, as mllama's text model builds its cross-attention and self-attention layers),
    constructed (``Foo(...)``) or made by a factory (``MllamaTextModel._from_config(...)``), which ``reachable``
    does not follow."""
    seen = [start]
    for cls in seen:  # grows while it is walked
        init = source.local_method(cls, "__init__")  # own, or a base's of this module
        if init is None:
            continue
        for node in ast.walk(init):
            if not (isinstance(node, ast.Call) and _builds_tower(node)):
                continue
            func = (
                node.func.value if isinstance(node.func, ast.Attribute) and node.func.attr in _FACTORIES else node.func
            )
            name = func.id if isinstance(func, ast.Name) else None
            if name in source.classes and name not in seen:
                seen.append(name)
    return seen


def text_model_classes(structure: ModelStructure, *, root: Path | None = None) -> frozenset[str] | None:
    """The module classes the causal LM's ``__init__`` builds, directly or transitively; None where that walk does
    not reach the decoder layer the reader found (mllama's text model builds its layers in a loop of its own)."""
    if structure.causal_lm is None:
        return None
    path = frozenset(_built_classes(_source(structure, root), structure.causal_lm.cls))
    return path if structure.decoder_layer is not None and structure.decoder_layer in path else None


def text_model_alone(structure: ModelStructure, path: frozenset[str]) -> ModelStructure:
    """``structure`` as its causal LM alone builds it (``path``: :func:`text_model_classes`): the classes
    instantiated and the module calls kept only where the causal LM builds them.

    For a text answer of a package with towers (llama4's ``Llama4ForCausalLM``): the package's vision classes
    instantiate norms and activations too, and a guard there is one the text model never reaches.
    """
    return replace(
        structure,
        instantiated=tuple(cls for cls in structure.instantiated if cls in path),
        call_sites=tuple(site for site in structure.call_sites if site.cls in path),
    )


def causal_lm_is_public(structure: ModelStructure, *, root: Path | None = None) -> bool:
    """The causal LM is upstream's public API (the modeling module's ``__all__``): what transformers exports, and
    so what a registered architecture can name (kosmos2's ``Kosmos2TextForCausalLM`` is not)."""
    if structure.causal_lm is None:
        return False
    return structure.causal_lm.cls in _source(structure, root).index.public_names


def towers_on_causal_lm_path(structure: ModelStructure, *, root: Path | None = None) -> tuple[str, ...]:
    """The towers the causal LM builds: tower classes, and ``<class>.<attr>`` attributes holding a built tower.

    Empty when the causal LM is a text model of its own, or when upstream has no causal LM. ``root`` reads
    an unpacked transformers tree instead of the installed one, as the reader does.
    """
    if structure.causal_lm is None:
        return ()
    source = _source(structure, root)
    path = reachable(source, structure.causal_lm.cls)
    towers = [cls for cls in path if (_VISION_NAME.search(cls) or _AUDIO_NAME.search(cls)) and "Output" not in cls]
    for cls in path:
        for attr, values in source.init_assigns(cls).items():
            if attr.startswith(_VISION_ATTRS + _AUDIO_ATTRS) and any(_builds_tower(v) for v in values):
                towers.append(f"{cls}.{attr}")
    return tuple(towers)
