"""Torch modules a class calls in its own forward: ``nn.LayerNorm`` attributes and ``ACT2FN`` activations.

Older decoders (opt, gpt_neo, bloom, biogpt) have no norm or MLP class of their own: their decoder layer
builds ``self.ln_1 = nn.LayerNorm(...)`` and ``self.act = ACT2FN[config.activation_function]`` and calls
them in its forward. Each such call is a site a guard can reach without rewriting the class: the one
statement holding the call goes behind the layer_norm or activation slot. A site counts only when the
attribute is built exactly that way in ``__init__`` and called exactly once in the class's own forward, or, for a
layer norm, in several assignments of its own (OPT calls each norm before its block or after it, as
``do_layer_norm_before`` says): each of those statements goes behind the slot. A layer norm ``__init__`` otherwise
sets to None (OPT's decoder's final norm, per ``do_layer_norm_before``) is a site too: upstream calls it only where
it was built.

A norm that a config switch chooses (InternViT's ``NORM2FN[config.norm_type](...)``, Janus's
``nn.LayerNorm(...) if config.use_qk_norm else nn.Identity()``) is a site too, kept apart as a chosen one: its
guard also tests that the module built is an ``nn.LayerNorm``, so the other choices run upstream's code.
"""

from __future__ import annotations

import ast

from modelgraft.generator.upstream.source import ModelSource, calls_in, is_self_attr
from modelgraft.generator.upstream.structure import CallSites


def _layer_norm(source: ModelSource, value: ast.expr) -> bool:
    """``nn.LayerNorm(...)``, ``torch.nn.LayerNorm(...)`` or ``LayerNorm(...)`` imported from torch.nn."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute):
        return func.attr == "LayerNorm" and ast.unparse(func.value) in ("nn", "torch.nn")
    if isinstance(func, ast.Name) and func.id == "LayerNorm":
        return source.index.imported_from.get("LayerNorm", ("", ""))[0] == "torch.nn"
    return False


def _is_layer_norm_class(source: ModelSource, value: ast.expr) -> bool:
    """``nn.LayerNorm``, ``torch.nn.LayerNorm`` or ``LayerNorm`` imported from torch.nn (the class, not a call)."""
    if isinstance(value, ast.Attribute):
        return value.attr == "LayerNorm" and ast.unparse(value.value) in ("nn", "torch.nn")
    if isinstance(value, ast.Name) and value.id == "LayerNorm":
        return source.index.imported_from.get("LayerNorm", ("", ""))[0] == "torch.nn"
    return False


def _chosen_layer_norm(source: ModelSource, value: ast.expr) -> bool:
    """A module a config switch chooses, ``nn.LayerNorm`` among the choices: ``a if cond else nn.LayerNorm(...)``
    (either branch), or a call of a module-level table's entry (``NORM2FN[config.norm_type](...)``) whose dict
    literal maps some key to ``nn.LayerNorm``."""
    if isinstance(value, ast.IfExp):
        return _layer_norm(source, value.body) or _layer_norm(source, value.orelse)
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Subscript)):
        return False
    table = value.func.value
    if not isinstance(table, ast.Name):
        return False
    statement = source.index.members.get(table.id)
    if not (isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Dict)):
        return False
    return any(entry is not None and _is_layer_norm_class(source, entry) for entry in statement.value.values)


def _activation_config_attr(value: ast.expr) -> str | None:
    """``X`` for ``ACT2FN[config.X]``."""
    if (
        isinstance(value, ast.Subscript)
        and isinstance(value.value, ast.Name)
        and value.value.id == "ACT2FN"
        and isinstance(value.slice, ast.Attribute)
        and isinstance(value.slice.value, ast.Name)
        and value.slice.value.id == "config"
    ):
        return value.slice.attr
    return None


#: ``nn.GELU(approximate=...)`` -> the ACT2FN name computing the same function.
_TORCH_ACTIVATIONS = {"none": "gelu", "tanh": "gelu_pytorch_tanh"}


def _torch_activation_name(value: ast.expr) -> str | None:
    """The ACT2FN name of ``nn.GELU()`` / ``nn.GELU(approximate="none" | "tanh")``, else None."""
    if not (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "GELU"
        and ast.unparse(value.func.value) in ("nn", "torch.nn")
        and not value.args
    ):
        return None
    approximate = "none"
    for keyword in value.keywords:
        if keyword.arg != "approximate" or not isinstance(keyword.value, ast.Constant):
            return None
        approximate = keyword.value.value
    return _TORCH_ACTIVATIONS.get(approximate)


def _is_none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _calls_of(forward: ast.FunctionDef, attr: str) -> list[ast.Call]:
    return [c for c in calls_in(forward) if is_self_attr(c.func, attr)]


def _each_assigned_alone(forward: ast.FunctionDef, attr: str) -> bool:
    """Whether every call of ``self.<attr>`` in ``forward`` is the whole value of an assignment of its own, on one
    argument (OPT's ``hidden_states = self.final_layer_norm(hidden_states)``, once on each side of an
    ``if self.do_layer_norm_before``): each such statement can go behind the slot alone."""
    calls = _calls_of(forward, attr)
    alone = [
        node.value
        for node in ast.walk(forward)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and is_self_attr(node.value.func, attr)
    ]
    return len(alone) == len(calls) and all(len(call.args) == 1 and not call.keywords for call in alone)


def read_call_sites(source: ModelSource, skip: set[str]) -> tuple[CallSites, ...]:
    """Per class (other than ``skip``, the classes patched whole), the guardable module calls of its forward."""
    found = []
    for cls in source.classes:
        if cls in skip or (source.instantiated and cls not in source.instantiated):
            continue
        forward = source.own_method(cls, "forward")
        if forward is None:
            continue
        assigns = source.init_assigns(cls)
        norms: list[str] = []
        chosen: list[str] = []
        activation = config_attr = name = None
        for attr, assigned in assigns.items():
            calls = _calls_of(forward, attr)
            # OPT's decoder builds its final norm or sets it to None, and calls it where it is not None.
            values = [value for value in assigned if not _is_none(value)]
            if len(values) != 1 or not calls:
                continue
            if _layer_norm(source, values[0]):
                if len(calls) == 1 or _each_assigned_alone(forward, attr):
                    norms.append(attr)
            elif len(assigned) != 1 or len(calls) != 1:
                continue
            elif _chosen_layer_norm(source, values[0]):
                if len(_calls_of(forward, attr)[0].args) == 1 and not _calls_of(forward, attr)[0].keywords:
                    chosen.append(attr)
            elif activation is None:
                call = _calls_of(forward, attr)[0]
                if len(call.args) != 1 or call.keywords:
                    continue
                if (read := _activation_config_attr(values[0])) is not None:
                    activation, config_attr = attr, read
                elif (read := _torch_activation_name(values[0])) is not None:
                    activation, name = attr, read
        if activation is not None and any(
            is_self_attr(inner.func, norm)
            for inner in calls_in(_calls_of(forward, activation)[0])
            for norm in (*norms, *chosen)
        ):
            # self.act(self.norm(x)): one statement would go behind both slots, which the guard cannot nest.
            activation = config_attr = name = None
        init = source.own_method(cls, "__init__")
        takes_config = init is not None and len(init.args.args) > 1 and init.args.args[1].arg == "config"
        if config_attr is not None and not takes_config:
            activation = config_attr = None
        if norms or chosen or activation:
            found.append(
                CallSites(
                    cls=cls,
                    line=source.classes[cls].lineno,
                    layer_norms=tuple(norms),
                    chosen_layer_norms=tuple(chosen),
                    activation=activation,
                    activation_config_attr=config_attr,
                    activation_name=name,
                )
            )
    return tuple(found)
