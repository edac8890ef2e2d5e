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

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from modelgraft import models
from modelgraft.models.loader import build_model
from modelgraft.models.ops import KERNEL_FAMILIES, SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing.declarations import parity_declaration
from modelgraft.models.testing.dense_suite import DenseModel
from modelgraft.models.testing.moe_suite import MoeModel
from modelgraft.models.testing.reference import reference_kernel
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
    "kernel_cases",
    "layer_and_inputs",
    "training_kernels",
    "training_step",
]

#: Kernel families that run on a CPU: pure torch, no process group (GPU-only and NPU families are out of scope),
#: nothing compiled inside. The families that compile with inductor at run time are left out: ``grouped_compiled``
#: is ``grouped``'s operators with a block compiled by inductor, so it traces as ``grouped`` does, and binding both
#: would leave one slot two kernels; ``compiled`` runs the eager references of its slots when traced. Both need a
#: C++ compiler; both are bound in a sparse decoder layer that test_kernels.py traces and runs compiled.
CPU_FAMILIES: tuple[str, ...] = tuple(
    sorted(
        name
        for name, family in KERNEL_FAMILIES.items()
        if not (family.distributed or family.requires_cuda or family.requires_packages or family.requires_cpp_compiler)
    )
)

#: (rtol, atol) of a compiled step against the eager one, by dtype: torch.testing's defaults. aot_eager runs the
#: same aten operators as eager mode, so in practice the two agree to the bit.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {torch.float32: (1.3e-6, 1e-5), torch.bfloat16: (1.6e-2, 1e-5)}

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


@dataclass
class _Recorded:
    model: nn.Module
    layers: nn.ModuleList
    inputs: dict[int, tuple[tuple[Any, ...], dict[str, Any]]]


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) and type(module[0]).__name__.endswith("DecoderLayer"):
            return module
    raise LookupError(f"{type(model).__name__} has no list of decoder layers")


def _is_sparse(layer: nn.Module) -> bool:
    return any(name.endswith("experts.gate_up_proj") for name, _ in layer.named_parameters())


@cache
def _recorded(package: str, dtype: torch.dtype) -> _Recorded:
    declaration = _text_decoder(package)
    assert declaration is not None, package
    moe = isinstance(declaration, (MoeModel, VlmMoeModel))
    config = declaration.config(**({"experts_implementation": "batched_mm"} if moe else {}))
    torch.manual_seed(0)
    model = build_model(config, architecture=declaration.causal_lm).to(dtype).eval()
    layers = _decoder_layers(model)
    inputs: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}

    def keep(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            inputs.setdefault(index, (args, kwargs))

        return hook

    hooks = [layer.register_forward_pre_hook(keep(i), with_kwargs=True) for i, layer in enumerate(layers)]
    ids = torch.randint(FIRST_ID, LAST_ID, (BATCH, SEQUENCE), generator=torch.Generator().manual_seed(0))
    try:
        with torch.no_grad(), bound_ops(OpsConfig()):
            model(input_ids=ids, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return _Recorded(model, layers, inputs)


def _layer_cases() -> list[LayerCase]:
    cases = []
    for package in models.MODEL_PACKAGES:
        if _text_decoder(package) is None:
            continue
        layers = _recorded(package, torch.float32).layers
        taken = [LayerCase(package, 0, "first")]
        sparse = next((i for i, layer in enumerate(layers) if _is_sparse(layer)), None)
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


def layer_and_inputs(case: LayerCase, dtype: torch.dtype) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """The layer of ``case`` in ``dtype`` (shared by the tests of a process: they must not change it), and its inputs."""
    recorded = _recorded(case.package, dtype)
    args, kwargs = recorded.inputs[case.index]
    return recorded.layers[case.index], args, kwargs


@contextmanager
def _references(slots: frozenset[str], calls: Counter[str] | None = None) -> Iterator[None]:
    """``slots`` bound to their reference kernels (counting calls into ``calls`` when given); restored after."""

    def kernel(slot: str) -> Callable[..., Any]:
        reference = reference_kernel(slot)
        if calls is None:
            return reference

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[slot] += 1
            return reference(*args, **kwargs)

        return counted

    with bound_ops(OpsConfig()):
        for slot in slots:
            SLOTS[slot].bind(kernel(slot), name=f"reference.{slot}")
        yield


@cache
def _slots_called_by(package: str, index: int) -> frozenset[str]:
    """The slots layer ``index`` of ``package`` calls with every reference kernel bound (one eager fp32 forward)."""
    recorded = _recorded(package, torch.float32)
    args, kwargs = recorded.inputs[index]
    calls: Counter[str] = Counter()
    with torch.no_grad(), _references(frozenset(SLOTS), calls):
        recorded.layers[index](*args, **kwargs)
    return frozenset(calls)


def _called_slots(case: LayerCase) -> frozenset[str]:
    return _slots_called_by(case.package, case.index)


#: Every decoder layer the compile tests take, in package order, then layer order.
LAYERS: list[LayerCase] = _layer_cases()


def kernel_cases(case: LayerCase) -> list[str]:
    """``unbound``, ``reference``, and the CPU families serving slots the layer calls, joined by ``+`` (all at once,
    as a CPU training run binds them), when there are any."""
    called = _called_slots(case)
    families = [family for family in CPU_FAMILIES if KERNEL_FAMILIES[family].slots & called]
    return ["unbound", "reference", *(["+".join(families)] if families else [])]


def training_kernels(case: LayerCase) -> str:
    """The kernel case a CPU training run of the layer has: its CPU families, or ``unbound`` where none serves it."""
    return kernel_cases(case)[-1] if len(kernel_cases(case)) > 2 else "unbound"


@contextmanager
def bound(case: LayerCase, kernels: str) -> Iterator[None]:
    """The bindings of the kernel case ``kernels`` for the layer of ``case``, restored after the block."""
    called = _called_slots(case)
    if kernels == "unbound":
        with bound_ops(OpsConfig()):
            yield
    elif kernels == "reference":
        with _references(frozenset(called - eager.UNTRACEABLE.keys())):
            yield
    else:
        families = kernels.split("+")
        with bound_ops(OpsConfig({slot: f for f in families for slot in KERNEL_FAMILIES[f].slots & called})):
            yield


@dataclass
class Step:
    """A forward and backward pass of a layer: its floating outputs, and the gradients by name ("input" first)."""

    outputs: list[torch.Tensor]
    grads: dict[str, torch.Tensor | None]


def training_step(call: Callable[..., Any], layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Step:
    """``call`` (the layer, or its compiled form) on a fresh copy of the hidden states, then backward.

    The loss weighs every output element by a fixed random number, so every element and every gradient
    matters; gradients are taken with ``torch.autograd.grad``, so the shared layer keeps no ``.grad``.
    """
    hidden = args[0].detach().clone().requires_grad_(True)
    out = call(hidden, *args[1:], **kwargs)
    outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    generator = torch.Generator().manual_seed(1)
    loss = sum((o.float() * torch.randn(o.shape, generator=generator)).sum() for o in outputs)
    named = [(name, p) for name, p in layer.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [hidden, *(p for _, p in named)], allow_unused=True)
    return Step([o.detach() for o in outputs], dict(zip(["input", *(name for name, _ in named)], grads, strict=True)))


def assert_steps_match(actual: Step, expected: Step, dtype: torch.dtype) -> None:
    """Outputs and every gradient of ``actual`` within :data:`TOLERANCES` of ``expected``, each named on failure."""
    rtol, atol = TOLERANCES[dtype]
    assert len(actual.outputs) == len(expected.outputs)
    for i, (got, want) in enumerate(zip(actual.outputs, expected.outputs, strict=True)):
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m, i=i: f"output {i}: {m}")
    assert actual.grads.keys() == expected.grads.keys()
    for name, want in expected.grads.items():
        got = actual.grads[name]
        assert (got is None) == (want is None), f"gradient of {name}: {got} against {want}"
        if want is not None:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m, n=name: f"gradient of {n}: {m}")
