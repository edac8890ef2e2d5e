"""What each rank runs in the at-scale tests: activation checkpointing, HSDP and the experts' shard dim,
each composed with FSDP2 / EP / Ulysses and compared with one process.

The comparison is ``training_scenarios``' train step: loss, every gradient, the parameters after an AdamW
step and the next loss. Each scenario also proves its feature was really in effect (the layers recomputed
their forward, the parameters sit on a 2-D mesh, the experts were cut on dim 1), so a run that silently
fell back to the plain path cannot pass. Module-level functions: ``launch.spawn`` imports them by name.
"""

from __future__ import annotations

from typing import Any, Self

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.utils._python_dispatch import TorchDispatchMode

from modelgraft.models.distributed import (
    ParallelState,
    apply_activation_checkpointing,
    apply_expert_parallel,
    apply_fsdp,
    checkpointed_layers,
    clip_grad_norm,
    expert_parallel,
    expert_shards,
    full_state,
    parallel_ops,
    register_ulysses,
    shard_sequence,
)
from modelgraft.models.ops import bind_ops, unbind_ops
from modelgraft.models.ops.kernels import grouped_experts
from modelgraft.models.testing import causal_lm_batch

from .scenarios import GROUPED, config_of, fresh_model, rows_of
from .training_scenarios import ADAM, EXPERTS, SEQ_LEN, _reference, assert_near, pin_routing


def _count_layer_forwards(model: torch.nn.Module) -> list[int]:
    """A counter per decoder layer's attention, incremented on every forward it runs (recomputation included)."""
    counts = [0]

    def hook(module: torch.nn.Module, args: Any, kwargs: Any = None) -> None:
        counts[0] += 1

    for layer in checkpointed_layers(model):
        layer.self_attn.register_forward_pre_hook(hook)
    return counts


def train_step_matches_one_process(
    name: str,
    *,
    ep: int = 1,
    sp: int = 1,
    replicate: int = 1,
    checkpointing: bool = False,
    experts: dict[str, int] | None = None,
    clip: bool = False,
) -> torch.nn.Module:
    """FSDP (HSDP when ``replicate`` > 1) with EP / Ulysses / activation checkpointing as asked, on the world's
    ranks, against one process: loss, every gradient, the parameters after one AdamW step, the next loss;
    with ``clip``, also ``clip_grad_norm``'s total norm (on every rank) and the clipped gradients.

    Routing is pinned without sp (one row per rank); with sp the run is fp32 and unpinned, as in
    ``training_scenarios``. Returns the sharded model for the caller's own checks of its layout."""
    state = ParallelState.build(ep=ep, sp=sp, replicate=replicate)
    sizes = experts if experts is not None else EXPERTS.get(name, {})
    pin = sp == 1 and bool(sizes)
    config = config_of(name, **sizes, **({} if sp == 1 else {"attn_implementation": "sdpa"}))
    batch = causal_lm_batch(config, batch_size=2 * state.dp if sp > 1 else state.world_size, seq_len=SEQ_LEN)
    ref = _reference(name, config, batch, clip, None, pin)

    if sp == 1:
        model = fresh_model(name, config)
        if pin:
            pin_routing(model, state.rank * SEQ_LEN)
        local = rows_of(batch, state.rank, state.world_size)
    else:
        register_ulysses(state)
        model = fresh_model(name, config_of(name, **sizes, attn_implementation="ulysses_sdpa"))
        local = shard_sequence(rows_of(batch, state.dp_rank, state.dp), state, pad_token_id=config.pad_token_id)
    if ep > 1:
        apply_expert_parallel(model, state)
    counts = [0]
    if checkpointing:
        wrappers = apply_activation_checkpointing(model)
        assert len(wrappers) == config.num_hidden_layers, f"{len(wrappers)} wrappers for {config.num_hidden_layers}"
        counts = _count_layer_forwards(model)
    apply_fsdp(model, state)
    optimizer = torch.optim.AdamW(model.parameters(), **ADAM)
    bind_ops(parallel_ops(state, GROUPED))
    out = model(**local)
    assert_near(out.loss, ref["loss"], "loss", None)
    forwards = counts[0]
    out.loss.backward()
    if checkpointing:
        # Every layer ran once in forward and once more in backward: activation checkpointing was in effect.
        assert (forwards, counts[0]) == (config.num_hidden_layers, 2 * config.num_hidden_layers), (forwards, counts)
    grads = full_state(model, state, grads=True)
    assert grads.keys() == ref["grads"].keys(), sorted(set(grads) ^ set(ref["grads"]))
    for param_name, expected in ref["grads"].items():
        assert_near(grads[param_name], expected, f"gradient of {param_name}", None)
    if clip:
        assert_near(clip_grad_norm(model, state, ref["max_norm"]), ref["norm"], "total gradient norm", None)
        clipped = full_state(model, state, grads=True)
        for param_name, expected in ref["clipped"].items():
            assert_near(clipped[param_name], expected, f"clipped gradient of {param_name}", None)
    optimizer.step()
    params = full_state(model, state)
    for param_name, expected in ref["params"].items():
        assert_near(params[param_name], expected, f"{param_name} after one AdamW step", None)
    with torch.no_grad():
        assert_near(model(**local).loss, ref["second"], "loss after one step", None)
    unbind_ops()
    return model


# -- activation checkpointing --------------------------------------------------------------------------------
def checkpointing_under_fsdp_x_ep() -> None:
    train_step_matches_one_process("qwen3_moe", ep=2, checkpointing=True)


def checkpointing_under_ulysses_x_ep_x_fsdp() -> None:
    train_step_matches_one_process("qwen3_moe", ep=2, sp=2, checkpointing=True)


# -- HSDP --------------------------------------------------------------------------------------------------
def _assert_hsdp_layout(model: torch.nn.Module, state_replicate: int) -> None:
    """Every dense parameter is a DTensor on a (replicate, shard) mesh, replicated on the first dim."""
    experts = expert_shards(model)
    for name, param in model.named_parameters():
        assert isinstance(param, DTensor), name
        mesh = param.device_mesh
        assert mesh.ndim == 2 and mesh.size(0) == state_replicate, f"{name}: mesh {mesh}"
        assert isinstance(param.placements[0], Replicate) and isinstance(param.placements[1], Shard), (
            f"{name}: {param.placements}"
        )
        expected_names = ("replicate", "ep_shard") if name in experts else ("replicate", "shard")
        assert mesh.mesh_dim_names == expected_names, f"{name}: {mesh.mesh_dim_names}"


def hsdp_2x2() -> None:
    """HSDP on 4 ranks (2 replicas x 2 shards): llama, qwen3_moe, then qwen3_moe with ep=2 (experts on
    (replicate, 1)) and checkpointing; the MoE runs clip too (the norm over 2-D meshes)."""
    _assert_hsdp_layout(train_step_matches_one_process("llama", replicate=2), 2)
    _assert_hsdp_layout(train_step_matches_one_process("qwen3_moe", replicate=2, clip=True), 2)
    model = train_step_matches_one_process("qwen3_moe", ep=2, replicate=2, checkpointing=True, clip=True)
    _assert_hsdp_layout(model, 2)


# -- the experts' shard dim --------------------------------------------------------------------------------
def experts_shard_on_dim_1_when_dim_0_would_pad() -> None:
    """6 experts, ep=2, 4 ranks: 3 local experts over 2 FSDP ranks would pad, so they are cut on dim 1 (even),
    and the train step still equals one process; 4 experts (2 local) stay on dim 0."""
    model = train_step_matches_one_process("qwen3_moe", ep=2)
    placements = {n: p.placements for n, p in model.named_parameters() if n in expert_shards(model)}
    assert placements and all(p == (Shard(1),) for p in placements.values()), placements
    for param_name, param in model.named_parameters():
        if param_name in placements:
            assert param.to_local().shape[0] == 3, f"{param_name}: local shape {tuple(param.to_local().shape)}"

    even = {"num_experts": 4, "num_experts_per_tok": 2}
    model = train_step_matches_one_process("qwen3_moe", ep=2, experts=even)
    placements = {n: p.placements for n, p in model.named_parameters() if n in expert_shards(model)}
    assert placements and all(p == (Shard(0),) for p in placements.values()), placements


# -- host syncs of the ep dispatch -------------------------------------------------------------------------
#: aten ops that make the host wait for the device: a scalar read (``.item()``), or an output whose size
#: depends on the data. ``repeat_interleave`` counts only without ``output_size``.
SYNCING_OPS = ("aten._local_scalar_dense", "aten.nonzero", "aten.bincount", "aten.unique", "aten.masked_select")


class HostSyncGuard(TorchDispatchMode):
    """Records every host sync made while it is active: the syncing aten ops (``.item()`` reaches aten as
    ``_local_scalar_dense``) and ``Tensor.tolist`` (which reads the data without an aten op, so it is patched).
    ``paused`` stops the count, for a callee whose own syncs are not the ones under test."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []
        self.paused = False
        self._tolist = torch.Tensor.tolist

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = str(func.overloadpacket)
        if not self.paused and (
            name.startswith(SYNCING_OPS)
            or (name == "aten.repeat_interleave" and kwargs.get("output_size") is None and len(args) < 3)
        ):
            self.syncs.append(name)
        return func(*args, **kwargs)

    def __enter__(self) -> Self:
        guard = self

        def tolist(tensor: torch.Tensor) -> Any:
            if not guard.paused:
                guard.syncs.append("Tensor.tolist")
            return guard._tolist(tensor)

        torch.Tensor.tolist = tolist  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        torch.Tensor.tolist = self._tolist  # type: ignore[method-assign]
        super().__exit__(*exc)


def ep_dispatch_syncs_the_host_once() -> None:
    """The ep_alltoall kernel's forward and backward, local experts' grouped kernel included, make one host
    sync (the split sizes' and per-expert counts' ``tolist``); the guard does see the grouped kernel's own
    sync when it is called without the counts."""
    state = ParallelState.build(ep=2)
    generator = torch.Generator().manual_seed(0)
    tokens, hidden, inter, experts = 6, 8, 4, 4
    x = torch.randn(tokens, hidden, generator=generator, requires_grad=True)
    gate_up = torch.randn(experts // 2, 2 * inter, hidden, generator=generator, requires_grad=True)
    down = torch.randn(experts // 2, hidden, inter, generator=generator, requires_grad=True)
    index = torch.randint(0, experts, (tokens, 2), generator=generator)
    weights = torch.rand(tokens, 2, generator=generator)

    with HostSyncGuard() as guard:
        out = expert_parallel.moe_experts(x, index, weights, gate_up, down, "silu", group=state.ep_group)
        out.sum().backward()
    assert guard.syncs == ["Tensor.tolist"], guard.syncs
    assert x.grad is not None and gate_up.grad is not None and gate_up.grad.abs().sum() > 0

    local_index = index[:, :1] % (experts // 2)
    with HostSyncGuard() as alone:  # not vacuous: the grouped kernel counts by itself when not given counts
        grouped_experts.moe_experts(x, local_index, weights[:, :1], gate_up, down, "silu")
    assert alone.syncs, alone.syncs
