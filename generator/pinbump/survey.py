"""Signature drift of every patch target between two upstream versions.

A pin bump breaks quietly when a patched member keeps its name but changes
its parameters: the patch still applies and runs against the wrong contract.
This compares, per config and target, upstream's signature in both versions.
Targets that exist in neither are methods the patches add and are left out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from modelgraft.generator.checks.signature import Param, parameters
from modelgraft.generator.discovery import LoadedConfig
from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.pinbump.owners import owner_of
from modelgraft.generator.syntax import FUNCTION_NODES
from modelgraft.generator.upstream.index import UpstreamSources


@dataclass(frozen=True)
class Finding:
    config: str
    target: str
    status: str  # "unchanged" | "changed" | "removed" | "new"
    detail: str = ""
    #: What must change for it (``modelgraft.generator.pinbump.owners``): a snippet, recipe or config line.
    owner: str = ""


def _lookup(sources: UpstreamSources, source_module: str, target: str) -> ast.AST | None:
    """Upstream's definition of ``target`` (own or inherited); None where this version lacks it."""
    try:
        index = sources.get(source_module)
    except UpstreamError:
        return None
    cls_name, _, member = target.partition(".")
    if not member:
        return index.members.get(cls_name)
    own = index.method(cls_name, member)
    if own is not None:
        return own
    inherited = sources.inherited_method(index, cls_name, member)
    return inherited[1] if inherited else None


def _signature(node: ast.AST) -> list[Param]:
    """A function's parameters; a class's ``__init__`` parameters."""
    if isinstance(node, FUNCTION_NODES):
        return parameters(node)
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return parameters(init) if init is not None else []
    return []


def describe_change(before: list[Param], after: list[Param]) -> str:
    """What changed between two parameter lists, in words; empty when equal."""
    old, new = {p.name: p for p in before}, {p.name: p for p in after}
    parts = [f"removed {old[n].describe()}" for n in old if n not in new]
    parts += [f"added {new[n].describe()}" for n in new if n not in old]
    parts += [f"{n}: {old[n].describe()} -> {new[n].describe()}" for n in old if n in new and old[n] != new[n]]
    shared_old = [p.name for p in before if p.name in new]
    shared_new = [p.name for p in after if p.name in old]
    if shared_old != shared_new:
        parts.append(f"order {shared_old} -> {shared_new}")
    return "; ".join(parts)


def _targets(loaded: LoadedConfig) -> list[str]:
    """Upstream members the config's patches stand for (``modify_init``: the class's ``__init__``), once each."""
    targets = []
    for patch in loaded.config.patches:
        target = f"{patch.target}.__init__" if patch.kind == "modify_init" else patch.target
        if target not in targets:
            targets.append(target)
    return targets


def survey(
    loaded_configs: list[LoadedConfig], old_root: Path, new_root: Path, project_root: Path | None = None
) -> list[Finding]:
    """Compare every target of ``loaded_configs`` between two unpacked reference trees; with ``project_root``,
    each finding names its owner (the snippet, recipe or config line that patches the target)."""
    old, new = UpstreamSources(old_root), UpstreamSources(new_root)
    findings = []
    for loaded in loaded_configs:
        source_module = loaded.config.source_module
        for target in _targets(loaded):
            before, after = _lookup(old, source_module, target), _lookup(new, source_module, target)
            if before is None and after is None:
                continue
            owner = owner_of(loaded, target.removesuffix(".__init__"), project_root) if project_root else ""
            if after is None:
                findings.append(Finding(loaded.name, target, "removed", "gone in the new version", owner))
            elif before is None:
                findings.append(Finding(loaded.name, target, "new", "absent in the old version", owner))
            else:
                change = describe_change(_signature(before), _signature(after))
                findings.append(Finding(loaded.name, target, "changed" if change else "unchanged", change, owner))
    return findings


def render(findings: list[Finding], *, show_unchanged: bool = False) -> str:
    rows = [f for f in findings if show_unchanged or f.status != "unchanged"]
    if not rows:
        return "no signature drift in any patch target"
    width = max(len(f"{f.config} {f.target}") for f in rows)
    return "\n".join(
        f"{f.status:<9} {(f.config + ' ' + f.target):<{width}}  {f.detail}".rstrip()
        + (f"  [{f.owner}]" if f.owner else "")
        for f in rows
    )
