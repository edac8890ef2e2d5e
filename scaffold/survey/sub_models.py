"""The slots a composed copy reaches through its sub-models: the generated modules registered for their types.

A composed VLM's generated module builds its vision tower and language model with ``build_sub_model``, so their
guards live in the packages registered for the sub-configs' model types (the zoo's decoders, the library's vision
encoders), not in the copy's own module; so does a Qwen-VL copy built with ``compose=True`` (glm46v's towers are
glm4v's). The survey's count of what a copy guards (its "thin scaffold" note) reads those modules too.
Everything is read from files: the copy's answers (``recipe.composed.sub_models``, or ``recipe.sub_models``)
and each package's ``register_model("<type>", modeling={"gpu": "<module>"})`` call
(``modelgraft.generator.recipes.registered``); nothing is imported.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from modelgraft.generator.recipes.registered import registered_module_file

__all__ = ["sub_model_modules"]


def sub_model_modules(copy: Path, models: Path) -> tuple[Path, ...]:
    """The generated modules of a composed copy's sub-models (empty for any other copy), as its answers name
    their types and the packages under ``models`` register them."""
    answers = copy / ".copier-answers.yml"
    if not answers.is_file():
        return ()
    recipe = (yaml.safe_load(answers.read_text(encoding="utf-8")) or {}).get("recipe") or {}
    if not isinstance(recipe, dict):
        return ()
    # A composed VLM's answers hold them under recipe.composed; a Qwen-VL one built with compose=True
    # (glm46v's towers are glm4v's) at the recipe's top level.
    holder = recipe.get("composed") if isinstance(recipe.get("composed"), dict) else recipe
    sub_models = holder.get("sub_models")
    if not isinstance(sub_models, dict):
        return ()
    found = (registered_module_file(model_type, models) for model_type in sub_models.values())
    return tuple(path for path in found if path is not None)
