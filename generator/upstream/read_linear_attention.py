"""Which linear-attention mixer a model's decoder runs: a Gated DeltaNet the scaffold guards, or a kind it refuses.

A Gated DeltaNet hybrid (qwen3_next, olmo_hybrid, qwen3_5) is recognised by its gated delta rule: two module-level
functions, the chunked and the recurrent form, both called by one mixer class's forward. The causal conv is
no evidence of its own (a short-convolution mixer, lfm2's, calls one too, and so does GLM-5-Next's Kimi-delta
attention), so the reader keys on the delta rule and the mixer that calls it, then reads around the mixer what
the hybrid recipe's guards need: the causal conv (whole and decode step) it calls, its gated output norm and
whether packed documents' ``cu_seq_lens_q`` reaches the chunked delta rule and the whole-sequence conv.

"Calls" reaches through module-level functions the forward calls by name, up to :data:`CALL_DEPTH` deep
(:func:`reached_calls`). Transformers 5.16's mixers called ``causal_conv1d_fn`` / ``causal_conv1d_update``
themselves; 5.25's call ``causal_conv1d_forward(self.conv1d, hidden_states, cache, layer_idx, activation=...,
**kwargs)``, a module-level function (hub-kernelizable) that reads the cache's conv state and calls the two
convs, handing ``causal_conv1d_fn`` the mixer's ``**kwargs``. The guards stay on the two convs, which every
path still calls; the report names the functions in between (``conv_via``).

A short-convolution hybrid (lfm2, lfm2_moe, lfm3) has no delta rule: its mixer gates a depthwise causal conv
(``B * x``, conv, ``C *``), and reaches the same module-level convs through ``causal_conv1d_forward``
(:func:`read_short_convolution`); the hybrid recipe guards those two convs alone.

Every other linear or recurrent mixer gets a kind and a reason for the refusal (:func:`mixer_kind`): a short
convolution computing its own windows (inkling2's dynamic one), a Mamba-style state space, lightning attention,
Kimi-delta attention; no snippet covers them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from modelgraft.generator.upstream.source import ModelSource, called_name, calls_in
from modelgraft.generator.upstream.structure import GatedDeltaNetInfo, ShortConvolutionInfo

#: The parameters the conv slots take first, in upstream's order (the snippets check them again).
_CONV_PARAMS = ("hidden_states", "weight", "bias", "activation")
_CONV_UPDATE_PARAMS = ("hidden_states", "conv_state", "weight", "bias", "activation")

#: The gated output norm's forward the rms_norm_gated slot recomputes (Qwen3-Next's and every Gated DeltaNet
#: model's of transformers 5.16 and 5.25): normalise in fp32, cast back, scale, then gate with
#: ``ACT2FN[activation]``. ``{eps}`` and ``{activation}`` are the attributes that hold them; parameter
#: annotations and defaults are not compared (:func:`_dump`).
_GATED_NORM_FORWARD = """
def forward(self, hidden_states, gate=None):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.{eps})
    hidden_states = self.weight * hidden_states.to(input_dtype)
    hidden_states = hidden_states * ACT2FN[self.{activation}](gate.to(torch.float32))
    return hidden_states.to(input_dtype)
"""

#: Kinds of mixer no snippet covers, each with the class-name pattern (prefix removed) or module functions
#: that show it, and the reason a refusal gives. Kimi-delta first: its module also holds a causal conv.
_REFUSED_KINDS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "kimi_delta_attention",
        re.compile(r"kimi_delta|_kda\b|\bkda_"),
        "Kimi-delta attention (a per-channel gated delta rule, chunk_kda): no slot takes it",
    ),
    ("lightning_attention", re.compile(r"LightningAttention"), "lightning attention: no slot takes it"),
    (
        "short_convolution",
        re.compile(r"ShortConv"),
        "a short convolution that runs no causal conv1d of the slots' signature (its own windows or taps): "
        "no slot takes it",
    ),
    (
        "state_space",
        re.compile(r"Mamba|Mixer|SSM|Ssm"),
        "a Mamba-style state space (selective scan): no slot takes it",
    ),
)


def _dump(function: ast.FunctionDef) -> str:
    """The function's parameter names and body without its docstring, as ``ast.dump`` spells them: blind to
    formatting and comments (not in the tree), and to annotations and defaults (5.25 annotates the gated norm's
    ``forward(self, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor`` where 5.16 had
    ``forward(self, hidden_states, gate=None)``, the same computation)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    args = function.args
    names = [arg.arg for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    variadic = [arg.arg if arg is not None else None for arg in (args.vararg, args.kwarg)]
    return repr((names, variadic)) + ast.dump(ast.Module(body=list(body), type_ignores=[]))


def _delta_rules(source: ModelSource) -> tuple[str, str] | None:
    """The module's chunked and recurrent gated delta rule functions, by name."""
    functions = [name for name in source.functions if name.endswith("gated_delta_rule")]
    chunk = [name for name in functions if "chunk" in name]
    recurrent = [name for name in functions if "recurrent" in name]
    return (chunk[0], recurrent[0]) if chunk and recurrent else None


def _forward_calls(source: ModelSource, cls: str) -> list[ast.Call]:
    forward = source.own_method(cls, "forward")
    return calls_in(forward) if forward is not None else []


#: How many module-level functions deep :func:`reached_calls` follows a forward: transformers 5.25 puts the convs
#: one level down (``causal_conv1d_forward``); the bound keeps the walk near the mixer and finite.
CALL_DEPTH = 3

#: The packed documents' boundaries as transformers' attention kwargs carry them.
_PACKED_LENGTHS = "cu_seq_lens_q"


@dataclass(frozen=True)
class Reached:
    """A call a forward makes, itself or inside module-level functions it calls by name (:func:`reached_calls`)."""

    call: ast.Call
    #: The module-level functions entered on the way, outermost first (() for a call in the forward's own body).
    via: tuple[str, ...] = ()
    #: The calls that entered them, one per name of ``via``.
    hops: tuple[ast.Call, ...] = ()

    @property
    def name(self) -> str | None:
        return called_name(self.call)


def _module_function(source: ModelSource, call: ast.Call) -> str | None:
    """The module-level function a call names bare (``f(...)``); None for methods, attributes and imports."""
    func = call.func
    return func.id if isinstance(func, ast.Name) and func.id in source.functions else None


def reached_calls(source: ModelSource, forward: ast.FunctionDef, depth: int = CALL_DEPTH) -> list[Reached]:
    """Every call in ``forward``, then in the module-level functions it calls by name, and theirs, ``depth``
    functions deep at most (never re-entering one on the same path): nearest first, each in source order."""
    found: list[Reached] = []
    todo: list[tuple[ast.FunctionDef, tuple[str, ...], tuple[ast.Call, ...]]] = [(forward, (), ())]
    while todo:
        function, via, hops = todo.pop(0)
        for call in calls_in(function):
            found.append(Reached(call, via, hops))
            name = _module_function(source, call)
            if name is not None and name not in via and len(via) < depth:
                todo.append((source.functions[name], (*via, name), (*hops, call)))
    return found


def _params(source: ModelSource, function: str) -> tuple[str, ...]:
    node = source.functions[function]
    return tuple(arg.arg for arg in node.args.posonlyargs + node.args.args)


def _gated_norm(source: ModelSource, mixer: str) -> tuple[str, int, str, str] | None:
    """(class, line, eps attribute, activation attribute) of the mixer's gated norm, when its forward is exact."""
    for attr in source.init_assigns(mixer):
        for cls in source.instantiated_classes(mixer, attr):
            forward = source.own_method(cls, "forward")
            if forward is None or len(forward.args.args) < 3:
                continue
            init = source.init_assigns(cls)
            eps = [name for name in init if "eps" in name]
            for eps_attr in eps:
                expected = ast.parse(_GATED_NORM_FORWARD.format(eps=eps_attr, activation="activation")).body[0]
                assert isinstance(expected, ast.FunctionDef)
                if "activation" in init and "weight" in init and _dump(forward) == _dump(expected):
                    return cls, source.classes[cls].lineno, eps_attr, "activation"
    return None


def _kwargs_name(function: ast.FunctionDef) -> str | None:
    return function.args.kwarg.arg if function.args.kwarg is not None else None


def _reads_packed_lengths(node: ast.AST, kwargs: str | None, methods: tuple[str, ...] = ("pop", "get")) -> bool:
    """``node`` is ``<kwargs>.pop("cu_seq_lens_q", ...)`` (or ``.get``), ``kwargs`` the function's ``**`` name."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.func, ast.Attribute):
        return False
    receiver, first = node.func.value, node.args[0]
    return (
        node.func.attr in methods
        and isinstance(receiver, ast.Name)
        and receiver.id == kwargs
        and isinstance(first, ast.Constant)
        and first.value == _PACKED_LENGTHS
    )


def _hands_on_kwargs(function: ast.FunctionDef, call: ast.Call) -> bool:
    """``call``, in ``function``, passes the function's own ``**kwargs`` on, no ``cu_seq_lens_q`` popped from them
    on an earlier line (source order: upstream's forwards pop it in the delta-rule calls, after the conv)."""
    kwargs = _kwargs_name(function)
    passes = any(
        keyword.arg is None and isinstance(keyword.value, ast.Name) and keyword.value.id == kwargs
        for keyword in call.keywords
    )
    position = (call.lineno, call.col_offset)
    popped = any(
        _reads_packed_lengths(other, kwargs, ("pop",))
        for other in calls_in(function)
        if (other.lineno, other.col_offset) < position
    )
    return passes and not popped


def _chain(source: ModelSource, forward: ast.FunctionDef, reached: Reached) -> list[tuple[ast.FunctionDef, ast.Call]]:
    """Each function on the way to ``reached.call`` with the call it makes on that way: the forward's hop first."""
    functions = [forward, *(source.functions[name] for name in reached.via)]
    return list(zip(functions, [*reached.hops, reached.call], strict=True))


def _kwargs_reach(source: ModelSource, forward: ast.FunctionDef, reached: Reached) -> bool:
    """The forward's ``**kwargs``, ``cu_seq_lens_q`` still in them, reach ``reached.call``'s ``**kwargs``."""
    return all(_hands_on_kwargs(function, call) for function, call in _chain(source, forward, reached))


def _hands_on_packed_lengths(source: ModelSource, forward: ast.FunctionDef, reached: Reached) -> bool:
    """The delta rule call passes ``cu_seqlens=kwargs.pop("cu_seq_lens_q", ...)`` (or ``.get``), ``kwargs`` its
    function's own, which the forward's reach through the functions in between (:func:`_hands_on_kwargs`)."""
    chain = _chain(source, forward, reached)
    function, call = chain[-1]
    kwargs = _kwargs_name(function)
    hands_on = any(
        keyword.arg == "cu_seqlens" and _reads_packed_lengths(keyword.value, kwargs) for keyword in call.keywords
    )
    return hands_on and all(_hands_on_kwargs(outer, hop) for outer, hop in chain[:-1])


def _layer_passes_kwargs(source: ModelSource, mixer: str) -> bool:
    """Some class holding the mixer calls it with ``**kwargs`` (the decoder layer hands the packing on)."""
    for cls in source.classes:
        for attr in source.init_assigns(cls):
            if mixer not in source.instantiated_classes(cls, attr):
                continue
            for call in _forward_calls(source, cls):
                func = call.func
                is_mixer = isinstance(func, ast.Attribute) and func.attr == attr
                if is_mixer and any(keyword.arg is None for keyword in call.keywords):
                    return True
    return False


def _conv_functions(source: ModelSource, reached: list[Reached], params: tuple[str, ...]) -> list[Reached]:
    """The reached calls of module-level functions whose parameters start with ``params``, nearest first."""
    found = []
    for item in reached:
        name = _module_function(source, item.call)
        if name is not None and _params(source, name)[: len(params)] == params:
            found.append(item)
    return found


def read_gated_delta_net(source: ModelSource) -> GatedDeltaNetInfo | None:
    """The Gated DeltaNet mixer of the module, or None when it has no class reaching both gated delta rules.

    The delta rules, the convs and the packed documents' kwargs are looked for in the mixer's forward and in the
    module-level functions it calls (:func:`reached_calls`): each conv is the first of its signature reached.
    ``packed`` is read on the whole-sequence path a packed batch takes (no cache): every call of the chunked
    rule gets ``cu_seqlens=kwargs.pop("cu_seq_lens_q")``, and every call of the whole-sequence conv the
    forward's ``**kwargs`` with ``cu_seq_lens_q`` still in them (the conv slot's guard reads it there). The
    recurrent rule is not asked: 5.25's forwards call it without the boundaries, one token at a time, for the
    states a cache keeps after the chunked part.
    """
    rules = _delta_rules(source)
    if rules is None:
        return None
    chunk, recurrent = rules
    for mixer in source.classes:
        forward = source.own_method(mixer, "forward")
        if forward is None:
            continue
        reached = reached_calls(source, forward)
        called = {item.name for item in reached}
        if chunk not in called or recurrent not in called:
            continue
        conv = _conv_functions(source, reached, _CONV_PARAMS)
        update = _conv_functions(source, reached, _CONV_UPDATE_PARAMS)
        conv_name = _module_function(source, conv[0].call) if conv else None
        norm = _gated_norm(source, mixer)
        chunk_calls = [item for item in reached if item.name == chunk]
        conv_calls = [item for item in conv if _module_function(source, item.call) == conv_name]
        packed = (
            conv_name is not None
            and _kwargs_name(source.functions[conv_name]) is not None
            and all(_kwargs_reach(source, forward, item) for item in conv_calls)
            and all(_hands_on_packed_lengths(source, forward, item) for item in chunk_calls)
        )
        reasons = []
        if not conv or not update:
            reasons.append(
                "calls no causal conv1d of the slots' signature (hidden_states, [conv_state,] weight, ...), "
                f"itself or through the module-level functions it calls ({CALL_DEPTH} deep)"
            )
        return GatedDeltaNetInfo(
            mixer=mixer,
            line=source.classes[mixer].lineno,
            chunk=chunk,
            recurrent=recurrent,
            conv=conv_name,
            conv_update=_module_function(source, update[0].call) if update else None,
            conv_via=conv[0].via if conv else (),
            conv_update_via=update[0].via if update else (),
            norm=norm[0] if norm else None,
            norm_line=norm[1] if norm else 0,
            norm_eps_attr=norm[2] if norm else None,
            norm_activation=f"self.{norm[3]}" if norm else None,
            packed=packed and _layer_passes_kwargs(source, mixer),
            reason="; ".join(reasons),
        )
    return None


#: How a short-convolution mixer's class is named (the prefix removed or not): lfm2's ``Lfm2ShortConv``,
#: inkling's ``InklingShortConvolution``. The kind's refusal in :data:`_REFUSED_KINDS` keys on the same name.
_SHORT_CONVOLUTION = re.compile(r"ShortConv")


def read_short_convolution(source: ModelSource) -> ShortConvolutionInfo | None:
    """The short-convolution mixer of a module without a gated delta rule, or None.

    The mixer is the first class named for one (:data:`_SHORT_CONVOLUTION`) whose forward reaches both causal
    convs of the slots' signature, itself or through module-level functions (:func:`reached_calls`: lfm2's
    ``Lfm2ShortConv.forward`` calls ``causal_conv1d_forward``, which calls ``causal_conv1d_fn`` or, on a cached
    decode step, ``causal_conv1d_update``). Without such a class the first one named for it is returned with the
    reason, so the fit refuses it naming what is missing. Another short-convolution class of the module (inkling2's
    dynamic one) is not covered: the category reader refuses the model for it.
    """
    if _delta_rules(source) is not None:
        return None
    named = [cls for cls in source.classes if _SHORT_CONVOLUTION.search(cls)]
    first: ShortConvolutionInfo | None = None
    for mixer in named:
        forward = source.own_method(mixer, "forward")
        reached = reached_calls(source, forward) if forward is not None else []
        conv = _conv_functions(source, reached, _CONV_PARAMS)
        update = _conv_functions(source, reached, _CONV_UPDATE_PARAMS)
        if not conv or not update:
            first = first or ShortConvolutionInfo(
                mixer=mixer,
                line=source.classes[mixer].lineno,
                reason="calls no causal conv1d of the slots' signature (hidden_states, [conv_state,] weight, ...), "
                f"itself or through the module-level functions it calls ({CALL_DEPTH} deep)",
            )
            continue
        assert forward is not None
        conv_name = _module_function(source, conv[0].call)
        assert conv_name is not None
        conv_calls = [item for item in conv if _module_function(source, item.call) == conv_name]
        packed = (
            _kwargs_name(source.functions[conv_name]) is not None
            and all(_kwargs_reach(source, forward, item) for item in conv_calls)
            and _layer_passes_kwargs(source, mixer)
        )
        return ShortConvolutionInfo(
            mixer=mixer,
            line=source.classes[mixer].lineno,
            conv=conv_name,
            conv_update=_module_function(source, update[0].call),
            conv_via=conv[0].via,
            conv_update_via=update[0].via,
            packed=packed,
        )
    return first


def mixer_classes(source: ModelSource, info: GatedDeltaNetInfo | ShortConvolutionInfo) -> set[str]:
    """The mixer and the classes that hold it (olmo_hybrid's LinearAttentionDecoderLayer, lfm2's decoder layer):
    what the guards cover."""
    holders = {
        cls
        for cls in source.classes
        for attr in source.init_assigns(cls)
        if info.mixer in source.instantiated_classes(cls, attr)
    }
    return {info.mixer} | holders


def mixer_kind(source: ModelSource, cls: str, prefix: str) -> str:
    """The reason a recurrent or linear mixer class is refused: which kind it is, by its name (``prefix``
    removed) or by the functions its forward calls."""
    name = cls.removeprefix(prefix)
    called = " ".join(sorted({called_name(call) or "" for call in _forward_calls(source, cls)}))
    for _, pattern, reason in _REFUSED_KINDS:
        if pattern.search(name) or pattern.search(called):
            return reason
    return "a recurrent or linear mixer no slot takes"
