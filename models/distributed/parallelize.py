"""``parallelize(model, state)``: the common path of a training script in one call.

torchtitan's order, each step one of this package's functions, for one model and one
:class:`~models.distributed.mesh.ParallelState`:

1. :func:`~models.distributed.expert_parallel.apply_expert_parallel`: keep this rank's experts (a model
   without a parallel plan, a dense one, is left as it is);
2. :func:`~models.distributed.scope.attach_parallel`: the model's kernels (``ops``, wrapped by the
   distributed ones: the global batch's loss, the expert all-to-all, Ulysses) bound around its own calls only;
3. optionally :func:`~models.distributed.activation_checkpointing.apply_activation_checkpointing`;
4. :func:`~models.distributed.fsdp.apply_fsdp`: FSDP2 per decoder layer, last.

A script that needs another order, or a step in between (a checkpoint loaded after expert parallelism and
before FSDP), calls the four functions itself (docs/distributed.md, "A training script").
"""

from __future__ import annotations

from typing import Any

from torch import nn

from modelgraft.models.distributed.activation_checkpointing import apply_activation_checkpointing
from modelgraft.models.distributed.expert_parallel import apply_expert_parallel
from modelgraft.models.distributed.fsdp import apply_fsdp
from modelgraft.models.distributed.mesh import ParallelState
from modelgraft.models.distributed.scope import attach_parallel
from modelgraft.models.ops import OpsConfig

__all__ = ["parallelize"]


def parallelize(
    model: nn.Module,
    state: ParallelState,
    *,
    ops: OpsConfig | None = None,
    activation_checkpointing: bool = False,
    **fsdp: Any,
) -> nn.Module:
    """Shard ``model`` under ``state`` and give it its kernels; returns the FSDP-wrapped model.

    Build the model without ``ops=`` (identically on every rank: same seed, or on meta) and pass its kernels
    here as ``ops``: they run inside the distributed ones. ``fsdp`` goes to ``apply_fsdp`` (``param_dtype``,
    ``reduce_dtype``, ``reshard_after_forward``, ...). Nothing process-wide changes, so other models in the
    process (an eval copy, a teacher) keep their own settings.
    """
    apply_expert_parallel(model, state)
    attach_parallel(model, state, ops)
    if activation_checkpointing:
        apply_activation_checkpointing(model)
    return apply_fsdp(model, state, **fsdp)
