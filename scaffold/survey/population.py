"""Which models the survey covers: every decoder-only model of the installed transformers outside the zoo.

The population is found by path (a ``*ForCausalLM`` class in ``transformers/models/<m>/modeling_<m>.py``, or the
class transformers' Auto causal-LM table names there under another name, as ``GPT2LMHeadModel``, or a
``*ForConditionalGeneration`` the reader puts in a multimodal category: VLMs and Omni models), never by importing
transformers, so the survey process stays light.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path

from modelgraft.scaffold.survey.errors import SurveyError

#: Packages of transformers/models/ that are not models.
NOT_MODELS = frozenset({"auto", "deprecated"})

_CAUSAL_LM = re.compile(r"^class\s+(\w+ForCausalLM)\s*[(:]", re.MULTILINE)
_CONDITIONAL_GENERATION = re.compile(r"^class\s+(\w+ForConditionalGeneration)\s*[(:]", re.MULTILINE)
_CLASS = re.compile(r"^class\s+(\w+)\s*[(:]", re.MULTILINE)
#: What ``AutoModelForCausalLM`` builds per model_type (transformers/models/auto/modeling_auto.py); the survey reads
#: it without the generator (the clone's reader decides each model's category, in the clone's processes).
_AUTO_CAUSAL_LM_TABLE = "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"


def transformers_models_dir() -> Path:
    """``transformers/models`` of the installed transformers, found without importing it."""
    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        raise SurveyError("transformers is not installed in this environment")
    path = Path(next(iter(spec.submodule_search_locations))) / "models"
    if not path.is_dir():
        raise SurveyError(f"{path} does not exist")
    return path


def transformers_version() -> str:
    """The installed transformers' version, read from its metadata (not imported)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def causal_lm_models(models_dir: Path) -> dict[str, str]:
    """Every package of ``models_dir`` whose ``modeling_<m>.py`` defines a causal LM: name -> class.

    The causal LM is the first ``*ForCausalLM``, else the shortest-named class the Auto causal-LM table names
    (:func:`auto_causal_lm_names`) that the module defines.
    """
    named = auto_causal_lm_names(models_dir)
    found = {}
    for package in sorted(models_dir.iterdir()):
        modeling = package / f"modeling_{package.name}.py"
        if package.name in NOT_MODELS or not modeling.is_file():
            continue
        source = modeling.read_text(encoding="utf-8", errors="replace")
        match = _CAUSAL_LM.search(source)
        if match:
            found[package.name] = match.group(1)
        elif defined := [cls for cls in _CLASS.findall(source) if cls in named]:
            found[package.name] = min(defined, key=len)
    return found


def auto_causal_lm_names(models_dir: Path) -> frozenset[str]:
    """The classes ``AutoModelForCausalLM`` builds that are neither ``*ForCausalLM`` nor multimodal heads
    (``*ForConditionalGeneration``, found as such): ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` of
    ``models_dir/auto/modeling_auto.py``, read by path (empty where that file or table is missing or unreadable)."""
    path = models_dir / "auto" / "modeling_auto.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError):
        return frozenset()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [ast.unparse(target) for target in node.targets] == [_AUTO_CAUSAL_LM_TABLE]
            and isinstance(node.value, ast.Call)
            and node.value.args
        ):
            try:
                entries = ast.literal_eval(node.value.args[0])
            except ValueError:
                return frozenset()
            return frozenset(
                cls for _, cls in entries if not cls.endswith(("ForCausalLM", "ForConditionalGeneration"))
            )
    return frozenset()


def conditional_generation_models(models_dir: Path) -> dict[str, str]:
    """Packages whose ``modeling_<m>.py`` defines a ``*ForConditionalGeneration`` and no causal LM (``causal_lm_models``).

    These are the multimodal models (glm4v, llava) and the encoder-decoders (t5, whisper); the survey keeps
    those the reader puts in a multimodal category (:func:`~modelgraft.scaffold.survey.categories.multimodal_categories`),
    so encoder-decoders stay out.
    """
    named = auto_causal_lm_names(models_dir)
    found = {}
    for package in sorted(models_dir.iterdir()):
        modeling = package / f"modeling_{package.name}.py"
        if package.name in NOT_MODELS or not modeling.is_file():
            continue
        source = modeling.read_text(encoding="utf-8", errors="replace")
        match = _CONDITIONAL_GENERATION.search(source)
        if match and not _CAUSAL_LM.search(source) and not set(_CLASS.findall(source)) & named:
            found[package.name] = match.group(1)
    return found


def zoo_models(repo: Path) -> set[str]:
    """The zoo: every ``models/<m>/`` holding a patch config."""
    return {path.parent.name for path in repo.glob("models/*/*_patch_gen_config.py")}


def select(upstream: dict[str, str], zoo: set[str], requested: Sequence[str]) -> list[str]:
    """The models to survey: the requested ones (checked), else every upstream causal LM not in the zoo."""
    if not requested:
        return [name for name in sorted(upstream) if name not in zoo]
    problems = []
    for name in requested:
        if name in zoo:
            problems.append(f"{name} is in the zoo already (models/{name}/)")
        elif name not in upstream:
            problems.append(
                f"{name}: transformers/models/{name}/modeling_{name}.py defines no causal LM (*ForCausalLM or"
                " the class AutoModelForCausalLM builds) nor *ForConditionalGeneration"
            )
    if problems:
        raise SurveyError("; ".join(problems))
    return list(dict.fromkeys(requested))
