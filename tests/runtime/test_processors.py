"""A VLM's processor on a CPU machine without torchvision: built from its parts, saved, and loaded back from
a checkpoint folder (what save_pretrained writes, and the hub's layout), giving upstream's outputs."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from transformers import (
    Gemma3Processor,
    LlavaImageProcessorPil,
    LlavaOnevisionImageProcessorPil,
    LlavaOnevisionProcessor,
    LlavaProcessor,
    PreTrainedTokenizerFast,
    ProcessorMixin,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
)
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

from modelgraft.models.processors import (
    FramesVideoProcessor,
    ImagesOnlyVideoProcessor,
    build_processor,
    load_processor,
)
from modelgraft.models.testing.vlm_processor import synthetic_image, synthetic_video, tiny_tokenizer

TEXT = ["w1 <|vision_start|><|image_pad|><|vision_end|> w2 <|vision_start|><|video_pad|><|vision_end|>"]


@pytest.fixture
def built() -> Qwen2_5_VLProcessor:
    image_processor = Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=112 * 112)
    return build_processor(Qwen2_5_VLProcessor, image_processor=image_processor, tokenizer=tiny_tokenizer())


def _outputs(processor: Qwen2_5_VLProcessor) -> dict[str, np.ndarray]:
    image, video = synthetic_image(64, 64, seed=0), synthetic_video(56, 56, frames=2, seed=1)
    return dict(processor(text=TEXT, images=[image], videos=[video], return_tensors="np"))


def _same(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> bool:
    return actual.keys() == expected.keys() and all(np.array_equal(actual[k], expected[k]) for k in expected)


def test_a_processor_built_without_torchvision_takes_videos_through_its_image_processor(built) -> None:
    assert isinstance(built.video_processor, FramesVideoProcessor)
    outputs = _outputs(built)
    assert outputs["video_grid_thw"].tolist() == [[1, 4, 4]]
    assert "second_per_grid_ts" in outputs


def test_what_save_pretrained_wrote_loads_back_with_the_same_outputs(built, tmp_path: Path) -> None:
    built.save_pretrained(tmp_path)

    loaded = load_processor(tmp_path)

    assert type(loaded) is Qwen2_5_VLProcessor
    assert _same(_outputs(loaded), _outputs(built))


def test_a_hub_layout_folder_loads_with_the_class_its_config_registers(built, tmp_path: Path) -> None:
    built.image_processor.to_json_file(tmp_path / "preprocessor_config.json")
    built.tokenizer.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))

    loaded = load_processor(tmp_path)

    assert type(loaded) is Qwen2_5_VLProcessor
    assert _same(_outputs(loaded), _outputs(built))


def test_a_folder_that_names_no_processor_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"{tmp_path}: no processor_class"):
        load_processor(tmp_path)


def _llava_processor() -> LlavaProcessor:
    """LLaVA's processor at a tiny size: its options decide how many placeholders one image gets."""
    image_processor = LlavaImageProcessorPil(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28})
    tokenizer = tiny_tokenizer(special_tokens=("<image>",))
    return build_processor(
        LlavaProcessor,
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=7,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )


def _image_outputs(processor: ProcessorMixin) -> dict[str, np.ndarray]:
    return dict(processor(text=["w1 <image> w2"], images=[synthetic_image(40, 30, seed=2)], return_tensors="np"))


def test_the_processor_s_own_options_load_back_with_it(tmp_path: Path) -> None:
    """patch_size and num_additional_image_tokens size LLaVA's placeholders: 16 patches per image here."""
    built = _llava_processor()
    built.save_pretrained(tmp_path)

    loaded = load_processor(tmp_path)

    assert (loaded.patch_size, loaded.num_additional_image_tokens) == (7, 1)
    assert _same(_image_outputs(loaded), _image_outputs(built))
    assert int((_image_outputs(loaded)["input_ids"] == built.image_token_id).sum()) == 16


def test_a_processor_whose_image_processor_takes_no_frames_gets_a_video_processor_that_refuses_videos() -> None:
    built = build_processor(
        LlavaOnevisionProcessor,
        image_processor=LlavaOnevisionImageProcessorPil(),
        tokenizer=tiny_tokenizer(special_tokens=("<image>", "<video>")),
    )
    assert isinstance(built.video_processor, ImagesOnlyVideoProcessor)
    with pytest.raises(ValueError, match="pass images and text only"):
        built.video_processor([synthetic_video(28, 28, frames=2, seed=0)])


def test_the_images_only_video_processor_answers_a_setting_with_the_image_processor_s() -> None:
    """MiniCPM-V's processor reads ``video_processor.slice_mode`` when it is built: the stand-in answers with the
    image processor's setting of that name."""
    image_processor = LlavaOnevisionImageProcessorPil(image_grid_pinpoints=[[28, 28]])
    assert ImagesOnlyVideoProcessor(image_processor).image_grid_pinpoints == [[28, 28]]


def test_the_images_only_video_processor_has_no_setting_its_image_processor_lacks() -> None:
    with pytest.raises(AttributeError, match="ImagesOnlyVideoProcessor has no setting 'slice_mode'"):
        _ = ImagesOnlyVideoProcessor(LlavaOnevisionImageProcessorPil()).slice_mode


def test_the_images_only_video_processor_saves_no_image_processor_and_pickles() -> None:
    video_processor = ImagesOnlyVideoProcessor(LlavaOnevisionImageProcessorPil(image_grid_pinpoints=[[28, 28]]))
    assert "_image_processor" not in video_processor.to_dict()
    assert pickle.loads(pickle.dumps(video_processor)).image_grid_pinpoints == [[28, 28]]


def _gemma3_processor() -> Gemma3Processor:
    """Gemma3's processor at a tiny size: its image_seq_length sets the soft tokens each image becomes."""
    specials = ("<start_of_image>", "<end_of_image>", "<image_soft_token>")
    words = tiny_tokenizer(special_tokens=specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words.backend_tokenizer,
        pad_token=words.pad_token,
        unk_token=words.unk_token,
        eos_token=words.eos_token,
        extra_special_tokens=dict(zip(("boi_token", "eoi_token", "image_token"), specials, strict=True)),
    )
    image_processor = Gemma3ImageProcessorPil(size={"height": 28, "width": 28})
    return build_processor(Gemma3Processor, image_processor=image_processor, tokenizer=tokenizer, image_seq_length=3)


def test_gemma3_s_processor_loads_back_with_its_image_seq_length(tmp_path: Path) -> None:
    built = _gemma3_processor()
    built.save_pretrained(tmp_path)

    loaded = load_processor(tmp_path)

    text = ["w1 <start_of_image> w2"]
    outputs = [
        dict(p(text=text, images=[synthetic_image(40, 30, seed=3)], return_tensors="np")) for p in (built, loaded)
    ]
    assert type(loaded) is Gemma3Processor and loaded.image_seq_length == 3
    assert _same(outputs[1], outputs[0])
    soft_token = built.tokenizer.convert_tokens_to_ids("<image_soft_token>")
    assert int((outputs[1]["input_ids"] == soft_token).sum()) == 3
