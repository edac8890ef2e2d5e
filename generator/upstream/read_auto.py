"""What transformers' ``AutoModel`` builds for a model_type, and in which package: read from the Auto tables.

A composite model builds a sub-model with ``AutoModel.from_config(config.<sub>)``; the class that call builds is
``MODEL_MAPPING_NAMES[<model_type>]`` (``transformers.models.auto.modeling_auto``), defined in the package that
``SPECIAL_MODEL_TYPE_TO_MODULE_NAME`` names for the type (``auto_mappings``: ``qwen3_vl_vision`` lives in
``qwen3_vl``), or in the package named as the type itself. The generator reads both tables by path, with ``ast``,
as the processor reader reads its Auto tables: nothing is imported.
"""

from __future__ import annotations

import ast
import weakref

from modelgraft.generator.errors import UpstreamError
from modelgraft.generator.upstream.index import UpstreamSources

__all__ = ["CAUSAL_LM_TABLE", "auto_causal_lm_classes", "auto_model_class", "model_type_package", "table_in"]

_MODEL_TABLE = ("transformers.models.auto.modeling_auto", "MODEL_MAPPING_NAMES")
#: What ``AutoModelForCausalLM`` builds for each model_type: most heads are ``*ForCausalLM``, but the oldest
#: decoders name theirs otherwise (``GPT2LMHeadModel``, ``CTRLLMHeadModel``, ``OpenAIGPTLMHeadModel``).
CAUSAL_LM_TABLE = ("transformers.models.auto.modeling_auto", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES")
_PACKAGE_TABLE = ("transformers.models.auto.auto_mappings", "SPECIAL_MODEL_TYPE_TO_MODULE_NAME")


def auto_model_class(sources: UpstreamSources, model_type: str) -> str | None:
    """The class ``AutoModel.from_config`` builds for ``model_type`` (``Qwen3VLVisionModel``); None when it has none."""
    return _table(sources, *_MODEL_TABLE).get(model_type)


def model_type_package(sources: UpstreamSources, model_type: str) -> str:
    """The model package (``transformers.models.<package>``) that defines ``model_type``'s classes."""
    return _table(sources, *_PACKAGE_TABLE).get(model_type, model_type.replace("-", "_"))


def auto_causal_lm_classes(sources: UpstreamSources) -> frozenset[str]:
    """Every class name ``AutoModelForCausalLM`` builds, for any model_type (empty where the table is missing)."""
    return frozenset(_table(sources, *CAUSAL_LM_TABLE).values())


#: Tables read from each parsed module, kept while its tree lives: the reader asks for one per model it reads.
_TABLES: weakref.WeakKeyDictionary[ast.Module, dict[str, dict[str, str]]] = weakref.WeakKeyDictionary()


def _table(sources: UpstreamSources, module: str, name: str) -> dict[str, str]:
    """``NAME = OrderedDict([("model_type", "value"), ...])`` of ``module``, with string values only."""
    try:
        tree = sources.get(module).tree  # asked each time: the sources record the file as an input of the caller
    except UpstreamError:
        return {}
    tables = _TABLES.setdefault(tree, {})
    if name not in tables:
        tables[name] = table_in(tree, name)
    return tables[name]


def table_in(tree: ast.Module, name: str) -> dict[str, str]:
    """The table ``name`` of a parsed Auto module: model_type -> value, string entries only; {} where absent."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
            and isinstance(node.value, ast.Call)
            and node.value.args
            and isinstance(node.value.args[0], ast.List)
        ):
            return {
                key.value: value.value
                for entry in node.value.args[0].elts
                if isinstance(entry, ast.Tuple) and len(entry.elts) == 2
                for key, value in [entry.elts]
                if isinstance(key, ast.Constant)
                and isinstance(key.value, str)
                and isinstance(value, ast.Constant)
                and isinstance(value.value, str)
            }
    return {}
