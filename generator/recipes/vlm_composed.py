"""The composed (LLaVA-style) VLM recipe: a vision encoder, a projector and a language model built from the text
config, image features scattered into placeholder tokens, 1-D positions.

Upstream's ``<Prefix>Model`` of these models (llava, llava_onevision, gemma3, mistral3, paligemma, aya_vision,
lfm2_vl...) builds its vision tower and its language model with ``AutoModel.from_config`` on the sub-configs, so
the checkpoint's config picks the classes. What the pinned transformers has upstream is kept: the placeholder
mask and scatter, the projector, the masks, the output dataclasses. The recipe adds:

- ``vlm_composed_towers_init`` on ``<Prefix>Model.__init__``: every ``AutoModel.from_config(...)`` becomes
  :func:`modelgraft.models.composition.build_sub_model`, which builds the generated class registered for the
  sub-config's ``model_type`` (a zoo decoder, a vision encoder of the library) and refuses an unregistered type
  by name, so the towers' guards run and nothing falls back to upstream's classes;
- the dense pieces for what the module itself defines (a projector's norm or MLP, a text model kept in the same
  module): ``rms_norm_guard`` for ``norms``, ``glu_mlp_guard`` / ``mlp_activation_guard`` for ``mlps``,
  ``call_sites_guard`` for ``call_sites``;
- ``causal_lm_loss_guard`` on ``<Prefix>ForConditionalGeneration.forward``: upstream's loss call names
  ``self.config.text_config.vocab_size``, and the kernel gets the forward's ``**kwargs`` where upstream's loss call
  drops them, so a caller's ``shift_labels`` and ``num_items_in_batch`` reach it;
- ``vlm_composed_dummy_forward``: an added ``<Prefix>Model.dummy_forward`` running the tower and the projector
  on one blank image (a zero loss term for ranks without images);
- ``vlm_sequence_parallel_forward`` on ``<Prefix>Model.forward`` (the Qwen-VL recipe's): under the
  ``placeholder_features`` slot, which sequence parallelism binds, the image features of this rank's placeholders
  are scattered into its slice of the sequence (by upstream's own statements: ``get_placeholder_mask`` and
  ``masked_scatter``, or a merger of the model's own such as Idefics3's ``inputs_merger``), and a rank whose
  batch has no image adds ``dummy_forward``; unbound, upstream's forward; a call packing documents (1-D position ids that restart, no attention mask, no
  cache) turns the cache off first, so the language model's mask keeps the documents apart on eager and sdpa
  attention (helper ``packs_text_documents``);
- for a language model that is a class of the module itself (deepseek_ocr2's, mistral_large4's), the text
  recipes' guards nothing else applies: ``rope`` (:func:`modelgraft.generator.recipes.dense.apply_rope`), and for
  routed experts the experts' call, the router and the expert-parallel plan on the head
  (:func:`modelgraft.generator.recipes.vlm_moe.apply_moe_decoder`), and ``dsa_indexer_guard`` on a DeepSeek
  sparse attention indexer;
- the base class's checkpoint conversions, strict loading and attention on request, as for a dense model
  (:func:`modelgraft.generator.recipes.dense.apply_pretrained_model`), unless a recipe already applied them to
  the same module (a text model kept next to the multimodal classes, as gemma3's is).
"""

from __future__ import annotations

from collections.abc import Sequence

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
from modelgraft.generator.recipes.parts import CallSites, Experts, LossHead, Mlp, Norm, Rope, Router
from modelgraft.generator.recipes.vlm import apply_sequence_parallel_forward
from modelgraft.generator.recipes.vlm_moe import apply_moe_decoder

__all__ = ["composed_vlm"]


def composed_vlm(
    config: PatchConfig,
    *,
    prefix: str,
    tower: str = "vision_tower",
    language_model: str = "language_model",
    norms: Sequence[Norm] = (),
    mlps: Sequence[Mlp] = (),
    call_sites: Sequence[CallSites] = (),
    causal_lm: LossHead = LossHead("{prefix}ForConditionalGeneration"),
    model: str = "{prefix}Model",
    pretrained_model: str | None = "{prefix}PreTrainedModel",
    aux_loss: str = "",
    image_tiles: bool = False,
    image_sizes: bool = False,
    image_rows: bool = False,
    image_grid: bool = False,
    image_merge_sizes: bool = False,
    image_patch_grid: str = "",
    patch_grid_factors: Sequence[tuple[str, str, str]] = (),
    zero_images_are_padding: bool = False,
    sequence_parallel: bool = True,
    placeholder_ids: Sequence[str] = ("self.config.image_token_id",),
    pretrained_models: Sequence[str] = (),
    rope: str | Rope | None = None,
    experts: Experts | None = None,
    router: Router | None = None,
    layers: str = "model.language_model.layers",
    sparse_block_attr: str = "mlp",
    compose: bool = True,
    indexer: str | None = None,
) -> PatchConfig:
    """Apply the composed-VLM snippets to ``config`` for the model whose classes start with ``prefix``.

    ``tower`` is the attribute of ``model`` holding the vision tower, ``language_model`` the one holding the text
    model its forward calls (SmolVLM's ``text_model``); ``norms``, ``mlps`` and ``call_sites`` are
    the module's own (its projector's, or those of a text model it defines, when no other recipe guards them);
    ``pretrained_model`` is None when another recipe of the same config already changed the base class.
    ``aux_loss`` names the module-level MoE auxiliary-loss function the head calls ("" for a dense decoder).
    ``image_tiles``: the model tiles images on its config's ``image_grid_pinpoints`` and ``get_image_features``
    takes their ``image_sizes`` (LLaVA-NeXT, LLaVA-OneVision): ``dummy_forward`` feeds it one blank tile's.
    ``image_sizes``: ``get_image_features`` takes the images' sizes without tiles (Pixtral's variable sizes):
    ``dummy_forward`` passes the blank image's. ``image_rows``: ``get_image_features`` takes a row of images per
    sample, ``(batch, images, channels, height, width)`` (SmolVLM's): the blank image is one row of one image.
    ``image_grid``: ``get_image_features`` takes patch rows and their ``image_grid_thw`` (LLaVA-OneVision-1.5):
    the blank image is one frame of ``spatial_merge_size`` x ``spatial_merge_size`` patches.
    ``image_merge_sizes``: it also takes one merge factor per image (VideoLLaMA3's): the blank frame's side.
    ``image_patch_grid``: the ``get_image_features`` parameter giving each image's (height, width) in patches
    (MiniCPM-V's ``target_sizes``): the blank image is one square grid whose side is the product of
    ``patch_grid_factors`` ((config, field, rounds): ``config.<field>`` to the power ``config.<rounds>``, once
    where rounds is ""; config "" is the Model's), the smallest its mergers take.
    ``zero_images_are_padding``: ``get_image_features`` drops all-zero images as a row's padding (Idefics3's): the
    blank image is ones, so the tower runs on it.
    ``model.forward`` gets the sequence-parallel branches (this rank's placeholder features, ``dummy_forward``
    where a batch has no image). ``sequence_parallel=False`` (gemma3's, paligemma's: tokens that attend both ways,
    by a mask read from ``token_type_ids``): the same forward, but where more than one rank holds a slice of a
    sequence it gathers ``token_type_ids`` into the whole sequence's, whose mask Ulysses builds (a forward without
    them refuses image batches there), and it refuses an image batch in a row that packs documents; FSDP alone
    still runs the dummy towers. (The name predates the gathering: such a model is sequence-parallel too.)
    ``placeholder_ids``: the config ids
    ``get_placeholder_mask`` finds the image (then video) placeholders by, which a rank's slice is searched for.
    ``pretrained_models``: the module's other ``PreTrainedModel`` bases (an own tower's), which get the base-class
    changes too. ``rope``, ``experts``, ``router``: a language model of this module's own (None where the decoder is
    a registered one, whose package guards them), as for :func:`~modelgraft.generator.recipes.moe.moe_text`;
    ``layers`` and ``sparse_block_attr`` place its sparse blocks for the expert-parallel plan. ``compose=False``:
    ``model`` builds both towers as classes of this module (deepseek_ocr2), with no ``AutoModel`` call to replace.
    ``indexer``: an own text model's DeepSeek sparse attention indexer class, whose selection goes behind the
    ``dsa_indexer`` slot (so that sequence parallelism can bind its whole-sequence kernel there).
    """
    apply_upstream_version_check(config)
    apply_norms(config, norms, prefix=prefix)
    apply_mlps(config, mlps, prefix=prefix, description="glu_activation slot guard")
    apply_call_sites(config, call_sites, prefix=prefix)
    apply_rope(config, rope)
    if indexer is not None:
        config.apply_snippet(
            "dsa_indexer_guard",
            f"{_named(indexer, prefix)}.forward",
            description="DSA indexer's scores, mask and top-k behind the dsa_indexer slot",
        )
    model_cls = _named(model, prefix)
    if compose:
        config.apply_snippet(
            "vlm_composed_towers_init",
            f"{model_cls}.__init__",
            description="the towers are generated classes, chosen by the sub-configs' model_type",
        )
    config.apply_snippet(
        "vlm_composed_dummy_forward",
        f"{model_cls}.dummy_forward",
        add=True,
        tower=tower,
        tiles=image_tiles,
        image_sizes=image_sizes,
        rows=image_rows,
        grid=image_grid,
        merge_sizes=image_merge_sizes,
        patch_grid=image_patch_grid,
        grid_factors=[list(f) for f in patch_grid_factors],
        fill="ones" if zero_images_are_padding else "zeros",
        description="a zero loss term through the vision tower and the projector, for ranks without images",
    )
    apply_sequence_parallel_forward(
        config,
        f"{model_cls}.forward",
        [("self", "pixel_values")],
        placeholder_ids=placeholder_ids,
        packed_text=True,
        language_model=language_model,
        both_ways=not sequence_parallel,
    )
    head = apply_causal_lm(config, causal_lm, prefix=prefix, aux_loss=aux_loss, forward_kwargs=True)
    if experts is not None:
        apply_moe_decoder(
            config,
            experts=experts,
            router=router,
            causal_lm=head,
            prefix=prefix,
            layers=layers,
            sparse_block_attr=sparse_block_attr,
        )
    apply_pretrained_model(config, pretrained_model, prefix=prefix)
    for base in pretrained_models:
        apply_pretrained_model(config, base, prefix=prefix)
    return config
