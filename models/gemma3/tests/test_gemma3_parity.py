"""Gemma3 (text): the generated modeling matches upstream transformers (the VLM: test_gemma3_vlm_parity.py).

The tiny config makes Gemma's differences matter: a 3-token sliding window (shorter than the 11-token
test batch) on layers 0 and 2 around a full-attention layer 1, and a final logit soft-cap of 0.3,
below the largest raw logit, so the chunked loss kernel is checked with soft-capping in effect.
Gemma's (1 + weight) RMSNorm, ``hidden_activation`` and ``self.vocab_size`` loss are exercised by
every parity test of the suite.
"""

import torch
from transformers import Gemma3TextConfig

from modelgraft.models.loader import build_model
from modelgraft.models.testing import causal_lm_batch
from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

SOFTCAP = 0.3

GEMMA3 = DenseModel(
    model_type="gemma3_text",
    config_class=Gemma3TextConfig,
    causal_lm="Gemma3ForCausalLM",
    sequence_classification="Gemma3TextForSequenceClassification",
    sizes={
        "sliding_window": 3,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "final_logit_softcapping": SOFTCAP,
    },
)


class TestGemma3Parity(DenseParitySuite):
    model = GEMMA3


def _logits(**overrides: object) -> torch.Tensor:
    config = GEMMA3.config(**overrides)
    torch.manual_seed(0)
    model = build_model(config, architecture=GEMMA3.causal_lm).eval()
    batch = causal_lm_batch(config)
    del batch["labels"]
    with torch.no_grad():
        return model(**batch).logits


def test_tiny_sliding_window_changes_the_logits() -> None:
    assert not torch.allclose(_logits(), _logits(sliding_window=64))


def test_final_logit_softcapping_bounds_the_logits_below_their_raw_size() -> None:
    assert _logits().abs().max() < SOFTCAP
    assert _logits(final_logit_softcapping=None).abs().max() > SOFTCAP
