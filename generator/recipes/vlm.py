"""The VLM recipe (Qwen-VL family): the dense recipe's text-side guards, the multimodal RoPE, the vision tower's
rotary embedding behind rope_vision, the fused-loss head of ``<Prefix>ForConditionalGeneration``, a vision
``dummy_forward`` and a picklable position-id function.

What a Qwen-VL model of the pinned transformers has upstream is kept: the vision tower's attention through the
registered attention implementations, its patch merger, the placeholder scatter of image and video features,
``get_rope_index`` and the output dataclasses. The recipe adds:

- the dense pieces, same snippets as :func:`modelgraft.generator.recipes.dense_text`: ``rms_norm_guard`` for
  ``norms`` (text and vision norms alike), ``glu_mlp_guard`` (or ``mlp_activation_guard``) for ``mlps``,
  ``call_sites_guard`` for ``call_sites``, ``rope_guard`` for a plain ``rope`` function (Qwen3-VL);
- ``vlm_mrope_guard`` for ``mrope``: Qwen2-VL's sectioned ``apply_multimodal_rotary_pos_emb`` behind the
  rope slot;
- ``vlm_rope_vision_guard``: the vision tower's ``apply_rotary_pos_emb_vision`` behind ``rope_vision_slot``;
- ``vlm_own_towers_init`` for ``towers``: a ``<Prefix>Model.__init__`` that builds its towers with
  ``AutoModel.from_config`` (Qwen3-VL) builds this module's classes instead, so its guards run;
- ``vlm_composed_towers_init`` for ``compose``: a ``<Prefix>Model.__init__`` whose ``AutoModel`` sub-models are
  of other packages' types (glm46v's glm4v towers) builds them with ``build_sub_model``, as the generated classes
  registered for those types; a tower of another package (``VisionTower.package``) gets its ``dummy_forward``
  and its RoPE guard from its own generated module, not here;
- ``causal_lm_loss_guard`` on ``<Prefix>ForConditionalGeneration.forward``: upstream's loss call names
  ``self.config.text_config.vocab_size`` and its lm_head call the hidden states sliced by ``logits_to_keep``, and
  the snippet hands the kernel exactly those, plus the forward's ``**kwargs`` where upstream's loss call drops
  them (Qwen3-VL), so a caller's ``shift_labels`` and ``num_items_in_batch`` reach a bound kernel;
- ``vlm_vision_dummy_forward``: an added ``dummy_forward`` on the vision model (a zero loss term that reaches
  every vision parameter, for ranks without images);
- ``vlm_position_id_func`` plus the helper :func:`rope_index_without_model`: an added ``get_position_id_func``
  on ``<Prefix>Model`` and the conditional-generation class, returning upstream's ``get_rope_index`` as a
  picklable function;
- ``vlm_metadata_collate_func``: an added ``get_metadata_collate_func`` on the same two classes, returning a
  picklable collator step that adds the vision tower's ``cu_seqlens``, ``max_seqlen`` and position ids of a batch
  (``modelgraft.models.vision_metadata``), which transformers accepts precomputed;
- ``vlm_sequence_parallel_forward`` on ``<Prefix>Model.forward``, with the helpers :func:`placeholder_outputs` and
  :func:`with_tower_dummies`: under the ``placeholder_features`` slot (sequence parallelism,
  ``modelgraft.models.distributed.multimodal``) the towers' features of this rank's placeholders are scattered
  into its slice, deepstack included, and a rank without images runs ``dummy_forward``; unbound, upstream's;
- ``vlm_packed_documents_guard`` on the text model's forward, with the helper :func:`packs_documents`: a packed
  row (``[4, B, L]`` position ids whose text row restarts, no attention mask) keeps its documents apart on eager
  and sdpa attention as flash attention does, where upstream's default cache hides them from the mask builder
  (docs/distributed.md, "Packed documents in a VLM or Omni row");
- the base class's checkpoint conversions, strict loading and attention on request, as for a dense model
  (:func:`modelgraft.generator.recipes.dense.apply_pretrained_model`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from modelgraft.generator.dsl.config import PatchConfig
from modelgraft.generator.recipes.dense import (
    _named,
    apply_call_sites,
    apply_causal_lm,
    apply_mlps,
    apply_norms,
    apply_pretrained_model,
    apply_rope,
    apply_upstream_version_check,
)
from modelgraft.generator.recipes.parts import CallSites, LossHead, Mlp, Norm, Rope

# Names the helpers' bodies use, for readers and linters only: a helper runs in the generated module, which has
# its own imports, and recipes never import torch.
if TYPE_CHECKING:
    import torch
    from transformers.masking_utils import find_packed_sequence_indices

    from modelgraft.models.ops.slots import placeholder_features_slot

__all__ = [
    "VisionTower",
    "apply_packed_documents",
    "apply_sequence_parallel_forward",
    "packs_documents",
    "placeholder_outputs",
    "rope_index_without_model",
    "vlm",
    "with_tower_dummies",
]


@dataclass(frozen=True)
class VisionTower:
    """The vision model of a VLM: the class that gets ``dummy_forward``, and its rotary embedding function.

    ``patch_weight`` is the expression, inside the vision model, of the patch embedding's weight (its dtype,
    device and input width); ``rope`` the module-level rotary embedding function of the tower (None: none to
    guard); ``merge_size`` the expression of its spatial merge size (``self.config.spatial_merge_size`` for a
    tower that keeps none, its merger sitting in the ``Model``); ``attr`` the ``Model``'s attribute holding it;
    ``package`` the model package whose generated module defines ``cls`` where it is not this one;
    ``patch_input`` how the patch embedding takes the processor's patches ("rows": one flat row each, Qwen-VL's;
    "images": ``[1, patches, channels, p, p]``, PaddleOCR-VL's), which ``dummy_forward``'s blank input follows;
    ``position_merge`` the constant merge size the tower lays its rotary positions out by (PaddleOCR-VL's 1), which
    ``get_metadata_collate_func`` then computes them with (None: the vision config's ``spatial_merge_size``).
    """

    cls: str
    patch_weight: str = "self.patch_embed.proj.weight"
    rope: str | None = "apply_rotary_pos_emb_vision"
    merge_size: str = "self.spatial_merge_size"
    #: The ``Model``'s attribute holding the tower, which its forward calls.
    attr: str = "visual"
    #: The package of another model whose generated class the ``Model`` builds as its tower, through
    #: ``build_sub_model`` (glm46v's ``Glm4vVisionModel``, of glm4v): that module gives it ``dummy_forward`` and
    #: guards its RoPE, so this recipe adds neither. None: the tower is a class of this module.
    package: str | None = None
    #: How the patch embedding takes the processor's patches: "rows" or "images" (see the class docstring).
    patch_input: str = "rows"
    #: The merge size of the tower's rotary positions where it is a constant, not its config's.
    position_merge: int | None = None
    #: The Model holds the merger next to the tower (PaddleOCR-VL's projector): the Model gets a ``dummy_forward``
    #: through ``get_image_features``, which a batch without images runs, so the merger gets a gradient too.
    merger_outside: bool = False


def rope_index_without_model(model_class: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
    """``model_class.get_rope_index(*args, **kwargs)`` with ``config``, without building a model.

    Upstream's ``get_rope_index`` reads only ``self.config`` and calls ``self.get_vision_position_ids``, which
    reads nothing of ``self``: an instance created without ``__init__`` that holds the config is all it needs,
    so the position ids are upstream's own code, not a copy, and a data-loader worker computes them without
    the model's weights. An ``attention_mask`` given as a dict by attention type is unwrapped to its full
    attention mask, as the model's forward does.
    """
    mask = kwargs.get("attention_mask")
    if isinstance(mask, dict):
        kwargs["attention_mask"] = mask.get("full_attention")
    owner = object.__new__(model_class)
    owner.__dict__["config"] = config
    return model_class.get_rope_index(owner, *args, **kwargs)


def placeholder_outputs(outputs: Any, mask: Any, features: str, layers: str | None = None) -> Any:
    """A tower's ``outputs`` with ``features`` (and the per-layer ``layers``) cut to the placeholders of ``mask``.

    ``outputs.<features>`` holds the tower's features of every placeholder of the batch (one tensor, one per
    image stacked (InternVL's ``[images, tokens, hidden]``, flattened here to rows), or a tuple of one per image,
    concatenated here into a tuple of one), and so does each of ``outputs.<layers>`` (Qwen3-VL's
    deepstack features: one tensor, or one tuple per layer); the ``placeholder_features`` slot keeps those of this
    process's positions, so upstream's statements that follow (the count check, the scatter, the deepstack merge)
    run unchanged on this rank's slice of the sequence.
    """

    def selected(value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            return (placeholder_features_slot(mask, torch.cat(list(value), dim=0)),)
        return placeholder_features_slot(mask, value.flatten(0, -2) if value.dim() > 2 else value)

    setattr(outputs, features, selected(getattr(outputs, features)))
    if layers is not None and getattr(outputs, layers, None) is not None:
        setattr(outputs, layers, [selected(layer) for layer in getattr(outputs, layers)])
    return outputs


def with_tower_dummies(inputs_embeds: Any, *towers: Any) -> Any:
    """``inputs_embeds`` plus exactly zero from each given tower's ``dummy_forward`` (None: that call ran).

    A rank whose batch lacks an input of a tower call (no image, no video, no audio) runs the tower once in its
    place, so every rank makes the same tower calls (FSDP's collectives of the tower's blocks stay in step) and
    every tower parameter gets a gradient, zero, instead of None.
    """
    for tower in towers:
        if tower is not None:
            inputs_embeds = inputs_embeds + tower.dummy_forward().to(inputs_embeds.dtype)
    return inputs_embeds


def packs_documents(position_ids: Any, attention_mask: Any, cache: Any) -> bool:
    """Whether a text model's call packs documents that upstream's mask builder would not see.

    True for the ``[4, B, L]`` layout whose row 0 (the text positions) restarts somewhere, called with no attention
    mask and no cache: transformers' mask builder separates those documents only when it gets no cache, so the
    text model's forward must not create one (``vlm_packed_documents_guard``). The restarts are found by
    transformers' own ``find_packed_sequence_indices``, the function the mask builder then applies.
    """
    if attention_mask is not None or cache is not None or position_ids is None:
        return False
    if position_ids.ndim != 3 or position_ids.shape[0] != 4:
        return False
    return find_packed_sequence_indices(position_ids[0]) is not None


def packs_text_documents(position_ids: Any, attention_mask: Any, cache: Any) -> bool:
    """Whether a composed VLM's call packs documents its text model's mask builder would not see.

    True for ``[B, L]`` position ids that restart somewhere, called with no attention mask and no cache: the
    language model builds its mask from them only when it gets no cache, and upstream's creates one whenever
    ``use_cache`` is on. The restarts are found by transformers' ``find_packed_sequence_indices``, the function
    the mask builder then applies.
    """
    if attention_mask is not None or cache is not None or position_ids is None or position_ids.ndim != 2:
        return False
    return find_packed_sequence_indices(position_ids) is not None


def apply_packed_documents(config: PatchConfig, target: str) -> None:
    """``vlm_packed_documents_guard`` on ``target`` (a text model's forward), with its helper and import."""
    config.add_import("transformers.masking_utils", ["find_packed_sequence_indices"])
    config.add_import("typing", ["Any"])  # the helpers' annotations: never assume upstream imports it
    config.add_helper(packs_documents, description="a call whose packed documents need the mask builder")
    config.apply_snippet(
        "vlm_packed_documents_guard",
        target,
        helper=packs_documents.__name__,
        description="packed documents of the [4, B, L] layout kept apart on eager and sdpa attention",
    )


def sequence_parallel_group() -> Any:
    """The process group of the ranks that hold slices of one sequence: the one the ``placeholder_features`` slot's
    kernel is bound over (None unbound, or bound without a group, as FSDP alone binds it)."""
    bound = placeholder_features_slot.bound
    return None if bound is None else bound.options.get("group")


def sequence_parallel_ranks() -> int:
    """How many ranks hold a slice of one sequence (1 without a sequence-parallel group)."""
    group = sequence_parallel_group()
    return 1 if group is None else torch.distributed.get_world_size(group)


def whole_sequence(tensor: Any) -> Any:
    """A per-token ``[B, S/sp]`` tensor of this rank's slice of each sequence, gathered into the whole padded
    sequence's ``[B, S]`` over the group the ``placeholder_features`` slot's kernel is bound over (itself with one
    rank per sequence). Ulysses attention builds the mask of the whole sequence, so a mask that reads per-token
    types (Gemma3's image blocks, PaliGemma's prefix) needs the types of the whole sequence too."""
    ranks = sequence_parallel_ranks()
    if ranks == 1:
        return tensor
    pieces = [torch.empty_like(tensor) for _ in range(ranks)]
    torch.distributed.all_gather(pieces, tensor.contiguous(), group=sequence_parallel_group())
    return torch.cat(pieces, dim=-1)


def apply_sequence_parallel_forward(
    config: PatchConfig,
    target: str,
    towers: Sequence[tuple[str, str]],
    *,
    placeholder_ids: Sequence[str] = (),
    packed_text: bool = False,
    language_model: str = "",
    both_ways: bool = False,
    audio_id: str = "",
    audio_attribute: str = "",
) -> None:
    """``vlm_sequence_parallel_forward`` on ``target`` (the forward that scatters the towers' features), with its
    helpers. ``towers``: (tower, forward parameter feeding one call of it), one per tower call;
    ``placeholder_ids``: the config ids of the image (then video) placeholders, for a ``get_placeholder_mask``
    that checks the features' count (a composed VLM's); empty: its own masks. ``packed_text``: the forward also
    turns the cache off for packed documents of 1-D position ids (:func:`packs_text_documents`).
    ``language_model``: the attribute of the text model the forward calls, where not the snippet's default.
    ``audio_id`` and ``audio_attribute``: a composed audio language model's audio placeholder id and the field of
    ``get_audio_features``' output its forward scatters. ``both_ways`` (with ``packed_text``): some tokens attend
    both ways. Where a sequence is split over ranks, the
    forward's ``token_type_ids`` (which the mask reads) are gathered into the whole sequence's
    (:func:`whole_sequence`), and a forward without them refuses image batches; packed rows with images are refused
    (the snippet says why; :func:`sequence_parallel_ranks`)."""
    config.add_import("typing", ["Any"])  # the helpers' annotations: never assume upstream imports it
    options: dict[str, Any] = {}
    if placeholder_ids:
        options["placeholder_ids"] = list(placeholder_ids)
    if language_model:
        options["language_model"] = language_model
    if audio_id:
        options["audio_id"] = audio_id
    if audio_attribute:
        options["audio_attribute"] = audio_attribute
    if packed_text:
        config.add_import("transformers.masking_utils", ["find_packed_sequence_indices"])
        config.add_helper(packs_text_documents, description="a call whose packed documents need the mask builder")
        options["packed_helper"] = packs_text_documents.__name__
    if both_ways:
        if not packed_text:
            raise ValueError("both_ways needs packed_text: its refusal of packed image rows is the packed guard's")
        config.add_helper(sequence_parallel_group, description="the group of the ranks that slice one sequence")
        config.add_helper(sequence_parallel_ranks, description="how many ranks hold a slice of one sequence")
        config.add_helper(whole_sequence, description="a per-token tensor of the whole sequence, from every slice")
        options["both_ways"] = True
    config.add_helper(placeholder_outputs, description="a tower's features of this rank's placeholders")
    config.add_helper(with_tower_dummies, description="zero from the towers a batch does not feed")
    config.apply_snippet(
        "vlm_sequence_parallel_forward",
        target,
        towers=[list(pair) for pair in towers],
        **options,
        description="sequence-parallel aware: this rank's placeholder features, dummy towers, dict masks",
    )


def vlm(
    config: PatchConfig,
    *,
    prefix: str,
    vision: VisionTower,
    norms: Sequence[Norm] = (Norm(),),
    mlps: Sequence[Mlp] = (Mlp(),),
    call_sites: Sequence[CallSites] = (),
    rope: str | Rope | None = None,
    mrope: str | None = None,
    causal_lm: LossHead = LossHead("{prefix}ForConditionalGeneration"),
    model: str = "{prefix}Model",
    text_model: str | None = "{prefix}TextModel",
    towers: Mapping[str, str] | None = None,
    pretrained_model: str | None = "{prefix}PreTrainedModel",
    aux_loss: str = "",
    compose: bool = False,
    videos: bool = True,
    placeholder_ids: Sequence[str] = (),
) -> PatchConfig:
    """Apply the VLM snippets to ``config`` for the model whose classes start with ``prefix``.

    The defaults are Qwen2.5-VL's, but for the text RoPE, which a config names in ``rope``. ``mrope`` names a
    module-level sectioned multimodal RoPE function (one that takes ``mrope_section``; transformers up to 5.16 had
    Qwen2-VL's; None where the rotary embedding sections the positions itself and the attention calls a plain
    ``rope`` function, as every Qwen-VL model now does). ``model`` is the class whose ``get_rope_index`` the
    position-id function runs;
    ``text_model`` the text decoder whose forward reads the packed ``[4, B, L]`` layout (None: a model without
    that layout, no guard).
    ``aux_loss`` names the module-level MoE auxiliary-loss function the head calls ("" for a dense text
    decoder), whose call goes behind ``load_balancing_loss_slot`` (:func:`modelgraft.generator.recipes.vlm_moe.vlm_moe`).
    ``compose``: ``model`` builds sub-models of other packages' types with ``AutoModel.from_config`` (glm46v's
    glm4v towers, cosmos3_omni's qwen3_vl ones): every such call builds the generated class registered for the
    sub-config's model_type instead (``vlm_composed_towers_init``, as the composed recipe's towers), so their
    packages' guards run; ``towers`` is then empty, and ``text_model`` None where the text model is one of them.
    ``videos``: False for an image-only model (PaddleOCR-VL: its ``get_placeholder_mask`` returns the image mask
    alone and wants the features to count, its forward takes no ``pixel_values_videos``), whose sequence-parallel
    forward runs the tower for ``pixel_values`` only and finds this rank's image placeholders by
    ``placeholder_ids`` (``("self.config.image_token_id",)``), as a composed VLM's does.
    """
    if not videos and not placeholder_ids:
        raise ValueError("an image-only vlm (videos=False) finds its placeholders by placeholder_ids: give them")
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    if mrope is not None:
        config.apply_snippet("vlm_mrope_guard", mrope, description="multimodal RoPE behind the rope slot")
    if vision.rope is not None and vision.package is None:
        config.apply_snippet(
            "vlm_rope_vision_guard", vision.rope, description="vision RoPE behind the rope_vision slot"
        )
    if vision.package is None:
        config.apply_snippet(
            "vlm_vision_dummy_forward",
            f"{_named(vision.cls, prefix)}.dummy_forward",
            add=True,
            patch_weight=vision.patch_weight,
            merge_size=vision.merge_size,
            # Told only where not flat rows: the snippet's default, so Qwen-VL's rendering stays as it was.
            **({"patch_input": vision.patch_input} if vision.patch_input != "rows" else {}),
            description="a zero loss term through the vision tower, for ranks without images",
        )
    model_cls = _named(model, prefix)
    if compose:
        config.apply_snippet(
            "vlm_composed_towers_init",
            f"{model_cls}.__init__",
            description="the towers are generated classes, chosen by the sub-configs' model_type",
        )
    elif towers:
        config.apply_snippet(
            "vlm_own_towers_init",
            f"{model_cls}.__init__",
            towers={attribute: _named(cls, prefix) for attribute, cls in towers.items()},
            description="the towers are this module's classes, not AutoModel's",
        )
    tower = f"self.{vision.attr}"
    towers_fed = [(tower, name) for name in (("pixel_values", "pixel_values_videos") if videos else ("pixel_values",))]
    if vision.merger_outside:
        config.apply_snippet(
            "vlm_model_dummy_forward",
            f"{model_cls}.dummy_forward",
            add=True,
            tower=vision.attr,
            patch_weight=vision.patch_weight,
            merge_size=vision.merge_size,
            **({"patch_input": vision.patch_input} if vision.patch_input != "rows" else {}),
            description="a zero loss term through the tower and the merger next to it, for ranks without images",
        )
        towers_fed[0] = ("self", "pixel_values")  # the Model's dummy_forward runs the merger too
    apply_sequence_parallel_forward(config, f"{model_cls}.forward", towers_fed, placeholder_ids=placeholder_ids)
    if text_model is not None:
        apply_packed_documents(config, f"{_named(text_model, prefix)}.forward")
    causal_lm_cls = apply_causal_lm(config, causal_lm, prefix=prefix, aux_loss=aux_loss, forward_kwargs=True)
    config.add_import("typing", ["Any"])  # the helper's annotations: never assume upstream imports it
    config.add_helper(rope_index_without_model, description="upstream's get_rope_index without a model (picklable)")
    for cls in (model_cls, causal_lm_cls):
        config.apply_snippet(
            "vlm_position_id_func",
            f"{cls}.get_position_id_func",
            add=True,
            helper=rope_index_without_model.__name__,
            model=model_cls,
            description="picklable multimodal position ids for the data pipeline",
        )
        config.apply_snippet(
            "vlm_metadata_collate_func",
            f"{cls}.get_metadata_collate_func",
            add=True,
            **({"position_merge": vision.position_merge} if vision.position_merge is not None else {}),
            description="picklable collator step precomputing the vision tower's packing metadata",
        )
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    return config
