"""The VLM reader on toy upstream packages: one read fact per test, the toy changed only where that fact is."""

from __future__ import annotations

from pathlib import Path

from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.vlm_structure import VlmInfo

#: A Qwen-VL-shaped modeling module: tower with merger, text decoder, Model with both, methods of the contract.
MODELING = """
from torch import nn


class ToyPreTrainedModel(PreTrainedModel):
    pass


def apply_rotary_pos_emb_vision(q, k, cos, sin):
    return q, k


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    return q, k


class ToyVisionAttention(nn.Module):
    def __init__(self, config):
        self.qkv = nn.Linear(4, 12)

    def forward(self, x, cos, sin):
        q, k = apply_rotary_pos_emb_vision(x, x, cos, sin)
        return q


class ToyVisionBlock(nn.Module):
    def __init__(self, config):
        self.attn = ToyVisionAttention(config)


class ToyPatchMerger(nn.Module):
    def __init__(self, config):
        self.mlp = nn.Linear(4, 4)


class ToyVisionModel(ToyPreTrainedModel):
    config: ToyVisionConfig

    def __init__(self, config):
        self.blocks = nn.ModuleList([ToyVisionBlock(config) for _ in range(2)])
        self.merger = ToyPatchMerger(config)


class ToyTextAttention(nn.Module):
    def __init__(self, config, layer_idx):
        self.q_proj = nn.Linear(4, 4)

    def forward(self, x, cos, sin):
        q, k = apply_multimodal_rotary_pos_emb(x, x, cos, sin, self.mrope_section)
        return q


class ToyDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        self.self_attn = ToyTextAttention(config, layer_idx)


class ToyTextModel(ToyPreTrainedModel):
    config: ToyTextConfig

    def __init__(self, config):
        self.layers = nn.ModuleList([ToyDecoderLayer(config, i) for i in range(2)])


class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        self.visual = ToyVisionModel._from_config(config.vision_config)
        self.language_model = ToyTextModel._from_config(config.text_config)

    def get_rope_index(
        self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None, attention_mask=None, **kwargs
    ):
        return position_ids, deltas

    def get_placeholder_mask(self, input_ids, inputs_embeds, image_features=None, video_features=None):
        return image_mask, video_mask


class ToyForConditionalGeneration(ToyPreTrainedModel):
    def __init__(self, config):
        self.model = ToyModel(config)
        self.lm_head = nn.Linear(4, 8)

    def forward(self, input_ids=None, labels=None):
        return None
"""

CONFIGURATION = """
class ToyVisionConfig(PreTrainedConfig):
    model_type = "toy_vision"


class ToyTextConfig(PreTrainedConfig):
    model_type = "toy_text"


class ToyConfig(PreTrainedConfig):
    model_type = "toy"
    sub_configs = {"vision_config": ToyVisionConfig, "text_config": ToyTextConfig}
"""


def read_toy(tmp_path: Path, modeling: str = MODELING, **files: str) -> VlmInfo:
    """Read ``transformers/models/toy`` written under ``tmp_path`` (its configuration plus ``files``)."""
    package = tmp_path / "transformers" / "models" / "toy"
    package.mkdir(parents=True)
    (package / "modeling_toy.py").write_text(modeling, encoding="utf-8")
    files.setdefault("configuration_toy", CONFIGURATION)
    for stem, text in files.items():
        (package / f"{stem}.py").write_text(text, encoding="utf-8")
    structure = read_model("toy", root=tmp_path)
    assert structure.category == "vlm" and structure.vlm is not None
    return structure.vlm


def test_toy_in_qwen_vl_shape_fits_the_contract(tmp_path: Path) -> None:
    assert read_toy(tmp_path).contract_differences == ()


def test_the_model_class_is_the_one_holding_both_towers(tmp_path: Path) -> None:
    info = read_toy(tmp_path)
    assert info.model_class == "ToyModel"
    assert (info.vision.attr, info.vision.cls, info.vision.built_by) == (
        "visual",
        "ToyVisionModel",
        "ToyVisionModel._from_config(...)",
    )
    assert (info.language_model.attr, info.language_model.cls) == ("language_model", "ToyTextModel")


def test_a_tower_held_under_another_name_is_read_and_fits(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace("self.visual =", "self.vision_tower ="))
    assert info.vision.attr == "vision_tower"
    assert info.contract_differences == ()


def test_the_merger_is_read_in_the_tower(tmp_path: Path) -> None:
    (merger,) = read_toy(tmp_path).mergers
    assert (merger.owner, merger.attr, merger.cls, merger.place) == (
        "ToyVisionModel",
        "merger",
        "ToyPatchMerger",
        "tower",
    )


def test_a_list_of_deepstack_mergers_is_reported_as_such(tmp_path: Path) -> None:
    modeling = MODELING.replace(
        "        self.merger = ToyPatchMerger(config)\n",
        "        self.merger = ToyPatchMerger(config)\n"
        "        self.deepstack_merger_list = nn.ModuleList([ToyPatchMerger(config) for _ in range(2)])\n",
    )
    deepstack = [m for m in read_toy(tmp_path, modeling).mergers if m.deepstack]
    assert [(m.attr, m.cls) for m in deepstack] == [("deepstack_merger_list", "ToyPatchMerger")]


def test_a_projector_next_to_the_tower_counts_as_its_merger(tmp_path: Path) -> None:
    modeling = MODELING.replace("        self.merger = ToyPatchMerger(config)\n", "").replace(
        "        self.language_model =",
        "        self.multi_modal_projector = ToyPatchMerger(config)\n        self.language_model =",
    )
    info = read_toy(tmp_path, modeling)
    assert [(m.owner, m.attr, m.place) for m in info.mergers] == [("ToyModel", "multi_modal_projector", "model")]
    assert info.contract_differences == ()


def test_no_merger_at_all_is_a_difference(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace("        self.merger = ToyPatchMerger(config)\n", ""))
    assert info.contract_differences == ("no merger in the vision tower nor next to it in the Model",)


def test_get_rope_index_signature_and_required_inputs_are_read(tmp_path: Path) -> None:
    index = read_toy(tmp_path).rope_index
    assert (index.owner, index.required, index.var_keyword) == ("ToyModel", ("input_ids", "mm_token_type_ids"), True)
    assert index.params == ("input_ids", "mm_token_type_ids", "image_grid_thw", "video_grid_thw", "attention_mask")


def test_get_rope_index_inherited_from_a_base_names_the_base_as_owner(tmp_path: Path) -> None:
    modeling = MODELING.replace("class ToyModel(ToyPreTrainedModel):", "class ToyModel(ToyRopeBase):").replace(
        "class ToyForConditionalGeneration",
        "class ToyRopeBase(ToyPreTrainedModel):\n"
        "    def get_rope_index(self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,"
        " attention_mask=None, **kwargs):\n        return ids\n\n\nclass ToyForConditionalGeneration",
    )
    modeling = modeling.replace(
        "    def get_rope_index(\n        self, input_ids, mm_token_type_ids, image_grid_thw=None, video_grid_thw=None,"
        " attention_mask=None, **kwargs\n    ):\n        return position_ids, deltas\n\n",
        "",
    )
    assert read_toy(tmp_path, modeling).rope_index.owner == "ToyRopeBase"


def test_get_rope_index_without_mm_token_type_ids_is_a_difference(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace("self, input_ids, mm_token_type_ids, image", "self, input_ids, image"))
    assert info.rope_index.required == ("input_ids",)
    (difference,) = info.contract_differences
    assert difference.startswith("ToyModel.get_rope_index takes ('input_ids', 'image_grid_thw'")


def test_a_model_without_get_rope_index_is_told_so(tmp_path: Path) -> None:
    modeling = MODELING.replace("def get_rope_index(", "def get_position_ids(")
    info = read_toy(tmp_path, modeling)
    assert info.rope_index is None
    assert info.contract_differences == ("ToyModel has no get_rope_index (no multimodal position ids)",)


def test_placeholder_masks_are_counted_from_the_return(tmp_path: Path) -> None:
    assert read_toy(tmp_path).placeholder_mask.returns == 2


#: The toy's get_placeholder_mask as an image-only model's: one mask, found by the config's image id (PaddleOCR-VL's).
PAIR_OF_MASKS = (
    "    def get_placeholder_mask(self, input_ids, inputs_embeds, image_features=None, video_features=None):\n"
    "        return image_mask, video_mask\n"
)
IMAGE_MASK = (
    "    def get_placeholder_mask(self, input_ids, inputs_embeds, image_features):\n"
    "        return input_ids == self.config.image_token_id\n"
)
#: A forward of the toy's Model that takes video pixels.
VIDEO_FORWARD = (
    "    def forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None):\n"
    "        return None\n\n"
)


def test_a_single_placeholder_mask_of_a_model_that_takes_no_videos_is_image_only_and_fits(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace(PAIR_OF_MASKS, IMAGE_MASK))
    assert info.placeholder_mask.returns == 1 and info.image_only
    assert info.placeholder_ids == ("self.config.image_token_id",) and not info.video_shares_image_token
    assert info.contract_differences == ()


def test_a_pair_of_masks_is_not_image_only(tmp_path: Path) -> None:
    assert not read_toy(tmp_path).image_only


def test_a_single_placeholder_mask_beside_a_video_input_is_a_difference(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace(PAIR_OF_MASKS, VIDEO_FORWARD + IMAGE_MASK))
    assert not info.image_only
    difference = (
        "ToyModel.get_placeholder_mask returns 1 mask(s), not a pair (image, video), and the model takes videos"
        " (a video processor, or pixel_values_videos in its forward)"
    )
    assert info.contract_differences == (difference,)


def test_a_single_placeholder_mask_beside_a_video_processor_is_a_difference(tmp_path: Path) -> None:
    video_processing = 'class ToyVideoProcessor:\n    pass\n\n\n__all__ = ["ToyVideoProcessor"]\n'
    info = read_toy(tmp_path, MODELING.replace(PAIR_OF_MASKS, IMAGE_MASK), video_processing_toy=video_processing)
    assert not info.image_only
    assert len(info.contract_differences) == 1 and "and the model takes videos" in info.contract_differences[0]


def test_an_image_only_mask_found_by_no_config_id_is_a_difference(tmp_path: Path) -> None:
    """The image-only sequence-parallel forward finds each rank's placeholders by the id upstream compares."""
    mask = IMAGE_MASK.replace("return input_ids == self.config.image_token_id", "return image_mask")
    info = read_toy(tmp_path, MODELING.replace(PAIR_OF_MASKS, mask))
    assert info.image_only and info.placeholder_ids == ()
    (difference,) = info.contract_differences
    assert difference.startswith("ToyModel.get_placeholder_mask compares input_ids with no self.config.<id>")


#: The toy's tower as PaddleOCR-VL's: a transformer whose embeddings hold the patch layer, three attributes deep,
#: taking each patch as a small image; its encoder lays out rotary positions by a constant merge size.
WRAPPED_TOWER = """
class ToyVisionEmbeddings(nn.Module):
    def __init__(self, config):
        self.patch_embedding = nn.Conv2d(3, 4, kernel_size=2, stride=2)

    def forward(self, pixel_values, grid_thw=None):
        batch_size, sequence_len, channel, height, width = pixel_values.shape
        return self.patch_embedding(pixel_values.reshape(-1, channel, height, width))


class ToyVisionTransformer(nn.Module):
    def __init__(self, config):
        self.embeddings = ToyVisionEmbeddings(config)
        self.blocks = nn.ModuleList([ToyVisionBlock(config) for _ in range(2)])

    def forward(self, pixel_values, grid_thw=None, **kwargs):
        position_ids = get_vision_position_ids(grid_thw, 1, kwargs=kwargs)
        return self.embeddings(pixel_values)


class ToyVisionModel(ToyPreTrainedModel):
    config: ToyVisionConfig

    def __init__(self, config):
        self.vision_model = ToyVisionTransformer(config)
        self.merger = ToyPatchMerger(config)
"""
FLAT_TOWER = """
class ToyVisionModel(ToyPreTrainedModel):
    config: ToyVisionConfig

    def __init__(self, config):
        self.patch_embed = ToyPatchEmbed(config)
        self.blocks = nn.ModuleList([ToyVisionBlock(config) for _ in range(2)])
        self.merger = ToyPatchMerger(config)
        self.spatial_merge_size = config.spatial_merge_size

    def forward(self, hidden_states, grid_thw=None, **kwargs):
        position_ids = get_vision_position_ids(grid_thw, self.spatial_merge_size, kwargs=kwargs)
        return self.patch_embed(hidden_states)


class ToyPatchEmbed(nn.Module):
    def __init__(self, config):
        self.proj = nn.Conv3d(3, 4, kernel_size=(2, 2, 2), stride=(2, 2, 2))

    def forward(self, hidden_states):
        hidden_states = hidden_states.view(-1, 3, 2, 2, 2)
        return self.proj(hidden_states)
"""
TOWER = """
class ToyVisionModel(ToyPreTrainedModel):
    config: ToyVisionConfig

    def __init__(self, config):
        self.blocks = nn.ModuleList([ToyVisionBlock(config) for _ in range(2)])
        self.merger = ToyPatchMerger(config)
"""
assert TOWER in MODELING and PAIR_OF_MASKS in MODELING  # what the variants replace


def test_a_patch_embedding_three_attributes_deep_taking_small_images_is_read(tmp_path: Path) -> None:
    tower = read_toy(tmp_path, MODELING.replace(TOWER, WRAPPED_TOWER)).vision
    assert tower.patch_weight == "self.vision_model.embeddings.patch_embedding.weight"
    assert tower.patch_input == "images"


def test_a_patch_embedding_that_reshapes_flat_rows_into_small_images_itself_is_read_as_rows(tmp_path: Path) -> None:
    """HY-V4-VL's embedding first unpacks two sizes of its input (flat rows), then reshapes them into the five it
    unpacks after: the processor's rows are what it takes."""
    five = "        batch_size, sequence_len, channel, height, width = pixel_values.shape\n"
    reshaped = (
        "        num_patches, _ = pixel_values.shape\n"
        "        pixel_values = pixel_values.reshape(1, num_patches, 3, 2, 2)\n" + five
    )
    wrapped = WRAPPED_TOWER.replace(five, reshaped)
    assert wrapped != WRAPPED_TOWER
    tower = read_toy(tmp_path, MODELING.replace(TOWER, wrapped)).vision
    assert tower.patch_input == "rows"


def test_a_patch_embedding_of_flat_rows_is_read_as_rows(tmp_path: Path) -> None:
    tower = read_toy(tmp_path, MODELING.replace(TOWER, FLAT_TOWER)).vision
    assert (tower.patch_weight, tower.patch_input) == ("self.patch_embed.proj.weight", "rows")


def test_a_constant_merge_size_of_the_towers_rotary_positions_is_read(tmp_path: Path) -> None:
    assert read_toy(tmp_path, MODELING.replace(TOWER, WRAPPED_TOWER)).vision.position_merge == 1


def test_the_towers_own_merge_size_for_its_rotary_positions_is_no_constant(tmp_path: Path) -> None:
    assert read_toy(tmp_path, MODELING.replace(TOWER, FLAT_TOWER)).vision.position_merge is None


def test_automodel_composition_builds_the_class_declared_for_the_sub_config(tmp_path: Path) -> None:
    modeling = MODELING.replace("ToyVisionModel._from_config(", "AutoModel.from_config(").replace(
        "ToyTextModel._from_config(", "AutoModel.from_config("
    )
    info = read_toy(tmp_path, modeling)
    assert {(c.attr, c.config_attr, c.config_class, c.builds) for c in info.compositions} == {
        ("visual", "vision_config", "ToyVisionConfig", "ToyVisionModel"),
        ("language_model", "text_config", "ToyTextConfig", "ToyTextModel"),
    }
    assert info.vision.cls == "ToyVisionModel" and info.vision.built_by == "AutoModel.from_config(...)"


def test_an_autoconfig_sub_config_leaves_the_class_to_the_checkpoint(tmp_path: Path) -> None:
    modeling = MODELING.replace("ToyVisionModel._from_config(", "AutoModel.from_config(")
    configuration = CONFIGURATION.replace('{"vision_config": ToyVisionConfig', '{"vision_config": AutoConfig')
    info = read_toy(tmp_path, modeling, configuration_toy=configuration)
    (composed,) = info.compositions
    assert (composed.config_class, composed.builds, info.vision.cls) == ("AutoConfig", None, None)
    assert "the checkpoint chooses (AutoConfig)" in info.contract_differences[0]


def test_a_sub_configs_defaults_table_names_the_sub_configs_too(tmp_path: Path) -> None:
    """``sub_configs_defaults`` supersedes ``sub_configs``; its values are classes or ``SubConfigSpec(...)``."""
    modeling = MODELING.replace("ToyVisionModel._from_config(", "AutoModel.from_config(").replace(
        "ToyTextModel._from_config(", "AutoModel.from_config("
    )
    configuration = CONFIGURATION.replace(
        '    sub_configs = {"vision_config": ToyVisionConfig, "text_config": ToyTextConfig}',
        "    sub_configs_defaults = {\n"
        '        "vision_config": ToyVisionConfig,\n'
        '        "text_config": SubConfigSpec(config_class=AutoConfig, model_type="llama"),\n'
        "    }",
    )
    assert "sub_configs_defaults" in configuration
    info = read_toy(tmp_path, modeling, configuration_toy=configuration)
    assert {(c.attr, c.config_class, c.builds) for c in info.compositions} == {
        ("visual", "ToyVisionConfig", "ToyVisionModel"),
        ("language_model", "AutoConfig", None),
    }


def test_a_sub_config_spec_naming_its_class_positionally_builds_that_class(tmp_path: Path) -> None:
    modeling = MODELING.replace("ToyVisionModel._from_config(", "AutoModel.from_config(")
    configuration = CONFIGURATION.replace(
        "    sub_configs = {",
        "    sub_configs_defaults: ClassVar[dict] = {",
    ).replace('{"vision_config": ToyVisionConfig', '{"vision_config": SubConfigSpec(ToyVisionConfig, optional=True)')
    info = read_toy(tmp_path, modeling, configuration_toy=configuration)
    (composed,) = info.compositions
    assert (composed.config_class, composed.builds, info.vision.cls) == (
        "ToyVisionConfig",
        "ToyVisionModel",
        "ToyVisionModel",
    )


def test_processors_are_the_public_classes_of_the_processing_modules(tmp_path: Path) -> None:
    info = read_toy(
        tmp_path,
        processing_toy='class ToyProcessor(ProcessorMixin):\n    pass\n\n\n__all__ = ["ToyProcessor"]\n',
        image_processing_pil_toy='class ToyImageProcessorPil:\n    pass\n\n\n__all__ = ["ToyImageProcessorPil"]\n',
    )
    assert {(p.kind, p.cls) for p in info.processors} == {
        ("processor", "ToyProcessor"),
        ("image_processor_pil", "ToyImageProcessorPil"),
    }


def test_the_vision_rope_is_the_function_the_towers_attention_calls(tmp_path: Path) -> None:
    rope = read_toy(tmp_path).vision_rope
    assert (rope.name, rope.params) == ("apply_rotary_pos_emb_vision", ("q", "k", "cos", "sin"))


def test_the_text_rope_is_the_function_the_text_attention_calls(tmp_path: Path) -> None:
    package_root = tmp_path
    read_toy(package_root)
    rope = read_model("toy", root=package_root).rope
    assert rope.name == "apply_multimodal_rotary_pos_emb" and "mrope_section" in rope.reason


def test_no_class_holding_both_towers_is_the_one_difference(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace("self.language_model =", "self.text_tower ="))
    assert info.model_class is None
    assert info.contract_differences == ("no class holds both a vision tower and a language model",)


def test_a_vlm_whose_only_rotary_function_is_the_towers_has_no_text_rope(tmp_path: Path) -> None:
    """kimi_k25's text model is AutoModel's: the vision RoPE must not be taken for the text one."""
    modeling = MODELING.replace(
        "        q, k = apply_multimodal_rotary_pos_emb(x, x, cos, sin, self.mrope_section)\n", ""
    ).replace(
        "def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):\n    return q, k\n", ""
    )
    read_toy(tmp_path, modeling)
    rope = read_model("toy", root=tmp_path).rope
    assert (rope.kind, rope.name) == ("none", None)
    assert "apply_rotary_pos_emb_vision (line " in rope.reason and "the vision tower's" in rope.reason


#: The toy's Model as MiniCPM-V's: one get_placeholder_mask compares input_ids with a parameter, which the forward
#: hands a config id per modality (the video's first here, so the order is the reader's, not the source's).
MASK_BY_PARAMETER = (
    "    def get_placeholder_mask(self, input_ids, inputs_embeds, features, token_id):\n"
    "        return input_ids == token_id\n\n"
    "    def forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None):\n"
    "        video = self.get_placeholder_mask(input_ids, inputs_embeds, v, token_id=self.config.video_token_id)\n"
    "        image = self.get_placeholder_mask(input_ids, inputs_embeds, f, self.config.image_token_id)\n"
    "        return None\n"
)


def test_ids_the_forward_hands_the_compared_parameter_are_the_placeholder_ids(tmp_path: Path) -> None:
    info = read_toy(tmp_path, MODELING.replace(PAIR_OF_MASKS, MASK_BY_PARAMETER))
    assert info.placeholder_ids == ("self.config.image_token_id", "self.config.video_token_id")
    assert not info.video_shares_image_token


def test_a_compared_parameter_the_forward_hands_no_config_id_gives_no_placeholder_ids(tmp_path: Path) -> None:
    mask = MASK_BY_PARAMETER.replace("self.config.video_token_id", "video_id").replace(
        "self.config.image_token_id", "image_id"
    )
    assert read_toy(tmp_path, MODELING.replace(PAIR_OF_MASKS, mask)).placeholder_ids == ()


#: The toy's tower and Model as MiniCPM-V's: get_image_features hands the tower each image's patch grid, which the
#: tower's forward multiplies column by column; a window merger in the tower and a merger beside it divide the grid.
PATCH_GRID_TOWER = """
class ToyWindowMerger(nn.Module):
    def __init__(self, config):
        self.window_kernel_size = tuple(config.window_kernel_size)
        self.proj = nn.Linear(4, 4)


class ToyGridMerger(nn.Module):
    def __init__(self, config):
        self.merge_kernel_size = tuple(config.merge_kernel_size)
        self.merger_times = config.merger_times
        self.hidden = config.hidden_size

    def forward(self, hidden_states, target_sizes):
        for i in range(1, self.merger_times):
            pass
        return hidden_states


class ToyVisionModel(ToyPreTrainedModel):
    config: ToyVisionConfig

    def __init__(self, config):
        self.blocks = nn.ModuleList([ToyVisionBlock(config) for _ in range(2)])
        self.vit_merger = ToyWindowMerger(config)

    def forward(self, pixel_values, target_sizes=None):
        lengths = torch.cumsum(target_sizes[:, 0] * target_sizes[:, 1], dim=0)
        return pixel_values
"""
PATCH_GRID_FEATURES = (
    "    def get_image_features(self, pixel_values, target_sizes, mode=None):\n"
    "        out = self.visual(pixel_values, target_sizes=target_sizes)\n"
    "        return self.merger(out, target_sizes)\n\n"
)


def _patch_grid_toy(multiplies: bool = True) -> str:
    tower = MODELING[MODELING.index("class ToyVisionModel") : MODELING.index("class ToyTextAttention")]
    grid = PATCH_GRID_TOWER if multiplies else PATCH_GRID_TOWER.replace("target_sizes[:, 1]", "target_sizes[:, 0]")
    return (
        MODELING.replace(tower, grid.lstrip("\n") + "\n\n")
        .replace("class ToyPatchMerger", "class ToyUnused")
        .replace(
            "        self.language_model = ToyTextModel",
            "        self.merger = ToyGridMerger(config)\n        self.language_model = ToyTextModel",
        )
        .replace("    def get_placeholder_mask(", PATCH_GRID_FEATURES + "    def get_placeholder_mask(", 1)
    )


def test_a_patch_grid_the_tower_multiplies_column_by_column_is_read_with_the_mergers_factors(tmp_path: Path) -> None:
    info = read_toy(tmp_path, _patch_grid_toy())
    assert info.image_patch_grid == "target_sizes"
    assert info.patch_grid_factors == (
        ("vision_config", "window_kernel_size", ""),
        ("", "merge_kernel_size", "merger_times"),
    )
    assert not any("target_sizes" in d for d in info.composed_differences)


def test_a_size_the_tower_does_not_multiply_column_by_column_is_no_patch_grid(tmp_path: Path) -> None:
    info = read_toy(tmp_path, _patch_grid_toy(multiplies=False))
    assert info.image_patch_grid is None and info.patch_grid_factors == ()
    assert any("get_image_features requires target_sizes" in d for d in info.composed_differences)
