"""FSDP2 over a generated model: ``fully_shard`` per decoder layer, then at the root.

The decoder layers are the modules named by the model's ``_no_split_modules`` (every transformers
model declares them), so the same function shards any generated model. Dense parameters are sharded
over the data mesh (every rank). Experts that :func:`~models.distributed.expert_parallel.apply_expert_parallel`
already split over the ep ranks are different tensors on different ep ranks, so they get their own
FSDP unit on the ``ep_replicate`` mesh (the ranks holding the same experts): the module that owns them
(the MoE block, whose forward runs) is sharded there, after its other children (the router, shared
experts) were given units on the data mesh. Order: innermost first, as ``fully_shard`` requires.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from modelgraft.models.distributed.mesh import ParallelConfigError, ParallelState

__all__ = ["apply_fsdp", "decoder_layers", "mixed_precision"]


def mixed_precision(
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype | None = None,
) -> MixedPrecisionPolicy:
    """FSDP2's policy: compute in ``param_dtype`` (e.g. bf16), reduce gradients in ``reduce_dtype`` (e.g. fp32)."""
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, output_dtype=output_dtype)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The modules whose class the model lists in ``_no_split_modules`` (its decoder / vision blocks)."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    layers = [module for module in model.modules() if type(module).__name__ in names and module is not model]
    if not layers:
        raise ParallelConfigError(
            f"{type(model).__name__} names no decoder layer in _no_split_modules ({sorted(names)}); cannot shard per layer"
        )
    return layers


def _shard_experts(layer: nn.Module, state: ParallelState, policy: MixedPrecisionPolicy, reshard: bool) -> None:
    """Give the expert-parallel parameters of ``layer`` their own FSDP units on the ep_replicate mesh."""
    for name, module in list(layer.named_modules()):
        if "_ep_shards" not in module.__dict__:
            continue
        parent_name, _, child_name = name.rpartition(".")
        parent = layer.get_submodule(parent_name) if parent_name else layer
        if parent is layer:
            raise ParallelConfigError(f"expert module {name!r} must sit inside a block below the decoder layer")
        stray = [n for n, _ in parent.named_parameters(recurse=False)]
        if stray:
            raise ParallelConfigError(f"{type(parent).__name__} holds parameters {stray} outside its children")
        for sibling_name, sibling in parent.named_children():
            if sibling_name != child_name and any(True for _ in sibling.parameters()):
                fully_shard(sibling, mesh=state.data_mesh, mp_policy=policy, reshard_after_forward=reshard)
        fully_shard(parent, mesh=state.ep_mesh["ep_replicate"], mp_policy=policy, reshard_after_forward=reshard)


def apply_fsdp(
    model: nn.Module,
    state: ParallelState,
    *,
    param_dtype: torch.dtype | None = None,
    reduce_dtype: torch.dtype | None = None,
    output_dtype: torch.dtype | None = None,
    reshard_after_forward: bool = True,
) -> FSDPModule:
    """Shard ``model`` in place with FSDP2 and return it: each decoder layer is a unit, the root holds the rest.

    Gradients are averaged over the data ranks by FSDP's reduce-scatter (over the ep_replicate ranks for
    expert-parallel parameters). Apply expert parallelism first, FSDP last.
    """
    policy = mixed_precision(param_dtype, reduce_dtype, output_dtype)
    for layer in decoder_layers(model):
        _shard_experts(layer, state, policy, reshard_after_forward)
        fully_shard(layer, mesh=state.data_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=state.data_mesh, mp_policy=policy, reshard_after_forward=reshard_after_forward)
    return model  # type: ignore[return-value]
