"""Compiling a model one decoder layer at a time, as training frameworks do (docs/compile.md).

:func:`compile_layers` compiles each layer's ``forward`` in place rather than its whole call
(``nn.Module.compile``): the hooks registered on the layer itself run outside the compiled code. Those are
upstream's hook that records the layer's output as a hidden state, and whatever a framework hangs on its layers
(``apply_fsdp``'s check that no layer modifies its MoE block's output in place reads a version counter, which broke
a compiled call's graph). Names, parameters and state-dict keys stay the layer's. Hooks on modules inside the layer
(upstream's recording of router logits and attentions) run inside the compiled code, which
:func:`trace_recorded_outputs` makes traceable; what they record is moved to the running forward's collector after
each layer.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from modelgraft.models.output_capture import flush_recorded_outputs, trace_recorded_outputs

__all__ = ["compile_layers"]


def _class_forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    # The class's forward as the call finds it, not as it was when compiled: fully_shard swaps a layer's class for a
    # subclass, and transformers' checkpointing wrapper checks that it is the outermost forward of that class.
    return type(module).forward(module, *args, **kwargs)


def _class_forward_of_its_own() -> Callable[..., Any]:
    """:func:`_class_forward` under a code object of its own.

    Dynamo keeps compiled code per code object, and its recompile limit (8) counts every layer class and input shape
    compiled through that object: one function shared by every layer class would run the ninth class eagerly, or fail
    it under ``fullgraph=True``, the way ``nn.Module.compile``'s one ``_call_impl`` does.
    """
    return types.FunctionType(_class_forward.__code__.replace(), _class_forward.__globals__, _class_forward.__name__)


class _CompiledForward:
    """A layer's compiled ``forward``: an object holding the layer, so that ``copy.deepcopy`` of the model gives the
    copy's layers a forward of their own (a closure would be shared, and run the original layer's weights)."""

    def __init__(self, compiled: Callable[..., Any], module: nn.Module) -> None:
        self.compiled = compiled
        self.module = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.compiled(self.module, *args, **kwargs)
        finally:
            flush_recorded_outputs()


def compile_layers(layers: Iterable[nn.Module], **options: Any) -> list[nn.Module]:
    """Compile each of ``layers`` in place with ``torch.compile(**options)`` (``fullgraph``, ``backend``, ...);
    returns them.

    Each layer's ``forward`` is replaced by the compiled one, so its hooks stay outside the compiled code. Compile
    before ``fully_shard``, as torchtitan orders it. Recorded outputs are made traceable first
    (:func:`~modelgraft.models.output_capture.trace_recorded_outputs`), so a forward that records router logits for
    the aux loss, or hidden states, runs the layers as one graph each. Layers of one class share their compiled code;
    each class compiled by one call has code, and a recompile limit, of its own.
    """
    trace_recorded_outputs()
    compiled_by_class: dict[type[nn.Module], Callable[..., Any]] = {}
    done = []
    for layer in layers:
        cls = type(layer)
        if cls not in compiled_by_class:
            compiled_by_class[cls] = torch.compile(_class_forward_of_its_own(), **options)
        layer.forward = _CompiledForward(compiled_by_class[cls], layer)
        done.append(layer)
    return done
