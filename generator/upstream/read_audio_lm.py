"""Read a composed audio language model from its pinned source: the shape the composed_audio recipe patches.

An audio language model of transformers (GLM-ASR, AudioFlamingo3, Qwen3-ASR, ...) is composed as a LLaVA-style VLM
is, with an audio tower in place of the vision tower: its ``<Prefix>Model`` builds ``self.audio_tower`` with
``AutoModel.from_config(config.audio_config)`` and ``self.language_model`` the same way on ``config.text_config``,
projects the tower's output with a module of its own (``self.multi_modal_projector``), and its forward runs
``get_audio_features(input_features, <mask>)``, finds the placeholders with ``get_placeholder_mask`` (``input_ids ==
self.config.audio_token_id``) and ``masked_scatter``s the features into them. The ``<Prefix>ForConditionalGeneration``
holds that Model as ``self.model`` under its ``lm_head``. Everything is read with ``ast``; a model that differs gets
one line per difference, which the scaffold's refusal prints (docs/scaffolding.md, "Audio language models").
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.member import CACHE_NAMES
from modelgraft.generator.upstream.read_processors import read_processors
from modelgraft.generator.upstream.read_vlm import (
    _class_assigns,
    _compositions,
    _ids_compared_with_input_ids,
    _method,
    _sub_config_table,
)
from modelgraft.generator.upstream.source import ModelSource, constructed_class, dotted
from modelgraft.generator.upstream.vlm_structure import CompositionInfo, ProcessorInfo

__all__ = ["AUDIO_CONFIG", "FEATURES_INPUT", "AudioLmInfo", "read_audio_lm"]

AUDIO_CONFIG = "audio_config"
TEXT_CONFIG = "text_config"
#: What ``dummy_forward`` hands ``get_audio_features``: a blank clip of mel frames, with its frame mask.
FEATURES_INPUT = "input_features"


@dataclass(frozen=True)
class AudioLmInfo:
    """A composed audio language model as the composed_audio recipe needs it (``ModelStructure.audio_lm``)."""

    #: The class holding the audio tower and the language model ("GlmAsrModel"); None when none holds both.
    model_class: str | None
    model_line: int = 0
    #: Its attributes holding the audio tower, the language model and the projector.
    tower: str = ""
    language_model: str = ""
    projector: str = ""
    #: (sub-config attribute, the model_type its default config builds), for each AutoModel the Model builds.
    sub_models: tuple[tuple[str, str], ...] = ()
    #: (model_type, config class) of the sub-models whose types the package defines itself (its audio encoder):
    #: the scaffold registers the generated module for them.
    own_types: tuple[tuple[str, str], ...] = ()
    #: ``get_audio_features``' mask of real mel frames ("input_features_mask"), which dummy_forward fills with ones;
    #: "" where it takes none (Voxtral's fixed-length clips).
    features_mask: str = ""
    #: ``get_audio_features``' required parameters its body never reads (MOSS's ``padding_mask``): None in
    #: dummy_forward.
    features_unread: tuple[str, ...] = ()
    #: The field of ``get_audio_features``' output the forward scatters ("pooler_output": the projected features).
    features_attribute: str = ""
    #: The ``self.config.<id>`` expressions ``get_placeholder_mask`` compares ``input_ids`` with.
    placeholder_ids: tuple[str, ...] = ()
    #: The head over the Model ("GlmAsrForConditionalGeneration").
    head: str | None = None
    processors: tuple[ProcessorInfo, ...] = ()
    #: What sets the model apart from the composed audio contract, one line each; empty when it fits.
    differences: tuple[str, ...] = ()


def read_audio_lm(source: ModelSource, model_type: str | None) -> AudioLmInfo:
    """The composed audio structure of ``source``, with its differences from the contract."""
    compositions = _compositions(source)
    model_class = _model_class(compositions)
    processors = read_processors(source, model_type)
    if model_class is None:
        return AudioLmInfo(
            None,
            processors=processors,
            differences=(
                f"no class builds both AutoModel.from_config(config.{AUDIO_CONFIG}) and "
                f"AutoModel.from_config(config.{TEXT_CONFIG})",
            ),
        )
    composed = {c.config_attr: c for c in compositions if c.owner == model_class}
    audio, text = composed[AUDIO_CONFIG], composed[TEXT_CONFIG]
    differences: list[str] = []
    for composition in (audio, text):
        if composition.model_type is None:
            differences.append(
                f"the configuration names no default model_type for {composition.config_attr} (built as"
                f" self.{composition.attr}): no generated class can be chosen for its tests"
            )
    own_types = _own_types(source, (audio, text), differences)
    projector = _projector(source, model_class, {audio.attr, text.attr})
    if projector is None:
        differences.append(f"{model_class} builds no projector of this module's classes next to self.{audio.attr}")
    features_mask, unread = _audio_features(source, model_class, differences)
    placeholder_ids = _placeholder_ids(source, model_class, differences)
    attribute = _features_attribute(source, model_class)
    if not attribute and source.method(model_class, "get_audio_features") is not None:
        differences.append(f"{model_class}.forward reads no field of self.get_audio_features(...)'s output")
    call = _processor_call_without_audio(source, processors)
    if call:
        differences.append(
            f"{call} takes no audio: its clips reach the text through a chat template alone (Voxtral's), so the"
            " tests cannot build a batch of clips with it"
        )
    head = _head(source, model_class)
    if head is None:
        differences.append(f"no *ForConditionalGeneration builds self.model = {model_class}(config)")
    return AudioLmInfo(
        model_class,
        source.classes[model_class].lineno,
        tower=audio.attr,
        language_model=text.attr,
        projector=projector or "",
        sub_models=tuple((c.config_attr, c.model_type) for c in (audio, text) if c.model_type is not None),
        own_types=own_types,
        features_mask=features_mask,
        features_unread=unread,
        features_attribute=attribute,
        placeholder_ids=placeholder_ids,
        head=head,
        processors=processors,
        differences=tuple(differences),
    )


def _model_class(compositions: tuple[CompositionInfo, ...]) -> str | None:
    owners = {c.owner for c in compositions if c.config_attr == AUDIO_CONFIG}
    owners &= {c.owner for c in compositions if c.config_attr == TEXT_CONFIG}
    return min(owners, key=len) if owners else None


def _own_types(
    source: ModelSource, compositions: tuple[CompositionInfo, ...], differences: list[str]
) -> tuple[tuple[str, str], ...]:
    """(model_type, config class) of each sub-model whose default type the configuration module defines."""
    classes, _ = _sub_config_table(source)
    by_type = {
        value.value: name
        for name, node in classes.items()
        if isinstance(value := _class_assigns(node).get("model_type"), ast.Constant) and isinstance(value.value, str)
    }
    found: list[tuple[str, str]] = []
    for composition in compositions:
        if not composition.own or composition.model_type is None:
            continue
        config_class = by_type.get(composition.model_type)
        if config_class is None:
            differences.append(
                f"{composition.config_attr}'s model_type {composition.model_type} is this package's own, but the"
                " configuration module defines no class for it: the scaffold cannot register the generated class"
            )
        else:
            found.append((composition.model_type, config_class))
    return tuple(found)


def _projector(source: ModelSource, model_class: str, towers: set[str]) -> str | None:
    """The Model's attribute built as a class of this module, other than its towers (``multi_modal_projector``)."""
    for attr, values in source.init_assigns(model_class).items():
        if attr in towers:
            continue
        for value in values:
            cls = constructed_class(value) if isinstance(value, ast.Call) else None
            if cls is not None and cls in source.classes:
                return attr
    return None


def _audio_features(source: ModelSource, model_class: str, differences: list[str]) -> tuple[str, tuple[str, ...]]:
    """``get_audio_features``' frame-mask parameter and the required parameters its body never reads (MOSS's
    ``padding_mask``, which dummy_forward passes as None), after checking that a blank clip and its mask can feed
    it."""
    features = _method(source, model_class, "get_audio_features")
    found = source.method(model_class, "get_audio_features")
    if features is None or found is None:
        differences.append(f"{model_class} has no get_audio_features for dummy_forward to run on a blank clip")
        return "", ()
    read = {node.id for node in ast.walk(found[0]) if isinstance(node, ast.Name)}
    unread = tuple(p for p in features.required if p != FEATURES_INPUT and p not in read)
    params = [p for p in features.params if p not in unread]
    masks = [p for p in params if p != FEATURES_INPUT and p.endswith("mask")]
    needed = [p for p in features.required if p != FEATURES_INPUT and p not in masks[:1] and p not in unread]
    if FEATURES_INPUT not in params or needed or len(masks) > 1:
        if needed:
            what = f"requires {', '.join(needed)}"
        elif len(masks) > 1:
            what = f"takes {len(masks)} masks ({', '.join(masks)})"
        else:
            what = f"takes no {FEATURES_INPUT}"
        differences.append(
            f"{features.owner}.get_audio_features {what}: dummy_forward's blank clip ({FEATURES_INPUT}, with its"
            " frame mask where it takes one) cannot feed it"
        )
        return "", ()
    return (masks[0] if masks else ""), unread


def _placeholder_ids(source: ModelSource, model_class: str, differences: list[str]) -> tuple[str, ...]:
    """The ids ``get_placeholder_mask`` finds the audio placeholders by, after checking the forward scatters the
    features into that one mask itself (the sequence-parallel forward hands it a rank's own features)."""
    mask = source.method(model_class, "get_placeholder_mask")
    forward = source.method(model_class, "forward")
    if mask is None or forward is None:
        differences.append(f"{model_class} has no {'get_placeholder_mask' if mask is None else 'forward'}")
        return ()
    ids = tuple(_ids_compared_with_input_ids(mask[0]))
    if len(ids) != 1:
        differences.append(
            f"{model_class}.get_placeholder_mask compares input_ids with {len(ids)} self.config ids, not one: a"
            " rank's slice cannot find its audio placeholders"
        )
    info = _method(source, model_class, "get_placeholder_mask")
    if info is not None and info.returns != 1:
        differences.append(f"{info.owner}.get_placeholder_mask returns more than one mask")
    params = {a.arg for a in forward[0].args.args + forward[0].args.kwonlyargs}
    if not params & set(CACHE_NAMES) or ("use_cache" not in params and forward[0].args.kwarg is None):
        differences.append(
            f"{model_class}.forward takes no cache and use_cache: the forward cannot turn the cache off for a row"
            " packing documents, which the language model's mask then would not keep apart"
        )
    calls = [node for node in ast.walk(forward[0]) if isinstance(node, ast.Call)]
    if not any(dotted(c.func) == "self.get_placeholder_mask" for c in calls) or not any(
        isinstance(c.func, ast.Attribute) and c.func.attr == "masked_scatter" for c in calls
    ):
        differences.append(
            f"{model_class}.forward does not masked_scatter the features into get_placeholder_mask's mask itself:"
            " the sequence-parallel forward cannot hand it a rank's own features"
        )
    return ids


def _features_attribute(source: ModelSource, model_class: str) -> str:
    """``X`` of ``self.get_audio_features(...).X`` in the Model's forward."""
    forward = source.method(model_class, "forward")
    for node in ast.walk(forward[0]) if forward is not None else ():
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Call)
            and dotted(node.value.func) == "self.get_audio_features"
        ):
            return node.attr
    return ""


def _processor_call_without_audio(source: ModelSource, processors: tuple[ProcessorInfo, ...]) -> str:
    """``<Processor>.__call__`` where the processor defines its own ``__call__`` and it has no ``audio`` parameter
    (ProcessorMixin's own takes ``audio``), else ""."""
    processor = next((p for p in processors if p.kind == "processor"), None)
    if processor is None:
        return ""
    try:
        index = source.sources.get(processor.module)
    except UpstreamError:
        return ""
    node = index.members.get(processor.cls)
    if not isinstance(node, ast.ClassDef):
        return ""
    call = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__call__"), None)
    if call is None:
        return ""
    params = {a.arg for a in call.args.posonlyargs + call.args.args + call.args.kwonlyargs}
    return "" if params & {"audio", "audios"} else f"{processor.cls}.__call__"


def _head(source: ModelSource, model_class: str) -> str | None:
    for cls in source.classes:
        if not cls.endswith("ForConditionalGeneration"):
            continue
        for value in source.init_assigns(cls).get("model", []):
            if isinstance(value, ast.Call) and constructed_class(value) == model_class:
                return cls
    return None
