"""Which linear-attention mixer a model's decoder runs: a Gated DeltaNet the scaffold guards, or a kind it refuses.

A Gated DeltaNet hybrid (qwen3_next, olmo_hybrid, qwen3_5) is recognised by its gated delta rule: two module-level
functions, the chunked and the recurrent form, both called by one mixer class's forward. The causal conv is
no evidence of its own (a short-convolution mixer, lfm2's, calls one too, and so does GLM-5-Next's Kimi-delta
attention), so the reader keys on the delta rule and the mixer that calls it, then reads around the mixer what
the hybrid recipe's guards need: the causal conv (whole and decode step) it calls, its gated output norm and
whether its forward hands the packed documents' ``cu_seq_lens_q`` on to the delta rule.

Every other linear or recurrent mixer gets a kind and a reason for the refusal (:func:`mixer_kind`): a short
convolution alone, a Mamba-style state space, lightning attention, Kimi-delta attention; no snippet covers them.
"""

from __future__ import annotations

import ast
import re

from modelgraft.generator.upstream.source import ModelSource, called_name, calls_in
from modelgraft.generator.upstream.structure import GatedDeltaNetInfo

#: The parameters the conv slots take first, in upstream's order (the snippets check them again).
_CONV_PARAMS = ("hidden_states", "weight", "bias", "activation")
_CONV_UPDATE_PARAMS = ("hidden_states", "conv_state", "weight", "bias", "activation")

#: The gated output norm's forward the rms_norm_gated slot recomputes (Qwen3-Next's and every Gated DeltaNet
#: model's of transformers 5.16): normalise in fp32, cast back, scale, then gate with ``ACT2FN[activation]``.
#: ``{eps}`` and ``{activation}`` are the attributes that hold them.
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
        "a short convolution alone, without a gated delta rule: no slot takes it",
    ),
    (
        "state_space",
        re.compile(r"Mamba|Mixer|SSM|Ssm"),
        "a Mamba-style state space (selective scan): no slot takes it",
    ),
)


def _dump(function: ast.FunctionDef) -> str:
    """The function's parameters and body without its docstring, as ``ast.dump`` spells them (formatting-blind,
    comments are not in the tree)."""
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return ast.dump(function.args) + ast.dump(ast.Module(body=list(body), type_ignores=[]))


def _delta_rules(source: ModelSource) -> tuple[str, str] | None:
    """The module's chunked and recurrent gated delta rule functions, by name."""
    functions = [name for name in source.functions if name.endswith("gated_delta_rule")]
    chunk = [name for name in functions if "chunk" in name]
    recurrent = [name for name in functions if "recurrent" in name]
    return (chunk[0], recurrent[0]) if chunk and recurrent else None


def _forward_calls(source: ModelSource, cls: str) -> list[ast.Call]:
    forward = source.own_method(cls, "forward")
    return calls_in(forward) if forward is not None else []


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


def _hands_on_packed_lengths(call: ast.Call) -> bool:
    """The delta rule call passes ``cu_seqlens=kwargs.pop("cu_seq_lens_q", ...)`` (or ``.get``)."""
    for keyword in call.keywords:
        value = keyword.value
        if keyword.arg == "cu_seqlens" and isinstance(value, ast.Call) and value.args:
            first = value.args[0]
            if isinstance(first, ast.Constant) and first.value == "cu_seq_lens_q":
                return True
    return False


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


def read_gated_delta_net(source: ModelSource) -> GatedDeltaNetInfo | None:
    """The Gated DeltaNet mixer of the module, or None when it has no class calling both gated delta rules."""
    rules = _delta_rules(source)
    if rules is None:
        return None
    chunk, recurrent = rules
    for mixer in source.classes:
        calls = _forward_calls(source, mixer)
        called = {called_name(call) for call in calls}
        if chunk not in called or recurrent not in called:
            continue
        module_functions = [name for name in called if name in source.functions]
        conv = [name for name in module_functions if _params(source, name)[:4] == _CONV_PARAMS]
        update = [name for name in module_functions if _params(source, name)[:5] == _CONV_UPDATE_PARAMS]
        norm = _gated_norm(source, mixer)
        packed = all(_hands_on_packed_lengths(call) for call in calls if called_name(call) in rules)
        reasons = []
        if not conv or not update:
            reasons.append("calls no causal conv1d of the slots' signature (hidden_states, [conv_state,] weight, ...)")
        return GatedDeltaNetInfo(
            mixer=mixer,
            line=source.classes[mixer].lineno,
            chunk=chunk,
            recurrent=recurrent,
            conv=conv[0] if conv else None,
            conv_update=update[0] if update else None,
            norm=norm[0] if norm else None,
            norm_line=norm[1] if norm else 0,
            norm_eps_attr=norm[2] if norm else None,
            norm_activation=f"self.{norm[3]}" if norm else None,
            packed=packed and _layer_passes_kwargs(source, mixer),
            reason="; ".join(reasons),
        )
    return None


def gated_delta_net_classes(source: ModelSource, info: GatedDeltaNetInfo) -> set[str]:
    """The mixer and the classes that hold it (olmo_hybrid's LinearAttentionDecoderLayer): what the guards cover."""
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
