"""FSDP2 over a generated model: ``fully_shard`` per decoder layer, then at the root.

The decoder layers are the modules named by the model's ``_no_split_modules`` (every transformers
model declares them), so the same function shards any generated model. Dense parameters are sharded
over the data mesh (every rank). Experts that :func:`~models.distributed.expert_parallel.apply_expert_parallel`
already split over the ep ranks are different tensors on different ep ranks, so they get their own
FSDP unit on the ``ep_replicate`` mesh (the ranks holding the same experts): the module that owns them
(the MoE block, whose forward runs) is sharded there, after its other children (the router, shared
experts) were given units on the data mesh. Order: innermost first, as ``fully_shard`` requires.

Expert shard dim: FSDP shards a parameter on dim 0 by default, padding it when the dim does not divide by
the mesh, and an expert tensor's dim 0 is its local experts (e.g. 128 experts, ep=8, 256 ranks: 16 local
experts over 32 ``ep_replicate`` ranks, so half the ranks would hold padding only, and every all-gather
moves twice the bytes). When the local expert count does not divide by the expert unit's shard size,
the experts are sharded on dim 1 instead (their rows, through ``fully_shard``'s ``shard_placement_fn``),
if that dim divides; otherwise dim 0 with padding, as before.

HSDP: with ``ParallelState.build(replicate=r)`` every unit gets the 2-D mesh (``state.fsdp_mesh``,
``state.expert_fsdp_mesh``): sharded within a replica, gradients all-reduced across replicas.

Gradients: FSDP divides a unit's reduced gradients by its mesh size. For an expert unit that is the
``ep_replicate`` size, but an expert's gradient already sums the tokens of its ``ep`` ranks (the
all-to-all brings them), so expert units divide by the world size, like the dense units: the result
is the one-process gradient of the global batch for every parameter the plan shards, weights and
biases alike.

Precision: ``reduce_dtype`` defaults to fp32, so a bf16 ``param_dtype`` computes in bf16 but never
reduce-scatters gradients in bf16. The routers (the modules the model records ``router_logits`` from)
get their own unit computing in fp32 under a low-precision policy: routing decisions and the
load-balancing loss's softmax then see the same logits a fp32 run sees, up to the bf16 hidden state.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Shard

from modelgraft.models.distributed.mesh import ParallelConfigError, ParallelState

__all__ = ["apply_fsdp", "decoder_layers", "expert_shard_dim", "mixed_precision", "router_modules"]


def mixed_precision(
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = torch.float32,
    output_dtype: torch.dtype | None = None,
) -> MixedPrecisionPolicy:
    """FSDP2's policy: compute in ``param_dtype`` (e.g. bf16), reduce gradients in ``reduce_dtype`` (fp32 by
    default: summing bf16 gradients over ranks loses the low bits of every rank's share)."""
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, output_dtype=output_dtype)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The modules whose class the model, or a sub-model it holds, lists in ``_no_split_modules`` (its decoder and
    vision blocks), outermost only: a listed module inside another (Idefics2's ``Idefics2MLP`` in its
    ``Idefics2PerceiverLayer``) is part of that one's unit, as FSDP cannot shard parameters its enclosing unit
    already holds. The sub-models' lists count because a composed model's own list may name only its tower's
    blocks (Idefics3's), while the language model it built from its text config lists the decoder layers."""
    names = {name for module in model.modules() for name in getattr(module, "_no_split_modules", None) or ()}
    layers: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():  # pre-order: a module comes before what it holds
        if id(module) in inside or module is model or type(module).__name__ not in names:
            continue
        layers.append(module)
        inside.update(id(sub) for sub in module.modules())
    if not layers:
        raise ParallelConfigError(
            f"{type(model).__name__} names no decoder layer in _no_split_modules ({sorted(names)}); cannot shard per layer"
        )
    return layers


def router_modules(model: nn.Module) -> list[nn.Module]:
    """The modules the model records ``router_logits`` from (its ``_can_record_outputs``): its routers.

    Read from the model's own declaration rather than from names, so every generated MoE model that
    outputs router logits is covered; a model without that entry (dense, or routed by score only) has none.
    """
    recorder = (getattr(model, "_can_record_outputs", None) or {}).get("router_logits")
    if recorder is None:
        return []
    target = getattr(recorder, "target_class", recorder)
    if not isinstance(target, type):
        return []
    return [module for module in model.modules() if isinstance(module, target)]


def _low_precision(dtype: torch.dtype | None) -> bool:
    return dtype is not None and dtype != torch.float32 and dtype.is_floating_point


def _router_policy() -> MixedPrecisionPolicy:
    """The policy of a router unit: fp32 compute (inputs cast to fp32), fp32 outputs and reduction."""
    return MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, output_dtype=torch.float32)


_VIEW_WARNING = r"FSDP2-wrapped module \({}\) returned a view tensor"


def _guard_view_outputs(block: nn.Module, layer: nn.Module) -> None:
    """Make the view FSDP warns about safe to return, for ``block`` inside ``layer``.

    FSDP registers its pre-backward hook on the tensors a unit returns; an in-place op on a returned view
    (``out += residual``) would drop that hook and skip the backward all-gather. The generated MoE blocks
    return ``final.reshape(...)`` (a view). The decoder layer adds it out of place, but instead of trusting
    that, this records the version counter of every returned view and checks it when the layer's forward
    ends: an in-place op on the view raises there, before any wrong gradient can exist. With that check in
    place, FSDP's per-step warning about this block is silenced (for this class only).
    """
    pending: list[tuple[torch.Tensor, int]] = []

    def record(module: nn.Module, args: Any, output: Any) -> None:
        outputs = output if isinstance(output, tuple) else (output,)
        pending.extend((t, t._version) for t in outputs if isinstance(t, torch.Tensor) and t._base is not None)

    def check(module: nn.Module, args: Any, output: Any) -> None:
        changed = [t for t, version in pending if t._version != version]
        pending.clear()
        if changed:
            raise RuntimeError(
                f"{type(layer).__name__} modified the output of {type(block).__name__} in place; under FSDP that "
                "output is a view carrying the backward all-gather hook, which an in-place op drops. "
                "Use an out-of-place op (out = out + residual)."
            )

    block.register_forward_hook(record)
    layer.register_forward_hook(check)
    warnings.filterwarnings("ignore", message=_VIEW_WARNING.format(re.escape(type(block).__name__)))


def expert_shard_dim(shape: tuple[int, ...] | torch.Size, shard_size: int) -> int:
    """The dim FSDP shards an expert tensor of ``shape`` on over ``shard_size`` ranks: 0 (its experts) when
    they divide evenly, else 1 when that dim does (no padding), else 0 (padded, as FSDP's default)."""
    if shape[0] % shard_size == 0 or len(shape) < 2 or shape[1] % shard_size:
        return 0
    return 1


def _shard_size(mesh: DeviceMesh) -> int:
    """How many ranks a unit on ``mesh`` shards over: the last dim (HSDP's first dim replicates)."""
    return mesh.size(mesh.ndim - 1)


def _shard_experts(
    layer: nn.Module, state: ParallelState, policy: MixedPrecisionPolicy, reshard: bool, routers: set[int]
) -> None:
    """Give the expert-parallel parameters of ``layer`` their own FSDP units on the ep_replicate mesh."""
    for name, module in list(layer.named_modules()):
        if "_ep_shards" not in module.__dict__:
            continue
        unsharded = [n for n, _ in module.named_parameters(recurse=False) if n not in module.__dict__["_ep_shards"]]
        if unsharded:
            raise ParallelConfigError(
                f"{type(module).__name__} holds parameters {unsharded} that the parallel plan does not shard next to "
                f"sharded experts; they would share the experts' FSDP unit and its gradient scaling"
            )
        parent_name, _, child_name = name.rpartition(".")
        parent = layer.get_submodule(parent_name) if parent_name else layer
        if parent is layer:
            raise ParallelConfigError(f"expert module {name!r} must sit inside a block below the decoder layer")
        stray = [n for n, _ in parent.named_parameters(recurse=False)]
        if stray:
            raise ParallelConfigError(f"{type(parent).__name__} holds parameters {stray} outside its children")
        for sibling_name, sibling in parent.named_children():
            if sibling_name != child_name and id(sibling) not in routers and any(True for _ in sibling.parameters()):
                fully_shard(sibling, mesh=state.fsdp_mesh, mp_policy=policy, reshard_after_forward=reshard)
        mesh = state.expert_fsdp_mesh
        shard_size = _shard_size(mesh)
        unit = fully_shard(
            parent,
            mesh=mesh,
            mp_policy=policy,
            reshard_after_forward=reshard,
            shard_placement_fn=lambda param, size=shard_size: Shard(expert_shard_dim(param.shape, size)),
        )
        # An expert's gradient already sums its ep ranks' tokens: divide by the world, as the dense units do.
        unit.set_gradient_divide_factor(float(state.world_size))
        if shard_size > 1 and dist.get_backend(state.ep_replicate_group) == "gloo":
            # gloo has no PREMUL_SUM: sum, then divide. Not when the unit shards over one rank (its
            # replicas, under HSDP, sum plainly): there FSDP divides the copied gradient by the factor and
            # then again as the post-divide of a forced sum (factor squared).
            unit.set_force_sum_reduction_for_comms(True)
        _guard_view_outputs(parent, layer)


def apply_fsdp(
    model: nn.Module,
    state: ParallelState,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = torch.float32,
    output_dtype: torch.dtype | None = None,
    reshard_after_forward: bool = True,
    fp32_routers: bool = True,
) -> FSDPModule:
    """Shard ``model`` in place with FSDP2 and return it: each decoder layer is a unit, the root holds the rest.

    Gradients are averaged over the data ranks by FSDP's reduce-scatter (over the ep_replicate ranks for
    expert-parallel parameters, divided by the world size). ``reduce_dtype`` is fp32 unless asked otherwise.
    With a low-precision ``param_dtype`` and ``fp32_routers``, every router (:func:`router_modules`) is a
    unit of its own computing in fp32. Apply expert parallelism first, FSDP last.
    """
    policy = mixed_precision(param_dtype, reduce_dtype, output_dtype)
    routers = router_modules(model) if fp32_routers and _low_precision(param_dtype) else []
    for router in routers:
        fully_shard(
            router, mesh=state.fsdp_mesh, mp_policy=_router_policy(), reshard_after_forward=reshard_after_forward
        )
    router_ids = {id(router) for router in routers}
    for layer in decoder_layers(model):
        _shard_experts(layer, state, policy, reshard_after_forward, router_ids)
        fully_shard(layer, mesh=state.fsdp_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=state.fsdp_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    return model  # type: ignore[return-value]
