"""DeepSeek-V4: the generated modeling matches upstream transformers, and hub checkpoints load into it.

The tiny config has three layers that between them hold every structure of V4: attention types
heavily-compressed, heavily-compressed, compressed-sparse (the HCA compressor in layers 0-1; the CSA
compressor and the lightning indexer in layer 2, compress rates 4 and 2 so that the 11-token batch closes
windows) and MoE layers hash, hash, top-k (both routers). Sizes are pairwise distinct: 7 experts, 4 per
token, moe_intermediate_size 28 (gate_up_proj [7, 56, 48]), 3 hyper-connection streams (fn [15, 144]).
``swiglu_limit`` is 0.1, so the clamp of the experts' and shared experts' SwiGLU cuts real values and a
kernel that skips it shows; ``hc_eps`` 2e-3 and 3 Sinkhorn iterations keep the mHC's epsilon and
iteration count visible (20 iterations converge), and ``index_topk`` 3 of the 5 compressed entries makes
the indexer's scores choose (with 6, every entry is kept whatever the scores).

Upstream initialises the hash table ``tid2eid`` and the routers' correction bias to zeros (the real
values come from a checkpoint), so in the suite every hash-routed token picks expert 0 four times and the
bias is neutral; the tests below give both random values first (:func:`random_routing_pair`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from transformers import DeepseekV4Config, PreTrainedModel

from modelgraft.models.checkpoint import load_checkpoint
from modelgraft.models.converters import ConversionError, converter_for
from modelgraft.models.deepseek_v4.checkpoint import hub_key, hub_state_dict, model_key
from modelgraft.models.loader import build_model, get_model_class
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels import eager, indexers
from modelgraft.models.testing import build_pair, causal_lm_batch, seed_everything
from modelgraft.models.testing.dense_suite import reference_kernels_bound
from modelgraft.models.testing.moe_suite import MoeModel, MoeParitySuite, _write_sharded
from modelgraft.models.testing.parity import (
    ModelPair,
    assert_step_parity,
    eager_slots_on_one_thread,
    run_step,
    tolerance_for,
)
from modelgraft.models.testing.reference import reference_kernel

#: The slots V4's own snippets guard, besides the recipe's.
V4_SLOTS = (
    "hyper_connection",
    "sinkhorn",
    "hyper_connection_post",
    "hyper_head",
    "hash_router",
    "correction_bias_router",
    "lightning_indexer",
)

DEEPSEEK_V4 = MoeModel(
    model_type="deepseek_v4",
    config_class=DeepseekV4Config,
    causal_lm="DeepseekV4ForCausalLM",
    sequence_classification=None,
    derived_sizes=True,
    sizes={"hc_mult": 3, "hc_eps": 2e-3, "hc_sinkhorn_iters": 3, "index_topk": 3, "swiglu_limit": 0.1},
    expert_projections=("w1", "w3", "w2"),
    num_experts_attr="n_routed_experts",
    guarded=("rms_norm", "causal_lm_loss", "moe_experts", "load_balancing_loss", *V4_SLOTS),
)


class TestDeepseekV4Parity(MoeParitySuite):
    model = DEEPSEEK_V4


@pytest.fixture(autouse=True)
def _eager_slots_one_thread():
    with eager_slots_on_one_thread():
        yield


@torch.no_grad()
def randomize_routing_buffers(model: PreTrainedModel, *, seed: int = 0) -> None:
    """Random rows of every hash table ``tid2eid`` (K distinct experts per token) and random correction biases."""
    generator = torch.Generator().manual_seed(seed)
    for name, buffer in model.named_buffers():
        if name.endswith(".tid2eid"):
            vocab, top_k = buffer.shape
            experts = model.config.n_routed_experts
            rows = torch.stack([torch.randperm(experts, generator=generator)[:top_k] for _ in range(vocab)])
            buffer.copy_(rows)
        elif name.endswith(".e_score_correction_bias"):
            buffer.copy_(torch.randn(buffer.shape, generator=generator) * 0.5)


def random_routing_pair(dtype: torch.dtype = torch.float32, backend: str = "gpu") -> ModelPair:
    """Upstream and generated models with the same weights and the same random routing buffers."""
    config = DEEPSEEK_V4.config()
    pair = build_pair(
        config,
        get_model_class("deepseek_v4", DEEPSEEK_V4.causal_lm, use_hf=True),
        get_model_class("deepseek_v4", DEEPSEEK_V4.causal_lm, backend),
        dtype=dtype,
    )
    randomize_routing_buffers(pair.upstream)
    pair.generated.load_state_dict(pair.upstream.state_dict(), strict=True)
    return pair


def _router_batch(config: DeepseekV4Config) -> dict:
    batch = causal_lm_batch(config)
    batch["output_router_logits"] = True
    return batch


def test_tiny_config_has_every_attention_and_routing_kind() -> None:
    model = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm)
    attention = [type(layer.self_attn.compressor).__name__ for layer in model.model.layers]
    routers = [type(layer.mlp.gate).__name__ for layer in model.model.layers]
    assert attention == ["DeepseekV4HCACompressor", "DeepseekV4HCACompressor", "DeepseekV4CSACompressor"]
    assert routers == ["DeepseekV4HashRouter", "DeepseekV4HashRouter", "DeepseekV4TopKRouter"]
    assert model.model.layers[0].attn_hc.fn.shape == (15, 144)


def test_random_hash_tables_route_tokens_to_distinct_experts() -> None:
    pair = random_routing_pair()
    table = pair.generated.model.layers[0].mlp.gate.tid2eid
    assert all(len(set(row.tolist())) == table.shape[1] for row in table)
    assert not torch.equal(table, pair.generated.model.layers[1].mlp.gate.tid2eid)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_eager_step_matches_upstream_with_random_routing_buffers(dtype: torch.dtype) -> None:
    """Logits and aux loss equal, loss and every gradient within the eager tolerance of ``dtype``."""
    pair = random_routing_pair(dtype)
    batch = _router_batch(pair.upstream.config)
    expected, actual = run_step(pair.upstream, batch), run_step(pair.generated, batch)
    assert_step_parity(expected, actual, tolerance=tolerance_for(dtype, kernels=False), logits="equal")


@pytest.mark.parametrize("slot", ["hash_router", "correction_bias_router", "moe_experts"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_routing_reference_kernel_matches_upstream_with_random_routing_buffers(slot: str, dtype: torch.dtype) -> None:
    """The routing kernels see the real table and bias: a kernel ignoring input_ids or the bias shows here."""
    pair = random_routing_pair(dtype)
    batch = _router_batch(pair.upstream.config)
    expected = run_step(pair.upstream, batch)
    calls: Counter[str] = Counter()
    kernel = reference_kernel(slot)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[slot] += 1
        return kernel(*args, **kwargs)

    with bound_ops(OpsConfig()):
        SLOTS[slot].bind(counted, name=f"reference.{slot}")
        actual = run_step(pair.generated, batch)
    assert calls[slot] > 0
    assert_step_parity(expected, actual, tolerance=tolerance_for(dtype, kernels=False), logits="close")


def test_each_v4_slot_is_called_once_per_use() -> None:
    """Per forward: a mapping and a Sinkhorn per hyper-connection (two per layer), two placements per layer,
    one head, one router per layer by its kind, one indexer (the CSA layer)."""
    config = DEEPSEEK_V4.config()
    model = build_model(config, architecture=DEEPSEEK_V4.causal_lm)
    calls: Counter[str] = Counter()
    with reference_kernels_bound(calls), torch.no_grad():
        model(**causal_lm_batch(config))
    layers = config.num_hidden_layers
    assert calls["hyper_connection"] == calls["sinkhorn"] == calls["hyper_connection_post"] == 2 * layers
    assert calls["hyper_head"] == 1
    assert calls["hash_router"] == config.mlp_layer_types.count("hash_moe") == 2
    assert calls["correction_bias_router"] == config.mlp_layer_types.count("moe") == 1
    assert calls["lightning_indexer"] == config.layer_types.count("compressed_sparse_attention") == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_shared_keys_indexer_leaves_a_training_step_bit_for_bit_unchanged(
    dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forward and backward of the generated model with the lightning_indexer slot bound to ``shared_keys``:
    logits, loss, aux loss and every gradient equal to the eager slots'."""
    pair = random_routing_pair(dtype)
    batch = _router_batch(pair.generated.config)
    expected = run_step(pair.generated, batch)
    calls: Counter[str] = Counter()
    scorer = indexers.lightning_indexer

    def counted(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls["lightning_indexer"] += 1
        return scorer(*args, **kwargs)

    monkeypatch.setattr(indexers, "lightning_indexer", counted)
    with bound_ops(OpsConfig({"lightning_indexer": "shared_keys"})):
        actual = run_step(pair.generated, batch)
    assert calls["lightning_indexer"] == pair.generated.config.layer_types.count("compressed_sparse_attention") == 1
    assert torch.equal(actual.logits, expected.logits)
    assert torch.equal(actual.loss, expected.loss) and torch.equal(actual.aux_loss, expected.aux_loss)
    for name, grad in expected.grads.items():
        assert (grad is None) == (actual.grads[name] is None), name
        assert grad is None or torch.equal(actual.grads[name], grad), name


def test_the_swiglu_clamp_of_the_tiny_config_changes_the_logits() -> None:
    """swiglu_limit 0.1 cuts real values, so a moe_experts kernel that skips the clamp fails the suite."""
    batch = causal_lm_batch(DEEPSEEK_V4.config())
    del batch["labels"]
    logits = []
    for limit in (0.1, 1e4):
        seed_everything(0)
        model = get_model_class("deepseek_v4", DEEPSEEK_V4.causal_lm, use_hf=True)(
            DEEPSEEK_V4.config(swiglu_limit=limit)
        )
        with torch.no_grad():
            logits.append(model.eval()(**batch).logits)
    assert not torch.allclose(logits[0], logits[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_unweighted_rms_norm_reference_casts_the_scale_as_deepseek_v4_does(dtype: torch.dtype) -> None:
    """cast_last=False without a weight: the fp32 scale is cast, then multiplies the input in its dtype."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4UnweightedRMSNorm

    x = torch.randn(4, 5, 48, generator=torch.Generator().manual_seed(0)).to(dtype)
    expected = DeepseekV4UnweightedRMSNorm(eps=3e-5)(x)
    assert torch.equal(eager.rms_norm(x, None, 3e-5, cast_last=False), expected)
    if dtype == torch.bfloat16:  # nanochat's formulation (cast last) rounds differently
        assert not torch.equal(eager.rms_norm(x, None, 3e-5, cast_last=True), expected)


def test_sinkhorn_ends_on_unit_columns_and_nears_unit_rows() -> None:
    """The last step normalises columns; the rows approach 1 as the rounds alternate (doubly stochastic)."""
    logits = torch.randn(2, 5, 3, 3, generator=torch.Generator().manual_seed(0))
    comb = eager.sinkhorn(logits, 20, 1e-6)
    torch.testing.assert_close(comb.sum(dim=-2), torch.ones(2, 5, 3), rtol=0, atol=1e-5)
    torch.testing.assert_close(comb.sum(dim=-1), torch.ones(2, 5, 3), rtol=0, atol=1e-3)
    assert (comb > 0).all()


#: Kernels that get one argument or step of a V4 slot wrong, by the slip they make: the tiny config must expose each.
MUTANTS = {
    "mapping with eps and norm_eps swapped": (
        "hyper_connection",
        lambda *a, eps, norm_eps, **k: eager.hyper_connection(*a, eps=norm_eps, norm_eps=eps, **k),
    ),
    "one Sinkhorn round short": ("sinkhorn", lambda logits, iters, eps: eager.sinkhorn(logits, iters - 1, eps)),
    "Sinkhorn without eps": ("sinkhorn", lambda logits, iters, eps: eager.sinkhorn(logits, iters, 0.0)),
    "comb not transposed": (
        "hyper_connection_post",
        lambda out, streams, post, comb: eager.hyper_connection_post(out, streams, post, comb.transpose(-1, -2)),
    ),
    "head with eps and norm_eps swapped": (
        "hyper_head",
        lambda *a, eps, norm_eps: eager.hyper_head(*a, eps=norm_eps, norm_eps=eps),
    ),
    "hash routing scored with sigmoid": (
        "hash_router",
        lambda *a, scoring_func, **k: eager.hash_router(*a, scoring_func="sigmoid", **k),
    ),
    "top-k routing without the correction bias": (
        "correction_bias_router",
        lambda hidden, weight, bias, **k: eager.correction_bias_router(hidden, weight, torch.zeros_like(bias), **k),
    ),
    "index scores negated": ("lightning_indexer", lambda *a, **k: -eager.lightning_indexer(*a, **k)),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_kernel_that_gets_one_argument_wrong_changes_the_logits(mutant: str) -> None:
    slot, kernel = MUTANTS[mutant]
    pair = random_routing_pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    with torch.no_grad():
        expected = pair.upstream(**batch).logits
        with bound_ops(OpsConfig()):
            SLOTS[slot].bind(kernel, name=mutant)
            actual = pair.generated(**batch).logits
    tolerance = tolerance_for(torch.float32, kernels=False)
    assert not torch.allclose(actual, expected, rtol=tolerance.rtol, atol=tolerance.atol)


# -- checkpoints in the hub's layout --------------------------------------------------------------------
def _upstream_with_random_routing() -> PreTrainedModel:
    config = DEEPSEEK_V4.config()
    seed_everything(0)
    upstream = get_model_class("deepseek_v4", DEEPSEEK_V4.causal_lm, use_hf=True)(config).float().eval()
    randomize_routing_buffers(upstream)
    return upstream


def test_hub_names_round_trip_for_every_parameter_and_buffer() -> None:
    keys = list(_upstream_with_random_routing().state_dict())
    assert [model_key(hub_key(key)) for key in keys] == keys
    assert (
        hub_key("model.layers.2.self_attn.compressor.indexer.q_b_proj.weight") == "layers.2.attn.indexer.wq_b.weight"
    )
    assert hub_key("model.layers.0.self_attn.compressor.kv_norm.weight") == "layers.0.attn.compressor.norm.weight"
    assert hub_key("model.layers.0.self_attn.kv_norm.weight") == "layers.0.attn.kv_norm.weight"


@pytest.mark.parametrize("backend", DEEPSEEK_V4.backends)
def test_sharded_hub_checkpoint_loads_to_upstream_logits(backend: str, tmp_path: Path) -> None:
    """Hub-layout shards + index -> load_checkpoint (renames, fuses w1/w3/w2) -> logits equal upstream's."""
    upstream = _upstream_with_random_routing()
    _write_sharded(hub_state_dict(upstream.state_dict()), tmp_path)
    seed_everything(1)
    generated = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm, backend=backend).float().eval()
    load_checkpoint(generated, tmp_path)
    batch = causal_lm_batch(upstream.config)
    del batch["labels"]
    with torch.no_grad():
        assert torch.equal(generated(**batch).logits, upstream(**batch).logits)


def test_a_loaded_model_exports_a_hub_checkpoint_upstream_loads_to_the_same_logits(tmp_path: Path) -> None:
    """Round trip: hub shards -> load_checkpoint -> hub_state_dict export (sharded) -> upstream from_pretrained."""
    upstream = _upstream_with_random_routing()
    source, export = tmp_path / "hub", tmp_path / "export"
    source.mkdir()
    export.mkdir()
    _write_sharded(hub_state_dict(upstream.state_dict()), source)
    seed_everything(1)
    generated = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm).float().eval()
    load_checkpoint(generated, source)

    generated.config.save_pretrained(export)
    _write_sharded(hub_state_dict(generated.state_dict()), export)
    cls = get_model_class("deepseek_v4", DEEPSEEK_V4.causal_lm, use_hf=True)
    reloaded = cls.from_pretrained(export, experts_implementation="eager").float().eval()
    batch = causal_lm_batch(upstream.config)
    del batch["labels"]
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, upstream(**batch).logits)
    for name, tensor in upstream.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], tensor), name


def test_hub_checkpoint_loads_as_transformers_own_conversion_does(tmp_path: Path) -> None:
    """The real layout: upstream's from_pretrained ("deepseek_v4" conversion mapping) reads the same file the same way."""
    upstream = _upstream_with_random_routing()
    upstream.config.save_pretrained(tmp_path)
    save_file(
        {k: v.contiguous() for k, v in hub_state_dict(upstream.state_dict()).items()},
        str(tmp_path / "model.safetensors"),
    )
    cls = get_model_class("deepseek_v4", DEEPSEEK_V4.causal_lm, use_hf=True)
    by_transformers = cls.from_pretrained(tmp_path, experts_implementation="eager").state_dict()
    seed_everything(1)
    ours = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm)
    load_checkpoint(ours, tmp_path / "model.safetensors")
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, by_transformers[name]), f"{name} differs from transformers' own loading"
        assert torch.equal(tensor, upstream.state_dict()[name]), f"{name} differs from the source model"


def test_what_upstreams_save_pretrained_writes_loads_to_upstream_logits(tmp_path: Path) -> None:
    """upstream save_pretrained (its own partial reverse renames, per-expert keys) -> load_checkpoint."""
    upstream = _upstream_with_random_routing()
    upstream.save_pretrained(tmp_path)
    seed_everything(1)
    generated = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm).float().eval()
    load_checkpoint(generated, tmp_path)
    batch = causal_lm_batch(upstream.config)
    del batch["labels"]
    with torch.no_grad():
        assert torch.equal(generated(**batch).logits, upstream(**batch).logits)


def test_multi_token_prediction_keys_are_dropped(tmp_path: Path) -> None:
    upstream = _upstream_with_random_routing()
    tensors = hub_state_dict(upstream.state_dict())
    tensors["mtp.0.emb.weight"] = torch.zeros(3, 4)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    ours = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm)
    load_checkpoint(ours, tmp_path / "model.safetensors")


def test_quantized_hub_weights_are_refused_by_name() -> None:
    converter = converter_for(DEEPSEEK_V4.config())
    with pytest.raises(ConversionError, match=r"layers\.0\.attn\.wq_a\.scale.*quantized"):
        converter.convert("layers.0.attn.wq_a.scale", torch.ones(2, 2))
    with pytest.raises(ConversionError, match=r"layers\.0\.attn\.wq_a\.weight.*float8"):
        converter.convert("layers.0.attn.wq_a.weight", torch.zeros(2, 2, dtype=torch.float8_e4m3fn))
    # The mHC's learned scales share the suffix and are parameters, not quantization scales.
    assert converter.convert("layers.0.hc_attn_scale", torch.ones(3))[0][0] == "model.layers.0.attn_hc.scale"
    assert not converter.can_handle("model.layers.0.ffn_hc.scale")


def test_a_missing_expert_is_named(tmp_path: Path) -> None:
    tensors = hub_state_dict(_upstream_with_random_routing().state_dict())
    del tensors["layers.1.ffn.experts.3.w2.weight"]
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp_path / "model.safetensors"))
    ours = build_model(DEEPSEEK_V4.config(), architecture=DEEPSEEK_V4.causal_lm)
    with pytest.raises(ConversionError, match=r"model\.layers\.1\.mlp\.experts"):
        load_checkpoint(ours, tmp_path / "model.safetensors")
