"""Expert parallelism driven by a generated model's ``get_parallel_plan()``, and its ``ep_alltoall`` kernel.

The plan maps parameter-name patterns to placements: ``"model.layers.*.mlp.experts.gate_up_proj":
"shard(0)"`` (``*`` is exactly one dotted component; ``shard(d)`` splits dim ``d`` across the ep group;
``"replicate"`` keeps the whole tensor). :func:`apply_expert_parallel` replaces every planned parameter
by this rank's contiguous chunk (rank ``r`` of ``ep`` holds experts ``[r * E/ep, (r + 1) * E/ep)``) and
records the global shape; :func:`full_tensor` turns a chunk back into the whole tensor through a DTensor.

The generated MoE block is untouched: it hands its fused expert tensors to ``moe_experts_slot``, and
the kernel bound there (:func:`moe_experts`, kernel ``ep_alltoall``) does what the local experts cannot:

1. sort this rank's ``tokens x top_k`` (token, expert) pairs by expert, so each destination rank's
   pairs are one contiguous block, and exchange the per-expert counts (``all_to_all_single``, on the
   tokens' device as NCCL / HCCL need); then read the per-rank split sizes and the rows per local expert
   on the host, the dispatch's one host sync (a single ``tolist`` of one small tensor: what
   ``all_to_all_single`` and the grouped kernel need as ints);
2. send every pair's hidden state to the rank holding its expert (``all_to_all_single``, uneven splits);
3. run the received rows through the local experts with the pure-torch grouped kernel
   (``modelgraft.models.ops.kernels.grouped_experts``), each row a top-1 choice of weight 1, given the
   counts read in step 1 (so the kernel syncs no more: one host sync per MoE layer in all);
4. send the results back (the inverse all-to-all), weight them by the router and sum each token's K.

Gradients follow the same path backwards, exactly: a local expert's gradient sums the contributions
of the tokens of every rank of its ep group. The kernel does not rescale any of them. Data-parallel
averaging divides dense gradients by the world size, and the expert-parallel ones must be divided by
the same world size, not by the ``ep_replicate`` ranks that reduce them: ``apply_fsdp`` sets that
divide factor on every FSDP unit holding sharded parameters, and ``average_gradients`` does the same
without FSDP. The rule follows the parameter's placement (every parameter the plan shards), so the
biases of gpt_oss's experts get the treatment of its weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed import ProcessGroup
from torch.distributed.tensor import DTensor, Shard

from modelgraft.models.distributed.collectives import all_to_all
from modelgraft.models.distributed.mesh import ParallelConfigError, ParallelState
from modelgraft.models.ops.kernels import grouped_experts, is_distributed
from modelgraft.models.ops.kernels.eager import experts_glu, split_gate_up

__all__ = [
    "UNTRACEABLE",
    "ExpertShard",
    "apply_expert_parallel",
    "expert_shards",
    "full_tensor",
    "moe_experts",
    "parse_placement",
    "plan_matches",
    "validate_parallel_plan",
]

_SHARD = re.compile(r"^shard\((\d+)\)$")

#: The slots of this family that ``torch.compile`` cannot trace into one graph, with the reason
#: (docs/compile.md, "Under FSDP2, expert parallelism and sequence parallelism"). Each runs eagerly, whole, in a
#: compiled layer (``torch.compiler.disable``), which runs as graphs around it; tests/compile checks the break.
UNTRACEABLE: Mapping[str, str] = MappingProxyType(
    {
        "moe_experts": (
            "the dispatch reads its all-to-all split sizes and each local expert's row count on the host "
            "(one tolist(): all_to_all_single takes them as ints), sizes that depend on the routing"
        ),
    }
)


def plan_matches(pattern: str, names: list[str]) -> list[str]:
    """The names a plan pattern selects: ``*`` stands for exactly one dotted component."""
    regex = re.compile("^" + r"[^.]+".join(re.escape(part) for part in pattern.split("*")) + "$")
    return [name for name in names if regex.match(name)]


def parse_placement(placement: str) -> int | None:
    """``"shard(d)"`` -> ``d``; ``"replicate"`` -> None; anything else raises."""
    text = placement.strip().lower()
    if text == "replicate":
        return None
    match = _SHARD.match(text)
    if match is None:
        raise ParallelConfigError(f"unknown placement {placement!r} (valid: 'shard(<dim>)', 'replicate')")
    return int(match[1])


def validate_parallel_plan(model: nn.Module, ep: int, plan: Mapping[str, str] | None = None) -> dict[str, int]:
    """Check ``model``'s plan (or ``plan``) for ``ep`` ranks; returns parameter name -> sharded dim.

    Every pattern must match at least one parameter, and every sharded dim must divide by ``ep``;
    all violations are reported together in one :class:`ParallelConfigError`.
    """
    if plan is None:
        plan = model.get_parallel_plan() if hasattr(model, "get_parallel_plan") else {}
    params = dict(model.named_parameters())
    names = list(params)
    sharded: dict[str, int] = {}
    problems = []
    for pattern, placement in plan.items():
        dim = parse_placement(placement)
        matched = plan_matches(pattern, names)
        if not matched:
            problems.append(f"pattern {pattern!r} matches no parameter")
        if dim is None:
            continue
        for name in matched:
            shape = tuple(params[name].shape)
            if dim >= len(shape):
                problems.append(f"{name} {list(shape)} has no dim {dim} ({pattern!r}: {placement!r})")
            elif shape[dim] % ep:
                problems.append(f"{name} {list(shape)}: dim {dim} of size {shape[dim]} does not divide by ep={ep}")
            else:
                sharded[name] = dim
    if problems:
        raise ParallelConfigError(
            f"the parallel plan of {type(model).__name__} does not fit ep={ep}: " + "; ".join(problems)
        )
    return sharded


@dataclass(frozen=True)
class ExpertShard:
    """Where a local chunk sits in its global parameter."""

    dim: int
    ep: int
    ep_rank: int
    global_shape: tuple[int, ...]

    @property
    def offset(self) -> int:
        """Global index of the chunk's first slice along ``dim`` (the first local expert's id)."""
        return self.ep_rank * self.global_shape[self.dim] // self.ep


def apply_expert_parallel(model: nn.Module, state: ParallelState) -> dict[str, ExpertShard]:
    """Keep only this rank's chunk of every parameter the plan shards; returns name -> :class:`ExpertShard`.

    Call it on a model built identically on every rank (same seed, or before loading a checkpoint with
    :func:`modelgraft.models.distributed.checkpoint.load_expert_parallel_checkpoint`), before FSDP. A model
    without a plan (dense) is left unchanged. Bind :func:`modelgraft.models.distributed.parallel_ops` too: the
    ``moe_experts`` slot must run ``ep_alltoall`` for the sharded experts.
    """
    sharded = validate_parallel_plan(model, state.ep)
    own = getattr(model, "ops_config", None)
    if sharded and own is not None and not is_distributed(own.kernel_for("moe_experts")):
        raise ParallelConfigError(
            f"{type(model).__name__} runs its own ops (moe_experts={own.kernel_for('moe_experts')}) on every call: "
            "with this rank's experts only, that kernel cannot reach the other ranks' experts. Build the model "
            "without ops= and give it its parallel kernels with attach_parallel(model, state, base=<its ops>)"
        )
    shards = {}
    for name, dim in sharded.items():
        owner_name, _, attr = name.rpartition(".")
        owner = model.get_submodule(owner_name)
        param = getattr(owner, attr)
        shard = ExpertShard(dim=dim, ep=state.ep, ep_rank=state.ep_rank, global_shape=tuple(param.shape))
        local = param.detach().chunk(state.ep, dim=dim)[state.ep_rank].clone()
        setattr(owner, attr, nn.Parameter(local, requires_grad=param.requires_grad))
        owner.__dict__.setdefault("_ep_shards", {})[attr] = shard
        shards[name] = shard
    return shards


def expert_shards(model: nn.Module) -> dict[str, ExpertShard]:
    """The shards :func:`apply_expert_parallel` recorded on ``model``: full parameter name -> shard."""
    found = {}
    for module_name, module in model.named_modules():
        for attr, shard in module.__dict__.get("_ep_shards", {}).items():
            found[f"{module_name}.{attr}" if module_name else attr] = shard
    return found


def full_tensor(local: torch.Tensor, shard: ExpertShard, state: ParallelState) -> torch.Tensor:
    """The whole parameter (or gradient) from every ep rank's chunk, via a DTensor on the ep mesh."""
    if isinstance(local, DTensor):  # FSDP-sharded over ep_replicate: first this ep rank's whole chunk
        local = local.full_tensor()
    return DTensor.from_local(local, state.ep_mesh["ep"], [Shard(shard.dim)], run_check=False).full_tensor()


# -- the ep_alltoall kernel ----------------------------------------------------------------------------------
def _local_experts(
    rows: torch.Tensor,
    local_ids: torch.Tensor,
    counts: list[int],
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    activation: str,
    options: dict[str, Any],
) -> torch.Tensor:
    """Each received row through its local expert (grouped kernel, top-1, weight 1). ``counts``: the rows
    per local expert, already on the host, so the grouped kernel makes no host sync of its own."""
    if rows.shape[0] == 0:
        # Nothing arrived: still run an (empty) expert so every rank's graph reaches the weights and the
        # dispatch all-to-all, and the collectives of the backward pass stay matched across ranks.
        transposed = options.get("layout", "fused") == "transposed"
        gate_up = rows @ gate_up_proj[0] if transposed else F.linear(rows, gate_up_proj[0])
        if options.get("gate_up_bias") is not None:
            gate_up = gate_up + options["gate_up_bias"][0]
        gate, up = split_gate_up(gate_up, options.get("interleaved", False))
        hidden = experts_glu(
            gate,
            up,
            activation,
            limit=options.get("limit"),
            alpha=options.get("alpha"),
            activation_first=options.get("activation_first", False),
        )
        out = hidden @ down_proj[0] if transposed else F.linear(hidden, down_proj[0])
        return out if options.get("down_bias") is None else out + options["down_bias"][0]
    ones = torch.ones(rows.shape[0], 1, dtype=rows.dtype, device=rows.device)
    return grouped_experts.moe_experts(
        rows, local_ids.unsqueeze(1), ones, gate_up_proj, down_proj, activation, counts=counts, **options
    )


# Run eagerly as a whole inside a compiled layer: its host read would otherwise split it, and the code after the
# read would be compiled again for every new set of split sizes (docs/compile.md).
@torch.compiler.disable(reason=UNTRACEABLE["moe_experts"])
def moe_experts(
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
    gate_up_proj: torch.Tensor,
    down_proj: torch.Tensor,
    activation: str,
    *,
    layout: str = "fused",
    interleaved: bool = False,
    gate_up_bias: torch.Tensor | None = None,
    down_bias: torch.Tensor | None = None,
    limit: float | None = None,
    alpha: float | None = None,
    activation_first: bool = False,
    group: ProcessGroup | None = None,
) -> torch.Tensor:
    """``moe_experts`` slot contract over experts split across ``group`` (the ep group).

    ``gate_up_proj`` / ``down_proj`` are this rank's chunks (``[E/ep, 2I, H]``, ``[E/ep, H, I]``);
    ``top_k_index`` holds global expert ids. ``group`` is bound as a kernel option by
    :func:`modelgraft.models.distributed.parallel_ops`. The expert tensors' gradients are exact (every ep
    rank's tokens summed); dividing them like the dense ones is the averaging step's job (see the module doc).
    """
    if group is None:
        raise ParallelConfigError(
            "kernel 'ep_alltoall' needs its ep process group: bind it with models.distributed.parallel_ops(state)"
        )
    ep = torch.distributed.get_world_size(group)
    num_tokens, top_k = top_k_index.shape
    local_experts = gate_up_proj.shape[0]
    num_experts = local_experts * ep

    flat_experts = top_k_index.reshape(-1)
    order = torch.argsort(flat_experts, stable=True)  # pairs by global expert, hence by destination rank
    # Counts on the tokens' device, without bincount (which reads its length on the host): an id out of
    # range is clamped here and reported after the one host sync below, from ``bounds`` (largest, smallest).
    if flat_experts.numel():
        bounds = torch.stack([flat_experts.max(), flat_experts.min()])
    else:
        bounds = flat_experts.new_tensor([0, 0])
    send_counts = torch.zeros(num_experts, dtype=torch.long, device=flat_experts.device)
    send_counts.scatter_add_(0, flat_experts.clamp(0, num_experts - 1), torch.ones_like(flat_experts))
    # recv_counts[s, e]: pairs rank s sends to this rank's local expert e (exchanged on the device).
    recv_counts = all_to_all(send_counts.view(ep, local_experts), group).view(ep, local_experts)
    # The one host sync of the dispatch: all_to_all_single takes its split sizes as host ints, and the local
    # experts' grouped kernel takes its rows per expert the same way (so it reads none itself).
    host = torch.cat(
        [send_counts.view(ep, local_experts).sum(dim=1), recv_counts.sum(dim=1), recv_counts.sum(dim=0), bounds]
    )
    host_values = host.tolist()
    send_splits, recv_splits = host_values[:ep], host_values[ep : 2 * ep]
    local_counts, (top, bottom) = host_values[2 * ep : 2 * ep + local_experts], host_values[-2:]
    if top >= num_experts or bottom < 0:
        raise ValueError(
            f"top_k_index holds expert id {top if top >= num_experts else bottom}, but {ep} ranks x {local_experts} local "
            f"experts make {num_experts}; were the experts sharded with apply_expert_parallel?"
        )

    rows = all_to_all(hidden_states[order // top_k], group, output_splits=recv_splits, input_splits=send_splits)
    local_ids = torch.repeat_interleave(  # output_size given: no second sync to size the result
        torch.arange(local_experts, device=rows.device).repeat(ep),
        recv_counts.reshape(-1),
        output_size=sum(recv_splits),
    )
    # Biases are this rank's chunks too ([E/ep, 2I], [E/ep, H]); the routing weight is applied after the
    # return trip, so the local experts run at weight 1 and w * (a @ W + b) comes out as upstream's.
    options = {"layout": layout, "interleaved": interleaved, "gate_up_bias": gate_up_bias, "down_bias": down_bias}
    outputs = _local_experts(
        rows,
        local_ids,
        local_counts,
        gate_up_proj,
        down_proj,
        activation,
        {**options, "limit": limit, "alpha": alpha, "activation_first": activation_first},
    )
    returned = all_to_all(outputs, group, output_splits=send_splits, input_splits=recv_splits)

    weighted = returned * top_k_weights.reshape(-1)[order].unsqueeze(-1)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)
    per_pair = weighted[inverse].view(num_tokens, top_k, -1)
    return per_pair.sum(dim=1).to(hidden_states.dtype)
