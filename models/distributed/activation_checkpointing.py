"""Activation checkpointing per decoder layer, through torch's ``checkpoint_wrapper``.

A checkpointed layer keeps only its inputs from the forward pass and recomputes everything else during
backward, so the activations held between forward and backward drop from every intermediate of every
layer to one hidden state per layer, at the price of a second forward per layer.

The layers are the model's ``_no_split_modules`` (:func:`~models.distributed.fsdp.decoder_layers`), the same
units FSDP shards, and each one is replaced in its parent by ``checkpoint_wrapper(layer)`` with torch's
non-reentrant implementation (``torch.utils.checkpoint`` with ``use_reentrant=False``): it composes with
FSDP2's hooks, with autograd through the all-to-alls of expert parallelism and Ulysses, and with keyword
arguments. Order, as torchtitan applies it: parallelism plans first (:func:`apply_expert_parallel`,
``register_ulysses``), then :func:`apply_activation_checkpointing`, then :func:`apply_fsdp` last. Under
FSDP the recomputed forward runs inside the layer's backward, when FSDP has already all-gathered the
layer's parameters for it, so checkpointing costs compute, not communication.

The wrapper registers the layer as ``_checkpoint_wrapped_module``: ``named_parameters`` gains that
component, while ``state_dict`` keys do not (the wrapper strips it), so checkpoints are unchanged;
:func:`~models.distributed.full_state` strips it too.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    _CHECKPOINT_PREFIX,
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)

from modelgraft.models.distributed.fsdp import decoder_layers

__all__ = ["CHECKPOINT_PREFIX", "apply_activation_checkpointing", "checkpointed_layers", "strip_checkpoint_prefix"]

#: The name component ``checkpoint_wrapper`` inserts in front of the wrapped layer's parameters.
CHECKPOINT_PREFIX: str = _CHECKPOINT_PREFIX


def strip_checkpoint_prefix(name: str) -> str:
    """A parameter name as the unwrapped model spells it (``layers.0._checkpoint_wrapped_module.x`` -> ``layers.0.x``)."""
    return name.replace(CHECKPOINT_PREFIX, "")


def checkpointed_layers(model: nn.Module) -> list[nn.Module]:
    """The layers :func:`apply_activation_checkpointing` wrapped (the wrapped modules, not the wrappers)."""
    return [module._checkpoint_wrapped_module for module in model.modules() if isinstance(module, CheckpointWrapper)]


def apply_activation_checkpointing(model: nn.Module) -> list[nn.Module]:
    """Wrap every decoder layer of ``model`` in place in ``checkpoint_wrapper`` (non-reentrant); returns the
    wrappers.

    Idempotent per layer: a layer already wrapped is left alone, so calling it twice does not recompute twice.
    Dropout inside a layer sees the same random numbers in the recomputation (the wrapper restores the RNG
    state), so the gradients are those of the unwrapped model.
    """
    already = {id(layer) for layer in checkpointed_layers(model)}
    targets = {id(layer): layer for layer in decoder_layers(model) if id(layer) not in already}
    wrappers = []
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if id(child) in targets and not isinstance(parent, CheckpointWrapper):
                wrapper = checkpoint_wrapper(child, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
                parent.register_module(child_name, wrapper)
                wrappers.append(wrapper)
    return wrappers
