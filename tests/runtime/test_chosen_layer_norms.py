"""A norm a config switch chooses (InternViT's ``NORM2FN[config.norm_type]``) goes behind the layer_norm slot only
while it is an ``nn.LayerNorm``, and InternViT's own RMSNorm, the other choice, behind the rms_norm slot: the
InternVL zoo tower, generated against upstream's, for both choices."""

from __future__ import annotations

from collections import Counter

import torch
from transformers import InternVLVisionConfig
from transformers.models.internvl import modeling_internvl as upstream

from modelgraft.models.internvl.generated import patched_modeling_internvl_gpu as generated
from modelgraft.models.testing.dense_suite import reference_kernels_bound

LAYERS = 2


def _towers(norm_type: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    config = InternVLVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        image_size=[28, 28],
        patch_size=[14, 14],
        norm_type=norm_type,
        use_mean_pooling=True,
    )
    torch.manual_seed(0)
    theirs = upstream.InternVLVisionModel(config).eval()
    ours = generated.InternVLVisionModel(config).eval()
    ours.load_state_dict(theirs.state_dict())
    return theirs, ours


def _run(norm_type: str) -> tuple[torch.Tensor, torch.Tensor, Counter[str]]:
    theirs, ours = _towers(norm_type)
    pixels = torch.randn(1, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    calls: Counter[str] = Counter()
    with torch.no_grad():
        expected = theirs(pixels).last_hidden_state
        with reference_kernels_bound(calls):
            got = ours(pixels).last_hidden_state
    return expected, got, calls


def test_the_towers_layer_norms_run_through_the_slot_when_the_config_chooses_layer_norm() -> None:
    expected, got, calls = _run("layer_norm")
    assert calls["layer_norm"] == 2 * LAYERS
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_an_rms_norm_the_config_chooses_runs_through_the_rms_norm_slot_not_the_layer_norm_slot() -> None:
    expected, got, calls = _run("rms_norm")
    assert (calls["layer_norm"], calls["rms_norm"]) == (0, 2 * LAYERS)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
