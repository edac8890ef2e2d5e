"""Parallel settings that belong to one model, not to the process.

``bind_ops(parallel_ops(state))`` and ``register_ulysses(state)`` bind process groups process-wide: every
generated model in the process then runs the expert all-to-all, the global-batch losses and Ulysses
attention of that one state. A second model (an eval copy, a teacher, a reference) cannot keep settings of
its own; an unsharded MoE model would send its tokens to the ep ranks' experts as if it were sharded.

:func:`attach_parallel` gives a model its own: its kernels are bound only while it (or one of its
submodules) runs (``modelgraft.models.ops.attach_ops``), and its config names a Ulysses implementation
registered for its state alone (``modelgraft.models.distributed.ulysses.attach_ulysses``). Nothing
process-wide changes, so models with different states, or none, run side by side::

    model = build_model(config, attn_implementation="sdpa")
    apply_expert_parallel(model, state)
    attach_parallel(model, state, OpsConfig({"moe_experts": "grouped"}))
    apply_fsdp(model, state)
    reference = build_model(config)              # runs eager kernels and plain sdpa, whatever `model` does
"""

from __future__ import annotations

from torch import nn

from modelgraft.models.distributed.mesh import ParallelState
from modelgraft.models.distributed.ulysses import attach_ulysses
from modelgraft.models.ops import OpsConfig
from modelgraft.models.ops.binding import ModelOps, attach_ops
from modelgraft.models.ops.errors import OpsConfigError

__all__ = ["attach_parallel"]


def attach_parallel(model: nn.Module, state: ParallelState, base: OpsConfig | None = None) -> nn.Module:
    """Make ``model`` run under ``state`` only; returns ``model``.

    * kernels: ``parallel_ops(state, base)``, bound around each of the model's calls and restored after
      (``attach_ops``; a model can have one set of ops, so build it without ``ops=``);
    * attention: with ``sp > 1``, Ulysses over ``state``'s sp group, wrapping the model's implementation
      (``sdpa``, ``eager`` or ``fused_attention``).

    Call it before ``apply_fsdp`` (it hooks every submodule, as FSDP's units are made of them).
    """
    # Imported here: the package's __init__ may import this module before it defines parallel_ops.
    from modelgraft.models.distributed import parallel_ops

    ops = parallel_ops(state, base)
    # Everything that can refuse runs before anything changes: a model left half attached would run wrong.
    if getattr(model, "ops_config", None) is not None:
        raise OpsConfigError(f"{type(model).__name__} already runs under ops {dict(model.ops_config.kernels)}")
    ModelOps(ops)  # loads and checks every kernel
    attach_ulysses(model, state)  # refuses an implementation it cannot wrap before changing the model
    return attach_ops(model, ops)
