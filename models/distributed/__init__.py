"""Distributed training of generated models on torch.distributed: FSDP2, expert and sequence parallelism.

Everything is applied from outside the generated modeling, torchtitan-style, over one
:class:`~models.distributed.mesh.ParallelState`::

    state = ParallelState.build(sp=2, ep=2)            # meshes from torchrun's environment (replicate=r: HSDP)
    register_ulysses(state)                            # "ulysses_sdpa" / "ulysses_eager" / "ulysses_fused_attention"
    bind_ops(parallel_ops(state))                      # ep_alltoall experts, global-batch losses
    model = build_model(config, attn_implementation="ulysses_sdpa")
    apply_expert_parallel(model, state)                # keep this rank's experts (the model's plan)
    load_expert_parallel_checkpoint(model, path)       # optional: read only this rank's experts
    apply_activation_checkpointing(model)              # optional: recompute each decoder layer in backward
    apply_fsdp(model, state, param_dtype=torch.bfloat16)
    out = model(**shard_sequence(batch, state))        # out.loss: the loss of the global batch
    export_hub_checkpoint(model, state, "out/")        # the hub layout, for upstream's from_pretrained

See docs/distributed.md. Importing this package imports torch; ``import modelgraft.models`` does not import it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from modelgraft.models.distributed import linear_attention
from modelgraft.models.distributed.activation_checkpointing import (
    apply_activation_checkpointing,
    checkpointed_layers,
    strip_checkpoint_prefix,
)
from modelgraft.models.distributed.checkpoint import load_expert_parallel_checkpoint
from modelgraft.models.distributed.expert_parallel import (
    ExpertShard,
    apply_expert_parallel,
    expert_shards,
    full_tensor,
    validate_parallel_plan,
)
from modelgraft.models.distributed.export import export_hub_checkpoint
from modelgraft.models.distributed.fsdp import (
    apply_fsdp,
    decoder_layers,
    expert_shard_dim,
    mixed_precision,
    router_modules,
)
from modelgraft.models.distributed.gradients import accumulate, average_gradients, clip_grad_norm, grad_norm
from modelgraft.models.distributed.guard import PeerFailedError, fail_together
from modelgraft.models.distributed.losses import global_token_count
from modelgraft.models.distributed.materialize import UninitializedBufferError, materialize
from modelgraft.models.distributed.mesh import ParallelConfigError, ParallelState, hsdp_sizes, parallel_sizes
from modelgraft.models.distributed.multimodal import shard_multimodal
from modelgraft.models.distributed.parallelize import parallelize
from modelgraft.models.distributed.scope import attach_parallel
from modelgraft.models.distributed.sequence import gather_sequence, scatter_sequence, sequence_slice, shard_sequence
from modelgraft.models.distributed.sharded_load import load_sharded_checkpoint
from modelgraft.models.distributed.sparse_indexer import INNER_INDEXERS
from modelgraft.models.distributed.train_state import TrainProgress, load_train_state, save_train_state
from modelgraft.models.distributed.ulysses import register_ulysses
from modelgraft.models.ops import OpsConfig

__all__ = [
    "ExpertShard",
    "ParallelConfigError",
    "ParallelState",
    "PeerFailedError",
    "TrainProgress",
    "UninitializedBufferError",
    "accumulate",
    "apply_activation_checkpointing",
    "apply_expert_parallel",
    "apply_fsdp",
    "attach_parallel",
    "average_gradients",
    "checkpointed_layers",
    "clip_grad_norm",
    "decoder_layers",
    "expert_shard_dim",
    "expert_shards",
    "export_hub_checkpoint",
    "fail_together",
    "full_state",
    "full_tensor",
    "gather_sequence",
    "global_token_count",
    "grad_norm",
    "hsdp_sizes",
    "load_expert_parallel_checkpoint",
    "load_sharded_checkpoint",
    "load_train_state",
    "materialize",
    "mixed_precision",
    "parallel_ops",
    "parallel_sizes",
    "parallelize",
    "register_ulysses",
    "router_modules",
    "save_train_state",
    "scatter_sequence",
    "sequence_slice",
    "shard_multimodal",
    "shard_sequence",
    "strip_checkpoint_prefix",
    "validate_parallel_plan",
]


def parallel_ops(state: ParallelState, base: OpsConfig | None = None) -> OpsConfig:
    """``base`` (default: all eager) with the distributed kernels bound to ``state``'s groups.

    * ``moe_experts`` -> ``ep_alltoall`` over the ep group (when ``ep > 1``);
    * ``causal_lm_loss`` and ``load_balancing_loss`` -> ``global_batch`` over the data group (when the
      world has more than one rank); a ``chunked`` loss in ``base`` is kept as the inner kernel;
    * ``placeholder_features`` -> ``sp_placeholders`` over the sp group (when the world has more than one
      rank): a VLM or Omni forward keeps the tower features of its slice's placeholders, and a rank without
      images or audio runs the towers' ``dummy_forward`` (``modelgraft.models.distributed.multimodal``);
    * ``dsa_indexer`` -> ``sp_gather`` over the sp group (when ``sp > 1``): the indexer scores the rank's
      queries against every rank's keys; ``base``'s indexer kernel (eager or ``shared_keys``) runs inside;
    * ``causal_conv1d`` and ``chunk_gated_delta_rule`` -> ``sp_linear`` over the sp group (when ``sp > 1``):
      Gated DeltaNet layers read the previous ranks' conv inputs and run the delta rule over the whole
      sequence of the rank's heads (``modelgraft.models.distributed.linear_attention``); ``base``'s kernel of
      each slot runs inside.
    """
    base = base or OpsConfig()
    kernels = dict(base.kernels)
    options = {slot: dict(opts) for slot, opts in base.kernel_options.items()}
    if state.ep > 1:
        kernels["moe_experts"] = "ep_alltoall"
        options["moe_experts"] = {"group": state.ep_group}
    if state.world_size > 1:
        inner = base.kernel_for("causal_lm_loss")
        if inner not in ("eager", "chunked"):
            raise ParallelConfigError(f"the global-batch loss wraps 'eager' or 'chunked', not {inner!r}")
        loss_options: dict[str, Any] = {"group": state.data_group, "sp_group": state.sp_group, "inner": inner}
        if "chunk_size" in options.get("causal_lm_loss", {}):
            loss_options["chunk_size"] = options["causal_lm_loss"]["chunk_size"]
        kernels["causal_lm_loss"] = "global_batch"
        options["causal_lm_loss"] = loss_options
        kernels["load_balancing_loss"] = "global_batch"
        options["load_balancing_loss"] = {"group": state.data_group, "sp_group": state.sp_group}
        kernels["placeholder_features"] = "sp_placeholders"
        options["placeholder_features"] = {"group": state.sp_group}
    if state.sp > 1:
        inner_indexer = base.kernel_for("dsa_indexer")
        if inner_indexer not in INNER_INDEXERS:
            raise ParallelConfigError(
                f"the sequence-parallel DSA indexer wraps one of {INNER_INDEXERS}, not {inner_indexer!r}"
            )
        kernels["dsa_indexer"] = "sp_gather"
        options["dsa_indexer"] = {"group": state.sp_group, "inner": inner_indexer}
        for slot in ("causal_conv1d", "chunk_gated_delta_rule"):
            inner_linear = base.kernel_for(slot)
            if inner_linear not in linear_attention.inner_kernels(slot):
                raise ParallelConfigError(
                    f"the sequence-parallel {slot} wraps one of {linear_attention.inner_kernels(slot)}, "
                    f"not {inner_linear!r}"
                )
            kernels[slot] = linear_attention.FAMILY
            options[slot] = {"group": state.sp_group, "inner": inner_linear}
    return OpsConfig(kernels, kernel_options=options)


def full_state(model: nn.Module, state: ParallelState, *, grads: bool = False) -> dict[str, torch.Tensor]:
    """Every parameter (or its gradient) of a sharded model as one whole tensor, the same on every rank:
    FSDP's DTensors are gathered, expert-parallel chunks are gathered over the ep ranks. Collective.
    Names are the unwrapped model's: activation checkpointing's wrapper component is stripped."""
    experts = expert_shards(model)
    out = {}
    for name, param in model.named_parameters():
        tensor = param.grad if grads else param.detach()
        if tensor is None:
            tensor = torch.zeros_like(param)
        if name in experts:
            tensor = full_tensor(tensor, experts[name], state)
        elif hasattr(tensor, "full_tensor"):
            tensor = tensor.full_tensor()
        out[strip_checkpoint_prefix(name)] = tensor
    return out
