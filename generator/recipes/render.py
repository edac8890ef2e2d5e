"""The recipe call a scaffold's config holds, as Python source: every decision spelled out.

Rendered from the recorded Copier answers (the fit's arguments, or what a user passed instead), then
formatted by the installed ruff at the project's line length, so the scaffold's config is exactly what
``ruff format`` would leave and a reviewer reads each norm, MLP, head and expert block by name.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

from modelgraft.generator import categories
from modelgraft.generator.errors import PatchgenError
from modelgraft.generator.normalize.ruff import ruff_binary
from modelgraft.generator.recipes.parts import Router

LINE_LENGTH = 119
#: Experts fields beyond the activation, written only when the fit set them (a gate-first block has none).
EXPERTS_LAYOUT_FIELDS = ("layout", "interleaved", "gate_up_bias", "down_bias", "limit", "alpha", "activation_first")
#: Router fields besides the class, each written only when it differs from the Router part's default.
ROUTER_FIELDS = (
    "kind",
    "weight",
    "bias",
    "top_k",
    "n_group",
    "topk_group",
    "norm_topk_prob",
    "routed_scaling_factor",
    "upcast",
    "cast_back",
    "always_renormalize",
)


def _call(name: str, positional: str, keywords: Mapping[str, Any]) -> str:
    arguments = [repr(positional)] + [f"{key}={value!r}" for key, value in keywords.items()]
    return f"{name}({', '.join(arguments)})"


def _mlp_fields(mlp: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of an Mlp part that its kind uses (a plain MLP has no gate; a gated one no act)."""
    names = {
        "gated": ("gate", "up", "down"),
        "fused_gate_up": ("gate", "down"),
        "plain": ("act",),
    }[mlp["kind"]]
    fields = {"kind": mlp["kind"], **{name: mlp[name] for name in names}, "activation": mlp["activation"]}
    if mlp.get("init_activation"):
        fields["init_activation"] = mlp["init_activation"]
    if mlp.get("whole"):
        fields["whole"] = True
    return fields


def _router_fields(router: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Router part that differ from its defaults (every upstream router of a kind shares them)."""
    defaults = Router()
    return {name: router[name] for name in ROUTER_FIELDS if name in router and router[name] != getattr(defaults, name)}


#: The GatedDeltaNet part's fields, in its order (every one written: the mixer's functions are named upstream).
GATED_DELTA_NET_FIELDS = ("norm", "norm_eps", "norm_activation", "conv", "conv_update", "chunk", "recurrent")

#: The ShortConvolution part's fields, in its order (both written, as the GatedDeltaNet part's are).
SHORT_CONVOLUTION_FIELDS = ("conv", "conv_update")


def _gated_delta_net_line(mixer: Mapping[str, Any]) -> str:
    """The ``gated_delta_net=GatedDeltaNet(...)`` argument of a hybrid's recipe call."""
    fields = ", ".join(f"{name}={mixer[name]!r}" for name in GATED_DELTA_NET_FIELDS)
    return f"    gated_delta_net=GatedDeltaNet({fields}),"


def _site_fields(site: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a CallSites part that are set (tuples for lists, as the part declares them)."""
    return {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in (
            ("layer_norms", site["layer_norms"]),
            ("chosen_layer_norms", site.get("chosen_layer_norms", [])),
            ("activation", site["activation"]),
            ("activation_config", site["activation_config"]),
            ("activation_name", site.get("activation_name", "")),
        )
        if value
    }


def _head_fields(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The LossHead part's fields: softcap and scale always, the others where the fit set them."""
    head = arguments["causal_lm"]
    fields: dict[str, Any] = {"softcap": head.get("softcap") or "", "scale": tuple(head.get("scale") or ())}
    if head.get("head", "lm_head") != "lm_head":
        fields["head"] = head["head"]
    if head.get("softcap_fp32"):
        fields["softcap_fp32"] = True
    if head.get("logits_fp32"):
        fields["logits_fp32"] = True
    if head.get("bias"):
        fields["bias"] = True
    if head.get("router_logits"):  # an output upstream builds without the router logits it has
        fields["router_logits"] = tuple(head["router_logits"])
    return fields


def recipe_call(category: str, prefix: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
    """(import line, call) of the recipe for ``arguments`` (see :func:`modelgraft.generator.recipes.fit.fit_model`).

    The recipe, and which of its arguments are written, are the category's (``modelgraft.generator.categories``);
    a category without a scaffold renders as dense.
    """
    spec = categories.lookup(category)
    if spec is None or not spec.scaffolded:
        spec = categories.category_for(experts=False)
    if arguments.get("composed"):  # a composed (LLaVA-style) VLM, either category (generator/recipes/vlm_composed.py)
        return _composed_call(prefix, arguments)
    if arguments.get("audio_lm"):  # a composed audio language model (generator/recipes/audio_lm.py)
        return _audio_lm_call(prefix, arguments)
    recipe = spec.recipe
    parts = {"LossHead"}
    mixer = arguments.get("gated_delta_net")
    if mixer:  # a Gated DeltaNet hybrid: its text recipe after the mixer's guards (generator/recipes/hybrid.py)
        recipe = categories.category(spec.text).hybrid_recipe
        parts.add("GatedDeltaNet")
    short_convolution = arguments.get("short_convolution")
    if short_convolution:  # a short-convolution hybrid: its text recipe after the conv guards (the same module)
        recipe = categories.category(spec.text).short_convolution_recipe
        parts.add("ShortConvolution")
    lines = [f"{recipe}(", "    config,", f"    prefix={prefix!r},"]
    if mixer:
        lines.append(_gated_delta_net_line(mixer))
    if short_convolution:
        fields = ", ".join(f"{name}={short_convolution[name]!r}" for name in SHORT_CONVOLUTION_FIELDS)
        lines.append(f"    short_convolution=ShortConvolution({fields}),")
    vision = arguments.get("vision")
    if vision:  # a VLM (generator/recipes/vlm.py): the tower first, as the zoo's configs name it
        parts.add("VisionTower")
        lines.append(f"    vision={_vision_tower(vision)},")
    omni = spec.omni
    if omni:  # an Omni thinker (generator/recipes/omni.py): the audio tower and the speech side next
        parts.add("AudioTower")
        lines += _omni_lines(arguments)
    norms = [
        _call("Norm", n["cls"], {"formulation": n["formulation"], "eps": n["eps"], "weight": n["weight"]})
        for n in arguments.get("norms") or []
    ]
    mlps = [_call("Mlp", m["cls"], _mlp_fields(m)) for m in arguments.get("mlps") or []]
    if norms:
        parts.add("Norm")
    if mlps:
        parts.add("Mlp")
    lines.append(f"    norms=[{', '.join(norms)}],")
    lines.append(f"    mlps=[{', '.join(mlps)}],")
    sites = [_call("CallSites", site["cls"], _site_fields(site)) for site in arguments.get("call_sites") or []]
    if sites:
        parts.add("CallSites")
        lines.append(f"    call_sites=[{', '.join(sites)}],")
    rope = arguments.get("rope")
    if isinstance(rope, Mapping):
        parts.add("Rope")
        lines.append("    rope=" + _call("Rope", rope["function"], {"formulation": rope["formulation"]}) + ",")
    else:
        lines.append(f"    rope={rope!r},")
    lines.append("    causal_lm=" + _call("LossHead", arguments["causal_lm"]["cls"], _head_fields(arguments)) + ",")
    if vision and not omni:
        lines += _vlm_lines(spec, prefix, arguments)
    if omni:
        lines.append(f"    mrope={arguments.get('mrope') or None!r},")
        if arguments.get("model", f"{prefix}ThinkerModel") != f"{prefix}ThinkerModel":
            lines.append(f"    model={arguments.get('model')!r},")
        if arguments.get("text_model") != f"{prefix}ThinkerTextModel":
            lines.append(f"    text_model={arguments.get('text_model')!r},")
        if arguments.get("top_level") != f"{prefix}ForConditionalGeneration":
            lines.append(f"    top_level={arguments.get('top_level')!r},")
    if spec.experts:
        experts = arguments.get("experts")
        if experts:
            parts.add("Experts")
            layout = {key: experts[key] for key in EXPERTS_LAYOUT_FIELDS if experts.get(key)}
            fields = {"activation": experts["activation"], **layout}
            lines.append("    experts=" + _call("Experts", experts["sparse_block"], fields) + ",")
        else:
            lines.append("    experts=None,")
        router = arguments.get("router")
        if router:
            parts.add("Router")
            lines.append("    router=" + _call("Router", router["cls"], _router_fields(router)) + ",")
        lines.append(f"    aux_loss={arguments.get('aux_loss') or ''!r},")
        if arguments.get("indexer"):
            lines.append(f"    indexer={arguments['indexer']!r},")
        if experts and experts.get("block_attr", "mlp") != "mlp":
            lines.append(f"    sparse_block_attr={experts['block_attr']!r},")
    if not vision:  # the vlm recipes take no sequence classification head
        lines.append(f"    sequence_classification={arguments.get('sequence_classification')!r},")
    if arguments.get("base_model"):
        lines.append(f"    base_model={arguments['base_model']!r},")
    lines.append(")")
    imports = f"from modelgraft.generator.recipes import {', '.join(sorted(parts) + [recipe])}"
    if len(imports) > LINE_LENGTH:  # split as ruff splits it (omni_moe's ten parts)
        imports = format_source(imports).rstrip("\n")
    if spec.omni and spec.experts:
        extra_imports, extra = _omni_moe_lines(prefix, arguments)
        imports = "\n".join([imports, *extra_imports])
        lines += extra
    return imports, format_source("\n".join(lines) + "\n").rstrip("\n")


#: The composed_vlm recipe's defaults (generator/recipes/vlm_composed.py): an argument is written only where the
#: fit read something else.
COMPOSED_DEFAULTS = {
    "tower": "vision_tower",
    "language_model": "language_model",
    "model": "{prefix}Model",
    "placeholder_ids": ("self.config.image_token_id",),
}


def _composed_call(prefix: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
    """(import line, call) of ``composed_vlm``: the tower's attribute and the Model where not the defaults, the
    module's own norms, MLPs and call sites, and the loss head."""
    composed = arguments["composed"]
    parts = {"LossHead"}
    lines = ["composed_vlm(", "    config,", f"    prefix={prefix!r},"]
    if composed["tower"] != COMPOSED_DEFAULTS["tower"]:
        lines.append(f"    tower={composed['tower']!r},")
    if composed["language_model"] != COMPOSED_DEFAULTS["language_model"]:
        lines.append(f"    language_model={composed['language_model']!r},")
    if composed["model"] != COMPOSED_DEFAULTS["model"].format(prefix=prefix):
        lines.append(f"    model={composed['model']!r},")
    if not composed.get("sub_models"):  # both towers are this module's classes: no AutoModel call to replace
        lines.append("    compose=False,")
    if composed.get("image_tiles"):
        lines.append("    image_tiles=True,")
    if composed.get("image_sizes"):
        lines.append("    image_sizes=True,")
    if composed.get("image_rows"):
        lines.append("    image_rows=True,")
    if composed.get("image_grid"):
        lines.append("    image_grid=True,")
    if composed.get("image_merge_sizes"):
        lines.append("    image_merge_sizes=True,")
    if composed.get("image_patch_grid"):
        lines.append(f"    image_patch_grid={composed['image_patch_grid']!r},")
        factors = tuple(tuple(f) for f in composed.get("patch_grid_factors") or ())
        lines.append(f"    patch_grid_factors={factors!r},")
    if composed.get("zero_images_are_padding"):
        lines.append("    zero_images_are_padding=True,")
    if composed.get("pretrained_models"):
        lines.append(f"    pretrained_models={tuple(composed['pretrained_models'])!r},")
    if composed.get("sequence_parallel") is False:
        lines.append("    sequence_parallel=False,")
    ids = composed.get("placeholder_ids") or list(COMPOSED_DEFAULTS["placeholder_ids"])
    if ids != list(COMPOSED_DEFAULTS["placeholder_ids"]):
        lines.append(f"    placeholder_ids={tuple(ids)!r},")
    lines += _module_piece_lines(arguments, parts)
    lines.append("    causal_lm=" + _call("LossHead", arguments["causal_lm"]["cls"], _head_fields(arguments)) + ",")
    if composed.get("own_text"):  # the module's own language model: its RoPE and experts are guarded here
        lines += _own_text_lines(arguments, parts)
    lines.append(")")
    imports = f"from modelgraft.generator.recipes import {', '.join(sorted(parts) + ['composed_vlm'])}"
    if len(imports) > LINE_LENGTH:
        imports = format_source(imports).rstrip("\n")
    return imports, format_source("\n".join(lines) + "\n").rstrip("\n")


def _module_piece_lines(arguments: Mapping[str, Any], parts: set[str]) -> list[str]:
    """A composed recipe's ``norms``, ``mlps`` and ``call_sites`` arguments (the module's own pieces), each written
    where the fit read any; the parts they name are added to ``parts``."""
    norms = [
        _call("Norm", n["cls"], {"formulation": n["formulation"], "eps": n["eps"], "weight": n["weight"]})
        for n in arguments.get("norms") or []
    ]
    mlps = [_call("Mlp", m["cls"], _mlp_fields(m)) for m in arguments.get("mlps") or []]
    sites = [_call("CallSites", site["cls"], _site_fields(site)) for site in arguments.get("call_sites") or []]
    lines: list[str] = []
    for name, items, part in (("norms", norms, "Norm"), ("mlps", mlps, "Mlp"), ("call_sites", sites, "CallSites")):
        if items:
            parts.add(part)
            lines.append(f"    {name}=[{', '.join(items)}],")
    return lines


#: The composed_audio recipe's defaults (generator/recipes/audio_lm.py): an argument is written only where the fit
#: read something else.
AUDIO_LM_DEFAULTS = {
    "tower": "audio_tower",
    "language_model": "language_model",
    "model": "{prefix}Model",
    "features_mask": "input_features_mask",
    "features_attribute": "pooler_output",
    "placeholder_id": "self.config.audio_token_id",
}


def _audio_lm_call(prefix: str, arguments: Mapping[str, Any]) -> tuple[str, str]:
    """(import line, call) of ``composed_audio``: the Model's attributes and inputs where not the defaults, the
    module's own norms, MLPs, call sites and RoPE function, and the loss head."""
    audio = arguments["audio_lm"]
    parts = {"LossHead"}
    lines = ["composed_audio(", "    config,", f"    prefix={prefix!r},"]
    for name, default in AUDIO_LM_DEFAULTS.items():
        if audio[name] != default.format(prefix=prefix):
            lines.append(f"    {name}={audio[name]!r},")
    if audio.get("features_unread"):
        lines.append(f"    features_unread={tuple(audio['features_unread'])!r},")
    lines += _module_piece_lines(arguments, parts)
    rope = arguments.get("rope")
    if isinstance(rope, Mapping):
        parts.add("Rope")
        lines.append("    rope=" + _call("Rope", rope["function"], {"formulation": rope["formulation"]}) + ",")
    elif rope:
        lines.append(f"    rope={rope!r},")
    lines.append("    causal_lm=" + _call("LossHead", arguments["causal_lm"]["cls"], _head_fields(arguments)) + ",")
    lines.append(")")
    imports = f"from modelgraft.generator.recipes import {', '.join(sorted(parts) + ['composed_audio'])}"
    if len(imports) > LINE_LENGTH:
        imports = format_source(imports).rstrip("\n")
    return imports, format_source("\n".join(lines) + "\n").rstrip("\n")


def _own_text_lines(arguments: Mapping[str, Any], parts: set[str]) -> list[str]:
    """``composed_vlm``'s arguments for a language model of the module's own: RoPE, experts, router, aux loss and
    where the sparse blocks sit, each written only where the fit read one."""
    lines: list[str] = []
    rope = arguments.get("rope")
    if isinstance(rope, Mapping):
        parts.add("Rope")
        lines.append("    rope=" + _call("Rope", rope["function"], {"formulation": rope["formulation"]}) + ",")
    elif rope:
        lines.append(f"    rope={rope!r},")
    experts = arguments.get("experts")
    if experts:
        parts.add("Experts")
        layout = {key: experts[key] for key in EXPERTS_LAYOUT_FIELDS if experts.get(key)}
        fields = {"activation": experts["activation"], **layout}
        lines.append("    experts=" + _call("Experts", experts["sparse_block"], fields) + ",")
        router = arguments.get("router")
        if router:
            parts.add("Router")
            lines.append("    router=" + _call("Router", router["cls"], _router_fields(router)) + ",")
        layers = arguments["composed"].get("layers")
        if layers and layers != "model.language_model.layers":
            lines.append(f"    layers={layers!r},")
        if experts.get("block_attr", "mlp") != "mlp":
            lines.append(f"    sparse_block_attr={experts['block_attr']!r},")
    if arguments["composed"].get("indexer"):
        lines.append(f"    indexer={arguments['composed']['indexer']!r},")
    if arguments.get("aux_loss"):
        lines.append(f"    aux_loss={arguments['aux_loss']!r},")
    return lines


#: What recording an experts class's activation name in its ``__init__`` is for (the snippet's description).
EXPERTS_ACTIVATION_NAME = "record the experts' activation name for the moe_experts guard"


def _omni_moe_lines(prefix: str, arguments: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(imports, statements) after an omni_moe recipe call: the MoE thinker's own pieces (generator/recipes/fit_omni.py)
    as the zoo's Qwen3-Omni-MoE config writes them: each other ``PreTrainedModel`` class of the module gets the
    base class's conversions, strict loading and attention, and experts whose activation only ``__init__`` names
    record it there."""
    imports: list[str] = []
    lines: list[str] = []
    for cls in arguments.get("pretrained_models") or []:
        if not imports:
            imports.append("from modelgraft.generator.recipes.dense import apply_pretrained_model")
        lines.append(f"apply_pretrained_model(config, {cls!r}, prefix={prefix!r})")
    init = arguments.get("experts_activation_init")
    if init:
        options = {"kind": "modify_init", "config_attr": init["config_attr"], "description": EXPERTS_ACTIVATION_NAME}
        given = [
            repr("activation_name_init"),
            repr(init["cls"]),
            *(f"{key}={value!r}" for key, value in options.items()),
        ]
        lines.append(f"config.apply_snippet({', '.join(given)})")
    return imports, lines


#: The VisionTower part's defaults (generator/recipes/vlm.py): a field is written only where it differs.
VISION_TOWER_DEFAULTS = {
    "patch_weight": "self.patch_embed.proj.weight",
    "rope": "apply_rotary_pos_emb_vision",
    "merge_size": "self.spatial_merge_size",
    "attr": "visual",
    "package": None,
    "patch_input": "rows",
    "position_merge": None,
    "merger_outside": None,
}


def _vision_tower(vision: Mapping[str, Any]) -> str:
    """``VisionTower("<cls>", ...)``: the tower class, and its patch weight and rotary function where not the
    defaults (``rope=None`` for a tower whose attention applies no rotary function)."""
    fields: dict[str, Any] = {}
    for name, default in VISION_TOWER_DEFAULTS.items():
        value = vision.get(name, default) or None
        if value != default:
            fields[name] = value
    return _call("VisionTower", vision["cls"], fields)


#: The AudioTower part's defaults (generator/recipes/omni.py): a field is written only where it differs.
AUDIO_TOWER_DEFAULTS = {"input_weight": "self.conv1.weight", "mel_bins": "weight.shape[1]"}


def _omni_lines(arguments: Mapping[str, Any]) -> list[str]:
    """The omni recipe's own arguments: the audio tower, the speech side (attributes, classes, refused members)."""
    audio = arguments["audio"]
    fields = {
        name: audio[name] for name, default in AUDIO_TOWER_DEFAULTS.items() if audio.get(name, default) != default
    }
    return [
        f"    audio={_call('AudioTower', audio['cls'], fields)},",
        f"    speech={tuple(arguments['speech'])!r},",
        f"    speech_classes={tuple(arguments['speech_classes'])!r},",
        f"    refused={dict(arguments['refused'])!r},",
    ]


def init_weights_override(model: str, init: Mapping[str, Any]) -> tuple[str, str]:
    """(imports, override) of an Omni scaffold's ``_init_weights``: upstream's body less the branches naming a
    speech class (the fit's ``init_weights``), as a config method override, and the ``TYPE_CHECKING`` imports
    of the names it uses (for readers and linters: the body runs in the generated module). Both formatted."""
    imports = "if TYPE_CHECKING:\n" + "".join(f"    {line}\n" for line in init["imports"])
    body = "".join(f"    {line}" if line.strip() else line for line in init["body"].splitlines(keepends=True))
    override = (
        "@config.override_method(\n"
        f"    {init['owner'] + '._init_weights'!r},\n"
        '    description="upstream\'s, less its branches for the excluded speech classes",\n'
        ")\n"
        f"def {model}_init_weights({', '.join(init['params'])}):\n{body}"
    )
    return format_source(imports).rstrip("\n"), format_source(override).rstrip("\n")


def _vlm_lines(spec: categories.Category, prefix: str, arguments: Mapping[str, Any]) -> list[str]:
    """The vlm / vlm_moe recipe's own arguments: the multimodal RoPE, the base model (the vlm recipe's only),
    the AutoModel towers."""
    lines = [f"    mrope={arguments.get('mrope') or None!r},"]
    model = arguments.get("model")
    if not spec.experts and model and model != f"{prefix}Model":
        lines.append(f"    model={model!r},")
    towers = arguments.get("towers")
    if towers:
        lines.append(f"    towers={dict(towers)!r},")
    if arguments.get("sub_models"):  # sub-models of other packages' types, built by build_sub_model
        lines.append("    compose=True,")
        if "text_model" in arguments and arguments["text_model"] is None:
            lines.append("    text_model=None,")
    elif arguments.get("text_model") and arguments["text_model"] != f"{prefix}TextModel":
        lines.append(f"    text_model={arguments['text_model']!r},")
    if arguments.get("videos") is False:  # an image-only model: its placeholders found by the image id
        lines.append("    videos=False,")
        lines.append(f"    placeholder_ids={tuple(arguments.get('placeholder_ids') or ())!r},")
    return lines


def format_source(source: str) -> str:
    """``source`` as ``ruff format`` leaves it at the project's line length (installed ruff only)."""
    result = subprocess.run(
        [ruff_binary(), "format", "--isolated", f"--line-length={LINE_LENGTH}", "-"],
        input=source,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise PatchgenError(f"ruff cannot format the rendered recipe call: {result.stderr.strip()}")
    return result.stdout
