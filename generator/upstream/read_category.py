"""Which of design.md's categories a model falls into, decided from the structure of its modeling module.

The categories are the table of ``modelgraft.generator.categories``: the towers and experts found here pick the
row (:func:`~modelgraft.generator.categories.category_for`).

The scaffold holds one template per category; a model outside all of them (an encoder, a recurrent or
state-space hybrid, a decoder that needs an encoder) must be refused before anything is written, so
each refusal names the class that shows why.
"""

from __future__ import annotations

import ast
import re
import weakref

from modelgraft.generator.categories import OUT_OF_CATEGORY, category_for
from modelgraft.generator.upstream.read_linear_attention import mixer_classes, mixer_kind
from modelgraft.generator.upstream.source import ModelSource, called_name, is_self_attr
from modelgraft.generator.upstream.structure import GatedDeltaNetInfo, ShortConvolutionInfo

# Class names that only state-space / recurrent / convolutional mixers carry (a Gated DeltaNet or short-convolution
# mixer, which the hybrid guards cover, and the classes holding it are not matched: see read_linear_attention).
# Matched against the class name with the model's own prefix removed (recurrent_gemma's "RecurrentGemmaRMSNorm"
# says nothing; its "RecurrentGemmaRecurrentBlock" does). Mixers first: they name the reason best.
_RECURRENT_NAMES = (
    re.compile(r"Mixer|SSM|Ssm|GatedDeltaNet|DeltaNet|LinearAttention|LightningAttention|ShortConv|Rglru|RgLru"),
    re.compile(r"Mamba|Rwkv|RWKV|xLSTM|mLSTM|sLSTM|Recurrent"),
)
_VISION_NAME = re.compile(r"Vision|Visual|ImageEncoder|PatchEmbed|VQVAE|Vqvae")
_AUDIO_NAME = re.compile(r"Audio|Talker|Token2Wav|Speech")
# Attribute-name prefixes of towers held by a module built with AutoModel (no class of the module to see).
_VISION_ATTRS = ("visual", "vision", "image_encoder", "vqmodel", "vq_model")
_AUDIO_ATTRS = ("audio", "talker", "speech", "codec")
_CROSS_ATTRS = ("crossattention", "encoder_attn", "cross_attention")

#: Packages structure cannot classify, each with why.
OVERRIDES: dict[str, tuple[str, str]] = {
    # The Auto* factory classes, not a model of its own.
    "auto": (OUT_OF_CATEGORY, "auto holds the Auto* factories, not a model"),
}


def reachable(source: ModelSource, start: str, depth: int = 6) -> list[str]:
    """Module classes constructed, directly or transitively, by ``start.__init__``."""
    seen = [start]
    frontier = [start]
    for _ in range(depth):
        nxt: list[str] = []
        for cls in frontier:
            for attr in source.init_assigns(cls):
                for name in source.instantiated_classes(cls, attr):
                    if name not in seen:
                        seen.append(name)
                        nxt.append(name)
        frontier = nxt
    return seen


def classify(
    source: ModelSource,
    heads: dict[str, str],
    lm_class: str | None,
    decoder_layer: str | None,
    is_moe: bool,
    mixer: GatedDeltaNetInfo | ShortConvolutionInfo | None = None,
    config_defaults: dict[str, str] | None = None,
) -> tuple[str, str]:
    """The category of the model and why; ``mixer``: the linear mixer the hybrid recipes guard (its classes are
    no reason to refuse), ``config_defaults``: its config class's defaults (as source text), which say whether a
    cross-attention behind a config flag is built."""
    model = source.model
    if model in OVERRIDES:
        return OVERRIDES[model]
    classes = source.classes
    masked = [c for c in classes if c.endswith("ForMaskedLM")]
    if masked:
        return OUT_OF_CATEGORY, f"encoder: defines {masked[0]} (line {classes[masked[0]].lineno})"
    if lm_class is None:
        return (
            OUT_OF_CATEGORY,
            "no causal LM: no *ForCausalLM, no class the Auto causal-LM table names, no *ForConditionalGeneration "
            "with a vision tower",
        )
    forward = source.method(lm_class, "forward")
    config_defaults = config_defaults or {}
    if forward is not None and "perm_mask" in {a.arg for a in forward[0].args.args}:
        return OUT_OF_CATEGORY, f"{lm_class}.forward takes perm_mask: a permutation language model (XLNet's objective)"
    if (bidirectional := _causal_only_behind_a_flag(source, config_defaults)) is not None:
        return OUT_OF_CATEGORY, bidirectional
    layer_classes = [c for c in classes if c.endswith(("DecoderLayer", "Layer", "Block"))]
    cross = _cross_attention(source, ([decoder_layer] if decoder_layer else []) + layer_classes, config_defaults)
    if forward is not None and any(a.arg == "encoder_hidden_states" for a in forward[0].args.args):
        # GPT-2's family takes encoder states too, for the cross-attention a config flag adds (off by default).
        if cross is not None or not _cross_attention_only_behind_flags(source, layer_classes, config_defaults):
            return (
                OUT_OF_CATEGORY,
                f"{lm_class}.forward takes encoder_hidden_states: the decoder of an encoder-decoder",
            )
    if forward is not None and "labels" not in {a.arg for a in (*forward[0].args.args, *forward[0].args.kwonlyargs)}:
        # Gemma 4's assistants: draft models that read another model's KV states during its decoding.
        return OUT_OF_CATEGORY, f"{lm_class}.forward takes no labels: a head that computes no loss, nothing to train"
    if cross is not None:
        return OUT_OF_CATEGORY, cross
    prefix = _common_prefix(source)
    covered = mixer_classes(source, mixer) if mixer else set()
    for pattern in _RECURRENT_NAMES:
        recurrent = [
            c for c in classes if pattern.search(c[len(prefix) :]) and not _VISION_NAME.search(c) and c not in covered
        ]
        if recurrent:
            mixer = recurrent[0]
            return (
                OUT_OF_CATEGORY,
                f"recurrent / state-space / linear-attention mixer {mixer} (line {classes[mixer].lineno}): "
                + mixer_kind(source, mixer, prefix),
            )
    caches = [c for c in classes if c.endswith("Cache")]
    if caches:
        return (
            OUT_OF_CATEGORY,
            f"defines its own cache {caches[0]} (line {classes[caches[0]].lineno}): state a standard cache does not hold",
        )
    text_path = reachable(source, decoder_layer) if decoder_layer else []
    for cls in text_path:
        if cls in covered:  # the mixer's depthwise conv: its causal_conv1d calls are guarded
            continue
        for attr, values in source.init_assigns(cls).items():
            if any("Conv1d" in _text(v) for v in values):
                return (
                    OUT_OF_CATEGORY,
                    f"{cls}.{attr} (line {classes[cls].lineno}) is a Conv1d in the decoder: a convolutional state",
                )
    has_vision = _has(source, _VISION_NAME, _VISION_ATTRS)
    has_audio = _has(source, _AUDIO_NAME, _AUDIO_ATTRS)
    towers = tuple(kind for kind, found in (("audio", has_audio), ("vision", has_vision)) if found)
    detected = category_for(experts=is_moe, towers=towers).name
    if has_audio:
        return detected, f"an audio tower ({has_audio})" + (
            f" and a vision tower ({has_vision})" if has_vision else ""
        )
    if has_vision:
        return detected, f"a vision tower ({has_vision})"
    if is_moe:
        return detected, "routed experts (a class holding self.experts)"
    return detected, "decoder-only text model"


#: Attributes that switch a model's attention between causal and bidirectional.
_CAUSAL_ATTRS = ("causal", "is_causal", "is_decoder")


def _causal_only_behind_a_flag(source: ModelSource, config_defaults: dict[str, str]) -> str | None:
    """Why the model attends both ways by default, where a class takes its causal switch from a config flag that is
    off (XLM's ``self.causal = config.causal``, default False: a masked LM unless configured); None otherwise."""
    switched_on = _flags_set_true(source)
    for cls in source.classes:
        for attr in _CAUSAL_ATTRS:
            for value in source.init_assigns(cls).get(attr, []):
                flag = _config_flag(value)
                if flag is not None and flag in config_defaults and not _flag_on(flag, config_defaults, switched_on):
                    return (
                        f"{cls}.{attr} (line {source.classes[cls].lineno}) follows config.{flag}, off by default: "
                        "attention is bidirectional unless configured"
                    )
    return None


def _cross_attention(source: ModelSource, layers: list[str], config_defaults: dict[str, str]) -> str | None:
    """Why the first of ``layers`` that builds cross-attention under the default config is one; None where none is.

    A cross-attention built only inside ``if config.<flag>:`` whose default is off (GPT-2's ``add_cross_attention``),
    and which no class of the module switches on (TrOCR's causal LM sets ``config.is_decoder = True``), is not
    built: the model is decoder-only unless a user asks for more. Any other condition counts as met.
    """
    switched_on = _flags_set_true(source)
    for cls in layers:
        init = source.local_method(cls, "__init__")
        for attr in _CROSS_ATTRS:
            if attr not in source.init_assigns(cls) or init is None:
                continue
            for guards in _assignment_guards(init.body, attr, ()):
                if all(flag is None or _flag_on(flag, config_defaults, switched_on) for flag in guards):
                    return f"{cls} (line {source.classes[cls].lineno}) has cross-attention (self.{attr})"
    return None


def _cross_attention_only_behind_flags(
    source: ModelSource, layers: list[str], config_defaults: dict[str, str]
) -> bool:
    """Some layer builds cross-attention, and every one that does only behind config flags that are off."""
    builders = [cls for cls in layers if any(attr in source.init_assigns(cls) for attr in _CROSS_ATTRS)]
    return bool(builders) and _cross_attention(source, builders, config_defaults) is None


def _assignment_guards(
    body: list[ast.stmt], attr: str, guards: tuple[str | None, ...]
) -> list[tuple[str | None, ...]]:
    """For each ``self.<attr> = ...`` in ``body``, the conditions around it: the flag of each ``if config.<flag>:``
    whose body holds it, None for any other (an ``else:``, another test, a loop)."""
    found: list[tuple[str | None, ...]] = []
    for stmt in body:
        if isinstance(stmt, ast.If):
            found += _assignment_guards(stmt.body, attr, (*guards, _config_flag(stmt.test)))
            found += _assignment_guards(stmt.orelse, attr, (*guards, None))
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(is_self_attr(target, attr) for target in targets):
                found.append(guards)
        elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
            for inner in ("body", "orelse", "finalbody", "handlers"):
                for part in getattr(stmt, inner, []):
                    nested = part.body if isinstance(part, ast.ExceptHandler) else [part]
                    found += _assignment_guards(nested, attr, (*guards, None))
    return found


def _config_flag(test: ast.expr) -> str | None:
    """``flag`` of a test ``config.flag`` or ``self.config.flag``; None for any other test."""
    if isinstance(test, ast.Attribute) and _text(test.value) in ("config", "self.config"):
        return test.attr
    return None


#: :func:`_flags_set_true` per parsed module, kept while its tree lives (a survey classifies each module once or
#: twice, the reader's tests every package).
_SET_TRUE: weakref.WeakKeyDictionary[ast.Module, frozenset[str]] = weakref.WeakKeyDictionary()


def _flags_set_true(source: ModelSource) -> frozenset[str]:
    """Config flags some function of the module sets to a true constant (``config.is_decoder = True``)."""
    tree = source.index.tree
    if tree not in _SET_TRUE:
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value:
                for target in node.targets:
                    if isinstance(target, ast.Attribute) and _text(target.value) in ("config", "self.config"):
                        found.add(target.attr)
        _SET_TRUE[tree] = frozenset(found)
    return _SET_TRUE[tree]


def _flag_on(flag: str, config_defaults: dict[str, str], switched_on: frozenset[str]) -> bool:
    """Whether the default config, as the module leaves it, has ``flag`` on; unknown defaults count as on."""
    return flag in switched_on or config_defaults.get(flag, "True") not in ("False", "None", "0")


def _has(source: ModelSource, pattern: re.Pattern[str], attrs: tuple[str, ...]) -> str | None:
    """A module class named like a tower, else an attribute holding a constructed tower (AutoModel, a Linear)."""
    for cls in source.classes:
        if pattern.search(cls) and "Output" not in cls:
            return cls
    for cls in source.classes:
        for attr, values in source.init_assigns(cls).items():
            if attr.startswith(attrs) and any(_builds_module(v) for v in values):
                return f"{cls}.{attr}"
    return None


def _builds_module(value: ast.expr) -> bool:
    """``Foo(...)``, ``nn.Linear(...)`` or ``AutoModel.from_config(...)``: not a buffer or a number."""
    if not isinstance(value, ast.Call):
        return False
    name = called_name(value) or ""
    return (name[:1].isupper() and name not in ("Buffer", "Parameter")) or name == "from_config"


def _common_prefix(source: ModelSource) -> str:
    """The class-name prefix (from ``*PreTrainedModel``), to strip before matching mixer names."""
    pretrained = [c for c in source.classes if c.endswith("PreTrainedModel")]
    return min(pretrained, key=len)[: -len("PreTrainedModel")] if pretrained else ""


def _text(node: object) -> str:
    return ast.unparse(node) if isinstance(node, ast.AST) else ""
