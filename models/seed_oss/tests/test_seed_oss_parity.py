"""Seed-OSS: the generated modeling matches upstream transformers, residual dropout included.

Seed-OSS ends its MLP and attention in a residual dropout. The suite trains with it on (p=0.3): both
sides are reseeded before each step, so equal logits mean the patched MLP draws its dropout mask
exactly where upstream does.
"""

import torch
from transformers import SeedOssConfig

from modelgraft.models.loader import build_model
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.dense_suite import DenseModel, DenseParitySuite

SEED_OSS = DenseModel(
    model_type="seed_oss",
    config_class=SeedOssConfig,
    causal_lm="SeedOssForCausalLM",
    sequence_classification="SeedOssForSequenceClassification",
    sizes={"residual_dropout": 0.3},
)


class TestSeedOssParity(DenseParitySuite):
    model = SEED_OSS


def test_residual_dropout_is_active_in_training() -> None:
    config = SEED_OSS.config()
    model = build_model(config, architecture=SEED_OSS.causal_lm).train()
    batch = causal_lm_batch(config)
    logits = []
    for seed in (0, 1):
        seed_everything(seed)
        with torch.no_grad():
            logits.append(model(**batch).logits)
    assert not torch.equal(*logits)
