"""Importing modelgraft changes no global state, and each generated file says everything it changes.

Specification (docs/design.md, "Importing changes nothing" and "What a generated class changes against
upstream"): ``import modelgraft.models`` puts no finder on ``sys.meta_path``; importing every generated
module patches no class of transformers or torch and registers nothing with transformers (checkpoint
conversions, attention and mask implementations); what a generated class does differently from upstream
(checkpoint conversions, strict loading, attention implementations on request) is a method written in
its ``<Prefix>PreTrainedModel``, in the file and in its ``.diff``. The import cases run in a fresh
interpreter, so this test process's own imports cannot hide a change.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from modelgraft import models
from modelgraft.models.registry import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY
from modelgraft.models.testing.preloaded_python import run_code

REPO_ROOT = Path(models.__file__).resolve().parent.parent

#: Every generated module, by dotted path.
GENERATED_MODULES = sorted(MODELING_REGISTRY.module_paths())

#: Methods every generated ``<Prefix>PreTrainedModel`` writes out, with what each changes against upstream.
DECLARED_METHODS = {
    "is_custom_code": "checkpoint conversions",
    "from_pretrained": "strict loading",
    "get_correct_attn_implementation": "attention implementations on request",
}


def _run(code: str) -> None:
    result = run_code(code, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr


def _upstream_modeling_modules() -> list[str]:
    """The upstream modeling module of each registered model type (configuration_<m> -> modeling_<m>)."""
    return sorted(
        {MODEL_CONFIG_REGISTRY[m].__module__.replace(".configuration_", ".modeling_") for m in MODELING_REGISTRY}
    )


def test_import_models_installs_no_import_finder() -> None:
    _run(
        "import sys\n"
        "before = list(sys.meta_path), list(sys.path_hooks)\n"
        "import modelgraft.models\n"
        "after = list(sys.meta_path), list(sys.path_hooks)\n"
        "assert all(len(a) == len(b) and all(x is y for x, y in zip(a, b)) for a, b in zip(before, after)), after\n"
    )


def test_importing_every_generated_module_patches_no_class_and_registers_nothing() -> None:
    """Snapshot every attribute of transformers' model classes and of its registries, import, compare by identity."""
    _run(
        f"""
import importlib, inspect, sys
import torch
import transformers
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.conversion_mapping import USER_REGISTERED_MAPPINGS
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

classes = [PreTrainedModel, PreTrainedConfig, GenerationMixin, torch.nn.Module]
for name in {_upstream_modeling_modules()!r}:
    module = importlib.import_module(name)
    classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == name]

def snapshot():
    return (
        {{c: dict(vars(c)) for c in classes}},
        dict(ALL_ATTENTION_FUNCTIONS._global_mapping),
        dict(ALL_MASK_ATTENTION_FUNCTIONS._global_mapping),
        dict(USER_REGISTERED_MAPPINGS),
        list(sys.meta_path),
    )

def changes(before, after):
    attributes = [
        f"{{c.__qualname__}}.{{k}}"
        for c, names in before[0].items()
        for k in names.keys() | after[0][c].keys()
        if names.get(k) is not after[0][c].get(k)
    ]
    registries = [
        what
        for what, old, new in zip(("attention", "masks", "conversions"), before[1:4], after[1:4])
        if old.keys() != new.keys() or any(old[k] is not new[k] for k in old)
    ]
    finders = [] if len(before[4]) == len(after[4]) and all(a is b for a, b in zip(before[4], after[4])) else after[4]
    return attributes, registries, finders

before = snapshot()
for path in {GENERATED_MODULES!r}:
    importlib.import_module(path)
assert changes(before, snapshot()) == ([], [], []), changes(before, snapshot())
"""
    )


def _generated_file(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    return Path(spec.origin)


def _pretrained_model_classes(tree: ast.Module) -> list[ast.ClassDef]:
    """The module's ``<Prefix>PreTrainedModel`` classes: those deriving from transformers' PreTrainedModel directly
    (one, or two where upstream gives a sub-model its own, Qwen3-Omni-MoE's thinker text model)."""
    found = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base) == "PreTrainedModel" for base in node.bases)
    ]
    assert found
    return found


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("module", GENERATED_MODULES)
def test_the_generated_pretrained_model_writes_out_every_method_that_differs_from_upstream(module: str) -> None:
    for cls in _pretrained_model_classes(ast.parse(_generated_file(module).read_text(encoding="utf-8"))):
        assert sorted(DECLARED_METHODS.keys() - _methods(cls).keys()) == [], cls.name


@pytest.mark.parametrize("module", GENERATED_MODULES)
def test_the_generated_diff_shows_every_method_that_differs_from_upstream(module: str) -> None:
    diff = _generated_file(module).with_suffix(".diff").read_text(encoding="utf-8")
    shown = {name for name in DECLARED_METHODS if f"\n+    def {name}(" in diff}
    assert sorted(DECLARED_METHODS.keys() - shown) == []


@pytest.mark.parametrize("module", GENERATED_MODULES)
def test_the_generated_from_pretrained_is_strict_by_default_in_its_signature(module: str) -> None:
    for cls in _pretrained_model_classes(ast.parse(_generated_file(module).read_text("utf-8"))):
        from_pretrained = _methods(cls)["from_pretrained"]
        defaults = dict(zip((a.arg for a in from_pretrained.args.kwonlyargs), from_pretrained.args.kw_defaults))
        assert ast.literal_eval(defaults["strict"]) is True, cls.name
