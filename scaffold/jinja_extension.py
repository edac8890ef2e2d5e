"""The Jinja extension ``copier.yml`` loads: what the scaffold's questions and templates read from upstream.

Copier renders defaults and files with Jinja; this extension gives them the upstream reader and the fit
(``modelgraft.generator.upstream.reader``, ``modelgraft.generator.recipes.fit``) as globals and filters, so a copy asks only
what upstream cannot say and every other answer defaults to what the reader found:

- ``upstream(model)``: the structure report as a dict (``ModelStructure.to_dict()``);
- ``scaffold_fit(model, category)``: the fit as a dict (arguments, guarded slots, skipped, refusal); this and
  the next two read the copy's destination from Copier's context, so the model packages of a training repository
  the copy goes into count for a VLM's sub-models (:func:`destination_models`);
- ``scaffold_refusal(model, category)``: "" when a scaffold fits, else the message listing each
  unsupported structure, where it is upstream and the patch that would cover it;
- ``scaffold_arguments(model, category)``: the recipe arguments, raising the refusal instead;
- ``recipe_import(...)`` / ``recipe_call(...)``: the config's import line and recipe call, formatted;
- ``recipe_guards(recipe)``: the slots a recorded recipe guards (the parity suite's ``guarded``);
- ``omni_init_weights(model, init)``: an Omni scaffold's ``_init_weights`` override and its imports;
- ``scaffold_destination(dst, model)``: where the copy goes (``modelgraft.scaffold.destination``) as a dict:
  ``folder`` (its absolute path), ``package`` (its import name), ``relative`` (``models/<m>`` from the repository root) and ``root``
  (the root from the destination, where the tasks run);
- the category table (``modelgraft.generator.categories``), so that no condition of ``copier.yml`` or
  ``template/`` lists category names: ``category | has_experts`` (it routes to experts), ``category |
  has_towers`` (a vision or audio tower), ``category | is_vlm`` (a vision tower alone), ``category | is_omni``
  (an audio tower: a thinker), ``category | category_kind`` (its name in a config's docstring) and ``category |
  parity_suite`` (the parity suite its tests run: ``module``, ``model``, ``suite``, ``title``). Each is a global
  too, for the template's file names, where a ``|`` would not be a portable character:
  ``{% if has_experts(category) and recipe.experts %}checkpoint.py{% endif %}.jinja``.

Reading a model takes milliseconds and is cached per process, so Copier may ask for it per question.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from copier.errors import UserMessageError
from jinja2 import Environment, pass_context
from jinja2.ext import Extension
from jinja2.runtime import Context

from modelgraft.generator import categories
from modelgraft.generator.discovery import find_settings
from modelgraft.generator.errors import DiscoveryError, PatchgenError
from modelgraft.generator.recipes.fit import Fit, fit_model, guarded_slots
from modelgraft.generator.recipes.registered import MODELS_ROOT, registered_types_in, registering_packages
from modelgraft.generator.recipes.render import init_weights_override, recipe_call
from modelgraft.generator.upstream.reader import read_model
from modelgraft.generator.upstream.structure import ModelStructure
from modelgraft.scaffold.destination import DestinationError, destination
from modelgraft.scaffold.jinja_compile_cache import share_compiled_code


@lru_cache(maxsize=64)
def _structure(model: str) -> ModelStructure | None:
    try:
        return read_model(model)
    except PatchgenError:
        return None


def _fit(model: str, category: str, models_roots: tuple[Path, ...] = ()) -> Fit | None:
    """The fit, cached per process and per set of types the destination's packages register: one process may
    copy a text model into a training repository, then a VLM over it (Copier's API, the tests)."""
    registered = registered_types_in(models_roots) if models_roots else frozenset()
    return _cached_fit(model, category, models_roots, registered)


@lru_cache(maxsize=64)
def _cached_fit(model: str, category: str, models_roots: tuple[Path, ...], registered: frozenset[str]) -> Fit | None:
    del registered  # a part of the cache key only
    structure = _structure(model)
    return None if structure is None else fit_model(structure, category or None, models_roots=models_roots)


def upstream(model: str, category: str = "") -> dict[str, Any]:
    """The reader's report of ``model`` as a dict ({} for a package transformers lacks: the question says so).

    For a VLM answer (``category``, or the detected category when empty), the VLM's own head and config where the
    package also defines a text-only causal LM (cohere_compass); a text answer keeps the text head's (gemma3)."""
    structure = _structure(model)
    if structure is None:
        return {}
    row = categories.lookup(category or structure.category)
    return (structure.for_vlm() if row is not None and row.vlm else structure).to_dict()


def scaffold_fit(model: str, category: str = "", models_roots: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The fit as plain data for the questionnaire's defaults (category, arguments, guarded, skipped, refused
    and, for a VLM, the processor classes its tests build). ``models_roots``: see :func:`destination_models`."""
    fit = _fit(model, category, models_roots)
    if fit is None:
        return {}
    return {
        "category": fit.category,
        "arguments": fit.arguments,
        "guarded": list(fit.guarded),
        "skipped": [finding.describe() for finding in fit.skipped],
        "refused": fit.refused,
        "processors": fit.processors,
        "sub_model_packages": list(registering_packages(_sub_model_types(fit.arguments), models_roots)),
    }


def _sub_model_types(arguments: dict[str, Any]) -> list[str]:
    """The model types a VLM or an audio language model builds sub-models of by name: a composed VLM's, a Qwen-VL
    tower of another package, an audio language model's towers."""
    composed = arguments.get("composed") or {}
    audio = arguments.get("audio_lm") or {}
    return [
        *(composed.get("sub_models") or {}).values(),
        *(arguments.get("sub_models") or {}).values(),
        *(audio.get("sub_models") or {}).values(),
    ]


class ScaffoldRefused(UserMessageError):
    """The model has structures no snippet handles: the copy stops before anything is written."""


def scaffold_arguments(model: str, category: str = "", models_roots: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The fit's recipe arguments, or a refusal (raised while Copier asks, so before it writes any file).

    Copier runs no validator on a default it takes under ``--defaults``; this default cannot be taken for
    a model that does not fit, so the refusal holds in every mode.
    """
    refusal = scaffold_refusal(model, category, models_roots)
    if refusal:
        raise ScaffoldRefused(refusal)
    return scaffold_fit(model, category, models_roots)["arguments"]


def scaffold_refusal(model: str, category: str = "", models_roots: tuple[Path, ...] = ()) -> str:
    """The category validator's message: "" when a scaffold fits ``category``, else why not and the way on."""
    if _structure(model) is None:
        return f"transformers has no model package {model!r} (transformers/models/{model}/modeling_{model}.py)"
    fit = _fit(model, category, models_roots)
    return fit.refusal_message() if fit is not None and fit.refused else ""


def _recipe(category: str, prefix: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """The import line and the call; rendered once per answer set (the template asks for each separately)."""
    return _rendered(category, prefix, json.dumps(arguments, sort_keys=True))


@lru_cache(maxsize=64)
def _rendered(category: str, prefix: str, arguments: str) -> tuple[str, str]:
    return recipe_call(category, prefix, json.loads(arguments))


def recipe_import(category: str, prefix: str, arguments: dict[str, Any]) -> str:
    """The config's import line of the recipe parts ``arguments`` use."""
    return _recipe(category, prefix, arguments)[0]


def recipe_call_source(category: str, prefix: str, arguments: dict[str, Any]) -> str:
    """The config's recipe call for ``arguments``, formatted as ruff formats it."""
    return _recipe(category, prefix, arguments)[1]


def omni_init_weights(model: str, init: dict[str, Any]) -> dict[str, str]:
    """An Omni scaffold's ``_init_weights`` override (``override``) and its ``TYPE_CHECKING`` imports (``imports``),
    from the recorded ``init_weights`` answer (:func:`modelgraft.generator.recipes.render.init_weights_override`)."""
    imports, override = init_weights_override(model, init)
    return {"imports": imports, "override": override}


def recipe_guards(arguments: dict[str, Any]) -> list[str]:
    """The slots a recorded recipe guards: the parity suite's ``guarded`` tuple, from the answers, not a new fit."""
    return list(guarded_slots(arguments))


def has_experts(category: str) -> bool:
    """The category routes to experts: the MoE answers, and ``checkpoint.py`` where the experts are guarded."""
    return categories.category(category).experts


def has_towers(category: str) -> bool:
    """The category has a vision or audio tower: the processor answers, which the registry and the tests need."""
    return bool(categories.category(category).towers)


def is_vlm(category: str) -> bool:
    """A vision tower alone: the VLM recipes, the reader's VLM report and the VLM suites."""
    return categories.category(category).vlm


def is_omni(category: str) -> bool:
    """An audio tower: an Omni thinker, its speech side left out, and the Omni suites."""
    return categories.category(category).omni


def category_kind(category: str) -> str:
    """How a scaffold's config docstring names the category ("MoE text", "VLM + MoE", "Omni, thinker only")."""
    return categories.category(category).kind


def parity_suite(category: str) -> dict[str, str]:
    """The parity suite of ``modelgraft.models.testing`` the category's scaffold tests run: ``module``, the
    declaration class ``model``, the ``suite`` class and its ``title`` in the test module's docstring."""
    suite = categories.category(category).suite
    if suite is None:
        raise ScaffoldRefused(f"no scaffold, and so no test suite, for the category {category}")
    return {"module": suite.module, "model": suite.model, "suite": suite.suite, "title": suite.title}


#: The category table's helpers, each registered as a filter and as a global.
CATEGORY_HELPERS = {
    helper.__name__: helper for helper in (has_experts, has_towers, is_vlm, is_omni, category_kind, parity_suite)
}


def scaffold_destination(dst: Path | str, model: str) -> dict[str, str]:
    """The destination as a dict: ``folder`` (absolute), ``package``, ``relative`` and ``root``; the last three
    are empty where no package can be made there (the copy's first task says why)."""
    folder = str(Path(dst).resolve())
    try:
        found = destination(dst, model)
    except DestinationError:
        return {"folder": folder, "package": "", "relative": "", "root": "."}
    return {"folder": folder, "package": found.package, "relative": found.relative, "root": found.root_from_folder}


def destination_models(dst: Path | str, model: str, recorded_package: object = None) -> tuple[Path, ...]:
    """The folder of model packages a copy goes into (``models`` of ``models/<m>``), where it is not this
    project's own: a training repository's packages register sub-model types a VLM's fit may need (a composed VLM
    over a text model scaffolded there first). Empty where no package can be made there.

    Copier's update renders the recorded and the new template version into temporary folders, where no
    repository holds ``dst``: there the folder is the one of the scaffold's ``recorded_package`` answer
    (``models`` of ``models.lfm3_vl``) in the repository the command runs in (``scaffold-update`` runs Copier
    at the repository root, ``copier update`` runs inside it)."""
    try:
        folder = destination(dst, model).folder.parent
    except DestinationError:
        if not isinstance(recorded_package, str) or "." not in recorded_package:
            return ()
        try:
            root = find_settings(Path.cwd()).root
        except DiscoveryError:
            return ()
        folder = root.joinpath(*recorded_package.split(".")[:-1])
        if not folder.is_dir():
            return ()
    folder = folder.resolve()
    return () if folder == MODELS_ROOT.resolve() else (folder,)


def _at_destination(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function(model, category)`` as the questionnaire and the templates call it, with the copy's destination
    read from Copier's context (``_copier_conf.dst_path``, and the recorded ``package`` answer) and handed on as
    ``models_roots`` (:func:`destination_models`)."""

    @pass_context
    def called(context: Context, model: str, category: str = "") -> Any:
        conf = context.get("_copier_conf")  # a mapping (Copier's LazyDict)
        dst = conf.get("dst_path") if isinstance(conf, Mapping) else None
        roots = destination_models(dst, model, context.get("package")) if dst else ()
        return function(model, category, roots)

    return called


class ScaffoldExtension(Extension):
    """Registers the reader, the fit and the category table with Copier's Jinja environment, which compiles each
    source once per process (``modelgraft.scaffold.jinja_compile_cache``)."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        share_compiled_code(environment)
        environment.globals["upstream"] = upstream
        environment.globals["scaffold_fit"] = _at_destination(scaffold_fit)
        environment.globals["scaffold_refusal"] = _at_destination(scaffold_refusal)
        environment.globals["scaffold_arguments"] = _at_destination(scaffold_arguments)
        environment.globals["recipe_guards"] = recipe_guards
        environment.globals["omni_init_weights"] = omni_init_weights
        environment.globals["recipe_import"] = recipe_import
        environment.globals["recipe_call"] = recipe_call_source
        environment.globals["scaffold_destination"] = scaffold_destination
        environment.globals.update(CATEGORY_HELPERS)
        environment.filters.update(CATEGORY_HELPERS)
