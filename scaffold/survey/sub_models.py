"""The slots a composed copy reaches through its sub-models: the generated modules registered for their types.

A composed VLM's generated module builds its vision tower and language model with ``build_sub_model``, so their
guards live in the packages registered for the sub-configs' model types (the zoo's decoders, the library's vision
encoders), not in the copy's own module; so does a Qwen-VL copy built with ``compose=True`` (glm46v's towers are
glm4v's), nor an audio language model's language model. The survey's count of what a copy guards (its "thin
scaffold" note) reads those modules too. Everything is read from files: the copy's answers
(``recipe.composed.sub_models``, ``recipe.audio_lm.sub_models``, or ``recipe.sub_models``)
and each package's ``register_model("<type>", modeling={"gpu": "<module>"})`` call, with ``ast``; nothing is
imported. The generator reads those calls too (``generator/recipes/registered.py``), but the survey imports no
generator code (tests/scaffold_survey/test_survey.py), so it keeps this reader of its own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

__all__ = ["registered_modules", "sub_model_modules"]

#: The import name of the models folder: ``modelgraft.models.<package>...`` lives under ``models/<package>/``.
MODELS_PACKAGE = "modelgraft.models."


def registered_modules(models: Path) -> dict[str, Path]:
    """Model type -> the file of its generated gpu module, for every ``register_model`` call with constant
    arguments in ``models/*/__init__.py`` whose module lies under ``models``."""
    found: dict[str, Path] = {}
    for init in sorted(models.glob("*/__init__.py")):
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register_model" and node.args):
                continue
            first = node.args[0]
            modeling = next((k.value for k in node.keywords if k.arg == "modeling"), None)
            if not (
                isinstance(first, ast.Constant) and isinstance(first.value, str) and isinstance(modeling, ast.Dict)
            ):
                continue
            for key, value in zip(modeling.keys, modeling.values, strict=True):
                if not (isinstance(key, ast.Constant) and key.value == "gpu" and isinstance(value, ast.Constant)):
                    continue
                module = str(value.value)
                if module.startswith("."):  # relative to the package: models/<package>/<...>
                    path = init.parent.joinpath(*module.lstrip(".").split("."))
                elif module.startswith(MODELS_PACKAGE):
                    path = models.joinpath(*module[len(MODELS_PACKAGE) :].split("."))
                else:
                    continue
                found[first.value] = path.with_suffix(".py")
    return found


def sub_model_modules(copy: Path, models: Path) -> tuple[Path, ...]:
    """The generated modules of a composed copy's sub-models (a composed VLM's, an audio language model's; empty for
    any other copy), as its answers name their types and the packages under ``models`` register them."""
    answers = copy / ".copier-answers.yml"
    if not answers.is_file():
        return ()
    recipe = (yaml.safe_load(answers.read_text(encoding="utf-8")) or {}).get("recipe") or {}
    if not isinstance(recipe, dict):
        return ()
    # A composed VLM's answers hold them under recipe.composed, an audio language model's under recipe.audio_lm;
    # a Qwen-VL one built with compose=True (glm46v's towers are glm4v's) at the recipe's top level.
    holder = next((recipe[key] for key in ("composed", "audio_lm") if isinstance(recipe.get(key), dict)), recipe)
    sub_models = holder.get("sub_models")
    if not isinstance(sub_models, dict):
        return ()
    registered = registered_modules(models)
    types = sub_models.values()
    return tuple(registered[t] for t in types if t in registered and registered[t].is_file())
