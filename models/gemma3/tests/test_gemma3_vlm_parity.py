"""Gemma3's VLM (``Gemma3ForConditionalGeneration``): the generated model matches upstream transformers.

The tiny config keeps what makes Gemma3's image path its own: a SigLIP tower of 4 x 4 patches pooled to
``mm_tokens_per_image`` = 4 soft tokens, the projector's (1 + weight) RMSNorm, and ``token_type_ids`` marking the
image tokens, which attend to each other both ways inside one image. The text model is the tiny text config of
the zoo's Gemma3 tests, sliding window included. Every batch is what Gemma3's own processor writes (its PIL image
processor, no torchvision) for images of several sizes, a word-level tokenizer standing in for the hub's.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma3Config, Gemma3Processor, Gemma3TextConfig, PreTrainedTokenizerFast, SiglipVisionConfig
from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

from modelgraft.models.composition import SubModelError, build_sub_model
from modelgraft.models.testing.batches import IGNORE_INDEX
from modelgraft.models.testing.composed_vlm_suite import BothWaysImageTokens, ComposedVlm, ComposedVlmSuite
from modelgraft.models.testing.configs import tiny_config
from modelgraft.models.testing.vlm_processor import synthetic_image, tiny_tokenizer

VOCAB = 131
BOI, EOI, IMAGE = 128, 129, 130
START_OF_IMAGE, END_OF_IMAGE, IMAGE_SOFT_TOKEN = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
TOKENS_PER_IMAGE = 4


def gemma3_vlm_config() -> Gemma3Config:
    text = tiny_config(
        Gemma3TextConfig,
        vocab_size=VOCAB,
        sliding_window=3,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
    )
    vision = SiglipVisionConfig(
        hidden_size=40,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=28,
        patch_size=7,
        layer_norm_eps=3e-5,
        hidden_act="gelu_pytorch_tanh",
        vision_use_head=False,
    )
    config = Gemma3Config(
        text_config=text.to_dict(),
        vision_config=vision.to_dict(),
        mm_tokens_per_image=TOKENS_PER_IMAGE,
        boi_token_index=BOI,
        eoi_token_index=EOI,
        image_token_index=IMAGE,
    )
    config._attn_implementation = "eager"
    config.text_config._attn_implementation = "eager"
    config.vision_config._attn_implementation = "eager"
    return config


def gemma3_processor() -> Gemma3Processor:
    """Gemma3's own processor at the tiny sizes: a word-level tokenizer whose image specials are the config's ids."""
    words = tiny_tokenizer(words=BOI - 3, special_tokens=(START_OF_IMAGE, END_OF_IMAGE, IMAGE_SOFT_TOKEN))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words.backend_tokenizer,
        pad_token=words.pad_token,
        unk_token=words.unk_token,
        eos_token=words.eos_token,
        extra_special_tokens={"boi_token": START_OF_IMAGE, "eoi_token": END_OF_IMAGE, "image_token": IMAGE_SOFT_TOKEN},
    )
    assert (tokenizer.boi_token_id, tokenizer.eoi_token_id, tokenizer.image_token_id) == (BOI, EOI, IMAGE)
    image_processor = Gemma3ImageProcessorPil(size={"height": 28, "width": 28})
    return Gemma3Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_length=TOKENS_PER_IMAGE)


def gemma3_vlm_batch(config: Gemma3Config, images_per_row: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The processor's outputs for rows of words holding that many images (of different sizes); the rows differ
    in length, so the shorter is padded. Labels ignore padding and the image's soft tokens."""
    texts, images = [], []
    for row, count in enumerate(images_per_row):
        parts = [f"w{row} w{row + 7}"] + [f"{START_OF_IMAGE} w{row + i + 20}" for i in range(count)]
        texts.append(" ".join(parts + [f"w{i + 40}" for i in range(3 + 2 * row)]))
        images.append([synthetic_image(20 + 9 * i, 36 - 5 * i, seed=10 * row + i) for i in range(count)])
    inputs = gemma3_processor()(
        text=texts, images=images if sum(images_per_row) else None, return_tensors="pt", padding=True
    )
    batch = dict(inputs)
    ignored = (batch["attention_mask"] == 0) | (batch["token_type_ids"] == 1)
    batch["labels"] = batch["input_ids"].masked_fill(ignored, IGNORE_INDEX)
    return batch


GEMMA3_VLM = ComposedVlm(
    model_type="gemma3",
    architecture="Gemma3ForConditionalGeneration",
    config=gemma3_vlm_config,
    batch=gemma3_vlm_batch,
    guarded=("rms_norm", "activation", "layer_norm", "glu_activation", "rope", "causal_lm_loss"),
)


class TestGemma3VlmParity(ComposedVlmSuite):
    model = GEMMA3_VLM


def test_a_tower_type_without_a_generated_class_is_refused_by_name() -> None:
    config = gemma3_vlm_config()
    config.vision_config.model_type = "aimv2_vision_model"
    with pytest.raises(SubModelError, match="'aimv2_vision_model'"):
        build_sub_model(config.vision_config)


class TestGemma3VlmImageTokensAttendBothWays(BothWaysImageTokens):
    model = GEMMA3_VLM
