"""What this project's model packages register: their model types, their generated modules, the slots those consult.

The fits check that a sub-model a VLM builds with ``AutoModel.from_config`` has a generated class
(docs/scaffolding.md, "The composed-VLM contract" and "The Qwen-VL contract"). Generation-time code imports
neither torch nor the model packages, so the ``register_model(...)`` calls of ``models/*/__init__.py`` and the
generated files they name are read here as source, with ``ast`` and a regular expression.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

__all__ = [
    "MODELS_ROOT",
    "NOT_SUB_MODEL_SLOTS",
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


#: The slots a generated module consults (``<name>_slot.use_non_eager_impl``), as the survey counts them.
_CONSULTED_SLOT = re.compile(r"\b(\w+)_slot\.use_non_eager_impl\b")
#: Slots of a generated module that are not its sub-models' to consult: its heads' losses, and the placeholder
#: scatter of its own ``Model.forward`` (a model that builds the sub-models has a forward of its own).
NOT_SUB_MODEL_SLOTS = frozenset({"causal_lm_loss", "sequence_classification_loss", "placeholder_features"})


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


def sub_model_slots(model_type: str, root: Path = MODELS_ROOT) -> tuple[str, ...] | None:
    """The slots the generated module registered for ``model_type`` consults, less :data:`NOT_SUB_MODEL_SLOTS`,
    in the order they first appear; None where no generated file of this project is registered for it."""
    path = registered_module_file(model_type, root)
    if path is None:
        return None
    found = _CONSULTED_SLOT.findall(path.read_text(encoding="utf-8"))
    return tuple(slot for slot in dict.fromkeys(found) if slot not in NOT_SUB_MODEL_SLOTS)


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
