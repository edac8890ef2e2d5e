"""build_model(device="meta") and materialize: no memory until sharded, then the model's own init per shard.

One process: what materialization computes does not depend on sharding (the multi-rank cases are in
``test_sharded_load.py``). The reference is always the same model built the ordinary way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from modelgraft.models.distributed.materialize import (
    UninitializedBufferError,
    local_parameter_bytes,
    materialize,
    non_persistent_buffers,
)
from modelgraft.models.distributed.sharded_load import load_sharded_checkpoint
from modelgraft.models.loader import build_model
from modelgraft.models.testing import seed_everything
from modelgraft.models.testing.declarations import parity_declaration

#: Every committed zoo package: their buffers computed in __init__ (RoPE variants, gemma3's embed_scale,
#: deepseek_v4's compressor RoPE, the VL models' vision RoPE) must come back after materializing.
ZOO = [
    "deepseek_v3",
    "deepseek_v4",
    "gemma3",
    "glm_moe_dsa",
    "gpt_oss",
    "llama",
    "qwen2",
    "qwen2_vl",
    "qwen3",
    "qwen3_moe",
    "qwen3_vl",
    "seed_oss",
]


def _built(package: str, **kwargs: object) -> torch.nn.Module:
    declaration = parity_declaration(package)
    seed_everything(0)
    return build_model(declaration.config(), architecture=declaration.causal_lm, **kwargs)


def test_a_meta_build_allocates_no_parameter_and_no_buffer() -> None:
    model = _built("qwen3_moe", device="meta")
    assert all(p.is_meta for p in model.parameters())
    assert all(b.is_meta for b in model.buffers())


@pytest.mark.parametrize("package", ZOO)
@pytest.mark.parametrize("weights", [True, False], ids=["init", "buffers_only"])
def test_materialized_buffers_equal_a_normal_builds(package: str, weights: bool) -> None:
    model = materialize(_built(package, device="meta"), weights=weights)
    reference = _built(package)
    expected = non_persistent_buffers(reference)
    assert expected, f"{package} has no buffer computed in __init__: a vacuous check"
    got = non_persistent_buffers(model)
    assert got.keys() == expected.keys()
    for name, buffer in expected.items():
        assert torch.equal(got[name], buffer), f"{package}: {name} differs from a normal build's"


@pytest.mark.parametrize("package", ["llama", "qwen3_moe", "deepseek_v3", "gemma3"])
def test_initialized_weights_follow_the_models_init(package: str) -> None:
    """Deterministic entries (norms, zero biases, persistent buffers) equal a normal build's; random ones have
    the init's spread (they are drawn per shard, so not the same numbers)."""
    model = materialize(_built(package, device="meta"))
    reference = _built(package)
    params = dict(model.named_parameters())
    std = reference.config.initializer_range
    for name, param in reference.named_parameters():
        if bool((param == param.flatten()[0]).all()):
            assert torch.equal(params[name], param), f"{name}: deterministic init differs"
        elif param.numel() > 256:
            assert abs(params[name].std().item() - std) < 0.25 * std, f"{name}: std {params[name].std().item()}"
    for name, buffer in reference.named_buffers():
        assert torch.equal(dict(model.named_buffers())[name], buffer), name


def test_tied_embeddings_stay_tied() -> None:
    declaration = parity_declaration("llama")
    config = declaration.config(tie_word_embeddings=True)
    model = materialize(build_model(config, architecture=declaration.causal_lm, device="meta"))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert local_parameter_bytes(model) == sum(p.numel() * 4 for p in model.parameters())  # counted once


def test_a_buffer_the_models_init_does_not_recompute_is_refused_by_name() -> None:
    model = _built("llama", device="meta")
    with torch.device("meta"):
        model.model.register_buffer("position_table", torch.arange(8.0), persistent=False)
    with pytest.raises(
        UninitializedBufferError,
        match=r"LlamaForCausalLM's _init_weights does not recompute the buffer\(s\) model\.position_table",
    ):
        materialize(model)


def test_buffers_only_then_a_checkpoint_gives_the_checkpoints_model(tmp_path: Path) -> None:
    """Without a process group every placement is whole: the sharded loader loads as load_checkpoint does."""
    source = _built("qwen3_moe")
    source.save_pretrained(tmp_path, max_shard_size="100KB")
    model = materialize(_built("qwen3_moe", device="meta"), weights=False)
    load_sharded_checkpoint(model, tmp_path)
    for name, tensor in source.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
