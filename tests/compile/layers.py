"""The zoo's decoder layers as the compile tests take them, with their inputs, kernel bindings and a training step.

Which models: every package of ``modelgraft.models`` whose parity declaration is a text decoder (a
``DenseModel``, dense or MoE) or a hybrid one (a declaration whose text config mixes ``linear_attention``
layers, Qwen3.5's Gated DeltaNet), built from the tiny config its own tests use. Which layers: the first
decoder layer, for a MoE model the first sparse layer when that is another one, and then the first layer
that calls a slot none taken before it calls (a hybrid model's first full-attention layer, DeepSeek-V4's
first layer with an indexer), so that every slot a model's layers call is called by a layer taken. Only
the first and first sparse layers are run compiled (``LayerCase.compiled``); the others are traced. Each
layer's inputs are recorded by a forward pre-hook during an eager forward of the whole tiny model (batch
2 x 7 tokens, no cache, eval mode so that no dropout draw differs between two runs), once per process and
dtype.

MoE models run upstream's ``batched_mm`` experts here: the parity suites pin ``experts_implementation="eager"``,
upstream's per-expert loop, which breaks the graph by design (``test_untraceable.py``), and upstream's
default ``grouped_mm`` needs 16-byte aligned strides on CPU in bf16, which the tiny sizes do not have.

Kernel cases of a layer: ``unbound`` (upstream's code in every slot); ``reference`` (every slot the layer
calls bound to its reference kernel, ``modelgraft.models.ops.kernels.eager``, except the references that
declare themselves untraceable, ``eager.UNTRACEABLE``, whose slots stay unbound); and, where any serves it,
every CPU kernel family that serves a slot the layer calls, bound at once on those slots as a CPU training
run binds them (``grouped``, ``grouped+chunked_delta``, ...). The slots a layer calls are those it calls
with every reference kernel bound, counted in one eager forward.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import cache

import torch
from torch import nn

from modelgraft import models
from modelgraft.models.loader import build_model
from modelgraft.models.ops import OpsConfig, bound_ops
from modelgraft.models.testing import layer_compile
from modelgraft.models.testing.declarations import parity_declaration
from modelgraft.models.testing.dense_suite import DenseModel
from modelgraft.models.testing.layer_compile import (
    CPU_FAMILIES,
    TOLERANCES,
    LayerInputs,
    Step,
    assert_steps_match,
    decoder_layers,
    is_sparse,
    record_layer_inputs,
    slots_called,
    training_step,
)
from modelgraft.models.testing.moe_suite import MoeModel
from modelgraft.models.testing.vlm_moe_suite import VlmMoeModel
from modelgraft.models.testing.vlm_suite import VlmModel

__all__ = [
    "CPU_FAMILIES",
    "LAYERS",
    "TOLERANCES",
    "LayerCase",
    "Step",
    "assert_steps_match",
    "bound",
    "called_slots",
    "kernel_cases",
    "layer_and_inputs",
    "training_step",
]


#: The batch every model is recorded with: token ids below every tiny vocabulary's special tokens.
BATCH, SEQUENCE, FIRST_ID, LAST_ID = 2, 7, 3, 20


def _text_decoder(package: str) -> DenseModel | VlmModel | None:
    """The package's declaration when its model is a text decoder or a hybrid one, else None."""
    declaration = parity_declaration(package)
    if isinstance(declaration, DenseModel):
        return declaration
    if isinstance(declaration, VlmModel) and "linear_attention" in declaration.text_config.get("layer_types", ()):
        return declaration
    return None


@dataclass(frozen=True)
class LayerCase:
    """One decoder layer of one zoo model: the package, the layer's index, and why it was taken."""

    package: str
    index: int
    role: str  # "first", "first sparse", or "calls <slots>" (slots no layer taken before it calls)

    @property
    def id(self) -> str:
        return f"{self.package}-layer{self.index}"

    @property
    def compiled(self) -> bool:
        """Whether the compile tests run it compiled (the first and first sparse layers), not only trace it."""
        return self.role in ("first", "first sparse")

    @property
    def in_parity_suite(self) -> bool:
        """Whether the model's own parity suite traces this layer in every kernel case and trains it compiled in fp32
        (a first or first sparse layer: ``layer_compile.check_first_layers_compile``, run by the dense and VLM suites)."""
        return self.compiled


@dataclass
class _Recorded:
    model: nn.Module
    layers: nn.ModuleList
    inputs: dict[int, LayerInputs]


@cache
def _recorded(package: str, dtype: torch.dtype) -> _Recorded:
    declaration = _text_decoder(package)
    assert declaration is not None, package
    moe = isinstance(declaration, (MoeModel, VlmMoeModel))
    config = declaration.config(**({"experts_implementation": "batched_mm"} if moe else {}))
    torch.manual_seed(0)
    model = build_model(config, architecture=declaration.causal_lm).to(dtype).eval()
    ids = torch.randint(FIRST_ID, LAST_ID, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(0))
    with bound_ops(OpsConfig()):
        inputs = record_layer_inputs(model, {"input_ids": ids})
    return _Recorded(model, decoder_layers(model), inputs)


def _layer_cases() -> list[LayerCase]:
    cases = []
    for package in models.MODEL_PACKAGES:
        if _text_decoder(package) is None:
            continue
        layers = _recorded(package, torch.float32).layers
        taken = [LayerCase(package, 0, "first")]
        sparse = next((i for i, layer in enumerate(layers) if is_sparse(layer)), None)
        if sparse is not None and sparse != 0:
            taken.append(LayerCase(package, sparse, "first sparse"))
        covered = set().union(*(_slots_called_by(package, case.index) for case in taken))
        for index in range(len(layers)):
            new = _slots_called_by(package, index) - covered
            if new:
                taken.append(LayerCase(package, index, f"calls {', '.join(sorted(new))}"))
                covered |= new
        cases += sorted(taken, key=lambda case: case.index)
    return cases


def layer_and_inputs(case: LayerCase, dtype: torch.dtype) -> tuple[nn.Module, tuple[object, ...], dict[str, object]]:
    """The layer of ``case`` in ``dtype`` (shared by the tests of a process: they must not change it), and its inputs."""
    recorded = _recorded(case.package, dtype)
    args, kwargs = recorded.inputs[case.index]
    return recorded.layers[case.index], args, kwargs


@cache
def _slots_called_by(package: str, index: int) -> frozenset[str]:
    """The slots layer ``index`` of ``package`` calls with every reference kernel bound (one eager fp32 forward)."""
    recorded = _recorded(package, torch.float32)
    return slots_called(recorded.layers[index], recorded.inputs[index])


#: Every decoder layer the compile tests take, in package order, then layer order.
LAYERS: list[LayerCase] = _layer_cases()


def called_slots(case: LayerCase) -> frozenset[str]:
    """The slots the layer of ``case`` calls with every reference kernel bound."""
    return _slots_called_by(case.package, case.index)


def kernel_cases(case: LayerCase) -> list[str]:
    """``layer_compile.kernel_cases`` of the layer of ``case``: ``unbound``, ``reference`` and its CPU families."""
    return layer_compile.kernel_cases(called_slots(case))


def bound(case: LayerCase, kernels: str) -> AbstractContextManager[None]:
    """The bindings of the kernel case ``kernels`` for the layer of ``case``, restored after the block."""
    return layer_compile.bound(called_slots(case), kernels)
