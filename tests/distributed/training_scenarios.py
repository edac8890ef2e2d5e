"""What each rank runs in the train-step tests: one process's step, then the same step sharded, compared.

A train step here is the loss, every gradient, the optimizer step, the parameters after it and the next
loss, so a wrong gradient (or one scaled by a constant, which AdamW would mostly hide) shows at least at
the gradients. Routing is pinned (every router picks experts by the token's global position and weighs them
by the softmax of their logits): a router's top-k is discontinuous, and bf16's rounding must not be allowed to
move a token to another expert between the two runs. Each scenario is a module-level function
(``launch.spawn`` imports it by name); the one-process reference is built on every rank from the same seed.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
import torch.distributed as dist

from modelgraft.models.distributed import (
    ParallelState,
    accumulate,
    apply_expert_parallel,
    apply_fsdp,
    average_gradients,
    clip_grad_norm,
    full_state,
    global_token_count,
    grad_norm,
    parallel_ops,
    register_ulysses,
    router_modules,
    shard_sequence,
)
from modelgraft.models.ops import bind_ops, unbind_ops
from modelgraft.models.testing import causal_lm_batch

from .scenarios import GROUPED, assert_close, config_of, fresh_model, ops, rows_of

#: Sizes of the train-step models: 6 experts, so 3 per ep rank and FSDP pads them over 2 ep_replicate ranks.
EXPERTS = {
    "qwen3_moe": {"num_experts": 6, "num_experts_per_tok": 2},
    "gpt_oss": {"num_local_experts": 6, "num_experts_per_tok": 2},
}
SEQ_LEN = 9
#: AdamW's eps: a gradient near zero is divided by about eps, not by its own size, so the reassociation noise
#: of fp32 sums in it (1e-9) is not blown up into a whole learning-rate step.
ADAM = {"lr": 1e-2, "eps": 1e-3}


def optimizer_for(model: torch.nn.Module, param_dtype: torch.dtype | None) -> torch.optim.Optimizer:
    """AdamW in fp32. Under bf16, SGD: Adam's first step is about sign(g) wherever ``|g| >> eps``, so bf16's
    rounding of a gradient element near zero would flip a whole step; SGD keeps the step proportional to
    the gradient, and so within bf16's error of one process's."""
    if param_dtype is None:
        return torch.optim.AdamW(model.parameters(), **ADAM)
    return torch.optim.SGD(model.parameters(), lr=0.5)


#: bf16 compute against fp32 in one process: the relative (Frobenius) error every tensor must stay under.
BF16_RELATIVE = 3e-2


def pin_routing(model: torch.nn.Module, first_token: int) -> None:
    """Every router sends global token ``t`` to experts ``(t * k + j) % E``, weighted by the softmax of their logits.

    ``first_token``: the global index of this rank's first token (rows times sequence length before it).
    """
    for router in router_modules(model):

        def hook(module: torch.nn.Module, args: Any, output: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            logits, scores, indices = output
            tokens, top_k = indices.shape
            position = torch.arange(first_token, first_token + tokens, device=indices.device).unsqueeze(1)
            pinned = (position * top_k + torch.arange(top_k, device=indices.device)) % logits.shape[-1]
            # Both routers' scores are the softmax over the chosen experts' logits (qwen3_moe's normalized top-k
            # probabilities are that too): recomputed for the pinned choice, their gradient reaches those logits.
            return logits, torch.softmax(logits.gather(1, pinned), dim=-1).to(scores.dtype), pinned

        router.register_forward_hook(hook)


def assert_near(actual: torch.Tensor, expected: torch.Tensor, what: str, relative: float | None) -> None:
    """fp32 (``relative`` None): the kernel tolerance of ``scenarios``; bf16: a relative error bound."""
    if relative is None:
        assert_close(actual, expected, what)
        return
    error = (actual.float() - expected.float()).norm()
    assert error <= relative * expected.float().norm() + 1e-6, f"{what}: relative error {error / expected.norm():.3g}"


def _reference(
    name: str, config: Any, batch: dict[str, torch.Tensor], clip: bool, param_dtype: torch.dtype | None, pin: bool
) -> dict[str, Any]:
    """One process, whole batch, fp32: loss, gradients, clipped norm and gradients, parameters after the
    optimizer step (:func:`optimizer_for` ``param_dtype``), next loss."""
    model = fresh_model(name, config)
    if pin:
        pin_routing(model, 0)
    optimizer = optimizer_for(model, param_dtype)
    with ops(GROUPED):
        loss = model(**batch).loss
        loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        norm = max_norm = None
        if clip:
            max_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]).item() / 2
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        clipped = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        optimizer.step()
        with torch.no_grad():
            second = model(**batch).loss
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"loss": loss, "grads": grads, "norm": norm, "max_norm": max_norm, "clipped": clipped,
            "params": params, "second": second}  # fmt: skip


def expert_parallel_train_step(
    name: str, ep: int, *, fsdp: bool, param_dtype: torch.dtype | None = None, clip: bool = False, sp: int = 1
) -> None:
    """EP (with FSDP or ``average_gradients``; with Ulysses when ``sp`` > 1) on the world's ranks against one
    process: every gradient (expert biases included), the clipped norm when ``clip``, the parameters after the
    optimizer step, the next loss.

    Routing is pinned without sp (one row per rank: a token's global position is known); with sp the run
    is fp32, where the routers' choices agree without pinning."""
    state = ParallelState.build(ep=ep, sp=sp)
    pin = sp == 1
    assert pin or param_dtype is None, "bf16 needs pinned routing"
    config = config_of(name, **EXPERTS[name], **({} if pin else {"attn_implementation": "sdpa"}))
    batch = causal_lm_batch(config, batch_size=2 * state.dp if sp > 1 else state.world_size, seq_len=SEQ_LEN)
    ref = _reference(name, config, batch, clip, param_dtype, pin)
    relative = None if param_dtype is None else BF16_RELATIVE

    if pin:
        model = fresh_model(name, config)
        pin_routing(model, state.rank * SEQ_LEN)
        local = rows_of(batch, state.rank, state.world_size)
    else:
        register_ulysses(state)
        model = fresh_model(name, config_of(name, **EXPERTS[name], attn_implementation="ulysses_sdpa"))
        rows = rows_of(batch, state.dp_rank, state.dp)
        local = shard_sequence(rows, state, pad_token_id=config.pad_token_id)
        # The accumulation count reads shard_sequence's shift_labels: every rank's slices make the batch's targets.
        assert global_token_count([local], state).item() == (batch["labels"][:, 1:] != -100).sum().item()
    shards = apply_expert_parallel(model, state)
    assert any("bias" in n for n in shards) == (name == "gpt_oss"), sorted(shards)
    if fsdp:
        apply_fsdp(model, state, param_dtype=param_dtype)
    optimizer = optimizer_for(model, param_dtype)
    bind_ops(parallel_ops(state, GROUPED))
    out = model(**local)
    assert_near(out.loss, ref["loss"], "loss", relative)
    out.loss.backward()
    if not fsdp:
        average_gradients(model, state)
    grads = full_state(model, state, grads=True)
    for param_name, expected in ref["grads"].items():
        assert_near(grads[param_name], expected, f"gradient of {param_name}", relative)
    if clip:
        largest = torch.nn.utils.get_total_norm(list(ref["grads"].values()), float("inf"))
        assert_near(grad_norm(model, state, float("inf")), largest, "largest gradient element (inf norm)", relative)
        norm = clip_grad_norm(model, state, ref["max_norm"])
        assert_near(norm, ref["norm"], "total gradient norm", relative)
        everyone = [torch.empty_like(norm) for _ in range(state.world_size)]
        dist.all_gather(everyone, norm)
        assert all(torch.equal(other, norm) for other in everyone), f"ranks disagree on the norm: {everyone}"
        clipped = full_state(model, state, grads=True)
        for param_name, expected in ref["clipped"].items():
            assert_near(clipped[param_name], expected, f"clipped gradient of {param_name}", relative)
    optimizer.step()
    params = full_state(model, state)
    for param_name, expected in ref["params"].items():
        assert_near(params[param_name], expected, f"{param_name} after one optimizer step", relative)
    with torch.no_grad():
        assert_near(model(**local).loss, ref["second"], "loss after one step", relative)
    unbind_ops()


# -- what each spawned test runs --------------------------------------------------------------------------
def gpt_oss_ep2_train_step() -> None:
    expert_parallel_train_step("gpt_oss", 2, fsdp=False)


def ep2_clipping_without_fsdp() -> None:
    expert_parallel_train_step("gpt_oss", 2, fsdp=False, clip=True)


def fsdp_x_ep_train_steps() -> None:
    expert_parallel_train_step("qwen3_moe", 2, fsdp=True)
    expert_parallel_train_step("gpt_oss", 2, fsdp=True)


def fsdp_x_ep_clipping() -> None:
    expert_parallel_train_step("qwen3_moe", 2, fsdp=True, clip=True)


def sp_x_ep_x_fsdp_train_step() -> None:
    expert_parallel_train_step("qwen3_moe", 2, fsdp=True, clip=True, sp=2)


def fsdp_x_ep_bf16_train_step() -> None:
    expert_parallel_train_step("gpt_oss", 2, fsdp=True, param_dtype=torch.bfloat16, clip=True)


# -- mixed precision ---------------------------------------------------------------------------------------
def bf16_policy_reduces_in_fp32_and_routes_in_fp32() -> None:
    """``apply_fsdp(param_dtype=bf16)`` alone: every unit reduces gradients in fp32, the routers compute in
    fp32 (their weight and input, not an fp32 copy of bf16 logits), the rest computes in bf16, and the
    router logits the aux loss reads are fp32."""
    state = ParallelState.build(ep=2)
    config = config_of("qwen3_moe", **EXPERTS["qwen3_moe"])
    model = fresh_model("qwen3_moe", config)
    apply_expert_parallel(model, state)
    apply_fsdp(model, state, param_dtype=torch.bfloat16)
    units = [m for m in model.modules() if isinstance(m, torch.distributed.fsdp.FSDPModule)]
    assert units and all(m._get_fsdp_state()._mp_policy.reduce_dtype == torch.float32 for m in units)

    seen: dict[str, tuple[torch.dtype, torch.dtype]] = {}

    def record(label: str, weight: Any) -> Any:
        def hook(module: torch.nn.Module, args: Any) -> None:
            seen[label] = (args[0].dtype, weight(module).dtype)

        return hook

    layer = model.model.layers[0]
    layer.mlp.gate.register_forward_pre_hook(record("router", lambda m: m.weight))
    layer.self_attn.q_proj.register_forward_pre_hook(record("attention", lambda m: m.weight))
    layer.mlp.register_forward_pre_hook(record("experts", lambda m: m.experts.gate_up_proj))
    bind_ops(parallel_ops(state, GROUPED))
    local = rows_of(
        causal_lm_batch(config, batch_size=state.world_size, seq_len=SEQ_LEN), state.rank, state.world_size
    )
    out = model(**local, output_router_logits=True)
    assert seen["router"] == (torch.float32, torch.float32), seen
    assert seen["attention"] == seen["experts"] == (torch.bfloat16, torch.bfloat16), seen
    assert all(logits.dtype == torch.float32 for logits in out.router_logits)
    assert out.aux_loss.dtype == torch.float32
    out.loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    unbind_ops()


# -- the view the MoE block returns ------------------------------------------------------------------------------
def moe_block_view_is_guarded() -> None:
    """Under EP x FSDP the MoE block is an FSDP unit returning a view: FSDP's warning about it is silenced
    (the view is real, so the silence is not vacuous), and an in-place op on that view, which would drop
    FSDP's backward all-gather hook, raises when the decoder layer's forward ends."""
    state = ParallelState.build(ep=2)
    config = config_of("qwen3_moe", **EXPERTS["qwen3_moe"])
    model = fresh_model("qwen3_moe", config)
    apply_expert_parallel(model, state)
    apply_fsdp(model, state)
    block = model.model.layers[0].mlp
    returned: list[torch.Tensor] = []
    block.register_forward_hook(lambda module, args, output: returned.append(output))
    bind_ops(parallel_ops(state, GROUPED))
    local = rows_of(
        causal_lm_batch(config, batch_size=state.world_size, seq_len=SEQ_LEN), state.rank, state.world_size
    )
    with warnings.catch_warnings(record=True) as caught:
        model(**local).loss.backward()
    assert returned[0]._base is not None, "the MoE block no longer returns a view: drop the guard"
    assert not [w for w in caught if "returned a view tensor" in str(w.message)], [str(w.message) for w in caught]

    block.register_forward_hook(lambda module, args, output: output.mul_(1.0))
    with pytest.raises(RuntimeError, match=r"modified the output of \w*Qwen3MoeSparseMoeBlock in place"):
        model(**local)
    unbind_ops()


# -- gradient accumulation -------------------------------------------------------------------------------------
def accumulated_micro_batches_match_one_batch() -> None:
    """EP x FSDP, two micro-batches per rank with different token counts, each loss divided by the token count
    of the whole accumulated batch: the gradients, the step and the next loss are one process's on the
    whole batch at once."""
    state = ParallelState.build(ep=2)
    config = config_of("qwen3_moe", **EXPERTS["qwen3_moe"])
    batch = causal_lm_batch(config, batch_size=4 * state.world_size, seq_len=SEQ_LEN)

    reference = fresh_model("qwen3_moe", config)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), **ADAM)
    with ops(GROUPED):
        ref_loss = reference(**batch).loss
        ref_loss.backward()
        ref_grads = {n: p.grad.detach().clone() for n, p in reference.named_parameters()}
        ref_optimizer.step()
        with torch.no_grad():
            ref_second = reference(**batch).loss

    model = fresh_model("qwen3_moe", config)
    apply_expert_parallel(model, state)
    apply_fsdp(model, state)
    optimizer = torch.optim.AdamW(model.parameters(), **ADAM)
    local = rows_of(batch, state.rank, state.world_size)
    micro_batches = [rows_of(local, part, 2) for part in range(2)]
    counts = [int((mb["labels"][:, 1:] != -100).sum()) for mb in micro_batches]
    assert counts[0] != counts[1] or state.rank != 0, (
        f"equal micro-batch token counts {counts}: a mean of means would pass"
    )
    bind_ops(parallel_ops(state, GROUPED))
    tokens = global_token_count(micro_batches, state)
    assert tokens.item() == (batch["labels"][:, 1:] != -100).sum().item()
    total = torch.zeros(())
    for micro_batch in accumulate(model, micro_batches):
        loss = model(**micro_batch, num_items_in_batch=tokens).loss
        loss.backward()
        total = total + loss.detach()
    assert_close(total, ref_loss, "summed micro-batch losses")
    grads = full_state(model, state, grads=True)
    for name, expected in ref_grads.items():
        assert_close(grads[name], expected, f"accumulated gradient of {name}")
    optimizer.step()
    with torch.no_grad():
        second = sum(model(**mb, num_items_in_batch=tokens).loss for mb in micro_batches)
    assert_close(second, ref_second, "loss after one step")
    unbind_ops()
