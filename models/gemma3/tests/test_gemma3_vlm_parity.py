"""Gemma3's VLM (``Gemma3ForConditionalGeneration``): the generated model matches upstream transformers.

The tiny config keeps what makes Gemma3's image path its own: a SigLIP tower of 4 x 4 patches pooled to
``mm_tokens_per_image`` = 4 soft tokens, the projector's (1 + weight) RMSNorm, and ``token_type_ids`` marking the
image tokens, which attend to each other both ways inside one image. The text model is the tiny text config of
the zoo's Gemma3 tests, sliding window included.
"""

from __future__ import annotations

import pytest
import torch
from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

from modelgraft.models.composition import SubModelError, build_sub_model
from modelgraft.models.testing.batches import IGNORE_INDEX
from modelgraft.models.testing.composed_vlm_suite import ComposedVlm, ComposedVlmSuite
from modelgraft.models.testing.configs import tiny_config

VOCAB = 131
BOI, EOI, IMAGE = 128, 129, 130
TOKENS_PER_IMAGE = 4
SEQ_LEN = 18


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


def gemma3_vlm_batch(config: Gemma3Config, images_per_row: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Rows of words with ``<boi> <image>x4 <eoi>`` blocks; the last row right-padded; image tokens unlabelled."""
    generator = torch.Generator().manual_seed(sum(images_per_row))
    rows = len(images_per_row)
    input_ids = torch.randint(1, BOI, (rows, SEQ_LEN), generator=generator)
    for row, images in enumerate(images_per_row):
        for image in range(images):
            start = 2 + image * (TOKENS_PER_IMAGE + 3)
            input_ids[row, start] = BOI
            input_ids[row, start + 1 : start + 1 + TOKENS_PER_IMAGE] = IMAGE
            input_ids[row, start + 1 + TOKENS_PER_IMAGE] = EOI
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, SEQ_LEN - 3 :] = 0
    input_ids[attention_mask == 0] = 0
    labels = input_ids.masked_fill((attention_mask == 0) | (input_ids == IMAGE), IGNORE_INDEX)
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": (input_ids == IMAGE).long(),
        "labels": labels,
    }
    if sum(images_per_row):
        vision = config.vision_config
        batch["pixel_values"] = torch.randn(
            sum(images_per_row), vision.num_channels, vision.image_size, vision.image_size, generator=generator
        )
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
    config.vision_config.model_type = "pixtral"
    with pytest.raises(SubModelError, match="'pixtral'"):
        build_sub_model(config.vision_config)
