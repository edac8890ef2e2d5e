"""What this project's model packages register: their model types, their generated modules, the slots those consult.

The fits check that a sub-model a VLM builds with ``AutoModel.from_config`` has a generated class
(docs/scaffolding.md, "The composed-VLM contract" and "The Qwen-VL contract"). Generation-time code imports
neither torch nor the model packages, so the ``register_model(...)`` calls of ``models/*/__init__.py`` and the
generated files they name are read here as source, with ``ast``.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.source import ModelSource, calls_in

__all__ = [
    "MODELS_ROOT",
    "registered_model_types",
    "registered_module_file",
    "sub_model_slots",
]

#: This project's model packages (the zoo and the library of vision encoders), beside the generator.
MODELS_ROOT = Path(__file__).resolve().parents[2] / "models"


@cache
def registered_model_types(root: Path = MODELS_ROOT) -> frozenset[str]:
    """The model types ``register_model("<type>", ...)`` calls register in ``root/*/__init__.py``.

    Read with ``ast``: a call whose first argument is a string constant, or a loop over a tuple of them
    (qwen3_omni_moe registers two types in one loop).
    """
    found: set[str] = set()
    for init in sorted(root.glob("*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        constants = {
            node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_model" and node.args):
                continue
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
            elif isinstance(first, ast.Name):  # a loop variable: every string of the loops over constants
                found.update(_loop_constants(tree, first.id) & constants)
    return frozenset(found)


def registered_module_file(model_type: str, root: Path = MODELS_ROOT) -> Path | None:
    """The generated GPU modeling file ``register_model("<type>", modeling={"gpu": "<path>"})`` names in
    ``root/*/__init__.py``, as a file of this project (read with ``ast``); None where no such call names one."""
    for init in sorted(root.glob("*/__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_model" and node.args):
                continue
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and first.value == model_type):
                continue
            modeling = next((k.value for k in node.keywords if k.arg == "modeling"), None)
            if not isinstance(modeling, ast.Dict):
                continue
            for key, value in zip(modeling.keys, modeling.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "gpu" and isinstance(value, ast.Constant):
                    # modelgraft.models.<package>.generated.<module> -> root/<package>/generated/<module>.py
                    parts = str(value.value).split(".")
                    if "models" in parts:
                        path = root.joinpath(*parts[parts.index("models") + 1 :]).with_suffix(".py")
                        return path if path.is_file() else None
    return None


def sub_model_slots(model_type: str, cls: str, root: Path = MODELS_ROOT) -> tuple[str, ...] | None:
    """The slots ``cls`` of the generated module registered for ``model_type`` consults, in source order: the
    ``<name>_slot.use_non_eager_impl`` tests of the classes it builds (``self.x = Cls(...)`` in ``__init__``, at
    any depth), of their bases in the module, and of the module's functions those call (the vision RoPE), so a
    sub-model is credited with its own guards only, not with its module's heads or its other sub-models'.

    None where no generated file of this project is registered for ``model_type``, or it defines no ``cls``.
    """
    path = registered_module_file(model_type, root)
    if path is None:
        return None
    source = ModelSource(model=model_type, index=ModuleIndex.parse(path.stem, path), sources=UpstreamSources())
    if cls not in source.classes:
        return None
    nodes: list[ast.AST] = []
    classes = [cls]
    for name in classes:  # grows while it is walked: breadth first over what each class builds or derives from
        nodes.append(source.classes[name])
        built = [c for attr in source.init_assigns(name) for c in source.instantiated_classes(name, attr)]
        bases = [b for b in source.base_names(name) if b in source.classes]
        classes += [c for c in (*built, *bases) if c not in classes]
    functions: list[str] = []
    for node in nodes:  # grows too: a function calls others (eager attention, rotate_half)
        for call in calls_in(node):
            name = call.func.id if isinstance(call.func, ast.Name) else None
            if name in source.functions and name not in functions:
                functions.append(name)
                nodes.append(source.functions[name])
    found = [
        attribute.value.id.removesuffix("_slot")
        for node in sorted(nodes, key=lambda n: getattr(n, "lineno", 0))
        for attribute in ast.walk(node)
        if isinstance(attribute, ast.Attribute)
        and attribute.attr == "use_non_eager_impl"
        and isinstance(attribute.value, ast.Name)
        and attribute.value.id.endswith("_slot")
    ]
    return tuple(dict.fromkeys(found))


def _loop_constants(tree: ast.Module, name: str) -> set[str]:
    values: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and isinstance(node.iter, (ast.Tuple, ast.List)):
            targets = [node.target] if isinstance(node.target, ast.Name) else list(getattr(node.target, "elts", []))
            for index, target in enumerate(targets):
                if not (isinstance(target, ast.Name) and target.id == name):
                    continue
                for element in node.iter.elts:
                    item = element.elts[index] if isinstance(element, ast.Tuple) and len(targets) > 1 else element
                    if isinstance(item, ast.Constant) and isinstance(item.value, str):
                        values.add(item.value)
    return values
