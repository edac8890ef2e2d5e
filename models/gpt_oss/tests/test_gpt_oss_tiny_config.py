"""The tiny config the gpt_oss parity suite runs on exercises what gpt_oss adds to attention.

Attention sinks (a learned per-head logit in every softmax) and alternating sliding-window / full layers
are upstream's code in the generated modeling; the suite's parity tests only prove them equal if the tiny
config reaches them: both layer kinds present, a window shorter than the test batch, and sinks that
change the result.
"""

from __future__ import annotations

import copy

import torch
from transformers import GptOssConfig

from modelgraft.models.gpt_oss.tests.test_gpt_oss_parity import GPT_OSS
from modelgraft.models.loader import build_model
from modelgraft.models.testing import causal_lm_batch, seed_everything


def _logits(config: GptOssConfig, edit=None) -> torch.Tensor:
    seed_everything(0)
    model = build_model(config, architecture="GptOssForCausalLM").float().eval()
    if edit is not None:
        edit(model)
    batch = causal_lm_batch(config)
    del batch["labels"]
    with torch.no_grad():
        return model(**batch).logits


def test_tiny_config_has_sliding_and_full_attention_layers() -> None:
    config = GPT_OSS.config()
    assert {"sliding_attention", "full_attention"} <= set(config.layer_types)


def test_tiny_sliding_window_is_shorter_than_the_test_batch() -> None:
    config = GPT_OSS.config()
    assert config.sliding_window < causal_lm_batch(config)["input_ids"].shape[1]


def test_the_sliding_window_changes_the_logits() -> None:
    config = GPT_OSS.config()
    wide = copy.deepcopy(config)
    wide.sliding_window = causal_lm_batch(config)["input_ids"].shape[1] + 1
    assert not torch.allclose(_logits(config), _logits(wide))


def test_attention_sinks_change_the_logits() -> None:
    config = GPT_OSS.config()

    def zero_sinks(model: torch.nn.Module) -> None:
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.sinks.zero_()

    assert not torch.allclose(_logits(config), _logits(config, zero_sinks))


def test_tiny_sizes_are_pairwise_distinct() -> None:
    config = GPT_OSS.config()
    sizes = [
        config.hidden_size,
        config.intermediate_size,
        2 * config.intermediate_size,
        config.num_local_experts,
        config.num_experts_per_tok,
        config.vocab_size,
        config.num_attention_heads,
        config.num_key_value_heads,
        config.head_dim,
    ]
    assert len(set(sizes)) == len(sizes), sizes
