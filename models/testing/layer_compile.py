"""A model's first decoder layers as its user compiles them: traced as one graph, and compiled, trained as eagerly.

Training users compile each decoder layer (torchtitan compiles each block; ``layer.compile(fullgraph=True)``). The
parity suites run :func:`check_first_layers_compile` for every text model, so the promise holds for each model a
scaffold writes, in the zoo or outside it (a survey's models, a training repository's own), not for a list.

Which layers: the first decoder layer and, for a MoE model whose first layer is dense, the first sparse one. Their
inputs are recorded by forward pre-hooks during one eager forward of the whole tiny model (eval mode, so no
dropout draw differs between two runs), on upstream's model and on the generated one alike.

Kernel cases of a layer (:func:`kernel_cases`): ``unbound`` (upstream's code in every slot), ``reference`` (every
slot bound to its reference kernel, ``modelgraft.models.ops.kernels.eager``, but those that declare themselves
untraceable, ``eager.UNTRACEABLE``), and, where any serves a slot the layer calls, the CPU kernel families a CPU
training run binds, all at once (``grouped``, ``grouped+liger_cpu``, ...). The slots a layer calls are those it
calls with every reference kernel bound, counted in one eager forward.

What is checked (``torch._dynamo.explain``, then ``torch.compile(..., backend="aot_eager")``):

- under each case, the generated layer breaks its graph no more often than upstream's own layer does with slots
  unbound (0 for every layer of the zoo: a break there is upstream's code, and the message names its site);
- compiled (``fullgraph=True`` where it traces as one graph) with the kernels a CPU training run binds, the layer
  gives the eager outputs, input gradient and every parameter's gradient within :data:`TOLERANCES`. Where the
  compiled layer raises and upstream's own layer, compiled, raises the same error, the check skips, naming it: the
  failure is PyTorch's or upstream's code, which the generated layer runs too.

aot_eager runs the same aten operators as eager mode, so it needs no C++ compiler and the two agree to the bit in
practice; inductor's code generation is tested on the kernels that need it (docs/compile.md, "How the tests check
it"). MoE models run upstream's ``batched_mm`` experts here, on both sides: the parity suites pin ``eager``,
upstream's per-expert loop, which breaks the graph by design.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.utils import _pytree as pytree
from transformers.utils import output_capturing

from modelgraft.models.compiling import compile_layers
from modelgraft.models.ops import KERNEL_FAMILIES, SLOTS, OpsConfig, bound_ops
from modelgraft.models.ops.kernels import eager
from modelgraft.models.testing.reference import reference_kernel

__all__ = [
    "CPU_FAMILIES",
    "TOLERANCES",
    "TRACED_EXPERTS",
    "LayerInputs",
    "Step",
    "assert_steps_match",
    "bound",
    "check_first_layers_compile",
    "check_layers_compiled_while_recording",
    "compiled_step",
    "decoder_layers",
    "first_layers",
    "graph_breaks",
    "is_sparse",
    "kernel_cases",
    "record_layer_inputs",
    "slots_called",
    "training_kernels",
    "training_step",
]

#: Kernel families that run on a CPU: pure torch, no process group (GPU-only and NPU families are out of scope),
#: nothing compiled inside. The families that compile with inductor at run time are left out: ``grouped_compiled``
#: is ``grouped``'s operators with a block compiled by inductor, so it traces as ``grouped`` does, and binding both
#: would leave one slot two kernels; ``compiled`` runs the eager references of its slots when traced. Both need a
#: C++ compiler; tests/compile binds them in a sparse decoder layer that it traces and runs compiled.
CPU_FAMILIES: tuple[str, ...] = tuple(
    sorted(
        name
        for name, family in KERNEL_FAMILIES.items()
        if not (family.distributed or family.requires_cuda or family.requires_packages or family.requires_cpp_compiler)
    )
)

#: (rtol, atol) of a compiled step against the eager one, by dtype: torch.testing's defaults. aot_eager runs the
#: same aten operators as eager mode, so in practice the two agree to the bit.
TOLERANCES: Mapping[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}

#: Dynamo warns when it traces through ``functools.cache``: the reference kernels look their activation up through
#: one (``eager.activation_module``), which gives the same activation for a name every time, so tracing through it
#: is sound.
_CACHE_WARNING = "Dynamo detected a call to a `functools.lru_cache`"

#: The experts implementation both sides of a MoE model run in the check: upstream's ``batched_mm``, which traces.
#: The parity suites pin ``eager``, upstream's per-expert loop, whose routing-dependent shapes break the graph by
#: design (tests/compile/test_untraceable.py); ``grouped_mm`` needs 16-byte aligned strides on CPU in bf16, which
#: the tiny sizes do not have.
TRACED_EXPERTS = "batched_mm"

#: One recorded call of a layer: its positional and keyword arguments.
LayerInputs = tuple[tuple[Any, ...], dict[str, Any]]


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's list of decoder layers: the first ``ModuleList`` of ``*DecoderLayer`` modules (a VLM's towers come
    first and may be as long), else the first one as long as the text config's layer count (upstream names some
    layers ``*Block``; a hybrid model's list holds layers of several classes)."""
    config = getattr(model, "config", None)
    count = getattr(config.get_text_config(), "num_hidden_layers", None) if config is not None else None
    lists = [module for module in model.modules() if isinstance(module, nn.ModuleList) and len(module)]
    for module in lists:
        if type(module[0]).__name__.endswith("DecoderLayer"):
            return module
    for module in lists:
        if len(module) == count:
            return module
    raise LookupError(f"{type(model).__name__} has no list of decoder layers")


def is_sparse(layer: nn.Module) -> bool:
    """Whether the layer routes to experts (it holds expert parameters)."""
    return any(".experts." in f".{name}" for name, _ in layer.named_parameters())


def first_layers(layers: nn.ModuleList) -> list[int]:
    """The first layer, and the first sparse one where that is another."""
    sparse = next((index for index, layer in enumerate(layers) if is_sparse(layer)), None)
    return [0] if sparse in (None, 0) else [0, sparse]


def record_layer_inputs(model: nn.Module, batch: Mapping[str, Any]) -> dict[int, LayerInputs]:
    """Each decoder layer's first call in one eager forward of ``model`` on ``batch`` (no cache, no gradients)."""
    layers = decoder_layers(model)
    inputs: dict[int, LayerInputs] = {}

    def keep(index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            inputs.setdefault(index, (args, kwargs))

        return hook

    hooks = [layer.register_forward_pre_hook(keep(i), with_kwargs=True) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            model(**batch, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return inputs


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


def slots_called(layer: nn.Module, inputs: LayerInputs) -> frozenset[str]:
    """The slots ``layer`` calls with every reference kernel bound (one eager forward)."""
    args, kwargs = inputs
    calls: Counter[str] = Counter()
    with torch.no_grad(), _references(frozenset(SLOTS), calls):
        layer(*args, **kwargs)
    return frozenset(calls)


def kernel_cases(called: frozenset[str]) -> list[str]:
    """``unbound``, ``reference``, and the CPU families serving slots in ``called``, joined by ``+`` (all at once, as
    a CPU training run binds them), when there are any."""
    families = [family for family in CPU_FAMILIES if KERNEL_FAMILIES[family].slots & called]
    return ["unbound", "reference", *(["+".join(families)] if families else [])]


def training_kernels(called: frozenset[str]) -> str:
    """The kernel case a CPU training run of a layer calling ``called`` has: its CPU families, or ``unbound``."""
    cases = kernel_cases(called)
    return cases[-1] if len(cases) > 2 else "unbound"


@contextmanager
def bound(called: frozenset[str], kernels: str) -> Iterator[None]:
    """The bindings of the kernel case ``kernels`` for a layer calling ``called``, restored after the block."""
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


def graph_breaks(layer: Callable[..., Any], inputs: LayerInputs) -> list[str]:
    """Where dynamo breaks the graph of ``layer`` (a module or function) called on ``inputs``: each break's reason and
    its site in the code.

    ``explain`` lists a break only where dynamo compiled a graph before it. A break taken before any traced operation
    (at a layer's first statement, or right after another break) leaves no graph, and ``explain`` neither lists nor
    counts it: a layer that breaks only there would look like one graph. Dynamo also counts every break it takes by
    reason (``counters["graph_break"]``, which counts a break again each time dynamo restarts its analysis, so only
    which reasons occur is read from it). A reason found there that ``explain`` lists no break of is listed once, by
    that reason alone.
    """
    args, kwargs = inputs
    before = Counter(counters["graph_break"])
    torch._dynamo.reset()
    try:
        explanation = torch._dynamo.explain(layer)(*args, **kwargs)
        taken = Counter(counters["graph_break"])
    finally:
        torch._dynamo.reset()
    taken.subtract(before)
    listed = [
        f"{_first_line_of(reason.reason)} at {reason.user_stack[-1].filename}:{reason.user_stack[-1].lineno}"
        if reason.user_stack
        else _first_line_of(reason.reason)
        for reason in explanation.break_reasons
    ]
    explained = {_first_line_of(reason.reason) for reason in explanation.break_reasons}
    unlisted = sorted({_first_line_of(reason) for reason, count in taken.items() if count > 0} - explained)
    return listed + [f"{reason} (before any traced operation)" for reason in unlisted]


def _first_line_of(reason: str) -> str:
    return reason.splitlines()[0] if reason else ""


@dataclass
class Step:
    """A forward and backward pass of a layer: its floating outputs, and the gradients by name ("input" first)."""

    outputs: list[torch.Tensor]
    grads: dict[str, torch.Tensor | None]


def training_step(call: Callable[..., Any], layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Step:
    """``call`` (the layer, or its compiled form) on a fresh copy of the hidden states, then backward.

    The loss weighs every output element by a fixed random number, so every element and every gradient
    matters; gradients are taken with ``torch.autograd.grad``, so the layer keeps no ``.grad``. The numbers are
    drawn on the CPU, so a layer on a device is weighed as on the CPU.
    """
    hidden = args[0].detach().clone().requires_grad_(True)
    out = call(hidden, *args[1:], **kwargs)
    outputs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    generator = torch.Generator().manual_seed(1)
    loss = sum((o.float() * torch.randn(o.shape, generator=generator).to(o.device)).sum() for o in outputs)
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


def check_first_layers_compile(upstream: nn.Module, generated: nn.Module, batch: Mapping[str, Any]) -> None:
    """The first (and first sparse) decoder layer of ``generated`` traces with no more graph breaks than upstream's
    under every kernel case, and compiled with aot_eager trains as it does eagerly (fp32).

    ``upstream`` and ``generated``: the same tiny config and weights (``build_pair``), in fp32; both are put in
    eval mode, and a MoE model's experts on :data:`TRACED_EXPERTS`. Fails naming the layer, the kernel case and each
    break's site.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_CACHE_WARNING)
        _check_first_layers(upstream.eval(), generated.eval(), batch)


def _check_first_layers(upstream: nn.Module, generated: nn.Module, batch: Mapping[str, Any]) -> None:
    for model in (upstream, generated):
        if any(is_sparse(layer) for layer in decoder_layers(model)):
            model.set_experts_implementation(TRACED_EXPERTS)
    with bound_ops(OpsConfig()):
        upstream_inputs = record_layer_inputs(upstream, batch)
        generated_inputs = record_layer_inputs(generated, batch)
    upstream_layers, generated_layers = decoder_layers(upstream), decoder_layers(generated)
    for index in first_layers(generated_layers):
        layer, inputs = generated_layers[index], generated_inputs[index]
        upstream_call = (upstream_layers[index], upstream_inputs[index])
        called = slots_called(layer, inputs)
        training = training_kernels(called)
        with bound(called, training):
            expected = training_step(layer, layer, *inputs)
            actual, training_breaks = _train_compiled(index, layer, inputs, upstream_call)
        breaks = {training: training_breaks}
        for kernels in kernel_cases(called):
            if kernels not in breaks:
                with bound(called, kernels):
                    breaks[kernels] = graph_breaks(layer, inputs)
        if any(breaks.values()):
            with bound_ops(OpsConfig()):
                upstream_breaks = graph_breaks(*upstream_call)
            for kernels, found in breaks.items():
                assert len(found) <= len(upstream_breaks), (
                    f"decoder layer {index} with {kernels} kernels breaks its graph {len(found)} times, upstream's "
                    f"{len(upstream_breaks)} times: {found} (upstream's: {upstream_breaks})"
                )
        assert_steps_match(actual, expected, torch.float32)


def check_layers_compiled_while_recording(model: nn.Module, batch: Mapping[str, Any]) -> None:
    """Every decoder layer of ``model`` compiled by ``compile_layers(fullgraph=True)``: one training step on ``batch``
    that records router logits (where the model has them) and hidden states gives the eager step's loss, aux loss,
    recorded outputs and every gradient, within :data:`TOLERANCES` (fp32).

    This is a MoE training step as a user compiles it: the aux loss needs the router logits, which upstream's hooks
    record inside each layer (docs/compile.md, "Recorded outputs in compiled layers"). A layer that is not one graph
    in a forward that records nothing either is compiled around its breaks, and recording must add none (the
    per-layer check compares those breaks with upstream's). Dynamo's capture is what is
    checked (backend ``eager``: each layer one graph, the recorded outputs appended from its outputs); the first
    layers' aot_eager numerics are :func:`check_first_layers_compile`'s. ``model`` is left as it was (a copy is
    compiled, in eval mode: no dropout draw differs), and so is the process's output collector.
    """
    compiled = copy.deepcopy(model).eval()
    if any(is_sparse(layer) for layer in decoder_layers(compiled)):
        compiled.set_experts_implementation(TRACED_EXPERTS)
    eager = copy.deepcopy(compiled)
    recording = {**batch, "output_hidden_states": True}
    if getattr(compiled.config.get_text_config(), "output_router_logits", None) is not None:
        recording["output_router_logits"] = True
    upstreams = output_capturing._active_collector
    torch._dynamo.reset()
    try:
        try:
            actual = _recorded_step(_compiled_layers(compiled, fullgraph=True), recording)
        except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError, GuardOnDataDependentSymNode) as broken:
            _require_the_same_break_without_recording(eager, batch, broken)
            actual = _recorded_step(_compiled_layers(copy.deepcopy(eager), fullgraph=False), recording)
    finally:
        output_capturing._active_collector = upstreams
        torch._dynamo.reset()
    expected = _recorded_step(eager, recording)
    rtol, atol = TOLERANCES[torch.float32]
    assert actual.keys() == expected.keys(), f"recorded {sorted(actual)} compiled, {sorted(expected)} eagerly"
    for name, want in expected.items():
        torch.testing.assert_close(actual[name], want, rtol=rtol, atol=atol, msg=lambda m, n=name: f"{n}: {m}")


#: The keywords that ask a forward to record outputs.
_RECORDING = frozenset({"output_router_logits", "output_hidden_states", "output_attentions"})


def _compiled_layers(model: nn.Module, *, fullgraph: bool) -> nn.Module:
    torch._dynamo.reset()
    compile_layers(decoder_layers(model), fullgraph=fullgraph, backend="eager")
    return model


def _require_the_same_break_without_recording(model: nn.Module, batch: Mapping[str, Any], broken: Exception) -> None:
    """A layer that cannot be one graph whatever the forward records (DBRX's experts loop over the experts a batch
    routes to, which upstream's layer does too: :func:`check_first_layers_compile` compares it with upstream's) is
    compiled around its breaks; recording must add none."""
    plain = {key: value for key, value in batch.items() if key not in _RECORDING}
    try:
        _recorded_step(_compiled_layers(copy.deepcopy(model), fullgraph=True), plain)
    except type(broken):
        return
    raise AssertionError(f"recording outputs breaks the compiled layers' graph: {_first_line(broken)}") from broken


def _recorded_step(model: nn.Module, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Loss, aux loss, each recorded hidden state and router logit, and every parameter's gradient, by name."""
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    loss = out.loss
    found: dict[str, torch.Tensor] = {"loss": loss.detach()}
    aux = getattr(out, "aux_loss", None)
    if isinstance(aux, torch.Tensor):
        found["aux_loss"] = aux.detach()
    for key in ("hidden_states", "router_logits"):
        for index, tensor in enumerate(getattr(out, key, None) or ()):
            found[f"{key}[{index}]"] = tensor.detach()
    loss.backward()
    found.update({f"gradient of {name}": p.grad for name, p in model.named_parameters() if p.grad is not None})
    return found


def _train_compiled(
    index: int, layer: nn.Module, inputs: LayerInputs, upstream_call: tuple[nn.Module, LayerInputs]
) -> tuple[Step, list[str]]:
    """The layer's compiled training step, and its graph breaks under the bindings in force.

    Compiled whole first (``fullgraph=True``), which proves it traces as one graph without a separate ``explain``;
    only where that raises are the breaks counted and the layer compiled around them. ``fullgraph`` raises
    ``Unsupported`` where dynamo would break the graph, and ``UserError`` where code branches or loops on a value
    known only at run time (DBRX's experts iterate over the experts a batch routes to), which dynamo also splits the
    graph at without ``fullgraph``. A failure that upstream's own layer shares is skipped
    (:func:`_skip_where_upstream_fails_alike`).
    """
    try:
        try:
            return compiled_step(layer, inputs, fullgraph=True), []
        except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as broken:
            breaks = graph_breaks(layer, inputs) or [_first_line(broken)]
            return compiled_step(layer, inputs, fullgraph=False), breaks
    except Exception as error:
        _skip_where_upstream_fails_alike(index, *upstream_call, error)
        raise


def compiled_step(layer: nn.Module, inputs: LayerInputs, *, fullgraph: bool) -> Step:
    """:func:`training_step` of ``layer`` compiled with aot_eager, from a clean dynamo cache, which it leaves clean."""
    args, kwargs = inputs
    torch._dynamo.reset()
    try:
        return training_step(torch.compile(layer, fullgraph=fullgraph, backend="aot_eager"), layer, args, kwargs)
    finally:
        torch._dynamo.reset()


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def _skip_where_upstream_fails_alike(index: int, upstream: nn.Module, inputs: LayerInputs, error: Exception) -> None:
    """Skip, naming the error, where upstream's own layer fails compiled with the same error as the generated one.

    Such a failure is PyTorch's or upstream's code, not the generated code's: Doge's layer, for one, fails in
    aot_eager's backward at transformers 5.25 and torch 2.13 (a ``view`` of ``softplus_backward``'s output whose
    strides the traced graph did not expect), upstream's and the generated one alike.
    """
    try:
        with bound_ops(OpsConfig()):
            compiled_step(upstream, inputs, fullgraph=False)
    except Exception as upstream_error:  # noqa: BLE001 (compared with the generated layer's below)
        if _first_line(upstream_error) == _first_line(error):
            pytest.skip(
                f"decoder layer {index}: upstream's own layer fails compiled with aot_eager as the generated one "
                f"does ({_first_line(error)})"
            )
