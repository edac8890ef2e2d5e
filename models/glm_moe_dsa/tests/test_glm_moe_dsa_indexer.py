"""GLM-MoE-DSA's DSA indexer behind the dsa_indexer slot: the reference kernel selects exactly upstream's keys.

The slot's output is a top-k, so a kernel is held to upstream bit for bit here: a rounding difference in
the scores can swap a selected key, and the attention then sees other keys. The reference kernel
(``modelgraft.models.ops.kernels.eager.dsa_indexer``) is compared with upstream's ``GlmMoeDsaIndexer`` alone (with the
additive mask the attention hands it and without one, in fp32 and in bf16 with the fp32 gate projection
transformers keeps), and inside the model: one call per layer that runs its own indexer, logits equal to
upstream's, also with a cache (prefill, then a decode step that scores the cached keys). The ``shared_keys``
kernel (``modelgraft.models.ops.kernels.indexers``) must leave a whole training step of the model unchanged.

Positive scale factors (``softmax_scale``, ``weights_scaling``) do not change which keys win, so no test can
see a kernel drop them; the kernels below that change the selection must each change the logits.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from transformers import DynamicCache
from transformers.models.glm_moe_dsa import modeling_glm_moe_dsa as upstream_modeling

from modelgraft.models.glm_moe_dsa.tests.test_glm_moe_dsa_parity import GLM_MOE_DSA, random_bias_pair
from modelgraft.models.ops import SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels import eager, indexers
from modelgraft.models.registry import MODELING_REGISTRY
from modelgraft.models.testing import causal_lm_batch
from modelgraft.models.testing.parity import (
    eager_slots_on_one_thread,
    randomize_constant_parameters,
    run_step,
    tolerance_for,
)

DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["fp32", "bf16"]


@pytest.fixture(autouse=True)
def _eager_slots_one_thread():
    with eager_slots_on_one_thread():
        yield


def _counted(calls: Counter[str], kernel: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        calls["dsa_indexer"] += 1
        return kernel(*args, **kwargs)

    return call


def _indexer_pair(dtype: torch.dtype, backend: str = "gpu") -> tuple[torch.nn.Module, torch.nn.Module]:
    """Upstream's and the generated indexer of layer 0 with the same random weights, as a model holds them in
    ``dtype``: the gate projection ``weights_proj`` stays fp32 (``_keep_in_fp32_modules``)."""
    config = GLM_MOE_DSA.config()
    generated_module = importlib.import_module(MODELING_REGISTRY.module_path("glm_moe_dsa", backend))
    torch.manual_seed(0)
    upstream = upstream_modeling.GlmMoeDsaIndexer(config, layer_idx=0)
    randomize_constant_parameters(upstream, seed=0)  # the key norm's weight and bias
    generated = generated_module.GlmMoeDsaIndexer(config, layer_idx=0)
    generated.load_state_dict(upstream.state_dict(), strict=True)
    for indexer in (upstream, generated):
        indexer.to(dtype).weights_proj.float()
    return upstream, generated


def _indexer_inputs(dtype: torch.dtype, *, mask: str = "additive") -> dict[str, Any]:
    """What the attention hands its indexer for the suite's batch: its causal mask ``[B, S, T]`` over the padded
    keys, ``"additive"`` (0 or the dtype's minimum) or ``"boolean"`` (True where a key may be attended), as the
    sdpa and eager masks come."""
    config = GLM_MOE_DSA.config()
    batch = causal_lm_batch(config)
    batch_size, seq_len = batch["input_ids"].shape
    generator = torch.Generator().manual_seed(1)
    hidden_states = torch.randn(batch_size, seq_len, config.hidden_size, generator=generator).to(dtype)
    q_resid = torch.randn(batch_size, seq_len, config.q_lora_rank, generator=generator).to(dtype)
    position_ids = torch.arange(seq_len).unsqueeze(0).expand(batch_size, -1)
    rotary = upstream_modeling.GlmMoeDsaRotaryEmbedding(config)
    position_embeddings = rotary(hidden_states, position_ids)
    keys = torch.arange(seq_len)
    allowed = (keys[None, None, :] <= position_ids[:, :, None]) & batch["attention_mask"].bool()[:, None, :]
    attention_mask = (
        allowed
        if mask == "boolean"
        else torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    )
    return {
        "hidden_states": hidden_states,
        "q_resid": q_resid,
        "position_embeddings": position_embeddings,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
    }


@pytest.mark.parametrize("mask", ["additive", "boolean"], ids=["additive-mask", "boolean-mask"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_reference_kernel_selects_upstreams_keys(dtype: torch.dtype, mask: str) -> None:
    upstream, generated = _indexer_pair(dtype)
    inputs = _indexer_inputs(dtype, mask=mask)
    expected = upstream(**inputs)
    calls: Counter[str] = Counter()
    SLOTS["dsa_indexer"].bind(_counted(calls, eager.dsa_indexer), name="reference.dsa_indexer")
    actual = generated(**inputs)
    assert calls["dsa_indexer"] == 1
    assert actual.dtype == torch.int32 and actual.shape == expected.shape == (4, 11, GLM_MOE_DSA.config().index_topk)
    assert torch.equal(actual, expected)


def test_the_unbound_indexer_is_upstreams_code() -> None:
    upstream, generated = _indexer_pair(torch.float32)
    inputs = _indexer_inputs(torch.float32)
    assert not SLOTS["dsa_indexer"].use_non_eager_impl
    assert torch.equal(generated(**inputs), upstream(**inputs))


def test_reference_kernel_keeps_every_key_when_there_are_fewer_than_index_topk() -> None:
    """``min(index_topk, T)`` keys: with 4 keys and index_topk 6, every key is returned once per query."""
    upstream, generated = _indexer_pair(torch.float32)
    inputs = _indexer_inputs(torch.float32, mask="boolean")
    short = {
        "hidden_states": inputs["hidden_states"][:, :4],
        "q_resid": inputs["q_resid"][:, :4],
        "position_embeddings": tuple(t[:, :4] for t in inputs["position_embeddings"]),
        "attention_mask": torch.ones(4, 4, 4, dtype=torch.bool),
        "position_ids": inputs["position_ids"][:, :4],
    }
    SLOTS["dsa_indexer"].bind(eager.dsa_indexer, name="reference.dsa_indexer")
    actual = generated(**short)
    assert actual.shape == (4, 4, 4)
    assert torch.equal(actual.sort(dim=-1).values, torch.arange(4, dtype=torch.int32).expand(4, 4, 4))
    assert torch.equal(actual, upstream(**short))


@pytest.mark.parametrize("backend", GLM_MOE_DSA.backends)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_reference_kernel_in_the_model_gives_upstreams_logits(backend: str, dtype: torch.dtype) -> None:
    """Bit for bit, one call per layer with its own indexer (the shared layer reuses layer 0's selection)."""
    pair = random_bias_pair(dtype, backend)
    config = pair.upstream.config
    batch = causal_lm_batch(config)
    del batch["labels"]
    calls: Counter[str] = Counter()
    with torch.no_grad():
        expected = pair.upstream(**batch).logits
        SLOTS["dsa_indexer"].bind(_counted(calls, eager.dsa_indexer), name="reference.dsa_indexer")
        actual = pair.generated(**batch).logits
    assert calls["dsa_indexer"] == config.indexer_types.count("full") == 2
    assert torch.equal(actual, expected)


def test_reference_kernel_scores_the_cached_keys_of_a_decode_step() -> None:
    """Prefill 9 tokens, then decode 2: the indexer scores each new query against all cached keys (T > S)."""
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    input_ids, attention_mask = batch["input_ids"][:3], batch["attention_mask"][:3]  # unpadded rows
    logits = {}
    for side, model in (("upstream", pair.upstream), ("generated", pair.generated)):
        if side == "generated":
            SLOTS["dsa_indexer"].bind(eager.dsa_indexer, name="reference.dsa_indexer")
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            prefill = model(input_ids=input_ids[:, :9], attention_mask=attention_mask[:, :9], cache=cache)
            step = model(input_ids=input_ids[:, 9:], attention_mask=attention_mask, cache=prefill.cache)
        logits[side] = torch.cat([prefill.logits, step.logits], dim=1)
    assert torch.equal(logits["generated"], logits["upstream"])


@pytest.mark.parametrize("backend", GLM_MOE_DSA.backends)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_shared_keys_kernel_leaves_a_training_step_bit_for_bit_unchanged(
    backend: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forward and backward of the generated model: logits, loss and every gradient equal to the eager slots'."""
    pair = random_bias_pair(dtype, backend)
    batch = causal_lm_batch(pair.generated.config)
    expected = run_step(pair.generated, batch)
    calls: Counter[str] = Counter()
    monkeypatch.setattr(indexers, "dsa_indexer", _counted(calls, indexers.dsa_indexer))
    with bound_ops(OpsConfig({"dsa_indexer": "shared_keys"})):
        actual = run_step(pair.generated, batch)
    assert calls["dsa_indexer"] == pair.generated.config.indexer_types.count("full") == 2
    assert torch.equal(actual.logits, expected.logits)
    assert torch.equal(actual.loss, expected.loss)
    for name, grad in expected.grads.items():
        assert (grad is None) == (actual.grads[name] is None), name
        assert grad is None or torch.equal(actual.grads[name], grad), name


def _lowest_scores(*args: Any, **kwargs: Any) -> torch.Tensor:
    q, *rest = args
    return eager.dsa_indexer(-q, *rest, **kwargs)


def _gates_ignored(q, k, hidden_states, weights_proj, *args: Any, **kwargs: Any) -> torch.Tensor:
    return eager.dsa_indexer(q, k, hidden_states, torch.ones_like(weights_proj), *args, **kwargs)


def _one_key_fewer(*args: Any, index_topk: int, **kwargs: Any) -> torch.Tensor:
    return eager.dsa_indexer(*args, index_topk=index_topk - 1, **kwargs)


#: Kernels that select other keys than upstream, by the slip they make: each must change the logits.
MUTANTS = {
    "queries negated": _lowest_scores,
    "head gates ignored": _gates_ignored,
    "one key fewer": _one_key_fewer,
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_kernel_that_selects_other_keys_changes_the_logits(mutant: str) -> None:
    pair = random_bias_pair()
    batch = causal_lm_batch(pair.upstream.config)
    del batch["labels"]
    with torch.no_grad():
        expected = pair.upstream(**batch).logits
        SLOTS["dsa_indexer"].bind(MUTANTS[mutant], name=mutant)
        actual = pair.generated(**batch).logits
    tolerance = tolerance_for(torch.float32, kernels=False)
    assert not torch.allclose(actual, expected, rtol=tolerance.rtol, atol=tolerance.atol)
