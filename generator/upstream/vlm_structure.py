"""What the upstream source of a vision-language model says about its towers: the VLM part of the reader's report.

Plain frozen dataclasses, no logic, like :mod:`modelgraft.generator.upstream.structure` (which holds them
as ``ModelStructure.vlm``): ``read_vlm`` fills them from the pinned modeling, configuration and processing
modules (by path, with ``ast``), ``patchgen-inspect`` prints them, and the Qwen-VL contract check
(:mod:`modelgraft.generator.upstream.vlm_contract`) compares them with what the vlm recipe expects
(docs/scaffolding.md, "The Qwen-VL contract").
"""

from __future__ import annotations

from dataclasses import dataclass

from modelgraft.generator.upstream.structure import RopeInfo


@dataclass(frozen=True)
class TowerInfo:
    """One sub-model the VLM's ``Model`` holds (``self.visual``, ``self.language_model``)."""

    attr: str  # "visual", "vision_tower", "language_model"
    #: The class it builds, as the module names it; None when only the checkpoint's config decides (AutoConfig).
    cls: str | None
    line: int = 0  # the class's line in the modeling file (0 when it is not defined there)
    #: How it is built: "Cls(...)", "Cls._from_config(...)", "AutoModel.from_config(...)".
    built_by: str = ""
    #: The config attribute passed in ("vision_config", "text_config"), when it is one.
    config_attr: str | None = None
    #: For the vision tower: the expression, inside it, of its patch embedding's weight (the ``Conv3d`` /
    #: ``Linear`` that takes the processor's patch rows), which ``dummy_forward`` sizes its blank input by.
    patch_weight: str | None = None
    #: For the vision tower: it keeps ``self.spatial_merge_size`` (the merge ``dummy_forward``'s grid needs).
    spatial_merge_size: bool = False
    #: The model package whose modeling module defines ``cls``, where that is not this one: a sub-model built by
    #: ``AutoModel.from_config`` on a sub-config whose default model_type is another package's (cosmos3_omni's
    #: ``qwen3_vl_vision``: ``Qwen3VLVisionModel`` of qwen3_vl), read from transformers' Auto tables. None for a
    #: class of this module, or where the configuration names no default type.
    package: str | None = None
    #: For the vision tower: how its patch embedding takes the processor's patches, which ``dummy_forward``'s
    #: blank input follows: "rows", one flat row per patch (Qwen-VL's ``[patches, channels * t * p * p]``), or
    #: "images", a batch of small images (PaddleOCR-VL's ``[1, patches, channels, p, p]``, whose embedding
    #: unpacks five sizes from its input's shape).
    patch_input: str = "rows"
    #: For the vision tower: the constant merge size it lays its rotary positions out by, where it passes one to
    #: ``get_vision_position_ids`` instead of its own merge size (PaddleOCR-VL's 1: it merges in the projector,
    #: after the tower), which the precomputed metadata must use too; None for its own merge size.
    position_merge: int | None = None


@dataclass(frozen=True)
class MergerInfo:
    """A module that turns vision features into text-width embeddings (patch merger, projector)."""

    owner: str  # the class holding it (the tower, or the Model next to the tower)
    attr: str  # "merger", "multi_modal_projector", "deepstack_merger_list"
    cls: str | None
    line: int = 0
    #: "tower" (inside the vision tower) or "model" (next to it, in the Model).
    place: str = "tower"
    #: A list of mergers, one per DeepStack level (qwen3_vl's ``deepstack_merger_list``).
    deepstack: bool = False


@dataclass(frozen=True)
class MethodInfo:
    """A method of the VLM read with its signature (``get_rope_index``, ``get_placeholder_mask``)."""

    name: str
    owner: str  # the class defining it (the Model, or the base it inherits it from)
    line: int
    params: tuple[str, ...] = ()  # every named parameter but self, in order
    required: tuple[str, ...] = ()  # those without a default
    var_keyword: bool = False  # takes **kwargs
    #: For get_placeholder_mask: how many masks each return statement hands back (1 image; 2 image and video).
    returns: int = 0


@dataclass(frozen=True)
class CompositionInfo:
    """``self.<attr> = AutoModel.from_config(config.<config_attr>)``: which attribute builds which sub-config."""

    owner: str
    attr: str
    config_attr: str
    #: The sub-config class the main config's ``sub_configs`` names ("Qwen3VLVisionConfig", or "AutoConfig").
    config_class: str | None
    #: The class of the modeling module declared for that config (``config: Qwen3VLVisionConfig``); None for
    #: AutoConfig, where the checkpoint's model_type picks it.
    builds: str | None
    #: The model_type a default config builds for that attribute: the ``SubConfigSpec``'s ``model_type``
    #: ("clip_vision_model" for llava's tower), or the ``model_type`` of the package's own sub-config class
    #: ("internvl_vision"); None when the configuration module names none.
    model_type: str | None = None
    #: The sub-config class is the package's own (configuration_<m>.py defines it): its model_type is this
    #: package's to register.
    own: bool = False


@dataclass(frozen=True)
class ProcessorInfo:
    """A public class of the model package's processing modules."""

    kind: str  # "processor", "image_processor", "image_processor_pil", "video_processor", ...
    cls: str
    module: str  # "transformers.models.qwen2_vl.processing_qwen2_vl"


@dataclass(frozen=True)
class VlmInfo:
    #: The class holding the vision tower and the language model ("Qwen2VLModel"); None when none holds both.
    model_class: str | None
    model_line: int = 0
    vision: TowerInfo | None = None
    language_model: TowerInfo | None = None
    mergers: tuple[MergerInfo, ...] = ()
    rope_index: MethodInfo | None = None
    placeholder_mask: MethodInfo | None = None
    #: A method of the Model, called by its forward, that finds the placeholders by ``input_ids == self.config.<id>``
    #: and scatters the image features into them itself (Idefics2's and Idefics3's ``inputs_merger``): where the
    #: Model has no ``get_placeholder_mask``, the same scatter in another method.
    placeholder_merger: MethodInfo | None = None
    compositions: tuple[CompositionInfo, ...] = ()
    processors: tuple[ProcessorInfo, ...] = ()
    #: The RoPE the vision tower's attention applies (``apply_rotary_pos_emb_vision``), apart from the text one.
    vision_rope: RopeInfo | None = None
    #: The language model's forward reads the ``[4, B, L]`` position ids of packed documents (a text row before
    #: the three rotary rows: it tests ``position_ids.shape[0] == 4``), as the vlm recipe's packed-document
    #: guard and position ids need. False only where its class is the module's and its forward has no such test.
    language_model_reads_text_row: bool = True
    #: An image-only model: ``get_placeholder_mask`` returns the image mask alone, the Model's forward takes no
    #: ``pixel_values_videos`` and the package has no video processor (PaddleOCR-VL's). The Qwen-VL contract
    #: then asks for that one mask instead of a pair, and the scaffold's tests feed images and text only.
    image_only: bool = False
    #: The Qwen-VL contract: empty when the model fits it, else one line per difference.
    contract_differences: tuple[str, ...] = ()
    #: The Model's ``get_image_features`` (what a composed VLM's ``dummy_forward`` runs), when it has one.
    image_features: MethodInfo | None = None
    #: The model's config declares ``image_grid_pinpoints``: images are cut into tiles of the tower's image size
    #: on a grid the config lists (LLaVA-NeXT's "anyres"), and ``get_image_features`` takes their ``image_sizes``.
    image_tiling: bool = False
    #: ``get_image_features`` requires ``image_sizes`` (Pixtral's variable sizes, or the tiles above).
    image_sizes: bool = False
    #: ``get_image_features`` takes a row of images per sample, ``(batch, images, channels, height, width)``
    #: (SmolVLM's): ``dummy_forward`` gives its blank image as one such row.
    image_rows: bool = False
    #: ``get_image_features`` drops the images whose pixels are all zero, as the padding of a row of fewer images
    #: (``(pixel_values == 0.0)``, Idefics2's, Idefics3's and SmolVLM's): ``dummy_forward``'s blank image is ones.
    zero_images_are_padding: bool = False
    #: ``get_image_features`` takes ``image_grid_thw``: patch rows on a grid (LLaVA-OneVision-1.5, Ovis2.5),
    #: which ``dummy_forward`` gives as one blank grid.
    image_grid: bool = False
    #: ``get_image_features`` also requires ``image_merge_sizes``, one merge factor per image of the grid
    #: (VideoLLaMA3's): ``dummy_forward`` gives its blank grid's side.
    image_merge_sizes: bool = False
    #: The ``get_image_features`` parameter giving each image's patch grid, rows of (height, width) in patches,
    #: which the tower's forward multiplies column by column (MiniCPM-V's ``target_sizes``); None where none does.
    image_patch_grid: str | None = None
    #: With ``image_patch_grid``: (config, field, rounds) of each factor the mergers divide the grid by (config: the
    #: sub-config of the Model's, "" for its own; rounds: the field counting the merges, "" for once), so that
    #: ``dummy_forward``'s blank grid is the smallest every merger takes.
    patch_grid_factors: tuple[tuple[str, str, str], ...] = ()
    #: The Model's forward builds a mask in which some tokens attend both ways (PaliGemma's prompt prefix, Gemma3's
    #: image tokens): neither a rank's slice of the sequence nor packed documents keep that attention.
    bidirectional_mask: bool = False
    #: The Model's forward calls ``get_placeholder_mask`` (or its ``placeholder_merger``) itself, where the
    #: sequence-parallel forward can give it a rank's features; False where another method calls
    #: ``get_placeholder_mask`` and scatters them (Ovis2.5's ``_merge_visual_features``).
    forward_scatters: bool = True
    #: The module's DeepSeek sparse attention indexer class (an own text model's: mistral_large4's), or None.
    dsa_indexer: str | None = None
    #: The config ids ``get_placeholder_mask`` (or the ``placeholder_merger``) compares ``input_ids`` with: the
    #: image placeholder's, then the video's where there is one
    #: (``("self.config.image_token_id", "self.config.video_token_id")``).
    placeholder_ids: tuple[str, ...] = ()
    #: The module's classes deriving from transformers' ``PreTrainedModel`` itself: the base class, and a tower's
    #: own (InternVL's ``InternVLVisionPreTrainedModel``), each of which gets the base-class changes.
    pretrained_bases: tuple[str, ...] = ()
    #: The composed (LLaVA-style) contract (:mod:`modelgraft.generator.upstream.composed_contract`): empty when
    #: the model fits it, else one line per difference.
    composed_differences: tuple[str, ...] = ()
    #: ``get_placeholder_mask`` finds image and video placeholders by the same token id (GLM-4V's video frames
    #: are image tokens): a batch holding both images and videos fails upstream's count check, so the
    #: scaffold's tests feed them in separate batches.
    video_shares_image_token: bool = False
    #: transformers transposes the fused expert tensors of this model_type's hub checkpoints on load
    #: (``conversion_mapping.py``, qwen3_vl_moe): the scaffold's converter is told that layout.
    hub_transposes_experts: bool = False
    #: Fields of the model's config that default to None and that the Model's ``__init__`` takes the ``len`` of
    #: (granite4_vision's ``deepstack_layer_map``): a default config cannot build the model, so no size the
    #: scaffold's tests derive can either.
    unset_sized_fields: tuple[str, ...] = ()
    #: The sub-configs nested in the package's own vision config (deepseek_ocr2's SAM and encoder configs).
    nested_vision_configs: tuple[str, ...] = ()
    #: The sub-config types of the package's own configuration module for which upstream's ``AutoModel`` builds a
    #: class of this modeling module, each with its config class (``("qwen2_5_vl_vision", "Qwen2_5_VLVisionConfig")``):
    #: the scaffold registers them for the generated module, so another model whose sub-config has such a type
    #: (hyperclovax_vision_v2's Qwen2.5-VL tower) builds the generated class (docs/scaffolding.md, "The composed-VLM
    #: contract"). The package's own model_type is never among them; a composed VLM's are empty, its recipe
    #: registering its own types (``own_types``).
    sub_model_types: tuple[tuple[str, str], ...] = ()

    @property
    def fits_qwen_vl_contract(self) -> bool:
        return not self.contract_differences

    @property
    def contract(self) -> str:
        """The contract upstream's structure shows: "qwen_vl" where the Model has multimodal position ids
        (``get_rope_index``), else "composed" (the language model's own 1-D positions, LLaVA-like).
        The scaffold's refusal lists the differences from this one."""
        return "qwen_vl" if self.rope_index is not None else "composed"
