"""How transformers converts a model's hub checkpoints on load: the per-expert names of its MoE weights.

``transformers/conversion_mapping.py`` maps a model_type (directly, or through the alias table
``_MODEL_TO_CONVERSION_PATTERN``) to weight converters; for a MoE model, one merges the per-expert
``experts.*.<gate>.weight`` and ``experts.*.<up>.weight`` into ``experts.gate_up_proj`` and one the
``experts.*.<down>.weight`` into ``experts.down_proj``. Read by path with ``ast``, never imported, so the
scaffold's converter and tests name the projections as the real checkpoints spell them (mixtral: w1,
w3, w2), never as a sibling does.

The tables are those of the tree being read (``root``, as for the reader): a pin-bump survey reads two
versions side by side, and each version's models must be described by that version's mapping.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.index import ModuleIndex
from modelgraft.generator.upstream.locate import module_path

MODULE = "transformers.conversion_mapping"
_PER_EXPERT = re.compile(r"experts\.\*\.(\w+)\.weight$")


@dataclass(frozen=True)
class ExpertConversion:
    #: The conversion_mapping entry used for the model_type (itself, or what the alias table maps it to).
    entry: str
    gate: str
    up: str
    down: str


def _strings(node: ast.expr | None) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


@cache
def _tables(path: Path) -> tuple[dict[str, str], dict[str, ast.expr]]:
    """(alias table, mapping entries by name) of the conversion_mapping.py at ``path``, parsed once per file."""
    index = ModuleIndex.parse(MODULE, path)
    aliases: dict[str, str] = {}
    entries: dict[str, ast.expr] = {}
    for node in ast.walk(index.tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                continue
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                aliases.setdefault(key.value, value.value)
            elif isinstance(value, ast.List):
                entries.setdefault(key.value, value)
    return aliases, entries


def _tables_of(root: Path | None) -> tuple[dict[str, str], dict[str, ast.expr]]:
    """The tables of ``root``'s conversion_mapping.py; none where the tree has no such module.

    A transformers release before the conversion tables (or a toy tree in the tests) converts nothing on load.
    """
    try:
        path = module_path(MODULE, root)
    except UpstreamError:
        return {}, {}
    return _tables(path.resolve())


def expert_conversion(model_type: str, *, root: Path | None = None) -> ExpertConversion | None:
    """The per-expert projection names transformers fuses for ``model_type``, or None when it fuses none.

    ``root`` is the folder holding the ``transformers`` package to read (an unpacked reference tree), as
    for :func:`modelgraft.generator.upstream.reader.read_model`; None reads the installed one.
    """
    aliases, entries = _tables_of(root)
    entry = model_type if model_type in entries else aliases.get(model_type, model_type)
    converters = entries.get(entry)
    if converters is None:
        return None
    names: dict[str, list[str]] = {}
    for call in ast.walk(converters):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "WeightConverter"):
            continue
        keywords = {k.arg: k.value for k in call.keywords}
        targets = _strings(keywords.get("target_patterns"))
        sources = [m.group(1) for s in _strings(keywords.get("source_patterns")) if (m := _PER_EXPERT.search(s))]
        if len(targets) == 1 and targets[0].endswith("experts.gate_up_proj") and len(sources) == 2:
            names["gate_up"] = sources
        elif len(targets) == 1 and targets[0].endswith("experts.down_proj") and len(sources) == 1:
            names["down"] = sources
    if "gate_up" not in names or "down" not in names:
        return None
    (gate, up), (down,) = names["gate_up"], names["down"]
    return ExpertConversion(entry=entry, gate=gate, up=up, down=down)


def transposes_fused_experts(model_type: str, *, root: Path | None = None) -> bool:
    """transformers transposes ``model_type``'s fused expert tensors on load (``Transpose`` on ``experts.*``).

    Qwen3-VL-MoE's hub stores ``gate_up_proj`` as ``[E, H, 2I]``: a scaffold's converter then reads that layout
    (``export_layout="transposed"``), and its tests load such a checkpoint as transformers does.
    """
    aliases, entries = _tables_of(root)
    entry = model_type if model_type in entries else aliases.get(model_type, model_type)
    for call in ast.walk(entries.get(entry) or ast.List(elts=[])):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "WeightConverter"):
            continue
        keywords = {k.arg: k.value for k in call.keywords}
        operations = keywords.get("operations")
        transposes = (
            any(
                isinstance(op, ast.Call) and isinstance(op.func, ast.Name) and op.func.id == "Transpose"
                for op in ast.walk(operations)
            )
            if operations is not None
            else False
        )
        if transposes and any(".experts." in s for s in _strings(keywords.get("target_patterns"))):
            return True
    return False
