"""Read what the pinned upstream source says about one model's structure, without importing it.

``read_model("qwen3")`` parses ``transformers/models/qwen3/modeling_qwen3.py`` and its configuration
module by path (``ast`` only: no torch, no transformers at generation time) and reports the class
prefix, category, heads, norms, MLPs, rope, loss head, multipliers, MoE layout and, for a VLM, its towers
(``read_vlm``) as a :class:`~generator.upstream.structure.ModelStructure`. ``patchgen-inspect`` prints it; the scaffold's
fit turns it into recipe arguments or a refusal. Each part is read by a small module of its own.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from modelgraft.generator import categories
from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.index import UpstreamSources
from modelgraft.generator.upstream.locate import package_root
from modelgraft.generator.upstream.read_audio_lm import read_audio_lm
from modelgraft.generator.upstream.read_calls import read_call_sites
from modelgraft.generator.upstream.read_category import classify
from modelgraft.generator.upstream.read_config import read_config
from modelgraft.generator.upstream.read_conversion import expert_conversion
from modelgraft.generator.upstream.read_heads import (
    read_causal_lm,
    read_heads,
    read_multipliers,
    read_sequence_classification,
)
from modelgraft.generator.upstream.read_indexer import read_dsa_indexer
from modelgraft.generator.upstream.read_linear_attention import read_gated_delta_net, read_short_convolution
from modelgraft.generator.upstream.read_mlps import read_mlps
from modelgraft.generator.upstream.read_moe import experts_holders, read_moe
from modelgraft.generator.upstream.read_norms import read_norms
from modelgraft.generator.upstream.read_omni import read_omni
from modelgraft.generator.upstream.read_rope import read_rope
from modelgraft.generator.upstream.read_vlm import multimodal_rope, read_vlm, text_rope_function
from modelgraft.generator.upstream.source import ModelSource
from modelgraft.generator.upstream.structure import CausalLmInfo, ModelStructure, MoeInfo, RopeInfo
from modelgraft.generator.upstream.vlm_structure import VlmInfo

_TOP = "transformers"
_FEED_FORWARD_ATTRS = ("mlp", "feed_forward", "ffn", "block_sparse_moe")


def modeling_module(model: str) -> str:
    return f"{_TOP}.models.{model}.modeling_{model}"


def model_file(model: str, root: Path | None = None) -> Path:
    """Where ``modeling_<model>.py`` must be; raises UpstreamError naming the missing folder or file."""
    base = (root / _TOP) if root is not None else package_root(_TOP)
    folder = base / "models" / model
    if not folder.is_dir():
        raise UpstreamError(f"unknown model {model!r}: no package {folder}", target=model)
    path = folder / f"modeling_{model}.py"
    if not path.is_file():
        raise UpstreamError(f"model {model!r} has no modeling file: {path} does not exist", target=model)
    return path


def read_model(model: str, *, root: Path | None = None, sources: UpstreamSources | None = None) -> ModelStructure:
    """The structure of ``transformers.models.<model>`` as its pinned source spells it.

    ``root`` reads an unpacked reference tree instead of the installed package (pin bumps); ``sources``
    shares one parse cache across a batch of models (a survey parses llama's files once).
    """
    path = model_file(model, root)
    sources = sources or UpstreamSources(root)
    module = modeling_module(model)
    source = ModelSource(model=model, index=sources.get(module), sources=sources)
    if source.index.path != path:  # pragma: no cover - module_path and model_file disagree only on a broken tree
        raise UpstreamError(f"model {model!r}: expected {path}, parsed {source.index.path}", target=model)

    prefix_guess = _prefix(source, None)
    heads = read_heads(source, prefix_guess)
    lm_class = _lm_class(source, heads)
    prefix = _prefix(source, lm_class)
    if prefix != prefix_guess:
        heads = read_heads(source, prefix)
    base_model = _base_model(source, lm_class) if lm_class else None
    decoder_layer = _decoder_layer(source, base_model)
    holders = experts_holders(source)
    gated_delta_net = read_gated_delta_net(source)
    short_convolution = read_short_convolution(source)
    config = read_config(source, lm_class)
    category, category_reason = classify(
        source, heads, lm_class, decoder_layer, bool(holders), gated_delta_net or short_convolution, config.defaults
    )

    causal_lm = read_causal_lm(source, lm_class) if lm_class else None
    seq_cls = heads.get("sequence_classification")
    moe = read_moe(source, decoder_layer, config.defaults) if holders else None
    decoder_mlp = _decoder_mlp(source, decoder_layer, holders)
    extra = tuple(
        c
        for c in (
            decoder_mlp,
            moe.dense_mlp if moe else None,
            moe.shared_experts.cls if moe and moe.shared_experts else None,
        )
        if c
    )
    if moe is not None and config.model_type:
        conversion = expert_conversion(config.model_type, root=sources.root)
        if conversion is not None:
            moe = replace(
                moe,
                hf_conversion=conversion.entry,
                hub_projections=(conversion.gate, conversion.up, conversion.down),
            )
    norms = read_norms(source)
    mlps = read_mlps(source, extra)
    detected = categories.category(category)
    vlm = read_vlm(source, config.model_type) if detected.vlm else None
    omni = read_omni(source) if detected.omni else None
    audio_lm = read_audio_lm(source, config.model_type) if omni is not None and omni.differences else None
    head = _vlm_head(source, vlm, causal_lm)
    vlm_head = vlm_config = None
    if head is not None:
        # The VLM's own head, config and model_type, beside the text head's (ModelStructure.for_vlm).
        report = read_config(source, head)
        vlm_head, vlm_config = read_causal_lm(source, head), (report.module, report.cls, report.model_type)
        vlm = read_vlm(source, report.model_type)
    return ModelStructure(
        model=model,
        modeling_module=module,
        config_module=config.module,
        prefix=prefix,
        model_type=config.model_type,
        config_class=config.cls,
        category=category,
        category_reason=category_reason,
        heads=heads,
        causal_lm=causal_lm,
        sequence_classification=read_sequence_classification(source, seq_cls) if seq_cls else None,
        norms=norms,
        mlps=mlps,
        rope=_text_rope(source, decoder_layer, vlm) if vlm is not None else read_rope(source),
        multipliers=read_multipliers(source, base_model, decoder_layer, causal_lm),
        vocab_size_expr=causal_lm.vocab_size_expr if causal_lm else None,
        moe=moe,
        config_defaults=config.defaults,
        decoder_layer=decoder_layer,
        base_model=base_model,
        decoder_mlp=decoder_mlp,
        instantiated=source.instantiated,
        conditional=source.conditionally_instantiated,
        vlm=vlm,
        dsa_indexer=read_dsa_indexer(source),
        vlm_head=vlm_head,
        vlm_config=vlm_config,
        omni=omni,
        audio_lm=audio_lm,
        linear_attention=gated_delta_net if category != categories.OUT_OF_CATEGORY else None,
        short_convolution=short_convolution if category != categories.OUT_OF_CATEGORY else None,
        call_sites=read_call_sites(
            source,
            {n.cls for n in norms if n.kind != "unknown"}
            | {m.cls for m in mlps if m.kind != "unknown"}
            | _moe_classes(moe),
        ),
    )


def _text_rope(source: ModelSource, decoder_layer: str | None, vlm: VlmInfo) -> RopeInfo:
    """The RoPE a VLM's text attention applies: another function than apply_rotary_pos_emb (qwen2_vl's
    multimodal one), or none in this module when its only rotary function is the vision tower's (kimi_k25)."""
    called = text_rope_function(source, decoder_layer)
    if called is not None and called.name != "apply_rotary_pos_emb":
        return multimodal_rope(called)
    rope = read_rope(source)
    vision = vlm.vision_rope
    if called is None and vision is not None and rope.name == vision.name:
        return RopeInfo(
            kind="none",
            reason=f"no text attention of the module applies a rotary function; {vision.name}"
            f" (line {vision.line}) is the vision tower's",
        )
    return rope


def _moe_classes(moe: MoeInfo | None) -> set[str]:
    """The sparse block and experts: their computations go behind the experts slot, not module-call guards."""
    if moe is None:
        return set()
    return {moe.sparse_block} | ({moe.experts.cls} if moe.experts else set())


def _vlm_head(source: ModelSource, vlm: VlmInfo | None, causal_lm: CausalLmInfo | None) -> str | None:
    """A VLM's conditional-generation head, where the language-model head read first is a text-only
    ``*ForCausalLM`` (cohere_compass, aria and llama4 define both): the ``*ForConditionalGeneration`` that builds
    the ``Model`` holding the tower and the language model, whose loss a VLM's training step computes."""
    if vlm is None or vlm.model_class is None or causal_lm is None:
        return None
    if causal_lm.cls.endswith("ForConditionalGeneration") or causal_lm.cls == vlm.model_class:
        return None
    for cls in source.classes:
        if cls.endswith("ForConditionalGeneration") and any(
            vlm.model_class in source.instantiated_classes(cls, attr) for attr in source.init_assigns(cls)
        ):
            return cls
    return None


def _lm_class(source: ModelSource, heads: dict[str, str]) -> str | None:
    """The language-model head: ``*ForCausalLM``, else a ``*ForConditionalGeneration`` (the thinker's for omni)."""
    if "causal_lm" in heads:
        return heads["causal_lm"]
    generation = [c for c in source.classes if c.endswith("ForConditionalGeneration")]
    thinker = [c for c in generation if "Thinker" in c]
    if thinker:
        return thinker[0]
    return min(generation, key=len) if generation else None


def _prefix(source: ModelSource, lm_class: str | None) -> str:
    """The real class-name prefix, from the PreTrainedModel the head derives from (never the package name)."""
    pretrained = [c for c in source.classes if c.endswith("PreTrainedModel")]
    if lm_class is not None:
        todo = [lm_class]
        seen: set[str] = set()
        while todo:
            cls = todo.pop(0)
            if cls in seen:
                continue
            seen.add(cls)
            if cls.endswith("PreTrainedModel") and cls != "PreTrainedModel":
                return cls[: -len("PreTrainedModel")]
            todo.extend(source.base_names(cls))
    if pretrained:
        return min(pretrained, key=len)[: -len("PreTrainedModel")]
    causal = [c for c in source.classes if c.endswith("ForCausalLM")]
    if causal:
        return min(causal, key=len)[: -len("ForCausalLM")]
    return source.model


def _base_model(source: ModelSource, lm_class: str) -> str | None:
    """The class whose __init__ builds ``self.layers`` (the text decoder stack), searched from the head."""
    todo = [lm_class]
    seen: set[str] = set()
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.add(cls)
        assigns = source.init_assigns(cls)
        if "layers" in assigns and not any(w in cls for w in ("Vision", "Audio", "Visual")):
            return cls
        for attr in assigns:
            todo.extend(source.instantiated_classes(cls, attr))
    return None


def _decoder_layer(source: ModelSource, base_model: str | None) -> str | None:
    if base_model is not None:
        layers = source.instantiated_classes(base_model, "layers")
        if layers:
            return layers[0]
    candidates = [
        c for c in source.classes if c.endswith("DecoderLayer") and not any(w in c for w in ("Vision", "Audio"))
    ]
    return candidates[0] if candidates else None


def _decoder_mlp(source: ModelSource, decoder_layer: str | None, holders: list[str]) -> str | None:
    """The dense feed-forward class the decoder layer holds (the sparse block's dense alternative for MoE)."""
    if decoder_layer is None:
        return None
    for attr in _FEED_FORWARD_ATTRS:
        dense = [c for c in source.instantiated_classes(decoder_layer, attr) if c not in holders]
        if dense:
            return dense[0]
    return None
