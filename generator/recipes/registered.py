"""What this project's model packages register: their model types, their generated modules, the slots those consult.

The fits check that a sub-model a VLM builds with ``AutoModel.from_config`` has a generated class
(docs/scaffolding.md, "The composed-VLM contract" and "The Qwen-VL contract"): registered by this project's packages
or, where a scaffold is copied into a training repository, by that repository's own (``models_roots``: the folders
holding its model packages). Generation-time code imports
neither torch nor the model packages, so the ``register_model(...)`` calls of ``models/*/__init__.py`` and the
generated files they name are read here as source, with ``ast``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from modelgraft.generator.upstream.index import ModuleIndex, UpstreamSources
from modelgraft.generator.upstream.source import ModelSource, calls_in

__all__ = [
    "MODELS_ROOT",
    "registered_model_types",
    "registered_module_file",
    "registered_packages",
    "registered_types_in",
    "registering_packages",
    "sub_model_slots",
    "sub_model_slots_in",
]

#: This project's model packages (the zoo and the library of vision encoders), beside the generator.
MODELS_ROOT = Path(__file__).resolve().parents[2] / "models"


def registered_packages(root: Path = MODELS_ROOT) -> dict[str, str]:
    """Each model type ``register_model("<type>", ...)`` calls register in ``root/*/__init__.py``, with the folder
    name of the package registering it (the first, in name order, where two do).

    Read with ``ast``: a call whose first argument is a string constant, or a loop over a tuple of them
    (qwen3_omni_moe registers two types in one loop). This project's packages are read once per process; a
    training repository's are read on every call, since a copy there adds one.
    """
    return dict(_own_packages()) if root == MODELS_ROOT else _read_packages(root)


@cache
def _own_packages() -> tuple[tuple[str, str], ...]:
    return tuple(_read_packages(MODELS_ROOT).items())


def _read_packages(root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
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
                types = {first.value}
            elif isinstance(first, ast.Name):  # a loop variable: every string of the loops over constants
                types = _loop_constants(tree, first.id) & constants
            else:
                continue
            for model_type in sorted(types):
                found.setdefault(model_type, init.parent.name)
    return found


def registered_model_types(root: Path = MODELS_ROOT) -> frozenset[str]:
    """The model types the packages in ``root`` register (:func:`registered_packages`)."""
    return frozenset(registered_packages(root))


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


def registered_types_in(models_roots: tuple[Path, ...] = ()) -> frozenset[str]:
    """The model types this project's packages register, and those of the packages under ``models_roots``."""
    found = registered_model_types()
    for root in models_roots:
        found |= registered_model_types(root)
    return found


def registering_packages(model_types: Iterable[str], models_roots: tuple[Path, ...] = ()) -> tuple[str, ...]:
    """The packages under ``models_roots`` (folder names, sorted) that register those of ``model_types`` this
    project's own packages do not.

    modelgraft imports each of its own model packages when ``modelgraft.models`` is imported; a training
    repository's are imported by name, so a package building a sub-model of such a type imports these first.
    """
    own = registered_model_types()
    found: set[str] = set()
    for model_type in model_types:
        if model_type in own:
            continue
        for root in models_roots:
            package = registered_packages(root).get(model_type)
            if package is not None:
                found.add(package)
                break
    return tuple(sorted(found))


def sub_model_slots_in(model_type: str, cls: str, models_roots: tuple[Path, ...] = ()) -> tuple[str, ...] | None:
    """:func:`sub_model_slots` of the first of this project's models and ``models_roots`` that registers a
    generated file for ``model_type`` defining ``cls``."""
    for root in (MODELS_ROOT, *models_roots):
        found = sub_model_slots(model_type, cls, root)
        if found is not None:
            return found
    return None
