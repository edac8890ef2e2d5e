"""What each rank runs in the distributed tests: a one-process reference, then the same step sharded.

Every scenario is a module-level function (the spawn start method imports it by name) that builds the
reference in-process on every rank from the same seed, runs the parallel version, and asserts; an
assertion on any rank fails the test with that rank's traceback (``modelgraft.models.distributed.launch.spawn``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from transformers import (
    DeepseekV3Config,
    DeepseekV4Config,
    GlmMoeDsaConfig,
    GptOssConfig,
    LlamaConfig,
    PreTrainedConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)
from transformers.masking_utils import create_causal_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from modelgraft.models.distributed import (
    ParallelState,
    apply_expert_parallel,
    apply_fsdp,
    average_gradients,
    expert_parallel,
    full_state,
    gather_sequence,
    parallel_ops,
    register_ulysses,
    shard_sequence,
)
from modelgraft.models.distributed.losses import load_balancing_loss
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bind_ops, bound_ops, unbind_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing import causal_lm_batch, seed_everything, tiny_config
from modelgraft.models.testing.tiny import tiny_config_for

GROUPED = OpsConfig({"moe_experts": "grouped"})
#: fp32 collectives and reassociated sums (grouped experts, split reductions): kernel-level tolerance.
RTOL, ATOL = 1e-4, 1e-5

#: The qwen3_moe parity sizes with 8 experts, so the experts split over 2 and 4 ranks.
MOE_SIZES: dict[str, Any] = {
    "num_experts": 8,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 28,
    "mlp_only_layers": [1],
    "norm_topk_prob": True,
    "router_aux_loss_coef": 0.25,
    "experts_implementation": "eager",
}
MODELS: dict[str, tuple[type[PreTrainedConfig], str, dict[str, Any]]] = {
    "llama": (LlamaConfig, "LlamaForCausalLM", {}),
    "qwen3": (Qwen3Config, "Qwen3ForCausalLM", {}),
    "qwen3_moe": (Qwen3MoeConfig, "Qwen3MoeForCausalLM", MOE_SIZES),
    # Ulysses on the zoo's other attention forms: sinks (gpt_oss), MLA's unequal widths (deepseek_v3), and
    # the two it refuses (glm_moe_dsa's indexer, deepseek_v4's compressed keys).
    "gpt_oss": (GptOssConfig, "GptOssForCausalLM", {"experts_implementation": "eager"}),
    "deepseek_v3": (DeepseekV3Config, "DeepseekV3ForCausalLM", {"experts_implementation": "eager"}),
    "glm_moe_dsa": (GlmMoeDsaConfig, "GlmMoeDsaForCausalLM", {"experts_implementation": "eager"}),
    "deepseek_v4": (DeepseekV4Config, "DeepseekV4ForCausalLM", {"experts_implementation": "eager"}),
}


#: Models whose tiny config must be derived from their config class (latent attention's head widths).
DERIVED_SIZES = frozenset({"deepseek_v3", "glm_moe_dsa", "deepseek_v4"})


def config_of(name: str, **overrides: Any) -> PreTrainedConfig:
    config_cls, _, sizes = MODELS[name]
    build = tiny_config_for if name in DERIVED_SIZES else tiny_config
    return build(config_cls, **{**sizes, "use_cache": False, **overrides})


def fresh_model(name: str, config: PreTrainedConfig) -> torch.nn.Module:
    seed_everything(0)
    return build_model(config, architecture=MODELS[name][1])


def assert_close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def assert_same_grads(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor | None]) -> None:
    """``expected`` None: one process gives that parameter no gradient (a DSA indexer's: its top-k output is
    integer), so the parallel run must give it none either (``full_state`` reads None as zeros)."""
    assert actual.keys() == expected.keys()
    for name, grad in expected.items():
        if grad is None:
            assert not actual[name].any(), f"{name}: no gradient in one process, a nonzero one in parallel"
            continue
        assert grad.abs().sum() > 0 or "experts" in name, f"reference gradient of {name} is zero: a vacuous check"
        assert_close(actual[name], grad, f"gradient of {name}")


@contextmanager
def ops(config: OpsConfig) -> Iterator[None]:
    with bound_ops(config):
        yield


def reference_step(name: str, config: PreTrainedConfig, batch: dict[str, Any], base: OpsConfig, **kwargs: Any):
    """One process, whole batch: (outputs, gradients by name) with ``base`` bound."""
    model = fresh_model(name, config)
    with ops(base):
        out = model(**batch, **kwargs)
        out.loss.backward()
    return model, out, {n: None if p.grad is None else p.grad.detach().clone() for n, p in model.named_parameters()}


def rows_of(batch: dict[str, torch.Tensor], part: int, parts: int) -> dict[str, torch.Tensor]:
    size = batch["input_ids"].shape[0] // parts
    return {key: value[part * size : (part + 1) * size] for key, value in batch.items()}


# -- mesh -------------------------------------------------------------------------------------------------
def mesh_layout() -> None:
    state = ParallelState.build(sp=2, ep=2)
    world = state.world_size
    assert (state.dp, state.sp, state.ep, state.ep_replicate) == (world // 2, 2, 2, world // 2)
    assert state.mesh.mesh_dim_names == ("dp", "sp")
    assert state.sp_rank == state.rank % 2 and state.dp_rank == state.rank // 2
    assert state.ep_rank == state.rank % 2
    sums = {}
    for label, group in (("sp", state.sp_group), ("dp", state.dp_group), ("data", state.data_group)):
        value = torch.tensor([float(state.rank)])
        torch.distributed.all_reduce(value, group=group)
        sums[label] = value.item()
    assert sums["data"] == sum(range(world))
    assert sums["sp"] == sum(r for r in range(world) if r // 2 == state.rank // 2)


# -- FSDP2 ------------------------------------------------------------------------------------------------
def fsdp_matches_one_process(name: str) -> None:
    state = ParallelState.build()
    config = config_of(name)
    batch = causal_lm_batch(config)
    kwargs = {"output_router_logits": True} if name == "qwen3_moe" else {}

    reference, ref_out, ref_grads = reference_step(name, config, batch, OpsConfig(), **kwargs)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    ref_opt.step()
    with torch.no_grad():
        ref_second = reference(**batch, **kwargs).loss

    model = apply_fsdp(fresh_model(name, config), state)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    local = rows_of(batch, state.rank, state.world_size)
    bind_ops(parallel_ops(state))
    out = model(**local, **kwargs)
    assert_close(out.loss, ref_out.loss, "loss")
    if name == "qwen3_moe":
        assert_close(out.aux_loss, ref_out.aux_loss, "aux loss")
    out.loss.backward()
    assert_same_grads(full_state(model, state, grads=True), ref_grads)
    optimizer.step()
    params = full_state(model, state)
    for param_name, param in reference.named_parameters():
        assert_close(params[param_name], param.detach(), f"{param_name} after one AdamW step")
    with torch.no_grad():
        assert_close(model(**local, **kwargs).loss, ref_second, "loss after one step")
    unbind_ops()


# -- expert parallelism -----------------------------------------------------------------------------------
def _route_layer_to_first_experts(model: torch.nn.Module, layer: int, keep: int) -> None:
    """Layer ``layer`` sends every token to experts ``id % keep``: the ranks above hold idle experts."""

    def hook(module: torch.nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        logits, scores, indices = output
        return logits, scores, indices % keep

    model.model.layers[layer].mlp.gate.register_forward_hook(hook)


def kernel_with_idle_experts() -> None:
    """The ep_alltoall kernel alone, on routing where rank 0 sends nothing to rank 1's first expert,
    rank 1 receives nothing at all from rank 0, and the last expert gets no token from anyone."""
    state = ParallelState.build(ep=2)
    generator = torch.Generator().manual_seed(0)
    tokens, hidden, inter, experts = 5, 12, 7, 8
    x = torch.randn(2 * tokens, hidden, generator=generator, requires_grad=True)
    gate_up = torch.randn(experts, 2 * inter, hidden, generator=generator, requires_grad=True)
    down = torch.randn(experts, hidden, inter, generator=generator, requires_grad=True)
    index = torch.tensor(
        [
            [0, 1],
            [2, 3],
            [1, 0],
            [3, 2],
            [0, 2],  # rank 0's tokens: experts 0-3 only (rank 0's experts)
            [5, 0],
            [4, 6],
            [6, 1],
            [0, 5],
            [4, 2],
        ],  # rank 1's tokens: never expert 7
    )
    weights = torch.rand(2 * tokens, 2, generator=generator)
    from modelgraft.models.ops.kernels import grouped_experts

    expected = grouped_experts.moe_experts(x, index, weights, gate_up, down, "silu")
    (expected * torch.linspace(-1, 1, hidden)).sum().backward()
    ref = {"x": x.grad.clone(), "gate_up": gate_up.grad.clone(), "down": down.grad.clone()}

    rows = slice(state.rank * tokens, (state.rank + 1) * tokens)
    mine = slice(state.rank * experts // 2, (state.rank + 1) * experts // 2)
    local_x = x.detach()[rows].clone().requires_grad_()
    local_gate_up = gate_up.detach()[mine].clone().requires_grad_()
    local_down = down.detach()[mine].clone().requires_grad_()
    out = expert_parallel.moe_experts(
        local_x, index[rows], weights[rows], local_gate_up, local_down, "silu", group=state.ep_group
    )
    assert_close(out, expected.detach()[rows], "tokens through the experts")
    (out * torch.linspace(-1, 1, hidden)).sum().backward()
    assert_close(local_x.grad, ref["x"][rows], "input gradient")
    # Each local expert's gradient sums both ranks' tokens, unscaled: dividing it is the averaging step's job.
    assert_close(local_gate_up.grad, ref["gate_up"][mine], "gate_up gradient")
    assert_close(local_down.grad, ref["down"][mine], "down gradient")
    if state.rank == 1:
        assert torch.equal(local_gate_up.grad[3], torch.zeros_like(local_gate_up.grad[3])), "expert 7 saw no token"


def expert_parallel_matches_grouped(ep: int, idle_layer: bool) -> None:
    state = ParallelState.build(ep=ep)
    config = config_of("qwen3_moe")
    batch = causal_lm_batch(config, batch_size=4)
    kwargs = {"output_router_logits": True}

    reference = fresh_model("qwen3_moe", config)
    if idle_layer:
        _route_layer_to_first_experts(reference, 0, config.num_experts // ep)
    with ops(GROUPED):
        ref_out = reference(**batch, **kwargs)
        ref_out.loss.backward()
    ref_grads = {n: p.grad.detach().clone() for n, p in reference.named_parameters()}

    model = fresh_model("qwen3_moe", config)
    if idle_layer:
        _route_layer_to_first_experts(model, 0, config.num_experts // ep)
    shards = apply_expert_parallel(model, state)
    assert sorted(shards) == sorted(n for n in ref_grads if ".experts." in n)
    assert all(p.shape[0] == config.num_experts // ep for n, p in model.named_parameters() if n in shards)
    local = rows_of(batch, state.rank, state.world_size)
    bind_ops(parallel_ops(state, GROUPED))
    out = model(**local, **kwargs)
    per_rank = batch["input_ids"].shape[0] // state.world_size
    assert_close(out.logits, ref_out.logits[state.rank * per_rank : (state.rank + 1) * per_rank], "logits")
    assert_close(out.aux_loss, ref_out.aux_loss, "aux loss")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), ref_grads)
    unbind_ops()


# -- Ulysses sequence parallelism ---------------------------------------------------------------------------
def ulysses_matches_one_process(name: str, attention: str, base: OpsConfig | None = None) -> None:
    """``base``: kernels bound on both sides (the parallel side wraps them: ``parallel_ops(state, base)``)."""
    base = base or OpsConfig()
    state = ParallelState.build(sp=2)
    register_ulysses(state)
    config = config_of(name, attn_implementation=attention)
    batch = causal_lm_batch(config, seq_len=11)  # 11 positions: padded to 12 for sp=2
    reference, ref_out, ref_grads = reference_step(name, config, batch, base)

    model = fresh_model(name, config_of(name, attn_implementation=f"ulysses_{attention}"))
    bind_ops(parallel_ops(state, base))
    local = shard_sequence(batch, state, pad_token_id=config.pad_token_id)
    assert local["input_ids"].shape == (4, 6)
    out = model(**local)
    # Logits of real tokens: a padding query's are unspecified (GLM-MoE-DSA's indexer scores every key 0 for a
    # zero pad embedding, and top-k breaks that tie by the key count, which sp padding changes).
    real = batch["attention_mask"].bool()
    assert_close(gather_sequence(out.logits, state, length=11)[real], ref_out.logits[real], "gathered logits")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), ref_grads)

    # Labels alone (no shift_labels): the loss kernel shifts them across the slice boundary itself.
    del local["shift_labels"]
    with torch.no_grad():
        assert_close(model(**local).loss, ref_out.loss, "loss from unshifted labels")
    # Every label of one rank's slice ignored: that rank contributes no token, the mean stays the global one.
    batch["labels"][:, 5:] = -100
    with torch.no_grad():
        with ops(base):
            expected = reference(**batch).loss
        got = model(**shard_sequence(batch, state, pad_token_id=config.pad_token_id)).loss
    assert_close(got, expected, "loss with one slice fully ignored")
    unbind_ops()


# -- prepared (4-D, dict) masks under sequence parallelism -----------------------------------------------------
def _padded_both_slices(config: PreTrainedConfig) -> dict[str, torch.Tensor]:
    """11 positions (12 with sp=2's padding): row 1 left-padded in sp rank 0's slice, row 3 right-padded in rank 1's."""
    batch = causal_lm_batch(config, seq_len=11)
    batch["attention_mask"][1, :2] = 0
    batch["input_ids"][1, :2] = config.pad_token_id
    # No padding position has a target: its query attends no key, and what attention returns for such a row
    # depends on the number of keys, which sp's padding changes.
    batch["labels"][1, :3] = -100
    return batch


def _causal(real: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """``[batch, 1, S, S]`` boolean causal (sliding within ``window``) mask over the real keys of ``real``."""
    size = real.shape[-1]
    query, key = torch.arange(size).view(-1, 1), torch.arange(size).view(1, -1)
    allowed = (key <= query) & (True if window is None else query - key < window)
    return allowed & real.bool()[:, None, None, :]


def prepared_masks_match_one_process(attention: str) -> None:
    """With sp=2 (and dp = world / 2), a prepared 4-D mask gives qwen3_moe the aux loss and loss of its 2-D
    mask in one process, the global-batch kernel reads a dict of whole-sequence masks at each rank's slice,
    and refuses a mask it cannot read. (qwen3_moe itself takes no dict: transformers' create_causal_mask
    fails on one, with or without sp.)"""
    state = ParallelState.build(sp=2)
    register_ulysses(state)
    config = config_of("qwen3_moe", attn_implementation=attention)
    batch = _padded_both_slices(config)
    kwargs = {"output_router_logits": True}
    reference = fresh_model("qwen3_moe", config)
    with torch.no_grad():
        ref_out = reference(**batch, **kwargs)
        embeds = reference.get_input_embeddings()(batch["input_ids"])
    prepared = create_causal_mask(
        config=config, inputs_embeds=embeds, attention_mask=batch["attention_mask"], cache=None
    )
    assert prepared.shape == (4, 1, 11, 11)

    model = fresh_model("qwen3_moe", config_of("qwen3_moe", attn_implementation=f"ulysses_{attention}"))
    bind_ops(parallel_ops(state))
    rows = rows_of({**batch, "attention_mask": prepared}, state.dp_rank, state.dp)
    local = shard_sequence(rows, state, pad_token_id=config.pad_token_id)
    assert local["attention_mask"].shape == (4 // state.dp, 1, 12, 12)
    with torch.no_grad():
        out = model(**local, **kwargs)
    assert_close(out.aux_loss, ref_out.aux_loss, "aux loss with a 4-D mask")
    assert_close(out.loss, ref_out.loss, "loss with a 4-D mask")

    # The kernel alone: a dict of whole-sequence masks (boolean full, additive sliding), this rank's router logits.
    real = torch.nn.functional.pad(batch["attention_mask"], (0, 1))
    generator = torch.Generator().manual_seed(1)
    logits = tuple(torch.randn(4, 12, 8, generator=generator) for _ in range(2))
    expected = eager.load_balancing_loss(tuple(t.reshape(-1, 8) for t in logits), 8, 2, real)
    sliding = torch.zeros(4, 1, 12, 12).masked_fill(~_causal(real, window=3), torch.finfo(torch.float32).min)
    masks = {"full_attention": _causal(real), "sliding_attention": sliding}
    window = slice(state.sp_rank * 6, state.sp_rank * 6 + 6)
    rows = slice(state.dp_rank * 4 // state.dp, (state.dp_rank + 1) * 4 // state.dp)
    mine = tuple(t[rows, window].reshape(-1, 8) for t in logits)
    local_masks = {name: mask[rows] for name, mask in masks.items()}
    got = load_balancing_loss(mine, 8, 2, local_masks, group=state.data_group, sp_group=state.sp_group)
    assert_close(got, expected, "aux loss of the kernel from a dict of masks")
    # The whole sequence's 2-D mask is no slice of this rank's tokens: refused on every rank, before any collective.
    with pytest.raises(ValueError, match=r"shape \(\d, 12\): expected \[\d, 6\]"):
        load_balancing_loss(mine, 8, 2, real[rows], group=state.data_group, sp_group=state.sp_group)
    unbind_ops()


# -- SP x EP ----------------------------------------------------------------------------------------------
def sequence_and_expert_parallel(attention: str = "sdpa") -> None:
    state = ParallelState.build(sp=2, ep=2)
    register_ulysses(state)
    config = config_of("qwen3_moe", attn_implementation=attention)
    batch = causal_lm_batch(config, batch_size=4, seq_len=11)
    kwargs = {"output_router_logits": True}
    reference = fresh_model("qwen3_moe", config)
    with ops(GROUPED):
        ref_out = reference(**batch, **kwargs)
        ref_out.loss.backward()
    ref_grads = {n: p.grad.detach().clone() for n, p in reference.named_parameters()}

    model = fresh_model("qwen3_moe", config_of("qwen3_moe", attn_implementation=f"ulysses_{attention}"))
    apply_expert_parallel(model, state)
    bind_ops(parallel_ops(state, GROUPED))
    rows = rows_of(batch, state.dp_rank, state.dp)
    out = model(**shard_sequence(rows, state, pad_token_id=config.pad_token_id), **kwargs)
    half = slice(state.dp_rank * 2, state.dp_rank * 2 + 2)
    assert_close(gather_sequence(out.logits, state, length=11), ref_out.logits[half], "gathered logits")
    assert_close(out.aux_loss, ref_out.aux_loss, "aux loss")
    assert_close(out.loss, ref_out.loss, "loss")
    out.loss.backward()
    average_gradients(model, state)
    assert_same_grads(full_state(model, state, grads=True), ref_grads)
    unbind_ops()


def four_rank_cases() -> None:
    """EP=4, SP=2 x EP=2 and DP=2 x SP=2 with a 4-D mask on one 4-rank group (one spawn: starting ranks is the
    slow part on 2 cores)."""
    expert_parallel_matches_grouped(ep=4, idle_layer=True)
    sequence_and_expert_parallel()
    prepared_masks_match_one_process("sdpa")


# -- what each spawned test runs (starting ranks is the slow part on 2 cores: one start per test) ----------
def two_rank_expert_parallel() -> None:
    mesh_layout()
    kernel_with_idle_experts()
    expert_parallel_matches_grouped(ep=2, idle_layer=True)


def two_rank_fsdp() -> None:
    fsdp_matches_one_process("llama")
    fsdp_matches_one_process("qwen3_moe")


def ulysses_refuses(name: str, attention: str, reason: str) -> None:
    """A model whose attention Ulysses cannot exchange (with the ops bound here: none) fails its forward with
    ``reason``, never runs wrong."""
    state = ParallelState.build(sp=2)
    register_ulysses(state)
    config = config_of(name, attn_implementation=f"ulysses_{attention}")
    model = fresh_model(name, config)
    local = shard_sequence(causal_lm_batch(config, seq_len=12), state, pad_token_id=config.pad_token_id)
    with pytest.raises(NotImplementedError, match=reason):
        model(**local)


def ulysses_attention_refuses_what_heads_cannot_exchange() -> None:
    """Called directly (whatever the model and mask), with no sequence-parallel indexer bound: sparse indices
    of one slice, keys beyond the rank's tokens."""
    state = ParallelState.build(sp=2)
    register_ulysses(state)
    attention = ALL_ATTENTION_FUNCTIONS["ulysses_eager"]
    query = torch.randn(1, 2, 4, 8)
    with pytest.raises(NotImplementedError, match="picked from this rank's slice only"):
        attention(torch.nn.Module(), query, query, query, None, indices=torch.zeros(1, 4, 2, dtype=torch.int32))
    longer = torch.randn(1, 2, 6, 8)
    with pytest.raises(NotImplementedError, match="6 keys for 4 queries"):
        attention(torch.nn.Module(), query, longer, longer, None)


def two_rank_ulysses() -> None:
    ulysses_matches_one_process("llama", "eager")
    ulysses_matches_one_process("qwen3", "sdpa")
    prepared_masks_match_one_process("eager")


def two_rank_ulysses_zoo_attention() -> None:
    ulysses_matches_one_process("gpt_oss", "eager")
    ulysses_matches_one_process("gpt_oss", "fused_attention")
    ulysses_matches_one_process("deepseek_v3", "fused_attention")
    ulysses_matches_one_process("glm_moe_dsa", "eager")
    ulysses_matches_one_process("glm_moe_dsa", "fused_attention", OpsConfig({"dsa_indexer": "shared_keys"}))
    ulysses_refuses("glm_moe_dsa", "eager", "needs the sequence-parallel DSA indexer")
    ulysses_refuses("deepseek_v4", "fused_attention", "compressed-attention layers")
    ulysses_attention_refuses_what_heads_cannot_exchange()
