"""GptOss: the generated modeling matches upstream transformers (the MoE suite).

The tiny config is derived from GptOssConfig itself (modelgraft.models.testing.tiny), so its sizes satisfy the
model's own constraints; the suite checks only the slots this scaffold guards.

Edited after the copy: gpt_oss's hub checkpoints store the experts fused, in the modeling's own layout
(``gate_up_proj [E, H, 2I]`` interleaved, with biases), never one module per expert, so the suite's two
per-expert checkpoint tests are replaced by the fused layout's (its converter is ``models/gpt_oss/checkpoint.py``;
``test_gpt_oss_checkpoint.py`` has the round trip through upstream and every error path).
"""

from pathlib import Path

import torch
from transformers import GptOssConfig

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.converters import converter_for
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.testing import causal_lm_batch, seed_everything
from modelgraft.models.testing.moe_suite import MoeModel, MoeParitySuite
from modelgraft.models.testing.parity import randomize_constant_parameters

GPT_OSS = MoeModel(
    model_type="gpt_oss",
    config_class=GptOssConfig,
    causal_lm="GptOssForCausalLM",
    sequence_classification="GptOssForSequenceClassification",
    guarded=(
        "rms_norm",
        "moe_experts",
        "topk_softmax_router",
        "causal_lm_loss",
        "load_balancing_loss",
        "sequence_classification_loss",
    ),
    derived_sizes=True,
    num_experts_attr="num_local_experts",
    hf_conversion=False,
)


class TestGptOssParity(MoeParitySuite):
    model = GPT_OSS

    def test_per_expert_checkpoint_loads_to_upstream_logits(self, backend: str, tmp_path: Path) -> None:
        """gpt_oss's hub checkpoints are fused: upstream's own state_dict, through the converter, to equal logits."""
        config = self.model.config()
        seed_everything(0)
        upstream = get_model_class("gpt_oss", self.model.causal_lm, use_hf=True)(config).float().eval()
        randomize_constant_parameters(upstream, seed=0)  # non-zero expert biases
        (tmp_path / "model").mkdir()
        upstream.save_pretrained(tmp_path / "model")
        seed_everything(1)
        generated = build_model(config, architecture=self.model.causal_lm, backend=backend).float().eval()
        load_checkpoint(generated, tmp_path / "model")
        batch = causal_lm_batch(config)
        del batch["labels"]
        with torch.no_grad():
            assert torch.equal(generated(**batch).logits, upstream(**batch).logits)

    def test_the_model_type_has_a_checkpoint_converter(self) -> None:
        converter = converter_for(self.model.config())
        assert converter is not None
        for name in ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias"):
            assert converter.can_handle(f"model.layers.0.mlp.experts.{name}")
        assert not converter.can_handle("model.layers.0.mlp.router.weight")
