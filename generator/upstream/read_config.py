"""The configuration class a model's language model is built from, its model_type and its defaults.

A tiny test config has to satisfy what the config class declares; the reader records each field with
its default as source text, so the scaffold can write that config without importing transformers.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.source import ModelSource, dotted

_KEPT_CLASS_ATTRIBUTES = ("attribute_map",)


@dataclass(frozen=True)
class ConfigReport:
    module: str | None
    cls: str | None
    model_type: str | None
    defaults: dict[str, str] = field(default_factory=dict)


def config_class_of(source: ModelSource, cls: str) -> str | None:
    """The config class ``cls`` declares (``config_class = X`` or ``config: X``), following its bases."""
    seen: set[str] = set()
    todo = [cls]
    while todo:
        name = todo.pop(0)
        if name in seen or name not in source.classes:
            continue
        seen.add(name)
        for node in source.classes[name].body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "config_class" for t in node.targets
            ):
                if isinstance(node.value, ast.Name):
                    return node.value.id
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "config"
                and isinstance(node.annotation, ast.Name)
            ):
                return node.annotation.id
        todo.extend(b for b in source.base_names(name))
    return None


def read_config(source: ModelSource, lm_class: str | None) -> ConfigReport:
    model = source.model
    default_module = f"transformers.models.{model}.configuration_{model}"
    wanted = config_class_of(source, lm_class) if lm_class else None
    module = default_module
    if wanted is not None and wanted in source.index.imported_from:
        module = source.index.imported_from[wanted][0]
    try:
        index = source.sources.get(module)
    except UpstreamError:
        return ConfigReport(module=None, cls=wanted, model_type=None)
    typed = {
        node.name: _model_type(node)
        for node in index.tree.body
        if isinstance(node, ast.ClassDef) and _model_type(node) is not None
    }
    if wanted is None or wanted not in typed:
        # No declaration to follow: the config class whose model_type is the package name, else the first.
        wanted = next((c for c, t in typed.items() if t == model), next(iter(typed), wanted))
    if wanted is None:
        return ConfigReport(module=module, cls=None, model_type=None)
    return ConfigReport(
        module=module,
        cls=wanted,
        model_type=typed.get(wanted),
        defaults=_defaults(source.sources, index, wanted),
    )


def _model_type(node: ast.ClassDef) -> str | None:
    for stmt in node.body:
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "model_type" for t in stmt.targets)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            return stmt.value.value
    return None


def _defaults(sources: UpstreamSources, index: ModuleIndex, cls: str) -> dict[str, str]:
    """Fields of ``cls`` and its config bases (base first, so the subclass's defaults win)."""
    found = sources.resolve_class(index, cls)
    if found is None:
        return {}
    owner, node = found
    merged: dict[str, str] = {}
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id not in ("PreTrainedConfig", "PretrainedConfig"):
            merged.update(_defaults(sources, owner, base.id))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            merged[stmt.target.id] = _default_text(stmt.value)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id in _KEPT_CLASS_ATTRIBUTES:
                    merged[target.id] = dotted(stmt.value)
        elif isinstance(stmt, ast.FunctionDef) and stmt.name == "__init__":
            merged.update(_init_defaults(stmt))
    return merged


def _default_text(value: ast.expr) -> str:
    """A dataclass field's default: ``interval(...)(default=0.02)`` and ``field(default=x)`` give ``x``."""
    if isinstance(value, ast.Call):
        for kw in value.keywords:
            if kw.arg == "default":
                return dotted(kw.value)
            if kw.arg == "default_factory":
                return dotted(kw.value) + "()"
    return dotted(value)


def _init_defaults(init: ast.FunctionDef) -> dict[str, str]:
    args = init.args
    result: dict[str, str] = {}
    positional = args.posonlyargs + args.args
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
        result[arg.arg] = dotted(default)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is not None:
            result[arg.arg] = dotted(default)
    return result
